//! `StateMachine::replay`: a restart's replay behind a ledger that already
//! holds the entries' changes leaves the fleet as `apply` left it.

use super::{one_outcome, pass_time};
use crate::ledger::{BeginRequest, CompleteRequest, Completion, Ledger};
use crate::limits::{LEDGER_RETENTION_MS_DEFAULT, REPORT_MARK_IDLE_MS, TICK_TIMERS_MAX};
use crate::machine::{Answer, Command, StateMachine};
use crate::name::{Namespace, ToolName};
use crate::outcome::OutcomeClass;
use crate::policy::EffectClass;
use crate::time::Timestamp;

fn ns() -> Namespace {
    Namespace::new("fleet-a").unwrap()
}

/// Begins and completes key `i`: a final record, purged when its retention
/// ends.
fn write_done(sm: &mut StateMachine, i: usize, at: Timestamp) {
    let begin = Command::Begin {
        namespace: ns(),
        request: BeginRequest {
            key: format!("key-{i}"),
            fingerprint: "fp".into(),
            intent_id: format!("intent-{i}"),
            tool: ToolName::new("charge").unwrap(),
            target: "acct-1".into(),
            effect: EffectClass::IdempotentWrite,
            attempt: "1".into(),
            lease_ms: 60_000,
        },
    };
    let complete = Command::Complete {
        namespace: ns(),
        request: CompleteRequest {
            key: format!("key-{i}"),
            attempt: "1".into(),
            completion: Completion::Succeeded {
                operation_id: format!("op-{i}"),
                result: Vec::new(),
            },
        },
    };
    for command in [begin, complete] {
        let answer = sm.apply(&command, at).answer;
        assert!(!matches!(answer, Answer::Rejected(_)), "{answer:?}");
    }
}

/// A tick with more ledger purges due than it may process expires the same
/// idle report marks whether the ledger holds those records or not (replayed
/// after a restart, the ledger has moved on). While the marks' budget was
/// what the ledger left, the first run expired none and a replay all.
#[test]
fn a_tick_expires_the_same_report_marks_whatever_the_ledger_holds() {
    let mut sm = StateMachine::new();
    let start = Timestamp(1_700_000_000_000);
    sm.apply(&Command::Tick, start);
    for i in 0..TICK_TIMERS_MAX + 10 {
        write_done(&mut sm, i, start);
    }
    // The records' retention ends at `purge`; the mark goes idle 10 s
    // before it, and no tick comes between the two.
    let purge = start.plus_ms(LEDGER_RETENTION_MS_DEFAULT);
    let marked = Timestamp(purge.as_millis() - REPORT_MARK_IDLE_MS - 10_000);
    pass_time(&mut sm, start, marked);
    sm.apply(
        &one_outcome("fleet-a", 1, "pay", "charge", OutcomeClass::Success),
        marked,
    );
    pass_time(&mut sm, marked, Timestamp(purge.as_millis() - 20_000));
    assert_eq!(sm.fleet_replicas(&ns()), 1, "the mark is there");
    let mut replayed = StateMachine::from_parts(sm.fleet().clone(), Ledger::default());

    let at = purge.plus_ms(1_000);
    let first = sm.apply(&Command::Tick, at);
    assert_eq!(
        first.answer,
        Answer::Ticked {
            timers: u32::try_from(TICK_TIMERS_MAX).unwrap() + 1
        },
        "as many purges as a tick may make, and the mark"
    );
    assert_eq!(replayed.replay(&Command::Tick, at), first.events);
    assert_eq!(sm.fleet_replicas(&ns()), 0, "the idle mark expired");
    assert_eq!(replayed.fleet(), sm.fleet(), "the same fleet");
}
