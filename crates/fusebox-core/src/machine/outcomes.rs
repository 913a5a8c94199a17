//! Outcome reports: each outcome is evidence for two breakers (its server's
//! and its tool's) and, when it carries a latency, a sample for the tool's
//! observed-latency window.

use super::answer::{Answer, ReportSummary};
use super::command::{OutcomeReport, Report};
use super::namespace::ToolResolution;
use super::state_machine::StateMachine;
use super::watch_event::WatchEvent;
use crate::breaker::{BreakerKey, Observation, Recorded};
use crate::error::CoreError;
use crate::keyed::Hashing;
use crate::ledger::LedgerStore;
use crate::name::{BackendName, Namespace, ReplicaId, ServerName, ToolName};
use crate::policy::Scope;
use crate::time::Timestamp;
use crate::tools::ToolId;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

impl<L: LedgerStore> StateMachine<L> {
    /// One replica's report. A report to a namespace the cluster has no
    /// room for is refused whole (the caller learns it, nothing is counted).
    /// Outcomes a namespace full of breakers cannot take are counted as
    /// dropped, not refused: the rest of the batch still counts, and the
    /// answer says how many were dropped. A batch the replica's mark says
    /// was counted already (a resend) changes nothing (`report_marks.rs`).
    pub(super) fn report(
        &mut self,
        ns: &Namespace,
        replica: &ReplicaId,
        batch_seq: u64,
        outcomes: &[OutcomeReport],
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        self.fleet.check_namespace_room(ns)?;
        if self.fleet.report_marks.is_repeat(ns, replica, batch_seq) {
            let duplicate = u32::try_from(outcomes.len()).unwrap_or(u32::MAX);
            return Ok(Answer::Reported(ReportSummary {
                duplicate,
                ..ReportSummary::default()
            }));
        }
        self.fleet.report_marks.note(ns, replica, batch_seq, now);
        // Each distinct tool is resolved once per policy version (kept with
        // the version, or with the fleet under the defaults) and looked up
        // once per report; outcomes then borrow the resolution, so applying
        // one copies no name.
        let window_ms = self.policy_document(ns).observation_window_ms();
        let fleet = &mut self.fleet;
        let mut version = fleet
            .namespaces
            .get_mut(ns)
            .and_then(|n| n.policies.back_mut());
        let defaults = &mut fleet.default_resolved;
        // Hashed: it is only looked up, and slots are numbered in outcome
        // order whatever its layout.
        let mut index: HashMap<(&ServerName, &ToolName, Option<&BackendName>), usize, Hashing> =
            HashMap::default();
        let mut tools: Vec<BatchTool> = Vec::new();
        let mut slots: Vec<usize> = Vec::with_capacity(outcomes.len());
        for o in outcomes {
            let slot = *index
                .entry((&o.server, &o.tool, o.backend.as_ref()))
                .or_insert_with(|| {
                    let resolution = match version.as_deref_mut() {
                        Some(v) => v.resolved.get(&v.document, ns, &o.server, &o.tool),
                        None => defaults.get(ns, &o.server, &o.tool),
                    };
                    tools.push(BatchTool::new(resolution, ns, o));
                    tools.len() - 1
                });
            slots.push(slot);
        }
        let mut summary = ReportSummary::default();
        let mut timed = vec![false; tools.len()];
        for (o, &slot) in outcomes.iter().zip(&slots) {
            let t = &tools[slot];
            let r = &t.resolution;
            if o.class.has_latency()
                && self
                    .fleet
                    .tools
                    .observe(&r.id, now, o.duration_ms, window_ms)
            {
                timed[slot] = true;
            }
            let server_obs = Observation {
                replica: Cow::Borrowed(replica),
                generation: o.server_generation,
                verdict: o.class.server_verdict(),
                duration_ms: o.duration_ms,
            };
            let tool_obs = Observation {
                replica: Cow::Borrowed(replica),
                generation: o.tool_generation,
                verdict: o.class.verdict(r.tool_breaker.rate_limited_is_failure),
                duration_ms: o.duration_ms,
            };
            let pairs = [
                (&r.server_key, &r.server_breaker, server_obs),
                (t.tool_key(), &r.tool_breaker, tool_obs),
            ];
            for (key, policy, obs) in pairs {
                match self.with_breaker(key, events, |b| b.record(policy, now, &obs)) {
                    Ok(Recorded::Counted) => summary.counted += 1,
                    Ok(Recorded::Stale) => summary.stale += 1,
                    Ok(Recorded::Ignored | Recorded::NotCounting) => summary.ignored += 1,
                    Err(CoreError::LimitReached { .. }) => summary.dropped_limit += 1,
                    Err(e) => return Err(e),
                }
            }
        }
        // In name order and each once (two backends of a tool share its id),
        // as a set of the ids would hold them, without copying one.
        let mut timed: Vec<&ToolId> = tools
            .iter()
            .zip(&timed)
            .filter(|(_, &timed)| timed)
            .map(|(t, _)| &t.resolution.id)
            .collect();
        timed.sort_unstable();
        timed.dedup();
        self.update_penalties(timed, now, events);
        Ok(Answer::Reported(summary))
    }

    /// Many replicas' reports in one entry, each applied as if alone and
    /// answered on its own.
    pub(super) fn report_batch(
        &mut self,
        reports: &[Report],
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Answer {
        let answers = reports
            .iter()
            .map(|r| {
                match self.report(
                    &r.namespace,
                    &r.replica,
                    r.batch_seq,
                    &r.outcomes,
                    now,
                    events,
                ) {
                    Ok(Answer::Reported(summary)) => Ok(summary),
                    Ok(_) => Err(CoreError::invalid("reports", "unexpected answer")),
                    Err(e) => Err(e),
                }
            })
            .collect();
        Answer::ReportedBatch(answers)
    }
}

/// One tool of a report: its resolution, and its key when that depends on
/// the outcomes' backend.
struct BatchTool {
    resolution: Arc<ToolResolution>,
    backend_key: Option<BreakerKey>,
}

impl BatchTool {
    fn new(resolution: Arc<ToolResolution>, ns: &Namespace, o: &OutcomeReport) -> BatchTool {
        let backend_key = (resolution.scope == Scope::ToolAndBackend).then(|| {
            BreakerKey::for_call(ns, &o.server, &o.tool, o.backend.as_ref(), resolution.scope)
        });
        BatchTool {
            resolution,
            backend_key,
        }
    }

    /// The key of the tool's own breaker.
    fn tool_key(&self) -> &BreakerKey {
        self.backend_key
            .as_ref()
            .unwrap_or(&self.resolution.tool_key)
    }
}
