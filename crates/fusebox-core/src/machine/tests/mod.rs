//! Unit tests of the state machine, one file per command family (no IO).

mod probes;
mod quotas;
mod resolved;
mod snapshots;
mod tools;

use super::{Command, StateMachine};
use crate::limits::CLOCK_STEP_MS_MAX;
use crate::time::Timestamp;

/// Lets time pass from `from` to `to` as a live cluster would: a `Tick` a
/// step apart, so the state clock follows (`clock.rs` paces big jumps).
pub(super) fn pass_time(sm: &mut StateMachine, from: Timestamp, to: Timestamp) {
    let mut at = from;
    while at < to {
        at = at.plus_ms(CLOCK_STEP_MS_MAX).min(to);
        sm.apply(&Command::Tick, at);
    }
    assert_eq!(sm.now(), to, "the clock followed the ticks");
}
