//! Ledger calls on one stream to a node (`Ledger.Pipeline`).
//!
//! A unary call costs a request and an answer of their own on both ends
//! (HTTP/2 headers each way, a task, wake-ups). A [`LedgerPipeline`] keeps
//! one stream open per node instead: calls made while earlier ones are on
//! their way leave together in one message, and answers that finish
//! together come back in one. Each call keeps its own deadline and gets
//! exactly the answer, or the status, its unary call would have had: a
//! reply a follower got from the leader names it in the answer's
//! [`LEADER_HEADER`](fusebox_proto::LEADER_HEADER), as a forwarded unary
//! answer does.
//!
//! One task per open stream ("link") owns it: it takes queued calls,
//! numbers them, sends them, and hands each reply to its caller. It keeps
//! at most [`CALLS_IN_FLIGHT_MAX`] calls unanswered and takes no more from
//! the queue until some are answered; the queue is bounded too, and a call
//! waiting for room waits within its own deadline. A link left idle for
//! [`IDLE_CLOSE`] closes its stream; the next call opens a new one.
//!
//! When the stream breaks, every call still unanswered fails with
//! UNAVAILABLE: its outcome is unknown, as a unary call's is when its
//! connection drops. A node that does not serve pipelines (an older
//! version), or refuses to open one, is called unary instead: the call that
//! found out is sent again as a unary call, and so is every call for the
//! next [`UNARY_AFTER_REFUSAL`].

use fusebox_proto::bearer::Bearer;
use fusebox_proto::name_leader;
use fusebox_proto::pipeline::{
    status_from_proto, CALLS_IN_FLIGHT_MAX, CALLS_PER_MESSAGE_MAX, MESSAGE_BYTES_TARGET,
};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::pipelined_call::Call;
use fusebox_proto::v1::pipelined_reply::Result as Reply;
use prost::Message;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status, Streaming};

/// How long a link with nothing to do keeps its stream open.
pub const IDLE_CLOSE: Duration = Duration::from_secs(30);

/// How long a node that refused to open a pipeline is called unary.
pub const UNARY_AFTER_REFUSAL: Duration = Duration::from_secs(60);

/// Calls waiting for their link to take them.
const QUEUE_CALLS_MAX: usize = 1_024;

/// Request messages the link may have sent that the transport has not
/// taken yet.
const REQUEST_MESSAGES_BUFFERED: usize = 16;

/// How long opening a stream may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// Encoded bytes past which a call is sent unary instead: with messages
/// gathered to [`MESSAGE_BYTES_TARGET`], no message then passes twice that,
/// well within the 4 MiB a node decodes.
const CALL_BYTES_PIPELINED_MAX: usize = MESSAGE_BYTES_TARGET;

/// How long past its deadline a call waits for its answer, so that a
/// caller's own timer for the same deadline fires first.
const LOCAL_GRACE: Duration = Duration::from_millis(20);

/// The stream of calls a pipeline sends.
pub type PipelineCalls = ReceiverStream<pb::PipelineRequest>;

/// What opening a pipeline returns.
pub type Opened = Result<Response<Streaming<pb::PipelineResponse>>, Status>;

/// Opens `Ledger.Pipeline` on one node with a request (to which the caller's
/// credentials are added, if the channel does not add them itself).
pub type Opener = Box<
    dyn Fn(Request<PipelineCalls>) -> Pin<Box<dyn Future<Output = Opened> + Send>> + Send + Sync,
>;

/// How one call ended.
#[derive(Debug)]
pub enum Sent<Req, Resp> {
    /// The node's answer, or the status its unary call would have had; an
    /// answer the node got from the leader names it in
    /// [`LEADER_HEADER`](fusebox_proto::LEADER_HEADER).
    Answered(Result<Response<Resp>, Status>),
    /// The call never left: the node does not serve pipelines, or refused
    /// to open one. Send it unary (with the same message).
    Unsent(Req),
}

/// A call waiting for its link.
struct Queued {
    call: Call,
    deadline: Instant,
    answer: oneshot::Sender<Outcome>,
}

enum Outcome {
    Replied(Result<Replied, Status>),
    /// Handed back: the stream could not be opened.
    Unsent(Call),
}

/// A reply, and the leader it names if the node forwarded the call.
struct Replied {
    reply: Reply,
    leader_address: String,
}

/// Ledger calls to one node over a stream, opened on first use.
pub struct LedgerPipeline {
    open: Arc<Opener>,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// The queue of the link now running, if one runs.
    link: Option<mpsc::Sender<Queued>>,
    /// Until when calls go unary, after the node refused a pipeline.
    unary_until: Option<Instant>,
}

impl std::fmt::Debug for LedgerPipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LedgerPipeline")
    }
}

impl LedgerPipeline {
    /// A pipeline that opens its stream with `open`.
    pub fn new(open: Opener) -> Self {
        LedgerPipeline {
            open: Arc::new(open),
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// A pipeline to the node `channel` reaches, its stream carrying
    /// `bearer`'s token.
    pub fn over(channel: Channel, bearer: Bearer) -> Self {
        LedgerPipeline::new(Box::new(move |mut request| {
            bearer.attach(&mut request);
            let mut ledger = LedgerClient::new(channel.clone());
            Box::pin(async move { ledger.pipeline(request).await })
        }))
    }

    /// `Begin`, within `timeout`.
    pub async fn begin(
        &self,
        request: pb::BeginRequest,
        timeout: Duration,
    ) -> Sent<pb::BeginRequest, pb::BeginResponse> {
        match self.call(Call::Begin(request), timeout).await {
            Outcome::Replied(replied) => Sent::Answered(answered(replied, |reply| match reply {
                Reply::Begin(answer) => Ok(answer),
                other => Err(wrong_reply(&other)),
            })),
            Outcome::Unsent(Call::Begin(request)) => Sent::Unsent(request),
            Outcome::Unsent(Call::Complete(_)) => Sent::Answered(Err(Status::internal(
                "a begin came back from the pipeline as a complete",
            ))),
        }
    }

    /// `Complete`, within `timeout`.
    pub async fn complete(
        &self,
        request: pb::CompleteRequest,
        timeout: Duration,
    ) -> Sent<pb::CompleteRequest, pb::CompleteResponse> {
        match self.call(Call::Complete(request), timeout).await {
            Outcome::Replied(replied) => Sent::Answered(answered(replied, |reply| match reply {
                Reply::Complete(answer) => Ok(answer),
                other => Err(wrong_reply(&other)),
            })),
            Outcome::Unsent(Call::Complete(request)) => Sent::Unsent(request),
            Outcome::Unsent(Call::Begin(_)) => Sent::Answered(Err(Status::internal(
                "a complete came back from the pipeline as a begin",
            ))),
        }
    }

    async fn call(&self, call: Call, timeout: Duration) -> Outcome {
        // A large call goes alone, as a unary call: batched with others it
        // could take their message past what a node decodes.
        if call.encoded_len() > CALL_BYTES_PIPELINED_MAX {
            return Outcome::Unsent(call);
        }
        let now = Instant::now();
        let far = now + Duration::from_secs(86_400 * 365);
        let deadline = now.checked_add(timeout).unwrap_or(far).min(far);
        // A caller's own timer around this call, set for the same
        // `timeout`, fires first: its expiry is the caller's to report.
        let waits_until = deadline + LOCAL_GRACE;
        let (answer, answered) = oneshot::channel();
        let mut queued = Queued {
            call,
            deadline,
            answer,
        };
        // A link that ended (idle, broken) is replaced once; a second
        // failure means links end as fast as they start.
        for _ in 0..2 {
            let link = match self.link() {
                Some(link) => link,
                None => return Outcome::Unsent(queued.call),
            };
            match tokio::time::timeout_at(waits_until, link.send(queued)).await {
                Ok(Ok(())) => {
                    return match tokio::time::timeout_at(waits_until, answered).await {
                        Ok(Ok(outcome)) => outcome,
                        Ok(Err(_)) => Outcome::Replied(Err(broken("the link ended"))),
                        Err(_) => Outcome::Replied(Err(expired(timeout))),
                    };
                }
                Ok(Err(mpsc::error::SendError(back))) => {
                    queued = back;
                    self.forget(&link);
                }
                Err(_) => return Outcome::Replied(Err(expired(timeout))),
            }
        }
        Outcome::Replied(Err(broken("its stream closed as soon as it opened")))
    }

    /// The running link's queue, starting a link if none runs; `None` while
    /// calls go unary.
    fn link(&self) -> Option<mpsc::Sender<Queued>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(until) = state.unary_until {
            if Instant::now() < until {
                return None;
            }
            state.unary_until = None;
        }
        if let Some(link) = state.link.as_ref().filter(|l| !l.is_closed()) {
            return Some(link.clone());
        }
        let (tx, rx) = mpsc::channel(QUEUE_CALLS_MAX);
        state.link = Some(tx.clone());
        tokio::spawn(run_link(
            Arc::clone(&self.open),
            rx,
            Arc::clone(&self.state),
        ));
        Some(tx)
    }

    fn forget(&self, link: &mpsc::Sender<Queued>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.link.as_ref().is_some_and(|l| l.same_channel(link)) {
            state.link = None;
        }
    }
}

/// One open stream: sends queued calls, hands replies to their callers.
async fn run_link(open: Arc<Opener>, mut queue: mpsc::Receiver<Queued>, state: Arc<Mutex<State>>) {
    let (calls, sent) = mpsc::channel(REQUEST_MESSAGES_BUFFERED);
    let opened = tokio::time::timeout(OPEN_TIMEOUT, open(Request::new(ReceiverStream::new(sent))));
    let mut replies = match opened.await {
        Ok(Ok(response)) => response.into_inner(),
        Ok(Err(status)) if refuses_pipelines(status.code()) => {
            tracing::debug!(error = %status, "node refused a ledger pipeline; calling it unary");
            refused(&state);
            hand_back(&mut queue);
            return;
        }
        // None of the queued calls left: each goes unary, and gets the
        // node's own answer.
        Ok(Err(status)) => {
            tracing::debug!(error = %status, "ledger pipeline did not open");
            hand_back(&mut queue);
            return;
        }
        Err(_) => {
            tracing::debug!(
                timeout_ms = OPEN_TIMEOUT.as_millis(),
                "ledger pipeline did not open in time"
            );
            hand_back(&mut queue);
            return;
        }
    };
    let mut pending: BTreeMap<u64, oneshot::Sender<Outcome>> = BTreeMap::new();
    // The calls sent before the node's first reply, kept until it comes: a
    // proxy may accept the stream and only then refuse the method, and
    // calls it never passed on go unary like calls never sent.
    let mut unconfirmed: Option<Vec<(u64, Call)>> = Some(Vec::new());
    let mut next_id = 0u64;
    let mut outgoing: Option<pb::PipelineRequest> = None;
    let idle = tokio::time::sleep(IDLE_CLOSE);
    tokio::pin!(idle);
    let ended = loop {
        tokio::select! {
            biased;
            reply = replies.message() => match reply {
                Ok(Some(message)) => {
                    unconfirmed = None;
                    for reply in message.replies {
                        if let Some(answer) = pending.remove(&reply.id) {
                            let replied = reply_result(reply.result, reply.leader_address);
                            let _ = answer.send(Outcome::Replied(replied));
                        }
                    }
                    idle.as_mut().reset(Instant::now() + IDLE_CLOSE);
                }
                Ok(None) => break broken("the node ended the stream"),
                Err(status) if refuses_pipelines(status.code()) && unconfirmed.is_some() => {
                    tracing::debug!(error = %status, "ledger pipeline refused once open; calling unary");
                    refused(&state);
                    for (id, call) in unconfirmed.take().unwrap_or_default() {
                        if let Some(answer) = pending.remove(&id) {
                            let _ = answer.send(Outcome::Unsent(call));
                        }
                    }
                    hand_back(&mut queue);
                    return;
                }
                Err(status) => break broken(&status.to_string()),
            },
            permit = calls.reserve(), if outgoing.is_some() => match (permit, outgoing.take()) {
                (Ok(permit), Some(message)) => permit.send(message),
                _ => break broken("the transport stopped taking calls"),
            },
            first = queue.recv(), if outgoing.is_none() && pending.len() < CALLS_IN_FLIGHT_MAX => {
                let Some(first) = first else {
                    // Every sender is gone (the pipeline too).
                    return;
                };
                let mut message = pb::PipelineRequest { calls: Vec::new() };
                let mut bytes = 0;
                let mut next = Some(first);
                while let Some(queued) = next.take() {
                    bytes += enlist(queued, &mut next_id, &mut pending, &mut message, unconfirmed.as_mut());
                    let room = message.calls.len() < CALLS_PER_MESSAGE_MAX
                        && bytes < MESSAGE_BYTES_TARGET
                        && pending.len() < CALLS_IN_FLIGHT_MAX;
                    if room {
                        next = queue.try_recv().ok();
                    }
                }
                if !message.calls.is_empty() {
                    outgoing = Some(message);
                }
                idle.as_mut().reset(Instant::now() + IDLE_CLOSE);
            },
            () = &mut idle, if pending.is_empty() && outgoing.is_none() => {
                hand_back(&mut queue);
                return;
            }
        }
    };
    tracing::debug!(error = %ended, unanswered = pending.len(), "ledger pipeline ended");
    // Closed first, so a caller told of the break opens a new link for its
    // next call instead of queueing on this one.
    queue.close();
    for (_, answer) in std::mem::take(&mut pending) {
        let _ = answer.send(Outcome::Replied(Err(ended.clone())));
    }
    hand_back(&mut queue);
}

/// Calls to this node go unary for a while: it refused a pipeline.
fn refused(state: &Mutex<State>) {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    state.unary_until = Some(Instant::now() + UNARY_AFTER_REFUSAL);
}

/// Numbers `queued` and adds it to `message` (and a copy to `keep`, if
/// given), unless its caller stopped waiting; the bytes it added.
fn enlist(
    queued: Queued,
    next_id: &mut u64,
    pending: &mut BTreeMap<u64, oneshot::Sender<Outcome>>,
    message: &mut pb::PipelineRequest,
    keep: Option<&mut Vec<(u64, Call)>>,
) -> usize {
    let left = queued.deadline.saturating_duration_since(Instant::now());
    if queued.answer.is_closed() || left.is_zero() {
        return 0;
    }
    let id = *next_id;
    *next_id += 1;
    pending.insert(id, queued.answer);
    if let Some(keep) = keep {
        keep.push((id, queued.call.clone()));
    }
    let call = pb::PipelinedCall {
        id,
        // At least 1 ms: 0 would mean the node's own deadline.
        timeout_ms: u32::try_from(left.as_millis()).unwrap_or(u32::MAX).max(1),
        call: Some(queued.call),
    };
    let bytes = call.encoded_len();
    message.calls.push(call);
    bytes
}

/// Ends the queue and gives every call still in it back to its caller,
/// to be sent unary: none of them left.
fn hand_back(queue: &mut mpsc::Receiver<Queued>) {
    queue.close();
    while let Ok(queued) = queue.try_recv() {
        let _ = queued.answer.send(Outcome::Unsent(queued.call));
    }
}

/// Whether opening a pipeline failed because the node will not serve one
/// (an older version, or a caller it refuses), so a unary call would say
/// more.
fn refuses_pipelines(code: Code) -> bool {
    matches!(
        code,
        Code::Unimplemented | Code::PermissionDenied | Code::Unauthenticated
    )
}

fn reply_result(result: Option<Reply>, leader_address: String) -> Result<Replied, Status> {
    match result {
        Some(Reply::Error(status)) => Err(status_from_proto(status)),
        Some(reply) => Ok(Replied {
            reply,
            leader_address,
        }),
        None => Err(Status::internal(
            "the node sent a pipelined reply without a result",
        )),
    }
}

/// A reply as its unary call's answer: `pick` takes the message of the kind
/// asked for (a reply of another kind is an error), and a leader the reply
/// names goes in [`LEADER_HEADER`](fusebox_proto::LEADER_HEADER).
fn answered<Resp>(
    replied: Result<Replied, Status>,
    pick: impl FnOnce(Reply) -> Result<Resp, Status>,
) -> Result<Response<Resp>, Status> {
    let Replied {
        reply,
        leader_address,
    } = replied?;
    let mut response = Response::new(pick(reply)?);
    if !leader_address.is_empty() {
        name_leader(response.metadata_mut(), &leader_address);
    }
    Ok(response)
}

fn wrong_reply(reply: &Reply) -> Status {
    let kind = match reply {
        Reply::Begin(_) => "begin",
        Reply::Complete(_) => "complete",
        Reply::Error(_) => "error",
    };
    Status::internal(format!(
        "the node answered a pipelined call with a {kind} reply of another kind"
    ))
}

/// UNAVAILABLE for a call whose stream broke: it may have been applied.
fn broken(why: &str) -> Status {
    Status::unavailable(format!(
        "the ledger pipeline broke before the answer ({why}); the outcome is unknown, look the \
         key up before repeating a write"
    ))
}

fn expired(timeout: Duration) -> Status {
    Status::deadline_exceeded(format!(
        "no answer within {} ms; the outcome is unknown",
        timeout.as_millis()
    ))
}
