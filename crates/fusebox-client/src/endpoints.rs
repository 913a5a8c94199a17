//! The cluster's nodes as seen by one replica, and calls that move to the
//! next node when one is unavailable.
//!
//! Any node answers any request: a follower forwards writes to the leader
//! itself. So the client needs no leader tracking to be correct, but a hop
//! saved is CPU and latency saved on every write. Calls (writes and
//! linearizable reads, which a follower forwards too) go to the node last
//! known to lead: the one a forwarded answer names in its
//! [`LEADER_HEADER`], else the one that answered without forwarding. Until
//! one is known, or when the named leader is not on this client's list,
//! they go to the replica's own node, as the watch stream does. A call moves
//! on when a node is UNAVAILABLE, and jumps to the leader when a node says
//! NOT_LEADER and names one on the list. When every node has said
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
use fusebox_proto::LEADER_HEADER;
use prost::Message;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// One lazily connected channel per node, and a ledger pipeline over it.
#[derive(Debug)]
pub(crate) struct Endpoints {
    nodes: Vec<(String, Channel)>,
    pipelines: Vec<LedgerPipeline>,
    /// The node the watch stream uses, and calls while no leader is known.
    preferred: AtomicUsize,
    /// The listed node last known to lead, or [`NO_LEADER`].
    leader: AtomicUsize,
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
    /// its [`LEADER_HEADER`] names, else `index` itself (it answered without
    /// forwarding). A leader named but not listed (this client knows the
    /// nodes by other names) leaves calls on the preferred node.
    fn learn_leader<T>(&self, index: usize, response: &Response<T>) {
        let leader = match response.metadata().get(LEADER_HEADER) {
            Some(named) => named
                .to_str()
                .ok()
                .and_then(|address| self.index_of(address))
                .unwrap_or(NO_LEADER),
            None => index,
        };
        self.leader.store(leader, Ordering::Relaxed);
    }

    /// A request carrying this client's token.
    pub(crate) fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        self.bearer.attach(&mut request);
        request
    }

    /// Remembers the node that answered.
    pub(crate) fn prefer(&self, index: usize) {
        self.preferred.store(index, Ordering::Relaxed);
    }

    fn index_of(&self, address: &str) -> Option<usize> {
        self.nodes.iter().position(|(a, _)| a == address)
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
                        None => offset += 1,
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

    /// One call, answered `7` by the first node tried, its header naming
    /// `leader` if given; returns the node the call started at.
    async fn answered_by(endpoints: &Endpoints, leader: Option<&'static str>) -> usize {
        let first = endpoints.first_for_calls();
        let answer = endpoints
            .call("test", Duration::from_secs(1), (), |_, _| async move {
                let mut response = Response::new(7);
                if let Some(leader) = leader {
                    let value = leader.parse().expect("a header value");
                    response.metadata_mut().insert(LEADER_HEADER, value);
                }
                Ok(response)
            })
            .await;
        assert_eq!(answer.expect("answered"), 7);
        first
    }

    #[tokio::test]
    async fn calls_go_to_the_leader_a_forwarded_answer_names() {
        let endpoints = endpoints(3);
        let own = endpoints.preferred.load(Ordering::Relaxed);
        // No leader known yet: the replica's own node.
        assert_eq!(answered_by(&endpoints, Some("127.0.0.1:3")).await, own);
        // That node forwarded and named node 3: calls go there now, and
        // the watch stream's node does not move.
        assert_eq!(answered_by(&endpoints, None).await, 2);
        assert_eq!(endpoints.first_for_calls(), 2);
        assert_eq!(endpoints.preferred.load(Ordering::Relaxed), own);
        // A leader this client knows by no listed name: back to its own node.
        answered_by(&endpoints, Some("fusebox-2.internal:7100")).await;
        assert_eq!(endpoints.first_for_calls(), own);
    }

    #[tokio::test]
    async fn a_not_leader_answer_sends_this_call_and_later_ones_to_the_leader() {
        let endpoints = endpoints(3);
        let detail = FuseboxErrorDetail {
            detail: Some(Detail::NotLeader(pb::NotLeaderDetail {
                leader_id: Some(2),
                leader_address: Some("127.0.0.1:2".to_owned()),
            })),
            ..FuseboxErrorDetail::default()
        };
        let tries = AtomicU32::new(0);
        let answer = endpoints
            .call("test", Duration::from_secs(1), (), |_, _| {
                let n = tries.fetch_add(1, Ordering::Relaxed);
                let details = detail.encode_to_vec();
                async move {
                    if n == 0 {
                        Err(Status::with_details(
                            Code::Unavailable,
                            "not the leader",
                            details.into(),
                        ))
                    } else {
                        Ok(Response::new(7))
                    }
                }
            })
            .await;
        assert_eq!(answer.expect("answered by the leader"), 7);
        assert_eq!(tries.load(Ordering::Relaxed), 2);
        assert_eq!(endpoints.first_for_calls(), 1);
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
