//! Fusebox's Raft storage: where openraft keeps the log, the vote and the
//! state machine of a Fusebox node.
//!
//! - [`types`]: the openraft type configuration (entries carry a core
//!   [`fusebox_core::machine::Command`] stamped with the leader's clock).
//! - [`LogStore`] / [`LogReader`]: the Raft log and vote in RocksDB.
//! - [`StateStore`]: the core [`fusebox_core::machine::StateMachine`], its
//!   fleet (breakers, policies) in memory and its ledger in RocksDB
//!   ([`RocksLedger`]), plus the last applied log id and membership, with
//!   snapshots persisted so a restart resumes from the latest one and
//!   replays the committed log after it. [`StateSnapshotBuilder`] copies it
//!   while entries keep being applied; an [`ApplyObserver`] hears of every
//!   change.
//!
//! [`open`] opens one RocksDB instance in the data directory with five
//! column families: `logs` (the entries), `meta` (vote, committed, last
//! purged, and the last log index whose ledger changes are on disk),
//! `snapshot` (pointers to the persisted snapshot's file in `snapshots/`,
//! with its metadata and checksums), `ledger` (the records) and `ledger_index` (the ledger's secondary
//! indexes, deadlines and per-namespace counts). One instance means one
//! write-ahead log, which orders every write, votes, log entries, ledger
//! changes and snapshots alike.
//!
//! # Durability guarantees
//!
//! | operation | on disk (fsynced) when |
//! |---|---|
//! | `save_vote` | before it returns (`sync = true`) |
//! | `append` | one `WriteBatch`, readable when `append` returns; its IO callback fires only after a WAL fsync covering it |
//! | `truncate_after` | before it returns (`sync = true`) |
//! | `purge` | `last_purged` and the deletion in one atomic batch, synced by the next fsync (it only drops what a durable snapshot covers) |
//! | `save_committed` | never by itself: written (not synced) first thing in the next apply's job, which openraft asks for right after; survives a process crash once written; synced by the next fsync |
//! | `apply` | never by itself: the entry's ledger changes and its index go in one unsynced batch, the fleet stays in memory, and the committed log is the record a restart replays |
//! | `build_snapshot` | before it returns: the file fsynced, renamed into place and its folder synced, then its pointer written with `sync = true`; not kept at all if the snapshot on disk is newer (an install overtook the build) |
//! | `install_snapshot` | before it returns: the file fsynced and renamed into place, an `installing` pointer synced, the ledger replaced in bounded batches, the last of which (synced) moves the current pointer; a crash before that redoes the install at the next open |
//!
//! Appends and applies run on the store's own storage thread, one at a
//! time (`storage_thread`), its other RocksDB calls on tokio's blocking pool
//! ([`blocking`]), WAL fsyncs for appends on a dedicated flusher thread,
//! and the ledger's written-behind batches on a dedicated writer thread
//! (`ledger_writer`); on a thread marked by [`run_inline`] (the
//! deterministic simulation) all of them run inline instead. Two calls
//! block and are the caller's to place: [`open`], and the closure given
//! to [`StateStore::with_state`] when it reads the ledger. Data read from
//! disk is never trusted: a value that does not decode is an `io::Error`
//! naming what was read (a failed ledger read refuses the commit of the
//! entry being applied), which stops Raft, never a panic.
//!
//! The snapshot data type is [`SnapshotData`]: an open file holding the
//! core's snapshot encoding, with its length and SHA-256. Snapshots are
//! built into files, received into files ([`StateStore::snapshot_sink`]),
//! sent and installed from them, one chunk or one record in memory at a
//! time: no size bound short of the disk.

#![deny(missing_docs)]
// Without the `rocksdb` feature only the types and the value format are
// built (for the fuzz targets); the file handling they name goes unused.
#![cfg_attr(not(feature = "rocksdb"), allow(dead_code))]

pub mod codec;
mod observer;
mod snapshot_file;
pub mod types;

pub use observer::ApplyObserver;
pub use snapshot_file::{SnapshotDataReader, SnapshotSink};
pub use types::{
    Entry, LogId, Member, Node, NodeId, RaftRuntime, Request, Response, Snapshot, SnapshotData,
    SnapshotMeta, StoredMembership, TypeConfig, Vote,
};

/// Items that exist only with the `rocksdb` feature: the store itself.
macro_rules! with_rocksdb {
    ($($item:item)*) => { $( #[cfg(feature = "rocksdb")] $item )* };
}

with_rocksdb! {
    mod error;
    mod flusher;
    mod identity;
    mod ledger_store;
    mod ledger_writer;
    mod limits;
    mod live;
    mod log_store;
    mod log_tail;
    mod rocks;
    mod snapshot_builder;
    mod snapshot_slot;
    mod state_store;
    mod storage_thread;

    pub use error::StoreError;
    pub use flusher::wal_syncs;
    pub use identity::DirIdentity;
    pub use ledger_store::RocksLedger;
    pub use log_store::{LogReader, LogStore};
    pub use rocks::{
        blocking, inject_unsynced_appends, run_inline, save_fleet_every, skip_preallocation,
        witness_syncs,
    };
    pub use snapshot_builder::StateSnapshotBuilder;
    pub use state_store::StateStore;

    use std::path::Path;
    use std::sync::Arc;

    /// Opens (creating if missing) the node's store in `dir`: the log as it is,
    /// the ledger as it is on disk, and the fleet restored from the persisted
    /// snapshot's head, if there is one.
    ///
    /// It blocks (disk reads, and decoding the fleet, which may be large): call it
    /// before starting the runtime's work, or from `spawn_blocking`. Only one
    /// process may hold a directory open; a second open fails. A directory
    /// records `me` the first time it is opened and refuses anyone else after.
    pub fn open(dir: &Path, me: &DirIdentity) -> Result<(LogStore, StateStore), StoreError> {
        let db = Arc::new(rocks::open_db(dir)?);
        identity::claim(&db, dir, me)?;
        let thread = |which| move |source| StoreError::Thread { which, source };
        let storage = storage_thread::StorageThread::start().map_err(thread("storage"))?;
        let committed = Arc::new(log_store::UnsavedCommitted::default());
        let state = StateStore::open(db.clone(), dir, storage.clone(), committed.clone())
            .map_err(StoreError::Snapshot)?;
        let flusher = flusher::Flusher::start(db.clone()).map_err(thread("log flusher"))?;
        Ok((log_store::LogStore::new(db, flusher, storage, committed), state))
    }
}
