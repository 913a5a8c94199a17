//! Fusebox's Raft storage: where openraft keeps the log, the vote and the
//! state machine of a Fusebox node.
//!
//! - [`types`]: the openraft type configuration (entries carry a core
//!   [`fusebox_core::machine::Command`] stamped with the leader's clock).
//! - [`LogStore`] / [`LogReader`]: the Raft log and vote in RocksDB.
//! - [`StateStore`]: the core [`fusebox_core::machine::StateMachine`] in
//!   memory, plus the last applied log id and membership, with snapshots
//!   persisted so a restart resumes from the latest one and replays the
//!   committed log after it.
//!
//! [`open`] opens one RocksDB instance in the data directory with three
//! column families: `logs`, `meta` (vote, committed, last purged) and
//! `snapshot`. One instance means one write-ahead log, which orders every
//! write, votes and log entries alike.
//!
//! # Durability guarantees
//!
//! | operation | on disk (fsynced) when |
//! |---|---|
//! | `save_vote` | before it returns (`sync = true`) |
//! | `append` | one `WriteBatch`, readable when `append` returns; its IO callback fires only after a WAL fsync covering it |
//! | `truncate_after` | before it returns (`sync = true`) |
//! | `purge` | `last_purged` and the deletion in one atomic batch, synced by the next fsync (it only drops what a durable snapshot covers) |
//! | `save_committed` | survives a process crash at once; synced by the next fsync |
//! | `apply` | never: the state is in memory, the committed log is its record |
//! | `build_snapshot`, `install_snapshot` | before they return (`sync = true`), metadata and bytes in one batch |
//!
//! No RocksDB call runs on a tokio worker thread: reads and writes run on
//! tokio's blocking pool and WAL fsyncs for appends on a dedicated flusher
//! thread. Data read from disk is never trusted: a corrupt value is an
//! `io::Error` of kind `InvalidData` (which stops Raft), never a panic.
//!
//! The snapshot data type is [`SnapshotData`]: the core's snapshot
//! encoding, in memory or (the persisted one) read from disk only when it is
//! sent or installed; the server's network sends it in chunks.

#![deny(missing_docs)]

mod codec;
mod error;
mod flusher;
mod ledger_store;
mod log_store;
mod rocks;
mod snapshot_builder;
mod snapshot_slot;
mod state_store;
pub mod types;

pub use error::StoreError;
pub use ledger_store::RocksLedger;
pub use log_store::{LogReader, LogStore};
pub use rocks::{blocking, run_inline};
pub use snapshot_builder::StateSnapshotBuilder;
pub use state_store::{ApplyObserver, StateStore};
pub use types::{
    snapshot_data, Entry, LogId, Node, NodeId, RaftRuntime, Request, Response, Snapshot,
    SnapshotData, SnapshotMeta, StoredMembership, TypeConfig, Vote,
};

use std::path::Path;
use std::sync::Arc;

/// Opens (creating if missing) the node's store in `dir`, and restores the
/// state machine from the persisted snapshot, if any.
///
/// It blocks (disk reads, and a snapshot restore that may be large): call it
/// before starting the runtime's work, or from `spawn_blocking`. Only one
/// process may hold a directory open; a second open fails.
pub fn open(dir: &Path) -> Result<(LogStore, StateStore), StoreError> {
    let db = Arc::new(rocks::open_db(dir)?);
    let state = StateStore::open(db.clone()).map_err(StoreError::Snapshot)?;
    let flusher = flusher::Flusher::start(db.clone()).map_err(StoreError::Flusher)?;
    Ok((log_store::LogStore::new(db, flusher), state))
}
