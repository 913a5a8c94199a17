//! With the cluster out of reach, decisions follow `on_partition` and say
//! they are degraded; once it is back, the view catches up.
//!
//! The replica reaches its node through a TCP proxy; cutting the proxy is a
//! partition between replica and cluster (every connection dropped, new ones
//! refused) while the cluster itself keeps running, so an operator can change
//! state meanwhile and the test can show the view catching up on it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{
    Admission, ClientError, Evidence, Journey, OutcomeClass, ToolFailure, ToolRef,
};
use std::time::Duration;
use support::{connected, test_config, wait_for, Proxy, TestCluster};

const POLICY: &str = r#"
[defaults.breaker]
consecutive_failures = 4
open_ms = 60000

[servers.search.breaker]
consecutive_failures = 100

[servers.search.tools.web_search]
on_partition = "fail_open_local"

[servers.search.tools.web_search.breaker]
consecutive_failures = 4

[servers.payments.tools.refund_status]
on_partition = "fail_closed"
"#;

fn failing() -> Result<(), ToolFailure> {
    Err(ToolFailure::new(
        OutcomeClass::ToolError,
        "result had isError set",
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decisions_follow_on_partition_while_cut_off_and_the_view_catches_up() {
    tracing::info!("one node behind a proxy; the replica sees a fresh view");
    let cluster = TestCluster::start(1).await;
    let op = cluster.operator(0);
    let version = op.apply_policy(POLICY).await;
    let proxy = Proxy::start(cluster.addrs[0].clone()).await;
    let client = connected(test_config(vec![proxy.addr.clone()], "replica-p")).await;
    wait_for("policy on the replica", Duration::from_secs(10), || {
        let v = client.view_status().policy_version;
        async move { (v == Some(version)).then_some(()) }
    })
    .await;
    let search = ToolRef::new("search", "web_search").unwrap();
    let refunds = ToolRef::new("payments", "refund_status").unwrap();
    let docs = ToolRef::new("search", "fetch_doc").unwrap();
    assert!(!client.admit(&search).degraded);
    let revision_before = client.view_status().revision.unwrap();

    tracing::info!("cut the replica off from the cluster");
    proxy.cut();
    wait_for("the view to go stale", Duration::from_secs(10), || {
        let fresh = client.view_status().fresh;
        async move { (!fresh).then_some(()) }
    })
    .await;

    tracing::info!("fail_open_local: calls go on, degraded, under a local breaker");
    let journey = Journey::new("partitioned", Duration::from_secs(120), Duration::ZERO);
    let out = client
        .call(&journey, &search, |_| async {
            Ok::<_, ToolFailure>("results")
        })
        .await
        .unwrap();
    assert!(out.degraded);
    let decision = client.admit(&search);
    assert!(decision.degraded && decision.allows());
    for _ in 0..4 {
        let err = client
            .call(&journey, &search, |_| async { failing() })
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "tool_failed");
    }
    let decision = client.admit(&search);
    assert!(decision.degraded);
    assert!(
        matches!(decision.admission, Admission::Reject { .. }),
        "{decision:?}"
    );
    let err = client
        .call(&journey, &search, |_| async {
            Ok::<_, ToolFailure>("never")
        })
        .await
        .unwrap_err();
    match &err {
        ClientError::CircuitOpen { degraded, .. } => assert!(degraded),
        other => panic!("expected a degraded circuit_open, got {other}"),
    }
    assert!(err.to_string().contains("unreachable"));

    tracing::info!("fail_closed: refused outright, degraded");
    let decision = client.admit(&refunds);
    assert!(decision.degraded && !decision.allows());
    let err = client
        .call(&journey, &refunds, |_| async {
            Ok::<_, ToolFailure>("never")
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "partition_fail_closed", "{err}");
    assert!(client.metrics().degraded_decisions >= 4);

    tracing::info!("meanwhile an operator forces a tool open and blocks writes");
    op.force_open("search", "fetch_doc", "incident 42").await;
    op.kill_switch(true, "incident 42").await;

    tracing::info!("heal; the view catches up and decisions are no longer degraded");
    proxy.heal();
    wait_for(
        "the view to be fresh again",
        Duration::from_secs(20),
        || {
            let fresh = client.view_status().fresh;
            async move { fresh.then_some(()) }
        },
    )
    .await;
    wait_for(
        "the forced-open breaker in the view",
        Duration::from_secs(10),
        || {
            let d = client.admit(&docs);
            async move { matches!(d.admission, Admission::Reject { .. }).then_some(d) }
        },
    )
    .await;
    let status = client.view_status();
    assert!(status.writes_blocked);
    assert!(status.revision.unwrap() > revision_before);
    let decision = client.admit(&refunds);
    assert!(!decision.degraded && decision.allows());
    let decision = client.admit(&docs);
    assert!(!decision.degraded);
    tracing::info!("the refused agent is told who forced the tool open and why");
    let err = client
        .call(&journey, &docs, |_| async { Ok::<_, ToolFailure>("never") })
        .await
        .unwrap_err();
    match &err {
        ClientError::CircuitOpen { forced, .. } => assert_eq!(
            forced.as_ref().map(|f| (f.by.as_str(), f.reason.as_str())),
            Some(("test", "incident 42"))
        ),
        other => panic!("expected circuit_open, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("incident 42") && text.contains("test"),
        "{text}"
    );
    assert!(client.metrics().watch_reconnects >= 1);
    client.close().await;
    cluster.shutdown().await;
}

/// Issue 18 item 2: under `fail_open_local`, what the fleet (or an
/// operator) had closed off before the replica was cut off stays closed
/// off: a FORCED_OPEN tool until an operator's change arrives, an OPEN one
/// until its own end. A tool the fleet had left closed is judged by the
/// replica's local breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_off_replica_keeps_what_the_fleet_closed_off() {
    const POLICY: &str = r#"
[defaults]
on_partition = "fail_open_local"

[servers.search.breaker]
consecutive_failures = 100

[servers.search.tools.web_search.breaker]
consecutive_failures = 2
open_ms = 6000
"#;
    let cluster = TestCluster::start(1).await;
    let op = cluster.operator(0);
    let version = op.apply_policy(POLICY).await;
    let proxy = Proxy::start(cluster.addrs[0].clone()).await;
    let client = connected(test_config(vec![proxy.addr.clone()], "replica-q")).await;
    wait_for("policy on the replica", Duration::from_secs(10), || {
        let v = client.view_status().policy_version;
        async move { (v == Some(version)).then_some(()) }
    })
    .await;
    let forced = ToolRef::new("search", "fetch_doc").unwrap();
    let tripped = ToolRef::new("search", "web_search").unwrap();
    let healthy = ToolRef::new("search", "suggest").unwrap();
    let journey = Journey::new("cut-off", Duration::from_secs(120), Duration::ZERO);

    tracing::info!("an operator forces one tool open; another trips on its own failures");
    op.force_open("search", "fetch_doc", "vendor incident")
        .await;
    for _ in 0..2 {
        let _ = client
            .call(&journey, &tripped, |_| async {
                Err::<(), _>(ToolFailure::new(OutcomeClass::ServerError, "503"))
            })
            .await;
    }
    wait_for(
        "the forced refusal in the view",
        Duration::from_secs(10),
        || {
            let a = client.admit(&forced);
            async move { matches!(a.admission, Admission::Reject { .. }).then_some(()) }
        },
    )
    .await;
    wait_for(
        "the tripped breaker in the view",
        Duration::from_secs(10),
        || {
            let b = client.admit(&tripped);
            async move { matches!(b.admission, Admission::Reject { .. }).then_some(()) }
        },
    )
    .await;

    tracing::info!("cut off: the cached refusals hold, the healthy tool is judged locally");
    proxy.cut();
    wait_for("the view to go stale", Duration::from_secs(15), || {
        let fresh = client.view_status().fresh;
        async move { (!fresh).then_some(()) }
    })
    .await;
    let decision = client.admit(&forced);
    assert!(decision.degraded, "{decision:?}");
    assert!(
        matches!(decision.admission, Admission::Reject { .. }),
        "{decision:?}"
    );
    assert_eq!(
        decision.forced.as_ref().map(|f| f.reason.as_str()),
        Some("vendor incident")
    );
    let err = client
        .call(&journey, &forced, |_| async {
            Ok::<_, ToolFailure>("never")
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "circuit_open", "{err}");
    // The refusal says it came from the fleet's last view, how old, and
    // which journey it ended.
    match &err {
        ClientError::CircuitOpen { evidence, .. } => {
            assert!(matches!(evidence, Evidence::Cached { .. }), "{err}")
        }
        other => panic!("expected circuit_open, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("from the fleet's view as it was") && text.contains("(intent cut-off)"),
        "{text}"
    );
    assert_eq!(err.intent_id(), Some("cut-off"));
    let decision = client.admit(&healthy);
    assert!(decision.degraded && decision.allows(), "{decision:?}");
    assert!(
        matches!(decision.evidence, Evidence::Local { .. }),
        "the healthy tool is judged by this replica alone: {decision:?}"
    );

    tracing::info!("the tripped tool's OPEN period ends (6 s, judged 2 s late); then it is local");
    wait_for(
        "the cached OPEN period to end",
        Duration::from_secs(15),
        || {
            let d = client.admit(&tripped);
            // The local breaker, which saw the same failures, now decides: it
            // lets a probe through (or the call) rather than refuse outright.
            async move { (!matches!(d.admission, Admission::Reject { .. })).then_some(()) }
        },
    )
    .await;
    // The forced-open one still holds: only an operator lifts it.
    assert!(!client.admit(&forced).allows());
    client.close().await;
    cluster.shutdown().await;
}
