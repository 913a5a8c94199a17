//! Coalesces concurrent writes from many clients into few log entries.
//!
//! Two kinds of write come in many small pieces from many clients at once:
//! outcome reports ([`Reports`]: every agent replica flushes its buffer
//! every 50 ms by default) and ledger calls ([`LedgerCalls`]: a `begin` and
//! a `complete` around every guarded write). Each alone would cost a log
//! entry, an fsync share, a replication message and an apply.
//!
//! On the node that proposes them, each call joins a bounded queue of its
//! kind. One task takes a proposal slot (a few batches in flight), then
//! drains whatever is queued, within the kind's bounds (calls per batch and
//! a weight: outcomes, or encoded bytes), and proposes it as one command
//! (`Command::ReportBatch`, `Command::LedgerBatch`). Batching adds no
//! waiting: under light load a call goes alone at once; under load, calls
//! pile up while earlier batches commit, and the next batch takes them all.
//!
//! Each caller gets its own call's answer, and the batch's watch events
//! (the state it answers from includes them). When the proposal fails, every
//! caller gets the error, so a follower forwards each request to the leader
//! as it would have alone. A full report queue refuses at once
//! (`Unavailable`): the SDK drops and counts reports it cannot deliver, and
//! a tool call never waits on reporting. A full ledger queue makes the call
//! wait for room, within its deadline: a ledger call has no such fallback.

use crate::backend::BackendError;
use crate::limits::{
    LEDGER_BATCHES_IN_FLIGHT_MAX, LEDGER_BATCH_BYTES_MAX, LEDGER_QUEUE_CALLS_MAX,
    REPORT_BATCHES_IN_FLIGHT_MAX, REPORT_QUEUE_REPORTS_MAX,
};
use fusebox_core::limits::{BATCH_OUTCOMES_MAX, LEDGER_BATCH_OPS_MAX, REPORTS_PER_BATCH_MAX};
use fusebox_core::machine::{Answer, Applied, Command, LedgerOp, Report};
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinHandle;

/// One kind of write that is batched, and its bounds.
pub trait Batching: Send + Sync + 'static {
    /// One caller's call.
    type Call: Send + 'static;
    /// What the calls are, in messages.
    const WHAT: &'static str;
    /// Calls waiting for a batch.
    const QUEUE_MAX: usize;
    /// Batches proposed and not yet applied at once.
    const IN_FLIGHT_MAX: usize;
    /// Most calls in one batch.
    const CALLS_MAX: usize;
    /// Most weight in one batch (a call heavier than this goes alone).
    const WEIGHT_MAX: usize;
    /// Whether a caller waits for room in a full queue (within its own
    /// deadline) instead of being refused at once.
    const WAIT_FOR_ROOM: bool;
    /// A call's weight against [`Batching::WEIGHT_MAX`].
    fn weight(call: &Self::Call) -> usize;
    /// The one command a batch is proposed as.
    fn command(calls: Vec<Self::Call>) -> Command;
    /// Each call's own answer, from the batch's; the answer handed back
    /// when it is not the batch's kind or does not hold `calls` answers.
    fn split(answer: Answer, calls: usize) -> Result<Vec<Answer>, Answer>;
}

/// Outcome reports, batched into `Command::ReportBatch`.
pub struct Reports;

impl Batching for Reports {
    type Call = Report;
    const WHAT: &'static str = "outcome reports";
    const QUEUE_MAX: usize = REPORT_QUEUE_REPORTS_MAX;
    const IN_FLIGHT_MAX: usize = REPORT_BATCHES_IN_FLIGHT_MAX;
    const CALLS_MAX: usize = REPORTS_PER_BATCH_MAX;
    const WEIGHT_MAX: usize = BATCH_OUTCOMES_MAX;
    const WAIT_FOR_ROOM: bool = false;

    fn weight(call: &Report) -> usize {
        call.outcomes.len()
    }

    fn command(reports: Vec<Report>) -> Command {
        Command::ReportBatch { reports }
    }

    fn split(answer: Answer, calls: usize) -> Result<Vec<Answer>, Answer> {
        match answer {
            Answer::ReportedBatch(answers) if answers.len() == calls => Ok(answers
                .into_iter()
                .map(|a| a.map_or_else(Answer::Rejected, Answer::Reported))
                .collect()),
            other => Err(other),
        }
    }
}

/// Ledger `begin` and `complete` calls, batched into `Command::LedgerBatch`.
pub struct LedgerCalls;

impl Batching for LedgerCalls {
    type Call = LedgerOp;
    const WHAT: &'static str = "ledger calls";
    const QUEUE_MAX: usize = LEDGER_QUEUE_CALLS_MAX;
    const IN_FLIGHT_MAX: usize = LEDGER_BATCHES_IN_FLIGHT_MAX;
    const CALLS_MAX: usize = LEDGER_BATCH_OPS_MAX;
    const WEIGHT_MAX: usize = LEDGER_BATCH_BYTES_MAX;
    const WAIT_FOR_ROOM: bool = true;

    /// The call's encoded size (its entry's share).
    fn weight(call: &LedgerOp) -> usize {
        postcard::experimental::serialized_size(call).unwrap_or(LEDGER_BATCH_BYTES_MAX)
    }

    fn command(ops: Vec<LedgerOp>) -> Command {
        Command::LedgerBatch { ops }
    }

    fn split(answer: Answer, calls: usize) -> Result<Vec<Answer>, Answer> {
        match answer {
            Answer::LedgerBatch(answers) if answers.len() == calls => Ok(answers),
            other => Err(other),
        }
    }
}

struct Waiting<C> {
    call: C,
    reply: oneshot::Sender<Result<Applied, BackendError>>,
}

/// The queue's sending side for one kind of call; cheap to clone.
pub struct Coalescer<B: Batching> {
    queue: mpsc::Sender<Waiting<B::Call>>,
    kind: PhantomData<fn() -> B>,
}

impl<B: Batching> Clone for Coalescer<B> {
    fn clone(&self) -> Self {
        Coalescer {
            queue: self.queue.clone(),
            kind: PhantomData,
        }
    }
}

/// The report coalescer.
pub type ReportCoalescer = Coalescer<Reports>;
/// The ledger coalescer.
pub type LedgerCoalescer = Coalescer<LedgerCalls>;

impl<B: Batching> Coalescer<B> {
    /// Starts the batching task; `propose` writes one command through Raft.
    pub fn start<P, Fut>(propose: P, stop: watch::Receiver<bool>) -> (Coalescer<B>, JoinHandle<()>)
    where
        P: Fn(Command) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Applied, BackendError>> + Send + 'static,
    {
        let (queue, rx) = mpsc::channel(B::QUEUE_MAX);
        let task = tokio::spawn(run::<B, P, Fut>(rx, Arc::new(propose), stop));
        let coalescer = Coalescer {
            queue,
            kind: PhantomData,
        };
        (coalescer, task)
    }

    /// Queues one call and waits for its own answer.
    pub async fn submit(&self, call: B::Call) -> Result<Applied, BackendError> {
        let (reply, answer) = oneshot::channel();
        let waiting = Waiting { call, reply };
        let stopped = || BackendError::Unavailable("the node is shutting down".into());
        if B::WAIT_FOR_ROOM {
            self.queue.send(waiting).await.map_err(|_| stopped())?;
        } else {
            self.queue.try_send(waiting).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => BackendError::Unavailable(format!(
                    "{} {} already waiting; try later",
                    B::QUEUE_MAX,
                    B::WHAT
                )),
                mpsc::error::TrySendError::Closed(_) => stopped(),
            })?;
        }
        answer
            .await
            .map_err(|_| BackendError::Unavailable(format!("the batcher of {} stopped", B::WHAT)))?
    }
}

async fn run<B, P, Fut>(
    mut rx: mpsc::Receiver<Waiting<B::Call>>,
    propose: Arc<P>,
    mut stop: watch::Receiver<bool>,
) where
    B: Batching,
    P: Fn(Command) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Applied, BackendError>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(B::IN_FLIGHT_MAX));
    let mut carried: Option<Waiting<B::Call>> = None;
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
        let (batch, rest) = drain::<B>(first, &mut rx);
        carried = rest;
        let propose = propose.clone();
        tokio::spawn(async move {
            let _slot = slot;
            deliver::<B, P, Fut>(batch, propose).await;
        });
    }
}

/// A batch drained from the queue, and the call it left for the next one.
type Drained<C> = (Vec<Waiting<C>>, Option<Waiting<C>>);

/// `first` and whatever is queued now, within the batch bounds; a call
/// that would overflow them is handed back for the next batch.
fn drain<B: Batching>(
    first: Waiting<B::Call>,
    rx: &mut mpsc::Receiver<Waiting<B::Call>>,
) -> Drained<B::Call> {
    let mut weight = B::weight(&first.call);
    let mut batch = vec![first];
    while batch.len() < B::CALLS_MAX {
        let Ok(next) = rx.try_recv() else {
            break;
        };
        let more = B::weight(&next.call);
        if weight + more > B::WEIGHT_MAX {
            return (batch, Some(next));
        }
        weight += more;
        batch.push(next);
    }
    (batch, None)
}

async fn deliver<B, P, Fut>(batch: Vec<Waiting<B::Call>>, propose: Arc<P>)
where
    B: Batching,
    P: Fn(Command) -> Fut,
    Fut: Future<Output = Result<Applied, BackendError>>,
{
    let (calls, replies): (Vec<B::Call>, Vec<_>) =
        batch.into_iter().map(|w| (w.call, w.reply)).unzip();
    let expected = calls.len();
    let answers = match propose(B::command(calls)).await {
        Ok(Applied {
            answer: Answer::Rejected(e),
            revision,
            ..
        }) => vec![
            Ok(Applied {
                answer: Answer::Rejected(e),
                events: Vec::new(),
                revision,
            });
            expected
        ],
        Ok(Applied {
            answer,
            events,
            revision,
        }) => match B::split(answer, expected) {
            Ok(answers) => answers
                .into_iter()
                .map(|answer| {
                    Ok(Applied {
                        answer,
                        events: events.clone(),
                        revision,
                    })
                })
                .collect(),
            Err(other) => vec![
                Err(BackendError::Fatal(format!(
                    "a batch of {expected} {} was answered {other:?}",
                    B::WHAT
                )));
                expected
            ],
        },
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

    /// A coalescer, the batch sizes it proposed, and what keeps it running.
    type SlowCoalescer<B> = (Coalescer<B>, Arc<Mutex<Vec<usize>>>, watch::Sender<bool>);

    /// A coalescer of kind `B` over an in-memory state machine whose
    /// commits are slow, as on a busy disk (calls pile up meanwhile), and
    /// the size of every batch it proposed; it runs while the sender lives.
    fn slow_coalescer<B: Batching>() -> SlowCoalescer<B> {
        let proposed = Arc::new(Mutex::new(Vec::<usize>::new()));
        let state = Arc::new(Mutex::new(StateMachine::new()));
        let (log, sm) = (proposed.clone(), state.clone());
        let (stop_tx, stop) = watch::channel(false);
        let (coalescer, _task) = Coalescer::<B>::start(
            move |command: Command| {
                let (log, sm) = (log.clone(), sm.clone());
                async move {
                    let calls = match &command {
                        Command::ReportBatch { reports } => reports.len(),
                        Command::LedgerBatch { ops } => ops.len(),
                        _ => 1,
                    };
                    log.lock().unwrap().push(calls);
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    Ok(sm.lock().unwrap().apply(&command, Timestamp(1)))
                }
            },
            stop,
        );
        (coalescer, proposed, stop_tx)
    }

    #[tokio::test]
    async fn concurrent_reports_share_entries_and_each_gets_its_answer() {
        let (coalescer, proposed, _running) = slow_coalescer::<Reports>();
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

    fn begin(key: &str, attempt: &str) -> LedgerOp {
        LedgerOp::Begin {
            namespace: Namespace::new("agents").unwrap(),
            request: fusebox_core::ledger::BeginRequest {
                key: key.into(),
                fingerprint: "fp".into(),
                intent_id: "i".into(),
                tool: fusebox_core::ToolName::new("charge").unwrap(),
                target: "acct".into(),
                effect: fusebox_core::policy::EffectClass::NonIdempotentWrite,
                attempt: attempt.into(),
                lease_ms: 10_000,
            },
        }
    }

    #[tokio::test]
    async fn concurrent_ledger_calls_share_entries_and_each_gets_its_answer() {
        use fusebox_core::ledger::BeginAnswer;
        let (coalescer, proposed, _running) = slow_coalescer::<LedgerCalls>();
        // 100 keys, each begun by two attempts at once: whichever the batch
        // applies first starts, the other finds it in progress.
        let calls: Vec<_> = (0..200)
            .map(|i| {
                let c = coalescer.clone();
                let op = begin(&format!("k{}", i % 100), &format!("a{i}"));
                tokio::spawn(async move { c.submit(op).await })
            })
            .collect();
        let (mut started, mut in_progress) = (0, 0);
        for call in calls {
            match call.await.unwrap().unwrap().answer {
                Answer::Begin(BeginAnswer::Started { .. }) => started += 1,
                Answer::Begin(BeginAnswer::InProgress { .. }) => in_progress += 1,
                other => panic!("unexpected answer {other:?}"),
            }
        }
        assert_eq!((started, in_progress), (100, 100));
        let sizes = proposed.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 200, "{sizes:?}");
        assert!(sizes.len() < 50, "200 calls took {} entries", sizes.len());
    }

    #[test]
    fn a_ledger_batch_is_cut_by_encoded_size() {
        let (tx, mut rx) = mpsc::channel(8);
        let big = |key: &str| {
            let mut op = begin(key, "a");
            if let LedgerOp::Begin { request, .. } = &mut op {
                request.target = "t".repeat(LEDGER_BATCH_BYTES_MAX / 3);
            }
            op
        };
        let waiting = |op| Waiting {
            call: op,
            reply: oneshot::channel().0,
        };
        for key in ["b", "c", "d"] {
            tx.try_send(waiting(big(key))).unwrap();
        }
        let (batch, rest) = drain::<LedgerCalls>(waiting(big("a")), &mut rx);
        assert_eq!(
            batch.len(),
            2,
            "two of a third of the bound each fit, a third would not"
        );
        assert!(rest.is_some());
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
