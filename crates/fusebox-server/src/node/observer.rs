//! What happens on every applied entry besides the state change itself:
//! watchers are told, metrics are counted.

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
}

impl ApplyObserver for Observer {
    fn applied(&self, _state: &SharedStateMachine, events: &[WatchEvent], took: Duration) {
        self.metrics
            .apply_latency_seconds
            .observe(took.as_secs_f64());
        for event in events {
            if let WatchEvent::Breaker { view, .. } = event {
                Metrics::count(&self.metrics.breaker_transitions, view.state.as_str());
            }
        }
        self.hub.publish(events);
    }

    fn installed(&self, _state: &SharedStateMachine) {
        // Revisions may jump past what the hub remembers: watchers resync.
        self.hub.reset();
    }
}
