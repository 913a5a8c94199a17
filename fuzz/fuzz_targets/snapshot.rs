//! A state snapshot as a node reads it from its disk or from a peer
//! (`InstallSnapshot`): the core's snapshot encoding.
//!
//! Reading answers, whatever the bytes. A snapshot that restores must
//! snapshot again to the same bytes, and the restored state must keep
//! applying commands without a panic: time passing, each restored breaker
//! reset by an operator and reported to, each namespace deleted.

#![no_main]

use fusebox_core::breaker::BreakerKey;
use fusebox_core::ledger::BoxedLedger;
use fusebox_core::machine::{Command, OperatorAction, OutcomeReport, SnapshotReader, StateMachine};
use fusebox_core::{OutcomeClass, ReplicaId};
use fusebox_fuzz::{apply, check_snapshot, START_MS};
use libfuzzer_sys::fuzz_target;

/// Records read one at a time, at most (the reader must end by itself).
const RECORDS_MAX: usize = 100_000;

/// Restored breakers and namespaces acted on, at most.
const ACTED_ON_MAX: usize = 8;

fuzz_target!(|data: &[u8]| {
    if let Ok((_fleet, mut reader)) = SnapshotReader::open(data) {
        for _ in 0..RECORDS_MAX {
            match reader.next_record() {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
    let Ok(restored) = StateMachine::restore(data) else {
        return;
    };
    let bytes = restored.snapshot().expect("a restored state snapshots");
    let again = StateMachine::restore(&bytes).expect("a state's own snapshot restores");
    assert!(
        again.snapshot().expect("snapshots") == bytes,
        "a snapshot changed through restore"
    );
    let mut state = restored.map_ledger(|ledger| Box::new(ledger) as BoxedLedger);
    let mut at_ms = START_MS.max(state.now().as_millis()) + 60_000;
    apply(&mut state, Command::Tick, at_ms);
    let namespaces: Vec<_> = state
        .namespaces()
        .map(|(ns, _)| ns.clone())
        .take(ACTED_ON_MAX)
        .collect();
    let breakers: Vec<_> = namespaces
        .iter()
        .flat_map(|ns| {
            state
                .breakers_in(ns)
                .map(|(key, _)| key.clone())
                .collect::<Vec<_>>()
        })
        .take(ACTED_ON_MAX)
        .collect();
    let replica = ReplicaId::new("fuzz-replica".to_owned()).expect("a valid name");
    for key in breakers {
        at_ms += 1_000;
        let reset = Command::Operate {
            key: key.clone(),
            action: OperatorAction::Reset,
            actor: "fuzz".to_owned(),
            reason: String::new(),
        };
        apply(&mut state, reset, at_ms);
        if let Some(tool) = key.tool.clone() {
            let generation = |k: &BreakerKey| state.breaker(k).map_or(0, |b| b.generation());
            let server_generation = generation(&BreakerKey::server(
                key.namespace.clone(),
                key.server.clone(),
            ));
            let tool_generation = generation(&key);
            let report = Command::ReportOutcomes {
                namespace: key.namespace.clone(),
                replica: replica.clone(),
                batch_seq: at_ms,
                outcomes: vec![OutcomeReport {
                    server: key.server.clone(),
                    tool,
                    backend: key.backend.clone(),
                    class: OutcomeClass::Timeout,
                    duration_ms: 1_000,
                    server_generation,
                    tool_generation,
                }],
            };
            apply(&mut state, report, at_ms);
        }
    }
    check_snapshot(&state);
    for namespace in namespaces {
        at_ms += 1_000;
        let delete = Command::DeleteNamespace {
            namespace,
            actor: "fuzz".to_owned(),
            reason: String::new(),
        };
        apply(&mut state, delete, at_ms);
    }
    apply(&mut state, Command::Tick, at_ms + 600_000);
    check_snapshot(&state);
});
