//! The admission decision for one call, as the gate made it.

use crate::error::Forced;
use fusebox_core::breaker::{Admission, BreakerState};
use fusebox_core::policy::OnPartition;

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
