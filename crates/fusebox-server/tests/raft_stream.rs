//! The leader's side of replication as a pipeline (`Raft.StreamAppend`),
//! against stand-in followers: batches go out without waiting for the
//! answers to the ones before, no stream is opened before there is a batch
//! to send (openraft's backoff is a pause before its next batch), a
//! follower that stops answering ends the stream as unreachable while a
//! stream with nothing in flight may idle, a stream that opens with a big
//! batch has time for its size, and a follower without the RPC (an older
//! node) is sent unary AppendEntries instead.
//!
//! The real follower's side runs in every cluster test and in the
//! simulation, where all replication goes over these streams.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fusebox_core::disclosure::McpHints;
use fusebox_core::machine::Command;
use fusebox_core::tools::ToolImport;
use fusebox_core::{Namespace, ServerName, ToolName};
use fusebox_proto::net::Net;
use fusebox_proto::v1::raft_server::{Raft, RaftServer};
use fusebox_proto::v1::{RaftMessage, SnapshotChunk};
use fusebox_raft_store::{Entry, LogId, Member, Request as LogRequest, TypeConfig};
use fusebox_server::limits::RAFT_PAYLOAD_BYTES_MAX;
use fusebox_server::node::contact::LeaderContact;
use fusebox_server::raft::codec;
use fusebox_server::raft::network::{Connection, Network};
use futures::StreamExt;
use openraft::entry::RaftEntry;
use openraft::error::RPCError;
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, StreamAppendResult};
use openraft::RaftNetworkV2;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

#[derive(Clone, Copy)]
enum Follower {
    /// Reads this many messages before it answers any, then answers each
    /// (as stored up to its last entry) as it arrives.
    AnswersAfter(usize),
    /// Answers each of the first this many messages as it arrives, then
    /// no more.
    AnswersFirst(usize),
    /// Has no `StreamAppend` (an older node); answers unary appends.
    UnaryOnly,
    /// Opens the stream only this long after the first message has
    /// arrived whole, then answers each message as it arrives: the time a
    /// slow link takes to carry a big first batch.
    OpensAfterFirst(Duration),
}

#[derive(Clone)]
struct StandIn {
    follower: Follower,
    streams: Arc<AtomicUsize>,
    unary: Arc<AtomicUsize>,
}

/// What a follower that stored `rpc` answers: stored up to its last
/// entry (the batches here carry none, so up to where they follow on).
fn answer(rpc: &AppendEntriesRequest<TypeConfig>) -> Result<RaftMessage, Status> {
    let stored: StreamAppendResult<TypeConfig> = Ok(rpc.prev_log_id);
    Ok(RaftMessage {
        header: None,
        payload: codec::to_bytes(&stored).unwrap(),
    })
}

fn unused<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not used by these tests"))
}

#[tonic::async_trait]
impl Raft for StandIn {
    type StreamAppendStream = ReceiverStream<Result<RaftMessage, Status>>;

    async fn stream_append(
        &self,
        request: Request<Streaming<RaftMessage>>,
    ) -> Result<Response<Self::StreamAppendStream>, Status> {
        let (wait_for, answered) = match self.follower {
            Follower::UnaryOnly => return Err(Status::unimplemented("no StreamAppend here")),
            Follower::AnswersAfter(n) => (n, usize::MAX),
            Follower::AnswersFirst(n) => (1, n),
            Follower::OpensAfterFirst(_) => (1, usize::MAX),
        };
        self.streams.fetch_add(1, Ordering::SeqCst);
        let mut messages = request.into_inner();
        let mut held = Vec::new();
        if let Follower::OpensAfterFirst(pause) = self.follower {
            let first = messages
                .message()
                .await?
                .ok_or_else(|| Status::invalid_argument("no first message"))?;
            held.push(codec::decode(&first.payload)?);
            tokio::time::sleep(pause).await;
        }
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let mut answers = 0;
            if held.len() >= wait_for {
                for rpc in held.drain(..) {
                    if tx.send(answer(&rpc)).await.is_err() {
                        return;
                    }
                    answers += 1;
                }
            }
            while let Ok(Some(message)) = messages.message().await {
                let rpc: AppendEntriesRequest<TypeConfig> =
                    codec::decode(&message.payload).unwrap();
                held.push(rpc);
                if held.len() < wait_for {
                    continue;
                }
                for rpc in held.drain(..) {
                    if answers == answered {
                        continue;
                    }
                    if tx.send(answer(&rpc)).await.is_err() {
                        return;
                    }
                    answers += 1;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        self.unary.fetch_add(1, Ordering::SeqCst);
        let _: AppendEntriesRequest<TypeConfig> = codec::decode(&request.into_inner().payload)?;
        let payload = codec::to_bytes(&AppendEntriesResponse::<TypeConfig>::Success).unwrap();
        Ok(Response::new(RaftMessage {
            header: None,
            payload,
        }))
    }

    async fn vote(&self, _: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        unused()
    }

    async fn install_snapshot(
        &self,
        _: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftMessage>, Status> {
        unused()
    }

    async fn transfer_leader(
        &self,
        _: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        unused()
    }
}

/// Serves `follower` on a loopback port; the leader's connection to it, and
/// the stand-in to count what it was sent.
async fn connect(follower: Follower) -> (Connection, StandIn) {
    let stand_in = StandIn {
        follower,
        streams: Arc::default(),
        unary: Arc::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                RaftServer::new(stand_in.clone()).max_decoding_message_size(RAFT_PAYLOAD_BYTES_MAX),
            )
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut network = Network {
        cluster_id: "fusebox".into(),
        me: 1,
        net: Net::Tcp,
        tls: None,
        contact: Arc::new(LeaderContact::default()),
        clock: Arc::new(|| 0),
    };
    let member = Member::new(addr.to_string(), addr.to_string());
    (network.new_client(2, &member).await, stand_in)
}

/// Batch `i`: no entries, following log index `i`.
fn batch(i: u64) -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: openraft::Vote::new_committed(1, 1),
        prev_log_id: Some(log_id(i)),
        leader_commit: None,
        entries: Vec::new(),
    }
}

/// Batch `i` carrying one entry of `mib` MiB (an import of a tool with a
/// disclosure that big), following log index `i`.
fn big_batch(i: u64, mib: usize) -> AppendEntriesRequest<TypeConfig> {
    let tool = ToolImport {
        tool: ToolName::new("t").unwrap(),
        hints: McpHints::default(),
        disclosure_json: Some("x".repeat(mib * 1024 * 1024)),
    };
    let command = Command::ImportTools {
        namespace: Namespace::new("ns").unwrap(),
        server: ServerName::new("s").unwrap(),
        tools: vec![tool],
        actor: "ops".into(),
    };
    AppendEntriesRequest {
        entries: vec![Entry::new_normal(
            log_id(i + 1),
            LogRequest::new(1, command),
        )],
        ..batch(i)
    }
}

fn log_id(index: u64) -> LogId {
    openraft::testing::log_id::<TypeConfig>(1, 1, index)
}

/// openraft's deadline for one request: what it gives with a 400 ms
/// heartbeat.
fn option() -> RPCOption {
    RPCOption::new(Duration::from_millis(400))
}

const PATIENCE: Duration = Duration::from_secs(5);

type Answer = Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>;

/// Batches 1 to 3 sent as one session; every answer, once the answers end.
async fn three_batches(leader: &mut Connection) -> Vec<Answer> {
    let batches = futures::stream::iter((1..=3).map(batch));
    tokio::time::timeout(PATIENCE, async {
        let answers = leader.stream_append(batches, option()).await.unwrap();
        answers.collect::<Vec<_>>().await
    })
    .await
    .expect("the answers ended")
}

#[tokio::test]
async fn batches_go_out_without_waiting_for_the_answers_before_them() {
    // The follower answers nothing until it holds three batches: a leader
    // that waited for each answer before sending the next would never get
    // there, and its first request would time out.
    let (mut leader, follower) = connect(Follower::AnswersAfter(3)).await;
    let answers = three_batches(&mut leader).await;
    let got: Vec<_> = answers.into_iter().map(Result::unwrap).collect();
    let expected: Vec<StreamAppendResult<TypeConfig>> =
        (1..=3).map(|i| Ok(Some(log_id(i)))).collect();
    assert_eq!(got, expected, "one answer per batch, in order");
    assert_eq!(follower.streams.load(Ordering::SeqCst), 1);
    assert_eq!(follower.unary.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn no_stream_opens_before_there_is_a_batch_to_send() {
    let (mut leader, follower) = connect(Follower::AnswersAfter(1)).await;
    let (_tx, rx) = mpsc::channel(1);
    let opening = tokio::time::timeout(
        Duration::from_millis(500),
        leader.stream_append(ReceiverStream::new(rx), option()),
    )
    .await;
    assert!(opening.is_err(), "the stream opened with nothing to send");
    assert_eq!(follower.streams.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_unanswered_batch_ends_the_stream_but_an_idle_stream_stays() {
    let (mut leader, _follower) = connect(Follower::AnswersFirst(1)).await;
    let (tx, rx) = mpsc::channel(1);
    tx.send(batch(1)).await.unwrap();
    let mut answers = leader
        .stream_append(ReceiverStream::new(rx), option())
        .await
        .unwrap();
    let first = tokio::time::timeout(PATIENCE, answers.next()).await;
    assert!(matches!(first, Ok(Some(Ok(Ok(_))))), "{first:?}");
    // Nothing more to send: the stream stays open past the deadline for
    // one request, with nothing to report.
    let idle = tokio::time::timeout(Duration::from_millis(1_500), answers.next()).await;
    assert!(idle.is_err(), "an idle stream ended: {idle:?}");
    // A batch goes out and is never answered: unreachable, within about
    // the deadline.
    tx.send(batch(2)).await.unwrap();
    let second = tokio::time::timeout(PATIENCE, answers.next())
        .await
        .expect("no error in time");
    assert!(
        matches!(second, Some(Err(RPCError::Unreachable(_)))),
        "{second:?}"
    );
    assert!(
        answers.next().await.is_none(),
        "the stream goes on after its error"
    );
}

#[tokio::test]
async fn a_stream_opening_with_a_big_batch_has_time_for_its_size() {
    // The follower opens each stream 800 ms after its first batch has
    // arrived: past openraft's 400 ms for one request, but within what a
    // 4 MiB batch adds at the slowest rate the leader allows (1 s). With
    // 400 ms alone, every new stream would time out with the same batch.
    let slow = Follower::OpensAfterFirst(Duration::from_millis(800));
    let (mut leader, follower) = connect(slow).await;
    let opened = leader
        .stream_append(futures::stream::iter([big_batch(1, 4)]), option())
        .await;
    let Ok(mut answers) = opened else {
        panic!("a stream opening with a big batch timed out");
    };
    let stored = tokio::time::timeout(PATIENCE, answers.next()).await;
    assert!(
        matches!(stored, Ok(Some(Ok(Ok(Some(id))))) if id == log_id(1)),
        "{stored:?}"
    );
    assert_eq!(follower.streams.load(Ordering::SeqCst), 1);

    // A batch with no entries has no such allowance: the same wait is too
    // long for it.
    let (mut leader, _) = connect(slow).await;
    let opened = leader
        .stream_append(futures::stream::iter([batch(1)]), option())
        .await;
    assert!(
        matches!(opened, Err(RPCError::Unreachable(_))),
        "a stream opened 800 ms late with an empty batch"
    );
}

#[tokio::test]
async fn a_follower_without_streams_is_sent_unary_appends() {
    let (mut leader, follower) = connect(Follower::UnaryOnly).await;
    // The first session learns the follower has no StreamAppend...
    let refused = leader
        .stream_append(futures::stream::iter([batch(1)]), option())
        .await
        .is_err();
    assert!(refused, "a refused stream was reported open");
    // ...and later ones send it one AppendEntries at a time, without asking
    // again.
    for _ in 0..2 {
        let answers = three_batches(&mut leader).await;
        assert_eq!(answers.len(), 3, "{answers:?}");
        assert!(
            answers.iter().all(|a| matches!(a, Ok(Ok(_)))),
            "{answers:?}"
        );
    }
    assert_eq!(follower.unary.load(Ordering::SeqCst), 6);
}
