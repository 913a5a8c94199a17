//! `Ledger.Pipeline`: `Begin` and `Complete` calls on one stream.
//!
//! A unary call costs a request and an answer of their own: HTTP/2 headers
//! each way, a task, and wake-ups on both ends. An agent that keeps one
//! pipeline per connection sends the calls that arrive together in one
//! message, and gets the answers that finish together in one message.
//!
//! Each call is handled by the unary handler it stands for, with the
//! stream's metadata and a deadline of its own, and admitted by its own
//! rule against the auth table current when it arrives ([`Readmit`]); a
//! follower forwards it to the leader as that handler does, and its reply
//! names the leader (`leader_address`) as the forwarded unary answer's
//! header would. One task per pipeline ("pump") reads calls, runs them,
//! and sends replies through a bounded channel. It runs at most
//! [`CALLS_IN_FLIGHT_MAX`] calls at once and reads nothing more until some
//! finish; a client that stops reading fills the channel, and the pump then
//! stops reading too. The node runs at most [`PIPELINED_CALLS_MAX`]
//! pipelined calls at once over all its pipelines; a call past that is
//! refused with RESOURCE_EXHAUSTED at once.
//!
//! The pump ends, and with it every call still running (their outcome
//! unknown to the client), when the client ends its side and every call is
//! answered, when the client goes away, when a message cannot be decoded or
//! carries too many calls (the stream fails with that status), and when the
//! node stops (UNAVAILABLE): a stream would otherwise hold its connection,
//! and its client, on a stopped node.

use super::gateway::Served;
use super::ledger::LedgerService;
use crate::auth::{Caller, Readmit};
use crate::backend::{Backend, BackendError};
use crate::limits::{GRPC_REQUEST_TIMEOUT_MS, PIPELINED_CALLS_MAX};
use fusebox_proto::leader_named;
use fusebox_proto::pipeline::{
    status_to_proto, CALLS_IN_FLIGHT_MAX, CALLS_PER_MESSAGE_MAX, MESSAGE_BYTES_TARGET,
};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::pipelined_call::Call;
use fusebox_proto::v1::pipelined_reply::Result as Reply;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use prost::Message;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

/// Reply messages a pipeline's channel holds before its pump waits.
const REPLY_MESSAGES_BUFFERED: usize = 16;

const BEGIN_PATH: &str = "/fusebox.v1.Ledger/Begin";
const COMPLETE_PATH: &str = "/fusebox.v1.Ledger/Complete";

/// The replies of one pipeline, as tonic sends them.
pub type PipelineReplies = ReceiverStream<Result<pb::PipelineResponse, Status>>;

/// Room for the pipelined calls one node runs at once, shared by all its
/// pipelines.
#[derive(Clone)]
pub struct PipelinedCalls(Arc<Semaphore>);

impl Default for PipelinedCalls {
    fn default() -> Self {
        PipelinedCalls(Arc::new(Semaphore::new(PIPELINED_CALLS_MAX)))
    }
}

/// Starts the pump of a pipeline and returns its replies.
pub(super) fn open<B: Backend>(
    service: LedgerService<B>,
    room: PipelinedCalls,
    request: Request<Streaming<pb::PipelineRequest>>,
) -> PipelineReplies {
    let (mut metadata, extensions, calls) = request.into_parts();
    // Each call states its own deadline.
    metadata.remove("grpc-timeout");
    let (replies, rx) = mpsc::channel(REPLY_MESSAGES_BUFFERED);
    let pipeline = Arc::new(Pipeline {
        service,
        room,
        metadata,
        readmit: extensions.get::<Readmit>().cloned(),
        caller: extensions.get::<Caller>().cloned(),
    });
    tokio::spawn(pipeline.pump(calls, replies));
    ReceiverStream::new(rx)
}

struct Pipeline<B> {
    service: LedgerService<B>,
    room: PipelinedCalls,
    /// The stream's metadata, which every call carries (its token, its
    /// forwarding marks).
    metadata: MetadataMap,
    /// How each call is admitted, on a guarded server.
    readmit: Option<Readmit>,
    /// Who opened the stream, for a server without a guard.
    caller: Option<Caller>,
}

impl<B: Backend> Pipeline<B> {
    async fn pump(
        self: Arc<Self>,
        mut calls: Streaming<pb::PipelineRequest>,
        replies: mpsc::Sender<Result<pb::PipelineResponse, Status>>,
    ) {
        let mut running = FuturesUnordered::new();
        let mut reading = true;
        // A message holds at most this many calls: one is read only when
        // all of them would fit.
        let room_for_a_message = CALLS_IN_FLIGHT_MAX - CALLS_PER_MESSAGE_MAX;
        let stopping = self.service.gateway().stopping();
        tokio::pin!(stopping);
        loop {
            if !reading && running.is_empty() {
                return; // The client is done, and every call answered.
            }
            tokio::select! {
                biased;
                () = &mut stopping => {
                    let status = Status::unavailable(
                        "this node is stopping; the calls it had not answered may or may not \
                         have been applied, look their keys up on another node",
                    );
                    let _ = replies.send(Err(status)).await;
                    return;
                }
                // Answers before calls: they free room for more.
                Some(first) = running.next(), if !running.is_empty() => {
                    let message = gather(first, &mut running);
                    if replies.send(Ok(message)).await.is_err() {
                        return; // The client is gone; its calls are dropped.
                    }
                }
                message = calls.message(), if reading && running.len() <= room_for_a_message => {
                    match message {
                        Ok(Some(message)) if message.calls.len() > CALLS_PER_MESSAGE_MAX => {
                            let refusal = Status::invalid_argument(format!(
                                "a pipeline message carries at most {CALLS_PER_MESSAGE_MAX} \
                                 calls; this one had {}",
                                message.calls.len()
                            ));
                            let _ = replies.send(Err(refusal)).await;
                            return;
                        }
                        Ok(Some(message)) if message.calls.is_empty() => {
                            // Costs the node a read like any call: metered
                            // as one, so that a stream of empty messages
                            // cannot go past the caller's rate.
                            if let Some(Err(status)) =
                                self.readmit.as_ref().map(|r| r.admit(BEGIN_PATH))
                            {
                                let _ = replies.send(Err(status)).await;
                                return;
                            }
                        }
                        Ok(Some(message)) => {
                            for call in message.calls {
                                let permit = Arc::clone(&self.room.0).try_acquire_owned().ok();
                                running.push(Arc::clone(&self).run(call, permit));
                            }
                        }
                        // The client sends no more: answer what runs, then end.
                        Ok(None) => reading = false,
                        Err(status) => {
                            // A message that cannot be decoded (over the size
                            // limit, malformed), or a broken request stream.
                            tracing::debug!(error = %status, "ledger pipeline failed");
                            let _ = replies.send(Err(status)).await;
                            return;
                        }
                    }
                }
            }
        }
    }

    /// One call, answered as its unary call would be, within its deadline;
    /// refused at once without `permit`, its place among the node's
    /// pipelined calls.
    async fn run(
        self: Arc<Self>,
        call: pb::PipelinedCall,
        permit: Option<OwnedSemaphorePermit>,
    ) -> pb::PipelinedReply {
        let (result, leader_address) = match permit {
            Some(_held_until_answered) => self.answer_within(call.call, call.timeout_ms).await,
            None => {
                let full = BackendError::LimitReached {
                    limit: "pipelined_calls_max",
                    max: PIPELINED_CALLS_MAX,
                };
                let status = super::status::from_backend(&full);
                (Reply::Error(status_to_proto(&status)), String::new())
            }
        };
        pb::PipelinedReply {
            id: call.id,
            result: Some(result),
            leader_address,
        }
    }

    /// `call` within `timeout_ms` (0: the node's own deadline on a call),
    /// with the leader's address when this node forwarded it there.
    async fn answer_within(&self, call: Option<Call>, timeout_ms: u32) -> (Reply, String) {
        let limit = Duration::from_millis(GRPC_REQUEST_TIMEOUT_MS);
        // As a unary call without `grpc-timeout` when none is asked: the
        // node's deadline on the handler, and none passed on when
        // forwarding (the hop's default applies).
        let asked = (timeout_ms > 0).then(|| Duration::from_millis(u64::from(timeout_ms)));
        let deadline = asked.map_or(limit, |asked| asked.min(limit));
        let status = match tokio::time::timeout(deadline, self.answer(call, asked)).await {
            Ok(Ok(answer)) => return answer,
            Ok(Err(status)) => status,
            Err(_) => Status::deadline_exceeded(format!(
                "the call's deadline of {} ms passed; the outcome is unknown, look the key \
                 up before repeating a write",
                deadline.as_millis()
            )),
        };
        (Reply::Error(status_to_proto(&status)), String::new())
    }

    async fn answer(
        &self,
        call: Option<Call>,
        deadline: Option<Duration>,
    ) -> Result<(Reply, String), Status> {
        // Admitted before anything else, an empty call too: every call
        // counts against its caller's rate.
        let path = match &call {
            Some(Call::Complete(_)) => COMPLETE_PATH,
            Some(Call::Begin(_)) | None => BEGIN_PATH,
        };
        let caller = match &self.readmit {
            Some(readmit) => readmit.admit(path)?,
            None => self.service.gateway().recognised(self.caller.as_ref())?,
        };
        // Answered here without a unary request of its own; one is built
        // only to forward the call to the leader. A forward's future is
        // boxed: inline, its client call would make every call's future
        // several times larger, and the pump moves each one when it starts
        // it.
        match call {
            Some(Call::Begin(begin)) => match self.service.begin_for(&caller, &begin).await? {
                Served::Here(answer) => Ok((Reply::Begin(answer), String::new())),
                Served::Leader(leader) => {
                    let request = self.request(caller, begin, deadline);
                    let answer = Box::pin(self.service.forward_begin(request, leader)).await?;
                    let leader = leader_of(&answer);
                    Ok((Reply::Begin(answer.into_inner()), leader))
                }
            },
            Some(Call::Complete(complete)) => {
                match self.service.complete_for(&caller, &complete).await? {
                    Served::Here(answer) => Ok((Reply::Complete(answer), String::new())),
                    Served::Leader(leader) => {
                        let request = self.request(caller, complete, deadline);
                        let forward = self.service.forward_complete(request, leader);
                        let answer = Box::pin(forward).await?;
                        let leader = leader_of(&answer);
                        Ok((Reply::Complete(answer.into_inner()), leader))
                    }
                }
            }
            None => Err(Status::invalid_argument(
                "a pipelined call must set `begin` or `complete`",
            )),
        }
    }

    /// The unary request a call stands for: the stream's metadata, the
    /// call's deadline if it set one, and its caller.
    fn request<T>(&self, caller: Caller, message: T, deadline: Option<Duration>) -> Request<T> {
        let mut request = Request::new(message);
        *request.metadata_mut() = self.metadata.clone();
        if let Some(deadline) = deadline {
            request.set_timeout(deadline);
        }
        request.extensions_mut().insert(caller);
        request
    }
}

/// The leader a forwarded answer names, or nothing.
fn leader_of<T>(answer: &Response<T>) -> String {
    leader_named(answer.metadata())
        .unwrap_or_default()
        .to_owned()
}

/// `first` and every other reply already finished, up to a message's
/// bounds.
fn gather<F>(first: pb::PipelinedReply, running: &mut FuturesUnordered<F>) -> pb::PipelineResponse
where
    F: std::future::Future<Output = pb::PipelinedReply>,
{
    let mut bytes = first.encoded_len();
    let mut replies = vec![first];
    while replies.len() < CALLS_PER_MESSAGE_MAX && bytes < MESSAGE_BYTES_TARGET {
        match running.next().now_or_never() {
            Some(Some(reply)) => {
                bytes += reply.encoded_len();
                replies.push(reply);
            }
            _ => break,
        }
    }
    pb::PipelineResponse { replies }
}
