//! What a payload or a disk may not do to a cluster of real `fusebox`
//! processes (issue 13): big entries stall no one, a follower behind by
//! them catches up, and a data directory serves only the node and cluster
//! it belongs to.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_proto::v1::begin_response::Outcome;
use fusebox_proto::v1::tools_client::ToolsClient;
use fusebox_proto::v1::{ImportToolsRequest, ManifestTool};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::ledger::begin_request;
use support::{channel_to, free_port, TestCluster};

const SETTLE: Duration = Duration::from_secs(30);

/// A manifest of `tools` tools, each with a `block_bytes` disclosure block
/// of control characters: inside the per-tool bounds, and six times larger
/// once escaped as JSON, which is how the Raft transport used to carry it.
fn heavy_import(server: &str, tools: usize, block_bytes: usize) -> ImportToolsRequest {
    ImportToolsRequest {
        namespace: "agents".into(),
        server: server.into(),
        actor: "ops".into(),
        tools: (0..tools)
            .map(|i| ManifestTool {
                tool: format!("tool-{i}"),
                latency_disclosure_json: Some("\u{1}".repeat(block_bytes)),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_imports_through_every_node_stall_no_write() {
    eprintln!("phase: three nodes, a leader");
    let cluster = TestCluster::start(3);
    cluster.wait_leader(&[1, 2, 3], SETTLE).await;

    eprintln!("phase: four imports of 250 tools x 16 KB at once, through every node");
    let started = Instant::now();
    let imports: Vec<_> = (0..4u64)
        .map(|i| {
            let addr = cluster.nodes[&(i % 3 + 1)].addr.clone();
            tokio::spawn(async move {
                let mut tools = ToolsClient::new(channel_to(&addr));
                let call = tools.import(heavy_import(&format!("vendor-{i}"), 250, 16_000));
                tokio::time::timeout(Duration::from_secs(60), call).await
            })
        })
        .collect();
    for import in imports {
        let reply = import.await.unwrap().expect("import answered in time");
        assert_eq!(reply.expect("import taken").into_inner().tools.len(), 250);
    }
    eprintln!("imports committed in {:?}", started.elapsed());

    eprintln!("phase: every node replicated them, and writes still commit");
    cluster.wait_in_sync(&[1, 2, 3], SETTLE).await;
    for via in [1, 2, 3] {
        let mut ledger = cluster.ledger(via).await;
        let begin = ledger.begin(begin_request(&format!("after-imports-{via}"), "a1"));
        let reply = tokio::time::timeout(Duration::from_secs(10), begin)
            .await
            .expect("a write commits within 10 s")
            .expect("begin answered");
        assert!(matches!(
            reply.into_inner().outcome,
            Some(Outcome::Started(_))
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_by_big_entries_catches_up() {
    eprintln!("phase: three nodes, a leader, one follower down");
    let mut cluster = TestCluster::start(3);
    let leader = cluster.wait_leader(&[1, 2, 3], SETTLE).await;
    let behind = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    cluster.kill(behind);

    eprintln!("phase: four imports of 250 tools x 16 KB commit without it");
    let addr = cluster.nodes[&leader].addr.clone();
    let mut tools = ToolsClient::new(channel_to(&addr));
    for i in 0..4 {
        let call = tools.import(heavy_import(&format!("vendor-{i}"), 250, 16_000));
        tokio::time::timeout(Duration::from_secs(60), call)
            .await
            .expect("import answered in time")
            .expect("import taken");
    }

    // The leader's batches to it carry these entries, about 4 MB each and
    // up to four at once: a stream opening with such a batch must have
    // time for its size, or each new stream may time out with the same
    // batch and the follower never catch up (heartbeats, which still
    // arrive, keep it from an election). This passed with the bare
    // deadline too on an idle machine: it stands for the case, while
    // `raft_stream.rs` reproduces the timeout.
    eprintln!("phase: the follower restarts and catches up");
    cluster.spawn(behind, false);
    cluster.wait_in_sync(&[1, 2, 3], SETTLE).await;
}

#[test]
fn a_data_directory_refuses_another_node_or_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let serve = |extra: &[&str]| {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fusebox"));
        cmd.args(["serve", "--listen", &listen, "--data"])
            .arg(&data)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    };

    eprintln!("phase: node 1 of the default cluster starts on a fresh directory");
    let mut first = serve(&[]).spawn().unwrap();
    let deadline = Instant::now() + SETTLE;
    while !data.join("CURRENT").exists() {
        assert!(Instant::now() < deadline, "node 1 never opened its data");
        assert!(first.try_wait().unwrap().is_none(), "node 1 exited");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    first.kill().unwrap();
    first.wait().unwrap();

    for other in [
        vec!["--id", "2"],
        vec!["--cluster-id", "other"],
        vec!["--id", "2", "--cluster-id", "other"],
    ] {
        eprintln!("phase: {other:?} on node 1's directory is refused");
        let out = serve(&other).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{other:?} served node 1's data");
        assert!(
            stderr.contains("belongs to node 1 of cluster"),
            "{other:?}: {stderr}"
        );
    }

    eprintln!("phase: node 1 itself still starts on it");
    let mut again = serve(&[]).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        again.try_wait().unwrap().is_none(),
        "node 1 refused its own directory"
    );
    again.kill().unwrap();
    again.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_a_command_quietly() {
    let cluster = TestCluster::start(1);
    cluster.wait_leader(&[1], SETTLE).await;
    let fusebox = env!("CARGO_BIN_EXE_fusebox");
    let addr = &cluster.nodes[&1].addr;
    // `true` exits without reading, so the pipe is closed by the time the
    // command has asked the cluster and prints.
    let script = format!("set -o pipefail; '{fusebox}' cluster status --endpoints {addr} | true");
    for _ in 0..3 {
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{:?}: {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_at_its_documented_bounds_is_imported_through_a_follower() {
    let cluster = TestCluster::start(3);
    let leader = cluster.wait_leader(&[1, 2, 3], SETTLE).await;
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    // 512 tools (TOOLS_PER_SERVER_MAX), each with a 16 KiB block
    // (DISCLOSURE_BLOCK_BYTES_MAX): over tonic's default 4 MiB message.
    let request = heavy_import("full-vendor", 512, 16 * 1024);
    let mut tools = ToolsClient::new(channel_to(&cluster.nodes[&follower].addr));
    let reply = tokio::time::timeout(Duration::from_secs(60), tools.import(request))
        .await
        .expect("import answered in time")
        .expect("a manifest within every documented bound is taken");
    assert_eq!(reply.into_inner().tools.len(), 512);
}

/// Runs `fusebox ARGS --endpoints ADDR --json`: success, and its output.
fn fusebox_json(addr: &str, args: &[&str]) -> (bool, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(args)
        .args(["--endpoints", addr, "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(stdout.trim()).unwrap_or(serde_json::Value::Null);
    (
        out.status.success(),
        value,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn listed(addr: &str) -> (Vec<String>, u64) {
    let (ok, list, stderr) = fusebox_json(addr, &["namespace", "list"]);
    assert!(ok, "{stderr}");
    let names = list["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["namespace"].as_str().unwrap().to_owned())
        .collect();
    (names, list["cluster_namespaces"].as_u64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_deletes_a_junk_namespace_but_not_one_with_live_state() {
    use fusebox_proto::v1::breakers_client::BreakersClient;
    use fusebox_proto::v1::{Outcome as Reported, OutcomeClass, ReportOutcomesRequest};

    let cluster = TestCluster::start(3);
    let leader = cluster.wait_leader(&[1, 2, 3], SETTLE).await;
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let addr = cluster.nodes[&follower].addr.clone();

    // A typo'd namespace takes a place with one report; the real one holds
    // a ledger record.
    let report = ReportOutcomesRequest {
        namespace: "agnets".into(),
        replica_id: "replica-a".into(),
        batch_seq: 1,
        outcomes: vec![Reported {
            server: "search".into(),
            tool: "lookup".into(),
            class: OutcomeClass::Success as i32,
            duration_ms: 40,
            ..Default::default()
        }],
        ..Default::default()
    };
    BreakersClient::new(channel_to(&addr))
        .report_outcomes(report)
        .await
        .unwrap();
    let begun = cluster
        .ledger(follower)
        .await
        .begin(begin_request("real-write", "a1"))
        .await
        .unwrap();
    assert!(matches!(
        begun.into_inner().outcome,
        Some(Outcome::Started(_))
    ));
    cluster.wait_in_sync(&[1, 2, 3], SETTLE).await;
    let (names, taken) = listed(&addr);
    assert_eq!(names, ["agents", "agnets"]);
    assert_eq!(taken, 2);

    // Through a follower (forwarded to the leader): the one with a record
    // is refused and says why; the junk one goes.
    let (ok, _, stderr) = fusebox_json(&addr, &["namespace", "delete", "agents", "--reason", "x"]);
    assert!(!ok, "a namespace with a ledger record was deleted");
    assert!(stderr.contains("ledger record"), "{stderr}");
    let (ok, gone, stderr) = fusebox_json(
        &addr,
        &["namespace", "delete", "agnets", "--reason", "typo"],
    );
    assert!(ok, "{stderr}");
    assert_eq!(gone["breakers"], 2, "{gone}");

    cluster.wait_in_sync(&[1, 2, 3], SETTLE).await;
    for id in [1, 2, 3] {
        let (names, taken) = listed(&cluster.nodes[&id].addr);
        assert_eq!((names, taken), (vec!["agents".to_owned()], 1), "node {id}");
    }
    let (ok, _, stderr) = fusebox_json(
        &addr,
        &["namespace", "delete", "agnets", "--reason", "again"],
    );
    assert!(!ok && stderr.contains("not found"), "{stderr}");
}
