//! `fusebox tools` against a real single-node `fusebox serve`, run as an
//! operator runs it: as a subprocess, reading its output and exit code.
//!
//! One story:
//! - import a real-looking MCP `tools/list` response for server `docs`
//!   whose tools carry a valid block, a valid block with a non-binding p99,
//!   one invalid block per rule of the spec (each breaking exactly that
//!   rule), a stale block and no block; every verdict and message is
//!   checked, the import exits 2 and still stores the valid blocks, which a
//!   watching replica receives;
//! - report outcomes over `Breakers.ReportOutcomes` that make one tool run
//!   far slower than it disclosed, and see it penalized in `tools latency`
//!   (and on the watch stream) while a tool within its promise is not;
//! - emit the slow tool's observed block with `tools disclosure` and check
//!   that it parses back and passes the spec's validation.
//!
//! And on three nodes: an import sent to a follower is forwarded to the
//! leader, and the accepted block, then the penalty flag, reach a watcher
//! of the other follower.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_core::disclosure::{assess, format_utc, DisclosureRule, LatencyDisclosure};
use fusebox_core::Timestamp;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::tools_client::ToolsClient;
use fusebox_proto::v1::watch_event::Event;
use fusebox_proto::v1::{
    DisclosureVerdict, ImportToolsRequest, ManifestTool, Outcome, OutcomeClass,
    ReportOutcomesRequest, ToolDisclosure, WatchRequest,
};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::TestCluster;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

const NS: &str = "fleet";
const SERVER: &str = "docs";
const ACTOR: &str = "oncall-test";
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_secs(20);
const DAY_MS: u64 = 24 * 3600 * 1000;

/// What one run of the binary printed and how it exited.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn fusebox(endpoints: &str, args: &[&str]) -> Run {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fusebox"));
    cmd.args(args)
        .env("FUSEBOX_ENDPOINTS", endpoints)
        .env("FUSEBOX_ACTOR", ACTOR)
        .env_remove("FUSEBOX_NAMESPACE")
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("fusebox {args:?} did not finish in {RUN_TIMEOUT:?}"))
        .expect("run fusebox");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn expect_code(run: &Run, code: i32, args: &[&str]) {
    assert_eq!(
        run.code, code,
        "fusebox {args:?}: wrong exit code\nstdout: {}\nstderr: {}",
        run.stdout, run.stderr
    );
}

fn wall_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

fn days_ago(days: u64) -> String {
    format_utc(Timestamp::from_millis(wall_ms() - days * DAY_MS))
}

/// A valid block observed yesterday: the spec's section 3 numbers.
fn valid_block() -> Value {
    json!({
        "version": "1.0", "observed_at": days_ago(1), "measurement_window_days": 7,
        "sample_size": 12483, "region": "us-east-1", "p50_ms": 180, "p95_ms": 720,
        "p99_ms": 1850, "cold_start_ms": 1200, "timeout_ms": 30000, "idempotent": true,
        "retry_safe": true, "streaming": false, "time_to_first_byte_ms": null,
        "degradation_modes": [{"trigger": "queue_depth>50", "behavior": "queue and serve",
                               "expected_p95_ms": 4500}],
        "methodology_url": "https://example.com/latency-methodology"
    })
}

/// The valid block with `changes` applied (`null` removes a field).
fn block_with(changes: Value) -> Value {
    let mut block = valid_block();
    for (key, value) in changes.as_object().unwrap() {
        if value.is_null() {
            block.as_object_mut().unwrap().remove(key);
        } else {
            block[key] = value.clone();
        }
    }
    block
}

/// Each invalid tool: its block, the one rule it breaks, the field, the message.
fn invalid_tools() -> Vec<(&'static str, Value, &'static str, &'static str, String)> {
    vec![
        (
            "no_p95",
            block_with(json!({"p95_ms": null})),
            "field_missing",
            "p95_ms",
            "p95_ms is required but missing".into(),
        ),
        (
            "p50_as_text",
            block_with(json!({"p50_ms": "180"})),
            "field_type",
            "p50_ms",
            "p50_ms must be a non-negative integer, got a string".into(),
        ),
        (
            "version_two",
            block_with(json!({"version": "2.0"})),
            "version_major",
            "version",
            "version \"2.0\" has major 2; this reader knows major version 1 only".into(),
        ),
        (
            "date_only",
            block_with(json!({"observed_at": "2026-04-22"})),
            "observed_at_format",
            "observed_at",
            "observed_at \"2026-04-22\" is not an ISO-8601 UTC datetime: expected 'T' at byte 10"
                .into(),
        ),
        (
            "zero_window",
            block_with(json!({"measurement_window_days": 0})),
            "measurement_window",
            "measurement_window_days",
            "measurement_window_days is 0; the window must span at least 1 day".into(),
        ),
        (
            "no_samples",
            block_with(json!({"sample_size": 0})),
            "sample_size_zero",
            "sample_size",
            "sample_size is 0; percentiles need at least one invocation".into(),
        ),
        (
            "p50_over_p95",
            block_with(json!({"p50_ms": 800})),
            "p50_above_p95",
            "p50_ms",
            "p50_ms 800 exceeds p95_ms 720".into(),
        ),
        (
            "p95_over_p99",
            block_with(json!({"p95_ms": 2000})),
            "p95_above_p99",
            "p95_ms",
            "p95_ms 2000 exceeds p99_ms 1850".into(),
        ),
        (
            "p99_over_timeout",
            block_with(json!({"timeout_ms": 1000})),
            "p99_above_timeout",
            "p99_ms",
            "p99_ms 1850 exceeds timeout_ms 1000".into(),
        ),
        (
            "stream_no_ttfb",
            block_with(json!({"streaming": true})),
            "streaming_ttfb_missing",
            "time_to_first_byte_ms",
            "streaming is true but time_to_first_byte_ms is missing".into(),
        ),
        (
            "stream_slow_ttfb",
            block_with(json!({"streaming": true, "time_to_first_byte_ms": 900})),
            "ttfb_above_p95",
            "time_to_first_byte_ms",
            "time_to_first_byte_ms 900 exceeds p95_ms 720".into(),
        ),
        (
            "bad_methodology",
            block_with(json!({"methodology_url": "see wiki"})),
            "methodology_url",
            "methodology_url",
            "methodology_url \"see wiki\" is not an absolute URL (scheme://…)".into(),
        ),
    ]
}

fn tool(name: &str, annotations: Value) -> Value {
    json!({"name": name, "description": format!("The {name} tool."),
           "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
           "annotations": annotations})
}

/// A JSON-RPC `tools/list` response as an MCP server sends it.
fn manifest() -> Value {
    let read_only = |block: Value| json!({"readOnlyHint": true, "latencyDisclosure": block});
    let mut tools = vec![
        tool(
            "search_docs",
            json!({"title": "Search docs", "readOnlyHint": true,
                                    "openWorldHint": false, "latencyDisclosure": valid_block()}),
        ),
        tool(
            "fast_lookup",
            read_only(block_with(json!({"p50_ms": 20, "p95_ms": 50,
                                                        "p99_ms": 80}))),
        ),
        tool(
            "few_samples",
            read_only(block_with(json!({"sample_size": 500}))),
        ),
        tool(
            "old_numbers",
            read_only(block_with(json!({"observed_at": days_ago(120)}))),
        ),
        tool(
            "upsert_page",
            json!({"readOnlyHint": false, "destructiveHint": false,
                                   "idempotentHint": true}),
        ),
        json!({"name": "delete_page", "inputSchema": {"type": "object"}}),
    ];
    tools.extend(
        invalid_tools()
            .into_iter()
            .map(|(name, block, ..)| tool(name, read_only(block))),
    );
    json!({"jsonrpc": "2.0", "id": 7, "result": {"tools": tools}})
}

/// A channel with no per-call deadline, for watch streams and reports.
fn channel(addr: &str) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(2))
        .connect_lazy()
}

/// Forwards every tool disclosure a watcher of [`NS`] receives (snapshot
/// entries and changes).
async fn watch_disclosures(addr: &str) -> mpsc::UnboundedReceiver<ToolDisclosure> {
    let request = WatchRequest {
        namespace: NS.into(),
        replica_id: "replica-watch".into(),
        ..Default::default()
    };
    let mut stream = BreakersClient::new(channel(addr))
        .watch(request)
        .await
        .expect("watch")
        .into_inner();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(event)) = stream.message().await {
            let seen = match event.event {
                Some(Event::Snapshot(s)) => s.disclosures,
                Some(Event::Disclosure(d)) => vec![d],
                _ => Vec::new(),
            };
            if seen.into_iter().any(|d| tx.send(d).is_err()) {
                return;
            }
        }
    });
    rx
}

async fn wait_disclosure(
    rx: &mut mpsc::UnboundedReceiver<ToolDisclosure>,
    what: &str,
    wanted: impl Fn(&ToolDisclosure) -> bool,
) -> ToolDisclosure {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(d)) if wanted(&d) => return d,
            Ok(Some(_)) => {}
            Ok(None) => panic!("watch stream ended before {what}"),
            Err(_) => panic!("the watcher never saw {what}"),
        }
    }
}

async fn report(addr: &str, tool: &str, duration_ms: u64, count: usize, seq: u64) {
    let outcome = Outcome {
        server: SERVER.into(),
        tool: tool.into(),
        class: OutcomeClass::Success as i32,
        duration_ms,
        ..Default::default()
    };
    let request = ReportOutcomesRequest {
        namespace: NS.into(),
        replica_id: "replica-a".into(),
        batch_seq: seq,
        outcomes: vec![outcome; count],
        ..Default::default()
    };
    BreakersClient::new(channel(addr))
        .report_outcomes(request)
        .await
        .expect("report outcomes");
}

fn verdict_of<'a>(reply: &'a Value, tool: &str) -> &'a Value {
    reply["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tool"] == tool)
        .unwrap_or_else(|| panic!("no verdict for {tool}: {reply}"))
}

fn check_import_verdicts(reply: &Value) {
    let search = verdict_of(reply, "search_docs");
    assert_eq!(search["verdict"], "accepted");
    assert_eq!(search["problems"], json!([]));
    assert_eq!(search["deadline_ms"], 2220, "p99 1850 x 1.2");
    assert_eq!(
        (&search["effect"], &search["effect_derived"]),
        (&json!("read_only"), &json!(true))
    );
    let few = verdict_of(reply, "few_samples");
    assert_eq!(few["verdict"], "accepted");
    assert_eq!(
        few["deadline_ms"],
        Value::Null,
        "a non-binding p99 sets no deadline"
    );
    assert_eq!(
        few["problems"],
        json!([{"rule": "p99_not_binding", "field": "sample_size", "severity": "warning",
                "message": "sample_size 500 is below 1000; p99_ms is not binding and yields no deadline"}])
    );
    let old = verdict_of(reply, "old_numbers");
    assert_eq!(old["verdict"], "stale");
    let stale = &old["problems"][0];
    assert_eq!(
        (&stale["rule"], &stale["severity"]),
        (&json!("stale"), &json!("warning"))
    );
    let message = stale["message"].as_str().unwrap();
    let prefix = format!("observed_at {}T", days_ago(120).get(..10).unwrap());
    assert!(
        message.starts_with(&prefix) && message.contains(" is 120 days old at "),
        "{message}"
    );
    assert!(
        message
            .ends_with("older than the 90-day freshness ceiling; treat the disclosure as missing"),
        "{message}"
    );
    for (name, effect) in [
        ("upsert_page", "idempotent_write"),
        ("delete_page", "non_idempotent_write"),
    ] {
        let t = verdict_of(reply, name);
        assert_eq!(t["verdict"], "missing", "{name}");
        assert_eq!(
            (&t["effect"], &t["effect_derived"]),
            (&json!(effect), &json!(true)),
            "{name}"
        );
    }
    for (name, _, rule, field, message) in invalid_tools() {
        let t = verdict_of(reply, name);
        assert_eq!(t["verdict"], "invalid", "{name}");
        assert_eq!(
            t["problems"],
            json!([{"rule": rule, "field": field, "severity": "error", "message": message}]),
            "{name} must break exactly its one rule"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_imported_judged_observed_penalized_and_disclosed() {
    eprintln!("phase: one node, a watcher, and a tools/list manifest with every kind of block");
    let cluster = TestCluster::start(1);
    cluster.wait_leader(&[1], SETTLE).await;
    let addr = cluster.nodes[&1].addr.clone();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tools-list.json");
    std::fs::write(&file, serde_json::to_string_pretty(&manifest()).unwrap()).unwrap();
    let file = file.to_string_lossy().into_owned();
    // The fleet keeps latency over a day: a disclosure states whole days.
    let policy = dir.path().join("day-window.toml");
    std::fs::write(&policy, "[latency]\nwindow_ms = 86400000\n").unwrap();
    let policy = policy.to_string_lossy().into_owned();
    let args = ["policy", "apply", policy.as_str(), "--ns", NS];
    let run = fusebox(&addr, &args).await;
    expect_code(&run, 0, &args);
    let import = [
        "tools",
        "import",
        file.as_str(),
        "--ns",
        NS,
        "--server",
        SERVER,
    ];

    eprintln!(
        "phase: import prints every verdict, exits 2 for the invalid blocks, stores the rest"
    );
    let args = [&import[..], &["--json"]].concat();
    let run = fusebox(&addr, &args).await;
    expect_code(&run, 2, &args);
    let reply: Value = serde_json::from_str(run.stdout.trim()).expect("import JSON");
    assert_eq!(reply["tools"].as_array().unwrap().len(), 18);
    check_import_verdicts(&reply);
    let error: Value = serde_json::from_str(run.stderr.trim()).expect("error JSON");
    assert_eq!(error["error"]["exit_code"], 2);
    let names: Vec<&str> = invalid_tools().iter().map(|t| t.0).collect();
    assert_eq!(
        error["error"]["message"],
        format!(
            "12 of 18 disclosure blocks are invalid ({}); the other tools were imported",
            names.join(", ")
        )
    );

    eprintln!("phase: the same import as a table, and a watcher receives the accepted blocks");
    let mut watcher = watch_disclosures(&addr).await;
    let run = fusebox(&addr, &import).await;
    expect_code(&run, 2, &import);
    assert!(
        run.stdout
            .contains("imported 18 tools of server docs into namespace fleet"),
        "{}",
        run.stdout
    );
    let row = run
        .stdout
        .lines()
        .find(|l| l.starts_with("search_docs "))
        .unwrap();
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cells,
        [
            "search_docs",
            "accepted",
            "2220 ms",
            "read_only (from MCP hints)"
        ]
    );
    assert!(
        run.stdout.contains(
            "p50_over_p95:\n  error p50_above_p95 at p50_ms: p50_ms 800 exceeds p95_ms 720"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr
            .starts_with("error: 12 of 18 disclosure blocks are invalid"),
        "{}",
        run.stderr
    );
    let seen = wait_disclosure(&mut watcher, "search_docs's block", |d| {
        d.tool == "search_docs" && d.disclosed.is_some()
    })
    .await;
    let disclosed = seen.disclosed.unwrap();
    assert_eq!(
        (disclosed.p50_ms, disclosed.p95_ms, disclosed.p99_ms),
        (180, 720, 1850)
    );
    assert!(!seen.p95_regressed);

    eprintln!("phase: search_docs turns slow (2000 ms against a disclosed p95 of 720), fast_lookup stays fast");
    report(&addr, "search_docs", 2_000, 150, 1).await;
    report(&addr, "fast_lookup", 30, 150, 2).await;
    let penalized = wait_disclosure(&mut watcher, "search_docs penalized", |d| {
        d.tool == "search_docs" && d.p95_regressed
    })
    .await;
    assert_eq!(penalized.observed.unwrap().sample_size, 150);

    let args = ["tools", "latency", "--ns", NS, "--json"];
    let run = fusebox(&addr, &args).await;
    expect_code(&run, 0, &args);
    let listing: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    let entry = |name: &str| {
        listing["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tool"] == name)
            .cloned()
            .unwrap()
    };
    let slow = entry("search_docs");
    assert_eq!(slow["penalized"], true);
    assert_eq!(slow["observed"]["sample_count"], 150);
    assert_eq!(slow["penalty_threshold_p95_ms"], 1080);
    let p95 = slow["observed"]["p95_ms"].as_u64().unwrap();
    assert!(
        p95.abs_diff(2_000) <= 20,
        "observed p95 {p95} within 1% of 2000"
    );
    assert_eq!(slow["disclosed"]["p95_ms"], 720);
    assert_eq!(slow["imported_by"], ACTOR);
    let fast = entry("fast_lookup");
    assert_eq!(
        (&fast["penalized"], &fast["observed"]["sample_count"]),
        (&json!(false), &json!(150))
    );

    let args = ["tools", "latency", "--ns", NS, "search_docs"];
    let run = fusebox(&addr, &args).await;
    expect_code(&run, 0, &args);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(
        lines[0].starts_with("TOOL") && lines[0].ends_with("PENALIZED"),
        "{}",
        lines[0]
    );
    let cells: Vec<&str> = lines[1]
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(cells.len(), 6, "{}", lines[1]);
    assert_eq!((cells[0], cells[1]), ("docs/search_docs", "150"));
    assert_eq!(
        (cells[3], cells[4], cells[5]),
        ("180/720/1850", "1080", "yes")
    );
    let args = ["tools", "latency", "--ns", NS, "no_such_tool"];
    let run = fusebox(&addr, &args).await;
    expect_code(&run, 3, &args);
    assert!(run
        .stderr
        .contains("tool no_such_tool is neither imported nor observed in namespace fleet"));

    eprintln!(
        "phase: the observed block for search_docs parses back and passes the spec's validation"
    );
    let args = ["tools", "disclosure", "search_docs", "--ns", NS];
    let run = fusebox(&addr, &args).await;
    expect_code(&run, 0, &args);
    let value: Value = serde_json::from_str(&run.stdout).expect("a JSON block");
    let method = value["x_fusebox_measurement"].as_str().unwrap_or_default();
    assert!(method.starts_with("client-side"), "{value}");
    let block = LatencyDisclosure::from_json(&value).expect("the block parses");
    let assessment = assess(&block, Timestamp::from_millis(wall_ms()));
    assert!(
        assessment.is_valid && assessment.is_fresh,
        "{:?}",
        assessment.problems
    );
    let rules: Vec<DisclosureRule> = assessment.problems.iter().map(|p| p.rule).collect();
    assert_eq!(
        rules,
        [DisclosureRule::P99NotBinding],
        "150 samples: p99 informative only"
    );
    assert!(
        run.stderr
            .contains("warning p99_not_binding at sample_size"),
        "{}",
        run.stderr
    );
    assert_eq!((block.sample_size, block.measurement_window_days), (150, 1));
    assert!(block.p95_ms.abs_diff(2_000) <= 20, "{block:?}");
    assert_eq!(
        block.timeout_ms, 30_000,
        "the publisher's disclosed timeout"
    );
    assert!(block.idempotent && block.retry_safe);
    assert_eq!(block.region.as_deref(), Some("us-east-1"));
    let args = ["tools", "disclosure", "docs/never_called", "--ns", NS];
    let run = fusebox(&addr, &args).await;
    expect_code(&run, 3, &args);

    eprintln!("phase: a manifest that is not one is bad input, and nothing is imported");
    let bad = dir.path().join("not-a-manifest.json");
    std::fs::write(&bad, "{\"result\": {}}").unwrap();
    let bad = bad.to_string_lossy().into_owned();
    let args = [
        "tools",
        "import",
        bad.as_str(),
        "--ns",
        NS,
        "--server",
        SERVER,
    ];
    let run = fusebox(&addr, &args).await;
    expect_code(&run, 2, &args);
    assert!(
        run.stderr
            .contains("no \"tools\" array (expected a tools/list result)"),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_through_a_follower_reaches_every_replica_and_so_does_the_penalty() {
    eprintln!("phase: three nodes; import through one follower, watch through the other");
    let cluster = TestCluster::start(3);
    let leader = cluster.wait_leader(&[1, 2, 3], SETTLE).await;
    let followers: Vec<u64> = cluster
        .nodes
        .keys()
        .copied()
        .filter(|id| *id != leader)
        .collect();
    let (via, watched) = (
        &cluster.nodes[&followers[0]].addr,
        &cluster.nodes[&followers[1]].addr,
    );
    let mut watcher = watch_disclosures(watched).await;
    let request = ImportToolsRequest {
        namespace: NS.into(),
        server: SERVER.into(),
        actor: ACTOR.into(),
        tools: vec![ManifestTool {
            tool: "search_docs".into(),
            read_only_hint: Some(true),
            latency_disclosure_json: Some(valid_block().to_string()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let reply = ToolsClient::new(channel(via))
        .import(request)
        .await
        .expect("import through a follower")
        .into_inner();
    assert_eq!(reply.tools[0].verdict, DisclosureVerdict::Accepted as i32);
    let seen = wait_disclosure(&mut watcher, "the block on the other follower", |d| {
        d.tool == "search_docs" && d.disclosed.is_some()
    })
    .await;
    assert_eq!(seen.disclosed.unwrap().p99_ms, 1850);

    eprintln!("phase: slow reports through the follower penalize the tool on every replica");
    report(via, "search_docs", 3_000, 120, 1).await;
    let penalized = wait_disclosure(&mut watcher, "the penalty on the other follower", |d| {
        d.tool == "search_docs" && d.p95_regressed
    })
    .await;
    assert_eq!(penalized.observed.unwrap().sample_size, 120);
}
