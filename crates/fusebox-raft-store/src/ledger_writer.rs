//! The ledger's writer: a dedicated thread that writes the ledger's
//! written-behind batches ([`crate::ledger_store`]), so the storage thread
//! goes on appending and applying while one is written.
//!
//! A batch is hundreds of records and their index entries; written on the
//! storage thread it held up every append and apply queued behind it (on a
//! leader an entry's wait from commit to apply had a p99 of about 10 ms,
//! bench/README.md "Where a pair's time goes"; paired runs with this thread
//! carried 4% more keys a second, "The ledger's batches on a writer
//! thread"). The ledger hands at
//! most one batch here at a time and waits for it before the next, so
//! batches reach RocksDB in the order of the entries they cover.
//!
//! Dropping the [`Writer`] closes its queue; the thread finishes the batch
//! it holds and is joined, so the database is closed when the last handle
//! goes. On a thread marked by [`crate::run_inline`] (the deterministic
//! simulation) there is no writer thread: each batch is written inline,
//! when it is handed over.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// A handle on the writer thread; dropping it stops and joins the thread.
pub(crate) struct Writer {
    jobs: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the thread (none in inline mode).
    pub(crate) fn start() -> io::Result<Writer> {
        if crate::rocks::is_inline() {
            return Ok(Writer {
                jobs: None,
                thread: None,
            });
        }
        // One batch being written and one waiting, at most: the ledger waits
        // for each before it hands over the next.
        let (jobs, queue) = sync_channel::<Job>(1);
        let thread = std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    if catch_unwind(AssertUnwindSafe(job)).is_err() {
                        tracing::error!("a ledger write panicked; the ledger latches it");
                    }
                }
            })?;
        Ok(Writer {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Runs `write` on the thread; its answer comes on the receiver once it
    /// has run (and dropped what it captured). In inline mode, or if the
    /// thread has stopped, `write` runs here instead, so a batch is never
    /// lost. A panic in `write` closes the receiver without an answer.
    pub(crate) fn write<F>(&self, write: F) -> Receiver<io::Result<()>>
    where
        F: FnOnce() -> io::Result<()> + Send + 'static,
    {
        let (answer, answered) = sync_channel(1);
        let job: Job = Box::new(move || {
            let result = write();
            let _ = answer.send(result);
        });
        match &self.jobs {
            Some(jobs) => {
                if let Err(returned) = jobs.send(job) {
                    tracing::error!("the ledger writer thread has stopped; writing here");
                    returned.0();
                }
            }
            None => job(),
        }
        answered
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("ledger writer thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_run_on_their_own_thread_and_answer() {
        let writer = Writer::start().expect("start");
        let done = writer.write(|| {
            assert_eq!(std::thread::current().name(), Some("ledger-writer"));
            Err(io::Error::other("disk full"))
        });
        let answer = done.recv().expect("an answer");
        assert_eq!(answer.expect_err("its error").to_string(), "disk full");
    }

    #[test]
    fn a_panicking_write_closes_its_answer_and_the_thread_goes_on() {
        let writer = Writer::start().expect("start");
        assert!(writer.write(|| panic!("a bug")).recv().is_err());
        let done = writer.write(|| {
            assert_eq!(std::thread::current().name(), Some("ledger-writer"));
            Ok(())
        });
        assert!(done.recv().expect("still running").is_ok());
    }

    /// The thread a write ran on.
    fn where_it_ran(writer: &Writer) -> std::thread::ThreadId {
        let (ran, on) = sync_channel(1);
        let done = writer.write(move || {
            let _ = ran.send(std::thread::current().id());
            Ok(())
        });
        done.recv().expect("an answer").expect("written");
        on.recv().expect("a thread")
    }

    #[test]
    fn a_write_runs_where_it_is_handed_over_when_the_thread_has_gone() {
        let (jobs, queue) = sync_channel::<Job>(1);
        drop(queue);
        let gone = Writer {
            jobs: Some(jobs),
            thread: None,
        };
        assert_eq!(where_it_ran(&gone), std::thread::current().id());
    }

    #[test]
    fn in_inline_mode_there_is_no_thread_and_writes_run_where_they_are_handed_over() {
        std::thread::spawn(|| {
            crate::rocks::run_inline();
            let writer = Writer::start().expect("start");
            assert!(writer.thread.is_none());
            assert_eq!(where_it_ran(&writer), std::thread::current().id());
        })
        .join()
        .expect("ran inline");
    }
}
