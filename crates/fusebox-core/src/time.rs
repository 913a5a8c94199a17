//! Time as a value.
//!
//! The state machine never reads a clock: the leader stamps every Raft entry
//! with its wall clock and the entry's stamp is the only "now" the engines see.
//! Replicas that replay the log therefore compute identical states whatever
//! their own clocks say.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Milliseconds since the Unix epoch, as stamped on a log entry.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The epoch itself; useful as "never happened".
    pub const ZERO: Timestamp = Timestamp(0);

    /// Builds a timestamp from milliseconds since the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// This instant moved `ms` later, saturating instead of wrapping.
    pub const fn plus_ms(self, ms: u64) -> Self {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Milliseconds from `earlier` to `self`, zero when `earlier` is later.
    pub const fn millis_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}
