//! The Raft log and vote, in RocksDB.
//!
//! Layout: column family `logs` maps an index (8 bytes, big-endian) to an
//! encoded entry; `meta` holds `vote`, `committed` and `last_purged` (and
//! the ledger's applied index, written by [`crate::ledger_store`]).
//!
//! # Durability (what is fsynced when)
//!
//! - **vote**: written with `sync = true`; `save_vote` returns only once it
//!   is on disk.
//! - **append**: the entries go in one `WriteBatch`, written (not synced)
//!   before `append` returns, so every reader sees them at once. The
//!   completion callback is queued to the [flusher](crate::flusher) thread,
//!   which calls it only after `flush_wal(true)` has synced the WAL up to and
//!   past that batch (inline, the append syncs the WAL itself before calling
//!   it).
//! - **truncate_after**: one batch, written with `sync = true` (truncation
//!   is rare: a follower dropping a deposed leader's tail).
//! - **purge**: one batch that first records `last_purged`, then deletes the
//!   range, atomically. Not synced: it only drops entries a durable snapshot
//!   already covers; if a power loss undoes it, the entries reappear and are
//!   purged again.
//! - **committed**: written without a sync, with the next apply: openraft's
//!   core waits for `save_committed` on every commit and asks for the apply
//!   of what it commits right after, so `save_committed` only notes the id
//!   and the state store's apply job writes it first (a newer id noted
//!   before that replaces an older one). Once written it survives a process
//!   crash (the WAL is in the OS page cache) and is synced by the next
//!   synced write (a vote, an append's fsync, a truncation, a snapshot). A
//!   crash before that apply, or a power loss before that sync, leaves an
//!   older id: openraft then re-applies less on restart (the server waits
//!   for recovery before serving reads). It never runs ahead of the entries
//!   it names: they were written before it.
//!
//! All writes share one WAL, so they reach disk in the order they were made.
//! Appends run on the [storage thread](crate::storage_thread), every other
//! RocksDB call on tokio's blocking pool (both inline on a thread marked by
//! [`crate::run_inline`]).
//!
//! The latest entries are also kept in memory as appended
//! ([`crate::log_tail`]): reads of them, which replication and applying make
//! right after each append, are served from there without decoding.

use crate::codec::{corrupt, decode, encode, index_key, key_index};
use crate::flusher::{enqueue, Flusher};
use crate::log_tail::{kept_as_appended, LogTail};
use crate::rocks::{self, blocking, cf, db_error, CF_LOGS, CF_META};
use crate::storage_thread::StorageThread;
use crate::types::{Entry, LogId, TypeConfig, Vote};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader};
use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch, WriteOptions, DB};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
const KEY_LAST_PURGED: &str = "last_purged";

/// The Raft log store; hand it to `Raft::new`.
pub struct LogStore {
    reader: LogReader,
    flusher: Flusher,
    storage: StorageThread,
    committed: Arc<UnsavedCommitted>,
}

/// Reads the log and the vote; openraft holds one per replication stream.
#[derive(Clone)]
pub struct LogReader {
    db: Arc<DB>,
    tail: Arc<LogTail>,
}

/// The committed log id openraft saved last, encoded, until the state
/// store's next apply writes it (see `save_committed`); shared by the two
/// stores of one database.
#[derive(Default)]
pub(crate) struct UnsavedCommitted(Mutex<Option<Vec<u8>>>);

impl UnsavedCommitted {
    fn lock(&self) -> MutexGuard<'_, Option<Vec<u8>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the newest id saved since the last call, if any (not synced).
    /// Call it on the storage thread, before the apply it goes with.
    pub(crate) fn write(&self, db: &DB) -> io::Result<()> {
        let Some(bytes) = self.lock().take() else {
            return Ok(());
        };
        db.put_cf(cf(db, CF_META)?, KEY_COMMITTED, bytes)
            .map_err(|e| db_error("save committed", e))
    }
}

impl LogStore {
    pub(crate) fn new(
        db: Arc<DB>,
        flusher: Flusher,
        storage: StorageThread,
        committed: Arc<UnsavedCommitted>,
    ) -> LogStore {
        LogStore {
            reader: LogReader {
                db,
                tail: Arc::default(),
            },
            flusher,
            storage,
            committed,
        }
    }

    fn db(&self) -> Arc<DB> {
        self.reader.db.clone()
    }

    fn tail(&self) -> Arc<LogTail> {
        self.reader.tail.clone()
    }
}

fn synced() -> WriteOptions {
    let mut options = WriteOptions::default();
    options.set_sync(true);
    options
}

fn get_meta<T: DeserializeOwned>(db: &DB, key: &str) -> io::Result<Option<T>> {
    let meta = cf(db, CF_META)?;
    let bytes = db
        .get_pinned_cf(meta, key)
        .map_err(|e| db_error("read meta", e))?;
    bytes.map(|b| decode(key, &b)).transpose()
}

/// `[start, end)` of a range of indexes, `end = None` for "to the last";
/// `None` if the range is empty.
fn index_range(range: &impl RangeBounds<u64>) -> Option<(u64, Option<u64>)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => None,
    };
    match end {
        Some(end) if start >= end => None,
        _ => Some((start, end)),
    }
}

/// Reads entries `[start, end)`; only that key range is touched.
fn read_entries(db: &DB, start: u64, end: Option<u64>) -> io::Result<Vec<Entry>> {
    let logs = cf(db, CF_LOGS)?;
    let mut options = ReadOptions::default();
    if let Some(end) = end {
        options.set_iterate_upper_bound(index_key(end).to_vec());
    }
    let from = index_key(start);
    let iter = db.iterator_cf_opt(logs, options, IteratorMode::From(&from, Direction::Forward));
    let mut entries: Vec<Entry> = Vec::new();
    for item in iter {
        let (key, value) = item.map_err(|e| db_error("read log", e))?;
        let index = key_index(&key)?;
        let entry = decode_entry(index, &value)?;
        if let Some(previous) = entries.last() {
            if previous.index() + 1 != index {
                return Err(corrupt(format_args!(
                    "log hole between index {} and {index}",
                    previous.index()
                )));
            }
        }
        entries.push(entry);
    }
    Ok(entries)
}

fn decode_entry(index: u64, value: &[u8]) -> io::Result<Entry> {
    let entry: Entry = decode(&format!("log entry {index}"), value)?;
    if entry.index() != index {
        return Err(corrupt(format_args!(
            "log key {index} holds the entry of index {}",
            entry.index()
        )));
    }
    Ok(entry)
}

fn last_log_id(db: &DB) -> io::Result<Option<LogId>> {
    let logs = cf(db, CF_LOGS)?;
    let Some(item) = db.iterator_cf(logs, IteratorMode::End).next() else {
        return Ok(None);
    };
    let (key, value) = item.map_err(|e| db_error("read log", e))?;
    let index = key_index(&key)?;
    Ok(Some(decode_entry(index, &value)?.log_id()))
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let Some((start, end)) = index_range(&range) else {
            return Ok(Vec::new());
        };
        if let Some(entries) = end.and_then(|end| self.tail.get(start, end)) {
            return Ok(entries);
        }
        let db = self.db.clone();
        blocking(move || read_entries(&db, start, end)).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        let db = self.db.clone();
        blocking(move || get_meta(&db, KEY_VOTE)).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let db = self.db();
        blocking(move || {
            let last_purged_log_id: Option<LogId> = get_meta(&db, KEY_LAST_PURGED)?;
            let last_log_id = last_log_id(&db)?.or(last_purged_log_id);
            Ok(LogState {
                last_purged_log_id,
                last_log_id,
            })
        })
        .await
    }

    async fn get_log_reader(&mut self) -> LogReader {
        self.reader.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let bytes = encode(KEY_VOTE, vote)?;
        let db = self.db();
        blocking(move || {
            let meta = cf(&db, CF_META)?;
            db.put_cf_opt(meta, KEY_VOTE, bytes, &synced())
                .map_err(|e| db_error("save vote", e))?;
            rocks::synced(&db);
            Ok(())
        })
        .await?;
        tracing::debug!(%vote, "vote saved");
        Ok(())
    }

    /// Only notes the id: the state store's next apply writes it, first
    /// thing in its job on the storage thread. openraft's core waits for
    /// this on every commit before it asks for that apply, and a trip to a
    /// thread here cost every commit a hand-off and the core its wait.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let bytes = encode(KEY_COMMITTED, &committed)?;
        *self.committed.lock() = Some(bytes);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let db = self.db();
        blocking(move || Ok(get_meta::<Option<LogId>>(&db, KEY_COMMITTED)?.flatten())).await
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let (db, tail) = (self.db(), self.tail());
        let sink = self.flusher.sink()?;
        self.storage.run(move || {
            // Indexes this append rewrites leave the tail before the
            // database changes (openraft truncates first; this is in case).
            if let Some(first) = entries.first() {
                tail.change().truncate_from(first.index());
            }
            let written = write_entries(&db, &entries)
                .and_then(|values| Ok((as_read_back(entries, &values)?, values)));
            let (kept, values) = match written {
                Ok(written) => written,
                Err(e) => {
                    callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                    return Err(e);
                }
            };
            let sizes: Vec<usize> = values.iter().map(Vec::len).collect();
            tail.change().appended(&kept, &sizes);
            enqueue(&sink, callback)
        })
        .await
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let start = match last_log_id {
            None => 0,
            Some(id) => match id.index().checked_add(1) {
                Some(start) => start,
                None => return Ok(()),
            },
        };
        // Out of the tail before the database: it never holds more.
        self.reader.tail.change().truncate_from(start);
        let db = self.db();
        blocking(move || {
            let logs = cf(&db, CF_LOGS)?;
            let mut batch = WriteBatch::default();
            batch.delete_range_cf(logs, index_key(start), index_key(u64::MAX));
            batch.delete_cf(logs, index_key(u64::MAX));
            db.write_opt(batch, &synced())
                .map_err(|e| db_error("truncate log", e))?;
            rocks::synced(&db);
            Ok(())
        })
        .await?;
        tracing::debug!(after = ?last_log_id, "log truncated");
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let bytes = encode(KEY_LAST_PURGED, &log_id)?;
        let index = log_id.index();
        self.reader.tail.change().purge_upto(index);
        let db = self.db();
        blocking(move || {
            let logs = cf(&db, CF_LOGS)?;
            let mut batch = WriteBatch::default();
            batch.put_cf(cf(&db, CF_META)?, KEY_LAST_PURGED, bytes);
            match index.checked_add(1) {
                Some(end) => batch.delete_range_cf(logs, index_key(0), index_key(end)),
                None => {
                    batch.delete_range_cf(logs, index_key(0), index_key(u64::MAX));
                    batch.delete_cf(logs, index_key(u64::MAX));
                }
            }
            db.write(batch).map_err(|e| db_error("purge log", e))
        })
        .await?;
        tracing::debug!(upto = %log_id, "log purged");
        Ok(())
    }
}

/// Writes `entries` as one batch, not synced: readable at once, durable at
/// the flusher's next WAL sync. Answers each entry's encoded bytes.
fn write_entries(db: &DB, entries: &[Entry]) -> io::Result<Vec<Vec<u8>>> {
    let logs = cf(db, CF_LOGS)?;
    let mut batch = WriteBatch::default();
    let mut values = Vec::with_capacity(entries.len());
    for entry in entries {
        let index = entry.index();
        let value = encode(&format!("log entry {index}"), entry)?;
        batch.put_cf(logs, index_key(index), &value);
        values.push(value);
    }
    db.write(batch).map_err(|e| db_error("append log", e))?;
    Ok(values)
}

/// The entries as a read from the database gives them back (`values`:
/// what was written): each kept as appended where that is the same value
/// ([`kept_as_appended`]), decoded otherwise.
fn as_read_back(entries: Vec<Entry>, values: &[Vec<u8>]) -> io::Result<Vec<Entry>> {
    entries
        .into_iter()
        .zip(values)
        .map(|(entry, value)| {
            if kept_as_appended(&entry) {
                Ok(entry)
            } else {
                decode_entry(entry.index(), value)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::index_range;

    #[test]
    fn ranges_become_half_open_key_ranges() {
        assert_eq!(index_range(&(3..7)), Some((3, Some(7))));
        assert_eq!(index_range(&(3..=7)), Some((3, Some(8))));
        assert_eq!(index_range(&(3..)), Some((3, None)));
        assert_eq!(index_range(&(..)), Some((0, None)));
        assert_eq!(index_range(&(5..5)), None);
        let (start, end) = (6, 5);
        assert_eq!(index_range(&(start..end)), None);
        assert_eq!(index_range(&(0..=u64::MAX)), Some((0, None)));
        let excluded_max = (
            std::ops::Bound::Excluded(u64::MAX),
            std::ops::Bound::Unbounded,
        );
        assert_eq!(index_range(&excluded_max), None);
    }
}
