//! How one node is configured: identity, addresses, peers, data, timing.

use fusebox_raft_store::Member;
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
    /// Where the gRPC API listens (and the Raft transport, unless
    /// `peer_listen` gives it a listener of its own).
    pub listen: SocketAddr,
    /// Where the Raft transport listens, apart from clients.
    #[serde(default)]
    pub peer_listen: Option<SocketAddr>,
    /// How others reach this node, `API` or `API@PEER` (default: this
    /// node's entry in `peers`, else `listen`).
    #[serde(default)]
    pub advertise: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` listen (none: off).
    #[serde(default)]
    pub http: Option<SocketAddr>,
    /// The initial members, this node included: id → `API` or `API@PEER`
    /// (`HOST:PORT` each; without `@PEER` peers use the API address).
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
    /// TLS for clients (and for this node's forwarded calls to the leader).
    #[serde(default)]
    pub tls: Option<ApiTls>,
    /// Mutual TLS between members, on the peer listener.
    #[serde(default)]
    pub peer_tls: Option<PeerTls>,
    /// Serve a non-loopback address without TLS or auth (logged at every
    /// start).
    #[serde(default)]
    pub insecure: bool,
    /// Require every caller to authenticate, even before the replicated
    /// auth table switches enforcement on (so a node never serves openly
    /// while it catches up).
    #[serde(default)]
    pub auth: bool,
    /// A file holding the first admin token (`fbx_...`), created with a
    /// fresh token if missing. While the cluster has no admin, the node
    /// that leads issues it as principal `admin` and switches enforcement
    /// on. Implies `auth`.
    #[serde(default)]
    pub init_auth: Option<PathBuf>,
    /// What one caller may do: requests per second, burst, open watch
    /// streams.
    #[serde(default)]
    pub caller_limits: CallerLimits,
}

/// The client API's TLS files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiTls {
    /// This node's API certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA trusted for client certificates (which are then optional and
    /// name the caller) and for other members' API certificates when this
    /// node forwards to the leader.
    pub ca: PathBuf,
}

/// The peer transport's TLS files: members present certificates signed by
/// the cluster's CA that name them (`fusebox://node/<id>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerTls {
    /// This node's peer certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The cluster's CA, which signed every member's peer certificate.
    pub ca: PathBuf,
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
            peer_listen: None,
            advertise: None,
            http: Some(SocketAddr::from(([127, 0, 0, 1], 7680))),
            peers: BTreeMap::from([(1, listen.to_string())]),
            data_dir: PathBuf::from("fusebox-data"),
            cluster_id: default_cluster_id(),
            join: false,
            timing: Timing::default(),
            tls: None,
            peer_tls: None,
            insecure: false,
            auth: false,
            init_auth: None,
            caller_limits: CallerLimits::default(),
        }
    }

    /// Whether callers must authenticate from the start.
    pub fn auth_required(&self) -> bool {
        self.auth || self.init_auth.is_some()
    }

    /// How others reach this node: its advertised address, else its entry
    /// in `peers`, else where it listens.
    pub fn advertised(&self) -> Result<Member, String> {
        match self.advertise.as_ref().or_else(|| self.peers.get(&self.id)) {
            Some(text) => Member::parse(text),
            None => Ok(match self.peer_listen {
                Some(peer) => Member::new(self.listen.to_string(), peer.to_string()),
                None => Member::shared(self.listen.to_string()),
            }),
        }
    }

    /// The initial members, read.
    pub fn members(&self) -> Result<BTreeMap<u64, Member>, String> {
        self.peers
            .iter()
            .map(|(id, text)| {
                Ok((
                    *id,
                    Member::parse(text).map_err(|e| format!("peer {id}: {e}"))?,
                ))
            })
            .collect()
    }

    /// Checks the settings hang together; every problem is named.
    pub fn validate(&self) -> Result<(), String> {
        if self.id == 0 {
            return Err("id must be at least 1".into());
        }
        if !self.join && !self.peers.contains_key(&self.id) {
            return Err(format!("peers must include this node's id {}", self.id));
        }
        self.members()?;
        let me = self.advertised()?;
        if self.peer_listen.is_some() != me.has_peer_listener() {
            return Err(format!(
                "this node is advertised as {me}: give it a peer address (API@PEER) \
                 exactly when it has a peer listener (peer_listen)"
            ));
        }
        if self.peer_listen == Some(self.listen) {
            return Err("peer_listen must differ from listen".into());
        }
        if (self.tls.is_some() || self.peer_tls.is_some()) && self.peer_listen.is_none() {
            // Else any client of the API could reach the Raft transport.
            return Err(
                "with TLS, the Raft transport needs a listener of its own (peer_listen)".into(),
            );
        }
        self.check_exposure()?;
        self.caller_limits.validate()?;
        let t = &self.timing;
        if t.election_min_ms <= t.heartbeat_ms || t.election_max_ms <= t.election_min_ms {
            return Err("timing: need heartbeat_ms < election_min_ms < election_max_ms".into());
        }
        if t.tick_ms == 0 {
            return Err("timing: tick_ms must be at least 1".into());
        }
        Ok(())
    }

    /// Secure by default: a listener beyond loopback needs TLS and auth
    /// (clients) or peer TLS (members), unless `insecure` is set.
    fn check_exposure(&self) -> Result<(), String> {
        match self.clear_exposures().into_iter().next() {
            Some(problem) if !self.insecure => Err(problem),
            _ => Ok(()),
        }
    }

    /// Whether this node serves a non-loopback address in the clear.
    pub fn exposed_in_clear(&self) -> bool {
        !self.clear_exposures().is_empty()
    }

    /// Every listener beyond loopback without TLS, each with what to give.
    fn clear_exposures(&self) -> Vec<String> {
        let mut found = Vec::new();
        if !self.listen.ip().is_loopback() && self.tls.is_none() {
            found.push(format!(
                "listen {} is not a loopback address and the API has no TLS: \
                 give --tls-cert/--tls-key/--tls-ca, or --insecure to serve it in the clear",
                self.listen
            ));
        }
        if !self.listen.ip().is_loopback() && !self.auth_required() {
            found.push(format!(
                "listen {} is not a loopback address and callers need no credentials: \
                 give --auth (and --init-auth FILE for the first admin token), or --insecure",
                self.listen
            ));
        }
        let peer = self.peer_listen.unwrap_or(self.listen);
        if !peer.ip().is_loopback() && self.peer_tls.is_none() {
            found.push(format!(
                "the Raft transport listens on {peer}, not a loopback address, without peer TLS: \
                 give --peer-listen with --peer-cert/--peer-key/--peer-ca, or --insecure"
            ));
        }
        found
    }

    /// Parses `1=127.0.0.1:7601,2=127.0.0.1:7602` (or, with peer
    /// listeners, `1=127.0.0.1:7601@127.0.0.1:7701,...`) into peers.
    pub fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, String> {
        let mut peers = BTreeMap::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (id, addr) = part
                .split_once('=')
                .ok_or_else(|| format!("peer {part:?}: expected ID=HOST:PORT[@HOST:PORT]"))?;
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

/// What one caller may do; a node's `[caller_limits]` configuration.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CallerLimits {
    /// Requests per second, sustained.
    pub requests_per_second: u32,
    /// Requests at once after a quiet spell (the bucket's size).
    pub burst: u32,
    /// Watch streams open at once.
    pub watch_streams: u32,
}

impl Default for CallerLimits {
    /// Generous enough for a fleet of a few hundred replicas sharing one
    /// principal; tighten per deployment.
    fn default() -> Self {
        CallerLimits {
            requests_per_second: 20_000,
            burst: 40_000,
            watch_streams: 4_096,
        }
    }
}

impl CallerLimits {
    /// Every bound must let at least one call through.
    pub fn validate(&self) -> Result<(), String> {
        if self.requests_per_second == 0 || self.burst == 0 || self.watch_streams == 0 {
            return Err("caller_limits: every bound must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn tls_files(prefix: &str) -> (PathBuf, PathBuf, PathBuf) {
        let p = |f: &str| PathBuf::from(format!("{prefix}/{f}"));
        (p("node.pem"), p("node-key.pem"), p("ca.pem"))
    }

    fn secured(mut config: NodeConfig) -> NodeConfig {
        let (cert, key, ca) = tls_files("certs");
        config.tls = Some(ApiTls {
            cert: cert.clone(),
            key: key.clone(),
            ca: ca.clone(),
        });
        config.peer_tls = Some(PeerTls { cert, key, ca });
        config
    }

    #[test]
    fn the_embedded_default_is_valid_and_shares_one_loopback_listener() {
        let config = NodeConfig::single_node();
        config.validate().unwrap();
        assert!(!config.advertised().unwrap().has_peer_listener());
        assert!(!config.exposed_in_clear());
    }

    #[test]
    fn a_public_address_needs_tls_or_insecure() {
        let mut config = NodeConfig::single_node();
        config.listen = "0.0.0.0:7600".parse().unwrap();
        let err = config.validate().unwrap_err();
        assert!(err.contains("--insecure"), "{err}");
        config.insecure = true;
        config.validate().unwrap();
        assert!(config.exposed_in_clear());

        let mut config = secured(NodeConfig::single_node());
        config.listen = "0.0.0.0:7600".parse().unwrap();
        config.peer_listen = Some("0.0.0.0:7700".parse().unwrap());
        config.peers = BTreeMap::from([(1, "10.0.0.1:7600@10.0.0.1:7700".to_owned())]);
        let err = config.validate().unwrap_err();
        assert!(err.contains("--auth"), "TLS alone lets anyone call: {err}");
        config.auth = true;
        config.validate().unwrap();
        assert!(!config.exposed_in_clear());
    }

    #[test]
    fn tls_needs_a_peer_listener_and_the_peers_must_say_where_it_is() {
        let config = secured(NodeConfig::single_node());
        let err = config.validate().unwrap_err();
        assert!(err.contains("listener of its own"), "{err}");

        let mut config = secured(NodeConfig::single_node());
        config.peer_listen = Some("127.0.0.1:7700".parse().unwrap());
        let err = config.validate().unwrap_err();
        assert!(err.contains("API@PEER"), "{err}");

        config.peers = BTreeMap::from([(1, "127.0.0.1:7600@127.0.0.1:7700".to_owned())]);
        config.validate().unwrap();
        assert_eq!(
            config.members().unwrap()[&1],
            Member::new("127.0.0.1:7600", "127.0.0.1:7700")
        );
    }

    #[test]
    fn peers_are_read_with_or_without_a_peer_address() {
        let peers = NodeConfig::parse_peers("1=a:1,2=b:2@b:3").unwrap();
        assert_eq!(peers[&2], "b:2@b:3");
        let mut config = NodeConfig::single_node();
        config.peers = peers;
        config.peers.insert(3, "c:3@".to_owned());
        let err = config.members().unwrap_err();
        assert!(err.contains("peer 3"), "{err}");
    }
}
