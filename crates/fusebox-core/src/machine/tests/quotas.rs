//! A report the cluster has no room for is refused, never dropped in
//! silence (issue 13, item 8: junk namespaces made a real tenant's reports
//! vanish).

use crate::error::CoreError;
use crate::limits::NAMESPACES_MAX;
use crate::machine::*;
use crate::name::{Namespace, ReplicaId, ToolName};
use crate::outcome::OutcomeClass;
use crate::time::Timestamp;

fn report(ns: &str, seq: u64) -> Command {
    super::one_outcome(ns, seq, "search", "lookup", OutcomeClass::ServerError)
}

#[test]
fn a_report_to_a_namespace_past_the_cluster_bound_is_refused_and_counts_later() {
    let mut sm = StateMachine::new();
    let t = Timestamp::from_millis(1_000);
    for i in 0..NAMESPACES_MAX {
        let answer = sm.apply(&report(&format!("junk-{i}"), 1), t).answer;
        assert!(matches!(answer, Answer::Reported(_)), "{answer:?}");
    }
    let refused = sm.apply(&report("tenant", 1), t).answer;
    assert_eq!(
        refused,
        Answer::Rejected(CoreError::limit("namespaces", NAMESPACES_MAX))
    );
    // An existing namespace still reports.
    let answer = sm.apply(&report("junk-0", 2), t).answer;
    assert!(
        matches!(answer, Answer::Reported(s) if s.counted == 2),
        "{answer:?}"
    );
    // The refused batch left no mark, so once room exists its resend counts.
    let tenant = Namespace::new("tenant").unwrap();
    let replica = ReplicaId::new("r1").unwrap();
    assert!(!sm.fleet.report_marks.is_repeat(&tenant, &replica, 1));
    assert!(sm
        .fleet
        .report_marks
        .is_repeat(&Namespace::new("junk-0").unwrap(), &replica, 2));
}

fn delete(ns: &str) -> Command {
    Command::DeleteNamespace {
        namespace: Namespace::new(ns).unwrap(),
        actor: "ops".into(),
        reason: "junk".into(),
    }
}

fn ok_report(ns: &str, seq: u64) -> Command {
    let mut command = report(ns, seq);
    if let Command::ReportOutcomes { outcomes, .. } = &mut command {
        outcomes[0].class = OutcomeClass::Success;
    }
    command
}

#[test]
fn deleting_a_junk_namespace_frees_its_place_for_a_real_tenant() {
    let mut sm = StateMachine::new();
    let t = Timestamp::from_millis(1_000);
    for i in 0..NAMESPACES_MAX {
        sm.apply(&ok_report(&format!("junk-{i}"), 1), t);
    }
    assert!(matches!(
        sm.apply(&report("tenant", 1), t).answer,
        Answer::Rejected(CoreError::LimitReached { .. })
    ));
    let answer = sm.apply(&delete("junk-7"), t).answer;
    assert_eq!(
        answer,
        Answer::NamespaceDeleted(NamespaceDeleted {
            breakers: 2,
            tools: 0,
            policy_versions: 0,
        }),
        "a server and a tool breaker went"
    );
    assert!(sm.namespace(&Namespace::new("junk-7").unwrap()).is_none());
    assert!(matches!(
        sm.apply(&report("tenant", 1), t).answer,
        Answer::Reported(_)
    ));
    // Gone means gone: a second delete finds nothing.
    assert!(matches!(
        sm.apply(&delete("junk-7"), t).answer,
        Answer::Rejected(CoreError::NotFound { .. })
    ));
}

#[test]
fn a_namespace_with_live_state_is_not_deleted_and_says_why() {
    let mut sm = StateMachine::new();
    let t = Timestamp::from_millis(1_000);
    let ns = Namespace::new("tenant").unwrap();

    // A thrown kill switch.
    sm.apply(
        &Command::SetKillSwitch {
            namespace: ns.clone(),
            writes_blocked: true,
            actor: "ops".into(),
            reason: "incident".into(),
        },
        t,
    );
    let refused = sm.apply(&delete("tenant"), t).answer;
    assert!(
        matches!(&refused, Answer::Rejected(CoreError::InUse { reason, .. }) if reason.contains("kill switch")),
        "{refused:?}"
    );
    sm.apply(
        &Command::SetKillSwitch {
            namespace: ns.clone(),
            writes_blocked: false,
            actor: "ops".into(),
            reason: "over".into(),
        },
        t,
    );

    // A breaker that is not closed: failures trip the server breaker.
    for seq in 1..=40 {
        sm.apply(&report("tenant", seq), t);
    }
    assert!(sm
        .breakers_in(&ns)
        .any(|(_, b)| b.state() != crate::breaker::BreakerState::Closed));
    let before = sm.digest().unwrap();
    let refused = sm.apply(&delete("tenant"), t).answer;
    assert!(
        matches!(&refused, Answer::Rejected(CoreError::InUse { reason, .. }) if reason.contains("breaker")),
        "{refused:?}"
    );
    assert_eq!(
        sm.digest().unwrap(),
        before,
        "a refused delete changes nothing"
    );

    // A ledger record.
    let mut other = StateMachine::new();
    other.apply(
        &Command::Begin {
            namespace: ns.clone(),
            request: crate::ledger::BeginRequest {
                key: "k".into(),
                fingerprint: "fp".into(),
                intent_id: "i".into(),
                tool: ToolName::new("restart_job").unwrap(),
                target: "job".into(),
                effect: crate::policy::EffectClass::IdempotentWrite,
                attempt: "1".into(),
                lease_ms: 1_000,
            },
        },
        t,
    );
    let refused = other.apply(&delete("tenant"), t).answer;
    assert!(
        matches!(&refused, Answer::Rejected(CoreError::InUse { reason, .. }) if reason.contains("ledger record")),
        "{refused:?}"
    );
}
