//! What a replica's client takes from its surroundings: the network its
//! channels use and the wall clock it compares with the leader's stamps.
//! Production uses [`ClientEnv::system`]; the deterministic simulation
//! supplies simulated ones.

use fusebox_core::Timestamp;
use fusebox_proto::net::Net;
use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A wall clock in Unix milliseconds.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A client's network and wall clock.
#[derive(Clone)]
pub struct ClientEnv {
    /// Where the channels to the cluster connect.
    pub net: Net,
    /// The wall clock (open periods, lease and disclosure ages).
    pub clock: Clock,
}

impl fmt::Debug for ClientEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientEnv")
            .field("net", &self.net)
            .finish_non_exhaustive()
    }
}

fn system_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl ClientEnv {
    /// The machine's TCP stack and wall clock.
    pub fn system() -> Self {
        ClientEnv {
            net: Net::Tcp,
            clock: Arc::new(system_clock_ms),
        }
    }

    /// The wall clock, now.
    pub fn now(&self) -> Timestamp {
        Timestamp::from_millis((self.clock)())
    }
}

impl Default for ClientEnv {
    fn default() -> Self {
        ClientEnv::system()
    }
}
