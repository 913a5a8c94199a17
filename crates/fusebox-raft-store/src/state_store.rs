//! The state machine store: the core [`StateMachine`] in memory, behind a
//! lock, with the last applied log id and membership beside it.
//!
//! # Durability (what is fsynced when)
//!
//! Applying an entry writes nothing: the state lives in memory and the
//! committed log is its durable record. Only snapshots are persisted (see
//! [`crate::snapshot_slot`]): a built or installed snapshot is on disk
//! (written with `sync = true`) before `build_snapshot` or
//! `install_snapshot` returns. On open the store loads that snapshot, so
//! [`RaftStateMachine::applied_state`] reports exactly what is durable, and
//! openraft re-applies the committed log after it.
//!
//! # Locking
//!
//! One `std::sync::Mutex` guards the state, the last applied log id and the
//! membership together, so every reader sees them consistent. It is never
//! held across an `.await`: each entry is applied under a short lock, and a
//! snapshot is encoded, restored and persisted on the blocking pool.

use crate::rocks::blocking;
use crate::snapshot_builder::StateSnapshotBuilder;
use crate::snapshot_slot::{Save, SnapshotSlot};
use crate::types::{
    snapshot_bytes, Entry, LogId, Response, Snapshot, SnapshotData, SnapshotMeta, StoredMembership,
    TypeConfig,
};
use fusebox_core::machine::{StateMachine, WatchEvent};
use futures::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use rocksdb::DB;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Learns of every state change while the state lock is held, so what it
/// publishes (watch events) is in exactly the order of the state.
///
/// Calls must be short and must not call back into the [`StateStore`]
/// (the lock is held: that would deadlock). They may come from a tokio
/// worker or from a blocking-pool thread.
pub trait ApplyObserver: Send + Sync + 'static {
    /// A normal entry was applied; `events` are its watch events (maybe none).
    fn applied(&self, state: &StateMachine, events: &[WatchEvent]);
    /// A snapshot replaced the whole state.
    fn installed(&self, state: &StateMachine);
}

/// The state machine store; cheap to clone, every clone shares the state.
#[derive(Clone)]
pub struct StateStore {
    inner: Arc<Inner>,
}

struct Inner {
    live: Mutex<Live>,
    snapshots: SnapshotSlot,
}

/// What the lock guards.
pub(crate) struct Live {
    pub(crate) sm: StateMachine,
    pub(crate) last_applied: Option<LogId>,
    pub(crate) last_membership: StoredMembership,
    observer: Option<Arc<dyn ApplyObserver>>,
}

impl StateStore {
    /// Opens over `db`, restoring the persisted snapshot if there is one.
    pub(crate) fn open(db: Arc<DB>) -> io::Result<StateStore> {
        let snapshots = SnapshotSlot::new(db);
        let live = match snapshots.load()? {
            None => Live {
                sm: StateMachine::new(),
                last_applied: None,
                last_membership: StoredMembership::default(),
                observer: None,
            },
            Some(snapshot) => Live {
                sm: restore(&snapshot.meta, snapshot_bytes(&snapshot.snapshot))?,
                last_applied: snapshot.meta.last_log_id,
                last_membership: snapshot.meta.last_membership,
                observer: None,
            },
        };
        tracing::info!(last_applied = ?live.last_applied, "state machine opened");
        Ok(StateStore {
            inner: Arc::new(Inner {
                live: Mutex::new(live),
                snapshots,
            }),
        })
    }

    /// Sets who learns of state changes (replacing any earlier observer).
    pub fn set_observer(&self, observer: Arc<dyn ApplyObserver>) {
        self.lock_for_read().observer = Some(observer);
    }

    /// Runs a short, synchronous read of the state under the lock.
    pub fn with_state<T>(&self, f: impl FnOnce(&StateMachine) -> T) -> T {
        f(&self.lock_for_read().sm)
    }

    /// The last log id applied to the in-memory state.
    pub fn last_applied(&self) -> Option<LogId> {
        self.lock_for_read().last_applied
    }

    /// The lock, for writers: a poisoned lock (an apply or observer
    /// panicked mid-change) is an error that stops Raft.
    pub(crate) fn lock(&self) -> io::Result<MutexGuard<'_, Live>> {
        self.inner
            .live
            .lock()
            .map_err(|_| io::Error::other("state machine lock poisoned: an apply panicked"))
    }

    /// The lock, for readers: after a panic Raft has stopped, and reads of
    /// the last state are still allowed.
    fn lock_for_read(&self) -> MutexGuard<'_, Live> {
        self.inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn snapshots(&self) -> &SnapshotSlot {
        &self.inner.snapshots
    }

    fn apply_entry(&self, entry: Entry) -> io::Result<Response> {
        let mut guard = self.lock()?;
        let live = &mut *guard;
        live.last_applied = Some(entry.log_id);
        match entry.payload {
            EntryPayload::Blank => Ok(Response::default()),
            EntryPayload::Membership(membership) => {
                live.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                Ok(Response::default())
            }
            EntryPayload::Normal(request) => {
                let applied = live.sm.apply(&request.command, request.at());
                if let Some(observer) = &live.observer {
                    observer.applied(&live.sm, &applied.events);
                }
                Ok(Response {
                    applied: Some(applied),
                })
            }
        }
    }

    /// Restores, persists and swaps in a snapshot; blocks.
    fn install_blocking(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        let sm = restore(meta, data)?;
        self.inner.snapshots.save(meta, data, Save::Always)?;
        let mut guard = self.lock()?;
        let live = &mut *guard;
        live.sm = sm;
        live.last_applied = meta.last_log_id;
        live.last_membership = meta.last_membership.clone();
        if let Some(observer) = &live.observer {
            observer.installed(&live.sm);
        }
        Ok(())
    }
}

fn restore(meta: &SnapshotMeta, data: &[u8]) -> io::Result<StateMachine> {
    StateMachine::restore(data).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("snapshot {meta} refused: {e}"),
        )
    })
}

impl RaftStateMachine<TypeConfig> for StateStore {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = StateSnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let live = self.lock()?;
        Ok((live.last_applied, live.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let response = self.apply_entry(entry)?;
            if let Some(responder) = responder {
                responder.send(response);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> StateSnapshotBuilder {
        StateSnapshotBuilder::new(self.clone())
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let store = self.clone();
        let meta = meta.clone();
        blocking(move || store.install_blocking(&meta, snapshot_bytes(&snapshot))).await?;
        tracing::info!(last_applied = ?self.last_applied(), "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let store = self.clone();
        blocking(move || store.snapshots().load()).await
    }
}
