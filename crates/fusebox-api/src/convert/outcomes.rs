//! Outcome reports and probe permits between wire and core.

use super::breakers::state_to_proto;
use super::{name, name_at};
use crate::status;
use fusebox_core::breaker::{BreakerKey, BreakerState, ProbeAnswer, ProbeResult};
use fusebox_core::limits::BATCH_OUTCOMES_MAX;
use fusebox_core::machine::{OutcomeReport, ReportSummary, SharedStateMachine};
use fusebox_core::{BackendName, Namespace, OutcomeClass, ReplicaId, ServerName, ToolName};
use fusebox_proto::v1 as pb;
use tonic::Status;

/// Retry hint for a denied probe whose breaker gives no time (forced open
/// until reset), so a client never asks again in a tight loop.
pub const PROBE_RETRY_UNKNOWN_MS: u64 = 5_000;

/// One validated outcome whose generations may still be unknown.
#[derive(Clone, Debug)]
pub struct PendingOutcome {
    server: ServerName,
    tool: ToolName,
    backend: Option<BackendName>,
    class: OutcomeClass,
    duration_ms: u64,
    tool_generation: Option<u64>,
    server_generation: Option<u64>,
}

impl PendingOutcome {
    /// Whether the replica left a generation unset.
    pub fn needs_generations(&self) -> bool {
        self.tool_generation.is_none() || self.server_generation.is_none()
    }
}

/// A validated report batch.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The reporting replica.
    pub replica: ReplicaId,
    /// Classified outcomes, in request order.
    pub outcomes: Vec<PendingOutcome>,
    /// Outcomes without a known class, dropped here and counted as ignored.
    pub unclassified: u32,
}

/// Validates a report batch: bounded size, valid names, known classes.
pub fn batch_from_proto(req: &pb::ReportOutcomesRequest) -> Result<Batch, Status> {
    let replica = name("replica_id", &req.replica_id, ReplicaId::new)?;
    if req.outcomes.len() > BATCH_OUTCOMES_MAX {
        let given = u64::try_from(req.outcomes.len()).unwrap_or(u64::MAX);
        return Err(status::limit_reached(
            "batch_outcomes_max",
            BATCH_OUTCOMES_MAX as u64,
            given,
        ));
    }
    let mut outcomes = Vec::with_capacity(req.outcomes.len());
    let mut unclassified = 0;
    for (i, o) in req.outcomes.iter().enumerate() {
        let server = name_at(
            || format!("outcomes[{i}].server"),
            &o.server,
            ServerName::new,
        )?;
        let tool = name_at(|| format!("outcomes[{i}].tool"), &o.tool, ToolName::new)?;
        let backend = match &o.backend {
            Some(b) => Some(name_at(
                || format!("outcomes[{i}].backend"),
                b,
                BackendName::new,
            )?),
            None => None,
        };
        let Some(class) = outcome_class(o.class) else {
            unclassified += 1;
            continue;
        };
        outcomes.push(PendingOutcome {
            server,
            tool,
            backend,
            class,
            duration_ms: o.duration_ms,
            tool_generation: o.generation_seen,
            server_generation: o.server_generation_seen,
        });
    }
    Ok(Batch {
        replica,
        outcomes,
        unclassified,
    })
}

impl PendingOutcome {
    fn into_report(self, server_generation: u64, tool_generation: u64) -> OutcomeReport {
        OutcomeReport {
            server: self.server,
            tool: self.tool,
            backend: self.backend,
            class: self.class,
            duration_ms: self.duration_ms,
            server_generation,
            tool_generation,
        }
    }
}

/// The core reports, with every generation a replica left unset taken as
/// the breaker's current one (the replica had no view, so it called under
/// whatever was current).
pub fn reports(
    state: &SharedStateMachine,
    ns: &Namespace,
    pending: Vec<PendingOutcome>,
) -> Vec<OutcomeReport> {
    let document = state.policy_document(ns);
    let generation = |key: &BreakerKey| state.breaker(key).map_or(0, |b| b.generation());
    pending
        .into_iter()
        .map(|o| {
            let server_key = BreakerKey::server(ns.clone(), o.server.clone());
            let scope = document.tool_policy(&o.server, &o.tool).scope;
            let tool_key = BreakerKey::for_call(ns, &o.server, &o.tool, o.backend.as_ref(), scope);
            let server_generation = o
                .server_generation
                .unwrap_or_else(|| generation(&server_key));
            let tool_generation = o.tool_generation.unwrap_or_else(|| generation(&tool_key));
            o.into_report(server_generation, tool_generation)
        })
        .collect()
}

/// The core reports of a batch whose generations were all given (no read
/// of the state needed).
pub fn reports_as_given(pending: Vec<PendingOutcome>) -> Vec<OutcomeReport> {
    pending
        .into_iter()
        .map(|o| {
            let (server, tool) = (
                o.server_generation.unwrap_or(0),
                o.tool_generation.unwrap_or(0),
            );
            o.into_report(server, tool)
        })
        .collect()
}

/// What the cluster did with a batch. The core counts breaker updates (a
/// server's and a tool's per outcome); an outcome counts as ignored when
/// either of its updates was fenced off or dropped, rounded up, and every
/// outcome of a resent batch (counted before) is ignored.
pub fn report_to_proto(
    summary: &ReportSummary,
    sent: usize,
    unclassified: u32,
    revision: u64,
) -> pb::ReportOutcomesResponse {
    let sent = u32::try_from(sent).unwrap_or(u32::MAX);
    let fenced = summary
        .stale
        .saturating_add(summary.dropped_limit)
        .div_ceil(2)
        .saturating_add(summary.duplicate)
        .min(sent);
    pb::ReportOutcomesResponse {
        accepted: sent - fenced,
        ignored: fenced.saturating_add(unclassified),
        revision,
        dropped_limit: summary.dropped_limit.div_ceil(2).min(sent),
    }
}

/// A known outcome class, or `None` for unspecified and unknown values
/// (which the server ignores, as the proto says).
pub fn outcome_class(value: i32) -> Option<OutcomeClass> {
    use pb::OutcomeClass as W;
    Some(match W::try_from(value).ok()? {
        W::Unspecified => return None,
        W::Success => OutcomeClass::Success,
        W::BusinessError => OutcomeClass::BusinessError,
        W::ToolError => OutcomeClass::ToolError,
        W::Timeout => OutcomeClass::Timeout,
        W::Transport => OutcomeClass::Transport,
        W::ServerError => OutcomeClass::ServerError,
        W::RateLimited => OutcomeClass::RateLimited,
        W::InvalidArguments => OutcomeClass::InvalidArguments,
        W::PolicyDenied => OutcomeClass::PolicyDenied,
        W::Cancelled => OutcomeClass::Cancelled,
        W::Unparsable => OutcomeClass::Unparsable,
    })
}

/// A probe answer on the wire; `generation` is the breaker's after the
/// command (the core's "not needed" does not carry it).
pub fn probe_to_proto(
    key: &BreakerKey,
    answer: &ProbeAnswer,
    generation: u64,
) -> pb::AcquireProbeResponse {
    use pb::acquire_probe_response::Result as R;
    let result = match answer {
        ProbeAnswer::Granted {
            permit_id,
            generation,
            expires,
        } => R::Granted(pb::ProbeGranted {
            permit_id: permit_id.to_string(),
            generation: *generation,
            lease_until_ms: expires.as_millis(),
        }),
        ProbeAnswer::Denied {
            state,
            retry_after_ms,
        } => R::Denied(denied(key, *state, *retry_after_ms, false)),
        ProbeAnswer::NotNeeded { state } => R::NotNeeded(pb::ProbeNotNeeded {
            state: state_to_proto(*state) as i32,
            generation,
        }),
    };
    pb::AcquireProbeResponse {
        result: Some(result),
    }
}

/// A denial with its reason for code and a sentence for people and models.
pub fn denied(
    key: &BreakerKey,
    state: BreakerState,
    retry_after_ms: Option<u64>,
    server_open: bool,
) -> pb::ProbeDenied {
    use pb::ProbeDenialReason as Why;
    let wait_ms = retry_after_ms.unwrap_or(PROBE_RETRY_UNKNOWN_MS);
    let wait_s = wait_ms.div_ceil(1000);
    let (reason, message) = match state {
        _ if server_open => (
            Why::ServerOpen,
            format!(
                "server {} is out, probing its tools is pointless; ask again in about {wait_s} s",
                key.server
            ),
        ),
        BreakerState::ForcedOpen => (
            Why::ForcedOpen,
            format!("{key} was forced open by an operator; only a reset or its expiry ends that"),
        ),
        BreakerState::HalfOpen => (
            Why::ProbesInFlight,
            format!("{key} is already being probed; ask again in about {wait_s} s"),
        ),
        _ => (
            Why::StillOpen,
            format!("{key} is open for about {wait_s} s more; ask again then"),
        ),
    };
    pb::ProbeDenied {
        retry_after_ms: wait_ms,
        state: state_to_proto(state) as i32,
        reason: reason as i32,
        message,
    }
}

/// Whether a release's result counted (false: unknown permit or stale).
pub fn release_accepted(result: ProbeResult) -> bool {
    !matches!(result, ProbeResult::Stale)
}

/// A permit id from the wire (decimal, as granted).
pub fn permit_id(value: &str) -> Result<u64, Status> {
    value.parse().map_err(|_| {
        status::invalid_argument(
            "permit_id",
            "format",
            format!("{value:?} is not a permit id this server granted"),
        )
    })
}
