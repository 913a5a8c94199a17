//! The sending side of Raft: openraft's network over `fusebox.v1.Raft`.
//!
//! One [`Connection`] per peer, created lazily by openraft; the gRPC channel
//! connects on first use and reconnects by itself. Every call is bounded by
//! the deadline openraft gives (`soft_ttl`), enforced here because openraft
//! does not enforce it on appends. Entries go as a pipeline over
//! `StreamAppend` ([`super::append_stream`]), or one unary AppendEntries at
//! a time to a peer that lacks it.

use super::append_stream::{self, Acks, Encoded, InFlight};
use super::codec::{self, Route};
use crate::limits::{
    RAFT_CONNECT_TIMEOUT_MS, RAFT_PAYLOAD_BYTES_MAX, RAFT_STREAM_UNARY_MS,
    REPLICATION_BATCH_BYTES_MAX, REPLICATION_BYTES_PER_SEC_MIN, SNAPSHOT_CHUNK_BYTES,
    SNAPSHOT_INSTALL_BASE_MS, SNAPSHOT_INSTALL_BYTES_PER_SEC, SNAPSHOT_STALL_MS,
};
use crate::node::contact::LeaderContact;
use crate::node::Clock;
use fusebox_proto::net::Net;
use fusebox_proto::tls::TlsConnector;
use fusebox_proto::v1::raft_client::RaftClient;
use fusebox_proto::v1::{snapshot_chunk, SnapshotBegin, SnapshotChunk, SnapshotEnd};
use fusebox_raft_store::Member;
use fusebox_raft_store::{LogId, NodeId, SnapshotData, SnapshotMeta, TypeConfig};
use futures::{Stream, StreamExt};
use openraft::base::{BoxFuture, BoxStream};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{stream_append_sequential, RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult,
    TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::type_config::alias::{SnapshotOf, VoteOf};
use openraft::OptionalSend;
use openraft::RaftNetworkV2;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

/// Builds one connection per peer.
#[derive(Clone)]
pub struct Network {
    /// This cluster's name, stamped on every message.
    pub cluster_id: String,
    /// This node.
    pub me: NodeId,
    /// Where the channels connect.
    pub net: Net,
    /// Mutual TLS to peers (this node's peer certificate, the cluster CA).
    pub tls: Option<TlsConnector>,
    /// Where peers' acknowledgements of this node as leader are recorded.
    pub contact: Arc<LeaderContact>,
    /// The node's wall clock, to stamp them.
    pub clock: Clock,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> Connection {
        Connection {
            route: Route {
                cluster_id: self.cluster_id.clone(),
                from: self.me,
                to: target,
            },
            addr: node.peer_addr.clone(),
            net: self.net.clone(),
            tls: self.tls.clone(),
            contact: self.contact.clone(),
            clock: self.clock.clone(),
            client: None,
            unary_until: None,
        }
    }
}

/// A connection to one peer.
pub struct Connection {
    route: Route,
    addr: String,
    net: Net,
    tls: Option<TlsConnector>,
    contact: Arc<LeaderContact>,
    clock: Clock,
    client: Option<RaftClient<Channel>>,
    /// Until when entries go to this peer unary: it answered `StreamAppend`
    /// with UNIMPLEMENTED (a node of an older version, mid-upgrade).
    unary_until: Option<Instant>,
}

pub(super) fn unreachable(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::from_string(e.to_string()))
}

pub(super) fn network(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::from_string(e.to_string()))
}

/// A peer's refusal as openraft's error: unreachable if the peer could not
/// be reached, a network error otherwise.
pub(super) fn status_error(status: &tonic::Status) -> RPCError<TypeConfig> {
    match status.code() {
        tonic::Code::Unavailable => unreachable(status.message()),
        _ => network(status.message()),
    }
}

/// openraft's answers on one replication stream.
type Answers<'s> = BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>;

impl Connection {
    fn client(&mut self) -> Result<RaftClient<Channel>, RPCError<TypeConfig>> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{}", self.addr))
            .map_err(unreachable)?
            .connect_timeout(Duration::from_millis(RAFT_CONNECT_TIMEOUT_MS));
        let client = RaftClient::new(self.net.channel_tls(endpoint, self.tls.as_ref()))
            .max_decoding_message_size(RAFT_PAYLOAD_BYTES_MAX)
            .max_encoding_message_size(RAFT_PAYLOAD_BYTES_MAX);
        self.client = Some(client.clone());
        Ok(client)
    }

    /// Sends one unary message within `ttl` and decodes the answer.
    async fn call<Req, Resp, F, Fut>(
        &mut self,
        req: &Req,
        ttl: Duration,
        send: F,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: serde::Serialize,
        Resp: serde::de::DeserializeOwned,
        F: FnOnce(RaftClient<Channel>, tonic::Request<fusebox_proto::v1::RaftMessage>) -> Fut,
        Fut:
            Future<Output = Result<tonic::Response<fusebox_proto::v1::RaftMessage>, tonic::Status>>,
    {
        let payload = codec::to_bytes(req).map_err(network)?;
        self.call_payload(payload, ttl, send).await
    }

    /// [`Self::call`] with the message's payload already encoded.
    async fn call_payload<Resp, F, Fut>(
        &mut self,
        payload: Vec<u8>,
        ttl: Duration,
        send: F,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Resp: serde::de::DeserializeOwned,
        F: FnOnce(RaftClient<Channel>, tonic::Request<fusebox_proto::v1::RaftMessage>) -> Fut,
        Fut:
            Future<Output = Result<tonic::Response<fusebox_proto::v1::RaftMessage>, tonic::Status>>,
    {
        let message = codec::message(&self.route, payload);
        let client = self.client()?;
        let mut request = tonic::Request::new(message);
        request.set_timeout(ttl);
        // The deadline travels to the peer too (grpc-timeout).
        let reply = match tokio::time::timeout(ttl, send(client, request)).await {
            Err(_) => {
                return Err(unreachable(format!(
                    "no answer from {} in {ttl:?}",
                    self.addr
                )))
            }
            Ok(Err(status)) => return Err(status_error(&status)),
            Ok(Ok(reply)) => reply.into_inner(),
        };
        codec::decode(&reply.payload).map_err(|s| network(s.message()))
    }

    /// Opens a `StreamAppend` stream carrying `requests` once the first
    /// request is ready. openraft's backoff after an error is a pause before
    /// it yields its next request, so a stream opened before that would
    /// redial a peer that refuses connections in a tight loop (seen in the
    /// simulation: a down node's port exhausted a leader's ephemeral ports).
    ///
    /// The opening may take `ttl` plus the first request's size at
    /// [`REPLICATION_BYTES_PER_SEC_MIN`], as a unary append of it may
    /// ([`ttl_for`]); the request is encoded before that time starts.
    /// Opening took longer the bigger the first request was (measured on a
    /// debug build, with its encoding inside the time: 2-3 ms with no
    /// entries, 55 ms with one 4 MB entry), so with `ttl` alone a follower
    /// behind by a few big entries would be sent the same batch on a new
    /// stream after each timeout and never catch up (seen: a follower of
    /// four 4 MB imports, on a debug build, stuck for 30 s while heartbeats
    /// kept it from an election).
    ///
    /// The stream ends at once, with no answer, when `requests` does.
    async fn open_stream<S>(
        &mut self,
        mut requests: S,
        ttl: Duration,
    ) -> Result<Answers<'static>, RPCError<TypeConfig>>
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        let Some(first) = requests.next().await else {
            return Ok(Box::pin(futures::stream::empty()));
        };
        let first = Encoded::new(&first).map_err(network)?;
        let within = ttl_for(ttl, first.payload.len());
        let in_flight = InFlight::new();
        let outgoing =
            append_stream::outgoing(first, requests, self.route.clone(), in_flight.clone());
        let mut client = self.client()?;
        let replies = match tokio::time::timeout(within, client.stream_append(outgoing)).await {
            Err(_) => {
                return Err(unreachable(format!(
                    "{} opened no replication stream in {within:?}",
                    self.addr
                )))
            }
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
                tracing::info!(peer = %self.addr, "peer has no StreamAppend; replicating to it with unary AppendEntries");
                self.unary_until =
                    Some(Instant::now() + Duration::from_millis(RAFT_STREAM_UNARY_MS));
                return Err(network(status.message()));
            }
            Ok(Err(status)) => return Err(status_error(&status)),
            Ok(Ok(replies)) => replies.into_inner(),
        };
        let acks = Acks {
            contact: self.contact.clone(),
            clock: self.clock.clone(),
            peer: self.route.to,
            addr: self.addr.clone(),
        };
        Ok(Box::pin(append_stream::replies(
            replies, in_flight, ttl, acks,
        )))
    }
}

impl RaftNetworkV2<TypeConfig> for Connection {
    type SnapshotData = SnapshotData;

    /// Sends at most [`REPLICATION_BATCH_BYTES_MAX`] of entries (and at
    /// least one). When openraft offers more, the rest is cut off and a
    /// success is reported as partial, up to the last entry sent: openraft
    /// then sends the remainder next, so no batch outgrows the transport.
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let (payload, cut_after) = append_payload(&rpc).map_err(network)?;
        // The size's allowance may run past openraft's `hard_ttl`, where
        // openraft 0.10.0-alpha.37 does not cancel an append (check again
        // on upgrading it).
        let ttl = ttl_for(option.soft_ttl(), payload.len());
        let response = self
            .call_payload(
                payload,
                ttl,
                |mut c, m| async move { c.append_entries(m).await },
            )
            .await?;
        // Anything but a higher vote: the peer follows this node as leader.
        if !matches!(response, AppendEntriesResponse::HigherVote(_)) {
            self.contact.acked_by(self.route.to, (self.clock)());
        }
        Ok(match (response, cut_after) {
            (AppendEntriesResponse::Success, Some(last)) => {
                AppendEntriesResponse::PartialSuccess(Some(last))
            }
            (response, _) => response,
        })
    }

    /// The session's requests as a pipeline over one `StreamAppend` stream
    /// ([`super::append_stream`]); to a peer that lacks it, one unary
    /// AppendEntries at a time, as openraft does by default.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<Answers<'s>, RPCError<TypeConfig>>>
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + OptionalSend + Unpin + 'static,
    {
        if self.unary_until.is_some_and(|until| Instant::now() < until) {
            return stream_append_sequential(self, input, option);
        }
        Box::pin(async move {
            let answers = self.open_stream(input, option.soft_ttl()).await?;
            Ok(answers as Answers<'s>)
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&rpc, option.soft_ttl(), |mut c, m| async move {
            c.vote(m).await
        })
        .await
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&rpc, option.soft_ttl(), |mut c, m| async move {
            c.transfer_leader(m).await
        })
        .await
    }

    /// Streams the snapshot's file in chunks read as the stream is pulled.
    /// A snapshot has no size bound, so no total deadline: the stream must
    /// move every [`SNAPSHOT_STALL_MS`], and the receiver then has a time
    /// that grows with the snapshot's size to install it and answer.
    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let progress = Arc::new(Progress::new());
        let chunks = snapshot_chunks(
            &self.route,
            &vote,
            &snapshot.meta,
            snapshot.snapshot.clone(),
            progress.clone(),
        )
        .map_err(network)?;
        let mut client = self.client()?;
        let install_ms = SNAPSHOT_INSTALL_BASE_MS
            .saturating_add(snapshot.snapshot.len() / SNAPSHOT_INSTALL_BYTES_PER_SEC * 1_000);
        let send = client.install_snapshot(chunks);
        tokio::pin!(send);
        tokio::pin!(cancel);
        let reply = loop {
            tokio::select! {
                closed = &mut cancel => return Err(StreamingError::Closed(closed)),
                r = &mut send => break r,
                _ = tokio::time::sleep(Duration::from_millis(SNAPSHOT_WATCH_MS)) => {
                    if let Some(why) = progress.overdue(install_ms) {
                        return Err(unreachable(format!("snapshot to {}: {why}", self.addr)).into());
                    }
                }
            }
        };
        let reply = match reply {
            Err(status) => return Err(network(status.message()).into()),
            Ok(reply) => reply.into_inner(),
        };
        codec::decode(&reply.payload).map_err(|s| network(s.message()).into())
    }
}

/// How often the sender looks at a snapshot stream's progress.
const SNAPSHOT_WATCH_MS: u64 = 1_000;

/// When a snapshot stream last moved, and when its last chunk went.
struct Progress {
    moved: Mutex<(Instant, Option<Instant>)>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            moved: Mutex::new((Instant::now(), None)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, (Instant, Option<Instant>)> {
        self.moved.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A chunk was taken by the transport.
    fn moved(&self) {
        self.lock().0 = Instant::now();
    }

    /// The last chunk was taken.
    fn ended(&self) {
        self.lock().1 = Some(Instant::now());
    }

    /// Why the stream should be given up, if it should.
    fn overdue(&self, install_ms: u64) -> Option<String> {
        let (moved, ended) = *self.lock();
        match ended {
            None if moved.elapsed() > Duration::from_millis(SNAPSHOT_STALL_MS) => {
                Some(format!("no chunk taken for {SNAPSHOT_STALL_MS} ms"))
            }
            Some(at) if at.elapsed() > Duration::from_millis(install_ms) => Some(format!(
                "not installed {install_ms} ms after its last chunk"
            )),
            _ => None,
        }
    }
}

/// The deadline of a message of `bytes`: openraft's `ttl`, plus the time
/// its size takes at [`REPLICATION_BYTES_PER_SEC_MIN`].
pub(super) fn ttl_for(ttl: Duration, bytes: usize) -> Duration {
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    let extra_ms = bytes.saturating_mul(1_000) / REPLICATION_BYTES_PER_SEC_MIN;
    ttl.saturating_add(Duration::from_millis(extra_ms))
}

/// `rpc` encoded as postcard encodes an [`AppendEntriesRequest`] (its
/// fields in order, a sequence as its length then its items; the tests pin
/// it), with the longest run of its entries that fits in
/// [`REPLICATION_BATCH_BYTES_MAX`], never fewer than one (a proposal is
/// bounded by [`crate::limits::ENTRY_BYTES_MAX`], well below it); when it
/// cuts, also the log id of the last entry kept. Each entry is encoded
/// once: the bytes that measured it are the bytes sent.
pub(super) fn append_payload(
    rpc: &AppendEntriesRequest<TypeConfig>,
) -> Result<(Vec<u8>, Option<LogId>), postcard::Error> {
    let mut entries = Vec::new();
    let mut kept = 0usize;
    for entry in &rpc.entries {
        let start = entries.len();
        entries = postcard::to_extend(entry, entries)?;
        if kept > 0 && entries.len() > REPLICATION_BATCH_BYTES_MAX {
            entries.truncate(start);
            break;
        }
        kept += 1;
    }
    let mut payload = codec::to_bytes(&rpc.vote)?;
    payload = postcard::to_extend(&rpc.prev_log_id, payload)?;
    payload = postcard::to_extend(&kept, payload)?;
    payload.extend_from_slice(&entries);
    payload = postcard::to_extend(&rpc.leader_commit, payload)?;
    if kept == rpc.entries.len() {
        return Ok((payload, None));
    }
    tracing::debug!(
        entries = kept,
        bytes = entries.len(),
        "replication batch cut to its byte bound"
    );
    let last = kept.checked_sub(1).and_then(|i| rpc.entries.get(i));
    Ok((payload, last.map(|e| e.log_id)))
}

/// A snapshot as begin, data and end chunks. Data chunks are read from the
/// file (on the blocking pool) as the stream is pulled, and hashed: if the
/// bytes read no longer match the checksum they were written with (the
/// file decayed on disk), the stream stops before its end chunk, so the
/// receiver refuses it, and the error is logged here.
fn snapshot_chunks(
    route: &Route,
    vote: &VoteOf<TypeConfig>,
    meta: &SnapshotMeta,
    data: SnapshotData,
    progress: Arc<Progress>,
) -> Result<impl futures::Stream<Item = SnapshotChunk> + Send + 'static, postcard::Error> {
    let begin = SnapshotBegin {
        header: Some(route.header()),
        vote: codec::to_bytes(vote)?,
        meta: codec::to_bytes(meta)?,
        total_bytes: data.len(),
    };
    let described = meta.to_string();
    let first = SnapshotChunk {
        chunk: Some(snapshot_chunk::Chunk::Begin(begin)),
    };
    let state = (data, 0u64, Sha256::new(), false);
    let rest = futures::stream::unfold(state, move |(data, offset, mut hasher, done)| {
        let (progress, described) = (progress.clone(), described.clone());
        async move {
            if done {
                return None;
            }
            progress.moved();
            if offset >= data.len() {
                progress.ended();
                let sha256: [u8; 32] = hasher.finalize().into();
                if sha256 != data.sha256() {
                    tracing::error!(snapshot = %described, "the persisted snapshot's file no longer matches its checksum; not sent");
                    return None;
                }
                let end = snapshot_chunk::Chunk::End(SnapshotEnd {
                    sha256: sha256.to_vec(),
                });
                return Some((
                    SnapshotChunk { chunk: Some(end) },
                    (data, offset, Sha256::new(), true),
                ));
            }
            let reader = data.clone();
            let read = fusebox_raft_store::blocking(move || {
                let want = (reader.len() - offset).min(SNAPSHOT_CHUNK_BYTES as u64) as usize;
                let mut buf = vec![0u8; want];
                reader.read_at(offset, &mut buf)?;
                Ok(buf)
            })
            .await;
            let bytes = match read {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::error!(snapshot = %described, error = %e, "reading the snapshot to send failed");
                    return None;
                }
            };
            hasher.update(&bytes);
            let next = offset + bytes.len() as u64;
            let chunk = snapshot_chunk::Chunk::Data(fusebox_proto::v1::SnapshotData {
                offset,
                data: bytes,
            });
            Some((
                SnapshotChunk { chunk: Some(chunk) },
                (data, next, hasher, false),
            ))
        }
    });
    Ok(futures::stream::once(futures::future::ready(first)).chain(rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_core::disclosure::McpHints;
    use fusebox_core::machine::Command;
    use fusebox_core::tools::ToolImport;
    use fusebox_core::{Namespace, ServerName, ToolName};
    use fusebox_raft_store::{Entry, Request};
    use openraft::entry::RaftEntry;

    /// An entry of about `mib` MiB: one import of a tool with a block of
    /// control characters (which JSON would have inflated six-fold).
    fn entry(index: u64, mib: usize) -> Entry {
        let tool = ToolImport {
            tool: ToolName::new("t").unwrap(),
            hints: McpHints::default(),
            disclosure_json: Some("\u{1}".repeat(mib * 1024 * 1024)),
        };
        let command = Command::ImportTools {
            namespace: Namespace::new("ns").unwrap(),
            server: ServerName::new("s").unwrap(),
            tools: vec![tool],
            actor: "ops".into(),
        };
        let log_id = openraft::testing::log_id::<TypeConfig>(1, 1, index);
        Entry::new_normal(log_id, Request::new(1, command))
    }

    fn request(entries: Vec<Entry>) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: openraft::Vote::new_committed(1, 1),
            prev_log_id: None,
            leader_commit: None,
            entries,
        }
    }

    /// What the follower decodes from a payload.
    fn sent(payload: &[u8]) -> AppendEntriesRequest<TypeConfig> {
        codec::decode(payload).unwrap()
    }

    #[test]
    fn a_message_has_openrafts_deadline_plus_its_size_at_the_slowest_rate() {
        let ttl = Duration::from_millis(150);
        assert_eq!(ttl_for(ttl, 0), ttl);
        assert_eq!(ttl_for(ttl, 4 * 1024), ttl + Duration::from_millis(0));
        assert_eq!(ttl_for(ttl, 4 * 1024 * 1024), ttl + Duration::from_secs(1));
        assert_eq!(
            ttl_for(ttl, REPLICATION_BATCH_BYTES_MAX),
            ttl + Duration::from_secs(4)
        );
        assert!(ttl_for(ttl, usize::MAX) > Duration::from_secs(3600));
    }

    #[test]
    fn a_batch_is_cut_at_its_byte_bound_and_says_where() {
        let offered = (1..=5).map(|i| entry(i, 6)).collect();
        let (payload, cut_after) = append_payload(&request(offered)).unwrap();
        let sent = sent(&payload);
        assert_eq!(sent.entries.len(), 2, "two entries of 6 MiB fit in 16 MiB");
        assert_eq!(cut_after.map(|id| id.index), Some(2));
        assert!(payload.len() <= REPLICATION_BATCH_BYTES_MAX + 64);
        // Control characters travel as themselves, not inflated.
        assert!(codec::encoded_len(&sent.entries[0]).unwrap() < 6 * 1024 * 1024 + 1024);
    }

    #[test]
    fn a_batch_within_its_bound_is_sent_whole_and_one_entry_always_goes() {
        let small = (1..=3).map(|i| entry(i, 1)).collect();
        let (payload, cut_after) = append_payload(&request(small)).unwrap();
        assert_eq!((sent(&payload).entries.len(), cut_after), (3, None));
        let (payload, cut_after) = append_payload(&request(vec![entry(1, 17)])).unwrap();
        assert_eq!((sent(&payload).entries.len(), cut_after), (1, None));
        let (payload, cut_after) = append_payload(&request(Vec::new())).unwrap();
        assert_eq!((sent(&payload).entries.len(), cut_after), (0, None));
    }

    /// The payload is built by hand from its parts; it must be byte for
    /// byte what encoding the whole request gives, whatever the fields hold
    /// and however many entries (a count past 127 takes two bytes).
    #[test]
    fn a_payload_is_the_request_as_postcard_encodes_it() {
        let small = |index| {
            let command = Command::Tick;
            let log_id = openraft::testing::log_id::<TypeConfig>(3, 2, index);
            Entry::new_normal(log_id, Request::new(index, command))
        };
        for count in [0, 1, 2, 127, 128, 300] {
            let mut rpc = request((1..=count).map(small).collect());
            for (prev, commit) in [(None, None), (Some(0), Some(count / 2))] {
                rpc.prev_log_id = prev.map(|i| openraft::testing::log_id::<TypeConfig>(3, 2, i));
                rpc.leader_commit =
                    commit.map(|i| openraft::testing::log_id::<TypeConfig>(3, 2, i));
                let (payload, cut_after) = append_payload(&rpc).unwrap();
                assert_eq!(payload, codec::to_bytes(&rpc).unwrap(), "{count} entries");
                assert_eq!(cut_after, None);
            }
        }
    }
}
