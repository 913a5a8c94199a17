//! Tool manifests, disclosure verdicts and observed latency on the wire.
//!
//! Observed figures are read at the state's own time ([`SharedStateMachine::now`],
//! the last applied entry's, advanced by ticks), never this node's clock, so
//! every replica shows the same window for the same revision.

use super::ledger::effect_to_proto;
use super::name_at;
use crate::status;
use fusebox_core::disclosure::McpHints;
use fusebox_core::disclosure::{
    assess, parse_utc, DisclosureProblem, LatencyDisclosure, LatencySketch, ObservedLatency,
};
use fusebox_core::limits::TOOLS_PER_SERVER_MAX;
use fusebox_core::machine::SharedStateMachine;
use fusebox_core::tools::{effect_of, DisclosureVerdict, ToolId, ToolImport, ToolImported};
use fusebox_core::{Namespace, ToolName};
use fusebox_proto::v1 as pb;
use tonic::Status;

/// A manifest's tools, each name decoded. The count is checked before any
/// name is decoded, so an oversized manifest costs no work; every other
/// bound is the core's (`Command::validate`, checked by the gateway).
pub fn manifest_from_proto(tools: &[pb::ManifestTool]) -> Result<Vec<ToolImport>, Status> {
    if tools.len() > TOOLS_PER_SERVER_MAX {
        let max = u64::try_from(TOOLS_PER_SERVER_MAX).unwrap_or(u64::MAX);
        let actual = u64::try_from(tools.len()).unwrap_or(u64::MAX);
        return Err(status::limit_reached("tools_per_server", max, actual));
    }
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let tool = name_at(|| format!("tools[{i}].tool"), &t.tool, ToolName::new)?;
            Ok(ToolImport {
                tool,
                hints: McpHints {
                    read_only: t.read_only_hint,
                    destructive: t.destructive_hint,
                    idempotent: t.idempotent_hint,
                    open_world: t.open_world_hint,
                },
                disclosure_json: t.latency_disclosure_json.clone(),
            })
        })
        .collect()
}

/// One broken rule on the wire.
pub fn problem_to_proto(problem: &DisclosureProblem) -> pb::DisclosureProblem {
    let rule = serde_json::to_value(problem.rule)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    pb::DisclosureProblem {
        rule,
        field: problem.field.clone(),
        message: problem.message.clone(),
        error: problem.is_error(),
    }
}

/// What an import made of one tool, on the wire.
pub fn imported_to_proto(result: &ToolImported) -> pb::ToolImportResult {
    let (verdict, problems) = match &result.verdict {
        DisclosureVerdict::Accepted { warnings } => {
            (pb::DisclosureVerdict::Accepted, &warnings[..])
        }
        DisclosureVerdict::Invalid { problems } => (pb::DisclosureVerdict::Invalid, &problems[..]),
        DisclosureVerdict::Stale { problems } => (pb::DisclosureVerdict::Stale, &problems[..]),
        DisclosureVerdict::Missing => (pb::DisclosureVerdict::Missing, &[][..]),
    };
    pb::ToolImportResult {
        tool: result.tool.to_string(),
        verdict: verdict as i32,
        problems: problems.iter().map(problem_to_proto).collect(),
        effect: effect_to_proto(result.effect) as i32,
        effect_derived: result.effect_derived,
        deadline_ms: result.deadline_ms,
    }
}

/// The fields of a block agents act on, as the watch stream carries them.
pub fn disclosure_to_proto(block: &LatencyDisclosure) -> pb::LatencyDisclosure {
    pb::LatencyDisclosure {
        p50_ms: block.p50_ms,
        p95_ms: block.p95_ms,
        p99_ms: block.p99_ms,
        timeout_ms: block.timeout_ms,
        ttfb_ms: block.time_to_first_byte_ms,
        sample_size: block.sample_size,
        measured_at_ms: parse_utc(&block.observed_at).map_or(0, |t| t.as_millis()),
        idempotent: block.idempotent,
        retry_safe: block.retry_safe,
        degradation_modes: block
            .degradation_modes
            .iter()
            .map(|m| m.trigger.clone())
            .collect(),
        block_json: block.to_json().to_string(),
    }
}

fn figures(sketch: &LatencySketch) -> pb::LatencyFigures {
    pb::LatencyFigures {
        sample_count: sketch.count(),
        p50_ms: sketch.p50(),
        p95_ms: sketch.p95(),
        p99_ms: sketch.p99(),
    }
}

/// One tool's manifest facts, disclosed and observed latency and penalty,
/// read from the state at its own time.
pub fn tool_latency(state: &SharedStateMachine, id: &ToolId) -> pb::ToolLatency {
    let now = state.now();
    let observed = state.tools().observed(id, now);
    let record = state.tools().tool(id);
    let document = state.policy_document(&id.namespace);
    let effect = record.map(|r| effect_of(document, &id.server, &id.tool, &r.hints));
    let block = record.and_then(|r| r.disclosure());
    let assessment = block.map(|b| assess(b, now));
    let threshold = block.map_or(0, |b| {
        ObservedLatency::compare(b, &observed).penalty_threshold_p95_ms
    });
    pb::ToolLatency {
        server: id.server.to_string(),
        tool: id.tool.to_string(),
        imported: record.is_some(),
        imported_at_ms: record.map_or(0, |r| r.imported_at.as_millis()),
        effect: effect.map_or(pb::Effect::Unspecified, |(e, _)| effect_to_proto(e)) as i32,
        effect_derived: effect.is_some_and(|(_, derived)| derived),
        disclosed: block.map(disclosure_to_proto),
        disclosed_json: block.and_then(|b| serde_json::to_string(b).ok()),
        observed: Some(figures(&observed)),
        window_ms: document.observation_window_ms(),
        penalty_threshold_p95_ms: threshold,
        penalized: record.is_some_and(|r| r.penalized),
        deadline_ms: assessment.as_ref().and_then(|a| a.deadline_ms()),
        disclosure_fresh: assessment.is_some_and(|a| a.is_fresh),
        imported_by: record.map_or_else(String::new, |r| r.imported_by.clone()),
    }
}

/// Every imported or observed tool of `ns` (optionally one server's, or one
/// tool name's), in `(server, tool)` order.
pub fn tool_ids(
    state: &SharedStateMachine,
    ns: &Namespace,
    server: Option<&str>,
    tool: Option<&str>,
) -> Vec<ToolId> {
    let imported = state.tools().tools_in(ns).map(|(id, _)| id);
    let observed = state.tools().observed_in(ns);
    let mut ids: Vec<ToolId> = imported
        .chain(observed)
        .filter(|id| server.is_none_or(|s| id.server.as_str() == s))
        .filter(|id| tool.is_none_or(|t| id.tool.as_str() == t))
        .cloned()
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// A tool's entry as a watch event carries it: `disclosed` unset when the
/// tool has no stored disclosure (or was dropped), so replicas forget it.
pub fn tool_disclosure(state: &SharedStateMachine, id: &ToolId) -> pb::ToolDisclosure {
    let now = state.now();
    let record = state.tools().tool(id);
    let observed = state.tools().observed(id, now);
    let observed = (!observed.is_empty()).then(|| pb::LatencyDisclosure {
        p50_ms: observed.p50().unwrap_or(0),
        p95_ms: observed.p95().unwrap_or(0),
        p99_ms: observed.p99().unwrap_or(0),
        sample_size: observed.count(),
        measured_at_ms: now.as_millis(),
        ..Default::default()
    });
    pb::ToolDisclosure {
        server: id.server.to_string(),
        tool: id.tool.to_string(),
        disclosed: record.and_then(|r| r.disclosure()).map(disclosure_to_proto),
        observed,
        p95_regressed: record.is_some_and(|r| r.penalized),
        hinted_effect: record.map_or(pb::Effect::Unspecified, |r| {
            effect_to_proto(r.hints.effect())
        }) as i32,
    }
}

/// Every imported tool of `ns` as watch snapshot entries.
pub fn disclosures_in(state: &SharedStateMachine, ns: &Namespace) -> Vec<pb::ToolDisclosure> {
    state
        .tools()
        .tools_in(ns)
        .map(|(id, _)| tool_disclosure(state, id))
        .collect()
}
