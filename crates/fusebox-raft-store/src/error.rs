//! Why opening the store failed.
//!
//! Once open, the stores speak `std::io::Error`, as openraft's storage
//! traits require; a corrupt value read from disk becomes an error naming
//! what was being read (of kind `InvalidData`, or, for a ledger read while
//! applying, the refused commit of that entry), never a panic.

use crate::identity::DirIdentity;
use std::io;
use std::path::PathBuf;

/// What an operator can do about a corrupt data directory.
const CORRUPTION_ADVICE: &str = "; the node's synced data is damaged and it will not start \
    on it: remove the member (fusebox cluster remove-member), move the directory aside, start \
    the node on an empty one with --join, and add it back (fusebox cluster add-member) so it \
    catches up from a snapshot";

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
    /// RocksDB refused to open (locked by another process, corrupt, or
    /// unreadable). Corruption before the log's tail (see [`crate::rocks`])
    /// lands here: the node refuses to start rather than lose synced data.
    #[error(
        "open rocksdb at {path}: {source}{}",
        if source.kind() == rocksdb::ErrorKind::Corruption { CORRUPTION_ADVICE } else { "" }
    )]
    Open {
        /// The directory asked for.
        path: PathBuf,
        /// What RocksDB said.
        source: rocksdb::Error,
    },
    /// The directory's recorded identity could not be read or written.
    #[error("identity of data directory {path}: {source}")]
    Identity {
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// The directory belongs to another node or another cluster: serving
    /// its vote and log as this node would break Raft's safety.
    #[error(
        "data directory {path} belongs to {found}, not to {me}; start it with its own \
         --id and --cluster-id, or give this node an empty data directory"
    )]
    NotMine {
        /// The directory.
        path: PathBuf,
        /// Whose it is.
        found: DirIdentity,
        /// Who tried to open it.
        me: DirIdentity,
    },
    /// The persisted snapshot could not be read or decoded, so the state
    /// machine cannot be restored; starting empty would silently lose state.
    #[error("load persisted snapshot: {0}")]
    Snapshot(io::Error),
    /// One of the store's own threads (the log flusher, the storage
    /// thread) could not be started.
    #[error("start the {which} thread: {source}")]
    Thread {
        /// Which thread.
        which: &'static str,
        /// What went wrong.
        source: io::Error,
    },
}
