//! The ledger in RocksDB: records and their indexes on disk, so a node's
//! memory stays bounded however many idempotency keys it holds.
//!
//! # Layout
//!
//! - `ledger`: `key(namespace) key(idempotency key)` → the encoded record.
//! - `ledger_index`: one empty value per index entry, under a tag byte:
//!   `i` intent, `t` tool, `o` operation id (each
//!   `tag key(ns) key(value) key(idempotency key)`), `s` status
//!   (`s key(ns) status-byte key(idempotency key)`), `d` deadlines
//!   (`d millis(8, big-endian) key(ns) key(idempotency key)`), and `c`
//!   per-namespace record counts (`c key(ns)` → u64, little-endian).
//! - `meta` / `ledger_applied`: the last log index whose ledger changes are
//!   on disk.
//!
//! `key(s)` escapes `0x00` as `0x00 0xff` and ends with `0x00 0x00`, so the
//! byte order of encoded tuples is the order of the tuples: every index scan
//! is a range scan that yields keys in key order, exactly like the
//! in-memory [`fusebox_core::ledger::Ledger`] (which the tests compare it to).
//!
//! # Atomicity with the log
//!
//! The state machine store calls [`LedgerControl::begin_entry`] before it
//! applies an entry and [`LedgerControl::commit`] after. Committed changes
//! are held in memory, one per record however many entries changed it,
//! and written behind: in one `WriteBatch` with their index changes and
//! the last committed entry's index, once they reach
//! [`UNWRITTEN_RECORDS_MAX`] records (by the [writer
//! thread](crate::ledger_writer), while the next entries are applied;
//! lookups find the records in memory until the batch is on disk, and
//! the next batch waits for it), before any read of the disk's index or
//! records (a listing, the deadline scan, a snapshot) and with every
//! fleet checkpoint (these two by the thread that reads or applies, after
//! any batch being written). So the ledger on disk is always exactly the ledger
//! after some entry, and a record begun and completed between two writes
//! reaches the disk once, completed: its in-progress status and lease
//! deadline are never written, nor deleted. A crash loses the unwritten
//! changes and any batch not yet written, and the replay below redoes them
//! from the log. On restart the fleet
//! (breakers, policies) comes from the last snapshot, which is never newer
//! than the ledger (its synced write follows every ledger batch it covers
//! in the one WAL), and openraft replays the log after it: entries the
//! ledger already holds are applied to the fleet only ([`LedgerControl`]
//! discards their ledger writes), which is sound because the fleet never
//! depends on what the ledger answers.
//!
//! # Failures
//!
//! A read that fails, or a stored value that does not decode, is latched:
//! the read answers "absent", the entry's batch is refused at commit, and
//! the error stops Raft before any answer computed from it is acknowledged.

use crate::codec::{decode, encode};
use crate::limits::{
    INSTALL_BATCH_BYTES_MAX, RECENT_RECORDS_BYTES_MAX, RECENT_RECORDS_MAX, UNWRITTEN_BYTES_MAX,
    UNWRITTEN_RECORDS_MAX,
};
use crate::ledger_writer::Writer;
use crate::rocks::{cf, db_error, CF_LEDGER, CF_LEDGER_INDEX, CF_META};
use fusebox_core::ledger::{deadline, Index, LedgerStore, Record, Status};
use fusebox_core::machine::{SnapshotReader, SnapshotWriter};
use fusebox_core::time::Timestamp;
use fusebox_core::{CoreError, Namespace, ToolName};
use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch, WriteOptions, DB};
use std::collections::btree_map::Entry as Slot;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

const KEY_LEDGER_APPLIED: &[u8] = b"ledger_applied";
/// The fleet saved with an entry's ledger batch (see [`LedgerControl::commit`]).
const KEY_FLEET_CHECKPOINT: &[u8] = b"fleet_checkpoint";
const TAG_INTENT: u8 = b'i';
const TAG_TOOL: u8 = b't';
const TAG_STATUS: u8 = b's';
const TAG_OPERATION: u8 = b'o';
const TAG_DEADLINE: u8 = b'd';
const TAG_COUNT: u8 = b'c';

/// Appends `s` so that encoded strings sort like the strings.
fn push_key(out: &mut Vec<u8>, s: &str) {
    for b in s.bytes() {
        if b == 0 {
            out.extend_from_slice(&[0, 0xff]);
        } else {
            out.push(b);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// Reads one string written by [`push_key`]; returns it and the rest.
fn read_key(bytes: &[u8]) -> Option<(String, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        match (bytes.get(i)?, bytes.get(i + 1)) {
            (0, Some(0)) => break,
            (0, Some(0xff)) => {
                out.push(0);
                i += 2;
            }
            (0, _) => return None,
            (b, _) => {
                out.push(*b);
                i += 1;
            }
        }
    }
    Some((String::from_utf8(out).ok()?, &bytes[i + 2..]))
}

fn record_key(ns: &Namespace, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(ns.as_str().len() + key.len() + 4);
    push_key(&mut out, ns.as_str());
    push_key(&mut out, key);
    out
}

fn status_byte(status: Status) -> u8 {
    match status {
        Status::InProgress => 1,
        Status::Succeeded => 2,
        Status::Failed => 3,
        Status::Ambiguous => 4,
        Status::Released => 5,
        Status::Abandoned => 6,
    }
}

/// The prefix every key of `index` in `ns` starts with, in a buffer with
/// room for `room` more bytes (keys are built on every apply: one
/// allocation each, not one per doubling).
fn index_prefix(ns: &Namespace, index: Index<'_>, room: usize) -> (Vec<u8>, bool) {
    let value = match index {
        Index::Intent(v) | Index::Operation(v) => v.len(),
        Index::Tool(t) => t.as_str().len(),
        Index::All | Index::Status(_) => 0,
    };
    // Tag or status byte, two terminated strings, and the key to come.
    let mut out = Vec::with_capacity(2 + ns.as_str().len() + 2 + value + 2 + room);
    let indexed = match index {
        Index::All => {
            push_key(&mut out, ns.as_str());
            return (out, false);
        }
        Index::Intent(v) => (TAG_INTENT, Some(v)),
        Index::Tool(t) => (TAG_TOOL, Some(t.as_str())),
        Index::Operation(v) => (TAG_OPERATION, Some(v)),
        Index::Status(s) => {
            out.push(TAG_STATUS);
            push_key(&mut out, ns.as_str());
            out.push(status_byte(s));
            return (out, true);
        }
    };
    out.push(indexed.0);
    push_key(&mut out, ns.as_str());
    if let Some(value) = indexed.1 {
        push_key(&mut out, value);
    }
    (out, true)
}

fn deadline_key(at: Timestamp, ns: &Namespace, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 8 + ns.as_str().len() + 2 + key.len() + 2);
    out.push(TAG_DEADLINE);
    out.extend_from_slice(&at.as_millis().to_be_bytes());
    push_key(&mut out, ns.as_str());
    push_key(&mut out, key);
    out
}

fn count_key(ns: &Namespace) -> Vec<u8> {
    let mut out = vec![TAG_COUNT];
    push_key(&mut out, ns.as_str());
    out
}

/// What one of a record's indexes lists it by. Equal values give equal
/// index keys, so a write builds only the keys of the indexes whose value
/// changed (a `complete` changes two or three of five: the status, the
/// deadline, and the operation id if it is the first to name one).
#[derive(PartialEq)]
enum Listed<'a> {
    Intent(&'a str),
    Tool(&'a ToolName),
    Status(Status),
    Operation(Option<&'a str>),
    Deadline(Option<Timestamp>),
}

/// How many indexes list a record.
const LISTINGS: usize = 5;

/// What each of the indexes lists `r` by, in a fixed order.
fn listings(r: &Record) -> [Listed<'_>; LISTINGS] {
    [
        Listed::Intent(&r.intent_id),
        Listed::Tool(&r.tool),
        Listed::Status(r.status),
        Listed::Operation(r.operation_id.as_deref()),
        Listed::Deadline(deadline(r)),
    ]
}

/// The index key `listed` puts the record `key` under, if any.
fn listed_key(ns: &Namespace, listed: &Listed<'_>, key: &str) -> Option<Vec<u8>> {
    let with_key = |index: Index<'_>| {
        let (mut k, _) = index_prefix(ns, index, key.len() + 2);
        push_key(&mut k, key);
        k
    };
    Some(match *listed {
        Listed::Intent(v) => with_key(Index::Intent(v)),
        Listed::Tool(t) => with_key(Index::Tool(t)),
        Listed::Status(s) => with_key(Index::Status(s)),
        Listed::Operation(op) => with_key(Index::Operation(op?)),
        Listed::Deadline(at) => deadline_key(at?, ns, key),
    })
}

/// The index keys that change when a record goes from `before` to `now`
/// (either absent; the same key if both are there), each with whether it
/// is present after: the keys of `before`'s listings go, `now`'s come, and
/// a listing both share stays as it is (rewriting it would cost a write
/// and change nothing).
fn index_changes(
    ns: &Namespace,
    before: Option<&Record>,
    now: Option<&Record>,
    mut change: impl FnMut(Vec<u8>, bool),
) {
    let Some(key) = now.or(before).map(|r| r.key.as_str()) else {
        return;
    };
    debug_assert!(before.is_none_or(|r| r.key == key), "one record's change");
    let (was, is) = (before.map(listings), now.map(listings));
    for i in 0..LISTINGS {
        let (was, is) = (was.as_ref().map(|l| &l[i]), is.as_ref().map(|l| &l[i]));
        if was == is {
            continue;
        }
        if let Some(k) = was.and_then(|listed| listed_key(ns, listed, key)) {
            change(k, false);
        }
        if let Some(k) = is.and_then(|listed| listed_key(ns, listed, key)) {
            change(k, true);
        }
    }
}

/// Decodes a `ledger` column family entry.
fn decode_record(key: &[u8], value: &[u8]) -> io::Result<(Namespace, Record)> {
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let (ns, rest) = read_key(key).ok_or_else(|| bad(format!("ledger key {key:02x?}")))?;
    let (k, rest) = read_key(rest).ok_or_else(|| bad(format!("ledger key {key:02x?}")))?;
    let ns = Namespace::new(ns).map_err(|e| bad(format!("ledger namespace: {e}")))?;
    let record: Record = decode("ledger record", value)?;
    if record.key != k || !rest.is_empty() {
        return Err(bad(format!("ledger record under the wrong key {key:02x?}")));
    }
    Ok((ns, record))
}

/// A record's change: as the disk holds it and as the entries applied
/// since left it, either absent. Its index changes follow from the two.
///
/// The maps below hold it boxed: it is two records (several hundred
/// bytes), and a B-tree insert shifts the values after its slot within a
/// node, which for fresh keys (arriving in no order) is about half a node
/// of them on every insert.
struct Change {
    ns: Namespace,
    before: Option<Record>,
    now: Option<Record>,
}

impl Change {
    fn bytes(&self) -> usize {
        [&self.before, &self.now]
            .into_iter()
            .flatten()
            .map(record_bytes)
            .sum()
    }
}

/// One entry's changes, waiting for [`LedgerControl::commit`].
#[derive(Default)]
struct Pending {
    /// The entry being applied, and whether the disk already holds it.
    entry: Option<u64>,
    replay: bool,
    /// Record key → its change. `before` is left empty when an earlier
    /// entry's [`Unwritten`] change already holds what the disk has.
    records: BTreeMap<Vec<u8>, Box<Change>>,
    counts: BTreeMap<Namespace, i64>,
}

/// The changes of committed entries not yet written to RocksDB, one per
/// record however many entries changed it, at most
/// [`UNWRITTEN_RECORDS_MAX`] records and [`UNWRITTEN_BYTES_MAX`] bytes.
#[derive(Default)]
struct Unwritten {
    records: BTreeMap<Vec<u8>, Box<Change>>,
    /// Namespaces whose record count changed.
    namespaces: BTreeSet<Namespace>,
    bytes: usize,
}

impl Unwritten {
    fn full(&self) -> bool {
        self.records.len() >= UNWRITTEN_RECORDS_MAX || self.bytes >= UNWRITTEN_BYTES_MAX
    }

    /// Adds an entry's change of the record `key`: the first change keeps
    /// what the disk holds, the last what the record is now.
    fn merge(&mut self, key: Vec<u8>, change: Box<Change>) {
        match self.records.entry(key) {
            Slot::Occupied(mut slot) => {
                let kept = slot.get_mut();
                self.bytes -= kept.bytes();
                kept.now = change.now;
                self.bytes += kept.bytes();
            }
            Slot::Vacant(slot) => {
                self.bytes += change.bytes();
                slot.insert(change);
            }
        }
    }
}

/// Changes handed to the [writer thread](crate::ledger_writer), being
/// written: lookups find them here until the batch is on disk.
struct Writing {
    records: Arc<BTreeMap<Vec<u8>, Box<Change>>>,
    /// The batch's outcome; `None` once it failed (the fault is latched,
    /// and the records stay here, where lookups still find them).
    done: Option<Receiver<io::Result<()>>>,
}

/// Records as the last written entries left them on disk, decoded (absent
/// for a removed one), oldest dropped first past [`RECENT_RECORDS_MAX`] or
/// [`RECENT_RECORDS_BYTES_MAX`]. Filled only after [`Unwritten`] changes
/// are written, emptied when a snapshot replaces the ledger: whatever it
/// holds is what a read of the disk would answer.
#[derive(Default)]
struct Recent {
    /// Record key → (the write's sequence number, the record and its size).
    records: HashMap<Vec<u8>, (u64, Option<Record>, usize)>,
    /// (sequence number, key) of every write kept, oldest first; a key
    /// written again leaves its older line here, skipped when dropped.
    order: VecDeque<(u64, Vec<u8>)>,
    next: u64,
    bytes: usize,
}

impl Recent {
    fn get(&self, key: &[u8]) -> Option<&Option<Record>> {
        self.records.get(key).map(|(_, record, _)| record)
    }

    fn keep(&mut self, key: Vec<u8>, record: Option<Record>) {
        let size = key.len() + record.as_ref().map_or(0, record_bytes);
        if size > RECENT_RECORDS_BYTES_MAX / 16 {
            // Too large to keep: forget any older copy instead.
            if let Some((_, _, old)) = self.records.remove(&key) {
                self.bytes -= old;
            }
            return;
        }
        let seq = self.next;
        self.next += 1;
        self.order.push_back((seq, key.clone()));
        if let Some((_, _, old)) = self.records.insert(key, (seq, record, size)) {
            self.bytes -= old;
        }
        self.bytes += size;
        while self.order.len() > RECENT_RECORDS_MAX || self.bytes > RECENT_RECORDS_BYTES_MAX {
            let Some((seq, key)) = self.order.pop_front() else {
                break;
            };
            if self.records.get(&key).is_some_and(|(s, _, _)| *s == seq) {
                if let Some((_, _, old)) = self.records.remove(&key) {
                    self.bytes -= old;
                }
            }
        }
    }
}

/// About what a record takes in memory: its strings, its result and the
/// rest of the struct.
fn record_bytes(r: &Record) -> usize {
    let strings = [
        Some(&r.key),
        Some(&r.fingerprint),
        Some(&r.intent_id),
        Some(&r.target),
        Some(&r.attempt),
        r.operation_id.as_ref(),
        r.reason.as_ref(),
    ];
    let text: usize = strings.iter().flatten().map(|s| s.len()).sum();
    std::mem::size_of::<Record>() + text + r.tool.as_str().len() + r.result.as_ref().map_or(0, Vec::len)
}

struct Inner {
    db: Arc<DB>,
    /// Records the last entries wrote, decoded.
    recent: Recent,
    /// Records per namespace as of the last committed entry (namespaces
    /// are bounded).
    counts: BTreeMap<Namespace, u64>,
    /// The last log index whose ledger changes are committed: on disk,
    /// being written, or in `unwritten`.
    applied: Option<u64>,
    unwritten: Unwritten,
    /// The previous [`Unwritten`] changes, being written by `writer`.
    writing: Option<Writing>,
    writer: Writer,
    /// No deadline before this (millis) is indexed: where [`LedgerStore::due`]
    /// starts its scan. Deadlines are removed as records complete, and each
    /// removal leaves a tombstone in RocksDB until compaction; a scan from
    /// the index's start would step over every one of them, every tick.
    deadline_floor: u64,
    pending: Pending,
    fault: Option<String>,
    /// Tests only: the batches handed to the writer fail, as a write that
    /// RocksDB refused would.
    #[cfg(test)]
    fail_batches: bool,
}

/// The RocksDB ledger: the [`LedgerStore`] the state machine uses. Clones
/// share one ledger; [`LedgerControl`] marks entry boundaries on it.
#[derive(Clone)]
pub struct RocksLedger {
    inner: Arc<Mutex<Inner>>,
}

/// The store's side of a [`RocksLedger`]: entry boundaries, commits,
/// snapshot writing and installing.
#[derive(Clone)]
pub(crate) struct LedgerControl {
    ledger: RocksLedger,
}

impl RocksLedger {
    /// Opens the ledger in `db`: loads the counts and the applied index.
    pub(crate) fn open(db: Arc<DB>) -> io::Result<(RocksLedger, LedgerControl)> {
        let applied = load_applied(&db)?;
        let counts = load_counts(&db)?;
        let total: u64 = counts.values().sum();
        tracing::info!(records = total, ledger_applied = ?applied, "ledger opened");
        let ledger = RocksLedger {
            inner: Arc::new(Mutex::new(Inner {
                db,
                recent: Recent::default(),
                counts,
                applied,
                unwritten: Unwritten::default(),
                writing: None,
                writer: Writer::start()?,
                deadline_floor: 0,
                pending: Pending::default(),
                fault: None,
                #[cfg(test)]
                fail_batches: false,
            })),
        };
        let control = LedgerControl {
            ledger: ledger.clone(),
        };
        Ok((ledger, control))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding it; if something did, the latched
        // fault (if any) still refuses the next commit.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    fn latch(&mut self, doing: &str, e: impl std::fmt::Display) {
        tracing::error!(error = %e, doing, "ledger storage failed");
        self.fault.get_or_insert_with(|| format!("{doing}: {e}"));
    }

    fn read_record(&mut self, key: &[u8]) -> Option<Record> {
        let changed = (self.pending.records.get(key))
            .or_else(|| self.unwritten.records.get(key))
            .or_else(|| self.writing.as_ref()?.records.get(key));
        if let Some(change) = changed {
            return change.now.clone();
        }
        if let Some(recent) = self.recent.get(key) {
            return recent.clone();
        }
        let db = self.db.clone();
        let family = match cf(&db, CF_LEDGER) {
            Ok(f) => f,
            Err(e) => return self.latched("open ledger family", e),
        };
        let bytes = match db.get_pinned_cf(family, key) {
            Ok(b) => b?,
            Err(e) => return self.latched("read ledger record", e),
        };
        match decode_record(key, &bytes) {
            Ok((_, record)) => Some(record),
            Err(e) => self.latched("decode ledger record", e),
        }
    }

    /// Notes that this entry changes the record `key` of `ns` from `old`
    /// (what [`Inner::read_record`] answered) to `now`.
    fn stage(&mut self, ns: &Namespace, key: Vec<u8>, old: Option<&Record>, now: Option<Record>) {
        match self.pending.records.entry(key) {
            Slot::Occupied(mut slot) => slot.get_mut().now = now,
            Slot::Vacant(slot) => {
                // `old` is what the disk holds unless an unwritten change
                // already answered it (and keeps what the disk holds); one
                // being written answers what the disk holds once it is,
                // before this change is written.
                let before = if self.unwritten.records.contains_key(slot.key()) {
                    None
                } else {
                    old.cloned()
                };
                slot.insert(Box::new(Change {
                    ns: ns.clone(),
                    before,
                    now,
                }));
            }
        }
    }

    /// Writes the unwritten changes in one batch as of the last committed
    /// entry, with `checkpoint` (an encoded fleet as of that entry) if
    /// given. A failure is latched: the disk no longer follows the entries.
    fn write_unwritten(&mut self, checkpoint: Option<&[u8]>) -> io::Result<()> {
        self.finish_writing(true)?;
        if self.unwritten.records.is_empty() && checkpoint.is_none() {
            return Ok(());
        }
        let Some(index) = self.applied else {
            return Ok(());
        };
        let counts = self.changed_counts();
        let unwritten = &self.unwritten.records;
        let written = unwritten_batch(&self.db, unwritten, &counts, index, checkpoint)
            .and_then(|batch| {
                self.db
                    .write(batch)
                    .map_err(|e| db_error("write ledger batch", e))
            });
        if let Err(e) = written {
            self.latch("write ledger batch", &e);
            return Err(e);
        }
        let written = std::mem::take(&mut self.unwritten).records;
        for (key, change) in &written {
            // An entry being applied that changed this record left its
            // `before` to the unwritten change: it is on disk now.
            if let Some(pending) = self.pending.records.get_mut(key) {
                pending.before.clone_from(&change.now);
            }
        }
        self.written(written.into_iter().map(|(key, change)| (key, change.now)));
        Ok(())
    }

    /// The record counts of the namespaces the unwritten changes touch.
    fn changed_counts(&self) -> Vec<(Namespace, u64)> {
        let namespaces = self.unwritten.namespaces.iter();
        let count = |ns: &Namespace| self.counts.get(ns).copied().unwrap_or(0);
        namespaces.map(|ns| (ns.clone(), count(ns))).collect()
    }

    /// Notes that `records` (key, record as written) are on disk: the
    /// deadline floor, and the records kept decoded.
    fn written(&mut self, records: impl IntoIterator<Item = (Vec<u8>, Option<Record>)>) {
        for (key, now) in records {
            // A deadline just written may lie before the floor.
            if let Some(at) = now.as_ref().and_then(deadline) {
                self.deadline_floor = self.deadline_floor.min(at.as_millis());
            }
            self.recent.keep(key, now);
        }
    }

    /// Hands the unwritten changes to the writer thread (after the batch it
    /// holds, if any, is on disk; in inline mode they are written here).
    /// Entries after them are applied meanwhile: an entry that changes one
    /// of their records reads it from them, and its own change, written
    /// after them, starts from what they leave on disk.
    fn hand_off(&mut self) -> io::Result<()> {
        self.finish_writing(true)?;
        let Some(index) = self.applied else {
            return Ok(());
        };
        let counts = self.changed_counts();
        let records = Arc::new(std::mem::take(&mut self.unwritten).records);
        let (db, batch_records) = (self.db.clone(), Arc::clone(&records));
        #[cfg(test)]
        let fail = self.fail_batches;
        let done = self.writer.write(move || {
            #[cfg(test)]
            if fail {
                return Err(io::Error::other("injected batch failure"));
            }
            let batch = unwritten_batch(&db, &batch_records, &counts, index, None)?;
            // Released before the answer: the ledger then owns the records
            // alone and moves them without a copy.
            drop(batch_records);
            db.write(batch)
                .map_err(|e| db_error("write ledger batch", e))
        });
        self.writing = Some(Writing {
            records,
            done: Some(done),
        });
        // Done already in inline mode.
        self.finish_writing(false)
    }

    /// Finishes with the batch being written, if any: waits for it if
    /// `wait`, or else only if it is already done. A failure is latched
    /// and answered again on every later call.
    fn finish_writing(&mut self, wait: bool) -> io::Result<()> {
        let Some(writing) = &mut self.writing else {
            return Ok(());
        };
        let outcome = match &writing.done {
            // Latched (and logged) when it failed.
            None => return Err(io::Error::other("an earlier ledger batch failed")),
            Some(done) if wait => done.recv().unwrap_or_else(|_| Err(writer_stopped())),
            Some(done) => match done.try_recv() {
                Ok(outcome) => outcome,
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => Err(writer_stopped()),
            },
        };
        if let Err(e) = outcome {
            writing.done = None;
            self.latch("write ledger batch", &e);
            return Err(e);
        }
        if let Some(writing) = self.writing.take() {
            // The writer released its copy before answering, so the records
            // move without a copy.
            match Arc::try_unwrap(writing.records) {
                Ok(records) => self.written(records.into_iter().map(|(k, c)| (k, c.now))),
                Err(shared) => self.written(shared.iter().map(|(k, c)| (k.clone(), c.now.clone()))),
            }
        }
        Ok(())
    }

    /// Writes the unwritten changes before a read of the disk's index or
    /// records; a failure is latched, and the read finds what is there.
    fn write_before_reading(&mut self) {
        let _latched = self.write_unwritten(None);
    }

    fn latched<T>(&mut self, doing: &str, e: impl std::fmt::Display) -> Option<T> {
        self.latch(doing, e);
        None
    }

    /// Index keys under `prefix` from `start`, decoded to their last key
    /// component, at most `budget`.
    fn scan_keys(
        &mut self,
        family: &str,
        prefix: &[u8],
        start: &[u8],
        upper: Option<Vec<u8>>,
        budget: usize,
    ) -> Vec<Vec<u8>> {
        if budget == 0 {
            return Vec::new();
        }
        let db = self.db.clone();
        let handle = match cf(&db, family) {
            Ok(f) => f,
            Err(e) => return self.latched("open ledger family", e).unwrap_or_default(),
        };
        let mut options = ReadOptions::default();
        options.set_iterate_lower_bound(start.to_vec());
        if let Some(upper) = upper {
            options.set_iterate_upper_bound(upper);
        }
        let iter = db.iterator_cf_opt(
            handle,
            options,
            IteratorMode::From(start, Direction::Forward),
        );
        let mut out = Vec::new();
        for item in iter {
            match item {
                Ok((k, _)) if k.starts_with(prefix) => out.push(k[prefix.len()..].to_vec()),
                Ok(_) => break,
                Err(e) => {
                    self.latch("scan ledger index", e);
                    break;
                }
            }
            if out.len() >= budget {
                break;
            }
        }
        out
    }
}

impl LedgerStore for RocksLedger {
    fn get(&self, ns: &Namespace, key: &str) -> Option<Record> {
        self.lock().read_record(&record_key(ns, key))
    }

    fn len(&self, ns: &Namespace) -> usize {
        let inner = self.lock();
        let stored = inner.counts.get(ns).copied().unwrap_or(0) as i64;
        let delta = inner.pending.counts.get(ns).copied().unwrap_or(0);
        usize::try_from(stored + delta).unwrap_or(0)
    }

    fn put(&mut self, ns: &Namespace, old: Option<&Record>, record: Record) {
        let mut inner = self.lock();
        if old.is_none() {
            *inner.pending.counts.entry(ns.clone()).or_default() += 1;
        }
        inner.stage(ns, record_key(ns, &record.key), old, Some(record));
    }

    fn remove(&mut self, ns: &Namespace, old: &Record) {
        let mut inner = self.lock();
        *inner.pending.counts.entry(ns.clone()).or_default() -= 1;
        inner.stage(ns, record_key(ns, &old.key), Some(old), None);
    }

    fn due(&self, now: Timestamp, max: usize) -> Vec<(Namespace, String)> {
        let mut inner = self.lock();
        inner.write_before_reading();
        let prefix = [TAG_DEADLINE];
        // From the floor (nothing is indexed before it), to the first
        // deadline after `now`: deadlines sort by time.
        let mut start = vec![TAG_DEADLINE];
        start.extend_from_slice(&inner.deadline_floor.to_be_bytes());
        let mut upper = vec![TAG_DEADLINE];
        upper.extend_from_slice(&now.as_millis().saturating_add(1).to_be_bytes());
        let raw = inner.scan_keys(CF_LEDGER_INDEX, &prefix, &start, Some(upper), max);
        let mut out = Vec::new();
        let mut first_due = None;
        for rest in raw {
            let Some((at, tail)) = rest.split_first_chunk::<8>() else {
                inner.latch("decode deadline", "short key");
                break;
            };
            let at = u64::from_be_bytes(*at);
            if at > now.as_millis() {
                break;
            }
            first_due.get_or_insert(at);
            let parsed = read_key(tail).and_then(|(ns, tail)| Some((ns, read_key(tail)?.0)));
            match parsed.and_then(|(ns, k)| Some((Namespace::new(ns).ok()?, k))) {
                Some(pair) => out.push(pair),
                None => {
                    inner.latch("decode deadline", "bad key");
                    break;
                }
            }
            if out.len() >= max {
                break;
            }
        }
        // Nothing before the floor, and nothing else up to the first
        // deadline found (or up to `now`, if none was): the next scan may
        // start there. A deadline written later lowers the floor again.
        if inner.fault.is_none() {
            let floor = first_due.unwrap_or_else(|| now.as_millis().saturating_add(1));
            inner.deadline_floor = inner.deadline_floor.max(floor);
        }
        out
    }

    fn scan(&self, ns: &Namespace, index: Index<'_>, after: &str, budget: usize) -> Vec<String> {
        let mut inner = self.lock();
        inner.write_before_reading();
        let (prefix, in_index) = index_prefix(ns, index, 0);
        let family = if in_index { CF_LEDGER_INDEX } else { CF_LEDGER };
        let mut start = prefix.clone();
        push_key(&mut start, after);
        // One more than asked: the cursor key itself is skipped.
        let raw = inner.scan_keys(family, &prefix, &start, None, budget.saturating_add(1));
        let mut keys = Vec::new();
        for rest in raw {
            match read_key(&rest) {
                Some((k, _)) if k.as_str() > after => keys.push(k),
                Some(_) => {}
                None => {
                    inner.latch("decode ledger index", "bad key");
                    break;
                }
            }
        }
        keys.truncate(budget);
        keys
    }

    fn for_each_record(
        &self,
        f: &mut dyn FnMut(&Namespace, &Record) -> Result<(), CoreError>,
    ) -> Result<(), CoreError> {
        let db = {
            let mut inner = self.lock();
            inner.write_unwritten(None).map_err(snapshot_error)?;
            inner.db.clone()
        };
        let family = cf(&db, CF_LEDGER).map_err(snapshot_error)?;
        for item in db.iterator_cf(family, IteratorMode::Start) {
            let (k, v) = item.map_err(|e| snapshot_error(db_error("iterate ledger", e)))?;
            let (ns, record) = decode_record(&k, &v).map_err(snapshot_error)?;
            f(&ns, &record)?;
        }
        Ok(())
    }
}

fn writer_stopped() -> io::Error {
    io::Error::other("the ledger writer stopped without writing its batch")
}

fn snapshot_error(e: io::Error) -> CoreError {
    CoreError::Snapshot(e.to_string())
}

impl LedgerControl {
    /// Starts applying log entry `index`; if the ledger on disk already
    /// holds it, the entry's ledger writes will be discarded, and this
    /// answers `true` (the entry is a replay).
    pub(crate) fn begin_entry(&self, index: u64) -> bool {
        let mut inner = self.ledger.lock();
        let replay = inner.applied.is_some_and(|applied| index <= applied);
        inner.pending = Pending {
            entry: Some(index),
            replay,
            ..Pending::default()
        };
        replay
    }

    /// Commits the entry's changes: they join the unwritten ones, which
    /// are written in one batch (not synced: the committed log is durable,
    /// and a later synced write or a replay covers it) once they are
    /// [full](Unwritten::full), before a read of the disk, or with
    /// `checkpoint` (an encoded fleet as of this entry) if given: the fleet
    /// and the ledger then reach the disk together, and a restart resumes
    /// from both. Refuses if a read failed while applying the entry, or if
    /// writing an earlier batch failed (found here, after this entry's
    /// changes joined the unwritten ones: the node stops either way).
    pub(crate) fn commit(&self, checkpoint: Option<&[u8]>) -> io::Result<()> {
        let mut guard = self.ledger.lock();
        let inner = &mut *guard;
        let pending = std::mem::take(&mut inner.pending);
        if let Some(fault) = inner.fault.clone() {
            return Err(io::Error::other(format!("ledger storage failed: {fault}")));
        }
        let Some(index) = pending.entry else {
            return Ok(());
        };
        if pending.replay || (pending.records.is_empty() && checkpoint.is_none()) {
            return Ok(());
        }
        for (ns, delta) in pending.counts {
            let n = inner.counts.entry(ns.clone()).or_default();
            *n = n.saturating_add_signed(delta);
            inner.unwritten.namespaces.insert(ns);
        }
        inner.counts.retain(|_, n| *n > 0);
        for (key, change) in pending.records {
            inner.unwritten.merge(key, change);
        }
        inner.applied = Some(index);
        if checkpoint.is_some() {
            inner.write_unwritten(checkpoint)?;
        } else if inner.unwritten.full() {
            inner.hand_off()?;
        } else {
            inner.finish_writing(false)?;
        }
        Ok(())
    }

    /// Writes the unwritten changes, so that a view of the disk holds the
    /// ledger as of the last committed entry (a snapshot takes one).
    pub(crate) fn write_unwritten(&self) -> io::Result<()> {
        self.ledger.lock().write_unwritten(None)
    }

    /// Records on disk, in all namespaces.
    pub(crate) fn total(&self) -> u64 {
        self.ledger.lock().counts.values().sum()
    }

    /// Writes every record of the ledger, as of a point-in-time view of the
    /// database, into `writer`. Runs concurrently with applies.
    pub(crate) fn write_snapshot_records<W: Write>(
        &self,
        db: &DB,
        view: &rocksdb::SnapshotWithThreadMode<'_, DB>,
        writer: &mut SnapshotWriter<W>,
    ) -> io::Result<()> {
        let family = cf(db, CF_LEDGER)?;
        for item in view.iterator_cf(family, IteratorMode::Start) {
            let (k, v) = item.map_err(|e| db_error("iterate ledger for snapshot", e))?;
            let (ns, record) = decode_record(&k, &v)?;
            writer
                .record(&ns, &record)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        Ok(())
    }

    /// Replaces the whole ledger with a snapshot's records, as of log index
    /// `index`. Records go in batches of at most
    /// [`INSTALL_BATCH_BYTES_MAX`], so memory holds one batch however
    /// large the snapshot; `commit` checks the reader (its checksum) and
    /// adds its own writes to the last batch, which is synced and holds the
    /// counts and the applied index. Until that batch the ledger on disk is
    /// half replaced: the caller records the install first and redoes it
    /// from the start after a crash.
    pub(crate) fn install<R: Read>(
        &self,
        reader: &mut SnapshotReader<R>,
        index: Option<u64>,
        commit: impl FnOnce(&SnapshotReader<R>, &mut WriteBatch) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut inner = self.ledger.lock();
        // A batch being written lands before the install's deletions, and
        // the snapshot replaces it; if it failed, its fault stays latched
        // and stops the node at the next commit, as any failed write does.
        let _replaced = inner.finish_writing(true);
        inner.writing = None;
        // The snapshot's deadlines may lie anywhere, and its records are
        // not the ones kept.
        inner.deadline_floor = 0;
        inner.recent = Recent::default();
        inner.unwritten = Unwritten::default();
        let db = inner.db.clone();
        let (records, indexes, meta) = (
            cf(&db, CF_LEDGER)?,
            cf(&db, CF_LEDGER_INDEX)?,
            cf(&db, CF_META)?,
        );
        let write = |batch: WriteBatch| {
            db.write(batch)
                .map_err(|e| db_error("install ledger snapshot", e))
        };
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(records, [0u8].as_slice(), [0xffu8].as_slice());
        batch.delete_range_cf(indexes, [0u8].as_slice(), [0xffu8].as_slice());
        let mut counts: BTreeMap<Namespace, u64> = BTreeMap::new();
        let invalid = |e: CoreError| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
        while let Some((ns, record)) = reader.next_record().map_err(invalid)? {
            index_changes(&ns, None, Some(&record), |k, _| batch.put_cf(indexes, k, []));
            batch.put_cf(
                records,
                record_key(&ns, &record.key),
                encode("ledger record", &record)?,
            );
            *counts.entry(ns).or_default() += 1;
            if batch.size_in_bytes() >= INSTALL_BATCH_BYTES_MAX {
                write(std::mem::take(&mut batch))?;
            }
        }
        for (ns, n) in &counts {
            batch.put_cf(indexes, count_key(ns), n.to_le_bytes());
        }
        match index {
            Some(i) => batch.put_cf(meta, KEY_LEDGER_APPLIED, encode("ledger applied", &i)?),
            None => batch.delete_cf(meta, KEY_LEDGER_APPLIED),
        }
        // The installed snapshot's fleet replaces any saved one.
        batch.delete_cf(meta, KEY_FLEET_CHECKPOINT);
        commit(reader, &mut batch)?;
        let mut options = WriteOptions::default();
        options.set_sync(true);
        db.write_opt(batch, &options)
            .map_err(|e| db_error("install ledger snapshot", e))?;
        crate::rocks::synced(&db);
        inner.counts = counts;
        inner.applied = index;
        inner.pending = Pending::default();
        Ok(())
    }
}

/// The batch that writes `unwritten` as of entry `index`: records, their
/// index changes, changed counts, the applied index and the checkpoint, if
/// any.
fn unwritten_batch(
    db: &DB,
    unwritten: &BTreeMap<Vec<u8>, Box<Change>>,
    counts: &[(Namespace, u64)],
    index: u64,
    checkpoint: Option<&[u8]>,
) -> io::Result<WriteBatch> {
    let (records, indexes, meta) = (
        cf(db, CF_LEDGER)?,
        cf(db, CF_LEDGER_INDEX)?,
        cf(db, CF_META)?,
    );
    let mut batch = WriteBatch::default();
    let mut index_keys = Vec::with_capacity(unwritten.len() * LISTINGS);
    for (k, change) in unwritten {
        match (&change.before, &change.now) {
            (_, Some(r)) => batch.put_cf(records, k, encode("ledger record", r)?),
            (Some(_), None) => batch.delete_cf(records, k),
            (None, None) => {}
        }
        index_changes(
            &change.ns,
            change.before.as_ref(),
            change.now.as_ref(),
            |k, present| index_keys.push((k, present)),
        );
    }
    // In key order, as the records are: RocksDB inserts a batch's keys
    // into a column family's memtable (a skip list) one after another, and
    // starts each search from where the last insert ended, so keys that
    // follow each other skip most of the search. A record's five index
    // keys lie in five parts of the index; inserted record by record, each
    // search started far from its key. Each index key is one record's, and
    // a change puts or deletes it once, so the order changes nothing else.
    index_keys.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
    for (k, present) in index_keys {
        match present {
            true => batch.put_cf(indexes, k, []),
            false => batch.delete_cf(indexes, k),
        }
    }
    for (ns, n) in counts {
        match n {
            0 => batch.delete_cf(indexes, count_key(ns)),
            n => batch.put_cf(indexes, count_key(ns), n.to_le_bytes()),
        }
    }
    batch.put_cf(meta, KEY_LEDGER_APPLIED, encode("ledger applied", &index)?);
    if let Some(fleet) = checkpoint {
        batch.put_cf(meta, KEY_FLEET_CHECKPOINT, fleet);
    }
    Ok(batch)
}

fn load_applied(db: &DB) -> io::Result<Option<u64>> {
    let meta = cf(db, CF_META)?;
    let bytes = db
        .get_pinned_cf(meta, KEY_LEDGER_APPLIED)
        .map_err(|e| db_error("read ledger applied index", e))?;
    bytes
        .map(|b| decode("ledger applied index", &b))
        .transpose()
}

/// The fleet last saved with a ledger batch, encoded, if any.
pub(crate) fn load_fleet_checkpoint(db: &DB) -> io::Result<Option<Vec<u8>>> {
    let meta = cf(db, CF_META)?;
    db.get_cf(meta, KEY_FLEET_CHECKPOINT)
        .map_err(|e| db_error("read the fleet checkpoint", e))
}

fn load_counts(db: &DB) -> io::Result<BTreeMap<Namespace, u64>> {
    let indexes = cf(db, CF_LEDGER_INDEX)?;
    let prefix = [TAG_COUNT];
    let mut counts = BTreeMap::new();
    let iter = db.iterator_cf(indexes, IteratorMode::From(&prefix, Direction::Forward));
    for item in iter {
        let (k, v) = item.map_err(|e| db_error("read ledger counts", e))?;
        if !k.starts_with(&prefix) {
            break;
        }
        let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("ledger count {k:02x?}"));
        let (ns, rest) = read_key(&k[1..]).ok_or_else(bad)?;
        let ns = Namespace::new(ns).map_err(|_| bad())?;
        let n: [u8; 8] = v.as_ref().try_into().map_err(|_| bad())?;
        if !rest.is_empty() {
            return Err(bad());
        }
        counts.insert(ns, u64::from_le_bytes(n));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_keys_sort_like_their_strings() {
        let words = ["", "a", "a\0", "a\0b", "ab", "b", "\0", "a\u{1}"];
        for x in words {
            for y in words {
                let (mut ex, mut ey) = (Vec::new(), Vec::new());
                push_key(&mut ex, x);
                push_key(&mut ex, "z");
                push_key(&mut ey, y);
                push_key(&mut ey, "z");
                assert_eq!(x.cmp(y), ex.cmp(&ey), "{x:?} vs {y:?}");
                assert_eq!(read_key(&ex).map(|(s, _)| s).as_deref(), Some(x));
            }
        }
    }

    /// A ledger in a new database, and the folder that holds it.
    fn opened() -> (tempfile::TempDir, RocksLedger, LedgerControl) {
        let dir = tempfile::TempDir::new().unwrap();
        let db = Arc::new(crate::rocks::open_db(dir.path()).unwrap());
        let (ledger, control) = RocksLedger::open(db).unwrap();
        (dir, ledger, control)
    }

    /// Applies `f` to the ledger as one entry, `index`, and writes it.
    fn entry(control: &LedgerControl, index: u64, f: impl FnOnce(&mut RocksLedger)) {
        unwritten_entry(control, index, f);
        control.write_unwritten().unwrap();
    }

    /// Applies `f` to the ledger as one entry, `index`, committed only.
    fn unwritten_entry(control: &LedgerControl, index: u64, f: impl FnOnce(&mut RocksLedger)) {
        control.begin_entry(index);
        f(&mut control.ledger.clone());
        control.commit(None).unwrap();
    }

    fn begin(ledger: &mut RocksLedger, key: &str, now: u64, lease_ms: u64) {
        let request = fusebox_core::ledger::BeginRequest {
            key: key.into(),
            fingerprint: "fp".into(),
            intent_id: "intent".into(),
            tool: fusebox_core::ToolName::new("charge").unwrap(),
            target: "acct".into(),
            effect: fusebox_core::policy::EffectClass::NonIdempotentWrite,
            attempt: "a".into(),
            lease_ms,
        };
        let ns = Namespace::new("fleet").unwrap();
        ledger
            .begin(&ns, &request, Timestamp::from_millis(now))
            .unwrap();
    }

    fn due_keys(control: &LedgerControl, index: u64, now: u64, max: usize) -> Vec<String> {
        control.begin_entry(index);
        let due = control.ledger.due(Timestamp::from_millis(now), max);
        control.commit(None).unwrap();
        due.into_iter().map(|(_, k)| k).collect()
    }

    #[test]
    fn the_deadline_scan_skips_only_what_cannot_be_due() {
        let (_dir, _, control) = opened();
        // Leases lapse at 2_000, 2_010, ..., 2_090.
        entry(&control, 1, |l| {
            for i in 0..10 {
                begin(l, &format!("k{i}"), 1_000, 1_000 + i * 10);
            }
        });
        assert!(due_keys(&control, 2, 1_500, 100).is_empty());
        // A capped scan leaves the rest (and what it found, untouched) due.
        assert_eq!(due_keys(&control, 3, 5_000, 3), ["k0", "k1", "k2"]);
        assert_eq!(due_keys(&control, 4, 5_000, 3), ["k0", "k1", "k2"]);
        assert_eq!(due_keys(&control, 5, 5_000, 100).len(), 10);
        // All gone: the next scan starts after 5_000...
        let ns = Namespace::new("fleet").unwrap();
        entry(&control, 6, |l| {
            for i in 0..10 {
                let old = l.get(&ns, &format!("k{i}")).unwrap();
                l.remove(&ns, &old);
            }
        });
        assert!(due_keys(&control, 7, 5_000, 100).is_empty());
        // ...until a deadline before it is written.
        entry(&control, 8, |l| begin(l, "late", 1_000, 500));
        assert_eq!(due_keys(&control, 9, 5_000, 100), ["late"]);
        assert_eq!(control.ledger.lock().deadline_floor, 1_500);
    }

    /// The record on disk for `key` in namespace `fleet`, read past the
    /// recent records.
    fn on_disk(control: &LedgerControl, key: &str) -> Option<Record> {
        let db = control.ledger.lock().db.clone();
        let k = record_key(&Namespace::new("fleet").unwrap(), key);
        let bytes = db.get_cf(cf(&db, CF_LEDGER).unwrap(), &k).unwrap()?;
        Some(decode_record(&k, &bytes).unwrap().1)
    }

    fn kept(control: &LedgerControl, key: &str) -> Option<Option<Record>> {
        let k = record_key(&Namespace::new("fleet").unwrap(), key);
        control.ledger.lock().recent.get(&k).cloned()
    }

    #[test]
    fn recent_records_answer_what_the_disk_holds() {
        let (_dir, ledger, control) = opened();
        let ns = Namespace::new("fleet").unwrap();
        entry(&control, 1, |l| begin(l, "k", 1_000, 500));
        assert!(on_disk(&control, "k").is_some());
        assert_eq!(kept(&control, "k"), Some(on_disk(&control, "k")));
        assert_eq!(ledger.get(&ns, "k"), on_disk(&control, "k"));

        // A replayed entry's writes are discarded, and so not kept.
        control.begin_entry(1);
        let old = ledger.get(&ns, "k").unwrap();
        control.ledger.clone().remove(&ns, &old);
        control.commit(None).unwrap();
        assert_eq!(kept(&control, "k"), Some(on_disk(&control, "k")));
        assert!(ledger.get(&ns, "k").is_some());

        // A removal is kept as absent.
        entry(&control, 2, |l| {
            let old = l.get(&ns, "k").unwrap();
            l.remove(&ns, &old);
        });
        assert_eq!(on_disk(&control, "k"), None);
        assert_eq!(kept(&control, "k"), Some(None));
        assert_eq!(ledger.get(&ns, "k"), None);

        // An entry that fails to commit keeps nothing.
        entry(&control, 3, |l| begin(l, "k", 1_000, 500));
        control.begin_entry(4);
        let old = ledger.get(&ns, "k").unwrap();
        control.ledger.clone().remove(&ns, &old);
        control.ledger.lock().latch("test", "injected");
        assert!(control.commit(None).is_err());
        assert!(kept(&control, "k").is_some_and(|r| r.is_some()));
    }

    /// A RocksDB property of the index's active memtable, as a number.
    fn index_memtable(control: &LedgerControl, property: &str) -> u64 {
        let db = control.ledger.lock().db.clone();
        let family = cf(&db, CF_LEDGER_INDEX).unwrap();
        db.property_int_value_cf(family, property).unwrap().unwrap()
    }

    #[test]
    fn a_begin_and_its_complete_reach_the_disk_once_in_their_final_state() {
        let (_dir, ledger, control) = opened();
        let ns = Namespace::new("fleet").unwrap();
        unwritten_entry(&control, 1, |l| begin(l, "k", 1_000, 500));
        assert_eq!(ledger.get(&ns, "k").map(|r| r.status), Some(Status::InProgress));
        assert_eq!(on_disk(&control, "k"), None, "not written yet");
        unwritten_entry(&control, 2, |l| {
            let old = l.get(&ns, "k").unwrap();
            let mut done = old.clone();
            done.status = Status::Succeeded;
            done.lease_until = None;
            done.expires_at = Some(Timestamp::from_millis(90_000));
            l.put(&ns, Some(&old), done);
        });
        assert_eq!(on_disk(&control, "k"), None, "not written yet");
        assert_eq!(load_applied(&control.ledger.lock().db).unwrap(), None);

        control.write_unwritten().unwrap();
        let done = ledger.get(&ns, "k").unwrap();
        assert_eq!(on_disk(&control, "k"), Some(done.clone()));
        assert_eq!(load_applied(&control.ledger.lock().db).unwrap(), Some(2));
        // Intent, tool, status, deadline and the count: no in-progress
        // status or lease deadline written, so none deleted.
        assert_eq!(index_memtable(&control, "rocksdb.num-entries-active-mem-table"), 5);
        assert_eq!(index_memtable(&control, "rocksdb.num-deletes-active-mem-table"), 0);
        let listed = |status| ledger.scan(&ns, Index::Status(status), "", 10);
        assert_eq!(listed(Status::Succeeded), ["k"]);
        assert!(listed(Status::InProgress).is_empty());
        assert_eq!(
            ledger.due(Timestamp::from_millis(90_000), 10),
            [(ns.clone(), "k".to_owned())]
        );
    }

    #[test]
    fn reads_of_the_disk_write_the_unwritten_changes_first() {
        let (_dir, ledger, control) = opened();
        let ns = Namespace::new("fleet").unwrap();
        unwritten_entry(&control, 1, |l| begin(l, "k", 1_000, 500));
        assert_eq!(ledger.scan(&ns, Index::Status(Status::InProgress), "", 10), ["k"]);
        assert_eq!(on_disk(&control, "k"), ledger.get(&ns, "k"));
        unwritten_entry(&control, 2, |l| {
            let old = l.get(&ns, "k").unwrap();
            l.remove(&ns, &old);
        });
        assert_eq!(ledger.len(&ns), 0);
        let mut seen = 0;
        ledger
            .for_each_record(&mut |_, _| {
                seen += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!((seen, on_disk(&control, "k")), (0, None));
        assert!(ledger.scan(&ns, Index::All, "", 10).is_empty());
    }

    #[test]
    fn a_write_in_the_middle_of_an_entry_keeps_the_index_exact() {
        let (_dir, ledger, control) = opened();
        let ns = Namespace::new("fleet").unwrap();
        unwritten_entry(&control, 1, |l| begin(l, "k", 1_000, 500));
        unwritten_entry(&control, 2, |l| {
            let old = l.get(&ns, "k").unwrap();
            let mut done = old.clone();
            done.status = Status::Failed;
            done.lease_until = None;
            l.put(&ns, Some(&old), done);
            // Writes entry 1's change (the record in progress) first.
            assert!(l.scan(&ns, Index::Status(Status::Failed), "", 10).is_empty());
        });
        control.write_unwritten().unwrap();
        assert!(ledger.scan(&ns, Index::Status(Status::InProgress), "", 10).is_empty());
        assert_eq!(ledger.scan(&ns, Index::Status(Status::Failed), "", 10), ["k"]);
        assert!(ledger.due(Timestamp::from_millis(10_000), 10).is_empty());
    }

    #[test]
    fn unwritten_changes_are_written_once_they_fill_their_bound() {
        let (_dir, _, control) = opened();
        for i in 0..UNWRITTEN_RECORDS_MAX {
            assert_eq!(on_disk(&control, "k0"), None, "written after {i} records");
            unwritten_entry(&control, i as u64 + 1, |l| begin(l, &format!("k{i}"), 1_000, 500));
        }
        // Handed to the writer thread, and on disk once it is done.
        assert!(control.ledger.lock().unwritten.records.is_empty());
        control.ledger.lock().finish_writing(true).unwrap();
        assert!(on_disk(&control, "k0").is_some());
        assert!(control.ledger.lock().writing.is_none());
    }

    /// Holds the writer thread until the returned sender is dropped or sent
    /// to, so that a batch handed to it meanwhile is still being written.
    fn hold_writer(control: &LedgerControl) -> std::sync::mpsc::Sender<()> {
        let (open, gate) = std::sync::mpsc::channel::<()>();
        let _held = control.ledger.lock().writer.write(move || {
            let _ = gate.recv();
            Ok(())
        });
        open
    }

    /// Opens the gate of [`hold_writer`] after a while, from another
    /// thread: whatever waits for the held batch meanwhile waits that long.
    fn open_later(open: std::sync::mpsc::Sender<()>) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let _ = open.send(());
        })
    }

    /// Returns once the writer thread has run every job handed to it.
    fn drain_writer(control: &LedgerControl) {
        let done = control.ledger.lock().writer.write(|| Ok(()));
        done.recv().unwrap().unwrap();
    }

    /// Begins `k0`, `k1`, ... in entries 1, 2, ...: one full batch, handed
    /// to the writer.
    fn fill_batch(control: &LedgerControl) {
        for i in 0..UNWRITTEN_RECORDS_MAX {
            unwritten_entry(control, i as u64 + 1, |l| begin(l, &format!("k{i}"), 1_000, 500));
        }
        assert!(control.ledger.lock().writing.is_some());
    }

    #[test]
    fn entries_applied_while_a_batch_is_written_read_it_and_follow_it_on_disk() {
        let (_dir, ledger, control) = opened();
        let ns = Namespace::new("fleet").unwrap();
        let n = UNWRITTEN_RECORDS_MAX;
        let open = hold_writer(&control);
        fill_batch(&control);
        assert_eq!(on_disk(&control, "k0"), None);
        // This entry reads the records from the batch being written, and
        // its changes start from what that batch leaves on disk.
        unwritten_entry(&control, n as u64 + 1, |l| {
            for i in 0..10 {
                let old = l.get(&ns, &format!("k{i}")).expect("in the batch");
                assert_eq!(old.status, Status::InProgress);
                let mut done = old.clone();
                done.status = Status::Failed;
                done.lease_until = None;
                l.put(&ns, Some(&old), done);
            }
            let gone = l.get(&ns, "k10").expect("in the batch");
            l.remove(&ns, &gone);
        });
        assert_eq!(on_disk(&control, "k0"), None);
        // Opened a little later: the write below waits for the held batch
        // (written after it, this entry's changes would be overwritten).
        let opener = open_later(open);
        control.write_unwritten().unwrap();
        opener.join().unwrap();
        let listed = |status| ledger.scan(&ns, Index::Status(status), "", 2 * n).len();
        assert_eq!(listed(Status::InProgress), n - 11);
        assert_eq!(listed(Status::Failed), 10);
        assert_eq!(ledger.scan(&ns, Index::All, "", 2 * n).len(), n - 1);
        assert_eq!(ledger.len(&ns), n - 1);
        assert_eq!(on_disk(&control, "k10"), None);
        // Only the records still in progress hold a lease deadline.
        assert_eq!(ledger.due(Timestamp::from_millis(10_000), 2 * n).len(), n - 11);
    }

    #[test]
    fn an_install_lands_after_the_batch_being_written_and_replaces_it() {
        let (_dir, ledger, control) = opened();
        let ns = Namespace::new("fleet").unwrap();
        let open = hold_writer(&control);
        fill_batch(&control);
        // The snapshot holds one record the batch does not.
        let mut theirs = ledger.get(&ns, "k0").unwrap();
        theirs.key = "theirs".into();
        theirs.status = Status::Abandoned;
        theirs.lease_until = None;
        let mut writer = SnapshotWriter::new(&fusebox_core::machine::Fleet::default()).unwrap();
        writer.record(&ns, &theirs).unwrap();
        let bytes = writer.finish().unwrap();
        let installer = control.clone();
        let installing = std::thread::spawn(move || {
            let (_, mut reader) = SnapshotReader::open(bytes.as_slice()).unwrap();
            installer.install(&mut reader, Some(10_000), |_, _| Ok(()))
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!installing.is_finished(), "the install waits for the batch");
        open.send(()).unwrap();
        installing.join().unwrap().unwrap();
        // Had the install not waited, the batch would land after its
        // deletions and bring its records back.
        drain_writer(&control);
        assert_eq!(ledger.scan(&ns, Index::All, "", 10), ["theirs"]);
        assert_eq!((ledger.len(&ns), control.total()), (1, 1));
        assert_eq!(on_disk(&control, "k0"), None);
        assert_eq!(ledger.get(&ns, "k0"), None);
        assert!(ledger.scan(&ns, Index::Status(Status::InProgress), "", 10).is_empty());
        assert!(ledger.due(Timestamp::from_millis(10_000), 10).is_empty());
        let db = control.ledger.lock().db.clone();
        assert_eq!(load_applied(&db).unwrap(), Some(10_000));
    }

    #[test]
    fn a_batch_that_fails_on_the_writer_stops_the_next_commit_and_every_later_one() {
        let (_dir, _, control) = opened();
        control.ledger.lock().fail_batches = true;
        let open = hold_writer(&control);
        fill_batch(&control);
        // Still being written: nothing has failed yet.
        let n = UNWRITTEN_RECORDS_MAX as u64;
        unwritten_entry(&control, n + 1, |l| begin(l, "next", 1_000, 500));
        drop(open);
        drain_writer(&control);
        for index in [n + 2, n + 3] {
            control.begin_entry(index);
            begin(&mut control.ledger.clone(), &format!("after{index}"), 1_000, 500);
            let refused = control.commit(None).expect_err("the batch failed");
            assert!(refused.to_string().contains("injected batch failure"), "{refused}");
        }
        // Nothing reached the disk, and every write of it is refused too.
        assert_eq!(on_disk(&control, "k0"), None);
        assert!(control.write_unwritten().is_err());
    }

    #[test]
    fn a_ledger_dropped_while_its_batch_is_written_finishes_it_before_the_database_closes() {
        let (dir, ledger, control) = opened();
        let open = hold_writer(&control);
        fill_batch(&control);
        // Dropped on a thread of its own: the drop joins the writer, which
        // holds the batch and the database until the gate opens.
        let dropping = std::thread::spawn(move || drop((ledger, control)));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!dropping.is_finished(), "the drop waits for the batch");
        assert!(crate::rocks::open_db(dir.path()).is_err(), "still open");
        open.send(()).unwrap();
        dropping.join().unwrap();
        let db = Arc::new(crate::rocks::open_db(dir.path()).unwrap());
        let (ledger, control) = RocksLedger::open(db).unwrap();
        let n = UNWRITTEN_RECORDS_MAX;
        assert_eq!(control.total(), n as u64);
        assert_eq!(load_applied(&control.ledger.lock().db).unwrap(), Some(n as u64));
        let ns = Namespace::new("fleet").unwrap();
        let listed = ledger.scan(&ns, Index::Status(Status::InProgress), "", 2 * n);
        assert_eq!(listed.len(), n);
        assert!(on_disk(&control, &format!("k{}", n - 1)).is_some());
    }

    /// Each column family's keys as a batch puts or deletes them, in the
    /// batch's order.
    #[derive(Default)]
    struct KeysByFamily(BTreeMap<u32, Vec<Vec<u8>>>);

    impl KeysByFamily {
        fn note(&mut self, family: u32, key: &[u8]) {
            self.0.entry(family).or_default().push(key.to_vec());
        }
    }

    impl rocksdb::WriteBatchIteratorCf for KeysByFamily {
        fn put_cf(&mut self, family: u32, key: &[u8], _: &[u8]) {
            self.note(family, key);
        }
        fn delete_cf(&mut self, family: u32, key: &[u8]) {
            self.note(family, key);
        }
        fn merge_cf(&mut self, family: u32, key: &[u8], _: &[u8]) {
            self.note(family, key);
        }
    }

    #[test]
    fn a_batch_writes_each_column_familys_keys_in_order() {
        let (_dir, _, control) = opened();
        for (i, key) in ["k2", "k0", "k1"].into_iter().enumerate() {
            unwritten_entry(&control, i as u64 + 1, |l| begin(l, key, 1_000, 500));
        }
        // Written in progress, so that k1's completion deletes its old
        // status and deadline keys: deletes among the puts.
        entry(&control, 4, |_| {});
        unwritten_entry(&control, 5, |l| {
            let ns = Namespace::new("fleet").unwrap();
            let request = fusebox_core::ledger::CompleteRequest {
                key: "k1".into(),
                attempt: "a".into(),
                completion: fusebox_core::ledger::Completion::Succeeded {
                    operation_id: "op-1".into(),
                    result: Vec::new(),
                },
            };
            l.complete(&ns, &request, Timestamp::from_millis(1_100), 60_000)
                .unwrap();
        });
        unwritten_entry(&control, 6, |l| begin(l, "k3", 1_200, 500));
        let inner = control.ledger.lock();
        let (records, counts) = (&inner.unwritten.records, inner.changed_counts());
        let batch = unwritten_batch(&inner.db, records, &counts, 6, None).unwrap();
        let mut keys = KeysByFamily::default();
        batch.iterate_cf(&mut keys);
        let status_keys = keys.0.values().flatten().filter(|k| k[0] == TAG_STATUS).count();
        assert_eq!(status_keys, 3, "k1's old and new status keys, k3's");
        for (family, keys) in keys.0 {
            // The record counts come after the index keys.
            let keys: Vec<_> = keys.into_iter().filter(|k| k[0] != TAG_COUNT).collect();
            assert!(keys.is_sorted(), "column family {family}: {keys:02x?}");
        }
    }

    #[test]
    fn an_installed_snapshot_replaces_the_recent_records() {
        let (_dir, ledger, control) = opened();
        let ns = Namespace::new("fleet").unwrap();
        entry(&control, 1, |l| begin(l, "k", 1_000, 500));
        entry(&control, 2, |l| begin(l, "gone", 1_000, 500));
        // The snapshot's "k" moved on; it has no "gone".
        let mut moved = ledger.get(&ns, "k").unwrap();
        moved.status = Status::Abandoned;
        moved.lease_until = None;
        let fleet = fusebox_core::machine::Fleet::default();
        let mut writer = SnapshotWriter::new(&fleet).unwrap();
        writer.record(&ns, &moved).unwrap();
        let bytes = writer.finish().unwrap();
        let (_, mut reader) = SnapshotReader::open(bytes.as_slice()).unwrap();
        control
            .install(&mut reader, Some(10), |_, _| Ok(()))
            .unwrap();
        assert_eq!(ledger.get(&ns, "k"), Some(moved));
        assert_eq!(ledger.get(&ns, "gone"), None);
    }

    #[test]
    fn recent_records_stay_within_their_bounds() {
        let mut recent = Recent::default();
        let record = |key: &str, result: usize| Record {
            key: key.to_owned(),
            fingerprint: "fp".into(),
            intent_id: "intent".into(),
            tool: fusebox_core::ToolName::new("charge").unwrap(),
            target: "acct".into(),
            effect: fusebox_core::policy::EffectClass::NonIdempotentWrite,
            status: Status::Succeeded,
            attempt: "a".into(),
            attempts: 1,
            lease_until: None,
            created_at: Timestamp::from_millis(1),
            updated_at: Timestamp::from_millis(2),
            completed_at: Some(Timestamp::from_millis(2)),
            expires_at: Some(Timestamp::from_millis(3)),
            operation_id: None,
            result: Some(vec![0; result]),
            reason: None,
            ambiguity: None,
            resolution: None,
        };
        for i in 0..RECENT_RECORDS_MAX + 100 {
            let key = format!("k{i}");
            recent.keep(key.clone().into_bytes(), Some(record(&key, 0)));
        }
        assert_eq!(recent.records.len(), RECENT_RECORDS_MAX);
        assert!(recent.get(b"k0").is_none());
        assert!(recent.get(format!("k{}", RECENT_RECORDS_MAX + 99).as_bytes()).is_some());
        // Large records push the oldest out by their bytes.
        for i in 0..40 {
            let key = format!("big{i}");
            recent.keep(key.clone().into_bytes(), Some(record(&key, 200 * 1024)));
        }
        assert!(recent.bytes <= RECENT_RECORDS_BYTES_MAX);
        assert!(recent.get(b"big39").is_some());
        // One too large for the cache is not kept, and drops an older copy.
        recent.keep(b"big39".to_vec(), Some(record("big39", RECENT_RECORDS_BYTES_MAX)));
        assert!(recent.get(b"big39").is_none());
        let counted: usize = recent.records.values().map(|(_, _, n)| n).sum();
        assert_eq!(counted, recent.bytes);
    }

    #[test]
    fn truncated_or_bad_keys_do_not_decode() {
        assert!(read_key(b"abc").is_none());
        assert!(read_key(&[b'a', 0]).is_none());
        assert!(read_key(&[b'a', 0, 7]).is_none());
    }
}
