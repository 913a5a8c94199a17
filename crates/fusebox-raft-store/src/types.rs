//! The openraft type configuration: what a log entry carries and what
//! applying it answers.

use fusebox_core::machine::{Applied, Command};
use fusebox_core::Timestamp;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// One log entry's payload: a command stamped with the leader's clock.
///
/// The leader stamps the time when it proposes; the state machine uses the
/// stamp as "now" and never reads a clock, so every replica applies the
/// entry identically.
///
/// The command is shared, not copied, between the entry's holders (the
/// log's tail in memory, each replication stream, the state machine): a
/// batch of reports holds thousands of names. It is encoded as the command
/// itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The leader's wall clock when it proposed the entry, in Unix ms.
    pub at_ms: u64,
    /// The command to apply.
    pub command: Arc<Command>,
}

impl Request {
    /// `command`, stamped `at_ms`.
    pub fn new(at_ms: u64, command: Command) -> Self {
        Request {
            at_ms,
            command: Arc::new(command),
        }
    }

    /// The entry's time as the core sees it.
    pub fn at(&self) -> Timestamp {
        Timestamp::from_millis(self.at_ms)
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &*self.command {
            Command::ReportBatch { reports } => {
                let outcomes: usize = reports.iter().map(|r| r.outcomes.len()).sum();
                return write!(
                    f,
                    "report_batch of {} ({outcomes} outcomes) at {}",
                    reports.len(),
                    self.at_ms
                );
            }
            Command::ReportOutcomes { outcomes, .. } => {
                return write!(f, "report_outcomes({}) at {}", outcomes.len(), self.at_ms)
            }
            Command::LedgerBatch { ops } => {
                return write!(f, "ledger_batch of {} at {}", ops.len(), self.at_ms)
            }
            Command::AcquireProbe { .. } => "acquire_probe",
            Command::ReleaseProbe { .. } => "release_probe",
            Command::Operate { .. } => "operate",
            Command::Begin { .. } => "ledger_begin",
            Command::Complete { .. } => "ledger_complete",
            Command::Resolve { .. } => "ledger_resolve",
            Command::Renew { .. } => "ledger_renew",
            Command::ApplyPolicy { .. } => "apply_policy",
            Command::RollbackPolicy { .. } => "rollback_policy",
            Command::SetKillSwitch { .. } => "set_kill_switch",
            Command::Tick => "tick",
            Command::ImportTools { .. } => "import_tools",
            Command::Auth { .. } => "auth",
            Command::DeleteNamespace { .. } => "delete_namespace",
        };
        write!(f, "{kind} at {}", self.at_ms)
    }
}

/// What applying an entry answers: the core's result for normal entries,
/// nothing for blank and membership entries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The answer and watch events of a normal entry; none for one a
    /// restart replays behind the ledger on disk (nobody waits for it).
    pub applied: Option<Applied>,
}

/// openraft's runtime: tokio, with its randomness (election timeouts, the
/// tick's phase) drawn from a seed the node is started with
/// ([`RaftRuntime::scope`]), so a simulation replays the same elections.
pub type RaftRuntime =
    openraft::rt::deterministic_rng::DeterministicRng<openraft_rt_tokio::TokioRuntime>;

openraft::declare_raft_types!(
    /// Fusebox's Raft types: node ids are `u64`, nodes carry their address.
    pub TypeConfig:
        D = Request,
        R = Response,
        AsyncRuntime = RaftRuntime,
        Node = Member,
);

/// A node's identity in the cluster.
pub type NodeId = u64;
/// A node as the membership records it.
pub type Node = Member;

/// Where a member is reached: clients at its API address, peers (the Raft
/// transport) at its peer address. A node that serves both on one listener
/// (plaintext development setups) has the same address twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// The client API's address (`HOST:PORT`): clients, forwarded writes.
    pub addr: String,
    /// The Raft transport's address (`HOST:PORT`).
    pub peer_addr: String,
}

impl Member {
    /// A member reached at `addr` by clients and `peer_addr` by peers.
    pub fn new(addr: impl Into<String>, peer_addr: impl Into<String>) -> Self {
        Member {
            addr: addr.into(),
            peer_addr: peer_addr.into(),
        }
    }

    /// A member serving clients and peers on one address.
    pub fn shared(addr: impl Into<String>) -> Self {
        let addr = addr.into();
        Member {
            peer_addr: addr.clone(),
            addr,
        }
    }

    /// Reads `API` or `API@PEER` (both `HOST:PORT`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (addr, peer) = match text.split_once('@') {
            Some((addr, peer)) => (addr.trim(), peer.trim()),
            None => (text.trim(), text.trim()),
        };
        for (what, a) in [("address", addr), ("peer address", peer)] {
            if a.is_empty() || !a.contains(':') || a.contains(char::is_whitespace) {
                return Err(format!("{what} {a:?}: expected HOST:PORT"));
            }
        }
        Ok(Member::new(addr, peer))
    }

    /// Whether peers reach it on a listener of their own.
    pub fn has_peer_listener(&self) -> bool {
        self.addr != self.peer_addr
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.has_peer_listener() {
            write!(f, "{}@{}", self.addr, self.peer_addr)
        } else {
            f.write_str(&self.addr)
        }
    }
}

pub use crate::snapshot_file::SnapshotData;

/// A log position: the term and leader that wrote it, and its index.
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
/// A node's vote (the term and candidate it granted, and whether committed).
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
/// One Raft log entry.
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
/// The membership config and the log id that introduced it.
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
/// What a snapshot covers: its last log id and membership.
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot's metadata together with its bytes.
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, SnapshotData>;
