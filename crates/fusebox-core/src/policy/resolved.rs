//! Effective, validated policy values as the engines consume them.

use super::classify::Classification;
use crate::outcome::OutcomeClass;
use serde::{Deserialize, Serialize};

/// What calling a tool does to the world (the operations runbook classifies every tool by effect).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectClass {
    /// A deterministic read: retry a transient error while budget remains.
    ReadOnly,
    /// A costly search or computation: retry only bounded queries.
    ExpensiveRead,
    /// A write the backend deduplicates by idempotency key.
    IdempotentWrite,
    /// A write that must never be sent twice automatically.
    NonIdempotentWrite,
}

impl EffectClass {
    /// Whether the kill switch blocks this tool.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            EffectClass::IdempotentWrite | EffectClass::NonIdempotentWrite
        )
    }

    /// Whether a repeat of the same request is harmless.
    pub fn is_idempotent(self) -> bool {
        !matches!(self, EffectClass::NonIdempotentWrite)
    }

    /// The wire name (`snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            EffectClass::ReadOnly => "read_only",
            EffectClass::ExpensiveRead => "expensive_read",
            EffectClass::IdempotentWrite => "idempotent_write",
            EffectClass::NonIdempotentWrite => "non_idempotent_write",
        }
    }
}

/// How finely tool breakers are keyed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One breaker per tool.
    #[default]
    Tool,
    /// One breaker per tool and backend (target), so one sick backend does
    /// not take healthy ones offline.
    ToolAndBackend,
}

/// What a replica does when it cannot reach the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnPartition {
    /// Keep calling, guarded by a local breaker scaled to one replica.
    #[default]
    FailOpenLocal,
    /// Refuse every call until the view is fresh again.
    FailClosed,
}

/// What happens to a call still running when its breaker opens.
///
/// `finish` lets it run to its own deadline, as every call did before this
/// setting existed. `end` ends it at once with the open-circuit answer, as
/// if it had just been refused: the fleet's trip then also frees the
/// callers already waiting on the tool, which otherwise each lose the rest
/// of their deadline (the slow-tool story's in-flight calls). It applies to
/// reads only: a write's tool may already be acting, and ending the call
/// would turn a known wait into an unknown outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InFlightOnOpen {
    /// The call runs to its own end or deadline.
    #[default]
    Finish,
    /// The call ends when the replica's view shows its breaker open.
    End,
}

/// When a closed breaker opens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trip {
    /// After this many failures in a row (in log order, fleet-wide).
    ConsecutiveFailures {
        /// Failures in a row that open the breaker (four by default, as in the slow-tool story).
        failures: u32,
    },
    /// When a sliding time window shows too many failures or slow calls.
    SlidingWindow(WindowPolicy),
}

/// Thresholds of the sliding-window trip (runbook defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowPolicy {
    /// Width of the window.
    pub window_ms: u64,
    /// Fewer calls than this in the window never open the breaker.
    pub minimum_calls: u32,
    /// Open when failures / calls reaches this (0 < r <= 1).
    pub failure_ratio: f64,
    /// A call at least this slow counts as slow; `None` disables slow-call tripping.
    pub slow_call_ms: Option<u64>,
    /// Open when slow calls / calls reaches this (0 < r <= 1).
    pub slow_call_ratio: f64,
}

impl Default for WindowPolicy {
    fn default() -> Self {
        WindowPolicy {
            window_ms: 60_000,
            minimum_calls: 20,
            failure_ratio: 0.5,
            slow_call_ms: None,
            slow_call_ratio: 0.7,
        }
    }
}

/// How long an open breaker stays open, and how that grows per reopen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenBackoff {
    /// Open duration after the first trip.
    pub open_ms: u64,
    /// Factor applied per reopen from half-open; 1 keeps it fixed.
    pub multiplier: u32,
    /// Cap on the grown duration.
    pub open_ms_max: u64,
}

impl OpenBackoff {
    /// The open duration after `reopens` consecutive reopens.
    pub fn duration_ms(&self, reopens: u32) -> u64 {
        let mut ms = self.open_ms;
        for _ in 0..reopens.min(64) {
            ms = ms.saturating_mul(u64::from(self.multiplier));
            if ms >= self.open_ms_max {
                return self.open_ms_max;
            }
        }
        ms.min(self.open_ms_max.max(self.open_ms))
    }
}

/// The effective breaker settings for one breaker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BreakerPolicy {
    /// When a closed breaker opens.
    pub trip: Trip,
    /// Open only on failures seen by at least this many distinct replicas
    /// (1 = any replica may open it).
    pub min_reporters: u32,
    /// How long it stays open.
    pub open: OpenBackoff,
    /// Probe permits granted at once, fleet-wide, in half-open.
    pub concurrent_probes: u32,
    /// Probe successes that close a half-open breaker.
    pub probe_successes: u32,
    /// How long a probe permit lives before it returns to the pool.
    pub probe_lease_ms: u64,
    /// Whether a 429 counts as a failure.
    pub rate_limited_is_failure: bool,
    /// Shadow mode: decide and count, never reject.
    pub shadow: bool,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            trip: Trip::ConsecutiveFailures { failures: 4 },
            min_reporters: 1,
            open: OpenBackoff {
                open_ms: 30_000,
                multiplier: 1,
                open_ms_max: 30_000,
            },
            concurrent_probes: 1,
            probe_successes: 3,
            probe_lease_ms: 10_000,
            rate_limited_is_failure: false,
            shadow: false,
        }
    }
}

/// Bounded retries for read-only and retry-safe tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// Outcome classes worth a retry.
    pub retry_on: Vec<OutcomeClass>,
    /// First backoff.
    pub backoff_initial_ms: u64,
    /// Backoff cap.
    pub backoff_max_ms: u64,
    /// Whether to randomise each backoff (full jitter).
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            retry_on: vec![
                OutcomeClass::Transport,
                OutcomeClass::RateLimited,
                OutcomeClass::ServerError,
            ],
            backoff_initial_ms: 250,
            backoff_max_ms: 1_500,
            jitter: true,
        }
    }
}

/// Everything the gate needs to know about one tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolPolicy {
    /// Per-call deadline when no fresh latency disclosure applies.
    pub timeout_ms: u64,
    /// What the tool does to the world.
    pub effect: EffectClass,
    /// Retry rules (ignored for non-idempotent writes).
    pub retry: RetryPolicy,
    /// The tool breaker's settings.
    pub breaker: BreakerPolicy,
    /// Tool or tool-and-backend keying.
    pub scope: Scope,
    /// Behaviour when the cluster is unreachable.
    pub on_partition: OnPartition,
    /// What happens to a call in flight when its breaker opens.
    #[serde(default)]
    pub in_flight_on_open: InFlightOnOpen,
    /// A call still unanswered this long after it started counts against
    /// its breakers at once, as a timeout, and not again when it ends; it
    /// keeps running to its own end or deadline (or, under
    /// `in_flight_on_open = "end"`, until its breaker opens). A half-open
    /// probe that stalls has failed its probe, whatever its call does after;
    /// it holds its permit while its call runs (under `"end"`, a read probe
    /// is timed out at its stall), and its breaker learns of the failure
    /// when the permit goes back. `None`: a call counts when it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled_after_ms: Option<u64>,
    /// Answer patterns that overrule an answer's form.
    #[serde(default, skip_serializing_if = "Classification::is_empty")]
    pub classify: Classification,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        ToolPolicy {
            timeout_ms: 3_000,
            effect: EffectClass::ReadOnly,
            retry: RetryPolicy::default(),
            breaker: BreakerPolicy::default(),
            scope: Scope::Tool,
            on_partition: OnPartition::FailOpenLocal,
            in_flight_on_open: InFlightOnOpen::Finish,
            stalled_after_ms: None,
            classify: Classification::default(),
        }
    }
}

impl ToolPolicy {
    /// Whether the gate may ever retry this tool automatically.
    pub fn may_retry(&self) -> bool {
        self.effect != EffectClass::NonIdempotentWrite && self.retry.max_attempts > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_duration_grows_to_its_cap() {
        let b = OpenBackoff {
            open_ms: 1_000,
            multiplier: 2,
            open_ms_max: 5_000,
        };
        let got: Vec<u64> = (0..5).map(|r| b.duration_ms(r)).collect();
        assert_eq!(got, vec![1_000, 2_000, 4_000, 5_000, 5_000]);
    }

    #[test]
    fn fixed_open_duration_stays_fixed() {
        let b = BreakerPolicy::default().open;
        assert_eq!(b.duration_ms(0), b.duration_ms(10));
    }

    #[test]
    fn writes_are_writes() {
        assert!(EffectClass::NonIdempotentWrite.is_write());
        assert!(!EffectClass::ExpensiveRead.is_write());
        assert!(!EffectClass::NonIdempotentWrite.is_idempotent());
    }
}
