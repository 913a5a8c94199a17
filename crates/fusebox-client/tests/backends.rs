//! Per-backend scoping across replicas (issue 18 item 9): under
//! `scope = "tool_and_backend"`, one replica's failures on backend A open
//! A's breaker for the whole fleet, while backend B of the same tool stays
//! closed everywhere.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{Admission, ClientError, Journey, OutcomeClass, ToolFailure, ToolRef};
use std::time::Duration;
use support::{connected, wait_for, TestCluster};

const POLICY: &str = r#"
[servers.payments.breaker]
consecutive_failures = 50

[servers.payments.tools.charge]
scope = "tool_and_backend"
timeout_ms = 2000

[servers.payments.tools.charge.retry]
max_attempts = 1

[servers.payments.tools.charge.breaker]
consecutive_failures = 3
open_ms = 60000
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_backends_failures_leave_another_backend_of_the_tool_closed_fleet_wide() {
    let cluster = TestCluster::start(1).await;
    let version = cluster.operator(0).apply_policy(POLICY).await;
    let mut replicas = Vec::new();
    for i in 0..2 {
        let client = connected(cluster.config(&format!("replica-{i}"), &[0])).await;
        wait_for("policy on the replica", Duration::from_secs(10), || {
            let v = client.view_status().policy_version;
            async move { (v == Some(version)).then_some(()) }
        })
        .await;
        replicas.push(client);
    }
    let stripe = ToolRef::new("payments", "charge")
        .unwrap()
        .on_backend("stripe")
        .unwrap();
    let adyen = ToolRef::new("payments", "charge")
        .unwrap()
        .on_backend("adyen")
        .unwrap();

    // Replica 0 sees stripe fail until its breaker opens.
    let journey = Journey::new("charges", Duration::from_secs(60), Duration::ZERO);
    for _ in 0..10 {
        let called = replicas[0]
            .call(&journey, &stripe, |_| async {
                Err::<(), _>(ToolFailure::new(OutcomeClass::ServerError, "503"))
            })
            .await;
        if matches!(called, Err(ClientError::CircuitOpen { .. })) {
            break;
        }
    }
    // Replica 1, which never called stripe, learns of it from the cluster.
    wait_for(
        "stripe's breaker open on the other replica",
        Duration::from_secs(10),
        || {
            let d = replicas[1].admit(&stripe);
            async move { matches!(d.admission, Admission::Reject { .. }).then_some(()) }
        },
    )
    .await;
    for (i, replica) in replicas.iter().enumerate() {
        let decision = replica.admit(&adyen);
        assert!(
            decision.allows(),
            "replica {i}: adyen must stay closed while stripe is open: {decision:?}"
        );
        let charged = replica
            .call(&journey, &adyen, |_| async {
                Ok::<_, ToolFailure>("charged")
            })
            .await
            .expect("adyen is called");
        assert_eq!(charged.value, "charged");
    }
    for replica in replicas {
        replica.close().await;
    }
    cluster.shutdown().await;
}
