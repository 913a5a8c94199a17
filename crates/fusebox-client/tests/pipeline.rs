//! The SDK's ledger pipeline against nodes that do not behave like this
//! version's: one that does not serve `Ledger.Pipeline` (an older node) is
//! called unary, as is one behind a proxy that refuses the method only once
//! the stream is open, and a pipeline that breaks fails the calls it carried as
//! UNAVAILABLE (their outcome unknown) and is opened again for the next. A
//! reply that names the leader (a follower forwarded the call) comes back
//! as an answer naming it in its header.
//!
//! The nodes here are stand-ins: a `Ledger` service that answers `Begin`
//! with a fixed `started`, and whose `Pipeline` either refuses to open,
//! breaks on the first message, or answers as a follower that forwarded.
//! The real node's pipeline is tested in
//! `fusebox-server/tests/api_ledger.rs` and, through the SDK, by every
//! write test and the simulation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fusebox_client::pipeline::{LedgerPipeline, Sent};
use fusebox_proto::bearer::Bearer;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::ledger_server::{Ledger, LedgerServer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};

#[derive(Clone, Copy)]
enum Pipelines {
    /// As a node without the RPC answers.
    Unimplemented,
    /// Accepts the stream, then fails it once a message arrives.
    BreakOnFirstMessage,
    /// Accepts the stream, then refuses the method once a message arrives,
    /// as a proxy in front of a node may.
    UnimplementedOnFirstMessage,
    /// Answers every `Begin`, naming this address as the leader it was
    /// forwarded to.
    ForwardedTo(&'static str),
}

#[derive(Clone)]
struct StandIn {
    pipelines: Pipelines,
    opened: Arc<AtomicUsize>,
    unary_begins: Arc<AtomicUsize>,
}

fn started(request: &pb::BeginRequest) -> pb::BeginResponse {
    pb::BeginResponse {
        outcome: Some(pb::begin_response::Outcome::Started(pb::BeginStarted {
            attempt_id: request.attempt_id.clone(),
            ..Default::default()
        })),
    }
}

fn unused<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not used by these tests"))
}

#[tonic::async_trait]
impl Ledger for StandIn {
    type PipelineStream = ReceiverStream<Result<pb::PipelineResponse, Status>>;

    async fn pipeline(
        &self,
        request: Request<Streaming<pb::PipelineRequest>>,
    ) -> Result<Response<Self::PipelineStream>, Status> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        match self.pipelines {
            Pipelines::Unimplemented => Err(Status::unimplemented("no such method")),
            Pipelines::ForwardedTo(leader) => {
                let mut calls = request.into_inner();
                let (replies, rx) = tokio::sync::mpsc::channel(1);
                tokio::spawn(async move {
                    while let Ok(Some(message)) = calls.message().await {
                        let replied = message.calls.into_iter().map(|call| {
                            let Some(pb::pipelined_call::Call::Begin(begin)) = call.call else {
                                panic!("the tests send begins only");
                            };
                            pb::PipelinedReply {
                                id: call.id,
                                result: Some(pb::pipelined_reply::Result::Begin(started(&begin))),
                                leader_address: leader.to_owned(),
                            }
                        });
                        let message = pb::PipelineResponse {
                            replies: replied.collect(),
                        };
                        if replies.send(Ok(message)).await.is_err() {
                            break;
                        }
                    }
                });
                Ok(Response::new(ReceiverStream::new(rx)))
            }
            Pipelines::BreakOnFirstMessage | Pipelines::UnimplementedOnFirstMessage => {
                let failure = match self.pipelines {
                    Pipelines::BreakOnFirstMessage => Status::internal("node lost"),
                    _ => Status::unimplemented("no such method behind this proxy"),
                };
                let mut calls = request.into_inner();
                let (replies, rx) = tokio::sync::mpsc::channel(1);
                tokio::spawn(async move {
                    if let Ok(Some(_)) = calls.message().await {
                        let _ = replies.send(Err(failure)).await;
                    }
                });
                Ok(Response::new(ReceiverStream::new(rx)))
            }
        }
    }

    async fn begin(
        &self,
        request: Request<pb::BeginRequest>,
    ) -> Result<Response<pb::BeginResponse>, Status> {
        self.unary_begins.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(started(request.get_ref())))
    }

    async fn complete(
        &self,
        _: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        unused()
    }

    async fn lookup(
        &self,
        _: Request<pb::LookupRequest>,
    ) -> Result<Response<pb::LookupResponse>, Status> {
        unused()
    }

    async fn list(
        &self,
        _: Request<pb::ListRecordsRequest>,
    ) -> Result<Response<pb::ListRecordsResponse>, Status> {
        unused()
    }

    async fn resolve(
        &self,
        _: Request<pb::ResolveRequest>,
    ) -> Result<Response<pb::ResolveResponse>, Status> {
        unused()
    }

    async fn renew(
        &self,
        _: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        unused()
    }
}

/// Serves `stand_in` on a free loopback port; a pipeline to it.
async fn serve(stand_in: StandIn) -> LedgerPipeline {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(LedgerServer::new(stand_in))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    LedgerPipeline::over(channel, Bearer::none())
}

fn stand_in(pipelines: Pipelines) -> StandIn {
    StandIn {
        pipelines,
        opened: Arc::default(),
        unary_begins: Arc::default(),
    }
}

fn begin(key: &str) -> pb::BeginRequest {
    pb::BeginRequest {
        namespace: "ns".into(),
        key: key.into(),
        attempt_id: format!("{key}-a"),
        ..Default::default()
    }
}

const TIMEOUT: Duration = Duration::from_secs(5);

/// Three calls to a node whose pipelines behave as `pipelines`: each must
/// come back to be sent unary, and the node be asked for a pipeline once
/// (then left alone for a while, not asked before every call).
async fn each_call_comes_back_to_send_unary(pipelines: Pipelines) {
    let node = stand_in(pipelines);
    let pipeline = serve(node.clone()).await;
    for key in ["k1", "k2", "k3"] {
        match pipeline.begin(begin(key), TIMEOUT).await {
            Sent::Unsent(request) => assert_eq!(request, begin(key)),
            Sent::Answered(answer) => {
                panic!("{key}: answered through a refused pipeline: {answer:?}")
            }
        }
    }
    assert_eq!(node.opened.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_node_without_pipelines_gets_each_call_back_to_send_unary() {
    each_call_comes_back_to_send_unary(Pipelines::Unimplemented).await;
}

#[tokio::test]
async fn a_pipeline_refused_after_it_opened_gives_its_calls_back_to_send_unary() {
    each_call_comes_back_to_send_unary(Pipelines::UnimplementedOnFirstMessage).await;
}

#[tokio::test]
async fn a_broken_pipeline_fails_its_calls_as_unavailable_and_opens_again() {
    let node = stand_in(Pipelines::BreakOnFirstMessage);
    let pipeline = serve(node.clone()).await;
    for (n, key) in ["k1", "k2"].into_iter().enumerate() {
        match pipeline.begin(begin(key), TIMEOUT).await {
            Sent::Answered(Err(status)) => {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                assert!(
                    status.message().contains("outcome is unknown"),
                    "{status:?}"
                );
            }
            other => panic!("{key}: a call on a broken pipeline: {other:?}"),
        }
        assert_eq!(
            node.opened.load(Ordering::SeqCst),
            n + 1,
            "a new pipeline per call"
        );
    }
    assert_eq!(node.unary_begins.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_reply_naming_the_leader_is_an_answer_naming_it() {
    let node = stand_in(Pipelines::ForwardedTo("10.0.0.3:7100"));
    let pipeline = serve(node.clone()).await;
    match pipeline.begin(begin("k1"), TIMEOUT).await {
        Sent::Answered(Ok(answer)) => {
            let named = fusebox_proto::leader_named(answer.metadata());
            assert_eq!(named, Some("10.0.0.3:7100"));
            assert_eq!(answer.into_inner(), started(&begin("k1")));
        }
        other => panic!("not answered through the pipeline: {other:?}"),
    }
    assert_eq!(node.unary_begins.load(Ordering::SeqCst), 0);
}
