//! Replication as a pipeline (`Raft.StreamAppend`), the sending side.
//!
//! openraft hands the network a stream of AppendEntries requests for one
//! replication session and reads the answers as a stream. Over one gRPC
//! stream the leader sends each batch as soon as openraft makes it, without
//! waiting for the answer to the one before; the follower answers each in
//! order, once it has stored it. The unary path instead waits a whole round
//! trip, the follower's fsync included, before sending what arrived
//! meanwhile.
//!
//! Bounds: at most [`RAFT_STREAM_BATCHES_IN_FLIGHT_MAX`] batches are sent
//! and not yet answered, and the oldest of them must be answered within
//! openraft's deadline for one request plus the time its size takes at
//! [`REPLICATION_BYTES_PER_SEC_MIN`](crate::limits::REPLICATION_BYTES_PER_SEC_MIN)
//! (`network::ttl_for`), or the stream ends as unreachable (openraft then
//! opens a new one). A stream with nothing in flight may stay
//! idle: the leader has nothing to send, and its heartbeats go on streams of
//! their own.

use super::codec::{self, Route};
use super::network::{append_payload, network, status_error, ttl_for, unreachable};
use crate::limits::RAFT_STREAM_BATCHES_IN_FLIGHT_MAX;
use crate::node::contact::LeaderContact;
use crate::node::Clock;
use fusebox_proto::v1::RaftMessage;
use fusebox_raft_store::{LogId, TypeConfig};
use futures::{Stream, StreamExt};
use openraft::error::RPCError;
use openraft::raft::{AppendEntriesRequest, StreamAppendError, StreamAppendResult};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tonic::Streaming;

/// The batches sent on one stream and not answered yet.
pub(super) struct InFlight {
    /// When each was sent and the allowance for its size (`replies` adds
    /// openraft's deadline), oldest first.
    sent: Mutex<VecDeque<(Instant, Duration)>>,
    /// One permit per batch that may still be sent.
    window: Semaphore,
    /// Wakes the reader when a batch is sent while none was in flight.
    sent_one: Notify,
}

impl InFlight {
    pub(super) fn new() -> Arc<InFlight> {
        Arc::new(InFlight {
            sent: Mutex::new(VecDeque::new()),
            window: Semaphore::new(RAFT_STREAM_BATCHES_IN_FLIGHT_MAX),
            sent_one: Notify::new(),
        })
    }

    fn sent(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, Duration)>> {
        self.sent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for room in the window, then records a batch of `bytes` as
    /// sent now.
    async fn send(&self, bytes: usize) -> bool {
        let Ok(permit) = self.window.acquire().await else {
            return false;
        };
        permit.forget();
        self.sent()
            .push_back((Instant::now(), ttl_for(Duration::ZERO, bytes)));
        self.sent_one.notify_one();
        true
    }

    /// The oldest batch in flight was answered. The follower takes batches
    /// in order, so the next one's time counts from now if it was sent
    /// earlier: a small batch behind a big one is not late for the big
    /// one's time.
    fn answered(&self) {
        let mut sent = self.sent();
        if sent.pop_front().is_some() {
            self.window.add_permits(1);
        }
        if let Some((next, _)) = sent.front_mut() {
            *next = (*next).max(Instant::now());
        }
    }

    /// When the oldest batch in flight was sent, and its size's allowance.
    fn oldest(&self) -> Option<(Instant, Duration)> {
        self.sent().front().copied()
    }
}

/// One request encoded as unary AppendEntries encodes it: the payload and,
/// when the batch was cut to its byte bound, the last entry it kept.
pub(super) struct Encoded {
    pub payload: Vec<u8>,
    pub cut_after: Option<LogId>,
}

impl Encoded {
    pub(super) fn new(rpc: &AppendEntriesRequest<TypeConfig>) -> Result<Encoded, postcard::Error> {
        let (payload, cut_after) = append_payload(rpc)?;
        Ok(Encoded { payload, cut_after })
    }
}

/// `first`, encoded before the stream opens (its size sets how long the
/// opening may take: `Connection::open_stream`), then openraft's later
/// requests as the messages to send. A request cut to the batch's byte
/// bound is the last one sent: the follower's answer says how far it got,
/// and openraft sends the rest in its next session.
pub(super) fn outgoing<S>(
    first: Encoded,
    requests: S,
    route: Route,
    in_flight: Arc<InFlight>,
) -> impl Stream<Item = RaftMessage> + Send + 'static
where
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
{
    futures::stream::unfold(Some((Some(first), requests)), move |state| {
        let (route, in_flight) = (route.clone(), in_flight.clone());
        async move {
            let (first, mut requests) = state?;
            let encoded = match first {
                Some(first) => first,
                None => {
                    let rpc = requests.next().await?;
                    match Encoded::new(&rpc) {
                        Ok(encoded) => encoded,
                        Err(e) => {
                            tracing::error!(error = %e, "encoding a replication batch failed; stream ended");
                            return None;
                        }
                    }
                }
            };
            if !in_flight.send(encoded.payload.len()).await {
                return None;
            }
            let more = encoded.cut_after.is_none().then_some((None, requests));
            Some((codec::message(&route, encoded.payload), more))
        }
    })
}

/// Where a follower's answers are recorded as acknowledging this leader.
pub(super) struct Acks {
    pub contact: Arc<LeaderContact>,
    pub clock: Clock,
    pub peer: u64,
    pub addr: String,
}

/// The follower's answers as openraft reads them, in order. Ends after the
/// first answer that is not a success (openraft stops there), when the
/// follower ends the stream, or with an error when the oldest batch in
/// flight goes unanswered for `ttl` and its size's allowance.
pub(super) fn replies(
    replies: Streaming<RaftMessage>,
    in_flight: Arc<InFlight>,
    ttl: Duration,
    acks: Acks,
) -> impl Stream<Item = Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>> + Send + 'static
{
    let state = Some((replies, in_flight, acks));
    futures::stream::unfold(state, move |state| async move {
        let (mut replies, in_flight, acks) = state?;
        loop {
            let oldest = in_flight.oldest();
            let due = oldest.map(|(sent, allowance)| sent + ttl + allowance);
            let overdue = async {
                match due {
                    Some(due) => tokio::time::sleep_until(due).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                message = replies.message() => {
                    let message = match message {
                        Ok(Some(message)) => message,
                        Ok(None) => return None,
                        Err(status) => return Some((Err(status_error(&status)), None)),
                    };
                    in_flight.answered();
                    let result: StreamAppendResult<TypeConfig> =
                        match codec::decode(&message.payload) {
                            Ok(result) => result,
                            Err(status) => return Some((Err(network(status.message())), None)),
                        };
                    // Anything but a higher vote: the peer follows this node.
                    if !matches!(result, Err(StreamAppendError::HigherVote(_))) {
                        acks.contact.acked_by(acks.peer, (acks.clock)());
                    }
                    let more = result.is_ok().then_some((replies, in_flight, acks));
                    return Some((Ok(result), more));
                }
                () = overdue => {
                    let allowed = ttl + oldest.map_or(Duration::ZERO, |(_, a)| a);
                    let why = format!("no answer from {} in {allowed:?}", acks.addr);
                    return Some((Err(unreachable(why)), None));
                }
                () = in_flight.sent_one.notified(), if due.is_none() => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::REPLICATION_BATCH_BYTES_MAX;

    #[tokio::test]
    async fn a_batch_has_time_for_its_size_and_the_next_counts_from_its_answer() {
        let in_flight = InFlight::new();
        assert!(in_flight.send(REPLICATION_BATCH_BYTES_MAX).await);
        let small_sent = Instant::now();
        assert!(in_flight.send(1_000).await);
        let (big_sent, big_allowance) = in_flight.oldest().unwrap();
        assert!(big_sent <= small_sent);
        assert_eq!(big_allowance, Duration::from_secs(4), "16 MiB at 4 MiB/s");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let answered_at = Instant::now();
        in_flight.answered();
        let (next_from, next_allowance) = in_flight.oldest().unwrap();
        assert!(
            next_from >= answered_at,
            "the small batch behind the big one counts from the big one's answer"
        );
        assert_eq!(next_allowance, Duration::ZERO);
        in_flight.answered();
        assert_eq!(in_flight.oldest(), None);
        assert_eq!(
            in_flight.window.available_permits(),
            RAFT_STREAM_BATCHES_IN_FLIGHT_MAX
        );
    }
}
