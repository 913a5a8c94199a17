//! The storage thread: one dedicated thread per store that runs the log's
//! appends and the state machine's applies, one job at a time, in the order
//! they were handed to it.
//!
//! Both come once per log entry (or burst of entries) on every node, so how
//! they reach a thread is paid for on every write. On tokio's blocking pool
//! each one wakes whichever idle pool thread the pool picks, and the pool
//! keeps several (five or six under load, each woken a few hundred times a
//! second), and every hand-off wakes a sleeping thread. One thread that
//! stays busy while jobs are queued takes the next one without a wake.
//! Measured on the ledger bench (3 nodes, 64 clients, paired runs): about
//! 4% less server CPU per key, more at 256 clients (bench/README.md,
//! "Appends and applies on one storage thread").
//!
//! What stays on the blocking pool: whatever may run long or is not on the
//! write path (snapshot building and installing, votes, truncations,
//! purges, reads for replication): a snapshot must not hold up appends.
//!
//! The queue holds at most [`STORAGE_QUEUE_JOBS_MAX`] jobs; a caller waits
//! (asynchronously) for room. openraft hands out one append and one apply
//! at a time, so the queue is short in practice.
//!
//! A job that panics fails its own caller (as a panicked blocking task
//! would); the thread goes on with the next. When the last handle is
//! dropped the thread finishes the queued jobs and ends. On a thread marked
//! by [`crate::run_inline`] (the deterministic simulation) no thread is
//! started: every job runs inline, as [`crate::blocking`] does there.

use crate::limits::STORAGE_QUEUE_JOBS_MAX;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tokio::sync::{mpsc, oneshot};

type Job = Box<dyn FnOnce() + Send>;

/// A handle on a store's storage thread; clones share the thread.
#[derive(Clone)]
pub(crate) struct StorageThread {
    /// `None` in inline mode.
    jobs: Option<mpsc::Sender<Job>>,
}

impl StorageThread {
    /// Starts the thread (none in inline mode). Call it within a tokio
    /// runtime's context: the jobs run in it.
    pub(crate) fn start() -> io::Result<StorageThread> {
        if crate::rocks::is_inline() {
            return Ok(StorageThread { jobs: None });
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| io::Error::other(format!("storage thread needs a runtime: {e}")))?;
        let (jobs, mut queue) = mpsc::channel::<Job>(STORAGE_QUEUE_JOBS_MAX);
        std::thread::Builder::new()
            .name("raft-storage".into())
            .spawn(move || {
                let _context = runtime.enter();
                while let Some(job) = queue.blocking_recv() {
                    if catch_unwind(AssertUnwindSafe(job)).is_err() {
                        tracing::error!("a storage job panicked; its caller gets an error");
                    }
                }
            })?;
        Ok(StorageThread { jobs: Some(jobs) })
    }

    /// Runs `f` on the storage thread (inline in inline mode) and answers
    /// what it answered.
    pub(crate) async fn run<T, F>(&self, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce() -> io::Result<T> + Send + 'static,
    {
        let Some(jobs) = &self.jobs else {
            return f();
        };
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move || {
            // `f`'s captures are dropped before the answer goes out.
            let result = f();
            let _ = answer.send(result);
        });
        if jobs.send(job).await.is_err() {
            return Err(io::Error::other("the storage thread has stopped"));
        }
        answered
            .await
            .map_err(|_| io::Error::other("a storage job panicked"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::join_all;
    use std::sync::{Arc, Mutex};

    #[tokio::test]
    async fn jobs_run_in_order_on_one_thread_and_answer_their_callers() {
        let thread = StorageThread::start().expect("start");
        let ran = Arc::new(Mutex::new(Vec::new()));
        // All handed over at once: the queue, not the awaits, orders them.
        // As many as the queue holds, so each is queued the first time it
        // is polled, in order: with 32, those that waited for room were
        // not always queued in theirs (one loaded run queued 21 and 22
        // after 31).
        let jobs = STORAGE_QUEUE_JOBS_MAX;
        let answers = join_all((0..jobs).map(|i| {
            let ran = Arc::clone(&ran);
            thread.run(move || {
                ran.lock().unwrap().push(i);
                Ok(std::thread::current().name().map(str::to_owned))
            })
        }))
        .await;
        assert_eq!(*ran.lock().unwrap(), (0..jobs).collect::<Vec<_>>());
        for name in answers {
            assert_eq!(name.expect("run").as_deref(), Some("raft-storage"));
        }
        let failed: io::Result<()> = thread.run(|| Err(io::Error::other("no"))).await;
        assert_eq!(failed.expect_err("its own error").to_string(), "no");
    }

    #[tokio::test]
    async fn a_panicking_job_fails_its_caller_and_the_thread_goes_on() {
        let thread = StorageThread::start().expect("start");
        let panicked: io::Result<()> = thread.run(|| panic!("a bug")).await;
        assert!(panicked.is_err());
        assert_eq!(thread.run(|| Ok(7)).await.expect("still running"), 7);
    }
}
