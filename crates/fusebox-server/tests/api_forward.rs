//! Leader forwarding over gRPC: a follower hands writes (and linearizable
//! lookups) to the leader once, names the leader in the answer, and refuses
//! with NOT_LEADER when it cannot.

#![allow(clippy::unwrap_used)]

mod api_support;

use api_support::{assert_status, detail, local, meta, start, within, Follower};
use fusebox_proto::leader_named;
use fusebox_proto::v1::begin_response::Outcome as Begun;
use fusebox_proto::v1::fusebox_error_detail::Detail;
use fusebox_proto::v1::pipelined_call::Call;
use fusebox_proto::v1::pipelined_reply::Result as Reply;
use fusebox_proto::v1::*;
use tonic::Code;

const NS: &str = "fleet-f";

fn begin(key: &str) -> BeginRequest {
    BeginRequest {
        namespace: NS.into(),
        meta: meta(),
        key: key.into(),
        fingerprint: b"fp".to_vec(),
        intent_id: "intent".into(),
        server: "crm".into(),
        tool: "create_ticket".into(),
        target: "acct-1".into(),
        effect: Effect::NonIdempotentWrite as i32,
        attempt_id: "a1".into(),
        lease_ms: 30_000,
    }
}

#[tokio::test]
async fn a_follower_forwards_writes_and_lookups_to_the_leader() {
    let (_, leader) = local().await;
    let ledger_at = leader.addrs.ledger.to_string();
    let ledger_leader = Follower::pointing_at(Some(ledger_at.clone()));
    let mut via_follower = start(ledger_leader).await.ledger;

    let begun = within(via_follower.begin(begin("fwd-1"))).await.unwrap();
    assert_eq!(leader_named(begun.metadata()), Some(ledger_at.as_str()));
    let begun = begun.into_inner();
    assert!(matches!(begun.outcome, Some(Begun::Started(_))));

    let mut direct = leader.ledger;
    let lookup = LookupRequest {
        namespace: NS.into(),
        meta: meta(),
        key: "fwd-1".into(),
    };
    let on_leader = within(direct.lookup(lookup.clone())).await.unwrap();
    assert_eq!(
        leader_named(on_leader.metadata()),
        None,
        "the leader's own answer names no one"
    );
    assert_eq!(
        on_leader.into_inner().record.unwrap().status,
        LedgerStatus::InProgress as i32
    );
    let through = within(via_follower.lookup(lookup)).await.unwrap();
    assert_eq!(leader_named(through.metadata()), Some(ledger_at.as_str()));
    let through = through.into_inner();
    assert_eq!(
        through.record.unwrap().key,
        "fwd-1",
        "linearizable reads go to the leader"
    );

    // A pipelined call the follower forwards names the leader in its reply.
    let (calls, sent) = tokio::sync::mpsc::channel(1);
    let mut replies =
        within(via_follower.pipeline(tokio_stream::wrappers::ReceiverStream::new(sent)))
            .await
            .unwrap()
            .into_inner();
    let call = PipelinedCall {
        id: 1,
        timeout_ms: 5_000,
        call: Some(Call::Begin(begin("fwd-2"))),
    };
    calls
        .send(PipelineRequest { calls: vec![call] })
        .await
        .unwrap();
    let got = within(replies.message()).await.unwrap().unwrap();
    let reply = &got.replies[0];
    assert!(matches!(reply.result, Some(Reply::Begin(_))), "{reply:?}");
    assert_eq!(reply.leader_address, ledger_at);

    let breakers_at = leader.addrs.breakers.to_string();
    let breakers_leader = Follower::pointing_at(Some(breakers_at.clone()));
    let mut breakers = start(breakers_leader).await.breakers;
    let report = ReportOutcomesRequest {
        namespace: NS.into(),
        meta: meta(),
        replica_id: "r1".into(),
        batch_seq: 1,
        outcomes: vec![Outcome {
            server: "crm".into(),
            tool: "create_ticket".into(),
            class: OutcomeClass::Success as i32,
            ..Default::default()
        }],
    };
    let taken = within(breakers.report_outcomes(report)).await.unwrap();
    assert_eq!(leader_named(taken.metadata()), Some(breakers_at.as_str()));
    assert_eq!(taken.into_inner().accepted, 1);
}

#[tokio::test]
async fn a_forwarded_request_is_never_forwarded_again() {
    let second = Follower::pointing_at(Some("127.0.0.1:9".into()));
    let second = start(second).await;
    let first = Follower::pointing_at(Some(second.addrs.ledger.to_string()));
    let mut first = start(first).await.ledger;

    let refused = within(first.begin(begin("loop"))).await.unwrap_err();
    assert_status(
        &refused,
        Code::Unavailable,
        ErrorCode::NotLeader,
        "forwarded once already",
    );
    let Some(Detail::NotLeader(hint)) = detail(&refused).detail else {
        panic!("not_leader detail expected");
    };
    assert_eq!(hint.leader_address.as_deref(), Some("127.0.0.1:9"));
}

#[tokio::test]
async fn without_a_reachable_leader_writes_are_unavailable() {
    let mut orphan = start(Follower::pointing_at(None)).await.ledger;
    let refused = within(orphan.begin(begin("k"))).await.unwrap_err();
    assert_status(
        &refused,
        Code::Unavailable,
        ErrorCode::NotLeader,
        "no leader is known",
    );

    // Nothing listens on the leader's address: the hop fails, retryably.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = closed.local_addr().unwrap().to_string();
    drop(closed);
    let mut stranded = start(Follower::pointing_at(Some(gone.clone())))
        .await
        .ledger;
    let refused = within(stranded.begin(begin("k"))).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains(&gone), "{refused:?}");
}
