//! The cluster's nodes as seen by one replica, and calls that move to the
//! next node when one is unavailable.
//!
//! Any node answers any request: a follower forwards writes to the leader
//! itself. So the client needs no leader tracking to be correct, but a hop
//! saved is CPU and latency saved on every write. Calls (writes and
//! linearizable reads, which a follower forwards too) go to the node last
//! known to lead: the one a forwarded answer names in its
//! [`LEADER_HEADER`](fusebox_proto::LEADER_HEADER), else the one that answered without forwarding. Until
//! one is known, or when the named leader is not on this client's list,
//! they go to the replica's own node, as the watch stream does. A call moves
//! on when a node is UNAVAILABLE, and jumps to the leader when a node says
//! NOT_LEADER and names one on the list. A leader that fails a call
//! (UNAVAILABLE without a hint, or no answer in time) is left, and not
//! taken up again for [`LEFT_LEADER_HOLD_OFF`]: calls go to the replica's
//! own node meanwhile, whose forwarding works whichever node leads. When every node has said
//! UNAVAILABLE (an election), it pauses and goes round again rather than
//! giving up while the deadline allows. Every call has a deadline: each try
//! gets what is left of it, and the server learns it through
//! `grpc-timeout`.

use crate::error::ClientError;
use crate::pipeline::{LedgerPipeline, Sent};
use fusebox_proto::bearer::Bearer;
use fusebox_proto::net::Net;
use fusebox_proto::tls::{ClientTlsFiles, TlsConnector};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::fusebox_error_detail::Detail;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::FuseboxErrorDetail;
use fusebox_proto::{leader_named, same_address};
use prost::Message;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};

/// The first pause after every node answered UNAVAILABLE.
pub(crate) const RETRY_PAUSE_INITIAL: Duration = Duration::from_millis(50);
/// The longest pause between two rounds of tries.
pub(crate) const RETRY_PAUSE_MAX: Duration = Duration::from_millis(400);
/// Most tries of one call, whatever its deadline.
pub(crate) const TRIES_MAX: usize = 64;

/// [`Endpoints::leader`] when no listed node is known to lead.
const NO_LEADER: usize = usize::MAX;
/// How long calls keep away from a leader that failed one: long enough for
/// an election and a restart, short enough that a leader back at work is
/// soon used again.
pub(crate) const LEFT_LEADER_HOLD_OFF: Duration = Duration::from_secs(10);

/// One lazily connected channel per node, and a ledger pipeline over it.
#[derive(Debug)]
pub(crate) struct Endpoints {
    nodes: Vec<(String, Channel)>,
    pipelines: Vec<LedgerPipeline>,
    /// The node the watch stream uses, and calls while no leader is known.
    preferred: AtomicUsize,
    /// The listed node last known to lead, or [`NO_LEADER`].
    leader: AtomicUsize,
    /// The leader calls last left because it failed one, and until when
    /// (ms after `born`) they keep away from it.
    left: AtomicUsize,
    left_until_ms: AtomicU64,
    born: Instant,
    bearer: Bearer,
}

/// One try of a call: the node it goes to and the time it has.
pub(crate) struct Try<'a> {
    /// The node's channel.
    pub channel: Channel,
    /// The node's ledger pipeline.
    pub pipeline: &'a LedgerPipeline,
    /// What is left of the call's deadline.
    pub left: Duration,
}

impl<'a> Try<'a> {
    /// `Ledger.Begin` on this node, through its pipeline (unary if the node
    /// does not serve one).
    pub(crate) async fn begin(
        self,
        request: Request<pb::BeginRequest>,
    ) -> Result<Response<pb::BeginResponse>, Status> {
        self.piped(
            request,
            |pipeline, message, left| pipeline.begin(message, left),
            |mut ledger, request| async move { ledger.begin(request).await },
        )
        .await
    }

    /// `Ledger.Complete` on this node, through its pipeline (unary if the
    /// node does not serve one).
    pub(crate) async fn complete(
        self,
        request: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        self.piped(
            request,
            |pipeline, message, left| pipeline.complete(message, left),
            |mut ledger, request| async move { ledger.complete(request).await },
        )
        .await
    }

    /// `request` through the node's pipeline with `piped`, or, if it comes
    /// back unsent, with `unary` within what is left of the time.
    async fn piped<Req, Resp, P, PF, U, UF>(
        self,
        request: Request<Req>,
        piped: P,
        unary: U,
    ) -> Result<Response<Resp>, Status>
    where
        P: FnOnce(&'a LedgerPipeline, Req, Duration) -> PF,
        PF: Future<Output = Sent<Req, Resp>>,
        U: FnOnce(LedgerClient<Channel>, Request<Req>) -> UF,
        UF: Future<Output = Result<Response<Resp>, Status>>,
    {
        let started = Instant::now();
        let (metadata, extensions, message) = request.into_parts();
        match piped(self.pipeline, message, self.left).await {
            Sent::Answered(answer) => answer,
            Sent::Unsent(message) => {
                let mut request = Request::from_parts(metadata, extensions, message);
                request.set_timeout(self.left.saturating_sub(started.elapsed()));
                unary(LedgerClient::new(self.channel), request).await
            }
        }
    }
}

impl Endpoints {
    /// Channels to every address; nothing connects until the first call.
    pub(crate) fn new(
        addresses: &[String],
        connect_timeout: Duration,
        net: &Net,
        tls: Option<&ClientTlsFiles>,
        token: Option<&str>,
    ) -> Result<Self, ClientError> {
        let bearer = match token {
            Some(token) => {
                Bearer::token(token).map_err(|message| ClientError::InvalidArgument {
                    intent_id: None,
                    field: "token".to_owned(),
                    message,
                })?
            }
            None => Bearer::none(),
        };
        let tls = tls
            .map(|files| TlsConnector::load(files.clone()))
            .transpose()
            .map_err(|e| ClientError::InvalidArgument {
                intent_id: None,
                field: "tls".to_owned(),
                message: e.to_string(),
            })?;
        let mut nodes = Vec::with_capacity(addresses.len());
        for address in addresses {
            let uri = if address.contains("://") {
                address.clone()
            } else {
                format!("http://{address}")
            };
            let endpoint =
                Endpoint::from_shared(uri).map_err(|e| ClientError::InvalidArgument {
                    intent_id: None,
                    field: "endpoints".to_owned(),
                    message: format!("{address:?}: {e}"),
                })?;
            let channel = net.channel_tls(endpoint.connect_timeout(connect_timeout), tls.as_ref());
            nodes.push((address.clone(), channel));
        }
        let pipelines = nodes
            .iter()
            .map(|(_, channel)| LedgerPipeline::over(channel.clone(), bearer.clone()))
            .collect();
        // Each replica starts at a node of its own, so a fleet given one
        // list spreads its watch streams and calls over the nodes.
        let first = fastrand::usize(..nodes.len().max(1));
        Ok(Endpoints {
            nodes,
            pipelines,
            preferred: AtomicUsize::new(first),
            leader: AtomicUsize::new(NO_LEADER),
            left: AtomicUsize::new(NO_LEADER),
            left_until_ms: AtomicU64::new(0),
            born: Instant::now(),
            bearer,
        })
    }

    /// The `offset`-th node after the preferred one, with its index.
    pub(crate) fn pick(&self, offset: usize) -> (usize, &str, Channel) {
        self.pick_from(self.preferred.load(Ordering::Relaxed), offset)
    }

    /// The `offset`-th node after the `first`-th, with its index.
    fn pick_from(&self, first: usize, offset: usize) -> (usize, &str, Channel) {
        let i = (first % self.nodes.len() + offset) % self.nodes.len();
        let (address, channel) = &self.nodes[i];
        (i, address, channel.clone())
    }

    /// Where a call starts: the node last known to lead, else the
    /// preferred one.
    fn first_for_calls(&self) -> usize {
        match self.leader.load(Ordering::Relaxed) {
            NO_LEADER => self.preferred.load(Ordering::Relaxed),
            leader => leader,
        }
    }

    /// Learns the leader from the answer node `index` gave: the listed node
    /// its [`LEADER_HEADER`](fusebox_proto::LEADER_HEADER) names, else
    /// `index` itself (it answered without forwarding). A leader named but
    /// not listed (this client knows the nodes by other names), or one left
    /// within [`LEFT_LEADER_HOLD_OFF`], leaves calls on the preferred node.
    fn learn_leader<T>(&self, index: usize, response: &Response<T>) {
        let leader = match leader_named(response.metadata()) {
            Some(address) => self.index_of(address).unwrap_or(NO_LEADER),
            None => index,
        };
        let leader = if self.keeps_away_from(leader) {
            NO_LEADER
        } else {
            leader
        };
        if self.leader.load(Ordering::Relaxed) != leader {
            self.leader.store(leader, Ordering::Relaxed);
        }
    }

    /// Calls stop going to `index` if they went there: it failed one.
    fn leave_leader(&self, index: usize) {
        let left =
            self.leader
                .compare_exchange(index, NO_LEADER, Ordering::Relaxed, Ordering::Relaxed);
        if left.is_ok() {
            let until = self.now_ms() + LEFT_LEADER_HOLD_OFF.as_millis() as u64;
            self.left.store(index, Ordering::Relaxed);
            self.left_until_ms.store(until, Ordering::Relaxed);
        }
    }

    /// Whether `index` is the leader calls left less than
    /// [`LEFT_LEADER_HOLD_OFF`] ago.
    fn keeps_away_from(&self, index: usize) -> bool {
        index != NO_LEADER
            && self.left.load(Ordering::Relaxed) == index
            && self.now_ms() < self.left_until_ms.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A request carrying this client's token.
    pub(crate) fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        self.bearer.attach(&mut request);
        request
    }

    /// Remembers the node the watch stream reached, where calls also go
    /// while no leader is known.
    pub(crate) fn prefer(&self, index: usize) {
        self.preferred.store(index, Ordering::Relaxed);
    }

    /// The listed node at `address`, a scheme in front or not.
    fn index_of(&self, address: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|(a, _)| same_address(a, address))
    }

    /// Calls `f` on one node after another until one answers, within
    /// `deadline` in all. `f` gets a channel and builds the request; its
    /// message is cloned per try. UNAVAILABLE from every node in turn (no
    /// leader yet) is retried after a pause that doubles from
    /// [`RETRY_PAUSE_INITIAL`] to [`RETRY_PAUSE_MAX`], as long as the
    /// deadline allows, at most [`TRIES_MAX`] tries.
    pub(crate) async fn call<Req, Resp, F, Fut>(
        &self,
        operation: &'static str,
        deadline: Duration,
        message: Req,
        mut f: F,
    ) -> Result<Resp, ClientError>
    where
        Req: Clone,
        F: FnMut(Channel, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        self.call_with(operation, deadline, message, |node, request| {
            f(node.channel, request)
        })
        .await
    }

    /// [`Endpoints::call`], with `f` told each try's node and time left.
    pub(crate) async fn call_with<'s, Req, Resp, F, Fut>(
        &'s self,
        operation: &'static str,
        deadline: Duration,
        message: Req,
        mut f: F,
    ) -> Result<Resp, ClientError>
    where
        Req: Clone,
        F: FnMut(Try<'s>, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let started = Instant::now();
        let mut last = String::from("no node tried");
        let (mut first, mut offset) = (self.first_for_calls(), 0);
        let (mut refusals, mut pause) = (0, RETRY_PAUSE_INITIAL);
        for _ in 0..TRIES_MAX {
            let left = deadline.saturating_sub(started.elapsed());
            if left.is_zero() {
                break;
            }
            let (index, address, channel) = self.pick_from(first, offset);
            let mut request = self.request(message.clone());
            request.set_timeout(left);
            let node = Try {
                channel,
                pipeline: &self.pipelines[index],
                left,
            };
            let answer = tokio::time::timeout(left, f(node, request)).await;
            match answer {
                Ok(Ok(response)) => {
                    self.learn_leader(index, &response);
                    return Ok(response.into_inner());
                }
                Ok(Err(status)) if status.code() == Code::Unavailable => {
                    tracing::debug!(operation, node = address, error = %status.message(), "node unavailable, trying the next");
                    last = format!("{address}: {}", status.message());
                    match self.leader_hint(&status) {
                        Some(leader) => {
                            self.leader.store(leader, Ordering::Relaxed);
                            (first, offset) = (leader, 0);
                        }
                        None => {
                            self.leave_leader(index);
                            offset += 1;
                        }
                    }
                    // Every node said no (an election, a leader that lost
                    // its quorum): wait a little, then go round again, until
                    // the deadline.
                    refusals += 1;
                    if refusals >= self.nodes.len() {
                        refusals = 0;
                        let left = deadline.saturating_sub(started.elapsed());
                        tokio::time::sleep(pause.min(left)).await;
                        pause = (pause * 2).min(RETRY_PAUSE_MAX);
                    }
                }
                Ok(Err(status)) => return Err(refused(operation, &status)),
                Err(_) => {
                    self.leave_leader(index);
                    last = format!("{address}: no answer within {} ms", left.as_millis());
                    break;
                }
            }
        }
        Err(ClientError::ClusterUnavailable {
            intent_id: None,
            operation,
            message: last,
        })
    }

    /// The leader's index when a NOT_LEADER answer names a listed node.
    fn leader_hint(&self, status: &Status) -> Option<usize> {
        let detail = FuseboxErrorDetail::decode(status.details()).ok()?;
        match detail.detail? {
            Detail::NotLeader(n) => self.index_of(n.leader_address.as_deref()?),
            _ => None,
        }
    }
}

/// A deliberate refusal from the cluster, with its detail's code.
pub(crate) fn refused(operation: &'static str, status: &Status) -> ClientError {
    let detail = FuseboxErrorDetail::decode(status.details()).ok();
    ClientError::Cluster {
        intent_id: None,
        operation,
        code: status.code(),
        error_code: detail.as_ref().map(|d| d.code),
        message: status.message().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// `count` nodes, 127.0.0.1:1 onwards (nothing listens there).
    fn endpoints(count: u16) -> Endpoints {
        let addresses: Vec<String> = (1..=count)
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        Endpoints::new(
            &addresses,
            Duration::from_millis(100),
            &Net::Tcp,
            None,
            None,
        )
        .expect("endpoints")
    }

    /// Answers UNAVAILABLE (no leader named) `refusals` times, then `7`.
    async fn call_refused(
        endpoints: &Endpoints,
        refusals: u32,
        deadline: Duration,
    ) -> (Result<u32, ClientError>, u32) {
        let tries = AtomicU32::new(0);
        let answer = endpoints
            .call("test", deadline, (), |_, _| {
                let n = tries.fetch_add(1, Ordering::Relaxed);
                async move {
                    if n < refusals {
                        Err(Status::unavailable("no leader is known"))
                    } else {
                        Ok(Response::new(7))
                    }
                }
            })
            .await;
        (answer, tries.load(Ordering::Relaxed))
    }

    /// [`endpoints`], the replica's own node the first.
    fn own_first(count: u16) -> Endpoints {
        let endpoints = endpoints(count);
        endpoints.prefer(0);
        endpoints
    }

    /// One call; `answer` answers each try, given the node it reached.
    /// Returns the call's result and the nodes its tries reached, in order.
    async fn tries(
        endpoints: &Endpoints,
        mut answer: impl FnMut(usize) -> Result<Response<u32>, Status>,
    ) -> (Result<u32, ClientError>, Vec<usize>) {
        let reached = std::sync::Mutex::new(Vec::new());
        let result = endpoints
            .call_with("test", Duration::from_secs(1), (), |node, _| {
                let index = endpoints
                    .pipelines
                    .iter()
                    .position(|p| std::ptr::eq(p, node.pipeline))
                    .expect("a listed node");
                reached.lock().unwrap().push(index);
                let answered = answer(index);
                async move { answered }
            })
            .await;
        (result, reached.into_inner().unwrap())
    }

    /// An answer, naming `leader` as a forwarded one does.
    fn naming(leader: Option<&str>) -> Result<Response<u32>, Status> {
        let mut response = Response::new(7);
        if let Some(leader) = leader {
            fusebox_proto::name_leader(response.metadata_mut(), leader);
        }
        Ok(response)
    }

    /// The nodes one call reached, every try answered with `answer`.
    async fn reached(endpoints: &Endpoints, answer: Result<Response<u32>, Status>) -> Vec<usize> {
        let (result, reached) = tries(endpoints, |_| match &answer {
            Ok(r) => {
                let mut response = Response::new(*r.get_ref());
                *response.metadata_mut() = r.metadata().clone();
                Ok(response)
            }
            Err(status) => Err(status.clone()),
        })
        .await;
        result.expect("answered");
        reached
    }

    #[tokio::test]
    async fn calls_go_to_the_leader_a_forwarded_answer_names() {
        let endpoints = own_first(3);
        // No leader known yet: the replica's own node, which forwards and
        // names node 3.
        assert_eq!(reached(&endpoints, naming(Some("127.0.0.1:3"))).await, [0]);
        // The next calls go to node 3, which answers itself; the watch
        // stream's node does not move.
        assert_eq!(reached(&endpoints, naming(None)).await, [2]);
        assert_eq!(reached(&endpoints, naming(None)).await, [2]);
        assert_eq!(endpoints.preferred.load(Ordering::Relaxed), 0);
        // Named with a scheme in front: the same node.
        assert_eq!(
            reached(&endpoints, naming(Some("http://127.0.0.1:2"))).await,
            [2]
        );
        assert_eq!(reached(&endpoints, naming(None)).await, [1]);
        // A leader this client knows by no listed name: back to its own node.
        reached(&endpoints, naming(Some("fusebox-2.internal:7100"))).await;
        assert_eq!(reached(&endpoints, naming(None)).await, [0]);
    }

    #[tokio::test]
    async fn a_not_leader_answer_sends_this_call_and_later_ones_to_the_leader() {
        let endpoints = own_first(3);
        let detail = FuseboxErrorDetail {
            detail: Some(Detail::NotLeader(pb::NotLeaderDetail {
                leader_id: Some(3),
                leader_address: Some("127.0.0.1:3".to_owned()),
            })),
            ..FuseboxErrorDetail::default()
        };
        let not_leader = Status::with_details(
            Code::Unavailable,
            "not the leader",
            detail.encode_to_vec().into(),
        );
        let (result, reached_first) = tries(&endpoints, |index| match index {
            0 => Err(not_leader.clone()),
            _ => naming(None),
        })
        .await;
        assert_eq!(result.expect("answered by the leader"), 7);
        // Straight to the node named, not the next in turn.
        assert_eq!(reached_first, [0, 2]);
        assert_eq!(reached(&endpoints, naming(None)).await, [2]);
    }

    #[tokio::test]
    async fn a_leader_that_fails_a_call_is_left_for_a_while() {
        let endpoints = own_first(3);
        reached(&endpoints, naming(Some("127.0.0.1:3"))).await;
        // The leader is unavailable: the call goes on to the next node,
        // which names the same leader.
        let (result, reached_first) = tries(&endpoints, |index| match index {
            2 => Err(Status::unavailable("connection refused")),
            _ => naming(Some("127.0.0.1:3")),
        })
        .await;
        assert_eq!(result.expect("answered by the next node"), 7);
        assert_eq!(reached_first, [2, 0]);
        // Calls keep away from it, answers naming it notwithstanding...
        assert_eq!(reached(&endpoints, naming(Some("127.0.0.1:3"))).await, [0]);
        assert_eq!(reached(&endpoints, naming(Some("127.0.0.1:3"))).await, [0]);
        // ...but not from another leader...
        reached(&endpoints, naming(Some("127.0.0.1:2"))).await;
        assert_eq!(reached(&endpoints, naming(None)).await, [1]);
        // ...and once the hold-off has passed, it is taken up again.
        endpoints.left_until_ms.store(0, Ordering::Relaxed);
        reached(&endpoints, naming(Some("127.0.0.1:3"))).await;
        assert_eq!(reached(&endpoints, naming(None)).await, [2]);
    }

    #[tokio::test]
    async fn a_leader_that_does_not_answer_in_time_is_left() {
        let endpoints = own_first(3);
        reached(&endpoints, naming(Some("127.0.0.1:3"))).await;
        let reached_first = std::sync::Mutex::new(Vec::new());
        let result: Result<u32, _> = endpoints
            .call_with("test", Duration::from_millis(50), (), |node, _| {
                let index = endpoints
                    .pipelines
                    .iter()
                    .position(|p| std::ptr::eq(p, node.pipeline));
                reached_first.lock().unwrap().push(index);
                std::future::pending()
            })
            .await;
        assert!(
            matches!(result, Err(ClientError::ClusterUnavailable { .. })),
            "{result:?}"
        );
        assert_eq!(reached_first.into_inner().unwrap(), [Some(2)]);
        assert_eq!(reached(&endpoints, naming(None)).await, [0]);
    }

    #[tokio::test]
    async fn an_election_is_waited_out_within_the_deadline() {
        // Five refusals: more than two rounds of the two nodes.
        let (answer, tries) = call_refused(&endpoints(2), 5, Duration::from_secs(5)).await;
        assert_eq!(answer.expect("answered after the election"), 7);
        assert_eq!(tries, 6);
    }

    #[tokio::test]
    async fn refusals_end_at_the_deadline_or_the_bound_on_tries() {
        let started = Instant::now();
        let deadline = Duration::from_millis(300);
        let (answer, tries) = call_refused(&endpoints(2), u32::MAX, deadline).await;
        assert!(
            matches!(answer, Err(ClientError::ClusterUnavailable { .. })),
            "{answer:?}"
        );
        assert!(started.elapsed() >= deadline, "gave up before the deadline");
        assert!((2..=TRIES_MAX as u32).contains(&tries), "{tries} tries");
    }
}
