//! The audit trail: every transition with the evidence behind it.

use super::state::BreakerState;
use crate::name::ReplicaId;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// Why a breaker changed state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Consecutive failures reached the threshold.
    ConsecutiveFailures,
    /// The window's failure ratio reached the threshold.
    FailureRatio,
    /// The window's slow-call ratio reached the threshold.
    SlowCallRatio,
    /// The open period ended; probing begins.
    OpenElapsed,
    /// A probe failed; open again, for longer if the policy grows it.
    ProbeFailed,
    /// Enough probes succeeded; closed.
    ProbesSucceeded,
    /// An operator forced it open.
    ForcedOpen,
    /// An operator's forced-open period ended.
    ForceExpired,
    /// An operator reset it to closed with fresh evidence.
    Reset,
    /// An operator disabled it.
    Disabled,
    /// An operator put it in metrics-only (shadow) mode.
    MetricsOnly,
    /// An operator's disabled or metrics-only period ended.
    OperatorExpired,
}

/// Counts and reporters at the moment of a transition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// Calls counted in the evidence span (window or streak).
    pub calls: u64,
    /// Failures among them.
    pub failures: u64,
    /// Slow calls among them.
    pub slow_calls: u64,
    /// The current streak of failures.
    pub consecutive_failures: u32,
    /// Distinct replicas that reported failures.
    pub reporters: Vec<ReplicaId>,
}

/// One transition, kept in the breaker's bounded audit trail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The entry time of the command that caused it.
    pub at: Timestamp,
    /// The generation after the transition.
    pub generation: u64,
    /// The state before.
    pub from: BreakerState,
    /// The state after.
    pub to: BreakerState,
    /// Why.
    pub cause: Cause,
    /// The operator, or `None` when the breaker's own evidence decided.
    pub actor: Option<String>,
    /// The operator's reason, if any.
    pub reason: Option<String>,
    /// The counts behind it.
    pub evidence: Evidence,
}
