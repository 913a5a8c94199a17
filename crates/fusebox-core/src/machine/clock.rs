//! The state clock: how entry stamps move the state's "now".
//!
//! The leader stamps every entry with its wall clock, and those stamps are
//! the only time the state machine sees. Trusting them blindly lets one bad
//! stamp (a leader's clock stepped far ahead, or a forged entry) move the
//! state days ahead at once, lapsing every lease and purging every record
//! in one `Tick`. So the state clock follows the stamps at a bounded pace:
//!
//! - it never goes back (a new leader's clock may lag the old one's);
//! - one entry moves it at most [`CLOCK_STEP_MS_MAX`];
//! - it moves at most [`CLOCK_CATCH_UP_RATE`] times as far as the stamps
//!   themselves moved since the previous entry.
//!
//! Normal entries (stamps a tick apart, a few seconds across an election)
//! are never held back. A jump is followed at ten times real time, so a
//! 10-minute lease lapses after a minute, not at once, and each entry that
//! jumps is counted ([`StateClock::clamps`]) for the node to log.
//! The price: after a whole-cluster outage the clock catches up on the
//! downtime at the same pace (a day down takes 2.4 hours), during which
//! instants it hands out lag the wall clock.

use crate::limits::{CLOCK_CATCH_UP_RATE, CLOCK_STEP_MS_MAX};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// The state's clock and the stamp it last followed.
///
/// The field order is the snapshot encoding's: do not reorder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateClock {
    now: Timestamp,
    last_stamp: Timestamp,
    clamps: u64,
}

impl StateClock {
    /// The state's "now": the latest instant entries have moved it to.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// How many entries' stamps jumped further ahead than the clock may move
    /// at once (each was followed one step, the rest caught up on at pace).
    pub fn clamps(&self) -> u64 {
        self.clamps
    }

    /// How far the last stamp is ahead of the state's clock, in ms (zero
    /// while stamps are followed).
    pub fn behind_stamp_ms(&self) -> u64 {
        self.last_stamp.millis_since(self.now)
    }

    /// Moves the clock for an entry stamped `stamp` and returns the new now.
    pub(super) fn follow(&mut self, stamp: Timestamp) -> Timestamp {
        if self.now == Timestamp::ZERO {
            // The first entry ever: nothing to measure a pace against.
            self.now = stamp;
        } else if stamp > self.now {
            let moved = stamp.millis_since(self.last_stamp);
            let step = moved
                .saturating_mul(CLOCK_CATCH_UP_RATE)
                .min(CLOCK_STEP_MS_MAX);
            let ahead = stamp.millis_since(self.now);
            if ahead > step && moved > step {
                // The stamp itself jumped further than the clock may move
                // at once (entries caught up on afterwards are not counted).
                self.clamps += 1;
            }
            self.now = self.now.plus_ms(ahead.min(step));
        }
        self.last_stamp = stamp;
        self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock_at(ms: u64) -> StateClock {
        let mut clock = StateClock::default();
        clock.follow(Timestamp::from_millis(ms));
        clock
    }

    #[test]
    fn stamps_a_tick_apart_are_followed_exactly() {
        let mut clock = clock_at(1_000_000);
        for i in 1..=100 {
            let stamp = Timestamp::from_millis(1_000_000 + i * 1_000);
            assert_eq!(clock.follow(stamp), stamp);
        }
        assert_eq!(clock.clamps(), 0);
    }

    #[test]
    fn time_never_goes_back() {
        let mut clock = clock_at(1_000_000);
        assert_eq!(
            clock.follow(Timestamp::from_millis(900_000)).as_millis(),
            1_000_000
        );
        // The lagging leader's stamps move on; the clock waits until they pass it.
        assert_eq!(
            clock.follow(Timestamp::from_millis(999_000)).as_millis(),
            1_000_000
        );
        assert_eq!(
            clock.follow(Timestamp::from_millis(1_000_500)).as_millis(),
            1_000_500
        );
        assert_eq!(clock.clamps(), 0);
    }

    #[test]
    fn a_jump_is_followed_at_a_bounded_pace_and_counted() {
        let start = 1_000_000;
        let jump = 400 * 24 * 3_600_000;
        let mut clock = clock_at(start);
        // One entry stamped 400 days ahead moves the clock one step only.
        let now = clock.follow(Timestamp::from_millis(start + jump));
        assert_eq!(now.as_millis(), start + CLOCK_STEP_MS_MAX);
        assert_eq!(clock.clamps(), 1);
        // Then the jumped stamps advance a second at a time: the clock
        // moves ten seconds per second, however many entries there are.
        for i in 1..=60 {
            clock.follow(Timestamp::from_millis(start + jump + i * 1_000));
        }
        let expected = start + CLOCK_STEP_MS_MAX + 60 * 1_000 * CLOCK_CATCH_UP_RATE;
        assert_eq!(clock.now().as_millis(), expected);
        // The jump is counted once, not each entry that catches up on it.
        assert_eq!(clock.clamps(), 1);
        assert!(clock.behind_stamp_ms() > jump - 20 * 60_000);
    }

    #[test]
    fn many_entries_at_one_stamp_do_not_move_a_jumped_clock() {
        let mut clock = clock_at(1_000_000);
        clock.follow(Timestamp::from_millis(1_000_000 + 10 * 24 * 3_600_000));
        let after_jump = clock.now();
        for _ in 0..10_000 {
            clock.follow(Timestamp::from_millis(1_000_000 + 10 * 24 * 3_600_000));
        }
        assert_eq!(clock.now(), after_jump);
    }
}
