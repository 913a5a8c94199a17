//! Why opening the store failed.
//!
//! Once open, the stores speak `std::io::Error`, as openraft's storage
//! traits require; a corrupt value read from disk becomes an error naming
//! what was being read (of kind `InvalidData`, or, for a ledger read while
//! applying, the refused commit of that entry), never a panic.

use std::io;
use std::path::PathBuf;

/// Opening the data directory failed; the node must not start.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory could not be created.
    #[error("create data directory {path}: {source}")]
    CreateDir {
        /// The directory asked for.
        path: PathBuf,
        /// What the filesystem said.
        source: io::Error,
    },
    /// RocksDB refused to open (locked by another process, corrupt, or unreadable).
    #[error("open rocksdb at {path}: {source}")]
    Open {
        /// The directory asked for.
        path: PathBuf,
        /// What RocksDB said.
        source: rocksdb::Error,
    },
    /// The persisted snapshot could not be read or decoded, so the state
    /// machine cannot be restored; starting empty would silently lose state.
    #[error("load persisted snapshot: {0}")]
    Snapshot(io::Error),
    /// The log flusher thread could not be started.
    #[error("start log flusher thread: {0}")]
    Flusher(io::Error),
}
