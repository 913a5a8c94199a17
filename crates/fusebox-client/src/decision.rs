//! The admission decision for one call, as the gate made it.

use crate::error::Forced;
use crate::view::Resolved;
use fusebox_core::breaker::{Admission, BreakerState};
use fusebox_core::policy::OnPartition;
use fusebox_core::Timestamp;
use std::sync::Arc;

/// What the gate decided about one call, and on what grounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allow, reject, or ask for a probe permit first.
    pub admission: Admission,
    /// The state of the breaker that decided (the tool's unless its server
    /// breaker is the one refusing or probing).
    pub state: BreakerState,
    /// Made without a fresh view of the cluster: `on_partition` decided.
    pub degraded: bool,
    /// The rule that decided when degraded.
    pub on_partition: Option<OnPartition>,
    /// Generation of the tool's breaker the call runs under (reported back
    /// with the outcome, so a stale report is ignored).
    pub tool_generation: u64,
    /// Generation of the server's breaker.
    pub server_generation: u64,
    /// Age of the view the decision read, `None` before the first event.
    pub view_age_ms: Option<u64>,
    /// Who forced the refusing breaker open, and why, when an operator did.
    pub forced: Option<Forced>,
    /// What the decision was made from: a fresh view of the fleet, the last
    /// one it had (with its age), this replica's own breakers, or nothing.
    pub evidence: Evidence,
    /// This replica's wall clock when the decision was made. The call's
    /// outcome is counted at this instant plus the call's duration.
    pub decided_at: Timestamp,
    /// The tool as the policy resolved it for this decision, so recording
    /// the outcome looks nothing up again.
    pub(crate) resolution: Resolution,
}

/// The resolved tool a decision was made under. It is how the decision was
/// reached, not part of what was decided: every two compare equal.
#[derive(Clone)]
pub(crate) struct Resolution(pub(crate) Arc<Resolved>);

impl Resolution {
    /// The resolution, if it was made for `tool`.
    pub(crate) fn of(&self, tool: &crate::ToolRef) -> Option<&Arc<Resolved>> {
        (self.0.tool == *tool).then_some(&self.0)
    }
}

impl PartialEq for Resolution {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Resolution {}

impl std::fmt::Debug for Resolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Resolution").field(&self.0.tool).finish()
    }
}

/// What an admission decision was made from (the runbook's fresh, cached
/// and missing evidence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// A fresh view of the fleet's breakers.
    Fresh,
    /// The last view the fleet pushed, now stale by `age_ms`: a cut-off
    /// replica keeps the fleet's OPEN and FORCED_OPEN states.
    Cached {
        /// How old the view is.
        age_ms: u64,
    },
    /// This replica's own breakers, the fleet's view being stale by
    /// `view_age_ms` and holding no refusal.
    Local {
        /// How old the fleet's view is.
        view_age_ms: u64,
    },
    /// No view of the fleet has arrived yet.
    Missing,
}

impl Evidence {
    /// Words for a person or a model, after "decided ...".
    pub fn describe(self) -> String {
        match self {
            Evidence::Fresh => "from the fleet's current view".to_owned(),
            Evidence::Cached { age_ms } => format!(
                "from the fleet's view as it was {} ago (the breaker service is unreachable)",
                human_ms(age_ms)
            ),
            Evidence::Local { view_age_ms } => format!(
                "by this replica alone (the breaker service has been unreachable for {})",
                human_ms(view_age_ms)
            ),
            Evidence::Missing => {
                "without any view of the fleet (the breaker service has not been reached yet)"
                    .to_owned()
            }
        }
    }
}

/// A duration as a person reads it: `800 ms`, `12 s`, `3 min`, `2 h`.
fn human_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=119_999 => format!("{} s", ms / 1_000),
        120_000..=7_199_999 => format!("{} min", ms / 60_000),
        _ => format!("{} h", ms / 3_600_000),
    }
}

impl Decision {
    /// Whether the call may go ahead without a probe permit.
    pub fn allows(&self) -> bool {
        matches!(self.admission, Admission::Allow { .. })
    }

    /// Whether a shadow-mode breaker would have refused this allowed call.
    pub fn would_reject(&self) -> bool {
        matches!(self.admission, Admission::Allow { would_reject: true })
    }
}
