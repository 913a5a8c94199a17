//! Outcome reports: a bounded buffer on the call path, a flusher behind it.
//!
//! Recording never waits and never allocates once the queue has grown to
//! its working size: an outcome is a few numbers and a shared handle on its
//! resolved tool, pushed onto a bounded queue under a short lock; when the
//! queue is full it is dropped and counted (`outcomes_dropped`). The
//! flusher turns queued outcomes into wire messages off the call path. The flusher sends a batch every
//! `report_flush_interval_ms`, or as soon as a batch's worth is waiting.
//! Each batch carries a growing `batch_seq`, so the cluster can drop a batch
//! resent after a lost answer; a batch no node accepts within the RPC
//! deadline is dropped and counted (`outcomes_lost`) rather than held,
//! because evidence that arrives late is evidence about the past.

use crate::config::{ClientConfig, REPORT_BATCH_PREALLOCATE_OUTCOMES};
use crate::convert::class_to_proto;
use crate::endpoints::Endpoints;
use crate::metrics::{bump, Metrics};
use crate::view::Resolved;
use fusebox_core::OutcomeClass;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::breakers_client::BreakersClient;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// One outcome waiting to be sent.
#[derive(Debug)]
pub(crate) struct Queued {
    /// The tool, as resolved when the outcome was recorded.
    pub(crate) tool: Arc<Resolved>,
    pub(crate) class: OutcomeClass,
    pub(crate) duration_ms: u64,
    /// Generations of the tool's and the server's breakers the call ran
    /// under.
    pub(crate) generations: (u64, u64),
}

impl Queued {
    fn to_proto(&self) -> pb::Outcome {
        let tool = &self.tool.tool;
        pb::Outcome {
            server: tool.server().to_owned(),
            tool: tool.tool().to_owned(),
            backend: tool.backend().map(str::to_owned),
            class: class_to_proto(self.class) as i32,
            duration_ms: self.duration_ms,
            generation_seen: Some(self.generations.0),
            server_generation_seen: Some(self.generations.1),
        }
    }
}

/// The queue both sides share.
#[derive(Debug)]
struct Queue {
    outcomes: Mutex<VecDeque<Queued>>,
    /// Most outcomes held at once.
    max: usize,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Queued>> {
        self.outcomes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The call path's side: record and move on.
#[derive(Debug)]
pub(crate) struct OutcomeBuffer {
    queue: Arc<Queue>,
    full_batch: usize,
    wake: Arc<Notify>,
    metrics: Arc<Metrics>,
}

/// The flusher's side.
pub(crate) struct Flusher {
    queue: Arc<Queue>,
    wake: Arc<Notify>,
    config: ClientConfig,
    endpoints: Arc<Endpoints>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    batch_seq: u64,
}

/// A buffer and the flusher that drains it.
pub(crate) fn channel(
    config: &ClientConfig,
    endpoints: Arc<Endpoints>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    first_seq: u64,
) -> (OutcomeBuffer, Flusher) {
    let max = config.report_buffer_outcomes_max;
    // The queue grows to its working size once and keeps that room.
    let queue = Arc::new(Queue {
        outcomes: Mutex::new(VecDeque::with_capacity(
            max.min(REPORT_BATCH_PREALLOCATE_OUTCOMES),
        )),
        max,
    });
    let wake = Arc::new(Notify::new());
    let buffer = OutcomeBuffer {
        queue: queue.clone(),
        full_batch: config.report_batch_outcomes_max,
        wake: wake.clone(),
        metrics: metrics.clone(),
    };
    let flusher = Flusher {
        queue,
        wake,
        config: config.clone(),
        endpoints,
        metrics,
        stop,
        batch_seq: first_seq,
    };
    (buffer, flusher)
}

impl OutcomeBuffer {
    /// Queues one outcome; drops and counts it when the buffer is full.
    pub(crate) fn record(&self, outcome: Queued) {
        let queued = {
            let mut queue = self.queue.lock();
            if queue.len() >= self.queue.max {
                None
            } else {
                queue.push_back(outcome);
                Some(queue.len())
            }
        };
        match queued {
            Some(queued) => {
                bump(&self.metrics.outcomes_recorded);
                if queued == self.full_batch {
                    self.wake.notify_one();
                }
            }
            None => bump(&self.metrics.outcomes_dropped),
        }
    }

    /// Asks the flusher to send what it holds now.
    pub(crate) fn flush_soon(&self) {
        self.wake.notify_one();
    }
}

impl Flusher {
    /// Runs until `stop` fires, then sends what is left once.
    pub(crate) async fn run(mut self) {
        let period = Duration::from_millis(self.config.report_flush_interval_ms);
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.stop.cancelled() => break,
                _ = ticker.tick() => {}
                () = self.wake.notified() => {}
            }
            while self.send_one_batch().await {}
        }
        self.send_one_batch().await;
    }

    /// Sends up to one batch; `true` when a full batch went and more may
    /// be waiting.
    async fn send_one_batch(&mut self) -> bool {
        let max = self.config.report_batch_outcomes_max;
        let taken: Vec<Queued> = {
            let mut queue = self.queue.lock();
            let n = queue.len().min(max);
            queue.drain(..n).collect()
        };
        let outcomes: Vec<pb::Outcome> = taken.iter().map(Queued::to_proto).collect();
        drop(taken);
        if outcomes.is_empty() {
            return false;
        }
        let full = outcomes.len() == max;
        let count = outcomes.len() as u64;
        self.batch_seq += 1;
        let request = pb::ReportOutcomesRequest {
            namespace: self.config.namespace.to_string(),
            meta: None,
            replica_id: self.config.replica_id.to_string(),
            batch_seq: self.batch_seq,
            outcomes,
        };
        bump(&self.metrics.report_batches);
        let sent =
            self.endpoints
                .call(
                    "report_outcomes",
                    self.config.rpc_timeout(),
                    request,
                    |channel, req| async move {
                        BreakersClient::new(channel).report_outcomes(req).await
                    },
                )
                .await;
        match sent {
            Ok(answer) => {
                if answer.dropped_limit > 0 {
                    tracing::warn!(
                        dropped = answer.dropped_limit,
                        namespace = %self.config.namespace,
                        "the namespace holds its maximum of breakers: outcomes were dropped, an operator must make room"
                    );
                }
                self.metrics
                    .outcomes_sent
                    .fetch_add(count, Ordering::Relaxed);
            }
            Err(e) if e.is_refusal() => {
                // A quota or a permission: resending will not help, and the
                // operator must hear of it.
                tracing::warn!(error = %e, outcomes = count, "report batch refused");
                self.metrics
                    .outcomes_lost
                    .fetch_add(count, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::debug!(error = %e, outcomes = count, "report batch lost");
                self.metrics
                    .outcomes_lost
                    .fetch_add(count, Ordering::Relaxed);
            }
        }
        full
    }
}
