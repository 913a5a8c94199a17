//! The state machine store: the core [`StateMachine`] behind a lock, its
//! fleet (breakers, policies) in memory and its ledger in RocksDB, with the
//! last applied log id and membership beside it.
//!
//! # Durability (what is fsynced when)
//!
//! Applying an entry commits its ledger changes, which are written behind,
//! with the last entry's index, in unsynced batches ([`crate::ledger_store`]:
//! a crash loses at most twice [`crate::limits::UNWRITTEN_RECORDS_MAX`]
//! records' changes, a batch being written and the next, which the replay
//! below redoes); the fleet lives in memory
//! and the committed log is its durable record. Snapshots are persisted
//! (see [`crate::snapshot_slot`]): a built or installed snapshot is on disk
//! (written with `sync = true`) before `build_snapshot` or
//! `install_snapshot` returns, unless a built one is older than the one
//! already persisted, which is then kept.
//!
//! Snapshots copy the whole ledger, so they are far apart. Between them the
//! fleet is also saved in an entry's ledger batch (a *checkpoint*) every
//! [`FLEET_CHECKPOINT_ENTRIES`] applied entries or more, and with every
//! entry whose fleet change reads the ledger
//! ([`fusebox_core::machine::Command::fleet_reads_ledger`]). On open the
//! store takes the fleet from the newer of the checkpoint and the snapshot
//! and opens the ledger where it is, so [`RaftStateMachine::applied_state`]
//! reports that log id, and openraft re-applies the committed log after it.
//! Entries the ledger on disk already holds are replayed for the fleet
//! only ([`StateMachine::replay`]): their ledger calls are neither read nor
//! written, and none of them reads the ledger into the fleet (such an entry
//! saved the fleet with it, so a replay starts after it).
//!
//! # Locking
//!
//! One `std::sync::Mutex` guards the state, the last applied log id and the
//! membership together ([`crate::live`]), so every reader sees them
//! consistent. It is never held across an `.await`: each entry is applied
//! under a short lock on the [storage thread](crate::storage_thread) (the
//! ledger reads and writes RocksDB), and a snapshot is copied under the
//! lock (the fleet, and a RocksDB point-in-time view of the ledger) then
//! encoded and persisted without it ([`crate::snapshot_builder`]).

use crate::codec::{decode, encode};
use crate::ledger_store::{load_fleet_checkpoint, LedgerControl, RocksLedger};
use crate::limits::{
    APPLY_CHUNK_ENTRIES_MAX, FLEET_CHECKPOINT_BYTES_PER_ENTRY, FLEET_CHECKPOINT_ENTRIES,
};
use crate::live::{Live, SavedFleet, Shared};
use crate::log_store::UnsavedCommitted;
use crate::observer::ApplyObserver;
use crate::rocks::blocking;
use crate::snapshot_builder::StateSnapshotBuilder;
use crate::snapshot_file::SnapshotSink;
use crate::snapshot_slot::{SnapshotSlot, Staged};
use crate::storage_thread::StorageThread;
use crate::types::{
    Entry, LogId, Response, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig,
};
use fusebox_core::ledger::BoxedLedger;
use fusebox_core::limits::FLEET_BYTES_MAX;
use fusebox_core::machine::{Answer, Applied, Command, Fleet, SharedStateMachine, StateMachine};
use fusebox_core::CoreError;
use futures::{Stream, StreamExt};
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
    /// Where entries are applied.
    storage: StorageThread,
    /// The committed log id the log store noted, written by the next apply.
    committed: Arc<UnsavedCommitted>,
}

impl StateStore {
    /// Opens over `db`: the ledger where it is, the fleet from the
    /// persisted snapshot if there is one.
    pub(crate) fn open(
        db: Arc<DB>,
        dir: &Path,
        storage: StorageThread,
        committed: Arc<UnsavedCommitted>,
    ) -> io::Result<StateStore> {
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
        let from_snapshot = snapshots.load_fleet()?;
        let checkpoint = load_checkpoint(&db)?;
        let snapshot_id = from_snapshot.as_ref().and_then(|(meta, _)| meta.last_log_id);
        let (last_applied, last_membership, fleet, bytes, from) = match (checkpoint, from_snapshot)
        {
            (Some((id, membership, fleet, bytes)), _) if Some(id) > snapshot_id => {
                (Some(id), membership, fleet, bytes, "checkpoint")
            }
            (_, Some((meta, fleet))) => (
                meta.last_log_id,
                meta.last_membership,
                fleet,
                0,
                "snapshot",
            ),
            (_, None) => (None, StoredMembership::default(), Fleet::default(), 0, "empty"),
        };
        let live = Live {
            sm: StateMachine::from_parts(fleet, boxed),
            last_applied,
            last_membership,
            observer: None,
            saved: SavedFleet {
                index: last_applied.map_or(0, |id| id.index),
                bytes,
            },
        };
        tracing::info!(last_applied = ?live.last_applied, fleet_from = from, "state machine opened");
        Ok(StateStore {
            shared: Arc::new(Shared::new(live, snapshots, control, db)),
            storage,
            committed,
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

    /// Applies `entries` in order until one fails; blocks. Each applied
    /// entry's client gets its answer at once, from this thread, before
    /// the next entry is applied: not after the whole chunk, nor through
    /// another task.
    fn apply_entries(&self, entries: Vec<EntryResponder<TypeConfig>>) -> io::Result<()> {
        for (entry, responder) in entries {
            let response = self.apply_entry(entry)?;
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
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
                let index = entry.log_id.index;
                let (replayed, applied, checkpoint) = if self.shared.ledger.begin_entry(index) {
                    // A restart re-applying the log behind the ledger on
                    // disk: only the fleet needs the entry, and nobody waits
                    // for its answer.
                    (live.sm.replay(&request.command, request.at()), None, None)
                } else {
                    let applied = live.sm.apply(&request.command, request.at());
                    let checkpoint = if read_ledger_into_fleet(&request.command, &applied)
                        || checkpoint_due(live.saved, index)
                    {
                        let bytes = encode_checkpoint(&entry.log_id, live)?;
                        live.saved = SavedFleet {
                            index,
                            bytes: bytes.len() as u64,
                        };
                        Some(bytes)
                    } else {
                        None
                    };
                    (Vec::new(), Some(applied), checkpoint)
                };
                self.shared.ledger.commit(checkpoint.as_deref())?;
                if let Some(observer) = &live.observer {
                    let events = applied.as_ref().map_or(&replayed, |a| &a.events);
                    observer.applied(&live.sm, events, started.elapsed());
                }
                Response { applied }
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
        live.saved = SavedFleet {
            index: meta.last_log_id.map_or(0, |id| id.index),
            bytes: 0,
        };
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

/// Whether applying `command` read the ledger into the fleet, so the fleet
/// must be saved with its entry: a namespace deletion that was not refused
/// before the ledger was consulted (a namespace that does not exist is
/// refused whatever the ledger holds).
fn read_ledger_into_fleet(command: &Command, applied: &Applied) -> bool {
    command.fleet_reads_ledger()
        && !matches!(
            applied.answer,
            Answer::Rejected(CoreError::NotFound { .. })
        )
}

/// Whether the fleet is due to be saved with entry `index`: at least
/// [`FLEET_CHECKPOINT_ENTRIES`] entries after the last save, and more for
/// a large fleet ([`FLEET_CHECKPOINT_BYTES_PER_ENTRY`]).
fn checkpoint_due(saved: SavedFleet, index: u64) -> bool {
    let spacing = crate::rocks::fleet_checkpoint_spacing().unwrap_or_else(|| {
        FLEET_CHECKPOINT_ENTRIES.max(saved.bytes / FLEET_CHECKPOINT_BYTES_PER_ENTRY)
    });
    index.saturating_sub(saved.index) >= spacing
}

/// The fleet as of entry `id`, with the membership, encoded for the
/// ledger's batch.
fn encode_checkpoint(id: &LogId, live: &Live) -> io::Result<Vec<u8>> {
    let bytes = encode(
        "fleet checkpoint",
        &(id, &live.last_membership, live.sm.fleet()),
    )?;
    if bytes.len() > FLEET_BYTES_MAX + CHECKPOINT_OVERHEAD_BYTES_MAX {
        return Err(io::Error::other(format!(
            "fleet checkpoint of {} bytes is past the fleet's bound of {FLEET_BYTES_MAX}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// The log id, the membership and the format byte, at most, besides the
/// fleet in a checkpoint.
const CHECKPOINT_OVERHEAD_BYTES_MAX: usize = 64 * 1024;

/// The fleet last saved with a ledger batch: its log id, membership, fleet
/// and encoded size.
fn load_checkpoint(db: &DB) -> io::Result<Option<(LogId, StoredMembership, Fleet, u64)>> {
    let Some(bytes) = load_fleet_checkpoint(db)? else {
        return Ok(None);
    };
    if bytes.len() > FLEET_BYTES_MAX + CHECKPOINT_OVERHEAD_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("fleet checkpoint of {} bytes is past its bound", bytes.len()),
        ));
    }
    let (id, membership, fleet): (LogId, StoredMembership, Fleet) =
        decode("fleet checkpoint", &bytes)?;
    fleet.check_invariants().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("fleet checkpoint of entry {id}: {e}"),
        )
    })?;
    Ok(Some((id, membership, fleet, bytes.len() as u64)))
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

    async fn apply<Strm>(&mut self, entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        // Every entry already waiting goes in one trip to the storage
        // thread; a failure stops the chunk there, after the entries before
        // it have had their answers.
        let mut chunks = entries.ready_chunks(APPLY_CHUNK_ENTRIES_MAX);
        while let Some(chunk) = chunks.next().await {
            let mut ready = Vec::with_capacity(chunk.len());
            let mut failed = None;
            for item in chunk {
                match item {
                    Ok(pair) => ready.push(pair),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let store = self.clone();
            self.storage
                .run(move || {
                    store.committed.write(&store.shared.db)?;
                    store.apply_entries(ready)
                })
                .await?;
            if let Some(e) = failed {
                return Err(e);
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
