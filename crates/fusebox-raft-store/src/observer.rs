//! The hook through which a node learns of every state change (the server
//! publishes watch events and metrics through it).

use fusebox_core::machine::{SharedStateMachine, WatchEvent};
use std::time::Duration;

/// Learns of every state change while the state lock is held, so what it
/// publishes (watch events) is in exactly the order of the state.
///
/// Calls must be short and must not call back into the
/// [`StateStore`](crate::StateStore) (the lock is held: that would
/// deadlock). They come from the thread that applies or installs: a
/// blocking-pool thread, or the simulated host's own thread when it runs
/// storage work inline ([`crate::run_inline`]).
pub trait ApplyObserver: Send + Sync + 'static {
    /// A normal entry was applied in `took`; `events` are its watch events
    /// (maybe none).
    fn applied(&self, state: &SharedStateMachine, events: &[WatchEvent], took: Duration);
    /// A snapshot replaced the whole state.
    fn installed(&self, state: &SharedStateMachine);
}
