//! One replica's timeouts open the breaker for the whole fleet.
//!
//! Three nodes, four agent replicas spread over them. Replica 0 calls a tool
//! that has gone slow; its fourth timeout opens the breaker through the
//! cluster, and every other replica then rejects that tool from its local
//! view, without calling it, within a bounded delay. A sibling tool keeps
//! working everywhere.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{Admission, ClientError, Journey, Layer, ToolFailure, ToolRef};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{connected, wait_for, TestCluster};

const POLICY: &str = r#"
[defaults]
timeout_ms = 2000

[defaults.breaker]
consecutive_failures = 4
open_ms = 60000

# The server breaker trips later than the tool's, so one sick tool does not
# take its siblings on the same server offline.
[servers.tax-vendor.breaker]
consecutive_failures = 20

[servers.tax-vendor.tools.tax_lookup]
timeout_ms = 150

[servers.tax-vendor.tools.tax_lookup.breaker]
consecutive_failures = 4
"#;

/// How long the fleet may take to learn of the trip (generous: shared CI).
const PROPAGATION_BOUND: Duration = Duration::from_secs(10);

async fn slow_tool(calls: Arc<AtomicU32>) -> Result<&'static str, ToolFailure> {
    calls.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok("too late")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_timeouts_on_one_replica_open_the_breaker_for_every_replica() {
    tracing::info!("form a 3-node cluster and apply the policy");
    let cluster = TestCluster::start(3).await;
    let version = cluster.operator(0).apply_policy(POLICY).await;
    let mut replicas = Vec::new();
    for i in 0..4 {
        let config = cluster.config(&format!("replica-{i}"), &[i % 3, (i + 1) % 3]);
        let client = connected(config).await;
        let policy_seen = wait_for("policy on the replica", Duration::from_secs(10), || {
            let v = client.view_status().policy_version;
            async move { (v == Some(version)).then_some(()) }
        });
        policy_seen.await;
        replicas.push(client);
    }
    let tax = ToolRef::new("tax-vendor", "tax_lookup").unwrap();
    let geo = ToolRef::new("geocoder", "geocode").unwrap();
    let rates = ToolRef::new("tax-vendor", "tax_rates").unwrap();
    let tax_calls = Arc::new(AtomicU32::new(0));

    tracing::info!("replica 0 pays four timeouts on the slow tool");
    let journey = Journey::new("turn-1", Duration::from_secs(60), Duration::from_secs(1));
    for _ in 0..4 {
        let calls = tax_calls.clone();
        let err = replicas[0]
            .call(&journey, &tax, |_ctx| slow_tool(calls.clone()))
            .await
            .unwrap_err();
        match err {
            ClientError::Timeout { layer, .. } => assert_eq!(layer, Layer::Tool),
            other => panic!("expected a tool timeout, got {other}"),
        }
    }
    assert_eq!(tax_calls.load(Ordering::SeqCst), 4);
    replicas[0].flush_reports();
    let tripped_at = Instant::now();

    tracing::info!("every replica learns it and rejects locally");
    for (i, client) in replicas.iter().enumerate() {
        wait_for(
            &format!("replica {i} to see the breaker open"),
            PROPAGATION_BOUND,
            || {
                let d = client.admit(&tax);
                async move { matches!(d.admission, Admission::Reject { .. }).then_some(()) }
            },
        )
        .await;
        assert!(!client.admit(&tax).degraded);
    }
    let learned_in = tripped_at.elapsed();
    assert!(learned_in < PROPAGATION_BOUND);

    for client in &replicas[1..] {
        let calls = tax_calls.clone();
        let started = Instant::now();
        let err = client
            .call(&journey, &tax, |_ctx| slow_tool(calls.clone()))
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(150),
            "rejected without waiting"
        );
        match &err {
            ClientError::CircuitOpen {
                tool,
                whole_server,
                retry_after_ms,
                degraded,
                ..
            } => {
                assert_eq!(tool, "tax_lookup");
                assert!(!whole_server);
                assert!(!degraded);
                assert!(retry_after_ms.is_some_and(|ms| ms > 0));
            }
            other => panic!("expected circuit_open, got {other}"),
        }
        assert_eq!(err.kind(), "circuit_open");
        assert_eq!(err.intent_id(), Some("turn-1"), "{err}");
        assert!(err.to_string().ends_with("(intent turn-1)"), "{err}");
        assert!(err
            .to_string()
            .contains("tax_lookup is unavailable for about"));
    }
    assert_eq!(
        tax_calls.load(Ordering::SeqCst),
        4,
        "no replica called the open tool"
    );

    tracing::info!("other tools, on the same server and elsewhere, keep working");
    for client in &replicas {
        for other in [&geo, &rates] {
            let out = client
                .call(&journey, other, |_ctx| async { Ok::<_, ToolFailure>(42) })
                .await
                .unwrap();
            assert_eq!(out.value, 42);
            assert!(!out.degraded);
        }
    }
    let m = replicas[1].metrics();
    assert_eq!(m.rejects, 1);
    assert_eq!(m.calls, 2);
    tracing::info!(
        learned_in_ms = learned_in.as_millis() as u64,
        "fleet learned of the trip"
    );

    tracing::info!("every replica reported: the next heartbeats tell each the fleet's size");
    for client in &replicas {
        client.flush_reports();
    }
    for (i, client) in replicas.iter().enumerate() {
        wait_for(
            &format!("replica {i} to learn the fleet is four"),
            Duration::from_secs(20),
            || {
                let size = client.view_status().fleet_replicas;
                async move { (size == Some(4)).then_some(()) }
            },
        )
        .await;
    }
    for client in replicas {
        client.close().await;
    }
    cluster.shutdown().await;
}
