//! `in_flight_on_open`: a read still running when its breaker opens ends at
//! once with the open-circuit answer under `"end"`, and its transport is
//! cancelled; under `"finish"` (the default), and for any write, it runs to
//! its own deadline, as does a write through `Client::write` whatever its
//! policy says of the tool.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{BreakerState, ClientError, Journey, ToolRef, WriteRequest, WriteSuccess};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{connected, flag_set, hangs, policy_seen, TestCluster};

const POLICY: &str = r#"
[defaults]
timeout_ms = 3000

[defaults.breaker]
consecutive_failures = 1000

[servers.tax.tools.lookup]
timeout_ms = 20000
in_flight_on_open = "end"

[servers.tax.tools.file_return]
effect = "idempotent_write"
in_flight_on_open = "end"

# A read by its policy, written to through `Client::write`.
[servers.tax.tools.stamp]
in_flight_on_open = "end"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_in_flight_ends_when_its_breaker_opens_only_if_its_policy_says_end() {
    let cluster = TestCluster::start(1).await;
    let operator = cluster.operator(0);
    let version = operator.apply_policy(POLICY).await;
    let client = Arc::new(connected(cluster.config("waiter", &[0])).await);
    policy_seen(&client, version).await;

    // Three calls wait on tools that hang: a read under "end", a read under
    // the default "finish" (3 s deadline), and a write under "end".
    let start = |server: &'static str, tool: &'static str| {
        let client = client.clone();
        let cancelled = Arc::new(AtomicBool::new(false));
        let seen = cancelled.clone();
        let call = tokio::spawn(async move {
            let t = ToolRef::new(server, tool).unwrap();
            let journey = Journey::new(tool, Duration::from_secs(60), Duration::ZERO);
            let began = Instant::now();
            let result = client
                .call(&journey, &t, |ctx| hangs(seen.clone(), ctx.cancel))
                .await;
            (result, began.elapsed())
        });
        (call, cancelled)
    };
    let (lookup, lookup_cancelled) = start("tax", "lookup");
    let (rates, _) = start("tax", "rates");
    let (file, _) = start("tax", "file_return");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let forced = Instant::now();
    for tool in ["lookup", "rates", "file_return"] {
        operator.force_open("tax", tool, "in-flight test").await;
    }

    let (result, took) = lookup.await.unwrap();
    match result {
        Err(ClientError::CircuitOpen { state, .. }) => assert_eq!(state, BreakerState::ForcedOpen),
        other => panic!("the read under \"end\" was not ended by the open breaker: {other:?}"),
    }
    assert!(
        took < Duration::from_secs(10),
        "the read under \"end\" ran {took:?}, toward its 20 s deadline"
    );
    flag_set(
        "the ended call's transport cancelled",
        &lookup_cancelled,
        Duration::from_secs(5),
    )
    .await;

    // The other two were not ended by the open: each ran to its deadline.
    let (result, took) = rates.await.unwrap();
    assert!(
        matches!(result, Err(ClientError::Timeout { .. })),
        "the read under \"finish\" ended as {result:?}"
    );
    assert!(took >= Duration::from_millis(2_900), "it ran {took:?}");
    let (result, took) = file.await.unwrap();
    assert!(
        matches!(result, Err(ClientError::Timeout { .. })),
        "the write ended as {result:?}"
    );
    assert!(took >= Duration::from_millis(2_900), "it ran {took:?}");
    assert!(forced.elapsed() >= Duration::from_millis(2_500));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_runs_to_its_deadline_even_where_the_policy_says_read_and_end() {
    let cluster = TestCluster::start(1).await;
    let operator = cluster.operator(0);
    let version = operator.apply_policy(POLICY).await;
    let client = Arc::new(connected(cluster.config("writer", &[0])).await);
    policy_seen(&client, version).await;
    let cancelled = Arc::new(AtomicBool::new(false));
    let write = {
        let (client, seen) = (client.clone(), cancelled.clone());
        tokio::spawn(async move {
            let t = ToolRef::new("tax", "stamp").unwrap();
            let request = WriteRequest::new(t, "stamp-return-1", "return-1", b"{}");
            let journey = Journey::new("stamp", Duration::from_secs(60), Duration::ZERO);
            let began = Instant::now();
            let result = client
                .write(&journey, &request, |ctx| {
                    let seen = seen.clone();
                    async move {
                        hangs(seen, ctx.cancel).await?;
                        Ok(WriteSuccess {
                            operation_id: "op-1".into(),
                            result: Vec::new(),
                        })
                    }
                })
                .await;
            (result, began.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    operator.force_open("tax", "stamp", "in-flight test").await;
    let (result, took) = write.await.unwrap();
    // Ended at its deadline, its outcome unknown; never at the open.
    assert!(
        matches!(result, Err(ClientError::AmbiguousOutcome { .. })),
        "the write ended as {result:?}"
    );
    assert!(took >= Duration::from_millis(2_900), "it ran {took:?}");
    cluster.shutdown().await;
}
