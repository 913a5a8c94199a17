//! What a replica's client takes from its surroundings: the network its
//! channels use and the wall clock it compares with the leader's stamps.
//! Production uses [`ClientEnv::system`]; the deterministic simulation
//! supplies simulated ones.

use fusebox_core::Timestamp;
use fusebox_proto::net::Net;
use std::fmt;
use std::sync::Arc;
#[cfg(any(test, not(target_os = "linux")))]
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

/// The machine's wall clock in ms. On Linux it is the kernel's coarse
/// clock (`CLOCK_REALTIME_COARSE`): read without the timestamp counter, so
/// cheaper on every call's path (decision 0011), and a few ms coarse at
/// most, which nothing the gate times (open periods, windows, leases in
/// seconds) can tell.
#[cfg(target_os = "linux")]
fn system_clock_ms() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let millis = u64::try_from(now.tv_nsec / 1_000_000).unwrap_or(0);
    secs.saturating_mul(1_000).saturating_add(millis)
}

/// The machine's wall clock in ms.
#[cfg(not(target_os = "linux"))]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_is_the_wall_clock_within_its_coarseness() {
        let precise = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        };
        let before = precise();
        let coarse = system_clock_ms();
        let after = precise();
        // The coarse clock lags by at most a few kernel ticks.
        assert!(
            coarse + 50 >= before && coarse <= after,
            "{before} <= {coarse} <= {after}"
        );
    }
}
