//! A cluster of real `fusebox` processes on ephemeral loopback ports.
//!
//! Each node runs `fusebox serve` with its own data directory under one
//! temporary directory; processes are killed (SIGKILL) when the cluster is
//! dropped, so a failing test never leaves nodes behind.

#![allow(dead_code)]

use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::{StatusRequest, StatusResponse};
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

/// Picks a free loopback port (bound then released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// One node of a test cluster.
pub struct TestNode {
    pub id: u64,
    pub addr: String,
    pub data: PathBuf,
    child: Option<Child>,
}

/// Real processes forming one cluster.
pub struct TestCluster {
    pub nodes: BTreeMap<u64, TestNode>,
    peers: String,
    dir: tempfile::TempDir,
}

impl TestCluster {
    /// Starts `n` nodes forming one cluster.
    pub fn start(n: u64) -> TestCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let addrs: BTreeMap<u64, String> = (1..=n)
            .map(|id| (id, format!("127.0.0.1:{}", free_port())))
            .collect();
        let peers = addrs
            .iter()
            .map(|(id, a)| format!("{id}={a}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = TestCluster {
            nodes: BTreeMap::new(),
            peers,
            dir,
        };
        for (id, addr) in addrs {
            let data = cluster.dir.path().join(format!("node-{id}"));
            cluster.nodes.insert(
                id,
                TestNode {
                    id,
                    addr,
                    data,
                    child: None,
                },
            );
            cluster.spawn(id, false);
        }
        cluster
    }

    /// (Re)starts node `id`'s process on its address and data directory.
    pub fn spawn(&mut self, id: u64, join: bool) {
        let peers = self.peers.clone();
        let node = self.nodes.get_mut(&id).expect("known node");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fusebox"));
        cmd.args(["serve", "--id", &id.to_string(), "--listen", &node.addr])
            .args(["--peers", &peers, "--data"])
            .arg(&node.data)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if join {
            cmd.arg("--join");
        }
        node.child = Some(cmd.spawn().expect("spawn fusebox serve"));
    }

    /// Adds a node that joins (is not part of the initial peers).
    pub fn add_joiner(&mut self, id: u64) -> String {
        let addr = format!("127.0.0.1:{}", free_port());
        let data = self.dir.path().join(format!("node-{id}"));
        self.nodes.insert(
            id,
            TestNode {
                id,
                addr: addr.clone(),
                data,
                child: None,
            },
        );
        self.spawn(id, true);
        addr
    }

    /// SIGKILLs node `id`.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.nodes.get_mut(&id).and_then(|n| n.child.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A gRPC channel to node `id`.
    pub async fn channel(&self, id: u64) -> Channel {
        let addr = &self.nodes[&id].addr;
        Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(10))
            .connect_lazy()
    }

    /// A ledger client to node `id`.
    pub async fn ledger(&self, id: u64) -> LedgerClient<Channel> {
        LedgerClient::new(self.channel(id).await)
    }

    /// Node `id`'s status, if it answers.
    pub async fn status(&self, id: u64) -> Option<StatusResponse> {
        let mut client = ClusterClient::new(self.channel(id).await);
        let call = client.status(StatusRequest::default());
        match tokio::time::timeout(Duration::from_secs(2), call).await {
            Ok(Ok(r)) => Some(r.into_inner()),
            _ => None,
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
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
    }
}
