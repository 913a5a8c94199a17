//! The live state machine and what sits beside it, shared by the
//! [`StateStore`](crate::StateStore) (which applies entries and installs
//! snapshots) and the [`StateSnapshotBuilder`](crate::StateSnapshotBuilder)
//! (which copies it while entries keep being applied).
//!
//! Both hold an `Arc<Shared>`; neither knows the other, so the store depends
//! on the builder and the builder only on this module.
//!
//! One `std::sync::Mutex` guards the state, the last applied log id and the
//! membership together ([`Live`]), so every reader sees them consistent. It
//! is never held across an `.await`.

use crate::ledger_store::LedgerControl;
use crate::observer::ApplyObserver;
use crate::snapshot_slot::SnapshotSlot;
use crate::types::{LogId, StoredMembership};
use fusebox_core::machine::SharedStateMachine;
use rocksdb::DB;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What the lock guards.
pub(crate) struct Live {
    /// The core state machine: the fleet in memory, the ledger in RocksDB.
    pub(crate) sm: SharedStateMachine,
    /// The last log id applied to `sm`, as openraft's `applied_state` reports.
    pub(crate) last_applied: Option<LogId>,
    /// The last membership applied, as openraft's `applied_state` reports.
    pub(crate) last_membership: StoredMembership,
    /// Who learns of each change while the lock is held, so what it
    /// publishes is in exactly the order of the state.
    pub(crate) observer: Option<Arc<dyn ApplyObserver>>,
    /// Where the fleet was last saved (a checkpoint, a snapshot, or where
    /// the store opened), to space the next checkpoint.
    pub(crate) saved: SavedFleet,
}

/// Where and how large the fleet was when last saved.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SavedFleet {
    /// The log index it was saved at.
    pub(crate) index: u64,
    /// Its encoded size (0 if it was not encoded here).
    pub(crate) bytes: u64,
}

/// Everything a store and its snapshot builders share.
pub(crate) struct Shared {
    live: Mutex<Live>,
    /// The persisted snapshot.
    pub(crate) snapshots: SnapshotSlot,
    /// The ledger's entry boundaries, commits, snapshot writing and installing.
    pub(crate) ledger: LedgerControl,
    /// The database, for point-in-time views of the ledger.
    pub(crate) db: Arc<DB>,
}

impl Shared {
    /// Puts the pieces together.
    pub(crate) fn new(
        live: Live,
        snapshots: SnapshotSlot,
        ledger: LedgerControl,
        db: Arc<DB>,
    ) -> Shared {
        Shared {
            live: Mutex::new(live),
            snapshots,
            ledger,
            db,
        }
    }

    /// The lock, for writers: a poisoned lock (an apply or observer
    /// panicked mid-change) is an error that stops Raft.
    pub(crate) fn lock(&self) -> io::Result<MutexGuard<'_, Live>> {
        self.live
            .lock()
            .map_err(|_| io::Error::other("state machine lock poisoned: an apply panicked"))
    }

    /// The lock, for readers: after a panic Raft has stopped, and reads of
    /// the last state are still allowed.
    pub(crate) fn lock_for_read(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
