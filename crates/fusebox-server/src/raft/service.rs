//! The receiving side of Raft: `fusebox.v1.Raft` handed to openraft.

use super::codec;
use crate::limits::{
    RAFT_APPEND_STREAMS_MAX, RAFT_STREAM_FIRST_MESSAGE_MS, SNAPSHOT_RECEIVES_MAX, SNAPSHOT_STALL_MS,
};
use crate::node::contact::LeaderContact;
use crate::node::incoming::ConnInfo;
use crate::node::Clock;
use fusebox_proto::tls::PeerIdentity;
use fusebox_proto::v1::raft_server::Raft as RaftRpc;
use fusebox_proto::v1::{snapshot_chunk, RaftMessage, SnapshotChunk};
use fusebox_raft_store::{blocking, RaftRuntime, SnapshotData, StateStore, TypeConfig};
use openraft::error::Fatal;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, StreamAppendError, StreamAppendResult,
    TransferLeaderRequest, VoteRequest,
};
use openraft::type_config::alias::{SnapshotMetaOf, VoteOf};
use openraft::{Raft, Snapshot};
use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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
    /// The state machine store, whose data directory takes incoming
    /// snapshots.
    pub store: StateStore,
    /// Snapshots being received now, at most [`SNAPSHOT_RECEIVES_MAX`].
    pub receiving: Arc<Semaphore>,
    /// `StreamAppend` streams open now, at most [`RAFT_APPEND_STREAMS_MAX`].
    pub appending: Arc<Semaphore>,
}

impl RaftService {
    /// The permits for snapshots received at once.
    pub fn receiving_permits() -> Arc<Semaphore> {
        Arc::new(Semaphore::new(SNAPSHOT_RECEIVES_MAX))
    }

    /// The permits for replication streams open at once.
    pub fn appending_permits() -> Arc<Semaphore> {
        Arc::new(Semaphore::new(RAFT_APPEND_STREAMS_MAX))
    }
}

fn fatal(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("raft stopped: {e}"))
}

/// A reply as the message that carries it.
fn encode<T: serde::Serialize>(value: &T) -> Result<RaftMessage, Status> {
    let payload = codec::to_bytes(value)
        .map_err(|e| Status::internal(format!("encoding raft reply: {e}")))?;
    Ok(RaftMessage {
        header: None,
        payload,
    })
}

impl RaftService {
    fn reply<T: serde::Serialize>(&self, value: &T) -> Result<Response<RaftMessage>, Status> {
        encode(value).map(Response::new)
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

/// The answers on one `StreamAppend` stream.
type Answers = Pin<Box<dyn futures::Stream<Item = Result<RaftMessage, Status>> + Send>>;

#[tonic::async_trait]
impl RaftRpc for RaftService {
    type StreamAppendStream = Answers;

    /// Each request is checked as [`Self::append_entries`] checks it and
    /// handed to openraft's own pipeline, which answers each in order once
    /// it is stored. A refused message ends the stream with its refusal,
    /// after the answers to the requests before it.
    async fn stream_append(
        &self,
        request: Request<Streaming<RaftMessage>>,
    ) -> Result<Response<Answers>, Status> {
        let refusal = Arc::new(Mutex::new(None));
        let incoming = Incoming {
            service: self.clone(),
            sender: certified(&request),
            messages: request.into_inner(),
            refusal: refusal.clone(),
            permit: None,
        };
        let requests = futures::stream::unfold(incoming, Incoming::next);
        // openraft spawns a task per stream to feed its core, and its
        // runtime spawns only with a seed in scope (`RaftRuntime`). That
        // task draws no random numbers, so any seed plays out the same.
        let answers = RaftRuntime::scope(0, async { self.raft.stream_append(requests) }).await;
        let service = self.clone();
        let answers = answers.map(move |answer| service.stream_answer(answer));
        let refused = futures::stream::once(async move {
            refusal
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        })
        .filter_map(|refusal| refusal.map(Err));
        Ok(Response::new(Box::pin(answers.chain(refused))))
    }

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
        let (vote, meta, data) = self.receive_snapshot(request.into_inner(), &sender).await?;
        let snapshot = Snapshot {
            meta,
            snapshot: data,
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
    /// openraft's answer to one streamed request as the message to send.
    fn stream_answer(
        &self,
        answer: Result<StreamAppendResult<TypeConfig>, Fatal<TypeConfig>>,
    ) -> Result<RaftMessage, Status> {
        let result = answer.map_err(fatal)?;
        // As for unary appends: anything but a higher vote means the sender
        // is the leader this node follows.
        if !matches!(result, Err(StreamAppendError::HigherVote(_))) {
            self.contact.heard((self.clock)());
        }
        encode(&result)
    }
}

/// The requests arriving on one `StreamAppend` stream, as openraft takes
/// them.
struct Incoming {
    service: RaftService,
    sender: Sender,
    messages: Streaming<RaftMessage>,
    /// Why the requests stopped, when a message was refused.
    refusal: Arc<Mutex<Option<Status>>>,
    /// The stream's place among [`RAFT_APPEND_STREAMS_MAX`], taken when its
    /// first message proves the sender a member.
    permit: Option<OwnedSemaphorePermit>,
}

impl Incoming {
    async fn next(mut self) -> Option<(AppendEntriesRequest<TypeConfig>, Incoming)> {
        match self.read().await {
            Ok(Some(rpc)) => Some((rpc, self)),
            Ok(None) => None,
            Err(status) => {
                *self.refusal.lock().unwrap_or_else(PoisonError::into_inner) = Some(status);
                None
            }
        }
    }

    async fn read(&mut self) -> Result<Option<AppendEntriesRequest<TypeConfig>>, Status> {
        let message = if self.permit.is_some() {
            self.messages.message().await?
        } else {
            let first = Duration::from_millis(RAFT_STREAM_FIRST_MESSAGE_MS);
            tokio::time::timeout(first, self.messages.message())
                .await
                .map_err(|_| {
                    Status::deadline_exceeded(format!(
                        "no message on a replication stream in {RAFT_STREAM_FIRST_MESSAGE_MS} ms"
                    ))
                })??
        };
        let Some(message) = message else {
            return Ok(None);
        };
        self.service.open(&message, &self.sender)?;
        if self.permit.is_none() {
            let places = self.service.appending.clone();
            let permit = places.try_acquire_owned().map_err(|_| {
                Status::resource_exhausted(format!(
                    "already {RAFT_APPEND_STREAMS_MAX} replication streams open"
                ))
            })?;
            self.permit = Some(permit);
        }
        codec::decode(&message.payload).map(Some)
    }
}

impl RaftService {
    /// Writes begin, contiguous data and end chunks into a file in the data
    /// directory as they arrive (memory for one chunk), checking the order,
    /// the announced size and the checksum, before anything reaches
    /// openraft. Each chunk must arrive within [`SNAPSHOT_STALL_MS`]; on any
    /// refusal the file is removed.
    async fn receive_snapshot(
        &self,
        mut stream: Streaming<SnapshotChunk>,
        sender: &Sender,
    ) -> Result<(VoteOf<TypeConfig>, SnapshotMetaOf<TypeConfig>, SnapshotData), Status> {
        let first = next_chunk(&mut stream)
            .await?
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
        let Some(snapshot_chunk::Chunk::Begin(begin)) = first.chunk else {
            return Err(Status::invalid_argument(
                "snapshot stream must start with begin",
            ));
        };
        codec::check_header(begin.header.as_ref(), &self.cluster_id, self.me)?;
        self.check_sender(begin.header.as_ref().map_or(0, |h| h.from_node_id), sender)?;
        let vote = codec::decode(&begin.vote)?;
        let meta = codec::decode(&begin.meta)?;
        let total = begin.total_bytes;
        // Taken only once the sender proved it is a member, so no one else
        // can hold the places.
        let Ok(_receiving) = self.receiving.clone().try_acquire_owned() else {
            return Err(Status::resource_exhausted(format!(
                "already receiving {SNAPSHOT_RECEIVES_MAX} snapshots"
            )));
        };
        let store = self.store.clone();
        let mut sink = blocking(move || store.snapshot_sink())
            .await
            .map_err(|e| Status::unavailable(format!("cannot take a snapshot in: {e}")))?;
        while let Some(chunk) = next_chunk(&mut stream).await? {
            match chunk.chunk {
                Some(snapshot_chunk::Chunk::Data(d)) => {
                    let written = sink.written();
                    if d.offset != written || written.saturating_add(d.data.len() as u64) > total {
                        return Err(Status::invalid_argument(
                            "snapshot chunk out of order or beyond its size",
                        ));
                    }
                    sink = blocking(move || {
                        sink.write_all(&d.data)?;
                        Ok(sink)
                    })
                    .await
                    .map_err(|e| Status::unavailable(format!("cannot store the snapshot: {e}")))?;
                }
                Some(snapshot_chunk::Chunk::End(end)) => {
                    if sink.written() != total {
                        return Err(Status::data_loss("snapshot incomplete"));
                    }
                    let data = blocking(move || sink.finish(Some(&end.sha256)))
                        .await
                        .map_err(|e| match e.kind() {
                            std::io::ErrorKind::InvalidData => {
                                Status::data_loss(format!("snapshot refused: {e}"))
                            }
                            _ => Status::unavailable(format!("cannot store the snapshot: {e}")),
                        })?;
                    return Ok((vote, meta, data));
                }
                _ => return Err(Status::invalid_argument("unexpected snapshot chunk")),
            }
        }
        Err(Status::invalid_argument(
            "snapshot stream ended before its end chunk",
        ))
    }
}

/// The next chunk, waiting at most [`SNAPSHOT_STALL_MS`].
async fn next_chunk(
    stream: &mut Streaming<SnapshotChunk>,
) -> Result<Option<SnapshotChunk>, Status> {
    match tokio::time::timeout(Duration::from_millis(SNAPSHOT_STALL_MS), stream.next()).await {
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no snapshot chunk for {SNAPSHOT_STALL_MS} ms"
        ))),
        Ok(chunk) => chunk.transpose(),
    }
}
