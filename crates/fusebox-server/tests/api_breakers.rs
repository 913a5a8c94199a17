//! The Breakers service over gRPC: outcome reports trip breakers, probe
//! permits go through the log one at a time, reads and operator commands,
//! and the statuses chosen for bad input.

#![allow(clippy::unwrap_used)]

mod api_support;

use api_support::{assert_status, invalid_field, local, meta, within};
use fusebox_core::machine::Command;
use fusebox_core::Timestamp;
use fusebox_proto::v1::acquire_probe_response::Result as Probe;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::*;
use tokio::task::JoinSet;
use tonic::transport::Channel;
use tonic::Code;

const NS: &str = "fleet-b";

fn tool_key() -> BreakerKey {
    BreakerKey {
        namespace: NS.into(),
        server: "tax".into(),
        tool: Some("lookup".into()),
        backend: None,
    }
}

fn server_key() -> BreakerKey {
    BreakerKey {
        tool: None,
        ..tool_key()
    }
}

fn timeout() -> Outcome {
    Outcome {
        server: "tax".into(),
        tool: "lookup".into(),
        class: OutcomeClass::Timeout as i32,
        duration_ms: 10_000,
        ..Default::default()
    }
}

fn report(outcomes: Vec<Outcome>) -> ReportOutcomesRequest {
    ReportOutcomesRequest {
        namespace: NS.into(),
        meta: meta(),
        replica_id: "replica-1".into(),
        batch_seq: 1,
        outcomes,
    }
}

fn acquire(key: BreakerKey, replica: &str) -> AcquireProbeRequest {
    AcquireProbeRequest {
        namespace: NS.into(),
        meta: meta(),
        key: Some(key),
        replica_id: replica.into(),
        lease_ms: None,
    }
}

async fn view(client: &mut BreakersClient<Channel>, key: BreakerKey) -> BreakerView {
    let request = GetBreakerRequest {
        namespace: NS.into(),
        meta: meta(),
        key: Some(key),
    };
    within(client.get_breaker(request))
        .await
        .unwrap()
        .into_inner()
        .breaker
        .unwrap()
}

/// Four timeouts in one batch open the tool's breaker (and its server's).
async fn trip(client: &mut BreakersClient<Channel>) {
    let answer = within(client.report_outcomes(report(vec![timeout(); 4])))
        .await
        .unwrap();
    assert_eq!(answer.into_inner().accepted, 4);
}

#[tokio::test]
async fn four_timeouts_open_the_tool_breaker_with_audited_evidence() {
    let (_, node) = local().await;
    let mut breakers = node.breakers;
    let closed = view(&mut breakers, tool_key()).await;
    assert_eq!(
        (closed.state, closed.generation),
        (BreakerState::Closed as i32, 0)
    );

    trip(&mut breakers).await;
    let open = view(&mut breakers, tool_key()).await;
    assert_eq!(open.state, BreakerState::Open as i32);
    assert!(open.open_until_ms.is_some());
    assert_eq!(open.generation, 1);

    let listed = within(breakers.list_breakers(ListBreakersRequest {
        namespace: NS.into(),
        states: vec![BreakerState::Open as i32],
        ..Default::default()
    }))
    .await
    .unwrap()
    .into_inner();
    assert_eq!(listed.breakers.len(), 2, "the server breaker opened too");

    let history = within(breakers.breaker_history(BreakerHistoryRequest {
        namespace: NS.into(),
        key: Some(tool_key()),
        ..Default::default()
    }))
    .await
    .unwrap()
    .into_inner();
    let last = &history.transitions[0];
    assert_eq!(last.cause, TransitionCause::ConsecutiveFailures as i32);
    assert_eq!(
        last.evidence.as_ref().unwrap().reporters,
        vec!["replica-1".to_string()]
    );
}

#[tokio::test]
async fn a_half_open_breaker_grants_one_probe_to_sixteen_callers() {
    let (backend, node) = local().await;
    let mut breakers = node.breakers;
    trip(&mut breakers).await;

    let Some(Probe::Denied(denied)) = within(breakers.acquire_probe(acquire(tool_key(), "r0")))
        .await
        .unwrap()
        .into_inner()
        .result
    else {
        panic!("an open server refuses probes of its tools");
    };
    assert_eq!(denied.reason, ProbeDenialReason::ServerOpen as i32);

    // Past the 30 s open period: both breakers turn half-open.
    let later =
        Timestamp::from_millis(view(&mut breakers, tool_key()).await.open_until_ms.unwrap() + 1);
    backend.apply_at(&Command::Tick, later).unwrap();
    assert_eq!(
        view(&mut breakers, tool_key()).await.state,
        BreakerState::HalfOpen as i32
    );

    let mut callers = JoinSet::new();
    for i in 0..16 {
        let mut client = breakers.clone();
        callers.spawn(async move {
            let answer = within(client.acquire_probe(acquire(tool_key(), &format!("r{i}"))));
            answer.await.unwrap().into_inner().result.unwrap()
        });
    }
    let answers = within(callers.join_all()).await;
    let granted: Vec<_> = answers
        .iter()
        .filter_map(|a| match a {
            Probe::Granted(g) => Some(g.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(granted.len(), 1, "{answers:?}");
    assert!(answers.iter().all(|a| match a {
        Probe::Denied(d) => d.reason == ProbeDenialReason::ProbesInFlight as i32,
        _ => true,
    }));

    // A server's probe is a call on one of its tools: it waits while the
    // tool's permit is out.
    let server = within(breakers.acquire_probe(acquire(server_key(), "r0")))
        .await
        .unwrap();
    assert!(
        matches!(
            server.into_inner().result,
            Some(Probe::Denied(d)) if d.reason == ProbeDenialReason::ProbesInFlight as i32
        ),
        "the server's probe waits for the tool's"
    );

    let released = within(breakers.release_probe(ReleaseProbeRequest {
        namespace: NS.into(),
        meta: meta(),
        key: Some(tool_key()),
        permit_id: granted[0].permit_id.clone(),
        generation: granted[0].generation,
        outcome: OutcomeClass::Success as i32,
        duration_ms: 120,
    }))
    .await
    .unwrap()
    .into_inner();
    assert!(released.accepted);
    assert_eq!(released.breaker.unwrap().probe_successes, 1);

    let server = within(breakers.acquire_probe(acquire(server_key(), "r0")))
        .await
        .unwrap();
    assert!(
        matches!(server.into_inner().result, Some(Probe::Granted(_))),
        "the server breaker has its own permit once the tool's is back"
    );
}

#[tokio::test]
async fn operators_force_open_and_reset_with_compare_and_set() {
    let (_, node) = local().await;
    let mut breakers = node.breakers;
    let forced = within(breakers.force_open(ForceOpenRequest {
        namespace: NS.into(),
        meta: meta(),
        key: Some(tool_key()),
        reason: "vendor maintenance".into(),
        duration_ms: Some(60_000),
        actor: "oncall".into(),
        expected_generation: Some(0),
    }))
    .await
    .unwrap()
    .into_inner();
    let breaker = forced.breaker.unwrap();
    assert_eq!(breaker.state, BreakerState::ForcedOpen as i32);
    let who = breaker.forced.unwrap();
    assert_eq!(
        (who.actor.as_str(), who.reason.as_str()),
        ("oncall", "vendor maintenance")
    );
    assert!(forced.revision > 0);

    let stale = within(breakers.reset(ResetBreakerRequest {
        namespace: NS.into(),
        meta: meta(),
        key: Some(tool_key()),
        actor: String::new(),
        reason: "done".into(),
        expected_generation: Some(0),
    }))
    .await
    .unwrap_err();
    assert_status(
        &stale,
        Code::FailedPrecondition,
        ErrorCode::Stale,
        "generation",
    );

    let reset = within(breakers.reset(ResetBreakerRequest {
        namespace: NS.into(),
        meta: meta(),
        key: Some(tool_key()),
        actor: String::new(),
        reason: "done".into(),
        expected_generation: Some(1),
    }))
    .await
    .unwrap()
    .into_inner();
    assert_eq!(reset.breaker.unwrap().state, BreakerState::Closed as i32);
}

#[tokio::test]
async fn bad_reports_are_refused_naming_the_field_or_the_limit() {
    let (_, node) = local().await;
    let mut breakers = node.breakers;
    let oversize = within(breakers.report_outcomes(report(vec![timeout(); 4097])))
        .await
        .unwrap_err();
    assert_status(
        &oversize,
        Code::ResourceExhausted,
        ErrorCode::LimitReached,
        "batch_outcomes_max",
    );

    let bad_server = Outcome {
        server: "tax vendor".into(),
        ..timeout()
    };
    let status = within(breakers.report_outcomes(report(vec![timeout(), bad_server])))
        .await
        .unwrap_err();
    assert_eq!(invalid_field(&status), "outcomes[1].server");

    let no_replica = ReportOutcomesRequest {
        replica_id: String::new(),
        ..report(vec![timeout()])
    };
    let status = within(breakers.report_outcomes(no_replica))
        .await
        .unwrap_err();
    assert_eq!(invalid_field(&status), "replica_id");

    let unclassified = Outcome {
        class: OutcomeClass::Unspecified as i32,
        ..timeout()
    };
    let taken = within(breakers.report_outcomes(report(vec![unclassified])))
        .await
        .unwrap();
    assert_eq!(
        taken.into_inner().ignored,
        1,
        "an unclassified outcome is ignored, not refused"
    );
}

#[tokio::test]
async fn bad_keys_permits_and_operator_fields_are_refused_by_name() {
    let (_, node) = local().await;
    let mut breakers = node.breakers;
    let other_ns = BreakerKey {
        namespace: "fleet-z".into(),
        ..tool_key()
    };
    let status = within(breakers.acquire_probe(acquire(other_ns, "r1")))
        .await
        .unwrap_err();
    assert_eq!(invalid_field(&status), "key.namespace");

    let no_reason = ForceOpenRequest {
        namespace: NS.into(),
        key: Some(tool_key()),
        actor: "oncall".into(),
        ..Default::default()
    };
    let status = within(breakers.force_open(no_reason)).await.unwrap_err();
    assert_eq!(invalid_field(&status), "reason");

    let bad_permit = ReleaseProbeRequest {
        namespace: NS.into(),
        key: Some(tool_key()),
        permit_id: "not-a-permit".into(),
        outcome: OutcomeClass::Success as i32,
        ..Default::default()
    };
    let status = within(breakers.release_probe(bad_permit))
        .await
        .unwrap_err();
    assert_eq!(invalid_field(&status), "permit_id");
}
