//! `stalled_after_ms`: a call with no answer that long after it started
//! counts against its breakers at once, as a timeout, while it keeps
//! running; its end is not counted again. A probe holds its permit while
//! its call runs: under `in_flight_on_open = "end"` a stalled read probe is
//! timed out at its stall and its breaker reopens at once; otherwise it
//! runs on, and no other probe of its tool starts until it ends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{
    Admission, BreakerState, Client, ClientError, Journey, OutcomeClass, ToolFailure, ToolRef,
};
use fusebox_proto::v1 as pb;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{connected, flag_set, hangs, policy_seen, wait_for, TestCluster};

const POLICY: &str = r#"
[defaults]
timeout_ms = 20000
stalled_after_ms = 300

# A server's breaker section sets its tools' breakers too, so each tool
# says its own again: only the tool breakers open in these tests.
[servers.tax]
in_flight_on_open = "end"

[servers.tax.breaker]
consecutive_failures = 1000

[servers.tax.tools.lookup.breaker]
consecutive_failures = 2

[servers.crm.breaker]
consecutive_failures = 1000

[servers.crm.tools.get_deal.breaker]
consecutive_failures = 2

# One failure opens these, and the open period is short, so a probe comes
# soon; its lease outlasts every call here.
[servers.maps]
in_flight_on_open = "end"

[servers.maps.breaker]
consecutive_failures = 1000

[servers.maps.tools.geocode.breaker]
consecutive_failures = 1
open_ms = 1000
probe_lease_ms = 60000

[servers.mail.breaker]
consecutive_failures = 1000

[servers.mail.tools.send_status]
timeout_ms = 3000

[servers.mail.tools.send_status.breaker]
consecutive_failures = 1
open_ms = 1000
probe_lease_ms = 60000
"#;

async fn client_with_policy(cluster: &TestCluster, replica: &str, version: u64) -> Arc<Client> {
    let client = Arc::new(connected(cluster.config(replica, &[0])).await);
    policy_seen(&client, version).await;
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stalled_calls_open_the_breaker_long_before_their_deadlines() {
    let cluster = TestCluster::start(1).await;
    let operator = cluster.operator(0);
    let version = operator.apply_policy(POLICY).await;
    let mut calls = Vec::new();
    for replica in ["r1", "r2"] {
        let client = client_with_policy(&cluster, replica, version).await;
        calls.push(tokio::spawn(async move {
            let t = ToolRef::new("tax", "lookup").unwrap();
            let journey = Journey::new("lookup", Duration::from_secs(60), Duration::ZERO);
            let began = Instant::now();
            let cancelled = Arc::new(AtomicBool::new(false));
            let result = client
                .call(&journey, &t, |ctx| hangs(cancelled.clone(), ctx.cancel))
                .await;
            (result, began.elapsed())
        }));
    }
    // Each call counts as a timeout 300 ms in; the second opens the
    // breaker, and both calls, still running, end at the open.
    for call in calls {
        let (result, took) = call.await.unwrap();
        match result {
            Err(ClientError::CircuitOpen { state, .. }) => assert_eq!(state, BreakerState::Open),
            other => panic!("a stalled call was not ended by the breaker it opened: {other:?}"),
        }
        assert!(
            took < Duration::from_secs(10),
            "a stalled call ran {took:?}, toward its 20 s deadline"
        );
    }
    let breaker = operator.breaker("tax", "lookup").await;
    assert_eq!(breaker.state, pb::BreakerState::Open as i32);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_call_that_then_answers_is_counted_once_as_a_timeout() {
    let cluster = TestCluster::start(1).await;
    let operator = cluster.operator(0);
    let version = operator.apply_policy(POLICY).await;
    let client = client_with_policy(&cluster, "r1", version).await;
    let t = ToolRef::new("crm", "get_deal").unwrap();
    // Answers after 800 ms: past `stalled_after_ms`, within its deadline.
    let slow_success = |_ctx| async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        Ok::<_, ToolFailure>(())
    };
    let journey = Journey::new("deal", Duration::from_secs(60), Duration::ZERO);
    // Each call counts as a timeout at 300 ms and succeeds at 800 ms. Two
    // timeouts in a row open the breaker only if neither success was
    // counted: a counted success would reset the streak between them.
    for _ in 0..2 {
        client.call(&journey, &t, slow_success).await.unwrap();
    }
    wait_for(
        "the breaker opened by two stalls",
        Duration::from_secs(10),
        || {
            let operator = &operator;
            async move {
                let b = operator.breaker("crm", "get_deal").await;
                (b.state == pb::BreakerState::Open as i32).then_some(())
            }
        },
    )
    .await;
    cluster.shutdown().await;
}

/// Opens `tool`'s breaker with one tool error from `client`, then waits
/// until `client` would send a probe.
async fn tripped_until_probe(client: &Client, tool: &ToolRef) {
    let journey = Journey::new("trip", Duration::from_secs(60), Duration::ZERO);
    let failed = client
        .call(&journey, tool, |_ctx| async {
            Err::<(), _>(ToolFailure::new(OutcomeClass::ToolError, "isError"))
        })
        .await;
    assert!(
        matches!(failed, Err(ClientError::ToolFailed { .. })),
        "{failed:?}"
    );
    client.flush_reports();
    wait_for(
        "the breaker to want a probe",
        Duration::from_secs(15),
        || {
            let d = client.admit(tool);
            async move { matches!(d.admission, Admission::Probe { .. }).then_some(()) }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_probe_under_end_times_out_at_its_stall_and_reopens_its_breaker() {
    let cluster = TestCluster::start(1).await;
    let operator = cluster.operator(0);
    let version = operator.apply_policy(POLICY).await;
    let client = client_with_policy(&cluster, "r1", version).await;
    let t = ToolRef::new("maps", "geocode").unwrap();
    tripped_until_probe(&client, &t).await;
    let journey = Journey::new("geocode", Duration::from_secs(60), Duration::ZERO);
    let began = Instant::now();
    let cancelled = Arc::new(AtomicBool::new(false));
    let result = client
        .call(&journey, &t, |ctx| hangs(cancelled.clone(), ctx.cancel))
        .await;
    let took = began.elapsed();
    // The probe's stall, 300 ms in, is its deadline: the call ends there.
    match result {
        Err(ClientError::Timeout { deadline_ms, .. }) => assert_eq!(deadline_ms, 300),
        other => panic!("a stalled probe was not timed out at its stall: {other:?}"),
    }
    assert!(
        took < Duration::from_secs(10),
        "a stalled probe ran {took:?}, toward its 20 s deadline"
    );
    assert_eq!(client.metrics().probes_granted, 1);
    flag_set(
        "the probe's transport cancelled",
        &cancelled,
        Duration::from_secs(5),
    )
    .await;
    // Its permit went back failed: the breaker is open again.
    wait_for("the breaker to reopen", Duration::from_secs(5), || {
        let operator = &operator;
        async move {
            let b = operator.breaker("maps", "geocode").await;
            (b.state == pb::BreakerState::Open as i32).then_some(())
        }
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_probe_that_finishes_holds_its_permit_until_its_call_ends() {
    let cluster = TestCluster::start(1).await;
    let operator = cluster.operator(0);
    let version = operator.apply_policy(POLICY).await;
    let first = client_with_policy(&cluster, "r1", version).await;
    let second = client_with_policy(&cluster, "r2", version).await;
    let t = ToolRef::new("mail", "send_status").unwrap();
    tripped_until_probe(&first, &t).await;
    // The first replica's probe hangs to its 3 s deadline ("finish").
    let probing = Arc::new(AtomicBool::new(false));
    let stalled_probe = {
        let (client, t, probing) = (first.clone(), t.clone(), probing.clone());
        tokio::spawn(async move {
            let journey = Journey::new("status", Duration::from_secs(60), Duration::ZERO);
            let cancelled = Arc::new(AtomicBool::new(false));
            let result = client
                .call(&journey, &t, |ctx| {
                    probing.store(true, Ordering::SeqCst);
                    hangs(cancelled.clone(), ctx.cancel)
                })
                .await;
            (result, Instant::now())
        })
    };
    flag_set(
        "the first probe to start",
        &probing,
        Duration::from_secs(10),
    )
    .await;
    // It stalls at 300 ms but keeps its permit while its call runs, so the
    // second replica gets no probe until it has ended; then its permit
    // goes back failed, and once the breaker's next open period is over
    // the second replica gets the one probe permit.
    let journey = Journey::new("status", Duration::from_secs(60), Duration::ZERO);
    let (answered, probed_at) = wait_for("a second probe", Duration::from_secs(15), || {
        let (second, t, journey) = (&second, &t, &journey);
        async move {
            let started = std::sync::Mutex::new(None);
            let result = second
                .call(journey, t, |_ctx| {
                    *started.lock().unwrap() = Some(Instant::now());
                    async { Ok::<_, ToolFailure>("sent") }
                })
                .await;
            match result {
                Ok(answered) => Some((answered, started.into_inner().unwrap().unwrap())),
                Err(ClientError::CircuitOpen { .. }) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    None
                }
                Err(e) => panic!("the second replica's call failed: {e}"),
            }
        }
    })
    .await;
    assert!(answered.probe, "the second replica's call was not a probe");
    let (result, ended_at) = stalled_probe.await.unwrap();
    match result {
        Err(ClientError::Timeout { deadline_ms, .. }) => assert_eq!(deadline_ms, 3000),
        other => panic!("the stalled probe did not run to its deadline: {other:?}"),
    }
    assert!(
        probed_at > ended_at,
        "a second probe started {:?} before the stalled probe ended",
        ended_at - probed_at
    );
    assert_eq!(first.metrics().probes_granted, 1);
    assert_eq!(second.metrics().probes_granted, 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_probe_that_then_answers_has_still_failed_its_probe() {
    let cluster = TestCluster::start(1).await;
    let operator = cluster.operator(0);
    let version = operator.apply_policy(POLICY).await;
    let client = client_with_policy(&cluster, "r1", version).await;
    let t = ToolRef::new("mail", "send_status").unwrap();
    tripped_until_probe(&client, &t).await;
    // Stalls at 300 ms ("finish"), answers at 800 ms: the caller gets its
    // answer, and the breaker its failed probe.
    let journey = Journey::new("status", Duration::from_secs(60), Duration::ZERO);
    let answered = client
        .call(&journey, &t, |_ctx| async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            Ok::<_, ToolFailure>("sent")
        })
        .await
        .unwrap();
    assert!(answered.probe, "the call was not a probe");
    wait_for(
        "the failed probe to reopen the breaker",
        Duration::from_secs(10),
        || {
            let operator = &operator;
            async move {
                let b = operator.breaker("mail", "send_status").await;
                (b.reopen_count == 1).then_some(())
            }
        },
    )
    .await;
    let breaker = operator.breaker("mail", "send_status").await;
    assert_ne!(breaker.state, pb::BreakerState::Closed as i32);
    cluster.shutdown().await;
}
