//! A report the cluster has no room for is refused, never dropped in
//! silence (issue 13, item 8: junk namespaces made a real tenant's reports
//! vanish).

use crate::error::CoreError;
use crate::limits::NAMESPACES_MAX;
use crate::machine::*;
use crate::name::{Namespace, ReplicaId, ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::time::Timestamp;

fn report(ns: &str, seq: u64) -> Command {
    Command::ReportOutcomes {
        namespace: Namespace::new(ns).unwrap(),
        replica: ReplicaId::new("r1").unwrap(),
        batch_seq: seq,
        outcomes: vec![OutcomeReport {
            server: ServerName::new("search").unwrap(),
            tool: ToolName::new("lookup").unwrap(),
            backend: None,
            class: OutcomeClass::ServerError,
            duration_ms: 5,
            server_generation: 0,
            tool_generation: 0,
        }],
    }
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
