//! What a node takes from its surroundings: the network its channels and
//! listeners use, the wall clock a leader stamps entries with, and the seed
//! of Raft's randomness (election timeouts). Production uses
//! [`NodeEnv::system`]; the deterministic simulation supplies simulated ones.

use fusebox_proto::net::Net;
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A wall clock in Unix milliseconds.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A node's network, clock and seed.
#[derive(Clone)]
pub struct NodeEnv {
    /// Where gRPC channels and the gRPC listener go.
    pub net: Net,
    /// The wall clock: entry stamps, heartbeats, read-time views.
    pub clock: Clock,
    /// Seeds openraft's randomness (election timeouts, tick phase).
    pub raft_seed: u64,
    /// Bugs to inject, so the simulation can show its checkers catch them.
    /// Production never sets any.
    pub bugs: InjectedBugs,
}

/// Real bugs a node can be told to have, one switch each (all off by
/// default). They exist only so the deterministic simulation can prove that
/// its invariant checkers fail when the product is wrong.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedBugs {
    /// Answer linearizable reads from the local state without confirming
    /// leadership first: a deposed leader then serves stale ledger records.
    pub skip_read_linearizer: bool,
}

impl fmt::Debug for NodeEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeEnv")
            .field("net", &self.net)
            .field("raft_seed", &self.raft_seed)
            .field("bugs", &self.bugs)
            .finish_non_exhaustive()
    }
}

/// This machine's wall clock in Unix ms.
pub fn system_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl NodeEnv {
    /// The machine's TCP stack and clock, and a seed from the OS.
    pub fn system() -> Self {
        let seed = std::collections::hash_map::RandomState::new();
        NodeEnv {
            net: Net::Tcp,
            clock: Arc::new(system_clock_ms),
            raft_seed: std::hash::BuildHasher::hash_one(&seed, system_clock_ms()),
            bugs: InjectedBugs::default(),
        }
    }

    /// The wall clock, now.
    pub fn now_ms(&self) -> u64 {
        (self.clock)()
    }
}

impl Default for NodeEnv {
    fn default() -> Self {
        NodeEnv::system()
    }
}
