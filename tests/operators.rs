//! The operators' commands of the `fusebox` binary against real `fusebox
//! serve` processes, run as an operator runs them: as a subprocess, reading
//! its output and its exit code.
//!
//! Two stories, one cluster each:
//! - on a single node, policy versions (apply, watch, diff, history,
//!   rollback, an invalid document refused whole), a breaker forced open for
//!   two seconds that closes by itself, and shadow mode counting what it
//!   would have rejected while rejecting nothing;
//! - on three nodes, with the CLI pointed at a follower (it moves to the
//!   leader by itself; `cluster status` answers from the follower), an
//!   ambiguous ledger record listed, resolved and looked up, and the write
//!   kill switch blocking a write `begin` on every node and reaching every
//!   node's watchers while a read goes through.
//!
//! Both check that unknown names (namespaces, keys, tools) fail with a
//! message that names them and exit code 3, and bad input with exit code 2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_proto::v1::acquire_probe_response::Result as Probe;
use fusebox_proto::v1::begin_response::Outcome as Begun;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::complete_request::Outcome as Completion;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::watch_event::Event;
use fusebox_proto::v1::{
    AcquireProbeRequest, BeginRequest, BreakerKey, CompleteAmbiguous, CompleteRequest, Effect,
    ErrorCode, FuseboxErrorDetail, KillSwitch, Outcome, OutcomeClass, ReportOutcomesRequest,
    WatchRequest,
};
use prost::Message;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::TestCluster;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

/// The operator identity every command runs under.
const ACTOR: &str = "oncall-test";
/// Longest one CLI run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the cluster to elect, or a change to reach a watcher.
const SETTLE: Duration = Duration::from_secs(20);

/// What one run of the binary printed and how it exited.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `fusebox` against one cluster as operator [`ACTOR`].
struct Operator {
    endpoints: String,
}

impl Operator {
    async fn run(&self, args: &[&str]) -> Run {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fusebox"));
        cmd.args(args)
            .env("FUSEBOX_ENDPOINTS", &self.endpoints)
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

    /// Runs a command that must succeed; returns its stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args).await;
        assert_eq!(
            run.code, 0,
            "fusebox {args:?} failed:\nstdout: {}\nstderr: {}",
            run.stdout, run.stderr
        );
        run.stdout
    }

    /// Runs a command with `--json` that must succeed; returns its output.
    async fn json(&self, args: &[&str]) -> Value {
        let mut with_json = args.to_vec();
        with_json.push("--json");
        let stdout = self.ok(&with_json).await;
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("fusebox {args:?} printed no JSON ({e}): {stdout}"))
    }

    /// Runs a command that must fail with `code`; returns its stderr.
    async fn fails(&self, args: &[&str], code: i32) -> String {
        let run = self.run(args).await;
        assert_eq!(
            run.code, code,
            "fusebox {args:?}: wrong exit code\nstdout: {}\nstderr: {}",
            run.stdout, run.stderr
        );
        assert!(
            run.stderr.starts_with("error: "),
            "fusebox {args:?}: no error message: {}",
            run.stderr
        );
        run.stderr
    }
}

/// A channel with no per-call deadline, for watch streams.
fn stream_channel(addr: &str) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(2))
        .connect_lazy()
}

/// What a watcher saw: policy versions and kill switch states, in order.
#[derive(Debug)]
enum Seen {
    Policy(u64),
    KillSwitch(KillSwitch),
}

/// What a watcher forwards.
type Watcher = mpsc::UnboundedReceiver<Seen>;

/// A connected client: watches `ns` through `addr` and forwards the policy
/// versions and kill switch states it receives (snapshot and changes).
async fn watch(addr: &str, ns: &str, replica: &str) -> Watcher {
    let mut client = BreakersClient::new(stream_channel(addr));
    let request = WatchRequest {
        namespace: ns.into(),
        replica_id: replica.into(),
        ..Default::default()
    };
    let mut stream = client.watch(request).await.expect("watch").into_inner();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(event)) = stream.message().await {
            let seen = match event.event {
                Some(Event::Snapshot(s)) => {
                    let policy = s.policy.map(|p| Seen::Policy(p.version));
                    policy
                        .into_iter()
                        .chain(s.kill_switch.map(Seen::KillSwitch))
                        .collect()
                }
                Some(Event::Policy(p)) => vec![Seen::Policy(p.version)],
                Some(Event::KillSwitch(k)) => vec![Seen::KillSwitch(k)],
                _ => Vec::new(),
            };
            for s in seen {
                if tx.send(s).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Waits until the watcher reports something `wanted` accepts.
async fn wait_seen(rx: &mut Watcher, what: &str, wanted: impl Fn(&Seen) -> bool) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(seen)) if wanted(&seen) => return,
            Ok(Some(_)) => {}
            Ok(None) => panic!("watch stream ended before {what}"),
            Err(_) => panic!("the watcher never saw {what}"),
        }
    }
}

fn write_policy(dir: &Path, name: &str, timeout_ms: u64) -> PathBuf {
    let text = format!(
        "[defaults]\ntimeout_ms = {timeout_ms}\n\n\
         [defaults.breaker]\nconsecutive_failures = 3\nopen_ms = 60000\n\n\
         # Stage 1 of the rollout: the search server's breakers decide and count, never reject.\n\
         [servers.search]\nshadow = true\n\n\
         [servers.search.tools.web_search]\neffect = \"read_only\"\n\n\
         [servers.geocoder.tools.geocode]\neffect = \"read_only\"\n\n\
         [servers.deployments.tools.restart_deployment_job]\neffect = \"non_idempotent_write\"\n"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write policy file");
    path
}

fn invalid_policy() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies/invalid.toml");
    root.to_string_lossy().into_owned()
}

fn outcome(server: &str, tool: &str, class: OutcomeClass) -> Outcome {
    Outcome {
        server: server.into(),
        tool: tool.into(),
        class: class as i32,
        duration_ms: 40,
        ..Default::default()
    }
}

async fn report(channel: Channel, ns: &str, batch_seq: u64, outcomes: Vec<Outcome>) {
    let request = ReportOutcomesRequest {
        namespace: ns.into(),
        replica_id: "replica-a".into(),
        batch_seq,
        outcomes,
        ..Default::default()
    };
    let reply = BreakersClient::new(channel)
        .report_outcomes(request)
        .await
        .expect("report outcomes")
        .into_inner();
    assert_eq!(reply.ignored, 0, "outcomes ignored: {reply:?}");
}

async fn probe(channel: Channel, ns: &str, server: &str, tool: &str) -> Probe {
    let request = AcquireProbeRequest {
        namespace: ns.into(),
        key: Some(BreakerKey {
            namespace: ns.into(),
            server: server.into(),
            tool: Some(tool.into()),
            backend: None,
        }),
        replica_id: "replica-a".into(),
        ..Default::default()
    };
    let reply = BreakersClient::new(channel)
        .acquire_probe(request)
        .await
        .expect("acquire probe")
        .into_inner();
    reply.result.expect("a probe answer")
}

/// The breaker named `key` in a `breakers list --json` output.
fn listed<'a>(list: &'a Value, key: &str) -> &'a Value {
    list["breakers"]
        .as_array()
        .expect("breakers array")
        .iter()
        .find(|b| b["key"] == key)
        .unwrap_or_else(|| panic!("{key} not listed in {list}"))
}

/// Two fields of a JSON object, to compare both at once.
fn pair(v: &Value, a: &str, b: &str) -> (Value, Value) {
    (v[a].clone(), v[b].clone())
}

/// The namespace of the single-node story.
const AGENTS: &str = "agents";
/// A write tool the policy names.
const RESTART: &str = "agents/deployments/restart_deployment_job";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_versions_forced_breakers_and_shadow_mode_from_the_cli() {
    let cluster = TestCluster::start(1);
    cluster.wait_leader(&[1], SETTLE).await;
    let addr = cluster.nodes[&1].addr.clone();
    let op = Operator {
        endpoints: addr.clone(),
    };
    let dir = tempfile::tempdir().expect("temp dir");

    println!("phase: a client is watching when the first policy is applied");
    let mut watcher = watch(&addr, AGENTS, "watcher-1").await;
    apply_first_policy(&op, dir.path(), &mut watcher).await;

    println!("phase: an invalid document is refused whole and v1 stays in force");
    invalid_policy_is_refused(&op).await;

    println!("phase: v2 reaches the watcher; history, show and diff tell v1 from v2");
    apply_and_diff_second_policy(&op, dir.path(), &mut watcher).await;

    println!("phase: rolling back to v1 makes v3, which the watcher receives");
    roll_back(&op, &mut watcher).await;

    println!("phase: a breaker forced open for 2s closes by itself");
    forced_open_closes_by_itself(&op).await;

    println!("phase: shadow mode counts what it would reject and rejects nothing");
    shadow_counts_and_rejects_nothing(&op, cluster.channel(1).await).await;

    println!("phase: a timed disable and a timed shadow end by themselves");
    timed_holds_end_by_themselves(&op).await;

    println!("phase: unknown tools and malformed names are refused clearly");
    unknown_tools_and_bad_names(&op).await;

    println!("phase: a short ledger bench runs and reports what it measured");
    a_short_bench_reports_its_figures(&op).await;

    println!("phase: short outcome, propagation and gate benches report theirs");
    short_outcome_propagation_and_gate_benches(&op).await;
}

/// p50 ≤ p99 ≤ max, all positive, in a bench's JSON figures.
fn ordered(figures: &serde_json::Value, report: &serde_json::Value) {
    let at = |p: &str| {
        figures[p]
            .as_f64()
            .unwrap_or_else(|| panic!("{p}: {report}"))
    };
    let (p50, p99, max) = (at("p50"), at("p99"), at("max"));
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{report}");
}

/// `fusebox bench outcomes`, `propagation` (both changes) and `gate`, each
/// for a moment: what they count adds up and nothing failed. (No speed is
/// asserted: this machine is shared.)
async fn short_outcome_propagation_and_gate_benches(op: &Operator) {
    let ns = ["--namespace", "bench-test"];
    let short = ["--seconds", "1", "--warmup-seconds", "0"];
    let mut args = vec![
        "bench",
        "outcomes",
        "--clients",
        "2",
        "--batch",
        "10",
        "--tools",
        "3",
    ];
    args.extend(short.iter().chain(ns.iter()).copied());
    let report = op.json(&args).await;
    let (outcomes, batches) = (report["outcomes"].as_u64(), report["batches"].as_u64());
    assert!(outcomes.is_some_and(|n| n > 0), "{report}");
    assert_eq!(outcomes, batches.map(|b| b * 10), "{report}");
    assert_eq!(report["failures"], serde_json::json!({}), "{report}");
    ordered(&report["batch_latency_ms"], &report);

    for change in ["force-open", "trip"] {
        let mut args = vec!["bench", "propagation", "--watchers", "6", "--rounds", "3"];
        args.extend(["--change", change, "--streams-per-connection", "4"]);
        args.extend(ns);
        let report = op.json(&args).await;
        assert_eq!(report["rounds"], 3, "{report}");
        assert_eq!(report["failed_rounds"], 0, "{report}");
        assert_eq!(report["missed_deliveries"], 0, "{report}");
        ordered(&report["request_ms"], &report);
        ordered(&report["delivery_ms"], &report);
        ordered(&report["last_watcher_ms"], &report);
        let (each, last) = (
            &report["delivery_ms"]["max"],
            &report["last_watcher_ms"]["max"],
        );
        assert_eq!(
            each, last,
            "the slowest delivery is a round's last: {report}"
        );
    }

    let mut args = vec!["bench", "gate", "--tool", "bench-gate/lookup"];
    args.extend(short.iter().chain(ns.iter()).copied());
    let report = op.json(&args).await;
    let calls = report["calls"].as_u64().expect("calls");
    assert!(calls > 0, "{report}");
    ordered(&report["ns_per_call"], &report);
    let outcomes = &report["outcomes"];
    let recorded = outcomes["recorded"].as_u64().expect("recorded");
    let dropped = outcomes["dropped_buffer_full"].as_u64().expect("dropped");
    assert!(
        recorded + dropped >= calls,
        "every measured call's outcome was recorded or dropped at the full buffer: {report}"
    );

    let refused = op.fails(&["bench", "outcomes", "--batch", "0"], 2).await;
    assert!(refused.contains("--batch must be 1 to"), "{refused}");
    let refused = op.fails(&["bench", "gate", "--tool", "no-slash"], 2).await;
    assert!(refused.contains("SERVER/TOOL"), "{refused}");
}

/// `fusebox bench ledger` for one second: every pair it counts succeeded,
/// and its figures agree with each other. (No speed is asserted: this
/// machine is shared.)
async fn a_short_bench_reports_its_figures(op: &Operator) {
    let args = [
        "bench",
        "ledger",
        "--clients",
        "4",
        "--connections",
        "2",
        "--seconds",
        "1",
        "--warmup-seconds",
        "0",
        "--namespace",
        "bench-test",
    ];
    let report = op.json(&args).await;
    let keys = report["keys"].as_u64().expect("keys");
    assert!(keys > 0, "no pair finished: {report}");
    assert_eq!(report["failures"], serde_json::json!({}), "{report}");
    assert_eq!(report["keys_per_second"].as_f64(), Some(keys as f64));
    let latency = &report["pair_latency_ms"];
    let (p50, p99, max) = (
        latency["p50"].as_f64().unwrap(),
        latency["p99"].as_f64().unwrap(),
        latency["max"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{report}");
    assert!(
        report["server_cpu_ms_per_key"].is_null(),
        "no --metrics given"
    );
    // A list shows at most 1,000 records.
    let listed = op
        .json(&["ledger", "list", "--ns", "bench-test", "--limit", "1000"])
        .await;
    let records = listed["records"].as_array().expect("records").len() as u64;
    assert!(
        records >= keys.min(1000),
        "{records} records for {keys} counted pairs"
    );
    assert_eq!(report["transport"], "pipeline", "{report}");
    // The same pairs as one unary call each.
    let unary = op
        .json(&[&args[..], &["--transport", "unary"]].concat())
        .await;
    assert_eq!(unary["transport"], "unary", "{unary}");
    assert!(unary["keys"].as_u64().expect("keys") > 0, "{unary}");
    assert_eq!(unary["failures"], serde_json::json!({}), "{unary}");
    // Metrics that cannot be read (no listener there) cost the server
    // figures only: the run's own are printed, then the command fails.
    let unread = op
        .run(&[&args[..], &["--metrics", "127.0.0.1:1", "--json"]].concat())
        .await;
    assert_ne!(unread.code, 0, "a failed scrape fails the command");
    let report: Value = serde_json::from_str(unread.stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON printed ({e}): {}", unread.stdout));
    assert!(report["keys"].as_u64().expect("keys") > 0, "{report}");
    assert!(report["server_cpu_ms_per_key"].is_null(), "{report}");
    let why = report["server_unread"].as_str().expect("why, in the JSON");
    assert!(why.contains("127.0.0.1:1"), "{why}");
    assert!(unread.stderr.contains("not read"), "{}", unread.stderr);
    let refused = op.fails(&["bench", "ledger", "--clients", "0"], 2).await;
    assert!(refused.contains("--clients must be 1 to"), "{refused}");
}

async fn apply_first_policy(op: &Operator, dir: &Path, watcher: &mut Watcher) {
    let v1 = write_policy(dir, "v1.toml", 3000);
    let out = op
        .ok(&["policy", "apply", v1.to_str().unwrap(), "--ns", AGENTS])
        .await;
    assert!(
        out.contains("applied policy v1 to namespace agents"),
        "{out}"
    );
    wait_seen(watcher, "policy v1", |s| matches!(s, Seen::Policy(1))).await;
}

async fn invalid_policy_is_refused(op: &Operator) {
    let missing = op
        .fails(
            &["policy", "apply", "/nonexistent/p.toml", "--ns", AGENTS],
            2,
        )
        .await;
    assert!(missing.contains("cannot read"), "{missing}");
    // A file with no length that never ends is read only up to the bound.
    let endless = op
        .fails(
            &[
                "policy",
                "apply",
                "/dev/zero",
                "--format",
                "toml",
                "--ns",
                AGENTS,
            ],
            2,
        )
        .await;
    assert!(endless.contains("larger than"), "{endless}");
    let invalid = invalid_policy();
    let err = op
        .fails(&["policy", "apply", &invalid, "--ns", AGENTS], 2)
        .await;
    let fields = [
        "defaults.timeout_ms",
        "defaults.breaker.failure_ratio",
        "ledger.retention_ms",
        "servers.payments.breaker.consecutive_failures",
        "servers.payments.tools.refund.retry.max_attempts",
        "servers.payments.tools.refund.retry.retry_on",
        "servers.payments.tools.refund.breaker.open_ms_max",
    ];
    for field in fields {
        let line = format!("  - {field}: ");
        assert!(err.contains(&line), "{field} not listed in: {err}");
    }
    assert!(err.contains("7 problem(s)"), "{err}");
    let shown = op.json(&["policy", "show", "--ns", AGENTS]).await;
    assert_eq!(shown["version"], 1, "{shown}");
    let history = op.json(&["policy", "history", "--ns", AGENTS]).await;
    let versions = history["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1, "{history}");
}

async fn apply_and_diff_second_policy(op: &Operator, dir: &Path, watcher: &mut Watcher) {
    let v2 = write_policy(dir, "v2.toml", 5000);
    let apply = [
        "policy",
        "apply",
        v2.to_str().unwrap(),
        "--ns",
        AGENTS,
        "--reason",
        "tool slower since the upgrade",
    ];
    let out = op.ok(&apply).await;
    assert!(out.contains("applied policy v2"), "{out}");
    wait_seen(watcher, "policy v2", |s| matches!(s, Seen::Policy(2))).await;
    let out = op.ok(&apply).await;
    assert!(out.contains("policy unchanged: v2"), "{out}");
    let history = op.json(&["policy", "history", "--ns", AGENTS]).await;
    let versions = history["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{history}");
    let newest = pair(&versions[0], "version", "actor");
    assert_eq!(newest, (2.into(), ACTOR.into()), "{history}");
    let why = &versions[0]["reason"];
    assert_eq!(why, "tool slower since the upgrade", "{history}");
    let shown = op.ok(&["policy", "show", "--ns", AGENTS]).await;
    assert!(shown.contains("timeout_ms = 5000"), "{shown}");
    let diff = op.json(&["policy", "diff", "1", "2", "--ns", AGENTS]).await;
    let changes = diff["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{diff}");
    assert_eq!(changes[0]["field"], "defaults.timeout_ms");
    let values = pair(&changes[0], "from", "to");
    assert_eq!(values, ("3000".into(), "5000".into()), "{diff}");
    let diff = op.ok(&["policy", "diff", "1", "2", "--ns", AGENTS]).await;
    assert!(diff.contains("defaults.timeout_ms: 3000 -> 5000"), "{diff}");
}

async fn roll_back(op: &Operator, watcher: &mut Watcher) {
    let rollback = [
        "policy",
        "rollback",
        "1",
        "--ns",
        AGENTS,
        "--reason",
        "v2 too slow",
    ];
    let rolled = op.json(&rollback).await;
    let made = pair(&rolled, "version", "rollback_of");
    assert_eq!(made, (3.into(), 1.into()), "{rolled}");
    assert_eq!(rolled["reason"], "v2 too slow", "{rolled}");
    wait_seen(watcher, "policy v3", |s| matches!(s, Seen::Policy(3))).await;
    let shown = op.ok(&["policy", "show", "--ns", AGENTS]).await;
    let restored = shown.contains("timeout_ms = 3000") && shown.contains("rollback to v1");
    assert!(restored, "{shown}");
    let same = op.json(&["policy", "diff", "1", "3", "--ns", AGENTS]).await;
    assert_eq!(same["identical"], true, "{same}");
    let missing = ["policy", "show", "--ns", AGENTS, "--version", "9"];
    let err = op.fails(&missing, 3).await;
    assert!(err.contains("version 9"), "{err}");
}

async fn forced_open_closes_by_itself(op: &Operator) {
    let open = [
        "breakers",
        "open",
        RESTART,
        "--reason",
        "deploy freeze",
        "--for",
        "2s",
    ];
    let out = op.ok(&open).await;
    assert!(out.contains("forced open for 2s"), "{out}");
    let shown = op.json(&["breakers", "show", RESTART]).await;
    assert_eq!(shown["state"], "forced_open", "{shown}");
    assert_eq!(shown["forced"]["actor"], ACTOR, "{shown}");
    let effect = &shown["policy"]["tool"]["effect"];
    assert_eq!(effect, "non_idempotent_write", "{shown}");
    let forced_list = ["breakers", "list", "--ns", AGENTS, "--state", "forced-open"];
    let listed_now = op.ok(&forced_list).await;
    assert!(listed_now.contains(RESTART), "{listed_now}");
    let deadline = Instant::now() + SETTLE;
    loop {
        let shown = op.json(&["breakers", "show", RESTART]).await;
        if shown["state"] == "closed" {
            break;
        }
        assert!(Instant::now() < deadline, "never closed by itself: {shown}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let history = op.json(&["breakers", "history", RESTART]).await;
    let transitions = history["transitions"].as_array().unwrap();
    assert_eq!(transitions.len(), 2, "{history}");
    let (expired, forced) = (&transitions[0], &transitions[1]);
    let expiry = pair(expired, "cause", "to");
    assert_eq!(
        expiry,
        ("force_expired".into(), "closed".into()),
        "{history}"
    );
    let who = pair(forced, "actor", "reason");
    assert_eq!(who, (ACTOR.into(), "deploy freeze".into()), "{history}");
    let held_ms = expired["at_ms"].as_u64().unwrap() - forced["at_ms"].as_u64().unwrap();
    assert!(
        held_ms >= 2_000,
        "closed after {held_ms} ms, before its 2 s ran out"
    );
    let table = op.ok(&["breakers", "history", RESTART]).await;
    let audited = table.contains("force_expired") && table.contains("deploy freeze");
    assert!(audited, "{table}");
}

async fn shadow_counts_and_rejects_nothing(op: &Operator, channel: Channel) {
    // Three `isError` results trip each tool (consecutive_failures = 3);
    // they count as successes for the servers' own breakers.
    let trip: Vec<_> = [("search", "web_search"), ("geocoder", "geocode")]
        .iter()
        .flat_map(|(server, tool)| (0..3).map(|_| outcome(server, tool, OutcomeClass::ToolError)))
        .collect();
    report(channel.clone(), AGENTS, 1, trip).await;
    let after: Vec<_> = (0..4)
        .map(|_| outcome("search", "web_search", OutcomeClass::Success))
        .collect();
    report(channel.clone(), AGENTS, 2, after).await;
    let list = op.json(&["breakers", "list", "--ns", AGENTS]).await;
    let shadowed = listed(&list, "agents/search/web_search");
    let state = pair(shadowed, "state", "shadow");
    assert_eq!(state, ("open".into(), true.into()), "{shadowed}");
    assert_eq!(shadowed["shadow_would_reject"], 4, "{shadowed}");
    let enforced = listed(&list, "agents/geocoder/geocode");
    let state = pair(enforced, "state", "shadow");
    assert_eq!(state, ("open".into(), false.into()), "{enforced}");
    let table = op
        .ok(&["breakers", "list", "--ns", AGENTS, "--shadow"])
        .await;
    let row = table
        .lines()
        .find(|l| l.starts_with("agents/search/web_search"))
        .unwrap_or_default();
    let counted = row.contains("open (shadow)") && row.contains(" 4 ");
    assert!(counted && !table.contains("geocode"), "{table}");
    let shadow_answer = probe(channel.clone(), AGENTS, "search", "web_search").await;
    let admitted = matches!(shadow_answer, Probe::NotNeeded(_));
    assert!(admitted, "shadow breaker rejected: {shadow_answer:?}");
    let enforced_answer = probe(channel, AGENTS, "geocoder", "geocode").await;
    let rejected = matches!(enforced_answer, Probe::Denied(_));
    assert!(rejected, "open breaker admitted: {enforced_answer:?}");
}

/// Polls `breakers show KEY` until `state` is `wanted`.
async fn wait_state(op: &Operator, key: &str, wanted: &str) -> Value {
    let deadline = Instant::now() + SETTLE;
    loop {
        let shown = op.json(&["breakers", "show", key]).await;
        if shown["state"] == wanted {
            return shown;
        }
        assert!(Instant::now() < deadline, "never {wanted}: {shown}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn timed_holds_end_by_themselves(op: &Operator) {
    // Disabled for 2 s: it says who and until when, then returns to its
    // own evidence (closed) by itself.
    let disable = [
        "breakers",
        "disable",
        RESTART,
        "--reason",
        "vendor window",
        "--for",
        "2s",
    ];
    let out = op.ok(&disable).await;
    assert!(out.contains("disabled") && out.contains("for 2s"), "{out}");
    let shown = op.json(&["breakers", "show", RESTART]).await;
    assert_eq!(shown["state"], "disabled", "{shown}");
    assert_eq!(shown["operator"]["actor"], ACTOR, "{shown}");
    assert!(shown["operator"]["expires_at_ms"].is_u64(), "{shown}");
    wait_state(op, RESTART, "closed").await;
    let history = op.json(&["breakers", "history", RESTART]).await;
    let newest = &history["transitions"][0];
    assert_eq!(newest["cause"], "operator_expired", "{history}");

    // The tool tripped under shadow by the policy: an operator's shadow over
    // it shows the machine's own verdict, and ends with it enforced.
    let shadow = [
        "breakers",
        "shadow",
        "agents/geocoder/geocode",
        "--reason",
        "try",
        "--for",
        "1s",
    ];
    op.ok(&shadow).await;
    let shown = op
        .json(&["breakers", "show", "agents/geocoder/geocode"])
        .await;
    assert_eq!(shown["state"], "metrics_only", "{shown}");
    assert_eq!(shown["automatic_state"], "open", "{shown}");
    assert_eq!(shown["shadow"], true, "{shown}");
    let after = wait_state(op, "agents/geocoder/geocode", "open").await;
    assert_eq!(after["shadow"], false, "{after}");
}

async fn unknown_tools_and_bad_names(op: &Operator) {
    let unknown = "agents/search/no_such_tool";
    let err = op.fails(&["breakers", "show", unknown], 3).await;
    let named = err.contains("no_such_tool") && err.contains("unknown");
    assert!(named, "{err}");
    let err = op
        .fails(&["breakers", "open", unknown, "--reason", "x"], 3)
        .await;
    assert!(err.contains("--allow-unknown"), "{err}");
    let elsewhere = ["breakers", "history", "nowhere/search/web_search"];
    let err = op.fails(&elsewhere, 3).await;
    assert!(err.contains("namespace \"nowhere\" is unknown"), "{err}");
    op.fails(&["breakers", "show", "no-slash"], 2).await;
    let bad_for = [
        "breakers", "open", RESTART, "--reason", "x", "--for", "soon",
    ];
    op.fails(&bad_for, 2).await;
    let err = op
        .fails(&["breakers", "close", RESTART, "--reason", "x"], 1)
        .await;
    assert!(err.contains("not open"), "{err}");
}

fn begin(ns: &str, key: &str, effect: Effect) -> BeginRequest {
    BeginRequest {
        namespace: ns.into(),
        key: key.into(),
        fingerprint: b"fp".to_vec(),
        intent_id: format!("intent-{key}"),
        server: "deployments".into(),
        tool: "restart_deployment_job".into(),
        target: "job-42".into(),
        effect: effect as i32,
        attempt_id: "attempt-1".into(),
        lease_ms: 600_000,
        ..Default::default()
    }
}

/// The Fusebox error code a refused call carries.
fn error_code(status: &tonic::Status) -> ErrorCode {
    let detail = FuseboxErrorDetail::decode(status.details()).expect("error detail");
    ErrorCode::try_from(detail.code).expect("known error code")
}

/// The namespace of the three-node story.
const OPS: &str = "ops";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_resolution_and_the_write_kill_switch_from_the_cli() {
    let cluster = TestCluster::start(3);
    let leader = cluster.wait_leader(&[1, 2, 3], SETTLE).await;
    let follower = *cluster.nodes.keys().find(|id| **id != leader).unwrap();
    let op = Operator {
        endpoints: cluster.nodes[&follower].addr.clone(),
    };
    let mut ledger = LedgerClient::new(cluster.channel(follower).await);

    println!("phase: a write times out after sending and its record turns ambiguous");
    make_ambiguous(&mut ledger, "restart-1").await;

    println!("phase: the operator finds it, resolves it, and the lookup shows who and why");
    find_and_resolve(&op, "restart-1").await;

    println!("phase: unknown namespaces and keys fail with exit code 3 and say what is missing");
    unknown_names(&op).await;

    println!("phase: the kill switch blocks write begins on every node, reads go through");
    kill_switch_on(&op, &cluster, &mut ledger).await;

    println!("phase: switched off, the same write begins");
    kill_switch_off(&op, &mut ledger).await;
}

async fn make_ambiguous(ledger: &mut LedgerClient<Channel>, key: &str) {
    let started = ledger
        .begin(begin(OPS, key, Effect::NonIdempotentWrite))
        .await
        .unwrap();
    let outcome = started.into_inner().outcome;
    assert!(matches!(outcome, Some(Begun::Started(_))), "{outcome:?}");
    let complete = CompleteRequest {
        namespace: OPS.into(),
        key: key.into(),
        attempt_id: "attempt-1".into(),
        outcome: Some(Completion::Ambiguous(CompleteAmbiguous {
            reason: "timed out after the request left".into(),
        })),
        ..Default::default()
    };
    ledger.complete(complete).await.unwrap();
}

async fn find_and_resolve(op: &Operator, key: &str) {
    let ambiguous = ["ledger", "list", "--ns", OPS, "--status", "ambiguous"];
    let list = op.json(&ambiguous).await;
    let records = list["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{list}");
    let found = pair(&records[0], "key", "status");
    assert_eq!(found, (key.into(), "ambiguous".into()), "{list}");
    let table = op.ok(&ambiguous).await;
    let row = table
        .lines()
        .any(|l| l.starts_with(key) && l.contains("ambiguous"));
    assert!(row, "{table}");
    let note = "job restarted, per the backend's audit log";
    let resolve = ["ledger", "resolve", OPS, key, "--decision", "done"];
    op.ok(&[&resolve[..], &["--operation-id", "op-77", "--note", note]].concat())
        .await;
    let record = op.json(&["ledger", "lookup", OPS, key]).await;
    let settled = pair(&record, "status", "operation_id");
    assert_eq!(settled, ("succeeded".into(), "op-77".into()), "{record}");
    let resolution = &record["resolution"];
    let who = pair(resolution, "actor", "decision");
    assert_eq!(who, (ACTOR.into(), "done".into()), "{record}");
    assert_eq!(resolution["note"], note, "{record}");
    let shown = op.ok(&["ledger", "lookup", OPS, key]).await;
    assert!(shown.contains(&format!("done by {ACTOR}")), "{shown}");
    let left = op.json(&ambiguous).await;
    assert_eq!(left["records"].as_array().unwrap().len(), 0, "{left}");
    let by_operation = ["ledger", "list", "--ns", OPS, "--operation-id", "op-77"];
    let mapped = op.json(&by_operation).await;
    assert_eq!(mapped["records"][0]["key"], key, "{mapped}");
    let again = [
        "ledger",
        "resolve",
        OPS,
        key,
        "--decision",
        "abandoned",
        "--note",
        "again",
    ];
    let err = op.fails(&again, 1).await;
    let refused = err.contains("only an ambiguous record can be resolved");
    assert!(refused, "{err}");
    op.fails(&[&resolve[..], &["--note", "no operation id"]].concat(), 2)
        .await;
}

async fn unknown_names(op: &Operator) {
    let err = op.fails(&["ledger", "lookup", OPS, "no-such-key"], 3).await;
    assert!(err.contains("no-such-key"), "{err}");
    let ghost: [&[&str]; 4] = [
        &["ledger", "list", "--ns", "ghost"],
        &["breakers", "list", "--ns", "ghost"],
        &["policy", "show", "--ns", "ghost"],
        &[
            "killswitch",
            "writes",
            "on",
            "--ns",
            "ghost",
            "--reason",
            "typo",
        ],
    ];
    for args in ghost {
        let err = op.fails(args, 3).await;
        assert!(err.contains("ghost"), "{args:?}: {err}");
    }
    let unreachable = Operator {
        endpoints: format!("127.0.0.1:{}", support::free_port()),
    };
    unreachable.fails(&["cluster", "status"], 4).await;
}

async fn kill_switch_on(op: &Operator, cluster: &TestCluster, ledger: &mut LedgerClient<Channel>) {
    let on = [
        "killswitch",
        "writes",
        "on",
        "--ns",
        OPS,
        "--reason",
        "incident 81",
    ];
    let out = op.ok(&on).await;
    assert!(out.contains("writes blocked in namespace ops"), "{out}");
    for id in [1, 2, 3] {
        let mut client = LedgerClient::new(cluster.channel(id).await);
        let refused = client
            .begin(begin(OPS, "restart-2", Effect::NonIdempotentWrite))
            .await;
        let status = refused.expect_err("a write begin while writes are blocked");
        let code = error_code(&status);
        assert_eq!(code, ErrorCode::WritesBlocked, "node {id}: {status:?}");
        assert!(status.message().contains("incident 81"), "{status:?}");
    }
    let read = ledger
        .begin(begin(OPS, "inspect-1", Effect::ReadOnly))
        .await
        .unwrap();
    let outcome = read.into_inner().outcome;
    assert!(matches!(outcome, Some(Begun::Started(_))), "{outcome:?}");
    for id in [1, 2, 3] {
        let replica = format!("replica-{id}");
        let mut watcher = watch(&cluster.nodes[&id].addr, OPS, &replica).await;
        wait_seen(
            &mut watcher,
            "writes blocked",
            |s| matches!(s, Seen::KillSwitch(k) if k.writes_blocked && k.actor == ACTOR),
        )
        .await;
    }
    let status = op.json(&["cluster", "status"]).await;
    let switches = status["kill_switches"].as_array().unwrap();
    assert_eq!(switches.len(), 1, "{status}");
    let shown = pair(&switches[0], "namespace", "reason");
    assert_eq!(shown, (OPS.into(), "incident 81".into()), "{status}");
    assert_eq!(switches[0]["actor"], ACTOR, "{status}");
    let table = op.ok(&["cluster", "status"]).await;
    let line = table.contains("write kill switch: ON in namespace ops");
    assert!(line && table.contains("incident 81"), "{table}");
}

async fn kill_switch_off(op: &Operator, ledger: &mut LedgerClient<Channel>) {
    let off = [
        "killswitch",
        "writes",
        "off",
        "--ns",
        OPS,
        "--reason",
        "incident 81 closed",
    ];
    op.ok(&off).await;
    let again = ledger
        .begin(begin(OPS, "restart-2", Effect::NonIdempotentWrite))
        .await
        .unwrap();
    let outcome = again.into_inner().outcome;
    assert!(matches!(outcome, Some(Begun::Started(_))), "{outcome:?}");
    let deadline = Instant::now() + SETTLE;
    loop {
        // `cluster status` reports the node it asked, a follower here: it
        // shows the switch off once that node applied the change.
        let status = op.json(&["cluster", "status"]).await;
        if status["kill_switches"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kill switch still shown: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
