//! The routing helper moves off a tool the fleet penalized.
//!
//! Two equivalent search tools disclose their latency; the faster one is
//! preferred. Then the fleet reports the fast one running far above its
//! disclosed p95: the cluster penalizes it, the flag reaches a replica
//! through its watch stream, and that replica's router moves to the
//! equivalent, without asking the cluster.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{Journey, ToolFailure, ToolRef};
use fusebox_core::disclosure::format_utc;
use fusebox_core::OutcomeClass as CoreClass;
use fusebox_core::Timestamp;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::tools_client::ToolsClient;
use fusebox_proto::v1::ReportOutcomesRequest;
use fusebox_proto::v1::{ImportToolsRequest, ManifestTool, Outcome, OutcomeClass};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::{channel_to, connected, wait_for, TestCluster, NS};

const SERVER: &str = "search-vendor";

fn block(p50_ms: u64, p95_ms: u64, p99_ms: u64) -> String {
    block_with(p50_ms, p95_ms, p99_ms, true, true)
}

fn block_with(p50_ms: u64, p95_ms: u64, p99_ms: u64, idempotent: bool, retry_safe: bool) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let yesterday = now.as_millis() as u64 - 24 * 3600 * 1000;
    let observed_at = format_utc(Timestamp::from_millis(yesterday));
    format!(
        r#"{{"version": "1.0", "observed_at": "{observed_at}",
            "measurement_window_days": 7, "sample_size": 5000, "region": "us-east-1",
            "p50_ms": {p50_ms}, "p95_ms": {p95_ms}, "p99_ms": {p99_ms}, "timeout_ms": 30000,
            "idempotent": {idempotent}, "retry_safe": {retry_safe}, "streaming": false,
            "methodology_url": "https://example.com/latency-methodology"}}"#
    )
}

fn tool(name: &str, disclosure: String) -> ManifestTool {
    ManifestTool {
        tool: name.into(),
        read_only_hint: Some(true),
        latency_disclosure_json: Some(disclosure),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_router_moves_off_a_penalized_tool_to_its_equivalent() {
    tracing::info!("one node; two equivalent tools disclose their latency");
    let cluster = TestCluster::start(1).await;
    let import = ImportToolsRequest {
        namespace: NS.into(),
        server: SERVER.into(),
        tools: vec![
            tool("search_fast", block(80, 200, 400)),
            tool("search_steady", block(150, 450, 900)),
        ],
        actor: "test".into(),
        ..Default::default()
    };
    ToolsClient::new(channel_to(&cluster.addrs[0]))
        .import(import)
        .await
        .expect("import");

    let client = connected(cluster.config("replica-router", &[0])).await;
    let fast = ToolRef::new(SERVER, "search_fast").unwrap();
    let steady = ToolRef::new(SERVER, "search_steady").unwrap();
    let equivalents = [fast.clone(), steady.clone()];
    wait_for("the fast tool preferred", Duration::from_secs(10), || {
        let picked = client.route(&equivalents).cloned();
        let want = fast.clone();
        async move { (picked == Some(want)).then_some(()) }
    })
    .await;

    tracing::info!("the fleet sees search_fast run at 5x its disclosed p95");
    let outcome = Outcome {
        server: SERVER.into(),
        tool: "search_fast".into(),
        class: OutcomeClass::Success as i32,
        duration_ms: 1_000,
        ..Default::default()
    };
    for seq in 0..3u64 {
        let request = ReportOutcomesRequest {
            namespace: NS.into(),
            replica_id: format!("reporter-{seq}"),
            batch_seq: seq,
            outcomes: vec![outcome.clone(); 60],
            ..Default::default()
        };
        BreakersClient::new(channel_to(&cluster.addrs[0]))
            .report_outcomes(request)
            .await
            .expect("report");
    }

    tracing::info!("the penalty reaches the replica, and the router moves");
    wait_for(
        "the penalty on the replica",
        Duration::from_secs(15),
        || {
            let penalized = client.is_penalized(&fast);
            async move { penalized.then_some(()) }
        },
    )
    .await;
    assert!(!client.is_penalized(&steady));
    wait_for("the router to move", Duration::from_secs(15), || {
        let picked = client.route(&equivalents).cloned();
        let want = steady.clone();
        async move { (picked == Some(want)).then_some(()) }
    })
    .await;
    client.close().await;
    cluster.shutdown().await;
}

const RETRY_POLICY: &str = r#"
[defaults]
timeout_ms = 10000

[defaults.breaker]
consecutive_failures = 1000

[defaults.retry]
max_attempts = 3
backoff_initial_ms = 10
backoff_max_ms = 40
"#;

/// Attempts `call` makes on `tool` when every attempt fails with `class`.
async fn attempts(client: &fusebox_client::Client, tool: &ToolRef, class: CoreClass) -> u32 {
    let journey = Journey::new(
        "turn-retry",
        Duration::from_secs(20),
        Duration::from_secs(1),
    );
    let tries = Arc::new(AtomicU32::new(0));
    let t = tries.clone();
    let result = client
        .call(&journey, tool, |_| {
            let t = t.clone();
            async move {
                t.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(ToolFailure::new(class, "failed"))
            }
        })
        .await;
    assert!(result.is_err());
    tries.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disclosed_retry_safe_and_idempotent_govern_retries() {
    tracing::info!("the policy would retry every read three times");
    let cluster = TestCluster::start(1).await;
    let version = cluster.operator(0).apply_policy(RETRY_POLICY).await;
    let import = ImportToolsRequest {
        namespace: NS.into(),
        server: SERVER.into(),
        tools: vec![
            tool("search_safe", block_with(80, 200, 400, true, true)),
            tool("search_unsafe", block_with(80, 200, 400, true, false)),
            tool("search_once", block_with(80, 200, 400, false, true)),
        ],
        actor: "test".into(),
        ..Default::default()
    };
    ToolsClient::new(channel_to(&cluster.addrs[0]))
        .import(import)
        .await
        .expect("import");
    let client = connected(cluster.config("replica-retry", &[0])).await;
    let safe = ToolRef::new(SERVER, "search_safe").unwrap();
    let unsafe_ = ToolRef::new(SERVER, "search_unsafe").unwrap();
    let once = ToolRef::new(SERVER, "search_once").unwrap();
    wait_for(
        "policy and disclosures on the replica",
        Duration::from_secs(10),
        || {
            let ready = client.view_status().policy_version == Some(version)
                && client.route(std::slice::from_ref(&once)).is_some()
                && client.tool_deadline(&once) == Duration::from_millis(480);
            async move { ready.then_some(()) }
        },
    )
    .await;

    tracing::info!("retry_safe: the policy's three attempts");
    assert_eq!(attempts(&client, &safe, CoreClass::Transport).await, 3);
    tracing::info!("not retry_safe: one attempt, whatever the policy says");
    assert_eq!(attempts(&client, &unsafe_, CoreClass::Transport).await, 1);
    tracing::info!("retry_safe but not idempotent: transport failures only");
    assert_eq!(attempts(&client, &once, CoreClass::Transport).await, 3);
    assert_eq!(attempts(&client, &once, CoreClass::ServerError).await, 1);
    client.close().await;
    cluster.shutdown().await;
}
