//! Scenario tests for the idempotency ledger, driven through the state
//! machine exactly as the log would drive it.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use fusebox_core::ledger::{
    AmbiguityCause, BeginAnswer, BeginRequest, CompleteAnswer, CompleteRequest, Completion,
    Decision, LedgerStore, ListFilter, RenewAnswer, RenewRequest, ResolveAnswer, ResolveRequest,
    Status,
};
use fusebox_core::limits::{CLOCK_STEP_MS_MAX, LEDGER_BATCH_OPS_MAX, RETENTION_MS_MAX};
use fusebox_core::machine::{Answer, Command, LedgerOp, StateMachine};
use fusebox_core::policy::EffectClass;
use fusebox_core::{Namespace, Timestamp, ToolName};

const DAY_MS: u64 = 24 * 3600 * 1000;

fn ns() -> Namespace {
    Namespace::new("ops").unwrap()
}

fn begin_req(key: &str, attempt: &str, effect: EffectClass) -> BeginRequest {
    BeginRequest {
        key: key.into(),
        fingerprint: "fp-1".into(),
        intent_id: "intent-1".into(),
        tool: ToolName::new("restart_deployment_job").unwrap(),
        target: "job-42".into(),
        effect,
        attempt: attempt.into(),
        lease_ms: 10_000,
    }
}

fn begin(sm: &mut StateMachine, req: BeginRequest, at: u64) -> BeginAnswer {
    let cmd = Command::Begin {
        namespace: ns(),
        request: req,
    };
    match sm.apply(&cmd, Timestamp(at)).answer {
        Answer::Begin(a) => a,
        other => panic!("unexpected answer {other:?}"),
    }
}

fn complete(
    sm: &mut StateMachine,
    key: &str,
    attempt: &str,
    c: Completion,
    at: u64,
) -> CompleteAnswer {
    let request = CompleteRequest {
        key: key.into(),
        attempt: attempt.into(),
        completion: c,
    };
    let cmd = Command::Complete {
        namespace: ns(),
        request,
    };
    match sm.apply(&cmd, Timestamp(at)).answer {
        Answer::Complete(a) => a,
        other => panic!("unexpected answer {other:?}"),
    }
}

fn resolve(sm: &mut StateMachine, key: &str, decision: Decision, at: u64) -> ResolveAnswer {
    let request = ResolveRequest {
        key: key.into(),
        decision,
        actor: "alice".into(),
        note: "checked the deployment api".into(),
    };
    let cmd = Command::Resolve {
        namespace: ns(),
        request,
    };
    match sm.apply(&cmd, Timestamp(at)).answer {
        Answer::Resolve(a) => a,
        other => panic!("unexpected answer {other:?}"),
    }
}

fn succeeded(op: &str) -> Completion {
    Completion::Succeeded {
        operation_id: op.into(),
        result: b"{\"accepted\":true}".to_vec(),
    }
}

fn status(sm: &StateMachine, key: &str, at: u64) -> Status {
    sm.ledger()
        .lookup(&ns(), key, Timestamp(at))
        .unwrap()
        .status
}

#[test]
fn begin_answers_started_then_in_progress_to_another_attempt() {
    let mut sm = StateMachine::new();
    let a = begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::NonIdempotentWrite),
        0,
    );
    assert_eq!(
        a,
        BeginAnswer::Started {
            attempt: "a1".into(),
            takeover: false,
            lease_until: Timestamp(10_000)
        }
    );
    let b = begin(
        &mut sm,
        begin_req("k", "a2", EffectClass::NonIdempotentWrite),
        1,
    );
    assert_eq!(
        b,
        BeginAnswer::InProgress {
            attempt: "a1".into(),
            lease_until: Timestamp(10_000)
        }
    );
}

#[test]
fn a_completed_key_replays_its_stored_result() {
    let mut sm = StateMachine::new();
    begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::IdempotentWrite),
        0,
    );
    let done = complete(&mut sm, "k", "a1", succeeded("op-7"), 5);
    assert!(matches!(done, CompleteAnswer::Recorded { .. }));
    let again = complete(&mut sm, "k", "a1", succeeded("op-7"), 6);
    assert!(
        matches!(again, CompleteAnswer::AlreadyRecorded { .. }),
        "retried complete is idempotent"
    );
    match begin(
        &mut sm,
        begin_req("k", "a2", EffectClass::IdempotentWrite),
        7,
    ) {
        BeginAnswer::Completed { record } => {
            assert_eq!(record.operation_id.as_deref(), Some("op-7"));
            assert_eq!(record.result.as_deref(), Some(&b"{\"accepted\":true}"[..]));
        }
        other => panic!("expected a replay, got {other:?}"),
    }
}

#[test]
fn same_key_with_another_fingerprint_is_a_mismatch() {
    let mut sm = StateMachine::new();
    begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::IdempotentWrite),
        0,
    );
    let mut other = begin_req("k", "a2", EffectClass::IdempotentWrite);
    other.fingerprint = "fp-2".into();
    assert_eq!(
        begin(&mut sm, other, 1),
        BeginAnswer::Mismatch {
            stored_fingerprint: "fp-1".into()
        }
    );
}

#[test]
fn failed_before_execution_releases_the_key() {
    let mut sm = StateMachine::new();
    begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::NonIdempotentWrite),
        0,
    );
    let reason = "connection refused".to_string();
    complete(
        &mut sm,
        "k",
        "a1",
        Completion::FailedBeforeExecution { reason },
        1,
    );
    assert_eq!(status(&sm, "k", 1), Status::Released);
    let again = begin(
        &mut sm,
        begin_req("k", "a2", EffectClass::NonIdempotentWrite),
        2,
    );
    assert_eq!(
        again,
        BeginAnswer::Started {
            attempt: "a2".into(),
            takeover: false,
            lease_until: Timestamp(10_002)
        }
    );
    assert_eq!(sm.ledger().get(&ns(), "k").unwrap().attempts, 2);
}

#[test]
fn a_definitive_failure_is_replayed_not_retried() {
    let mut sm = StateMachine::new();
    begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::NonIdempotentWrite),
        0,
    );
    complete(
        &mut sm,
        "k",
        "a1",
        Completion::Failed {
            reason: "job not restartable".into(),
        },
        1,
    );
    match begin(
        &mut sm,
        begin_req("k", "a2", EffectClass::NonIdempotentWrite),
        2,
    ) {
        BeginAnswer::Completed { record } => assert_eq!(record.status, Status::Failed),
        other => panic!("expected replay of the failure, got {other:?}"),
    }
}

/// Runbook case `write_response_lost_after_accept`: no automatic retry, the
/// key is ambiguous, it can be looked up and resolved, no duplicate.
#[test]
fn write_response_lost_after_accept_is_ambiguous_until_resolved() {
    let mut sm = StateMachine::new();
    begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::NonIdempotentWrite),
        0,
    );
    let lost = Completion::Ambiguous {
        reason: "timeout after request sent".into(),
    };
    complete(&mut sm, "k", "a1", lost, 7_000);
    let retry = begin(
        &mut sm,
        begin_req("k", "a2", EffectClass::NonIdempotentWrite),
        8_000,
    );
    assert!(
        matches!(retry, BeginAnswer::Ambiguous { .. }),
        "never a second started"
    );
    let filter = ListFilter {
        status: Some(Status::Ambiguous),
        limit: 10,
        ..Default::default()
    };
    let page = sm.ledger().list(&ns(), &filter, Timestamp(8_000));
    assert_eq!(page.records.len(), 1);
    let done = Decision::Done {
        operation_id: "op-99".into(),
    };
    let resolved = resolve(&mut sm, "k", done, 9_000);
    let ResolveAnswer::Resolved { record } = resolved else {
        panic!("not resolved")
    };
    assert_eq!(record.status, Status::Succeeded);
    assert_eq!(record.resolution.as_ref().unwrap().actor, "alice");
    let filter = ListFilter {
        operation_id: Some("op-99".into()),
        limit: 10,
        ..Default::default()
    };
    assert_eq!(
        sm.ledger()
            .list(&ns(), &filter, Timestamp(9_000))
            .records
            .len(),
        1
    );
}

#[test]
fn a_lapsed_lease_makes_a_non_idempotent_write_ambiguous_never_free() {
    let mut sm = StateMachine::new();
    begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::NonIdempotentWrite),
        0,
    );
    sm.apply(&Command::Tick, Timestamp(10_000));
    let record = sm.ledger().get(&ns(), "k").unwrap().clone();
    assert_eq!(record.status, Status::Ambiguous);
    assert_eq!(record.ambiguity, Some(AmbiguityCause::LeaseExpired));
    let retry = begin(
        &mut sm,
        begin_req("k", "a2", EffectClass::NonIdempotentWrite),
        11_000,
    );
    assert!(matches!(retry, BeginAnswer::Ambiguous { .. }));
}

#[test]
fn the_holders_late_definitive_answer_settles_a_lease_ambiguity() {
    let mut sm = StateMachine::new();
    begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::NonIdempotentWrite),
        0,
    );
    let late = complete(&mut sm, "k", "a1", succeeded("op-1"), 12_000);
    assert!(matches!(late, CompleteAnswer::Recorded { .. }));
    assert_eq!(status(&sm, "k", 12_000), Status::Succeeded);
}

#[test]
fn a_lapsed_lease_on_an_idempotent_write_may_be_taken_over() {
    let mut sm = StateMachine::new();
    begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::IdempotentWrite),
        0,
    );
    let b = begin(
        &mut sm,
        begin_req("k", "a2", EffectClass::IdempotentWrite),
        10_000,
    );
    assert_eq!(
        b,
        BeginAnswer::Started {
            attempt: "a2".into(),
            takeover: true,
            lease_until: Timestamp(20_000)
        }
    );
    let stale = complete(&mut sm, "k", "a1", succeeded("op-1"), 10_001);
    assert!(
        matches!(stale, CompleteAnswer::Conflict { .. }),
        "the old holder no longer owns it"
    );
}

/// Chaos seed 8263: a replica that had not yet received the policy began a
/// charge as read-only; once its lease lapsed, the retry (now knowing the
/// charge is non-idempotent) was let take it over and the charge ran twice.
/// A takeover needs both the record and the new attempt to be idempotent.
#[test]
fn a_lapsed_lease_is_not_taken_over_by_an_attempt_that_says_it_is_not_idempotent() {
    for first in [EffectClass::ReadOnly, EffectClass::IdempotentWrite] {
        let mut sm = StateMachine::new();
        begin(&mut sm, begin_req("k", "a1", first), 0);
        let b = begin(
            &mut sm,
            begin_req("k", "a2", EffectClass::NonIdempotentWrite),
            10_000,
        );
        assert!(
            matches!(b, BeginAnswer::Ambiguous { .. }),
            "{first:?}: {b:?}"
        );
        let again = begin(
            &mut sm,
            begin_req("k", "a3", EffectClass::IdempotentWrite),
            10_001,
        );
        assert!(
            matches!(again, BeginAnswer::Ambiguous { .. }),
            "ambiguity is sticky: {again:?}"
        );
    }
}

#[test]
fn resolve_not_done_releases_and_abandoned_is_final() {
    let mut sm = StateMachine::new();
    for key in ["k1", "k2"] {
        begin(
            &mut sm,
            begin_req(key, "a1", EffectClass::NonIdempotentWrite),
            0,
        );
        complete(
            &mut sm,
            key,
            "a1",
            Completion::Ambiguous {
                reason: "lost".into(),
            },
            1,
        );
    }
    resolve(&mut sm, "k1", Decision::NotDone, 2);
    let again = begin(
        &mut sm,
        begin_req("k1", "a2", EffectClass::NonIdempotentWrite),
        3,
    );
    assert!(matches!(again, BeginAnswer::Started { .. }));
    resolve(&mut sm, "k2", Decision::Abandoned, 2);
    assert!(matches!(
        begin(
            &mut sm,
            begin_req("k2", "a2", EffectClass::NonIdempotentWrite),
            3
        ),
        BeginAnswer::Completed { .. }
    ));
    assert!(matches!(
        resolve(&mut sm, "k2", Decision::NotDone, 4),
        ResolveAnswer::NotAmbiguous { .. }
    ));
}

#[test]
fn retention_purges_final_records_but_never_ambiguous_or_in_progress() {
    let mut sm = StateMachine::new();
    begin(
        &mut sm,
        begin_req("done", "a", EffectClass::IdempotentWrite),
        0,
    );
    complete(&mut sm, "done", "a", succeeded("op"), 1);
    begin(
        &mut sm,
        begin_req("lost", "a", EffectClass::NonIdempotentWrite),
        0,
    );
    complete(
        &mut sm,
        "lost",
        "a",
        Completion::Ambiguous {
            reason: "lost".into(),
        },
        1,
    );
    begin(
        &mut sm,
        begin_req("held", "a", EffectClass::IdempotentWrite),
        0,
    );
    pass_time(&mut sm, Timestamp(DAY_MS));
    assert!(
        sm.ledger().get(&ns(), "done").is_some(),
        "kept until the period ends"
    );
    sm.apply(&Command::Tick, Timestamp(DAY_MS + 2));
    assert!(
        sm.ledger().get(&ns(), "done").is_none(),
        "purged after 24 h"
    );
    pass_time(&mut sm, Timestamp(RETENTION_MS_MAX + DAY_MS));
    assert!(sm.ledger().get(&ns(), "lost").is_some());
    assert!(sm.ledger().get(&ns(), "held").is_some());
}

#[test]
fn list_filters_by_intent_tool_and_status_with_pagination() {
    let mut sm = StateMachine::new();
    for i in 0..25 {
        let mut req = begin_req(&format!("k{i:02}"), "a", EffectClass::IdempotentWrite);
        req.intent_id = format!("intent-{}", i % 2);
        begin(&mut sm, req, 0);
    }
    let mut filter = ListFilter {
        intent_id: Some("intent-0".into()),
        limit: 5,
        ..Default::default()
    };
    let mut seen = Vec::new();
    loop {
        let page = sm.ledger().list(&ns(), &filter, Timestamp(1));
        seen.extend(page.records.iter().map(|r| r.key.clone()));
        match page.next_after_key {
            Some(k) => filter.after_key = Some(k),
            None => break,
        }
    }
    assert_eq!(seen.len(), 13);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "ordered by key, no repeats"
    );
    let by_tool = ListFilter {
        tool: Some(ToolName::new("restart_deployment_job").unwrap()),
        status: Some(Status::InProgress),
        limit: 100,
        ..Default::default()
    };
    assert_eq!(
        sm.ledger()
            .list(&ns(), &by_tool, Timestamp(1))
            .records
            .len(),
        25
    );
}

#[test]
fn oversized_input_is_refused_without_touching_state() {
    let mut sm = StateMachine::new();
    let before = sm.digest().unwrap();
    let mut req = begin_req(&"k".repeat(300), "a", EffectClass::IdempotentWrite);
    let cmd = Command::Begin {
        namespace: ns(),
        request: req.clone(),
    };
    assert!(matches!(
        sm.apply(&cmd, Timestamp(0)).answer,
        Answer::Rejected(_)
    ));
    req.key = "k".into();
    req.lease_ms = 0;
    let cmd = Command::Begin {
        namespace: ns(),
        request: req,
    };
    assert!(matches!(
        sm.apply(&cmd, Timestamp(0)).answer,
        Answer::Rejected(_)
    ));
    assert_eq!(
        before,
        sm.digest().unwrap(),
        "a refused command changes nothing"
    );
    begin(
        &mut sm,
        begin_req("k", "a", EffectClass::IdempotentWrite),
        0,
    );
    let huge = Completion::Succeeded {
        operation_id: "op".into(),
        result: vec![0; 20_000],
    };
    let request = CompleteRequest {
        key: "k".into(),
        attempt: "a".into(),
        completion: huge,
    };
    let cmd = Command::Complete {
        namespace: ns(),
        request,
    };
    assert!(matches!(
        sm.apply(&cmd, Timestamp(1)).answer,
        Answer::Rejected(_)
    ));
    assert_eq!(status(&sm, "k", 1), Status::InProgress);
}

#[test]
fn the_kill_switch_refuses_write_begins_in_log_order() {
    let mut sm = StateMachine::new();
    let throw = Command::SetKillSwitch {
        namespace: ns(),
        writes_blocked: true,
        actor: "alice".into(),
        reason: "incident INC-7".into(),
    };
    sm.apply(&throw, Timestamp(0));
    let cmd = Command::Begin {
        namespace: ns(),
        request: begin_req("k", "a1", EffectClass::NonIdempotentWrite),
    };
    match sm.apply(&cmd, Timestamp(1)).answer {
        Answer::Rejected(fusebox_core::CoreError::WritesBlocked { actor, reason, .. }) => {
            assert_eq!(
                (actor.as_str(), reason.as_str()),
                ("alice", "incident INC-7")
            );
        }
        other => panic!("expected writes_blocked, got {other:?}"),
    }
    assert!(sm.ledger().get(&ns(), "k").is_none(), "nothing was begun");
    let lift = Command::SetKillSwitch {
        namespace: ns(),
        writes_blocked: false,
        actor: "alice".into(),
        reason: "resolved".into(),
    };
    sm.apply(&lift, Timestamp(2));
    let again = begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::NonIdempotentWrite),
        3,
    );
    assert!(matches!(again, BeginAnswer::Started { .. }));
}

/// Lets time pass to `to` as a live cluster would, a `Tick` a minute: the
/// state clock follows stamps at a bounded pace, never a day at once.
fn pass_time(sm: &mut StateMachine, to: Timestamp) {
    while sm.now() < to {
        let next = sm.now().plus_ms(CLOCK_STEP_MS_MAX).min(to);
        sm.apply(&Command::Tick, next);
    }
}

fn renew(sm: &mut StateMachine, key: &str, attempt: &str, lease_ms: u64, at: u64) -> RenewAnswer {
    let cmd = Command::Renew {
        namespace: ns(),
        request: RenewRequest {
            key: key.into(),
            attempt: attempt.into(),
            lease_ms,
        },
    };
    match sm.apply(&cmd, Timestamp(at)).answer {
        Answer::Renew(a) => a,
        other => panic!("unexpected answer {other:?}"),
    }
}

#[test]
fn a_holder_renews_its_live_lease_and_a_long_write_stays_its_own() {
    let mut sm = StateMachine::new();
    let t0 = 1_000_000;
    let BeginAnswer::Started { .. } = begin(
        &mut sm,
        begin_req("k", "a1", EffectClass::NonIdempotentWrite),
        t0,
    ) else {
        panic!("started");
    };
    // Renewed three times, each before the lease ends: 40 s of work under
    // a 10 s lease, and nobody else may start it.
    for step in 1..=4u64 {
        let at = t0 + step * 8_000;
        let RenewAnswer::Renewed { record } = renew(&mut sm, "k", "a1", 10_000, at) else {
            panic!("renewed at step {step}");
        };
        assert_eq!(record.lease_until, Some(Timestamp(at + 10_000)));
        sm.apply(&Command::Tick, Timestamp(at + 1));
        let second = begin(
            &mut sm,
            begin_req("k", "a2", EffectClass::NonIdempotentWrite),
            at + 2,
        );
        assert!(
            matches!(second, BeginAnswer::InProgress { .. }),
            "{second:?}"
        );
    }
    // A shorter renewal never shortens the lease.
    let RenewAnswer::Renewed { record } = renew(&mut sm, "k", "a1", 1, t0 + 33_000) else {
        panic!("renewed");
    };
    assert_eq!(record.lease_until, Some(Timestamp(t0 + 42_000)));
    // Another attempt cannot renew the holder's lease.
    assert!(matches!(
        renew(&mut sm, "k", "a2", 10_000, t0 + 34_000),
        RenewAnswer::Conflict { .. }
    ));
    assert!(matches!(
        renew(&mut sm, "missing", "a1", 10_000, t0 + 34_000),
        RenewAnswer::NotFound
    ));
}

#[test]
fn a_lapsed_lease_is_never_revived() {
    let mut sm = StateMachine::new();
    let t0 = 1_000_000;
    begin(
        &mut sm,
        begin_req("w", "a1", EffectClass::NonIdempotentWrite),
        t0,
    );
    begin(
        &mut sm,
        begin_req("i", "a1", EffectClass::IdempotentWrite),
        t0,
    );
    // Both leases (10 s) lapse; renewing after that is refused, and the
    // non-idempotent write is ambiguous, as it would be without the renew.
    let late = t0 + 10_000;
    let RenewAnswer::Conflict { record } = renew(&mut sm, "w", "a1", 10_000, late) else {
        panic!("a lapsed non-idempotent lease is not renewed");
    };
    assert_eq!(record.status, Status::Ambiguous);
    assert!(matches!(
        renew(&mut sm, "i", "a1", 10_000, late),
        RenewAnswer::Conflict { .. }
    ));
    // The idempotent key is free to take over, as before.
    let takeover = begin(
        &mut sm,
        begin_req("i", "a2", EffectClass::IdempotentWrite),
        late + 1,
    );
    assert!(
        matches!(takeover, BeginAnswer::Started { .. }),
        "{takeover:?}"
    );
}

/// The calls of the batch tests: two attempts race for one key, the winner
/// completes it, a third call breaks a rule (an empty key), and a second
/// key is begun and left in progress.
fn racing_calls() -> Vec<LedgerOp> {
    let op = |request| LedgerOp::Begin {
        namespace: ns(),
        request,
    };
    let mut bad = begin_req("", "a-3", EffectClass::NonIdempotentWrite);
    bad.key.clear();
    vec![
        op(begin_req("k1", "a-1", EffectClass::NonIdempotentWrite)),
        op(begin_req("k1", "a-2", EffectClass::NonIdempotentWrite)),
        LedgerOp::Complete {
            namespace: ns(),
            request: CompleteRequest {
                key: "k1".into(),
                attempt: "a-1".into(),
                completion: Completion::Succeeded {
                    operation_id: "op-1".into(),
                    result: b"done".to_vec(),
                },
            },
        },
        op(bad),
        op(begin_req("k2", "a-4", EffectClass::NonIdempotentWrite)),
    ]
}

#[test]
fn a_ledger_batch_answers_and_changes_as_its_calls_would_alone() {
    let (mut alone, mut batched) = (StateMachine::new(), StateMachine::new());
    let at = Timestamp(1_000);
    let one_by_one: Vec<Answer> = racing_calls()
        .into_iter()
        .map(|op| alone.apply(&op.into_command(), at).answer)
        .collect();
    let applied = batched.apply(
        &Command::LedgerBatch {
            ops: racing_calls(),
        },
        at,
    );
    assert_eq!(applied.answer, Answer::LedgerBatch(one_by_one.clone()));
    assert_eq!(batched.digest().unwrap(), alone.digest().unwrap());
    // What the answers are: the race is decided inside the one entry.
    assert!(matches!(
        one_by_one[0],
        Answer::Begin(BeginAnswer::Started { .. })
    ));
    assert!(matches!(
        &one_by_one[1],
        Answer::Begin(BeginAnswer::InProgress { attempt, .. }) if attempt == "a-1"
    ));
    assert!(matches!(
        one_by_one[2],
        Answer::Complete(CompleteAnswer::Recorded { .. })
    ));
    assert!(matches!(one_by_one[3], Answer::Rejected(_)));
    assert!(matches!(
        one_by_one[4],
        Answer::Begin(BeginAnswer::Started { .. })
    ));
}

#[test]
fn an_empty_or_oversized_ledger_batch_is_refused_whole() {
    let mut sm = StateMachine::new();
    let empty = sm.apply(&Command::LedgerBatch { ops: Vec::new() }, Timestamp(1));
    assert!(matches!(empty.answer, Answer::Rejected(_)));
    let one = racing_calls().swap_remove(0);
    let too_many = vec![one; LEDGER_BATCH_OPS_MAX + 1];
    let refused = sm.apply(&Command::LedgerBatch { ops: too_many }, Timestamp(2));
    assert!(matches!(refused.answer, Answer::Rejected(_)));
    // The same as two refused calls at the same times (the state's clock
    // follows every entry, refused or not).
    let mut refused_alone = StateMachine::new();
    let mut bad = begin_req("k", "a", EffectClass::NonIdempotentWrite);
    bad.key.clear();
    let bad = Command::Begin {
        namespace: ns(),
        request: bad,
    };
    for at in [1, 2] {
        let answer = refused_alone.apply(&bad, Timestamp(at)).answer;
        assert!(matches!(answer, Answer::Rejected(_)));
    }
    assert_eq!(sm.digest().unwrap(), refused_alone.digest().unwrap());
}
