//! Shared by the client's tests: an in-process cluster of real nodes on
//! ephemeral loopback ports, operator calls through the generated clients,
//! a TCP proxy that can cut a replica off, and bounded waits.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use fusebox_client::{proto as pb, Client, ClientConfig};
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::policy_client::PolicyClient;
use fusebox_server::node::{self, NodeConfig, RunningNode, Timing};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use tonic::transport::Channel;

/// The namespace every test uses.
pub const NS: &str = "agents";

/// Picks a free loopback port (bound then released).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Fast Raft timing so tests do not wait on defaults; ticks every 100 ms so
/// open periods end promptly.
pub fn fast_timing() -> Timing {
    Timing {
        heartbeat_ms: 100,
        election_min_ms: 500,
        election_max_ms: 1_000,
        tick_ms: 100,
        ..Timing::default()
    }
}

/// A cluster of in-process nodes.
pub struct TestCluster {
    pub nodes: Vec<RunningNode>,
    pub addrs: Vec<String>,
    _dirs: Vec<TempDir>,
}

impl TestCluster {
    /// Starts `n` nodes and waits for a leader.
    pub async fn start(n: u64) -> TestCluster {
        let peers: BTreeMap<u64, String> = (1..=n)
            .map(|id| (id, format!("127.0.0.1:{}", free_port())))
            .collect();
        let mut nodes = Vec::new();
        let mut dirs = Vec::new();
        for (id, addr) in &peers {
            let dir = tempfile::tempdir().unwrap();
            let config = NodeConfig {
                id: *id,
                listen: addr.parse::<SocketAddr>().unwrap(),
                http: None,
                peers: peers.clone(),
                data_dir: dir.path().to_path_buf(),
                cluster_id: "client-tests".into(),
                timing: fast_timing(),
                ..NodeConfig::single_node()
            };
            nodes.push(node::start(config).await.unwrap());
            dirs.push(dir);
        }
        let cluster = TestCluster {
            nodes,
            addrs: peers.values().cloned().collect(),
            _dirs: dirs,
        };
        cluster.wait_leader().await;
        cluster
    }

    /// Waits until node 1 knows a leader.
    pub async fn wait_leader(&self) {
        let addr = self.addrs[0].clone();
        wait_for("a leader", Duration::from_secs(20), || {
            let addr = addr.clone();
            async move {
                let mut c = ClusterClient::new(channel_to(&addr));
                let status = c.status(pb::StatusRequest::default()).await.ok()?;
                status.into_inner().leader_id
            }
        })
        .await;
    }

    /// A client configuration for `replica` on the given nodes, with short
    /// periods.
    pub fn config(&self, replica: &str, nodes: &[usize]) -> ClientConfig {
        let endpoints = nodes.iter().map(|i| self.addrs[*i].clone()).collect();
        test_config(endpoints, replica)
    }

    /// Operator calls through node `i`.
    pub fn operator(&self, i: usize) -> Operator {
        Operator {
            channel: channel_to(&self.addrs[i]),
        }
    }

    /// Stops every node.
    pub async fn shutdown(self) {
        for node in self.nodes {
            node.shutdown().await;
        }
    }
}

/// Short periods so that tests run in seconds.
pub fn test_config(endpoints: Vec<String>, replica: &str) -> ClientConfig {
    let mut config = ClientConfig::new(endpoints, NS, replica).unwrap();
    config.rpc_timeout_ms = 3_000;
    config.view_stale_after_ms = 8_000;
    config.disconnect_grace_ms = 300;
    config.watch_retry_initial_ms = 50;
    config.watch_retry_max_ms = 300;
    config.report_flush_interval_ms = 20;
    config
}

/// Connects a client and waits for its first snapshot.
pub async fn connected(config: ClientConfig) -> Client {
    let client = Client::connect(config).unwrap();
    assert!(
        client.wait_fresh(Duration::from_secs(15)).await,
        "view did not become fresh"
    );
    client
}

/// A lazily connected channel to `addr`.
pub fn channel_to(addr: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect_lazy()
}

/// Retries an operator call while the cluster is electing (UNAVAILABLE),
/// for at most 20 s.
pub async fn settled<T, F, Fut>(mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let started = Instant::now();
    loop {
        match call().await {
            Ok(r) => return r.into_inner(),
            Err(s)
                if s.code() == tonic::Code::Unavailable
                    && started.elapsed() < Duration::from_secs(20) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(s) => panic!("operator call failed: {s:?}"),
        }
    }
}

/// An operator's calls (policy, kill switch, breaker overrides).
pub struct Operator {
    channel: Channel,
}

impl Operator {
    /// Applies a TOML policy document.
    pub async fn apply_policy(&self, toml: &str) -> u64 {
        let request = pb::ApplyPolicyRequest {
            namespace: NS.into(),
            document: toml.into(),
            format: pb::PolicyFormat::Toml as i32,
            actor: "test".into(),
            reason: "test policy".into(),
            ..Default::default()
        };
        let response = settled(|| {
            let mut c = PolicyClient::new(self.channel.clone());
            let r = request.clone();
            async move { c.apply(r).await }
        })
        .await;
        response.policy.unwrap().version
    }

    /// Throws or clears the write kill switch.
    pub async fn kill_switch(&self, blocked: bool, reason: &str) {
        let request = pb::SetKillSwitchRequest {
            namespace: NS.into(),
            writes_blocked: blocked,
            reason: reason.into(),
            actor: "test".into(),
            ..Default::default()
        };
        settled(|| {
            let mut c = PolicyClient::new(self.channel.clone());
            let r = request.clone();
            async move { c.set_kill_switch(r).await }
        })
        .await;
    }

    /// Forces a tool's breaker open.
    pub async fn force_open(&self, server: &str, tool: &str, reason: &str) {
        let request = pb::ForceOpenRequest {
            namespace: NS.into(),
            key: Some(key(server, tool)),
            actor: "test".into(),
            reason: reason.into(),
            ..Default::default()
        };
        settled(|| {
            let mut c = BreakersClient::new(self.channel.clone());
            let r = request.clone();
            async move { c.force_open(r).await }
        })
        .await;
    }

    /// Reads a tool's breaker.
    pub async fn breaker(&self, server: &str, tool: &str) -> pb::BreakerView {
        let request = pb::GetBreakerRequest {
            namespace: NS.into(),
            key: Some(key(server, tool)),
            ..Default::default()
        };
        settled(|| {
            let mut c = BreakersClient::new(self.channel.clone());
            let r = request.clone();
            async move { c.get_breaker(r).await }
        })
        .await
        .breaker
        .unwrap()
    }
}

fn key(server: &str, tool: &str) -> pb::BreakerKey {
    pb::BreakerKey {
        namespace: NS.into(),
        server: server.into(),
        tool: Some(tool.into()),
        backend: None,
    }
}

/// Polls `check` every 20 ms until it answers, failing the test after
/// `within`.
pub async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            started.elapsed() < within,
            "waited {within:?} for {what} in vain"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `flag` is set, failing the test after `within`.
pub async fn flag_set(what: &str, flag: &AtomicBool, within: Duration) {
    wait_for(what, within, || {
        let set = flag.load(Ordering::SeqCst);
        async move { set.then_some(()) }
    })
    .await;
}

/// Waits until `client`'s view holds policy `version`.
pub async fn policy_seen(client: &Client, version: u64) {
    wait_for("policy on the replica", Duration::from_secs(10), || {
        let v = client.view_status().policy_version;
        async move { (v == Some(version)).then_some(()) }
    })
    .await;
}

/// A TCP proxy in front of one node that can cut every connection and
/// refuse new ones, as a network partition would.
pub struct Proxy {
    pub addr: String,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Proxy {
    /// Listens on an ephemeral port and forwards to `target`.
    pub async fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (c, k) = (cut.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                k.lock().unwrap().push(task.abort_handle());
            }
        })
        .abort_handle();
        Proxy {
            addr,
            cut,
            conns,
            accept,
        }
    }

    /// Drops every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for conn in self.conns.lock().unwrap().drain(..) {
            conn.abort();
        }
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// A tool that never answers. Its "backend request" runs apart from the
/// call's future (as a real transport's would) and notes in `cancelled`
/// when the token handed to the call fires: the future being dropped alone
/// would leave it running.
pub async fn hangs(
    cancelled: Arc<AtomicBool>,
    token: fusebox_client::CancellationToken,
) -> Result<(), fusebox_client::ToolFailure> {
    tokio::spawn(async move {
        tokio::select! {
            () = token.cancelled() => cancelled.store(true, Ordering::SeqCst),
            () = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}
