//! The state machine store: the core [`StateMachine`] behind a lock, its
//! fleet (breakers, policies) in memory and its ledger in RocksDB, with the
//! last applied log id and membership beside it.
//!
//! # Durability (what is fsynced when)
//!
//! Applying an entry writes its ledger changes, with the entry's index, in
//! one unsynced batch ([`crate::ledger_store`]); the fleet lives in memory
//! and the committed log is its durable record. Snapshots are persisted
//! (see [`crate::snapshot_slot`]): a built or installed snapshot is on disk
//! (written with `sync = true`) before `build_snapshot` or
//! `install_snapshot` returns, unless a built one is older than the one
//! already persisted, which is then kept. On open the store reads the fleet
//! from that snapshot and opens the ledger where it is, so
//! [`RaftStateMachine::applied_state`] reports the snapshot's log id, and
//! openraft re-applies the committed log after it (ledger writes the disk
//! already holds are skipped).
//!
//! # Locking
//!
//! One `std::sync::Mutex` guards the state, the last applied log id and the
//! membership together ([`crate::live`]), so every reader sees them
//! consistent. It is never held across an `.await`: each entry is applied
//! under a short lock on the blocking pool (the ledger reads and writes
//! RocksDB), and a snapshot is copied under the lock (the fleet, and a
//! RocksDB point-in-time view of the ledger) then encoded and persisted
//! without it ([`crate::snapshot_builder`]).

use crate::ledger_store::{LedgerControl, RocksLedger};
use crate::live::{Live, Shared};
use crate::observer::ApplyObserver;
use crate::rocks::blocking;
use crate::snapshot_builder::StateSnapshotBuilder;
use crate::snapshot_file::SnapshotSink;
use crate::snapshot_slot::{SnapshotSlot, Staged};
use crate::types::{
    Entry, LogId, Response, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig,
};
use fusebox_core::ledger::BoxedLedger;
use fusebox_core::machine::{Fleet, SharedStateMachine, StateMachine};
use futures::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use rocksdb::DB;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The state machine store; cheap to clone, every clone shares the state.
#[derive(Clone)]
pub struct StateStore {
    shared: Arc<Shared>,
}

impl StateStore {
    /// Opens over `db`: the ledger where it is, the fleet from the
    /// persisted snapshot if there is one.
    pub(crate) fn open(db: Arc<DB>, dir: &Path) -> io::Result<StateStore> {
        let snapshots = SnapshotSlot::open(db.clone(), dir)?;
        let (ledger, control) = RocksLedger::open(db.clone())?;
        if let Some((staged, previous)) = snapshots.pending()? {
            install_records(&control, &db, &staged)?;
            if let Some(file) = previous {
                snapshots.remove_file(&file);
            }
            tracing::info!(snapshot = %staged.meta(), "interrupted snapshot install finished");
        }
        let boxed: BoxedLedger = Box::new(ledger);
        let live = match snapshots.load_fleet()? {
            None => Live {
                sm: StateMachine::from_parts(Fleet::default(), boxed),
                last_applied: None,
                last_membership: StoredMembership::default(),
                observer: None,
            },
            Some((meta, fleet)) => Live {
                sm: StateMachine::from_parts(fleet, boxed),
                last_applied: meta.last_log_id,
                last_membership: meta.last_membership,
                observer: None,
            },
        };
        tracing::info!(last_applied = ?live.last_applied, "state machine opened");
        Ok(StateStore {
            shared: Arc::new(Shared::new(live, snapshots, control, db)),
        })
    }

    /// Sets who learns of state changes (replacing any earlier observer).
    pub fn set_observer(&self, observer: Arc<dyn ApplyObserver>) {
        self.shared.lock_for_read().observer = Some(observer);
    }

    /// Runs a short, synchronous read of the state under the lock.
    ///
    /// Ledger reads inside `f` touch RocksDB: call it from the blocking pool.
    pub fn with_state<T>(&self, f: impl FnOnce(&SharedStateMachine) -> T) -> T {
        f(&self.shared.lock_for_read().sm)
    }

    /// Ledger records on disk, in all namespaces.
    pub fn ledger_records(&self) -> u64 {
        self.shared.ledger.total()
    }

    /// The last log id applied to the state machine.
    pub fn last_applied(&self) -> Option<LogId> {
        self.shared.lock_for_read().last_applied
    }

    /// Applies one entry; blocks (the ledger is in RocksDB).
    fn apply_entry(&self, entry: Entry) -> io::Result<Response> {
        let mut guard = self.shared.lock()?;
        let live = &mut *guard;
        let response = match entry.payload {
            EntryPayload::Blank => Response::default(),
            EntryPayload::Membership(membership) => {
                live.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                Response::default()
            }
            EntryPayload::Normal(request) => {
                let started = Instant::now();
                self.shared.ledger.begin_entry(entry.log_id.index);
                let applied = live.sm.apply(&request.command, request.at());
                self.shared.ledger.commit()?;
                if let Some(observer) = &live.observer {
                    observer.applied(&live.sm, &applied.events, started.elapsed());
                }
                Response {
                    applied: Some(applied),
                }
            }
        };
        live.last_applied = Some(entry.log_id);
        Ok(response)
    }

    /// Installs a snapshot; blocks. The snapshot is checked whole first
    /// (every record decoded, its checksum), then staged, the ledger
    /// replaced in bounded batches and the persisted snapshot moved to it
    /// in the last one ([`crate::snapshot_slot`]), then the fleet swapped
    /// in. A crash before that last batch leaves the install staged, and
    /// the next open finishes it.
    fn install_blocking(&self, meta: &SnapshotMeta, data: &SnapshotData) -> io::Result<()> {
        let mut guard = self.shared.lock()?;
        let fleet = self.shared.snapshots.install(meta, data, |staged| {
            install_records(&self.shared.ledger, &self.shared.db, staged)
        })?;
        let live = &mut *guard;
        live.sm.replace_fleet(fleet);
        live.last_applied = meta.last_log_id;
        live.last_membership = meta.last_membership.clone();
        if let Some(observer) = &live.observer {
            observer.installed(&live.sm);
        }
        Ok(())
    }

    /// A new file to receive a snapshot into, in this store's data
    /// directory; blocks. Finished, it is the [`SnapshotData`] openraft
    /// installs; dropped unfinished, it is removed.
    pub fn snapshot_sink(&self) -> io::Result<SnapshotSink> {
        self.shared.snapshots.incoming()
    }
}

/// Replaces the ledger with a staged snapshot's records, committing the
/// snapshot in the same last batch.
fn install_records(ledger: &LedgerControl, db: &DB, staged: &Staged) -> io::Result<()> {
    let mut reader = staged.records()?;
    let index = staged.meta().last_log_id.map(|id| id.index);
    ledger.install(&mut reader, index, |reader, batch| {
        staged.commit(reader, db, batch)
    })
}

impl RaftStateMachine<TypeConfig> for StateStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = StateSnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let live = self.shared.lock()?;
        Ok((live.last_applied, live.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let store = self.clone();
            let response = blocking(move || store.apply_entry(entry)).await?;
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> StateSnapshotBuilder {
        StateSnapshotBuilder::new(self.shared.clone())
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let store = self.clone();
        let meta = meta.clone();
        blocking(move || store.install_blocking(&meta, &snapshot)).await?;
        tracing::info!(last_applied = ?self.last_applied(), "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let shared = self.shared.clone();
        blocking(move || shared.snapshots.load()).await
    }
}
