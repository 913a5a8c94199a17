//! A node whose data disk fills up (issue 13, item 11): no acknowledged
//! write is lost, the node says why it cannot go on, and it serves again
//! once space returns.
//!
//! The data directory is a small tmpfs mounted for the test, which needs
//! root (as CI runs). Writes carry 16 KiB results so the disk fills in
//! seconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_proto::v1 as pb;
use fusebox_proto::v1::ledger_client::LedgerClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use support::{channel_to, free_port};
use tonic::transport::Channel;

const NS: &str = "agents";
const RESULT_BYTES: usize = 16 * 1024;
/// More than the tmpfs holds: the disk fills before the writer stops.
const KEYS_MAX: usize = 20_000;

/// A tmpfs of `size`, unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mounting a tmpfs needs root: run this test as root (CI does)"
        );
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }

    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "remount the tmpfs");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

struct Node {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Node {
    fn start(data: &Path, addr: &str, log: &Path) -> Node {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_fusebox"))
            .args(["serve", "--id", "1", "--listen", addr, "--data"])
            .arg(data)
            .env("RUST_LOG", "warn")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn fusebox serve");
        Node {
            child,
            addr: addr.to_owned(),
            log: log.to_path_buf(),
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn begin(key: &str) -> pb::BeginRequest {
    pb::BeginRequest {
        namespace: NS.into(),
        key: key.into(),
        fingerprint: b"fp".to_vec(),
        intent_id: format!("intent-{key}"),
        server: "jobs".into(),
        tool: "restart".into(),
        effect: pb::Effect::NonIdempotentWrite as i32,
        attempt_id: "a1".into(),
        lease_ms: 600_000,
        ..Default::default()
    }
}

fn complete(key: &str) -> pb::CompleteRequest {
    pb::CompleteRequest {
        namespace: NS.into(),
        key: key.into(),
        attempt_id: "a1".into(),
        outcome: Some(pb::complete_request::Outcome::Succeeded(
            pb::CompleteSucceeded {
                operation_id: format!("op-{key}"),
                result: result_of(key),
            },
        )),
        ..Default::default()
    }
}

fn result_of(key: &str) -> Vec<u8> {
    let mut result = key.as_bytes().to_vec();
    result.resize(RESULT_BYTES, b'.');
    result
}

/// Writes keys until the node refuses or stops answering; the keys whose
/// completion was acknowledged.
async fn fill(channel: Channel) -> (Vec<String>, String) {
    let mut ledger = LedgerClient::new(channel);
    let mut acknowledged = Vec::new();
    for i in 0..KEYS_MAX {
        let key = format!("k-{i:05}");
        let call = async {
            ledger.begin(begin(&key)).await?;
            ledger.complete(complete(&key)).await
        };
        match tokio::time::timeout(Duration::from_secs(10), call).await {
            Ok(Ok(_)) => acknowledged.push(key),
            Ok(Err(status)) => {
                return (
                    acknowledged,
                    format!("{:?}: {}", status.code(), status.message()),
                );
            }
            Err(_) => return (acknowledged, "no answer within 10 s".into()),
        }
    }
    panic!("{KEYS_MAX} writes of 16 KiB fit on the small disk");
}

async fn wait_serving(addr: &str, within: Duration) {
    let started = Instant::now();
    loop {
        let mut ledger = LedgerClient::new(channel_to(addr));
        let probe = pb::LookupRequest {
            namespace: NS.into(),
            key: "k-00000".into(),
            ..Default::default()
        };
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), ledger.lookup(probe)).await
        {
            return;
        }
        assert!(
            started.elapsed() < within,
            "the node did not serve again within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_loses_no_acknowledged_write_and_the_node_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&dir.path().join("disk"), "48m");
    let data = disk.dir.join("data");
    let addr = format!("127.0.0.1:{}", free_port());
    let log = dir.path().join("node.log");
    let mut node = Node::start(&data, &addr, &log);
    wait_leader(&addr).await;

    eprintln!("phase: write 16 KiB results until the 48 MiB disk is full");
    let (acknowledged, refusal) = fill(channel_to(&addr)).await;
    eprintln!(
        "{} writes acknowledged, then: {refusal}",
        acknowledged.len()
    );
    assert!(acknowledged.len() > 100, "the disk took some writes first");

    eprintln!("phase: the node says why it stopped");
    let deadline = Instant::now() + Duration::from_secs(20);
    let said = loop {
        let text = node.log_text();
        if text.contains("No space left on device") || text.contains("ENOSPC") {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(said, "the log names the full disk:\n{}", node.log_text());

    eprintln!("phase: the node stops (for its supervisor to restart it) rather than linger");
    let exited = Instant::now();
    while node.child.try_wait().unwrap().is_none() {
        assert!(
            exited.elapsed() < Duration::from_secs(30),
            "a node whose storage failed keeps running:\n{}",
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(node.log_text().contains("raft stopped on this node"));

    eprintln!("phase: restarted while the disk is still full, it breaks nothing");
    node = Node::start(&data, &addr, &log);
    let started = Instant::now();
    while node.child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(node);

    eprintln!("phase: space returns; restarted, the node serves and takes writes");
    disk.resize("512m");
    node = Node::start(&data, &addr, &log);
    wait_serving(&addr, Duration::from_secs(60)).await;
    let mut ledger = LedgerClient::new(channel_to(&node.addr));
    let after = "after-the-disk-filled";
    ledger.begin(begin(after)).await.expect("writes resume");
    ledger
        .complete(complete(after))
        .await
        .expect("writes resume");

    eprintln!("phase: every acknowledged write is there, with its result");
    for key in &acknowledged {
        let lookup = pb::LookupRequest {
            namespace: NS.into(),
            key: key.clone(),
            ..Default::default()
        };
        let record = ledger
            .lookup(lookup)
            .await
            .unwrap_or_else(|s| panic!("acknowledged {key} lost: {s:?}"))
            .into_inner()
            .record
            .unwrap();
        assert_eq!(record.status(), pb::LedgerStatus::Succeeded, "{key}");
        assert_eq!(
            record.result.as_deref(),
            Some(result_of(key).as_slice()),
            "{key}"
        );
    }
    drop(node);
}

async fn wait_leader(addr: &str) {
    let started = Instant::now();
    loop {
        let mut cluster = fusebox_proto::v1::cluster_client::ClusterClient::new(channel_to(addr));
        if let Ok(Ok(status)) = tokio::time::timeout(
            Duration::from_secs(2),
            cluster.status(pb::StatusRequest::default()),
        )
        .await
        {
            if status.into_inner().leader_id.is_some() {
                return;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no leader");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
