//! The snapshot encoding streamed through `io::Read` and `io::Write`.

use super::super::{Command, SnapshotReader, SnapshotWriter, StateMachine};
use crate::ledger::BeginRequest;
use crate::policy::EffectClass;
use crate::time::Timestamp;
use crate::{Namespace, ToolName};
use std::io::{self, Read};

/// A state with a fleet and a few ledger records in two namespaces.
fn state() -> StateMachine {
    let mut sm = StateMachine::new();
    for (ns, key) in [("a", "k1"), ("a", "k2"), ("b", "k1")] {
        let request = BeginRequest {
            key: key.into(),
            fingerprint: "fp".into(),
            intent_id: "intent".into(),
            tool: ToolName::new("restart_job").unwrap(),
            target: "job-1".into(),
            effect: EffectClass::IdempotentWrite,
            attempt: "1".into(),
            lease_ms: 10_000,
        };
        let namespace = Namespace::new(ns).unwrap();
        sm.apply(&Command::Begin { namespace, request }, Timestamp(1_000));
    }
    sm
}

/// A source that hands out one byte per read, as a slow file or socket may.
struct Trickle<'a>(&'a [u8]);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match (self.0.split_first(), buf.first_mut()) {
            (Some((b, rest)), Some(slot)) => {
                *slot = *b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

fn read_all<R: Read>(source: R) -> Result<usize, crate::CoreError> {
    let (_, mut reader) = SnapshotReader::open(source)?;
    let mut records = 0;
    while reader.next_record()?.is_some() {
        records += 1;
    }
    Ok(records)
}

#[test]
fn a_snapshot_streams_through_any_reader_and_writer() {
    let sm = state();
    let bytes = sm.snapshot().unwrap();
    assert_eq!(read_all(Trickle(&bytes)).unwrap(), 3);
    let restored = StateMachine::restore(&bytes).unwrap();
    assert_eq!(restored.digest().unwrap(), sm.digest().unwrap());
}

#[test]
fn every_truncation_and_any_trailing_byte_is_refused() {
    let bytes = state().snapshot().unwrap();
    for cut in 0..bytes.len() {
        assert!(
            read_all(&bytes[..cut]).is_err(),
            "a snapshot cut at {cut} of {} bytes was accepted",
            bytes.len()
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    let error = read_all(longer.as_slice()).unwrap_err().to_string();
    assert!(error.contains("trailing"), "{error}");
}

#[test]
fn the_head_alone_restores_the_fleet() {
    let sm = state();
    let writer = SnapshotWriter::new(sm.fleet()).unwrap();
    let head_len = writer.head_len() as usize;
    assert_eq!(writer.sink().len(), head_len);
    let bytes = sm.snapshot().unwrap();
    let (fleet, _) = SnapshotReader::open(&bytes[..head_len]).unwrap();
    assert_eq!(&fleet, sm.fleet());
    assert!(SnapshotReader::open(&bytes[..head_len - 1]).is_err());
}

#[test]
fn an_unknown_format_or_an_oversized_field_is_refused_before_allocating() {
    let mut bytes = state().snapshot().unwrap();
    bytes[0] = 99;
    let error = read_all(bytes.as_slice()).unwrap_err().to_string();
    assert!(error.contains("format 99"), "{error}");
    let mut huge = vec![super::super::SNAPSHOT_FORMAT];
    huge.extend_from_slice(&u64::MAX.to_le_bytes());
    let error = read_all(huge.as_slice()).unwrap_err().to_string();
    assert!(error.contains("fleet of"), "{error}");
}

/// Found by the `snapshot` fuzz target: a snapshot whose timers named a
/// breaker it did not hold made the next tick panic. The timers index is
/// derived from the breakers, so a snapshot where they disagree (a timer
/// for a missing breaker, or at another time than the breaker is due) is
/// refused when read.
#[test]
fn timers_that_disagree_with_the_breakers_are_refused() {
    use super::super::OperatorAction;
    use crate::breaker::BreakerKey;
    use crate::ServerName;

    let mut sm = state();
    let key = |server: &str| {
        BreakerKey::server(
            Namespace::new("a").unwrap(),
            ServerName::new(server).unwrap(),
        )
    };
    let force_open = Command::Operate {
        key: key("payments"),
        action: OperatorAction::ForceOpen {
            for_ms: Some(60_000),
        },
        actor: "ops".into(),
        reason: "incident".into(),
    };
    sm.apply(&force_open, Timestamp(2_000));
    assert_eq!(
        sm.fleet().breaker_deadlines.len(),
        1,
        "the forced-open breaker has a timer"
    );
    let good = SnapshotWriter::new(sm.fleet()).unwrap().finish().unwrap();
    assert!(StateMachine::restore(&good).is_ok());

    let mut missing = sm.fleet().clone();
    missing
        .breaker_deadlines
        .insert((Timestamp(3_000), key("absent")));
    let mut moved = sm.fleet().clone();
    let (at, k) = moved.breaker_deadlines.pop_first().unwrap();
    moved.breaker_deadlines.insert((Timestamp(at.0 + 1), k));
    let mut dropped = sm.fleet().clone();
    dropped.breaker_deadlines.clear();
    for fleet in [missing, moved, dropped] {
        let bytes = SnapshotWriter::new(&fleet).unwrap().finish().unwrap();
        let err = StateMachine::restore(&bytes).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("breaker timers disagree")),
            "{err:?}"
        );
    }
}

/// A breaker finds its namespace without looking (`with_breaker` touches
/// it only when it creates the breaker), so a snapshot holding a breaker
/// of a namespace it does not hold is refused when read.
#[test]
fn a_breaker_without_its_namespace_is_refused() {
    use crate::breaker::BreakerKey;
    use crate::ServerName;

    let mut sm = state();
    let key = BreakerKey::server(
        Namespace::new("a").unwrap(),
        ServerName::new("payments").unwrap(),
    );
    let outcome = super::super::OutcomeReport {
        server: key.server.clone(),
        tool: ToolName::new("charge").unwrap(),
        backend: None,
        class: crate::OutcomeClass::Success,
        duration_ms: 5,
        server_generation: 0,
        tool_generation: 0,
    };
    let report = Command::ReportOutcomes {
        namespace: key.namespace.clone(),
        replica: crate::ReplicaId::new("r1").unwrap(),
        batch_seq: 1,
        outcomes: vec![outcome],
    };
    sm.apply(&report, Timestamp(2_000));
    assert!(sm.fleet().breakers.contains_key(&key));
    let good = SnapshotWriter::new(sm.fleet()).unwrap().finish().unwrap();
    assert!(StateMachine::restore(&good).is_ok());

    let mut orphaned = sm.fleet().clone();
    orphaned.namespaces.remove(&key.namespace);
    let bytes = SnapshotWriter::new(&orphaned).unwrap().finish().unwrap();
    let err = StateMachine::restore(&bytes).err().map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("a breaker's namespace is missing")),
        "{err:?}"
    );
}
