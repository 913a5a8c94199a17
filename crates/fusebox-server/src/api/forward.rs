//! Leader forwarding: a follower hands a request to the leader, once.
//!
//! When the backend answers `NotLeader` with the leader's address (or, for
//! the `Cluster` service, when this node does not lead), the service sends
//! the *same* request to the leader with a generated client and returns the
//! leader's answer (or its status) unchanged. The forwarded request carries
//! [`FORWARDED_HEADER`], and a request that already carries it is never
//! forwarded again: during an election two nodes could otherwise bounce a
//! request between them. The answer names the leader in
//! [`fusebox_proto::LEADER_HEADER`], so a client can go there itself next
//! time. Every forwarded call has a deadline (the caller's `grpc-timeout`,
//! else [`FORWARD_TIMEOUT_DEFAULT_MS`] or the default a slow RPC names, at
//! most [`FORWARD_TIMEOUT_MAX_MS`]); channels are cached per address, at
//! most [`FORWARD_CHANNELS_MAX`] of them. One forwarder serves every
//! service of a node.

use super::status::not_leader;
use crate::auth::{Caller, Via, FORWARDED_CALLER_HEADER};
use crate::limits::{
    FORWARD_CHANNELS_MAX, FORWARD_CONNECT_TIMEOUT_MS, FORWARD_TIMEOUT_DEFAULT_MS,
    FORWARD_TIMEOUT_MAX_MS,
};
use fusebox_proto::name_leader;
use fusebox_proto::net::Net;
use fusebox_proto::tls::TlsConnector;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};

/// Metadata header marking a request a node already forwarded to the leader.
pub const FORWARDED_HEADER: &str = "x-fusebox-forwarded";
/// Metadata header marking a request a leader took and then handed on to
/// the leader it gave way to (a leader asked to remove itself): such a
/// request may take that one more hop, once.
pub const HANDED_ON_HEADER: &str = "x-fusebox-handed-on";

/// Headers of the incoming call that describe its transport, not the
/// caller; the outgoing client sets its own.
const TRANSPORT_HEADERS: [&str; 8] = [
    "te",
    "content-type",
    "content-length",
    "user-agent",
    "host",
    "grpc-timeout",
    "grpc-encoding",
    "grpc-accept-encoding",
];

/// Sends requests on to the leader, caching one channel per address.
#[derive(Debug)]
pub struct Forwarder {
    net: Net,
    tls: Option<TlsConnector>,
    channels: Mutex<HashMap<String, Channel>>,
}

impl Forwarder {
    /// A forwarder with no cached channel, connecting over `net`, with TLS
    /// to the leader's API if `tls` is given.
    pub fn new(net: Net, tls: Option<TlsConnector>) -> Self {
        Forwarder {
            net,
            tls,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a request already went through one forwarding hop.
    pub fn was_forwarded(metadata: &MetadataMap) -> bool {
        metadata.get(FORWARDED_HEADER).is_some()
    }

    /// Lets a request this node took as leader, and then gave leadership
    /// away for, be forwarded to the new leader even if it reached this
    /// node by a hop already; once, so no request bounces between nodes.
    pub fn hand_on<Req>(mut request: Request<Req>) -> Result<Request<Req>, Status> {
        let metadata = request.metadata_mut();
        if metadata.get(HANDED_ON_HEADER).is_some() {
            return Err(Status::unavailable(
                "request was handed on by a leader once already; retry",
            ));
        }
        metadata.remove(FORWARDED_HEADER);
        metadata.insert(HANDED_ON_HEADER, MetadataValue::from_static("1"));
        Ok(request)
    }

    /// Forwards `request` to the leader with `call` (which invokes the same
    /// RPC on a client over the given channel); refuses with UNAVAILABLE and
    /// NOT_LEADER when the leader is unknown or the request was forwarded
    /// already.
    pub async fn forward<Req, Resp, F, Fut>(
        &self,
        request: Request<Req>,
        leader_id: Option<u64>,
        leader_addr: Option<String>,
        call: F,
    ) -> Result<Response<Resp>, Status>
    where
        F: FnOnce(Channel, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let deadline_default = Duration::from_millis(FORWARD_TIMEOUT_DEFAULT_MS);
        self.forward_with_default_deadline(request, leader_id, leader_addr, deadline_default, call)
            .await
    }

    /// [`Forwarder::forward`] for an RPC slow by nature (a membership change
    /// waits for the new member to catch up): when the caller set no
    /// deadline, the hop gets `deadline_default` instead of
    /// [`FORWARD_TIMEOUT_DEFAULT_MS`], still at most
    /// [`FORWARD_TIMEOUT_MAX_MS`].
    pub async fn forward_with_default_deadline<Req, Resp, F, Fut>(
        &self,
        request: Request<Req>,
        leader_id: Option<u64>,
        leader_addr: Option<String>,
        deadline_default: Duration,
        call: F,
    ) -> Result<Response<Resp>, Status>
    where
        F: FnOnce(Channel, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        if Self::was_forwarded(request.metadata()) {
            return Err(not_leader(
                leader_id,
                leader_addr,
                "request was forwarded once already",
            ));
        }
        let Some(addr) = leader_addr else {
            return Err(not_leader(
                leader_id,
                None,
                "no leader is known, an election may be under way",
            ));
        };
        let channel = match self.channel(&addr) {
            Ok(channel) => channel,
            Err(reason) => return Err(not_leader(leader_id, Some(addr), &reason)),
        };
        let deadline = deadline_of(request.metadata(), deadline_default);
        let outgoing = outgoing_request(request, deadline);
        let deadline_ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
        tracing::debug!(leader = %addr, deadline_ms, "forwarding request to the leader");
        match tokio::time::timeout(deadline, call(channel, outgoing)).await {
            Ok(answer) => answer
                .map(|response| naming_leader(response, &addr))
                .map_err(|status| leader_failure(status, &addr)),
            Err(_) => Err(Status::new(
                Code::Unavailable,
                format!(
                    "forwarding to the leader at {addr} timed out after {deadline_ms} ms; the \
                     outcome is unknown, look the result up before repeating a write"
                ),
            )),
        }
    }

    /// The cached channel to `addr`, created lazily on first use.
    fn channel(&self, addr: &str) -> Result<Channel, String> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(addr) {
            return Ok(channel.clone());
        }
        let uri = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("http://{addr}")
        };
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|e| format!("leader address {addr:?} is not a valid uri: {e}"))?
            .connect_timeout(Duration::from_millis(FORWARD_CONNECT_TIMEOUT_MS))
            .timeout(Duration::from_millis(FORWARD_TIMEOUT_MAX_MS));
        if channels.len() >= FORWARD_CHANNELS_MAX {
            // Leaders change rarely; a full cache means stale addresses.
            channels.clear();
        }
        let channel = self.net.channel_tls(endpoint, self.tls.as_ref());
        channels.insert(addr.to_owned(), channel.clone());
        Ok(channel)
    }
}

/// The same message and caller metadata, marked as forwarded, with a
/// deadline. A bearer token travels on and the leader judges it itself; a
/// caller this node recognised by its client certificate is named in
/// [`FORWARDED_CALLER_HEADER`], which the leader accepts only because this
/// node's own certificate shows it is a member.
fn outgoing_request<Req>(request: Request<Req>, deadline: Duration) -> Request<Req> {
    let (mut metadata, extensions, message) = request.into_parts();
    for header in TRANSPORT_HEADERS {
        metadata.remove(header);
    }
    metadata.remove(FORWARDED_CALLER_HEADER);
    // A caller named by a member that forwarded it is passed on the same
    // way: this node, a member too, vouches for the name it was given.
    let by_certificate = extensions
        .get::<Caller>()
        .filter(|c| matches!(c.via, Via::Certificate | Via::Forwarded))
        .and_then(|c| c.name.as_deref())
        .and_then(|name| MetadataValue::try_from(name).ok());
    if let Some(name) = by_certificate {
        metadata.insert(FORWARDED_CALLER_HEADER, name);
    }
    metadata.insert(FORWARDED_HEADER, MetadataValue::from_static("1"));
    let mut outgoing = Request::from_parts(metadata, Default::default(), message);
    outgoing.set_timeout(deadline);
    outgoing
}

/// The leader's answer, naming the leader ([`name_leader`]) so that the
/// caller can send its next writes there itself.
fn naming_leader<Resp>(mut response: Response<Resp>, addr: &str) -> Response<Resp> {
    name_leader(response.metadata_mut(), addr);
    response
}

/// A failure of the forwarding hop itself (cannot connect) is said to be
/// one; a status the leader chose passes through unchanged.
fn leader_failure(status: Status, addr: &str) -> Status {
    if status.code() == Code::Unavailable && status.details().is_empty() {
        tracing::warn!(leader = %addr, error = %status.message(), "forwarding to the leader failed");
        return Status::new(
            Code::Unavailable,
            format!("could not reach the leader at {addr}: {}", status.message()),
        );
    }
    status
}

/// The caller's deadline (its `grpc-timeout`), else `default`, capped.
fn deadline_of(metadata: &MetadataMap, default: Duration) -> Duration {
    let asked = metadata
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout);
    asked
        .unwrap_or(default)
        .min(Duration::from_millis(FORWARD_TIMEOUT_MAX_MS))
}

/// Parses a `grpc-timeout` value: at most 8 digits and a unit (H M S m u n).
fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let split = value.len().checked_sub(1)?;
    let (digits, unit) = (value.get(..split)?, value.get(split..)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    match unit {
        "H" => Some(Duration::from_secs(n.saturating_mul(3600))),
        "M" => Some(Duration::from_secs(n.saturating_mul(60))),
        "S" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_millis(n)),
        "u" => Some(Duration::from_micros(n)),
        "n" => Some(Duration::from_nanos(n)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_proto::{leader_named, LEADER_HEADER};

    #[test]
    fn grpc_timeouts_parse_by_unit() {
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("3S"), Some(Duration::from_secs(3)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("10x"), None);
    }

    #[test]
    fn deadlines_default_and_cap() {
        let default = Duration::from_millis(FORWARD_TIMEOUT_DEFAULT_MS);
        let mut metadata = MetadataMap::new();
        assert_eq!(
            deadline_of(&metadata, default),
            Duration::from_millis(FORWARD_TIMEOUT_DEFAULT_MS)
        );
        metadata.insert("grpc-timeout", MetadataValue::from_static("2H"));
        assert_eq!(
            deadline_of(&metadata, default),
            Duration::from_millis(FORWARD_TIMEOUT_MAX_MS)
        );
    }

    #[test]
    fn a_slow_rpc_names_its_own_default_and_is_still_capped() {
        let slow = Duration::from_secs(30);
        let mut metadata = MetadataMap::new();
        assert_eq!(deadline_of(&metadata, slow), slow);
        metadata.insert("grpc-timeout", MetadataValue::from_static("250m"));
        assert_eq!(deadline_of(&metadata, slow), Duration::from_millis(250));
        let too_slow = Duration::from_millis(FORWARD_TIMEOUT_MAX_MS + 1);
        assert_eq!(
            deadline_of(&MetadataMap::new(), too_slow),
            Duration::from_millis(FORWARD_TIMEOUT_MAX_MS)
        );
    }

    #[test]
    fn forwarded_requests_are_marked_and_lose_transport_headers() {
        let mut request = Request::new(());
        request
            .metadata_mut()
            .insert("user-agent", MetadataValue::from_static("x"));
        request
            .metadata_mut()
            .insert("x-trace", MetadataValue::from_static("t1"));
        let out = outgoing_request(request, Duration::from_secs(1));
        assert!(Forwarder::was_forwarded(out.metadata()));
        assert!(out.metadata().get("user-agent").is_none());
        assert!(out.metadata().get("x-trace").is_some());
    }

    #[test]
    fn a_forwarded_answer_names_the_leader_when_it_can() {
        let named = naming_leader(Response::new(()), "10.0.0.7:7100");
        assert_eq!(leader_named(named.metadata()), Some("10.0.0.7:7100"));
        // Not a header value: left out, not sent garbled.
        let unnamed = naming_leader(Response::new(()), "bad\naddress");
        assert!(unnamed.metadata().get(LEADER_HEADER).is_none());
    }

    #[test]
    fn a_handed_on_request_takes_one_more_hop_once() {
        let forwarded = outgoing_request(Request::new(()), Duration::from_secs(1));
        let handed = Forwarder::hand_on(forwarded).expect("the first hand-on");
        assert!(!Forwarder::was_forwarded(handed.metadata()));
        let again = outgoing_request(handed, Duration::from_secs(1));
        assert!(Forwarder::was_forwarded(again.metadata()));
        let refused = Forwarder::hand_on(again).expect_err("a second hand-on");
        assert_eq!(refused.code(), Code::Unavailable);
    }
}
