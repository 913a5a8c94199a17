//! In HALF_OPEN, sixteen replicas race and exactly `concurrent_probes`
//! calls reach the tool: permits are granted through the log, fleet-wide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{Admission, BreakerState, ClientError, Journey, ToolFailure, ToolRef};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{connected, wait_for, TestCluster};
use tokio::sync::Barrier;

const CONCURRENT_PROBES: u32 = 2;
const REPLICAS: usize = 16;

const POLICY: &str = r#"
[servers.billing.breaker]
consecutive_failures = 50

[servers.billing.tools.charge_status]
timeout_ms = 5000

[servers.billing.tools.charge_status.breaker]
consecutive_failures = 4
open_ms = 1500
concurrent_probes = 2
probe_successes = 5
probe_lease_ms = 20000
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_racing_replicas_send_exactly_concurrent_probes_calls() {
    tracing::info!("one node, sixteen replicas, a policy allowing two probes");
    let cluster = TestCluster::start(1).await;
    let version = cluster.operator(0).apply_policy(POLICY).await;
    let mut replicas = Vec::new();
    for i in 0..REPLICAS {
        let client = connected(cluster.config(&format!("replica-{i}"), &[0])).await;
        wait_for("policy on the replica", Duration::from_secs(10), || {
            let v = client.view_status().policy_version;
            async move { (v == Some(version)).then_some(()) }
        })
        .await;
        replicas.push(client);
    }
    let tool = ToolRef::new("billing", "charge_status").unwrap();

    tracing::info!("trip the breaker with four tool errors from one replica");
    let journey = Journey::new("trip", Duration::from_secs(60), Duration::ZERO);
    for _ in 0..4 {
        let err = replicas[0]
            .call(&journey, &tool, |_ctx| async {
                Err::<(), _>(ToolFailure::new(
                    fusebox_client::OutcomeClass::ToolError,
                    "isError",
                ))
            })
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "tool_failed");
    }
    replicas[0].flush_reports();

    tracing::info!("wait until every replica sees the open period over (probe next)");
    for client in &replicas {
        wait_for(
            "the breaker to want a probe",
            Duration::from_secs(15),
            || {
                let d = client.admit(&tool);
                async move { matches!(d.admission, Admission::Probe { .. }).then_some(()) }
            },
        )
        .await;
    }

    tracing::info!("sixteen replicas call at once; the tool holds each call for a while");
    let reached = Arc::new(AtomicU32::new(0));
    let barrier = Arc::new(Barrier::new(REPLICAS));
    let mut racers = Vec::new();
    for client in &replicas {
        let client = client.clone();
        let (tool, reached, barrier) = (tool.clone(), reached.clone(), barrier.clone());
        racers.push(tokio::spawn(async move {
            let journey = Journey::new("race", Duration::from_secs(30), Duration::ZERO);
            barrier.wait().await;
            client
                .call(&journey, &tool, |_ctx| {
                    let reached = reached.clone();
                    async move {
                        reached.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(1_500)).await;
                        Ok::<_, ToolFailure>("healthy")
                    }
                })
                .await
        }));
    }
    let mut probes = 0;
    let mut denied = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(out) => {
                assert!(out.probe, "an admitted call in half-open is a probe");
                probes += 1;
            }
            Err(ClientError::CircuitOpen { state, .. }) => {
                assert!(matches!(state, BreakerState::HalfOpen | BreakerState::Open));
                denied += 1;
            }
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
    assert_eq!(reached.load(Ordering::SeqCst), CONCURRENT_PROBES);
    assert_eq!(probes, CONCURRENT_PROBES);
    assert_eq!(denied, REPLICAS as u32 - CONCURRENT_PROBES);
    let granted: u64 = replicas.iter().map(|c| c.metrics().probes_granted).sum();
    assert_eq!(granted, u64::from(CONCURRENT_PROBES));

    tracing::info!("the probes' successes were counted on the breaker");
    let op = cluster.operator(0);
    wait_for("probe successes recorded", Duration::from_secs(10), || {
        let op = &op;
        async move {
            let b = op.breaker("billing", "charge_status").await;
            (b.probe_successes == CONCURRENT_PROBES).then_some(())
        }
    })
    .await;
    for client in replicas {
        client.close().await;
    }
    cluster.shutdown().await;
}
