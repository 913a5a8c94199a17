//! Coalesces outcome reports from many clients into few log entries.
//!
//! Every agent replica flushes its outcome buffer often (the SDK's
//! `report_flush_interval_ms`, 50 ms by default); a fleet of hundreds would
//! otherwise cost a log entry, an fsync share and an apply per flush. On the
//! node that proposes them, each `ReportOutcomes` joins a bounded queue
//! ([`REPORT_QUEUE_REPORTS_MAX`]). One task takes a proposal slot (at most
//! [`REPORT_BATCHES_IN_FLIGHT_MAX`] batches in flight), then drains whatever
//! is queued, up to [`REPORTS_PER_BATCH_MAX`] reports and
//! [`BATCH_OUTCOMES_MAX`] outcomes, and proposes it as one
//! `Command::ReportBatch`. Batching adds no waiting: under light load a
//! report goes alone at once; under load, reports pile up while earlier
//! batches commit, and the next batch takes them all.
//!
//! Each caller gets its own report's answer, and the batch's watch events
//! (the state it answers from includes them). When the proposal fails, every
//! caller gets the error, so a follower forwards each request to the leader
//! as it would have alone. A full queue refuses at once (`Unavailable`)
//! rather than making a caller wait: the SDK drops and counts reports it
//! cannot deliver, and a tool call never waits on reporting.

use crate::backend::BackendError;
use crate::limits::{REPORT_BATCHES_IN_FLIGHT_MAX, REPORT_QUEUE_REPORTS_MAX};
use fusebox_core::limits::{BATCH_OUTCOMES_MAX, REPORTS_PER_BATCH_MAX};
use fusebox_core::machine::{Answer, Applied, Command, Report};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinHandle;

struct Waiting {
    report: Report,
    reply: oneshot::Sender<Result<Applied, BackendError>>,
}

/// The queue's sending side; cheap to clone.
#[derive(Clone)]
pub struct ReportCoalescer {
    queue: mpsc::Sender<Waiting>,
}

impl ReportCoalescer {
    /// Starts the batching task; `propose` writes one command through Raft.
    pub fn start<P, Fut>(
        propose: P,
        stop: watch::Receiver<bool>,
    ) -> (ReportCoalescer, JoinHandle<()>)
    where
        P: Fn(Command) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Applied, BackendError>> + Send + 'static,
    {
        let (queue, rx) = mpsc::channel(REPORT_QUEUE_REPORTS_MAX);
        let task = tokio::spawn(run(rx, Arc::new(propose), stop));
        (ReportCoalescer { queue }, task)
    }

    /// Queues one replica's report and waits for its own answer.
    pub async fn submit(&self, report: Report) -> Result<Applied, BackendError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .try_send(Waiting { report, reply })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => BackendError::Unavailable(format!(
                    "{REPORT_QUEUE_REPORTS_MAX} outcome reports already waiting; report later"
                )),
                mpsc::error::TrySendError::Closed(_) => {
                    BackendError::Unavailable("the node is shutting down".into())
                }
            })?;
        answer
            .await
            .map_err(|_| BackendError::Unavailable("the report batcher stopped".into()))?
    }
}

async fn run<P, Fut>(
    mut rx: mpsc::Receiver<Waiting>,
    propose: Arc<P>,
    mut stop: watch::Receiver<bool>,
) where
    P: Fn(Command) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Applied, BackendError>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(REPORT_BATCHES_IN_FLIGHT_MAX));
    let mut carried: Option<Waiting> = None;
    loop {
        let first = match carried.take() {
            Some(w) => w,
            None => tokio::select! {
                next = rx.recv() => match next {
                    Some(w) => w,
                    None => return,
                },
                _ = stop.wait_for(|s| *s) => return,
            },
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (batch, rest) = drain(first, &mut rx);
        carried = rest;
        let propose = propose.clone();
        tokio::spawn(async move {
            let _slot = slot;
            deliver(batch, propose).await;
        });
    }
}

/// `first` and whatever is queued now, within the batch bounds; a report
/// that would overflow them is handed back for the next batch.
fn drain(first: Waiting, rx: &mut mpsc::Receiver<Waiting>) -> (Vec<Waiting>, Option<Waiting>) {
    let mut outcomes = first.report.outcomes.len();
    let mut batch = vec![first];
    while batch.len() < REPORTS_PER_BATCH_MAX {
        let Ok(next) = rx.try_recv() else {
            break;
        };
        let more = next.report.outcomes.len();
        if outcomes + more > BATCH_OUTCOMES_MAX {
            return (batch, Some(next));
        }
        outcomes += more;
        batch.push(next);
    }
    (batch, None)
}

async fn deliver<P, Fut>(batch: Vec<Waiting>, propose: Arc<P>)
where
    P: Fn(Command) -> Fut,
    Fut: Future<Output = Result<Applied, BackendError>>,
{
    let (reports, replies): (Vec<Report>, Vec<_>) =
        batch.into_iter().map(|w| (w.report, w.reply)).unzip();
    let expected = reports.len();
    let result = propose(Command::ReportBatch { reports }).await;
    let answers = match result {
        Ok(Applied {
            answer: Answer::ReportedBatch(answers),
            events,
        }) if answers.len() == expected => answers
            .into_iter()
            .map(|a| {
                Ok(Applied {
                    answer: a.map_or_else(Answer::Rejected, Answer::Reported),
                    events: events.clone(),
                })
            })
            .collect(),
        Ok(Applied {
            answer: Answer::Rejected(e),
            ..
        }) => vec![
            Ok(Applied {
                answer: Answer::Rejected(e),
                events: Vec::new(),
            });
            expected
        ],
        Ok(other) => vec![
            Err(BackendError::Fatal(format!(
                "a report batch of {expected} was answered {:?}",
                other.answer
            )));
            expected
        ],
        Err(e) => vec![Err(e); expected],
    };
    for (reply, answer) in replies.into_iter().zip(answers) {
        // A caller that gave up (deadline) no longer listens: fine.
        let _ = reply.send(answer);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fusebox_core::machine::StateMachine;
    use fusebox_core::{Namespace, ReplicaId, Timestamp};
    use std::sync::Mutex;

    fn report(replica: &str) -> Report {
        Report {
            namespace: Namespace::new("agents").unwrap(),
            replica: ReplicaId::new(replica).unwrap(),
            batch_seq: 0,
            outcomes: Vec::new(),
        }
    }

    #[tokio::test]
    async fn concurrent_reports_share_entries_and_each_gets_its_answer() {
        let proposed = Arc::new(Mutex::new(Vec::<usize>::new()));
        let state = Arc::new(Mutex::new(StateMachine::new()));
        let (log, sm) = (proposed.clone(), state.clone());
        let (_stop_tx, stop) = watch::channel(false);
        let (coalescer, _task) = ReportCoalescer::start(
            move |command: Command| {
                let (log, sm) = (log.clone(), sm.clone());
                async move {
                    if let Command::ReportBatch { reports } = &command {
                        log.lock().unwrap().push(reports.len());
                    }
                    // Slow commits, as a busy disk: reports pile up meanwhile.
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    Ok(sm.lock().unwrap().apply(&command, Timestamp(1)))
                }
            },
            stop,
        );
        let calls: Vec<_> = (0..200)
            .map(|i| {
                let c = coalescer.clone();
                tokio::spawn(async move { c.submit(report(&format!("r{i}"))).await })
            })
            .collect();
        for call in calls {
            let applied = call.await.unwrap().unwrap();
            assert!(matches!(applied.answer, Answer::Reported(_)), "{applied:?}");
        }
        let sizes = proposed.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 200, "{sizes:?}");
        assert!(sizes.len() < 50, "200 reports took {} entries", sizes.len());
    }

    #[tokio::test]
    async fn a_failed_proposal_reaches_every_caller() {
        let (_stop_tx, stop) = watch::channel(false);
        let (coalescer, _task) = ReportCoalescer::start(
            |_command: Command| async {
                Err(BackendError::NotLeader {
                    leader_id: Some(2),
                    leader_addr: None,
                })
            },
            stop,
        );
        let err = coalescer.submit(report("r1")).await.unwrap_err();
        assert!(matches!(
            err,
            BackendError::NotLeader {
                leader_id: Some(2),
                ..
            }
        ));
    }
}
