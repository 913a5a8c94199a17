//! The log flusher: a dedicated thread that fsyncs the WAL and only then
//! tells openraft an append is durable.
//!
//! `append` writes its batch without syncing (so the entries are readable at
//! once) and queues its completion callback here. The thread takes every
//! callback queued so far, syncs the WAL once (`flush_wal(true)`), and calls
//! them all, in order: group commit, one fsync for many appends. A callback
//! is queued only after its batch was written, so the sync it waits for
//! covers that batch.
//!
//! The queue holds at most [`FLUSH_QUEUE_CALLBACKS_MAX`] callbacks; a full
//! queue makes the (blocking-pool) append wait, which slows openraft down
//! rather than growing memory. Dropping the [`Flusher`] closes the queue; the thread
//! flushes what is left, completes it, and is joined, so the database is
//! closed when the last handle goes.
//!
//! On a thread marked by [`crate::run_inline`] (the deterministic
//! simulation) there is no flusher thread: each append syncs the WAL itself
//! before its callback runs, so durability is the same and no real-time
//! thread decides when an append completes.

use crate::limits::FLUSH_QUEUE_CALLBACKS_MAX;
use crate::types::TypeConfig;
use openraft::storage::IOFlushed;
use rocksdb::DB;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A handle on the flusher thread; dropping it stops and joins the thread.
pub(crate) struct Flusher {
    queue: Option<SyncSender<IOFlushed<TypeConfig>>>,
    thread: Option<JoinHandle<()>>,
    /// Inline mode: the database each append syncs itself.
    inline: Option<Arc<DB>>,
}

/// Where an append's completion goes once its batch is written.
pub(crate) enum FlushSink {
    /// The flusher thread's queue.
    Queue(SyncSender<IOFlushed<TypeConfig>>),
    /// Sync here and now (inline mode).
    Inline(Arc<DB>),
}

impl Flusher {
    /// Starts the thread (none in inline mode).
    pub(crate) fn start(db: Arc<DB>) -> io::Result<Flusher> {
        if crate::rocks::is_inline() {
            return Ok(Flusher {
                queue: None,
                thread: None,
                inline: Some(db),
            });
        }
        let (queue, pending) = sync_channel(FLUSH_QUEUE_CALLBACKS_MAX);
        let thread = std::thread::Builder::new()
            .name("raft-log-flush".into())
            .spawn(move || run(&db, &pending))?;
        Ok(Flusher {
            queue: Some(queue),
            thread: Some(thread),
            inline: None,
        })
    }

    /// Where appends send their completion, to move into a blocking task.
    pub(crate) fn sink(&self) -> io::Result<FlushSink> {
        if let Some(db) = &self.inline {
            return Ok(FlushSink::Inline(db.clone()));
        }
        self.queue
            .clone()
            .map(FlushSink::Queue)
            .ok_or_else(|| io::Error::other("log flusher stopped"))
    }
}

/// WAL syncs made for log appends by this process (both modes).
static WAL_SYNCS: AtomicU64 = AtomicU64::new(0);

/// How many WAL syncs this process has made for log appends: one per group
/// of appends the flusher commits together (votes and snapshots sync on
/// their own and are not counted).
pub fn wal_syncs() -> u64 {
    WAL_SYNCS.load(Ordering::Relaxed)
}

/// Queues `callback` for the next WAL sync (blocks while the queue is
/// full), or in inline mode syncs and completes it at once. Call it from a
/// blocking thread, after the batch was written.
pub(crate) fn enqueue(sink: &FlushSink, callback: IOFlushed<TypeConfig>) -> io::Result<()> {
    let queue = match sink {
        FlushSink::Queue(queue) => queue,
        FlushSink::Inline(_) if crate::rocks::unsynced_appends() => {
            callback.io_completed(Ok(()));
            return Ok(());
        }
        FlushSink::Inline(db) => {
            WAL_SYNCS.fetch_add(1, Ordering::Relaxed);
            let synced = db
                .flush_wal(true)
                .map_err(|e| io::Error::other(format!("rocksdb wal fsync: {e}")));
            if synced.is_ok() {
                crate::rocks::synced(db);
            }
            let answer = synced
                .as_ref()
                .map(|_| ())
                .map_err(|e| io::Error::new(e.kind(), e.to_string()));
            callback.io_completed(answer);
            return synced;
        }
    };
    queue.send(callback).map_err(|returned| {
        let err = || io::Error::other("log flusher stopped before the append was synced");
        returned.0.io_completed(Err(err()));
        err()
    })
}

impl Drop for Flusher {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("raft log flusher thread panicked");
            }
        }
    }
}

fn run(db: &DB, pending: &Receiver<IOFlushed<TypeConfig>>) {
    while let Ok(first) = pending.recv() {
        let mut callbacks = vec![first];
        callbacks.extend(pending.try_iter().take(FLUSH_QUEUE_CALLBACKS_MAX));
        WAL_SYNCS.fetch_add(1, Ordering::Relaxed);
        let synced = db.flush_wal(true).map_err(|e| e.to_string());
        if let Err(e) = &synced {
            tracing::error!(error = %e, "raft log fsync failed");
        }
        for callback in callbacks {
            let result = synced
                .as_ref()
                .map(|_| ())
                .map_err(|e| io::Error::other(format!("rocksdb wal fsync: {e}")));
            callback.io_completed(result);
        }
    }
}
