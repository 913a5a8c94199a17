//! A `LedgerBatch` entry is its calls applied one by one: for any sequence
//! of ledger calls cut into batches at random, the batched machine answers
//! every call as the one-by-one machine does and ends in the same state.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use fusebox_core::ledger::{BeginRequest, CompleteRequest, Completion};
use fusebox_core::limits::LEDGER_BATCH_OPS_MAX;
use fusebox_core::machine::{Answer, Command, LedgerOp, StateMachine};
use fusebox_core::policy::EffectClass;
use fusebox_core::{Namespace, Timestamp, ToolName};
use proptest::prelude::*;

const KEYS: usize = 4;
const ATTEMPTS: usize = 4;

fn ns(i: usize) -> Namespace {
    Namespace::new(["ops", "billing"][i]).unwrap()
}

fn effect(i: usize) -> EffectClass {
    [
        EffectClass::NonIdempotentWrite,
        EffectClass::IdempotentWrite,
        EffectClass::ReadOnly,
    ][i]
}

fn completion(kind: usize, attempt: usize) -> Completion {
    let reason = format!("r-{attempt}");
    match kind {
        0 => Completion::Succeeded {
            operation_id: format!("op-{attempt}"),
            result: vec![b'x'; attempt],
        },
        1 => Completion::FailedBeforeExecution { reason },
        2 => Completion::Failed { reason },
        _ => Completion::Ambiguous { reason },
    }
}

/// One generated call: a begin (with a lease that may be refused) or a
/// complete, on a few keys and attempts so calls collide.
fn call() -> impl Strategy<Value = LedgerOp> {
    let begin = (0..2usize, 0..KEYS, 0..ATTEMPTS, 0..3usize, 0u64..20_000).prop_map(
        |(n, key, attempt, e, lease_ms)| LedgerOp::Begin {
            namespace: ns(n),
            request: BeginRequest {
                key: format!("k{key}"),
                fingerprint: format!("fp-{key}"),
                intent_id: format!("i-{attempt}"),
                tool: ToolName::new("charge").unwrap(),
                target: "acct".into(),
                effect: effect(e),
                attempt: format!("a{attempt}"),
                lease_ms,
            },
        },
    );
    let complete =
        (0..2usize, 0..KEYS, 0..ATTEMPTS, 0..4usize).prop_map(|(n, key, attempt, kind)| {
            LedgerOp::Complete {
                namespace: ns(n),
                request: CompleteRequest {
                    key: format!("k{key}"),
                    attempt: format!("a{attempt}"),
                    completion: completion(kind, attempt),
                },
            }
        });
    prop_oneof![3 => begin, 2 => complete]
}

/// Calls cut into batches of 1 to 12, each applied some ms after the last.
fn batches() -> impl Strategy<Value = Vec<(Vec<LedgerOp>, u64)>> {
    prop::collection::vec((prop::collection::vec(call(), 1..12), 0u64..15_000), 1..25)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_batch_is_its_calls_one_by_one(batches in batches()) {
        let (mut batched, mut alone) = (StateMachine::new(), StateMachine::new());
        let mut at = 1_000u64;
        for (ops, advance_ms) in batches {
            at += advance_ms;
            let one_by_one: Vec<Answer> = ops
                .iter()
                .cloned()
                .map(|op| alone.apply(&op.into_command(), Timestamp(at)).answer)
                .collect();
            let applied = batched.apply(&Command::LedgerBatch { ops }, Timestamp(at));
            prop_assert_eq!(applied.answer, Answer::LedgerBatch(one_by_one));
            prop_assert_eq!(batched.digest().unwrap(), alone.digest().unwrap());
        }
    }
}

#[test]
fn a_batch_of_the_most_calls_allowed_is_taken() {
    // The core bounds a batch by count; the server also bounds it by its
    // encoded size before proposing.
    let mut sm = StateMachine::new();
    let one = LedgerOp::Complete {
        namespace: ns(0),
        request: CompleteRequest {
            key: "k".into(),
            attempt: "a".into(),
            completion: completion(1, 0),
        },
    };
    let full = sm.apply(
        &Command::LedgerBatch {
            ops: vec![one.clone(); LEDGER_BATCH_OPS_MAX],
        },
        Timestamp(1),
    );
    assert!(matches!(full.answer, Answer::LedgerBatch(a) if a.len() == LEDGER_BATCH_OPS_MAX));
}
