//! The states a breaker can be in, as operators and clients see them.

use crate::name::ReplicaId;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The state a breaker shows to clients and operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Healthy: calls go through.
    Closed,
    /// Tripped: calls are rejected until the open period ends.
    Open,
    /// Testing recovery: only holders of a probe permit may call.
    HalfOpen,
    /// An operator forced it open (with a reason and maybe an expiry).
    ForcedOpen,
    /// An operator disabled it: every call is allowed.
    Disabled,
    /// Shadow by operator: decide and count, never reject.
    MetricsOnly,
}

impl BreakerState {
    /// The wire name (`snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
            BreakerState::ForcedOpen => "forced_open",
            BreakerState::Disabled => "disabled",
            BreakerState::MetricsOnly => "metrics_only",
        }
    }
}

/// Who steers the breaker: its own evidence, or an operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// The automatic closed / open / half-open machine decides.
    Auto,
    /// Rejects every call until an operator lifts it or `until` passes.
    ForcedOpen {
        /// Why, as the operator wrote it.
        reason: String,
        /// Who forced it.
        actor: String,
        /// When it lifts by itself; `None` holds until an operator acts.
        until: Option<Timestamp>,
    },
    /// Allows every call; outcomes are still counted.
    Disabled {
        /// Why, as the operator wrote it.
        reason: String,
        /// Who disabled it.
        actor: String,
        /// When it returns to the automatic machine by itself (closed, with
        /// fresh evidence); `None` holds until an operator acts.
        until: Option<Timestamp>,
    },
    /// Runs the automatic machine but never rejects (shadow).
    MetricsOnly {
        /// Why, as the operator wrote it.
        reason: String,
        /// Who set it.
        actor: String,
        /// When the automatic machine's verdict is enforced again by itself;
        /// `None` holds until an operator acts.
        until: Option<Timestamp>,
    },
}

/// A fleet-wide probe permit in half-open: a lease that returns if its holder dies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permit {
    /// The replica allowed to call the tool.
    pub holder: ReplicaId,
    /// When the lease lapses and the permit returns to the pool.
    pub expires: Timestamp,
}

/// The automatic machine's phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Counting evidence.
    Closed,
    /// Rejecting until `until`.
    Open {
        /// When half-open begins.
        until: Timestamp,
        /// Reopens since the last close; grows the open duration.
        reopens: u32,
    },
    /// Granting probe permits.
    HalfOpen {
        /// Live permits by id.
        permits: BTreeMap<u64, Permit>,
        /// Probe successes so far.
        successes: u32,
        /// Reopens since the last close, carried into the next open.
        reopens: u32,
    },
}

impl Phase {
    /// The state this phase shows.
    pub fn state(&self) -> BreakerState {
        match self {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}
