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
