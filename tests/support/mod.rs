//! A cluster of real `fusebox` processes on ephemeral loopback ports.
//!
//! Each node runs `fusebox serve` with its own data directory under one
//! temporary directory; processes are killed (SIGKILL) when the cluster is
//! dropped, so a failing test never leaves nodes behind. A cluster started
//! with [`TestCluster::start_with_timing`] gives every node a TOML config
//! file (`fusebox serve --config FILE`) holding its whole configuration, so
//! Raft timing and log compaction can be tuned per test.
//!
//! A cluster started with [`TestCluster::start_tls`] runs with TLS on
//! both sides and with auth: certificates from `fusebox certs dev`, a peer
//! listener per node with mutual TLS, every node given the same
//! `--init-auth` token file, and every channel the harness opens speaks TLS
//! with the client certificate, which names `fusebox://user/admin`, the
//! admin principal `--init-auth` creates.
//!
//! Every wait takes a deadline and panics with what it was waiting for when
//! the deadline passes; every gRPC call has a timeout.
//!
//! Each node logs (stdout and stderr) to `node-ID.log` in the cluster's
//! directory, at `info` with openraft's elections and votes (or at
//! `FUSEBOX_TEST_NODE_LOG`, a `RUST_LOG` filter); a restart appends to it
//! after a line that marks it. When a test fails with a cluster alive, up
//! to the last [`LOG_LINES_ON_FAILURE`] lines of each node's log are
//! printed with its failure.

#![allow(dead_code)]

pub mod ledger;

use fusebox_proto::net::Net;
use fusebox_proto::tls::{ClientTlsFiles, TlsConnector};
use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::{
    AddMemberRequest, AddMemberResponse, MemberRole, RemoveMemberRequest, RemoveMemberResponse,
    StatusRequest, StatusResponse,
};
use fusebox_server::node::Timing;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

/// How long a membership change may take before the test gives up on it
/// (the server's own deadline is 30 s).
pub const MEMBERSHIP_CALL_TIMEOUT: Duration = Duration::from_secs(40);

/// Ports handed out below the kernel's ephemeral range (32768 and up on
/// Linux), so no outgoing connection or `bind(0)` of any process can take
/// one between the check here and the node binding it. Each test binary
/// starts at its own offset (its process id) and counts up.
static NEXT_PORT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
const PORTS_FIRST: u32 = 20_000;
const PORTS_SPAN: u32 = 12_000;

/// Picks a free loopback port: the next one below the ephemeral range that
/// can be bound now (then released for the node to bind).
pub fn free_port() -> u16 {
    use std::sync::atomic::Ordering;
    let offset = std::process::id() * 97 % PORTS_SPAN;
    for _ in 0..PORTS_SPAN {
        let n = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        let port = PORTS_FIRST + (offset + n) % PORTS_SPAN;
        let port = u16::try_from(port).expect("below 32768");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!(
        "no free loopback port between {PORTS_FIRST} and {}",
        PORTS_FIRST + PORTS_SPAN
    )
}

/// One node of a test cluster.
pub struct TestNode {
    pub id: u64,
    pub addr: String,
    /// Its peer listener (TLS clusters only).
    pub peer_addr: Option<String>,
    pub data: PathBuf,
    child: Option<Child>,
}

impl TestNode {
    /// How the node is named in `--peers`: `API` or `API@PEER`.
    fn member(&self) -> String {
        match &self.peer_addr {
            Some(peer) => format!("{}@{peer}", self.addr),
            None => self.addr.clone(),
        }
    }
}

/// Real processes forming one cluster.
pub struct TestCluster {
    pub nodes: BTreeMap<u64, TestNode>,
    peers: String,
    /// Timing written to each node's config file; `None`: flags only.
    timing: Option<Timing>,
    /// The certificates' directory, for a TLS cluster.
    pub certs: Option<PathBuf>,
    /// The first admin token's file (`--init-auth`), for a TLS cluster.
    pub admin_token: Option<PathBuf>,
    dir: tempfile::TempDir,
}

/// How much of each node's log a failing test prints.
pub const LOG_LINES_ON_FAILURE: usize = 60;

/// Node certificates `start_tls` writes beyond the initial members, for
/// nodes that join later.
const SPARE_NODE_CERTS: u64 = 2;

/// Writes a development CA and certificates for `nodes` nodes into `dir`.
pub fn dev_certs(dir: &std::path::Path, nodes: u64) {
    let status = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(["certs", "dev", "--nodes", &nodes.to_string(), "--out"])
        .arg(dir)
        .stdout(Stdio::null())
        .status()
        .expect("run fusebox certs dev");
    assert!(status.success(), "fusebox certs dev failed");
}

/// A TLS connector trusting `certs`'s CA, presenting its client
/// certificate.
pub fn client_tls(certs: &std::path::Path) -> TlsConnector {
    TlsConnector::load(ClientTlsFiles {
        ca: certs.join("ca.pem"),
        cert: Some(certs.join("client.pem")),
        key: Some(certs.join("client-key.pem")),
        server_name: None,
    })
    .expect("load the client's TLS files")
}

impl TestCluster {
    /// Starts `n` nodes forming one cluster, configured by flags.
    pub fn start(n: u64) -> TestCluster {
        TestCluster::launch(n, None)
    }

    /// Starts `n` nodes forming one cluster, each configured by a TOML file
    /// that carries `timing`.
    pub fn start_with_timing(n: u64, timing: Timing) -> TestCluster {
        TestCluster::launch(n, Some(timing))
    }

    /// Starts `n` nodes with TLS for clients and mutual TLS between
    /// members, each on a peer listener of its own.
    pub fn start_tls(n: u64) -> TestCluster {
        TestCluster::launch_with(n, None, true)
    }

    /// [`TestCluster::start_tls`] with `timing` in each node's config file
    /// (the TLS and auth settings still come as flags).
    pub fn start_tls_with_timing(n: u64, timing: Timing) -> TestCluster {
        TestCluster::launch_with(n, Some(timing), true)
    }

    fn launch(n: u64, timing: Option<Timing>) -> TestCluster {
        TestCluster::launch_with(n, timing, false)
    }

    fn launch_with(n: u64, timing: Option<Timing>, tls: bool) -> TestCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let certs = tls.then(|| {
            let certs = dir.path().join("certs");
            dev_certs(&certs, n + SPARE_NODE_CERTS);
            certs
        });
        let admin_token = tls.then(|| {
            let file = dir.path().join("admin.token");
            let (id, secret) = fusebox_server::api::auth::new_token().expect("draw a token");
            let token = fusebox_core::auth::token_text(&id, &secret);
            std::fs::write(&file, token).expect("write the admin token");
            file
        });
        let mut cluster = TestCluster {
            nodes: BTreeMap::new(),
            peers: String::new(),
            timing,
            certs,
            admin_token,
            dir,
        };
        for id in 1..=n {
            cluster.insert_node(id);
        }
        cluster.peers = cluster
            .nodes
            .values()
            .map(|node| format!("{}={}", node.id, node.member()))
            .collect::<Vec<_>>()
            .join(",");
        for id in 1..=n {
            cluster.spawn(id, false);
        }
        cluster
    }

    /// Gives node `id` fresh addresses and a data directory.
    fn insert_node(&mut self, id: u64) -> String {
        let addr = format!("127.0.0.1:{}", free_port());
        let peer_addr = self
            .certs
            .is_some()
            .then(|| format!("127.0.0.1:{}", free_port()));
        let data = self.dir.path().join(format!("node-{id}"));
        self.nodes.insert(
            id,
            TestNode {
                id,
                addr: addr.clone(),
                peer_addr,
                data,
                child: None,
            },
        );
        addr
    }

    /// (Re)starts node `id`'s process on its address and data directory.
    pub fn spawn(&mut self, id: u64, join: bool) {
        let config = self.timing.as_ref().map(|t| self.write_config(id, join, t));
        let peers = self.peers.clone();
        let node = self.nodes.get(&id).expect("known node");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fusebox"));
        cmd.arg("serve");
        match config {
            Some(file) => {
                cmd.arg("--config").arg(file);
            }
            None => {
                cmd.args(["--id", &id.to_string(), "--listen", &node.addr])
                    .args(["--peers", &peers, "--data"])
                    .arg(&node.data);
                if join {
                    cmd.arg("--join");
                }
            }
        }
        if let (Some(certs), Some(peer)) = (&self.certs, &node.peer_addr) {
            let file = |name: String| certs.join(name);
            cmd.args(["--peer-listen", peer])
                .arg("--tls-cert")
                .arg(file(format!("node-{id}.pem")))
                .arg("--tls-key")
                .arg(file(format!("node-{id}-key.pem")))
                .arg("--tls-ca")
                .arg(file("ca.pem".into()))
                .arg("--peer-cert")
                .arg(file(format!("node-{id}.pem")))
                .arg("--peer-key")
                .arg(file(format!("node-{id}-key.pem")))
                .arg("--peer-ca")
                .arg(file("ca.pem".into()));
        }
        if let Some(token) = &self.admin_token {
            cmd.arg("--init-auth").arg(token);
        }
        // Appended to: a restarted node's log follows its earlier run's.
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .expect("open the node's log");
        std::io::Write::write_all(&mut log, format!("--- node {id} starts ---\n").as_bytes())
            .expect("mark the node's start in its log");
        let filter = std::env::var("FUSEBOX_TEST_NODE_LOG").unwrap_or_else(|_| "info".into());
        let errors = log.try_clone().expect("share the node's log");
        // `serve` logs to stdout; stderr has what comes before logging.
        cmd.env("RUST_LOG", filter).stdout(log).stderr(errors);
        let child = cmd.spawn().expect("spawn fusebox serve");
        self.nodes.get_mut(&id).expect("known node").child = Some(child);
    }

    /// Writes node `id`'s whole configuration as TOML; returns the file.
    fn write_config(&self, id: u64, join: bool, t: &Timing) -> PathBuf {
        let node = &self.nodes[&id];
        let peers: String = self
            .peers
            .split(',')
            .filter_map(|p| p.split_once('='))
            .map(|(id, addr)| format!("{id} = \"{addr}\"\n"))
            .collect();
        let text = format!(
            "id = {id}\nlisten = \"{addr}\"\ndata_dir = {data:?}\njoin = {join}\n\n\
             [peers]\n{peers}\n\
             [timing]\nheartbeat_ms = {}\nelection_min_ms = {}\nelection_max_ms = {}\n\
             snapshot_every_entries = {}\nlog_kept_behind_snapshot = {}\ntick_ms = {}\n",
            t.heartbeat_ms,
            t.election_min_ms,
            t.election_max_ms,
            t.snapshot_every_entries,
            t.log_kept_behind_snapshot,
            t.tick_ms,
            addr = node.addr,
            data = node.data.display().to_string(),
        );
        let file = self.dir.path().join(format!("node-{id}.toml"));
        std::fs::write(&file, text).expect("write node config");
        file
    }

    /// Adds a node that joins (is not part of the initial peers).
    pub fn add_joiner(&mut self, id: u64) -> String {
        let addr = self.insert_node(id);
        self.spawn(id, true);
        addr
    }

    /// Where node `id` logs.
    pub fn log_path(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}.log"))
    }

    /// The last `lines` lines node `id` has logged.
    pub fn log_tail(&self, id: u64, lines: usize) -> String {
        let text = std::fs::read(self.log_path(id)).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGKILLs node `id`.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.nodes.get_mut(&id).and_then(|n| n.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes node `id`'s process (SIGSTOP): it holds its connections but
    /// answers nothing, as a node behind a partition would.
    pub fn pause(&self, id: u64) {
        self.signal(id, "-STOP");
    }

    /// Lets a paused node run again (SIGCONT).
    pub fn resume(&self, id: u64) {
        self.signal(id, "-CONT");
    }

    fn signal(&self, id: u64, signal: &str) {
        let child = self.nodes[&id].child.as_ref().expect("a running node");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} node {id}");
    }

    /// Deletes node `id`'s data directory (kill it first).
    pub fn wipe(&mut self, id: u64) {
        let node = &self.nodes[&id];
        assert!(node.child.is_none(), "wipe of running node {id}");
        if node.data.exists() {
            std::fs::remove_dir_all(&node.data).expect("wipe data directory");
        }
    }

    /// Whether node `id`'s process runs (as far as this harness knows).
    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.child.is_some())
    }

    /// A gRPC channel to node `id`.
    pub async fn channel(&self, id: u64) -> Channel {
        self.channel_with(&self.nodes[&id].addr, Duration::from_secs(10))
    }

    /// A lazily connected channel to `addr` with `deadline` per call, over
    /// TLS in a TLS cluster.
    pub fn channel_with(&self, addr: &str, deadline: Duration) -> Channel {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(1))
            .timeout(deadline);
        let tls = self.certs.as_deref().map(client_tls);
        Net::Tcp.channel_tls(endpoint, tls.as_ref())
    }

    /// A ledger client to node `id`.
    pub async fn ledger(&self, id: u64) -> LedgerClient<Channel> {
        LedgerClient::new(self.channel(id).await)
    }

    /// Node `id`'s status, if it answers.
    pub async fn status(&self, id: u64) -> Option<StatusResponse> {
        self.try_status(id).await.ok()
    }

    /// Node `id`'s status, or why it did not give one.
    pub async fn try_status(&self, id: u64) -> Result<StatusResponse, String> {
        let mut client = ClusterClient::new(self.channel(id).await);
        let call = client.status(StatusRequest::default());
        match tokio::time::timeout(Duration::from_secs(2), call).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
            Err(_) => Err("no answer within 2s".into()),
        }
    }

    /// Waits until every listed node agrees on one leader; returns it.
    pub async fn wait_leader(&self, among: &[u64], within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        loop {
            let mut leaders = Vec::new();
            for id in among {
                leaders.push(self.status(*id).await.and_then(|s| s.leader_id));
            }
            if let Some(Some(l)) = leaders.first() {
                if leaders.iter().all(|x| *x == Some(*l)) && among.contains(l) {
                    return *l;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader among {among:?}: {leaders:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until node `id` has applied at least `index`.
    pub async fn wait_applied(&self, id: u64, index: u64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if self
                .status(id)
                .await
                .is_some_and(|s| s.applied_index >= index)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} did not apply {index} in time"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every node of `among` has applied what the leader of
    /// `among` had applied when the wait began.
    pub async fn wait_in_sync(&self, among: &[u64], within: Duration) {
        let leader = self.wait_leader(among, within).await;
        let target = self
            .status(leader)
            .await
            .expect("leader answers status")
            .applied_index;
        for id in among {
            self.wait_applied(*id, target, within).await;
        }
    }

    /// Waits until node `id`'s status satisfies `ok`; returns that status.
    pub async fn wait_status(
        &self,
        id: u64,
        what: &str,
        within: Duration,
        ok: impl Fn(&StatusResponse) -> bool,
    ) -> StatusResponse {
        let deadline = Instant::now() + within;
        loop {
            let status = self.status(id).await;
            if let Some(s) = status.as_ref().filter(|s| ok(s)) {
                return s.clone();
            }
            assert!(
                Instant::now() < deadline,
                "node {id}: {what} not reached in {within:?}; last status {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until every node of `among` reports exactly `voters` as the
    /// voting members (no learner left over), and a leader among them.
    pub async fn wait_voters(&self, among: &[u64], voters: &BTreeSet<u64>, within: Duration) {
        for id in among {
            self.wait_status(*id, &format!("voters {voters:?}"), within, |s| {
                members_of(s) == *voters
                    && voters_of(s) == *voters
                    && s.leader_id.is_some_and(|l| voters.contains(&l))
            })
            .await;
        }
    }

    /// Adds node `id` (at its own address) through node `via`.
    pub async fn add_member(&self, via: u64, id: u64) -> Result<AddMemberResponse, tonic::Status> {
        let request = AddMemberRequest {
            id,
            address: self.nodes[&id].addr.clone(),
            peer_address: self.nodes[&id].peer_addr.clone().unwrap_or_default(),
            ..Default::default()
        };
        let mut client = ClusterClient::new(self.membership_channel(via));
        match tokio::time::timeout(MEMBERSHIP_CALL_TIMEOUT, client.add_member(request)).await {
            Ok(answer) => answer.map(tonic::Response::into_inner),
            Err(_) => Err(tonic::Status::deadline_exceeded("add member timed out")),
        }
    }

    /// Removes node `id` through node `via`.
    pub async fn remove_member(
        &self,
        via: u64,
        id: u64,
    ) -> Result<RemoveMemberResponse, tonic::Status> {
        let request = RemoveMemberRequest {
            id,
            ..Default::default()
        };
        let mut client = ClusterClient::new(self.membership_channel(via));
        match tokio::time::timeout(MEMBERSHIP_CALL_TIMEOUT, client.remove_member(request)).await {
            Ok(answer) => answer.map(tonic::Response::into_inner),
            Err(_) => Err(tonic::Status::deadline_exceeded("remove member timed out")),
        }
    }

    fn membership_channel(&self, via: u64) -> Channel {
        self.channel_with(&self.nodes[&via].addr, MEMBERSHIP_CALL_TIMEOUT)
    }
}

/// A lazily connected channel to `addr` with a 10 s deadline per call.
pub fn channel_to(addr: &str) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(10))
        .connect_lazy()
}

/// Every member id a status lists, voters and learners.
pub fn members_of(status: &StatusResponse) -> BTreeSet<u64> {
    status.members.iter().map(|m| m.id).collect()
}

/// The voting member ids a status lists.
pub fn voters_of(status: &StatusResponse) -> BTreeSet<u64> {
    status
        .members
        .iter()
        .filter(|m| m.role != MemberRole::Learner as i32)
        .map(|m| m.id)
        .collect()
}

/// Polls `check` every 200 ms until it yields a value; panics naming `what`
/// when `within` passes first.
pub async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for &id in &ids {
            self.kill(id);
        }
        // Printed with the failure (the harness shows a failing test's
        // output); the logs go with the directory.
        if std::thread::panicking() {
            for id in ids {
                let tail = self.log_tail(id, LOG_LINES_ON_FAILURE);
                eprintln!(
                    "--- node {id}: its log's last {LOG_LINES_ON_FAILURE} lines or fewer ---\n{tail}"
                );
            }
        }
    }
}
