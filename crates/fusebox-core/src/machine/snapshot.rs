//! Snapshots and digests of the whole state.
//!
//! A snapshot is a format byte, the fleet (postcard, length-prefixed), then
//! every ledger record in `(namespace, key)` order, each length-prefixed,
//! then an end marker with the record count. Records stream: a store writes
//! them from its own iterator ([`SnapshotWriter`]) and installs them one by
//! one ([`SnapshotReader`]), so a snapshot never needs the whole ledger as
//! objects in memory.
//!
//! Every collection is ordered, so the encoding, and the SHA-256 digest over
//! it, is the same on every replica that applied the same commands, whatever
//! its ledger store: comparing digests compares replicas.
//!
//! Reading trusts nothing: an unknown format, a truncated or oversized
//! field, records out of order or repeated, a wrong count or trailing bytes
//! are refused with [`CoreError::Snapshot`].

use super::fleet::Fleet;
use super::state_machine::StateMachine;
use crate::error::CoreError;
use crate::ledger::{Ledger, LedgerStore, Record};
use crate::limits::{FLEET_BYTES_MAX, IDEMPOTENCY_KEY_BYTES_MAX, NAME_BYTES_MAX, RECORD_BYTES_MAX};
use crate::name::Namespace;
use sha2::{Digest, Sha256};

/// The snapshot format this build writes and reads.
pub const SNAPSHOT_FORMAT: u8 = 5;

fn corrupt(what: impl Into<String>) -> CoreError {
    CoreError::Snapshot(what.into())
}

/// Writes a snapshot: the fleet first, then records in order.
pub struct SnapshotWriter {
    out: Vec<u8>,
    records: u64,
    last: Option<(Namespace, String)>,
}

impl SnapshotWriter {
    /// Starts a snapshot of `fleet`.
    pub fn new(fleet: &Fleet) -> Result<SnapshotWriter, CoreError> {
        let body = postcard::to_allocvec(fleet).map_err(|e| corrupt(e.to_string()))?;
        let mut out = Vec::with_capacity(body.len() + 64);
        out.push(SNAPSHOT_FORMAT);
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        Ok(SnapshotWriter {
            out,
            records: 0,
            last: None,
        })
    }

    /// Appends one record; records must come in strictly increasing
    /// `(namespace, key)` order.
    pub fn record(&mut self, ns: &Namespace, record: &Record) -> Result<(), CoreError> {
        let id = (ns.clone(), record.key.clone());
        if self.last.as_ref().is_some_and(|last| *last >= id) {
            return Err(corrupt(format!(
                "record {ns}/{} written out of order",
                record.key
            )));
        }
        let body = postcard::to_allocvec(&(ns, record)).map_err(|e| corrupt(e.to_string()))?;
        if body.is_empty() || body.len() > RECORD_BYTES_MAX {
            return Err(corrupt(format!("record of {} bytes", body.len())));
        }
        self.out
            .extend_from_slice(&(body.len() as u32).to_le_bytes());
        self.out.extend_from_slice(&body);
        self.records += 1;
        self.last = Some(id);
        Ok(())
    }

    /// Ends the snapshot: the end marker and the record count.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.extend_from_slice(&0u32.to_le_bytes());
        self.out.extend_from_slice(&self.records.to_le_bytes());
        self.out
    }
}

/// Reads a snapshot: the fleet at once, then records one at a time.
pub struct SnapshotReader<'a> {
    rest: &'a [u8],
    records: u64,
    last: Option<(Namespace, String)>,
    ended: bool,
}

fn take<'a>(rest: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], CoreError> {
    if rest.len() < n {
        return Err(corrupt(format!("truncated {what}")));
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn take_u32(rest: &mut &[u8], what: &str) -> Result<u32, CoreError> {
    let b = take(rest, 4, what)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn take_u64(rest: &mut &[u8], what: &str) -> Result<u64, CoreError> {
    let b = take(rest, 8, what)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_le_bytes(a))
}

/// Splits a snapshot into its head (the format byte, the fleet's length and
/// the fleet, which a store may keep apart to read the fleet without the
/// records) and its encoded fleet, checking the format and the bounds.
pub fn snapshot_head(bytes: &[u8]) -> Result<(&[u8], &[u8]), CoreError> {
    let Some((&format, mut rest)) = bytes.split_first() else {
        return Err(corrupt("empty snapshot"));
    };
    if format != SNAPSHOT_FORMAT {
        return Err(corrupt(format!(
            "format {format} unknown, this build reads {SNAPSHOT_FORMAT}"
        )));
    }
    let len = take_u64(&mut rest, "fleet length")?;
    let len = usize::try_from(len)
        .ok()
        .filter(|n| *n <= FLEET_BYTES_MAX)
        .ok_or_else(|| corrupt(format!("fleet of {len} bytes")))?;
    let body = take(&mut rest, len, "fleet")?;
    let head_len = bytes.len() - rest.len();
    Ok((&bytes[..head_len], body))
}

impl<'a> SnapshotReader<'a> {
    /// Reads the format and the fleet; the records follow through
    /// [`SnapshotReader::next_record`].
    pub fn open(bytes: &'a [u8]) -> Result<(Fleet, SnapshotReader<'a>), CoreError> {
        let (head, body) = snapshot_head(bytes)?;
        let rest = &bytes[head.len()..];
        let fleet: Fleet = postcard::from_bytes(body).map_err(|e| corrupt(e.to_string()))?;
        fleet.check_invariants()?;
        let reader = SnapshotReader {
            rest,
            records: 0,
            last: None,
            ended: false,
        };
        Ok((fleet, reader))
    }

    /// The next record, or `None` after the last one (when the count and
    /// the end of the bytes have been checked).
    pub fn next_record(&mut self) -> Result<Option<(Namespace, Record)>, CoreError> {
        if self.ended {
            return Ok(None);
        }
        let len = take_u32(&mut self.rest, "record length")? as usize;
        if len == 0 {
            return self.end();
        }
        if len > RECORD_BYTES_MAX {
            return Err(corrupt(format!("record of {len} bytes")));
        }
        let body = take(&mut self.rest, len, "record")?;
        let (ns, record): (Namespace, Record) =
            postcard::from_bytes(body).map_err(|e| corrupt(e.to_string()))?;
        check_record(&ns, &record)?;
        let id = (ns, record.key.clone());
        if self.last.as_ref().is_some_and(|last| *last >= id) {
            return Err(corrupt(format!(
                "record {}/{} out of order or repeated",
                id.0, id.1
            )));
        }
        self.records += 1;
        let ns = id.0.clone();
        self.last = Some(id);
        Ok(Some((ns, record)))
    }

    fn end(&mut self) -> Result<Option<(Namespace, Record)>, CoreError> {
        let count = take_u64(&mut self.rest, "record count")?;
        if count != self.records {
            return Err(corrupt(format!(
                "{} records read, the snapshot says {count}",
                self.records
            )));
        }
        if !self.rest.is_empty() {
            return Err(corrupt(format!("{} trailing bytes", self.rest.len())));
        }
        self.ended = true;
        Ok(None)
    }
}

/// What a stored record must satisfy to be installed at all.
fn check_record(ns: &Namespace, record: &Record) -> Result<(), CoreError> {
    let key_ok = !record.key.is_empty() && record.key.len() <= IDEMPOTENCY_KEY_BYTES_MAX;
    if !key_ok || ns.as_str().len() > NAME_BYTES_MAX {
        return Err(corrupt(format!(
            "record in {ns} has a key of {} bytes",
            record.key.len()
        )));
    }
    Ok(())
}

impl<L: LedgerStore> StateMachine<L> {
    /// Encodes the whole state.
    pub fn snapshot(&self) -> Result<Vec<u8>, CoreError> {
        let mut writer = SnapshotWriter::new(self.fleet())?;
        self.ledger()
            .for_each_record(&mut |ns, record| writer.record(ns, record))?;
        Ok(writer.finish())
    }

    /// SHA-256 over the snapshot encoding, as lowercase hex.
    pub fn digest(&self) -> Result<String, CoreError> {
        let bytes = self.snapshot()?;
        Ok(hex_digest(&bytes))
    }
}

/// SHA-256 of bytes, as lowercase hex.
pub fn hex_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl StateMachine<Ledger> {
    /// Decodes a snapshot into an in-memory state; refuses unknown formats
    /// and corrupt bytes.
    pub fn restore(bytes: &[u8]) -> Result<StateMachine<Ledger>, CoreError> {
        let (fleet, mut reader) = SnapshotReader::open(bytes)?;
        let mut ledger = Ledger::new();
        while let Some((ns, record)) = reader.next_record()? {
            ledger.put(&ns, None, record);
        }
        Ok(StateMachine::from_parts(fleet, ledger))
    }
}
