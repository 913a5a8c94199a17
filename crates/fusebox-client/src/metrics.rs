//! Counters of what the gate did, read as one [`MetricsSnapshot`].
//!
//! Counters are relaxed atomics bumped on the call path (no lock). The
//! snapshot is what a replica exports to its own metrics system; the ratio
//! the runbook watches, calls per intent, is computed from two of them.

use std::sync::atomic::{AtomicU64, Ordering};

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) intents: AtomicU64,
    pub(crate) calls: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) rejects: AtomicU64,
    pub(crate) budget_exhausted: AtomicU64,
    pub(crate) degraded_decisions: AtomicU64,
    pub(crate) shadow_would_reject: AtomicU64,
    pub(crate) probes_granted: AtomicU64,
    pub(crate) probes_denied: AtomicU64,
    pub(crate) outcomes_recorded: AtomicU64,
    pub(crate) outcomes_dropped: AtomicU64,
    pub(crate) outcomes_sent: AtomicU64,
    pub(crate) outcomes_lost: AtomicU64,
    pub(crate) report_batches: AtomicU64,
    pub(crate) writes_started: AtomicU64,
    pub(crate) writes_replayed: AtomicU64,
    pub(crate) writes_ambiguous: AtomicU64,
    pub(crate) writes_blocked: AtomicU64,
    pub(crate) watch_events: AtomicU64,
    pub(crate) watch_reconnects: AtomicU64,
}

/// Bumps a counter by one.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// What the gate did since the client started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Journeys (intents) that made at least one call.
    pub intents: u64,
    /// Attempts that reached a tool (retries and probes included).
    pub calls: u64,
    /// `calls / intents`: rising without more traffic means amplification.
    pub calls_per_intent: f64,
    /// Attempts after the first.
    pub retries: u64,
    /// Attempts stopped by a deadline (any layer).
    pub timeouts: u64,
    /// Calls refused without calling the tool (breaker open, no probe
    /// permit, fail-closed partition).
    pub rejects: u64,
    /// Calls refused because the journey had no budget left.
    pub budget_exhausted: u64,
    /// Decisions made without a fresh view (`on_partition`).
    pub degraded_decisions: u64,
    /// Calls a breaker in shadow mode would have refused.
    pub shadow_would_reject: u64,
    /// Fleet-wide probe permits granted to this replica.
    pub probes_granted: u64,
    /// Probe permits asked for and refused.
    pub probes_denied: u64,
    /// Outcomes put into the report buffer.
    pub outcomes_recorded: u64,
    /// Outcomes dropped because the report buffer was full.
    pub outcomes_dropped: u64,
    /// Outcomes the cluster acknowledged.
    pub outcomes_sent: u64,
    /// Outcomes whose batch no node accepted.
    pub outcomes_lost: u64,
    /// `ReportOutcomes` calls made.
    pub report_batches: u64,
    /// Writes that got a ledger `started` answer.
    pub writes_started: u64,
    /// Writes answered from the ledger without calling the tool.
    pub writes_replayed: u64,
    /// Writes left ambiguous.
    pub writes_ambiguous: u64,
    /// Writes refused by the kill switch.
    pub writes_blocked: u64,
    /// Watch events applied to the local view.
    pub watch_events: u64,
    /// Times the watch stream had to be reopened.
    pub watch_reconnects: u64,
}

impl Metrics {
    /// Reads every counter (each individually consistent).
    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let intents = get(&self.intents);
        let calls = get(&self.calls);
        MetricsSnapshot {
            intents,
            calls,
            calls_per_intent: if intents == 0 {
                0.0
            } else {
                calls as f64 / intents as f64
            },
            retries: get(&self.retries),
            timeouts: get(&self.timeouts),
            rejects: get(&self.rejects),
            budget_exhausted: get(&self.budget_exhausted),
            degraded_decisions: get(&self.degraded_decisions),
            shadow_would_reject: get(&self.shadow_would_reject),
            probes_granted: get(&self.probes_granted),
            probes_denied: get(&self.probes_denied),
            outcomes_recorded: get(&self.outcomes_recorded),
            outcomes_dropped: get(&self.outcomes_dropped),
            outcomes_sent: get(&self.outcomes_sent),
            outcomes_lost: get(&self.outcomes_lost),
            report_batches: get(&self.report_batches),
            writes_started: get(&self.writes_started),
            writes_replayed: get(&self.writes_replayed),
            writes_ambiguous: get(&self.writes_ambiguous),
            writes_blocked: get(&self.writes_blocked),
            watch_events: get(&self.watch_events),
            watch_reconnects: get(&self.watch_reconnects),
        }
    }
}
