//! The sending side of Raft: openraft's network over `fusebox.v1.Raft`.
//!
//! One [`Connection`] per peer, created lazily by openraft; the gRPC channel
//! connects on first use and reconnects by itself. Every call is bounded by
//! the deadline openraft gives (`soft_ttl`), enforced here because openraft
//! does not enforce it on appends.

use super::codec::{self, Route};
use crate::limits::{RAFT_CONNECT_TIMEOUT_MS, RAFT_PAYLOAD_BYTES_MAX, SNAPSHOT_CHUNK_BYTES};
use fusebox_proto::net::Net;
use fusebox_proto::v1::raft_client::RaftClient;
use fusebox_proto::v1::{snapshot_chunk, SnapshotBegin, SnapshotChunk, SnapshotEnd};
use fusebox_raft_store::{NodeId, SnapshotData, SnapshotMeta, TypeConfig};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::type_config::alias::{SnapshotOf, VoteOf};
use openraft::{BasicNode, RaftNetworkV2};
use sha2::{Digest, Sha256};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
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
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Connection {
        Connection {
            route: Route {
                cluster_id: self.cluster_id.clone(),
                from: self.me,
                to: target,
            },
            addr: node.addr.clone(),
            net: self.net.clone(),
            client: None,
        }
    }
}

/// A connection to one peer.
pub struct Connection {
    route: Route,
    addr: String,
    net: Net,
    client: Option<RaftClient<Channel>>,
}

fn unreachable(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::from_string(e.to_string()))
}

fn network(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::from_string(e.to_string()))
}

impl Connection {
    fn client(&mut self) -> Result<RaftClient<Channel>, RPCError<TypeConfig>> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{}", self.addr))
            .map_err(unreachable)?
            .connect_timeout(Duration::from_millis(RAFT_CONNECT_TIMEOUT_MS));
        let client = RaftClient::new(self.net.channel(endpoint))
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
        let message = codec::encode(&self.route, req).map_err(network)?;
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
            Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
                return Err(unreachable(status.message()))
            }
            Ok(Err(status)) => return Err(network(status.message())),
            Ok(Ok(reply)) => reply.into_inner(),
        };
        codec::decode(&reply.payload).map_err(|s| network(s.message()))
    }
}

impl RaftNetworkV2<TypeConfig> for Connection {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(&rpc, option.soft_ttl(), |mut c, m| async move {
            c.append_entries(m).await
        })
        .await
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

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        // Reading a persisted snapshot and hashing it are disk and CPU work:
        // off the runtime's workers.
        let data = snapshot.snapshot.clone();
        let loaded = fusebox_raft_store::blocking(move || {
            let bytes = data.load()?;
            let sha256 = Sha256::digest(bytes.as_slice()).to_vec();
            Ok::<_, std::io::Error>((bytes, sha256))
        })
        .await
        .map_err(network)?;
        let chunks =
            snapshot_chunks(&self.route, &vote, &snapshot.meta, loaded).map_err(network)?;
        let mut client = self.client()?;
        let ttl = option.hard_ttl();
        let send = client.install_snapshot(chunks);
        let reply = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            r = tokio::time::timeout(ttl, send) => r,
        };
        let reply = match reply {
            Err(_) => return Err(unreachable(format!("snapshot not taken in {ttl:?}")).into()),
            Ok(Err(status)) => return Err(network(status.message()).into()),
            Ok(Ok(reply)) => reply.into_inner(),
        };
        codec::decode(&reply.payload).map_err(|s| network(s.message()).into())
    }
}

/// A snapshot as begin, data and end chunks. The data chunks are cut from
/// the snapshot's bytes as the stream is polled, never all copied at once.
fn snapshot_chunks(
    route: &Route,
    vote: &VoteOf<TypeConfig>,
    meta: &SnapshotMeta,
    (bytes, sha256): (Arc<Vec<u8>>, Vec<u8>),
) -> Result<impl futures::Stream<Item = SnapshotChunk> + Send + 'static, serde_json::Error> {
    let begin = SnapshotBegin {
        header: Some(route.header()),
        vote: serde_json::to_vec(vote)?,
        meta: serde_json::to_vec(meta)?,
        total_bytes: bytes.len() as u64,
    };
    let end = SnapshotEnd { sha256 };
    let pieces = bytes.len().div_ceil(SNAPSHOT_CHUNK_BYTES);
    let data = (0..pieces).map(move |i| {
        let start = i * SNAPSHOT_CHUNK_BYTES;
        let stop = (start + SNAPSHOT_CHUNK_BYTES).min(bytes.len());
        snapshot_chunk::Chunk::Data(fusebox_proto::v1::SnapshotData {
            offset: start as u64,
            data: bytes[start..stop].to_vec(),
        })
    });
    let chunks = std::iter::once(snapshot_chunk::Chunk::Begin(begin))
        .chain(data)
        .chain(std::iter::once(snapshot_chunk::Chunk::End(end)))
        .map(|chunk| SnapshotChunk { chunk: Some(chunk) });
    Ok(futures::stream::iter(chunks))
}
