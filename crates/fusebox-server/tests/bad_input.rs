//! Every public RPC against bad input (issue 13): bytes that are not a
//! message, a truncated field, groups nested thousands deep, a message over
//! the size limit, a namespace far over its bound, an unknown field, and
//! unknown enum values where a request has an enum. Each is answered with
//! the status the table expects, the node keeps serving, and a record
//! written before is still there, unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod node_support;

use bytes::Bytes;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::policy_client::PolicyClient;
use fusebox_server::auth::rules::{Rule, RULES};
use node_support::{bearer, call_raw, methods, node, Method};
use tonic::{Code, Request};

const NS: &str = "own";

fn rule(path: &str) -> Option<Rule> {
    RULES.iter().find(|(p, _)| *p == path).map(|(_, r)| *r)
}

/// A length-delimited field `number` holding `payload`.
fn field(number: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![(number << 3) | 2];
    let mut len = payload.len();
    loop {
        let byte = u8::try_from(len & 0x7f).unwrap();
        len >>= 7;
        if len == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(payload);
    out
}

/// One kind of bad body, and which codes may answer it.
struct Case {
    name: &'static str,
    body: fn(namespaced: bool) -> Vec<u8>,
    expect: fn(code: Code, namespaced: bool) -> bool,
}

fn decode_error(code: Code, _: bool) -> bool {
    // tonic answers a body it cannot decode with INTERNAL ("failed to decode
    // Protobuf message"), before any handler runs.
    matches!(code, Code::Internal | Code::InvalidArgument)
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "bytes that are not a message",
            body: |_| vec![0xff; 64],
            expect: decode_error,
        },
        Case {
            name: "a field longer than the message",
            body: |_| vec![0x0a, 100, b'a', b'b', b'c'],
            expect: decode_error,
        },
        Case {
            name: "groups nested 5,000 deep",
            body: |_| {
                let mut out = Vec::new();
                out.extend(std::iter::repeat_n(0x7b_u8, 5_000)); // field 15, start group
                out.extend(std::iter::repeat_n(0x7c_u8, 5_000)); // field 15, end group
                out
            },
            expect: decode_error,
        },
        Case {
            name: "a message over the size limit (11 MiB)",
            body: |_| field(15, &vec![b'x'; 11 * 1024 * 1024]),
            expect: |code, _| matches!(code, Code::OutOfRange | Code::ResourceExhausted),
        },
        Case {
            name: "a namespace of 100,000 bytes",
            body: |_| field(1, &vec![b'n'; 100_000]),
            // A cluster RPC keeps field 1 reserved: it is an unknown field
            // there, skipped like any other.
            expect: |code, namespaced| !namespaced || code == Code::InvalidArgument,
        },
        Case {
            name: "a namespace with a space and a slash",
            body: |_| field(1, b"a b/c"),
            expect: |code, namespaced| !namespaced || code == Code::InvalidArgument,
        },
        Case {
            name: "an unknown field beside a valid namespace",
            body: |namespaced| {
                let mut out = if namespaced {
                    field(1, NS.as_bytes())
                } else {
                    Vec::new()
                };
                out.extend_from_slice(&[0xc0, 0x0c, 0x01]); // field 200, varint 1
                out
            },
            // Skipped, as proto3 wants: whatever the call answers, it is
            // not a decode error.
            expect: |code, _| code != Code::Internal,
        },
    ]
}

async fn keep_a_record(node: &node_support::Node) {
    let mut ledger = LedgerClient::new(node.channel.clone());
    let mut begin = Request::new(pb::BeginRequest {
        namespace: NS.into(),
        key: "keep-me".into(),
        fingerprint: b"fp".to_vec(),
        intent_id: "intent".into(),
        server: "jobs".into(),
        tool: "restart".into(),
        effect: pb::Effect::NonIdempotentWrite as i32,
        attempt_id: "a1".into(),
        lease_ms: 60_000,
        ..Default::default()
    });
    bearer(&mut begin, &node.admin);
    ledger.begin(begin).await.unwrap();
    let mut complete = Request::new(pb::CompleteRequest {
        namespace: NS.into(),
        key: "keep-me".into(),
        attempt_id: "a1".into(),
        outcome: Some(pb::complete_request::Outcome::Succeeded(
            pb::CompleteSucceeded {
                operation_id: "op-1".into(),
                result: b"kept".to_vec(),
            },
        )),
        ..Default::default()
    });
    bearer(&mut complete, &node.admin);
    ledger.complete(complete).await.unwrap();
}

async fn the_record_is_intact(node: &node_support::Node) {
    let mut lookup = Request::new(pb::LookupRequest {
        namespace: NS.into(),
        key: "keep-me".into(),
        ..Default::default()
    });
    bearer(&mut lookup, &node.admin);
    let record = LedgerClient::new(node.channel.clone())
        .lookup(lookup)
        .await
        .expect("the node still serves")
        .into_inner()
        .record
        .unwrap();
    assert_eq!(record.status(), pb::LedgerStatus::Succeeded);
    assert_eq!(record.result, Some(b"kept".to_vec()));
    assert_eq!(record.operation_id.as_deref(), Some("op-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_refuses_bad_bytes_and_loses_nothing() {
    let node = node().await;
    keep_a_record(&node).await;
    let public: Vec<Method> = methods()
        .into_iter()
        .filter(|m| matches!(rule(&m.path), Some(Rule::Role { .. })))
        .collect();
    let mut wrong = Vec::new();
    for method in &public {
        let namespaced = matches!(
            rule(&method.path),
            Some(Rule::Role {
                namespaced: true,
                ..
            })
        );
        for case in cases() {
            let body = Bytes::from((case.body)(namespaced));
            let (code, message) = call_raw(&node.channel, method, Some(&node.admin), body).await;
            if !(case.expect)(code, namespaced) {
                wrong.push(format!(
                    "{} with {}: {code:?} {message}",
                    method.path, case.name
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "unexpected answers:\n{}",
        wrong.join("\n")
    );
    the_record_is_intact(&node).await;
    node.node.shutdown().await;
}

fn as_admin<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    bearer(&mut request, token);
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_enum_values_are_refused_by_name_or_ignored_as_the_proto_says() {
    let node = node().await;
    keep_a_record(&node).await;
    let token = node.admin.clone();
    let field_of = |status: tonic::Status| {
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        let detail = fusebox_server::api::status::detail_of(&status).unwrap();
        match detail.detail {
            Some(pb::fusebox_error_detail::Detail::InvalidArgument(d)) => {
                d.problem.map(|p| p.field).unwrap_or_default()
            }
            other => panic!("{other:?}"),
        }
    };
    let mut ledger = LedgerClient::new(node.channel.clone());
    let mut breakers = BreakersClient::new(node.channel.clone());
    let mut policy = PolicyClient::new(node.channel.clone());

    let begin = pb::BeginRequest {
        namespace: NS.into(),
        key: "k2".into(),
        fingerprint: b"fp".to_vec(),
        intent_id: "i".into(),
        server: "jobs".into(),
        tool: "restart".into(),
        effect: 999,
        attempt_id: "a1".into(),
        lease_ms: 1_000,
        ..Default::default()
    };
    assert_eq!(
        field_of(ledger.begin(as_admin(begin, &token)).await.unwrap_err()),
        "effect"
    );

    let resolve = pb::ResolveRequest {
        namespace: NS.into(),
        key: "keep-me".into(),
        decision: 999,
        note: "n".into(),
        ..Default::default()
    };
    assert_eq!(
        field_of(ledger.resolve(as_admin(resolve, &token)).await.unwrap_err()),
        "decision"
    );

    let apply = pb::ApplyPolicyRequest {
        namespace: NS.into(),
        document: "[defaults]\n".into(),
        format: 999,
        reason: "r".into(),
        ..Default::default()
    };
    assert_eq!(
        field_of(policy.apply(as_admin(apply, &token)).await.unwrap_err()),
        "format"
    );

    let list = pb::ListBreakersRequest {
        namespace: NS.into(),
        states: vec![999],
        ..Default::default()
    };
    assert_eq!(
        field_of(
            breakers
                .list_breakers(as_admin(list, &token))
                .await
                .unwrap_err()
        ),
        "states[0]"
    );

    let release = pb::ReleaseProbeRequest {
        namespace: NS.into(),
        key: Some(pb::BreakerKey {
            server: "jobs".into(),
            ..Default::default()
        }),
        permit_id: "1".into(),
        outcome: 999,
        ..Default::default()
    };
    assert_eq!(
        field_of(
            breakers
                .release_probe(as_admin(release, &token))
                .await
                .unwrap_err()
        ),
        "outcome"
    );

    // An outcome of an unknown class is ignored, as the proto promises.
    let report = pb::ReportOutcomesRequest {
        namespace: NS.into(),
        replica_id: "r1".into(),
        outcomes: vec![pb::Outcome {
            server: "jobs".into(),
            tool: "restart".into(),
            class: 999,
            duration_ms: 5,
            ..Default::default()
        }],
        ..Default::default()
    };
    let answer = breakers
        .report_outcomes(as_admin(report, &token))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((answer.accepted, answer.ignored), (0, 1));

    the_record_is_intact(&node).await;
    node.node.shutdown().await;
}
