//! Snapshots and digests of the whole state.
//!
//! A snapshot is a format byte, the fleet (postcard, length-prefixed), then
//! every ledger record in `(namespace, key)` order, each length-prefixed,
//! then an end marker with the record count. Records stream: a store writes
//! them from its own iterator into any `io::Write` ([`SnapshotWriter`]) and
//! installs them one by one from any `io::Read` ([`SnapshotReader`]), so a
//! snapshot never needs the whole ledger, as objects or as bytes, in
//! memory: a store streams it between a file and its database.
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
use std::io::{self, Read, Write};

/// The snapshot format this build writes and reads.
pub const SNAPSHOT_FORMAT: u8 = 6;

/// The head's length before the fleet: the format byte and the fleet's
/// length.
const HEAD_PREFIX_BYTES: usize = 1 + 8;

fn corrupt(what: impl Into<String>) -> CoreError {
    CoreError::Snapshot(what.into())
}

fn write_error(e: io::Error) -> CoreError {
    corrupt(format!("writing snapshot: {e}"))
}

/// Writes a snapshot into a sink (a buffer, a file): the fleet first, then
/// records in order, each written as it comes.
pub struct SnapshotWriter<W: Write = Vec<u8>> {
    out: W,
    head_len: u64,
    records: u64,
    last: Option<(Namespace, String)>,
}

impl SnapshotWriter<Vec<u8>> {
    /// Starts a snapshot of `fleet` in memory.
    pub fn new(fleet: &Fleet) -> Result<SnapshotWriter<Vec<u8>>, CoreError> {
        SnapshotWriter::to_sink(fleet, Vec::new())
    }
}

impl<W: Write> SnapshotWriter<W> {
    /// Starts a snapshot of `fleet` written into `out`.
    pub fn to_sink(fleet: &Fleet, mut out: W) -> Result<SnapshotWriter<W>, CoreError> {
        let body = postcard::to_allocvec(fleet).map_err(|e| corrupt(e.to_string()))?;
        if body.len() > FLEET_BYTES_MAX {
            return Err(corrupt(format!("fleet of {} bytes", body.len())));
        }
        out.write_all(&[SNAPSHOT_FORMAT]).map_err(write_error)?;
        out.write_all(&(body.len() as u64).to_le_bytes())
            .map_err(write_error)?;
        out.write_all(&body).map_err(write_error)?;
        Ok(SnapshotWriter {
            out,
            head_len: (HEAD_PREFIX_BYTES + body.len()) as u64,
            records: 0,
            last: None,
        })
    }

    /// How many leading bytes hold the format and the fleet (the head a
    /// store may read alone to restore the fleet without the records).
    pub fn head_len(&self) -> u64 {
        self.head_len
    }

    /// The sink, as written so far.
    pub fn sink(&self) -> &W {
        &self.out
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
            .write_all(&(body.len() as u32).to_le_bytes())
            .map_err(write_error)?;
        self.out.write_all(&body).map_err(write_error)?;
        self.records += 1;
        self.last = Some(id);
        Ok(())
    }

    /// Ends the snapshot (the end marker and the record count) and hands
    /// the sink back, flushed.
    pub fn finish(mut self) -> Result<W, CoreError> {
        self.out
            .write_all(&0u32.to_le_bytes())
            .map_err(write_error)?;
        self.out
            .write_all(&self.records.to_le_bytes())
            .map_err(write_error)?;
        self.out.flush().map_err(write_error)?;
        Ok(self.out)
    }
}

/// Reads a snapshot from a source (bytes, a file): the fleet at once, then
/// records one at a time, so memory holds one record however large the
/// snapshot.
pub struct SnapshotReader<R: Read> {
    source: R,
    buf: Vec<u8>,
    records: u64,
    last: Option<(Namespace, String)>,
    ended: bool,
}

/// Reads exactly `n` bytes into `buf` (replacing its contents).
fn take<R: Read>(source: &mut R, buf: &mut Vec<u8>, n: usize, what: &str) -> Result<(), CoreError> {
    buf.clear();
    let got = source
        .by_ref()
        .take(n as u64)
        .read_to_end(buf)
        .map_err(|e| corrupt(format!("reading {what}: {e}")))?;
    if got < n {
        return Err(corrupt(format!("truncated {what}")));
    }
    Ok(())
}

fn take_u32<R: Read>(source: &mut R, what: &str) -> Result<u32, CoreError> {
    let mut b = [0u8; 4];
    read_array(source, &mut b, what)?;
    Ok(u32::from_le_bytes(b))
}

fn take_u64<R: Read>(source: &mut R, what: &str) -> Result<u64, CoreError> {
    let mut b = [0u8; 8];
    read_array(source, &mut b, what)?;
    Ok(u64::from_le_bytes(b))
}

fn read_array<R: Read>(source: &mut R, b: &mut [u8], what: &str) -> Result<(), CoreError> {
    source.read_exact(b).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => corrupt(format!("truncated {what}")),
        _ => corrupt(format!("reading {what}: {e}")),
    })
}

impl<R: Read> SnapshotReader<R> {
    /// Reads the format and the fleet; the records follow through
    /// [`SnapshotReader::next_record`]. A source holding only the head (its
    /// first [`SnapshotWriter::head_len`] bytes) is enough for the fleet.
    pub fn open(mut source: R) -> Result<(Fleet, SnapshotReader<R>), CoreError> {
        let mut format = [0u8; 1];
        read_array(&mut source, &mut format, "snapshot format").map_err(|e| match e {
            CoreError::Snapshot(m) if m.starts_with("truncated") => corrupt("empty snapshot"),
            other => other,
        })?;
        if format[0] != SNAPSHOT_FORMAT {
            return Err(corrupt(format!(
                "format {} unknown, this build reads {SNAPSHOT_FORMAT}",
                format[0]
            )));
        }
        let len = take_u64(&mut source, "fleet length")?;
        let len = usize::try_from(len)
            .ok()
            .filter(|n| *n <= FLEET_BYTES_MAX)
            .ok_or_else(|| corrupt(format!("fleet of {len} bytes")))?;
        let mut buf = Vec::new();
        take(&mut source, &mut buf, len, "fleet")?;
        let fleet: Fleet = postcard::from_bytes(&buf).map_err(|e| corrupt(e.to_string()))?;
        fleet.check_invariants()?;
        buf.clear();
        buf.shrink_to(0);
        let reader = SnapshotReader {
            source,
            buf,
            records: 0,
            last: None,
            ended: false,
        };
        Ok((fleet, reader))
    }

    /// The next record, or `None` after the last one (when the count and
    /// the end of the source have been checked).
    pub fn next_record(&mut self) -> Result<Option<(Namespace, Record)>, CoreError> {
        if self.ended {
            return Ok(None);
        }
        let len = take_u32(&mut self.source, "record length")? as usize;
        if len == 0 {
            return self.end();
        }
        if len > RECORD_BYTES_MAX {
            return Err(corrupt(format!("record of {len} bytes")));
        }
        take(&mut self.source, &mut self.buf, len, "record")?;
        let (ns, record): (Namespace, Record) =
            postcard::from_bytes(&self.buf).map_err(|e| corrupt(e.to_string()))?;
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
        let count = take_u64(&mut self.source, "record count")?;
        if count != self.records {
            return Err(corrupt(format!(
                "{} records read, the snapshot says {count}",
                self.records
            )));
        }
        let mut extra = [0u8; 1];
        loop {
            match self.source.read(&mut extra) {
                Ok(0) => break,
                Ok(_) => return Err(corrupt("trailing bytes after the record count")),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(corrupt(format!("reading snapshot end: {e}"))),
            }
        }
        self.ended = true;
        Ok(None)
    }

    /// The source, after the records read so far.
    pub fn source(&self) -> &R {
        &self.source
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
        writer.finish()
    }

    /// SHA-256 over the snapshot encoding, as lowercase hex.
    pub fn digest(&self) -> Result<String, CoreError> {
        let bytes = self.snapshot()?;
        Ok(hex_digest(&bytes))
    }
}

/// SHA-256 of bytes, as lowercase hex.
pub fn hex_digest(bytes: &[u8]) -> String {
    crate::hex::lower(&Sha256::digest(bytes))
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
