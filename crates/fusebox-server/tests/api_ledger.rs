//! The Ledger service over gRPC: the five begin answers as OK bodies,
//! completion, linearizable lookup, listing, resolution, and the statuses
//! chosen for what the ledger refuses.

#![allow(clippy::unwrap_used)]

mod api_support;

use api_support::{assert_status, invalid_field, local, meta, within};
use fusebox_proto::v1::begin_response::Outcome as Begun;
use fusebox_proto::v1::complete_request::Outcome as Done;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::*;
use tonic::transport::Channel;
use tonic::Code;

const NS: &str = "fleet-a";

fn begin(key: &str, attempt: &str, fingerprint: &[u8]) -> BeginRequest {
    BeginRequest {
        namespace: NS.into(),
        meta: meta(),
        key: key.into(),
        fingerprint: fingerprint.to_vec(),
        intent_id: "intent-1".into(),
        server: "payments".into(),
        tool: "refund".into(),
        target: "order-42".into(),
        effect: Effect::NonIdempotentWrite as i32,
        attempt_id: attempt.into(),
        lease_ms: 30_000,
    }
}

fn complete(key: &str, attempt: &str, outcome: Done) -> CompleteRequest {
    CompleteRequest {
        namespace: NS.into(),
        meta: meta(),
        key: key.into(),
        attempt_id: attempt.into(),
        outcome: Some(outcome),
    }
}

async fn begun(client: &mut LedgerClient<Channel>, request: BeginRequest) -> Begun {
    within(client.begin(request))
        .await
        .unwrap()
        .into_inner()
        .outcome
        .unwrap()
}

#[tokio::test]
async fn begin_answers_started_in_progress_replay_and_mismatch_in_the_body() {
    let (_, node) = local().await;
    let mut ledger = node.ledger;

    let Begun::Started(started) = begun(&mut ledger, begin("k1", "a1", b"fp")).await else {
        panic!("first begin must start");
    };
    assert_eq!(started.attempt_id, "a1");
    assert!(started.lease_until_ms > 0, "started carries the lease");

    let Begun::InProgress(busy) = begun(&mut ledger, begin("k1", "a2", b"fp")).await else {
        panic!("second attempt must see the live lease");
    };
    assert_eq!(busy.holder_attempt_id, "a1");

    let done = Done::Succeeded(CompleteSucceeded {
        operation_id: "op-9".into(),
        result: b"refunded".to_vec(),
    });
    let record = within(ledger.complete(complete("k1", "a1", done)))
        .await
        .unwrap()
        .into_inner()
        .record
        .unwrap();
    assert_eq!(record.status, LedgerStatus::Succeeded as i32);

    let Begun::Completed(replay) = begun(&mut ledger, begin("k1", "a3", b"fp")).await else {
        panic!("a completed key replays");
    };
    assert!(replay.replayed);
    let stored = replay.record.unwrap();
    assert_eq!(stored.result.as_deref(), Some(&b"refunded"[..]));
    assert_eq!(stored.operation_id.as_deref(), Some("op-9"));
    assert_eq!(stored.fingerprint, b"fp".to_vec());

    let Begun::Mismatch(mismatch) = begun(&mut ledger, begin("k1", "a4", b"other")).await else {
        panic!("another fingerprint under the same key is a mismatch");
    };
    assert_eq!(mismatch.stored_fingerprint, b"fp".to_vec());
}

#[tokio::test]
async fn an_ambiguous_write_is_found_by_lookup_and_list_and_resolved_once() {
    let (_, node) = local().await;
    let mut ledger = node.ledger;
    begun(&mut ledger, begin("k2", "a1", b"fp")).await;
    let lost = Done::Ambiguous(CompleteAmbiguous {
        reason: "timed out after sending".into(),
    });
    within(ledger.complete(complete("k2", "a1", lost)))
        .await
        .unwrap();

    let Begun::Ambiguous(ambiguous) = begun(&mut ledger, begin("k2", "a2", b"fp")).await else {
        panic!("an ambiguous key must not start again");
    };
    assert_eq!(
        ambiguous.record.unwrap().status,
        LedgerStatus::Ambiguous as i32
    );

    let lookup = LookupRequest {
        namespace: NS.into(),
        meta: meta(),
        key: "k2".into(),
    };
    let found = within(ledger.lookup(lookup)).await.unwrap().into_inner();
    let found = found.record.unwrap();
    assert_eq!(found.status, LedgerStatus::Ambiguous as i32);
    assert!(found.ambiguity_reason.unwrap().contains("timed out"));

    let list = ListRecordsRequest {
        namespace: NS.into(),
        meta: meta(),
        status: Some(LedgerStatus::Ambiguous as i32),
        ..Default::default()
    };
    let listed = within(ledger.list(list)).await.unwrap().into_inner();
    assert_eq!(listed.records.len(), 1);
    assert_eq!(listed.records[0].key, "k2");

    let resolve = ResolveRequest {
        namespace: NS.into(),
        meta: meta(),
        key: "k2".into(),
        decision: ResolutionDecision::Done as i32,
        operation_id: Some("op-found".into()),
        actor: "oncall".into(),
        note: "found the refund in the backend".into(),
    };
    let resolved = within(ledger.resolve(resolve.clone()))
        .await
        .unwrap()
        .into_inner();
    let resolved = resolved.record.unwrap();
    assert_eq!(resolved.status, LedgerStatus::Succeeded as i32);
    assert_eq!(resolved.resolution.unwrap().actor, "oncall");

    let again = within(ledger.resolve(resolve)).await.unwrap_err();
    assert_status(
        &again,
        Code::FailedPrecondition,
        ErrorCode::InvalidState,
        "only an ambiguous record",
    );
}

#[tokio::test]
async fn complete_and_lookup_refusals_carry_their_codes() {
    let (_, node) = local().await;
    let mut ledger = node.ledger;
    let unknown = within(ledger.lookup(LookupRequest {
        namespace: NS.into(),
        meta: meta(),
        key: "never".into(),
    }))
    .await
    .unwrap_err();
    assert_status(
        &unknown,
        Code::NotFound,
        ErrorCode::NotFound,
        "no ledger record",
    );

    let fail = || {
        Done::Failed(CompleteFailed {
            reason: "declined".into(),
        })
    };
    let missing = within(ledger.complete(complete("never", "a1", fail())))
        .await
        .unwrap_err();
    assert_status(&missing, Code::NotFound, ErrorCode::NotFound, "never");

    begun(&mut ledger, begin("k3", "a1", b"fp")).await;
    let stranger = within(ledger.complete(complete("k3", "intruder", fail())))
        .await
        .unwrap_err();
    assert_status(
        &stranger,
        Code::FailedPrecondition,
        ErrorCode::Stale,
        "attempt_id",
    );

    let huge = Done::Succeeded(CompleteSucceeded {
        operation_id: "op".into(),
        result: vec![0; 16 * 1024 + 1],
    });
    let too_big = within(ledger.complete(complete("k3", "a1", huge)))
        .await
        .unwrap_err();
    assert_status(
        &too_big,
        Code::ResourceExhausted,
        ErrorCode::LimitReached,
        "stored_result_bytes_max",
    );

    let list_unknown = within(ledger.list(ListRecordsRequest {
        namespace: "nobody-here".into(),
        ..Default::default()
    }))
    .await
    .unwrap_err();
    assert_status(
        &list_unknown,
        Code::NotFound,
        ErrorCode::NotFound,
        "nobody-here",
    );
}

#[tokio::test]
async fn invalid_inputs_name_the_field() {
    let (_, node) = local().await;
    let mut ledger = node.ledger;
    let cases: Vec<(BeginRequest, &str)> = vec![
        (begin(&"k".repeat(257), "a", b"fp"), "key"),
        (begin("k", "a", b""), "fingerprint"),
        (begin("k", "", b"fp"), "attempt_id"),
        (
            BeginRequest {
                lease_ms: 0,
                ..begin("k", "a", b"fp")
            },
            "lease_ms",
        ),
        (
            BeginRequest {
                namespace: "has space".into(),
                ..begin("k", "a", b"fp")
            },
            "namespace",
        ),
        (
            BeginRequest {
                tool: "a/b".into(),
                ..begin("k", "a", b"fp")
            },
            "tool",
        ),
        (
            BeginRequest {
                effect: 42,
                ..begin("k", "a", b"fp")
            },
            "effect",
        ),
    ];
    for (request, field) in cases {
        let status = within(ledger.begin(request)).await.unwrap_err();
        assert_eq!(invalid_field(&status), field, "{status:?}");
    }
    let no_outcome = CompleteRequest {
        outcome: None,
        ..complete(
            "k",
            "a",
            Done::Failed(CompleteFailed {
                reason: "declined".into(),
            }),
        )
    };
    let status = within(ledger.complete(no_outcome)).await.unwrap_err();
    assert_eq!(invalid_field(&status), "outcome");
}

#[tokio::test]
async fn the_kill_switch_blocks_write_begins_but_not_reads() {
    let (_, node) = local().await;
    let (mut ledger, mut policy) = (node.ledger, node.policy);
    within(policy.set_kill_switch(SetKillSwitchRequest {
        namespace: NS.into(),
        meta: meta(),
        writes_blocked: true,
        reason: "incident 7".into(),
        actor: "oncall".into(),
    }))
    .await
    .unwrap();
    let blocked = within(ledger.begin(begin("k4", "a1", b"fp")))
        .await
        .unwrap_err();
    assert_status(
        &blocked,
        Code::FailedPrecondition,
        ErrorCode::WritesBlocked,
        "incident 7",
    );

    let read = BeginRequest {
        effect: Effect::ReadOnly as i32,
        ..begin("k5", "a1", b"fp")
    };
    assert!(matches!(begun(&mut ledger, read).await, Begun::Started(_)));
}

#[tokio::test]
async fn listing_pages_through_every_record_once() {
    let (_, node) = local().await;
    let mut ledger = node.ledger;
    for i in 0..5 {
        begun(&mut ledger, begin(&format!("page-{i}"), "a", b"fp")).await;
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    for _ in 0..10 {
        let page = within(ledger.list(ListRecordsRequest {
            namespace: NS.into(),
            intent_id: Some("intent-1".into()),
            page_token: token.clone(),
            limit: 2,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
        assert!(page.records.len() <= 2);
        seen.extend(page.records.into_iter().map(|r| r.key));
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(
        seen,
        (0..5).map(|i| format!("page-{i}")).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_page_of_large_results_is_cut_by_bytes_and_continues_where_it_stopped() {
    let (_, node) = local().await;
    let mut ledger = node.ledger;
    // 300 records with 16 KiB results: about 4.8 MiB, more than a client
    // decodes in one message (4 MiB).
    let keys: Vec<String> = (0..300).map(|i| format!("big-{i:03}")).collect();
    for key in &keys {
        begun(&mut ledger, begin(key, "a1", b"fp")).await;
        let done = Done::Succeeded(CompleteSucceeded {
            operation_id: format!("op-{key}"),
            result: vec![b'r'; 16 * 1024],
        });
        within(ledger.complete(complete(key, "a1", done)))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut page_token = String::new();
    let mut pages = 0;
    loop {
        let request = ListRecordsRequest {
            namespace: NS.into(),
            limit: 1_000,
            page_token: page_token.clone(),
            ..Default::default()
        };
        let page = within(ledger.list(request)).await.unwrap().into_inner();
        assert!(
            prost::Message::encoded_len(&page) < 4 * 1024 * 1024,
            "a page fits what a client decodes"
        );
        pages += 1;
        seen.extend(page.records.into_iter().map(|r| r.key));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
        assert!(pages < 10, "the pages end");
    }
    assert!(pages >= 3, "cut by bytes, not by count: {pages} pages");
    assert_eq!(seen, keys, "every record once, in key order");
}

#[tokio::test]
async fn a_clamped_lease_is_said_so_and_the_holder_renews_it() {
    let (_, node) = local().await;
    let mut ledger = node.ledger;
    let mut long = begin("long", "a1", b"fp");
    long.lease_ms = 900_000;
    let Begun::Started(started) = begun(&mut ledger, long).await else {
        panic!("started");
    };
    assert!(started.lease_clamped, "a 900 s lease is clamped to 600 s");
    let Begun::Started(short) = begun(&mut ledger, begin("short", "a1", b"fp")).await else {
        panic!("started");
    };
    assert!(!short.lease_clamped);

    let renew = |key: &str, attempt: &str, lease_ms: u64| RenewRequest {
        namespace: NS.into(),
        meta: meta(),
        key: key.into(),
        attempt_id: attempt.into(),
        lease_ms,
    };
    let renewed = within(ledger.renew(renew("long", "a1", 700_000)))
        .await
        .unwrap()
        .into_inner();
    assert!(renewed.lease_clamped);
    let record = renewed.record.unwrap();
    assert!(record.lease_until_ms.unwrap_or(0) >= started.lease_until_ms);

    let stale = within(ledger.renew(renew("long", "a2", 10_000)))
        .await
        .unwrap_err();
    assert_status(
        &stale,
        Code::FailedPrecondition,
        ErrorCode::Stale,
        "attempt",
    );
    let missing = within(ledger.renew(renew("nowhere", "a1", 10_000)))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let done = Done::Succeeded(CompleteSucceeded {
        operation_id: "op".into(),
        result: vec![],
    });
    within(ledger.complete(complete("short", "a1", done)))
        .await
        .unwrap();
    let settled = within(ledger.renew(renew("short", "a1", 10_000)))
        .await
        .unwrap_err();
    assert_status(
        &settled,
        Code::FailedPrecondition,
        ErrorCode::InvalidState,
        "never renewed",
    );
}

/// A pipeline on `ledger`: where its calls go, and its replies.
async fn pipeline(
    ledger: &mut LedgerClient<Channel>,
) -> (
    tokio::sync::mpsc::Sender<PipelineRequest>,
    tonic::Streaming<PipelineResponse>,
) {
    let (calls, sent) = tokio::sync::mpsc::channel(4);
    let replies = within(ledger.pipeline(tokio_stream::wrappers::ReceiverStream::new(sent)))
        .await
        .unwrap()
        .into_inner();
    (calls, replies)
}

/// Sends `calls` as one message and reads replies until every call has
/// one; the replies by id.
async fn pipelined(
    (calls, replies): &mut (
        tokio::sync::mpsc::Sender<PipelineRequest>,
        tonic::Streaming<PipelineResponse>,
    ),
    sent: Vec<pipelined_call::Call>,
) -> std::collections::BTreeMap<u64, pipelined_reply::Result> {
    let n = sent.len();
    let message = PipelineRequest {
        calls: sent
            .into_iter()
            .enumerate()
            .map(|(i, call)| PipelinedCall {
                id: i as u64,
                timeout_ms: 5_000,
                call: Some(call),
            })
            .collect(),
    };
    calls.send(message).await.unwrap();
    let mut got = std::collections::BTreeMap::new();
    while got.len() < n {
        let message = within(replies.message()).await.unwrap().unwrap();
        for reply in message.replies {
            assert!(
                got.insert(reply.id, reply.result.unwrap()).is_none(),
                "two replies to one call"
            );
        }
    }
    got
}

#[tokio::test]
async fn a_pipeline_answers_each_call_as_its_unary_call_would() {
    use pipelined_call::Call;
    use pipelined_reply::Result as Reply;
    let (_, node) = local().await;
    let mut unary = node.ledger.clone();
    let mut pipe = pipeline(&mut node.ledger.clone()).await;

    let got = pipelined(&mut pipe, vec![Call::Begin(begin("p1", "a1", b"fp"))]).await;
    let Some(Reply::Begin(BeginResponse {
        outcome: Some(Begun::Started(started)),
    })) = got.get(&0)
    else {
        panic!("a fresh key starts: {got:?}");
    };
    assert_eq!(started.attempt_id, "a1");

    // Two calls in one message, each answered on its own: an answer in the
    // body, and a refusal with its code, message and detail.
    let sent = vec![
        Call::Begin(begin("p1", "a2", b"fp")),
        Call::Complete(complete(
            "never-begun",
            "a1",
            Done::Failed(CompleteFailed {
                reason: "declined".into(),
            }),
        )),
    ];
    let mut got = pipelined(&mut pipe, sent).await;
    let Some(Reply::Begin(BeginResponse {
        outcome: Some(Begun::InProgress(busy)),
    })) = got.remove(&0)
    else {
        panic!("a held key is in progress: {got:?}");
    };
    assert_eq!(busy.holder_attempt_id, "a1");
    let Some(Reply::Error(refused)) = got.remove(&1) else {
        panic!("completing a key never begun fails: {got:?}");
    };
    let direct = within(unary.complete(complete(
        "never-begun",
        "a1",
        Done::Failed(CompleteFailed {
            reason: "declined".into(),
        }),
    )))
    .await
    .unwrap_err();
    let refused = fusebox_proto::pipeline::status_from_proto(refused);
    assert_eq!(refused.code(), direct.code());
    assert_eq!(refused.message(), direct.message());
    assert_eq!(refused.details(), direct.details());
    assert_status(&refused, Code::NotFound, ErrorCode::NotFound, "never-begun");

    pipe.0
        .send(PipelineRequest {
            calls: vec![PipelinedCall {
                id: 7,
                timeout_ms: 0,
                call: None,
            }],
        })
        .await
        .unwrap();
    let empty = within(pipe.1.message()).await.unwrap().unwrap();
    let Some(Reply::Error(status)) = &empty.replies[0].result else {
        panic!("a call naming nothing is refused: {empty:?}");
    };
    assert_eq!(
        (empty.replies[0].id, status.code),
        (7, Code::InvalidArgument as i32)
    );

    let done = Done::Succeeded(CompleteSucceeded {
        operation_id: "op-1".into(),
        result: b"ok".to_vec(),
    });
    let got = pipelined(&mut pipe, vec![Call::Complete(complete("p1", "a1", done))]).await;
    let Some(Reply::Complete(CompleteResponse {
        record: Some(record),
    })) = got.get(&0)
    else {
        panic!("the holder completes: {got:?}");
    };
    assert_eq!(record.status, LedgerStatus::Succeeded as i32);

    // The client ends its side: the node answers what runs, then ends too.
    drop(pipe.0);
    assert!(within(pipe.1.message()).await.unwrap().is_none());
}

#[tokio::test]
async fn a_pipeline_message_over_its_bound_ends_the_stream() {
    let (_, node) = local().await;
    let mut pipe = pipeline(&mut node.ledger.clone()).await;
    let calls = (0..=fusebox_proto::pipeline::CALLS_PER_MESSAGE_MAX as u64)
        .map(|id| PipelinedCall {
            id,
            timeout_ms: 5_000,
            call: Some(pipelined_call::Call::Begin(begin(
                &format!("k{id}"),
                "a1",
                b"fp",
            ))),
        })
        .collect();
    pipe.0.send(PipelineRequest { calls }).await.unwrap();
    let ended = within(pipe.1.message()).await.unwrap_err();
    assert_eq!(ended.code(), Code::InvalidArgument, "{ended:?}");
    assert!(ended.message().contains("at most 256"), "{ended:?}");
}

#[tokio::test]
async fn a_stopping_node_ends_its_pipelines() {
    use fusebox_server::api::{Gateway, LedgerService};
    use fusebox_server::backend::local::LocalBackend;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let gateway = Gateway::new(LocalBackend::new()).stopped_by(stopped);
    let service = fusebox_proto::v1::ledger_server::LedgerServer::new(LedgerService::new(gateway));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(
        service,
        tokio_stream::wrappers::TcpListenerStream::new(listener),
    ));
    let mut ledger = within(LedgerClient::connect(format!("http://{addr}")))
        .await
        .unwrap();
    let mut pipe = pipeline(&mut ledger).await;
    let got = pipelined(
        &mut pipe,
        vec![pipelined_call::Call::Begin(begin("s1", "a1", b"fp"))],
    )
    .await;
    assert!(
        matches!(got.get(&0), Some(pipelined_reply::Result::Begin(_))),
        "{got:?}"
    );

    stop.send(true).unwrap();
    // The stream ends although its client keeps its side open: a client
    // must not stay on a stopped node.
    let ended = within(pipe.1.message()).await.unwrap_err();
    assert_eq!(ended.code(), Code::Unavailable, "{ended:?}");
    assert!(ended.message().contains("stopping"), "{ended:?}");
}
