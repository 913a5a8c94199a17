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

/// A duration as a person reads it, in its largest whole unit: `212 days`,
/// `5 hours`, `3 min`, `12 s`, `250 ms` (rounded down; a unit is used from
/// two of it, so 90 minutes reads `90 min`).
pub fn span_text(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "days"),
        (3_600_000, "hours"),
        (60_000, "min"),
        (1_000, "s"),
    ];
    UNITS.iter().find(|(unit, _)| ms >= 2 * unit).map_or_else(
        || format!("{ms} ms"),
        |(unit, name)| format!("{} {name}", ms / unit),
    )
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_in_their_largest_whole_unit() {
        assert_eq!(span_text(18_355_563_923), "212 days");
        assert_eq!(span_text(7_862_400_000), "91 days");
        assert_eq!(span_text(5 * 3_600_000 + 1), "5 hours");
        assert_eq!(span_text(90 * 60_000), "90 min");
        assert_eq!(span_text(12_345), "12 s");
        assert_eq!(span_text(1_999), "1999 ms");
        assert_eq!(span_text(0), "0 ms");
    }
}
