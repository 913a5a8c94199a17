//! The routing helper moves off a tool the fleet penalized, and back.
//!
//! Two equivalent search tools disclose their latency; the faster one is
//! preferred. Then the fast one turns slow for three replicas calling it
//! through the SDK: the cluster penalizes it from their reports, the flag
//! reaches every replica through its watch stream, and each router moves to
//! the equivalent without asking the cluster. Once the tool is fast again
//! and the policy's observation window has passed, the penalty clears and
//! the routers move back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{Journey, ToolFailure, ToolRef};
use fusebox_core::disclosure::format_utc;
use fusebox_core::policy::{EffectClass, PolicyDocument};
use fusebox_core::OutcomeClass as CoreClass;
use fusebox_core::{ServerName, Timestamp, ToolName};
use fusebox_proto::v1::tools_client::ToolsClient;
use fusebox_proto::v1::{ImportToolsRequest, ManifestTool};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::{channel_to, connected, settled, wait_for, TestCluster, NS};

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

/// Five-second observation window (the shortest a policy may set), so the
/// penalty's clearing is seen within the test.
const WINDOW_POLICY: &str = "[latency]\nwindow_ms = 5000\n";

/// Every replica calls `tool` `calls_each` times at once through the SDK, the
/// scripted tool taking `latency` per call; each outcome (with its measured
/// duration) is reported by the SDK as usual.
async fn fleet_calls(
    replicas: &[fusebox_client::Client],
    tool: &ToolRef,
    calls_each: usize,
    latency: Duration,
) {
    let mut calls = tokio::task::JoinSet::new();
    for (r, client) in replicas.iter().enumerate() {
        for i in 0..calls_each {
            let (client, tool) = (client.clone(), tool.clone());
            calls.spawn(async move {
                let journey = Journey::new(
                    format!("turn-{r}-{i}"),
                    Duration::from_secs(20),
                    Duration::from_secs(1),
                );
                client
                    .call(&journey, &tool, |_| async move {
                        tokio::time::sleep(latency).await;
                        Ok::<_, ToolFailure>(())
                    })
                    .await
                    .expect("the tool answers within its deadline");
            });
        }
    }
    while let Some(done) = calls.join_next().await {
        done.expect("call task");
    }
}

async fn wait_route(
    what: &str,
    client: &fusebox_client::Client,
    equivalents: &[ToolRef],
    want: &ToolRef,
) {
    wait_for(what, Duration::from_secs(20), || {
        let picked = client.route(equivalents).cloned();
        let want = want.clone();
        async move { (picked == Some(want)).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_tool_is_penalized_across_replicas_and_cleared_after_the_window() {
    tracing::info!("three nodes, a 5 s window; two equivalent tools disclose their latency");
    let cluster = TestCluster::start(3).await;
    cluster.operator(0).apply_policy(WINDOW_POLICY).await;
    let import = ImportToolsRequest {
        namespace: NS.into(),
        server: SERVER.into(),
        tools: vec![
            // Deadline p99 x 1.2 = 1.2 s: the slow calls below stay within it.
            tool("search_fast", block(80, 200, 1_000)),
            tool("search_steady", block(150, 450, 1_000)),
        ],
        actor: "test".into(),
        ..Default::default()
    };
    let channel = channel_to(&cluster.addrs[1]);
    settled(|| {
        let (mut tools, import) = (ToolsClient::new(channel.clone()), import.clone());
        async move { tools.import(import).await }
    })
    .await;

    let replicas = [
        connected(cluster.config("replica-a", &[0])).await,
        connected(cluster.config("replica-b", &[1])).await,
        connected(cluster.config("replica-c", &[2])).await,
    ];
    let fast = ToolRef::new(SERVER, "search_fast").unwrap();
    let steady = ToolRef::new(SERVER, "search_steady").unwrap();
    let equivalents = [fast.clone(), steady.clone()];
    for client in &replicas {
        wait_route("the fast tool preferred", client, &equivalents, &fast).await;
    }

    tracing::info!("search_fast turns slow: 500 ms a call, its disclosed p95 is 200 ms");
    // A report batch no node takes within its deadline is dropped by design,
    // so the fleet keeps calling (a round every second, well inside the
    // window) until the penalty is in force, for at most eight rounds.
    for _ in 0..8 {
        fleet_calls(&replicas, &fast, 40, Duration::from_millis(500)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if replicas.iter().all(|c| c.is_penalized(&fast)) {
            break;
        }
    }
    tracing::info!("the penalty reaches every replica, and every router moves");
    for client in &replicas {
        wait_route("the router to move off", client, &equivalents, &steady).await;
        assert!(client.is_penalized(&fast));
        assert!(!client.is_penalized(&steady));
    }

    tracing::info!("search_fast is fast again; once the window passes the penalty clears");
    let fast_again = async {
        for _ in 0..8 {
            fleet_calls(&replicas, &fast, 5, Duration::from_millis(20)).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let cleared = async {
        for client in &replicas {
            wait_route("the router to move back", client, &equivalents, &fast).await;
            assert!(!client.is_penalized(&fast));
        }
    };
    tokio::join!(fast_again, cleared);
    for client in replicas {
        client.close().await;
    }
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

/// A one-node cluster under [`RETRY_POLICY`] with `tools` imported, and a
/// replica connected to it; also the policy's version.
async fn retrying_cluster(
    tools: Vec<ManifestTool>,
    replica: &str,
) -> (TestCluster, fusebox_client::Client, u64) {
    let cluster = TestCluster::start(1).await;
    let version = cluster.operator(0).apply_policy(RETRY_POLICY).await;
    let import = ImportToolsRequest {
        namespace: NS.into(),
        server: SERVER.into(),
        tools,
        actor: "test".into(),
        ..Default::default()
    };
    ToolsClient::new(channel_to(&cluster.addrs[0]))
        .import(import)
        .await
        .expect("import");
    let client = connected(cluster.config(replica, &[0])).await;
    (cluster, client, version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disclosed_retry_safe_and_idempotent_govern_retries() {
    tracing::info!("the policy would retry every read three times");
    let tools = vec![
        tool("search_safe", block_with(80, 200, 400, true, true)),
        tool("search_unsafe", block_with(80, 200, 400, true, false)),
        tool("search_once", block_with(80, 200, 400, false, true)),
    ];
    let (cluster, client, version) = retrying_cluster(tools, "replica-retry").await;
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

/// A disclosure that documents two degradation modes: a dependency outage
/// the tool answers at once with 503, and a queue it serves from, slowly.
fn block_with_modes() -> String {
    let plain = block_with(80, 200, 400, true, true);
    let modes = r#", "degradation_modes": [
        {"trigger": "downstream_dependency_unavailable", "behavior": "fail fast with 503", "expected_p95_ms": 200},
        {"trigger": "queue_depth>50", "behavior": "queue and serve", "expected_p95_ms": 4500}]}"#;
    format!("{}{modes}", plain.trim_end().trim_end_matches('}'))
}

/// Calls `tool` until an attempt succeeds or the call gives up; every
/// attempt before `succeed_on` fails with `failure`. Returns the deadline
/// each attempt was given and the call's error message, if it failed.
async fn attempts_in_mode(
    client: &fusebox_client::Client,
    tool: &ToolRef,
    failure: ToolFailure,
    succeed_on: u32,
) -> (Vec<Duration>, Option<String>) {
    let journey = Journey::new("turn-mode", Duration::from_secs(20), Duration::from_secs(1));
    let deadlines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = deadlines.clone();
    let result = client
        .call(&journey, tool, |ctx| {
            let (seen, failure) = (seen.clone(), failure.clone());
            async move {
                let mut seen = seen.lock().unwrap();
                seen.push(ctx.deadline);
                if seen.len() as u32 >= succeed_on {
                    Ok(())
                } else {
                    Err(failure)
                }
            }
        })
        .await;
    let deadlines = deadlines.lock().unwrap().clone();
    (deadlines, result.err().map(|e| e.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disclosed_degradation_modes_say_when_to_stop_and_how_long_to_wait() {
    tracing::info!("the policy would retry every read three times");
    let tools = vec![tool("search_modes", block_with_modes())];
    let (cluster, client, version) = retrying_cluster(tools, "replica-modes").await;
    let search = ToolRef::new(SERVER, "search_modes").unwrap();
    wait_for(
        "policy and disclosure on the replica",
        Duration::from_secs(10),
        || {
            let ready = client.view_status().policy_version == Some(version)
                && client.tool_deadline(&search) == Duration::from_millis(480);
            async move { ready.then_some(()) }
        },
    )
    .await;
    let healthy = Duration::from_millis(480);
    let server_error = || ToolFailure::new(CoreClass::ServerError, "503 from the vendor");

    tracing::info!("no mode reported: the policy's three attempts");
    let (deadlines, error) = attempts_in_mode(&client, &search, server_error(), 99).await;
    assert_eq!(deadlines, vec![healthy; 3]);
    assert!(!error.unwrap().contains("disclosure says"));

    tracing::info!("a documented fail-fast mode: one attempt, and the model is told why");
    let failing = server_error().in_mode("downstream_dependency_unavailable");
    let (deadlines, error) = attempts_in_mode(&client, &search, failing, 99).await;
    assert_eq!(deadlines, vec![healthy]);
    let error = error.expect("the call fails");
    assert!(
        error.contains("downstream_dependency_unavailable") && error.contains("fail fast with 503"),
        "{error}"
    );

    tracing::info!("a mode the disclosure does not document changes nothing");
    let cold = server_error().in_mode("cold_start");
    let (deadlines, _) = attempts_in_mode(&client, &search, cold, 99).await;
    assert_eq!(deadlines, vec![healthy; 3]);

    tracing::info!("a queueing mode: the next attempt waits for the mode's p95 x 1.2");
    let queued = ToolFailure::new(CoreClass::ServerError, "busy, queued").in_mode("queue_depth");
    let (deadlines, error) = attempts_in_mode(&client, &search, queued, 2).await;
    assert_eq!(error, None);
    assert_eq!(deadlines, vec![healthy, Duration::from_millis(5400)]);
    client.close().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hinted_effects_apply_where_the_policy_is_silent() {
    tracing::info!("a manifest hints one read-only and one destructive tool");
    let cluster = TestCluster::start(1).await;
    let hinted = |name: &str, read_only: bool| ManifestTool {
        tool: name.into(),
        read_only_hint: Some(read_only),
        destructive_hint: Some(!read_only),
        idempotent_hint: Some(false),
        ..Default::default()
    };
    let import = ImportToolsRequest {
        namespace: NS.into(),
        server: SERVER.into(),
        tools: vec![hinted("lookup", true), hinted("purge", false)],
        actor: "test".into(),
        ..Default::default()
    };
    let channel = channel_to(&cluster.addrs[0]);
    settled(|| {
        let (mut tools, import) = (ToolsClient::new(channel.clone()), import.clone());
        async move { tools.import(import).await }
    })
    .await;
    let client = connected(cluster.config("replica-hints", &[0])).await;
    let lookup = ToolRef::new(SERVER, "lookup").unwrap();
    let purge = ToolRef::new(SERVER, "purge").unwrap();
    let unlisted = ToolRef::new(SERVER, "unlisted").unwrap();
    wait_for("the hints on the replica", Duration::from_secs(10), || {
        let effect = client.tool_policy(&lookup).effect;
        async move { (effect == EffectClass::ReadOnly).then_some(()) }
    })
    .await;
    assert_eq!(
        client.tool_policy(&purge).effect,
        EffectClass::NonIdempotentWrite
    );
    let cautious = PolicyDocument::default()
        .tool_policy(
            &ServerName::new(SERVER).unwrap(),
            &ToolName::new("unlisted").unwrap(),
        )
        .effect;
    assert_eq!(client.tool_policy(&unlisted).effect, cautious);

    tracing::info!("with writes blocked, the read-only hinted tool still runs");
    cluster.operator(0).kill_switch(true, "incident").await;
    wait_for(
        "the kill switch on the replica",
        Duration::from_secs(10),
        || {
            let blocked = client.view_status().writes_blocked;
            async move { blocked.then_some(()) }
        },
    )
    .await;
    let journey = Journey::new("turn-hints", Duration::from_secs(10), Duration::ZERO);
    let read = client
        .call(&journey, &lookup, |_| async { Ok::<_, ToolFailure>(7) })
        .await;
    assert!(read.is_ok(), "{read:?}");

    tracing::info!("an effect the policy declares wins over the hints");
    let declared = format!("[servers.{SERVER}.tools.lookup]\neffect = \"expensive_read\"\n");
    let version = cluster.operator(0).apply_policy(&declared).await;
    wait_for("the declared effect", Duration::from_secs(10), || {
        let ready = client.view_status().policy_version == Some(version)
            && client.tool_policy(&lookup).effect == EffectClass::ExpensiveRead;
        async move { ready.then_some(()) }
    })
    .await;
    client.close().await;
    cluster.shutdown().await;
}

/// The runbook: while a circuit is open, the agent must not bypass it
/// through an equivalent tool, unless the policy declares the two
/// independent (a failover group).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_open_circuit_is_bypassed_only_through_a_declared_failover_group() {
    let cluster = TestCluster::start(1).await;
    let client = connected(cluster.config("replica-a", &[0])).await;
    let primary = ToolRef::new(SERVER, "search_primary").unwrap();
    let other = ToolRef::new("other-vendor", "search").unwrap();
    let equivalents = [primary.clone(), other.clone()];
    wait_route(
        "the first tool while it is admitted",
        &client,
        &equivalents,
        &primary,
    )
    .await;

    cluster
        .operator(0)
        .force_open(SERVER, "search_primary", "vendor incident")
        .await;
    wait_for(
        "the refusal reaches the replica",
        Duration::from_secs(20),
        || {
            let refused = client.route(std::slice::from_ref(&primary)).is_none();
            async move { refused.then_some(()) }
        },
    )
    .await;
    assert_eq!(
        client.route(&equivalents),
        None,
        "no failover group: the open circuit is not bypassed"
    );
    // Order matters: the refused tool is the one asked for.
    let reversed = [other.clone(), primary.clone()];
    assert_eq!(client.route(&reversed), Some(&other));

    cluster
        .operator(0)
        .apply_policy(&format!(
            "[[failover]]\ntools = [\"{SERVER}/search_primary\", \"other-vendor/search\"]\n\
             why = \"two vendors on separate infrastructure\"\n"
        ))
        .await;
    wait_route("failover once declared", &client, &equivalents, &other).await;
    cluster.shutdown().await;
}
