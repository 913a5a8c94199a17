//! What happens on every applied entry besides the state change itself:
//! watchers are told, metrics are counted.

use crate::auth::PublishedAuth;
use crate::metrics::Metrics;
use crate::watch::WatchHub;
use fusebox_core::machine::{SharedStateMachine, WatchEvent};
use fusebox_raft_store::ApplyObserver;
use std::sync::Arc;
use std::time::Duration;

/// Publishes applied events to watchers and counts them.
pub struct Observer {
    /// The watch fan-out.
    pub hub: Arc<WatchHub>,
    /// The node's metrics.
    pub metrics: Arc<Metrics>,
    /// The auth table the guard reads.
    pub auth: PublishedAuth,
}

impl Observer {
    /// Logs each entry whose stamp jumped ahead of the state clock (it is
    /// followed at a bounded pace: `fusebox_core::machine::StateClock`) and
    /// exports how far behind the stamps the clock is. An installed snapshot
    /// brings its count along unlogged: the jumps were logged where applied.
    fn watch_clock(&self, state: &SharedStateMachine, installed: bool) {
        let clock = state.clock();
        let jumps = i64::try_from(clock.clamps()).unwrap_or(i64::MAX);
        let before = self.metrics.clock_jumps.set(jumps);
        self.metrics
            .clock_behind_stamp_seconds
            .set(clock.behind_stamp_ms() as f64 / 1000.0);
        if jumps > before && !installed {
            tracing::warn!(
                state_clock_ms = clock.now().as_millis(),
                behind_stamp_ms = clock.behind_stamp_ms(),
                jumps = clock.clamps(),
                "an entry's stamp jumped ahead of the state clock; the clock follows it at a bounded pace (is a leader's clock wrong?)"
            );
        }
    }
}

impl ApplyObserver for Observer {
    fn applied(&self, state: &SharedStateMachine, events: &[WatchEvent], took: Duration) {
        self.metrics
            .apply_latency_seconds
            .observe(took.as_secs_f64());
        self.watch_clock(state, false);
        self.auth.publish(state.auth());
        for event in events {
            if let WatchEvent::Breaker { view, .. } = event {
                Metrics::count(&self.metrics.breaker_transitions, view.state.as_str());
            }
        }
        self.hub.publish(events);
    }

    fn installed(&self, state: &SharedStateMachine) {
        self.watch_clock(state, true);
        self.auth.publish(state.auth());
        // Revisions may jump past what the hub remembers: watchers resync.
        self.hub.reset();
    }
}
