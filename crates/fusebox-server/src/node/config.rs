//! How one node is configured: identity, addresses, peers, data, timing.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// One node's settings (flags or a TOML config file hold the same fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id, unique in the cluster, from 1.
    pub id: u64,
    /// Where the gRPC API and the Raft transport listen.
    pub listen: SocketAddr,
    /// The address peers and clients reach this node at (default: `listen`).
    #[serde(default)]
    pub advertise: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` listen (none: off).
    #[serde(default)]
    pub http: Option<SocketAddr>,
    /// The initial members, this node included: id → gRPC address.
    pub peers: BTreeMap<u64, String>,
    /// The RocksDB data directory.
    pub data_dir: PathBuf,
    /// The cluster's name; nodes refuse messages from other clusters.
    #[serde(default = "default_cluster_id")]
    pub cluster_id: String,
    /// Join an existing cluster (wait to be added) instead of forming one.
    #[serde(default)]
    pub join: bool,
    /// Raft timing.
    #[serde(default)]
    pub timing: Timing,
}

/// Raft timing and log compaction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    /// Leader heartbeat period.
    pub heartbeat_ms: u64,
    /// Shortest election timeout.
    pub election_min_ms: u64,
    /// Longest election timeout.
    pub election_max_ms: u64,
    /// Entries applied since the last snapshot that trigger a new one.
    pub snapshot_every_entries: u64,
    /// Entries kept in the log behind a snapshot (for slow followers).
    pub log_kept_behind_snapshot: u64,
    /// How often the leader proposes a `Tick` (timers, leases, retention).
    pub tick_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            heartbeat_ms: 200,
            election_min_ms: 1_000,
            election_max_ms: 2_000,
            snapshot_every_entries: 10_000,
            log_kept_behind_snapshot: 1_000,
            tick_ms: 1_000,
        }
    }
}

fn default_cluster_id() -> String {
    "fusebox".to_string()
}

impl NodeConfig {
    /// The embedded single-node default: `127.0.0.1:7600`, `./fusebox-data`.
    pub fn single_node() -> Self {
        let listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 7600));
        NodeConfig {
            id: 1,
            listen,
            advertise: None,
            http: Some(SocketAddr::from(([127, 0, 0, 1], 7680))),
            peers: BTreeMap::from([(1, listen.to_string())]),
            data_dir: PathBuf::from("fusebox-data"),
            cluster_id: default_cluster_id(),
            join: false,
            timing: Timing::default(),
        }
    }

    /// The address others use to reach this node.
    pub fn advertised(&self) -> String {
        self.advertise
            .clone()
            .or_else(|| self.peers.get(&self.id).cloned())
            .unwrap_or_else(|| self.listen.to_string())
    }

    /// Checks the settings hang together; every problem is named.
    pub fn validate(&self) -> Result<(), String> {
        if self.id == 0 {
            return Err("id must be at least 1".into());
        }
        if !self.join && !self.peers.contains_key(&self.id) {
            return Err(format!("peers must include this node's id {}", self.id));
        }
        let t = &self.timing;
        if t.election_min_ms <= t.heartbeat_ms || t.election_max_ms <= t.election_min_ms {
            return Err("timing: need heartbeat_ms < election_min_ms < election_max_ms".into());
        }
        if t.tick_ms == 0 {
            return Err("timing: tick_ms must be at least 1".into());
        }
        Ok(())
    }

    /// Parses `1=127.0.0.1:7601,2=127.0.0.1:7602` into peers.
    pub fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, String> {
        let mut peers = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (id, addr) = part
                .split_once('=')
                .ok_or_else(|| format!("peer {part:?}: expected ID=HOST:PORT"))?;
            let id: u64 = id
                .trim()
                .parse()
                .map_err(|_| format!("peer {part:?}: id must be a number"))?;
            if peers.insert(id, addr.trim().to_string()).is_some() {
                return Err(format!("peer id {id} given twice"));
            }
        }
        Ok(peers)
    }
}
