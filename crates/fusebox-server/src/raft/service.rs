//! The receiving side of Raft: `fusebox.v1.Raft` handed to openraft.

use super::codec;
use crate::limits::{SNAPSHOT_BYTES_MAX, SNAPSHOT_PREALLOCATE_BYTES_MAX};
use crate::node::contact::LeaderContact;
use crate::node::incoming::ConnInfo;
use crate::node::Clock;
use fusebox_proto::tls::PeerIdentity;
use fusebox_proto::v1::raft_server::Raft as RaftRpc;
use fusebox_proto::v1::{snapshot_chunk, RaftMessage, SnapshotChunk};
use fusebox_raft_store::{snapshot_data, StateStore, TypeConfig};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, TransferLeaderRequest, VoteRequest,
};
use openraft::type_config::alias::{SnapshotMetaOf, VoteOf};
use openraft::{Raft, Snapshot};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

/// Serves peers' Raft messages to the local openraft instance.
#[derive(Clone)]
pub struct RaftService {
    /// The local Raft instance.
    pub raft: Raft<TypeConfig, StateStore>,
    /// This cluster's name; other clusters' messages are refused.
    pub cluster_id: String,
    /// This node's id; messages for another node are refused.
    pub me: u64,
    /// When this node last accepted a leader's message (for watch
    /// heartbeats: `node::contact`).
    pub contact: Arc<LeaderContact>,
    /// The node's wall clock, to stamp that contact.
    pub clock: Clock,
    /// Whether senders must prove they are the member they claim to be
    /// with a peer certificate naming them (peer TLS). Without peer TLS the
    /// transport is only as private as the network it listens on.
    pub member_certs: bool,
}

fn fatal(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("raft stopped: {e}"))
}

impl RaftService {
    fn reply<T: serde::Serialize>(&self, value: &T) -> Result<Response<RaftMessage>, Status> {
        let payload = codec::to_bytes(value)
            .map_err(|e| Status::internal(format!("encoding raft reply: {e}")))?;
        Ok(Response::new(RaftMessage {
            header: None,
            payload,
        }))
    }

    /// Checks the header, and that the sender is the member it says.
    fn open(&self, message: &RaftMessage, sender: &Sender) -> Result<(), Status> {
        codec::check_header(message.header.as_ref(), &self.cluster_id, self.me)?;
        self.check_sender(
            message.header.as_ref().map_or(0, |h| h.from_node_id),
            sender,
        )
    }

    /// With peer TLS, the certificate must name a node, and the node the
    /// header says sent the message.
    fn check_sender(&self, claimed: u64, sender: &Sender) -> Result<(), Status> {
        if !self.member_certs {
            return Ok(());
        }
        let (from, name) = (sender.remote, sender.name.as_deref().unwrap_or("-"));
        match sender.node {
            Some(id) if id == claimed => Ok(()),
            Some(id) => {
                tracing::warn!(
                    certified = id,
                    claimed,
                    ?from,
                    "raft message from a member posing as another refused"
                );
                Err(Status::permission_denied(
                    "raft message refused: sender is not the certified member",
                ))
            }
            None => {
                tracing::warn!(
                    claimed,
                    ?from,
                    certificate = name,
                    "raft message without a member certificate refused"
                );
                Err(Status::permission_denied(
                    "raft traffic needs a member's peer certificate",
                ))
            }
        }
    }
}

/// Who sent a message: the node its verified peer certificate names, the
/// certificate's name and the connection's address (for the refusal log).
struct Sender {
    node: Option<u64>,
    name: Option<String>,
    remote: Option<SocketAddr>,
}

fn certified<T>(request: &Request<T>) -> Sender {
    let identity = ConnInfo::identity_of(request);
    Sender {
        node: identity.and_then(PeerIdentity::node_id),
        name: identity.and_then(PeerIdentity::name).map(str::to_owned),
        remote: request.extensions().get::<ConnInfo>().map(|c| c.remote),
    }
}

#[tonic::async_trait]
impl RaftRpc for RaftService {
    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let sender = certified(&request);
        let message = request.into_inner();
        self.open(&message, &sender)?;
        let rpc: AppendEntriesRequest<TypeConfig> = codec::decode(&message.payload)?;
        let resp = self.raft.append_entries(rpc).await.map_err(fatal)?;
        // Anything but a higher vote means the sender is the leader this
        // node follows (a conflict only says the logs differ).
        if !matches!(resp, AppendEntriesResponse::HigherVote(_)) {
            self.contact.heard((self.clock)());
        }
        self.reply(&resp)
    }

    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let sender = certified(&request);
        let message = request.into_inner();
        self.open(&message, &sender)?;
        let rpc: VoteRequest<TypeConfig> = codec::decode(&message.payload)?;
        let resp = self.raft.vote(rpc).await.map_err(fatal)?;
        self.reply(&resp)
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftMessage>, Status> {
        let sender = certified(&request);
        let (vote, meta, bytes) = self.receive_snapshot(request.into_inner(), &sender).await?;
        let snapshot = Snapshot {
            meta,
            snapshot: snapshot_data(bytes),
        };
        let resp = self
            .raft
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(fatal)?;
        if resp.vote == vote {
            self.contact.heard((self.clock)());
        }
        self.reply(&resp)
    }

    async fn transfer_leader(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let sender = certified(&request);
        let message = request.into_inner();
        self.open(&message, &sender)?;
        let rpc: TransferLeaderRequest<TypeConfig> = codec::decode(&message.payload)?;
        let resp = self.raft.handle_transfer_leader(rpc).await.map_err(fatal)?;
        self.reply(&resp)
    }
}

impl RaftService {
    /// Collects begin, contiguous data and end chunks, checking bounds and
    /// the checksum, before anything reaches openraft.
    async fn receive_snapshot(
        &self,
        mut stream: Streaming<SnapshotChunk>,
        sender: &Sender,
    ) -> Result<(VoteOf<TypeConfig>, SnapshotMetaOf<TypeConfig>, Vec<u8>), Status> {
        let first = stream
            .next()
            .await
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
        let Some(snapshot_chunk::Chunk::Begin(begin)) = first.chunk else {
            return Err(Status::invalid_argument(
                "snapshot stream must start with begin",
            ));
        };
        codec::check_header(begin.header.as_ref(), &self.cluster_id, self.me)?;
        self.check_sender(begin.header.as_ref().map_or(0, |h| h.from_node_id), sender)?;
        if begin.total_bytes > SNAPSHOT_BYTES_MAX {
            return Err(Status::resource_exhausted(format!(
                "snapshot of {} bytes, at most {SNAPSHOT_BYTES_MAX}",
                begin.total_bytes
            )));
        }
        let vote = codec::decode(&begin.vote)?;
        let meta = codec::decode(&begin.meta)?;
        let total = usize::try_from(begin.total_bytes)
            .map_err(|_| Status::resource_exhausted("snapshot too large for this node"))?;
        let mut bytes = Vec::with_capacity(total.min(SNAPSHOT_PREALLOCATE_BYTES_MAX));
        while let Some(chunk) = stream.next().await {
            match chunk?.chunk {
                Some(snapshot_chunk::Chunk::Data(d)) => {
                    if d.offset != bytes.len() as u64 || bytes.len() + d.data.len() > total {
                        return Err(Status::invalid_argument(
                            "snapshot chunk out of order or beyond its size",
                        ));
                    }
                    bytes.extend_from_slice(&d.data);
                }
                Some(snapshot_chunk::Chunk::End(end)) => {
                    if bytes.len() != total
                        || Sha256::digest(&bytes).as_slice() != end.sha256.as_slice()
                    {
                        return Err(Status::data_loss(
                            "snapshot incomplete or checksum mismatch",
                        ));
                    }
                    return Ok((vote, meta, bytes));
                }
                _ => return Err(Status::invalid_argument("unexpected snapshot chunk")),
            }
        }
        Err(Status::invalid_argument(
            "snapshot stream ended before its end chunk",
        ))
    }
}
