//! What a replica caches about a breaker, and the admission rule it applies.
//!
//! The cluster pushes a [`BreakerView`] for every change through the watch
//! stream. A replica decides CLOSED and OPEN locally with [`admit`], with no
//! network call; only HALF_OPEN needs the cluster, for a probe permit.

use super::engine::Breaker;
use super::key::BreakerKey;
use super::state::{BreakerState, Mode};
use crate::policy::BreakerPolicy;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// One breaker as replicas see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerView {
    /// Which breaker.
    pub key: BreakerKey,
    /// The state in force.
    pub state: BreakerState,
    /// The automatic machine's state (differs under operator modes).
    pub auto_state: BreakerState,
    /// Fences reports: a replica reports with the generation it saw.
    pub generation: u64,
    /// When an open (or timed forced-open) period ends.
    pub open_until: Option<Timestamp>,
    /// When an operator's forced-open, disabled or metrics-only state lifts
    /// by itself; `None` without one, or held until an operator acts.
    pub operator_until: Option<Timestamp>,
    /// Shadow: the breaker decides but never rejects.
    pub shadow: bool,
    /// The operator's reason for a forced, disabled or metrics-only state.
    pub reason: Option<String>,
    /// The operator who set that state.
    pub actor: Option<String>,
    /// Probe permits currently out.
    pub live_probes: u32,
    /// Calls the breaker would have rejected in shadow.
    pub would_reject: u64,
}

impl BreakerView {
    /// Renders a breaker for replicas.
    pub fn of(key: &BreakerKey, breaker: &Breaker, policy: &BreakerPolicy) -> Self {
        let (reason, actor) = match breaker.mode() {
            Mode::Auto => (None, None),
            Mode::ForcedOpen { reason, actor, .. }
            | Mode::Disabled { reason, actor, .. }
            | Mode::MetricsOnly { reason, actor, .. } => {
                (Some(reason.clone()), Some(actor.clone()))
            }
        };
        BreakerView {
            key: key.clone(),
            state: breaker.state(),
            auto_state: breaker.phase().state(),
            generation: breaker.generation(),
            open_until: breaker.open_until(),
            operator_until: breaker.operator_until(),
            shadow: !breaker.enforcing(policy),
            reason,
            actor,
            live_probes: u32::try_from(breaker.live_permits()).unwrap_or(u32::MAX),
            would_reject: breaker.would_reject(),
        }
    }

    /// A breaker never seen: closed at generation 0.
    pub fn closed(key: BreakerKey) -> Self {
        BreakerView {
            key,
            state: BreakerState::Closed,
            auto_state: BreakerState::Closed,
            generation: 0,
            open_until: None,
            operator_until: None,
            shadow: false,
            reason: None,
            actor: None,
            live_probes: 0,
            would_reject: 0,
        }
    }
}

/// Whose breaker refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectScope {
    /// The whole server is out: every tool on it is refused.
    Server,
    /// Only this tool (or tool on this backend) is out.
    Tool,
}

/// What the gate does with a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Call the tool.
    Allow {
        /// Shadow: an enforcing breaker would have refused this call.
        would_reject: bool,
    },
    /// Refuse fast with `circuit_open`.
    Reject {
        /// Server or tool.
        scope: RejectScope,
        /// The refusing state.
        state: BreakerState,
        /// How long until the breaker may admit calls again, if known.
        retry_after_ms: Option<u64>,
    },
    /// Ask the cluster for a probe permit first; only a holder may call.
    Probe {
        /// Which breaker is probing.
        scope: RejectScope,
    },
}

fn admit_one(view: &BreakerView, scope: RejectScope, now: Timestamp) -> Admission {
    let auto = match view.auto_state {
        BreakerState::Open => match view.open_until {
            Some(until) if now < until => Admission::Reject {
                scope,
                state: BreakerState::Open,
                retry_after_ms: Some(until.millis_since(now)),
            },
            _ => Admission::Probe { scope },
        },
        BreakerState::HalfOpen => Admission::Probe { scope },
        _ => Admission::Allow {
            would_reject: false,
        },
    };
    match view.state {
        BreakerState::Disabled => Admission::Allow {
            would_reject: false,
        },
        BreakerState::ForcedOpen => match view.open_until {
            Some(until) if now >= until => Admission::Allow {
                would_reject: false,
            },
            until => Admission::Reject {
                scope,
                state: BreakerState::ForcedOpen,
                retry_after_ms: until.map(|t| t.millis_since(now)),
            },
        },
        _ if view.shadow => Admission::Allow {
            would_reject: matches!(auto, Admission::Reject { .. }),
        },
        _ => auto,
    }
}

/// The admission rule: the server's breaker first (an open server rejects
/// every tool on it), then the tool's.
pub fn admit(server: &BreakerView, tool: &BreakerView, now: Timestamp) -> Admission {
    let first = admit_one(server, RejectScope::Server, now);
    if !matches!(first, Admission::Allow { .. }) {
        return first;
    }
    match admit_one(tool, RejectScope::Tool, now) {
        Admission::Allow { would_reject } => Admission::Allow {
            would_reject: would_reject || matches!(first, Admission::Allow { would_reject: true }),
        },
        other => other,
    }
}
