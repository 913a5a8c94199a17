//! `stalled_after_ms`: a call with no answer that long after it started
//! counts against its breakers at once, as a timeout, while it keeps
//! running; its end is not counted again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{BreakerState, ClientError, Journey, ToolFailure, ToolRef};
use fusebox_proto::v1 as pb;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{connected, hangs, policy_seen, wait_for, TestCluster};

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
"#;

async fn client_with_policy(
    cluster: &TestCluster,
    replica: &str,
    version: u64,
) -> Arc<fusebox_client::Client> {
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
