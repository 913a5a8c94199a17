//! The `latency_disclosure` block itself, as the spec writes it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::datetime::{parse_utc, DatetimeError};
use super::json_fields::{check_string_len, FieldReader};
use super::problem::{DisclosureProblem, DisclosureRule};
use super::DEGRADATION_MODES_MAX;
use crate::time::Timestamp;

/// The MCP annotation key a tool's disclosure hides under.
const MCP_ANNOTATION_KEY: &str = "latencyDisclosure";

/// A publisher's latency promise for one tool, field for field as the spec
/// (version 1.x) defines it; times are integer milliseconds.
///
/// A value of this type is *well typed and within bounds* when it comes from
/// [`LatencyDisclosure::from_json`]; whether it keeps the spec's rules is for
/// [`assess`](super::assess) to say, because some rules depend on `now`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyDisclosure {
    /// Semver of the disclosure schema; this reader understands major 1.
    pub version: String,
    /// End of the measurement window, ISO-8601; kept as the publisher wrote
    /// it so a malformed value can be reported verbatim.
    pub observed_at: String,
    /// Width of the rolling window the percentiles cover.
    pub measurement_window_days: u64,
    /// Invocations the percentiles were computed over; at least 1000 for
    /// `p99_ms` to be binding.
    pub sample_size: u64,
    /// Region or zone, when latency differs materially between regions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Median server-side response time: for human-readable expectations.
    pub p50_ms: u64,
    /// 95th percentile: for routing, fan-in estimates and the penalty rule.
    pub p95_ms: u64,
    /// 99th percentile: the per-call deadline is derived from it.
    pub p99_ms: u64,
    /// Median extra latency on a cold start; absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start_ms: Option<u64>,
    /// The publisher's hard cutoff; slower calls end in a typed timeout error.
    pub timeout_ms: u64,
    /// Whether repeating a call with identical input has the same effect.
    pub idempotent: bool,
    /// Whether an agent may retry on transport failure without semantic risk.
    pub retry_safe: bool,
    /// Whether output streams; then time-to-first-byte is required.
    pub streaming: bool,
    /// p95 from request to first response byte; required when streaming.
    /// Written as `null` when absent, as in the spec's example.
    #[serde(default)]
    pub time_to_first_byte_ms: Option<u64>,
    /// States in which the latency profile changes, so agents can reason
    /// about retries during a partial outage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degradation_modes: Vec<DegradationMode>,
    /// Where the publisher explains how the numbers were computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methodology_url: Option<String>,
}

/// One documented state with a different latency profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DegradationMode {
    /// What puts the tool in this mode (`queue_depth>50`, `rate_limit`).
    pub trigger: String,
    /// What the tool does then (`queue and serve`, `fail fast with 503`).
    pub behavior: String,
    /// The p95 to plan for while in this mode.
    pub expected_p95_ms: u64,
}

impl LatencyDisclosure {
    /// Reads a block from untrusted JSON (an MCP `latencyDisclosure`
    /// annotation, an `x-latency-disclosure` extension), listing every
    /// missing field, wrong type and bound broken. Unknown fields are
    /// ignored: later 1.x versions may add some.
    pub fn from_json(value: &Value) -> Result<Self, Vec<DisclosureProblem>> {
        let mut r = FieldReader::top(value).map_err(|p| vec![p])?;
        let version = r.required_string("version");
        let observed_at = r.required_string("observed_at");
        let measurement_window_days = r.required_u64("measurement_window_days");
        let sample_size = r.required_u64("sample_size");
        let region = r.optional_string("region");
        let p50_ms = r.required_u64("p50_ms");
        let p95_ms = r.required_u64("p95_ms");
        let p99_ms = r.required_u64("p99_ms");
        let cold_start_ms = r.optional_u64("cold_start_ms");
        let timeout_ms = r.required_u64("timeout_ms");
        let idempotent = r.required_bool("idempotent");
        let retry_safe = r.required_bool("retry_safe");
        let streaming = r.required_bool("streaming");
        let time_to_first_byte_ms = r.optional_u64("time_to_first_byte_ms");
        let degradation_modes = read_modes(&mut r);
        let methodology_url = r.optional_string("methodology_url");
        let problems = r.into_problems();
        let (
            Some(version),
            Some(observed_at),
            Some(measurement_window_days),
            Some(sample_size),
            Some(p50_ms),
            Some(p95_ms),
            Some(p99_ms),
            Some(timeout_ms),
            Some(idempotent),
            Some(retry_safe),
            Some(streaming),
        ) = (
            version,
            observed_at,
            measurement_window_days,
            sample_size,
            p50_ms,
            p95_ms,
            p99_ms,
            timeout_ms,
            idempotent,
            retry_safe,
            streaming,
        )
        else {
            debug_assert!(!problems.is_empty(), "a missing field records a problem");
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(LatencyDisclosure {
            version,
            observed_at,
            measurement_window_days,
            sample_size,
            region,
            p50_ms,
            p95_ms,
            p99_ms,
            cold_start_ms,
            timeout_ms,
            idempotent,
            retry_safe,
            streaming,
            time_to_first_byte_ms,
            degradation_modes,
            methodology_url,
        })
    }

    /// Reads a block from JSON text (as a node sends it to replicas), with
    /// [`LatencyDisclosure::from_json`]'s checks; text that is not JSON is
    /// one problem.
    pub fn from_json_text(text: &str) -> Result<Self, Vec<DisclosureProblem>> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            let message = format!("latencyDisclosure is not JSON: {e}");
            vec![DisclosureProblem::new(
                DisclosureRule::FieldType,
                "",
                message,
            )]
        })?;
        Self::from_json(&value)
    }

    /// Reads the block from an MCP tool's `annotations` object: `None` when
    /// the tool discloses nothing, otherwise what [`Self::from_json`] says.
    pub fn from_mcp_annotations(
        annotations: &Value,
    ) -> Option<Result<Self, Vec<DisclosureProblem>>> {
        let block = annotations.get(MCP_ANNOTATION_KEY)?;
        Some(Self::from_json(block))
    }

    /// The block as JSON, with the spec's snake_case field names.
    pub fn to_json(&self) -> Value {
        // Serializing plain strings, integers and booleans cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// `observed_at` as a [`Timestamp`], or why it is not a datetime.
    pub fn observed_at_time(&self) -> Result<Timestamp, DatetimeError> {
        parse_utc(&self.observed_at)
    }

    /// Bound checks for a block that did not come through
    /// [`Self::from_json`] (built in code, or decoded by serde from a
    /// snapshot): string lengths and the degradation mode count.
    pub fn bound_problems(&self) -> Vec<DisclosureProblem> {
        let mut problems = Vec::new();
        if let Some(problem) = too_many_modes(self.degradation_modes.len()) {
            problems.push(problem);
        }
        let top = [
            ("version", Some(&self.version)),
            ("observed_at", Some(&self.observed_at)),
            ("region", self.region.as_ref()),
            ("methodology_url", self.methodology_url.as_ref()),
        ];
        for (name, text) in top {
            problems.extend(text.and_then(|t| check_string_len(name, t)));
        }
        for (i, mode) in self.degradation_modes.iter().enumerate() {
            let trigger = format!("degradation_modes[{i}].trigger");
            let behavior = format!("degradation_modes[{i}].behavior");
            problems.extend(check_string_len(&trigger, &mode.trigger));
            problems.extend(check_string_len(&behavior, &mode.behavior));
        }
        problems
    }
}

fn too_many_modes(count: usize) -> Option<DisclosureProblem> {
    if count <= DEGRADATION_MODES_MAX {
        return None;
    }
    let message =
        format!("degradation_modes has {count} entries, at most {DEGRADATION_MODES_MAX} allowed");
    Some(DisclosureProblem::new(
        DisclosureRule::TooManyDegradationModes,
        "degradation_modes",
        message,
    ))
}

/// Reads `degradation_modes`, refusing the whole list when it is too long
/// rather than reading an unbounded number of entries.
fn read_modes(r: &mut FieldReader<'_>) -> Vec<DegradationMode> {
    let items = r.optional_array("degradation_modes");
    if let Some(problem) = too_many_modes(items.len()) {
        r.push(problem);
        return Vec::new();
    }
    let mut modes = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match read_mode(item, &r.path(&format!("degradation_modes[{i}]"))) {
            Ok(mode) => modes.push(mode),
            Err(problems) => problems.into_iter().for_each(|p| r.push(p)),
        }
    }
    modes
}

fn read_mode(item: &Value, path: &str) -> Result<DegradationMode, Vec<DisclosureProblem>> {
    let mut r = FieldReader::nested(item, path).map_err(|p| vec![p])?;
    let trigger = r.required_string("trigger");
    let behavior = r.required_string("behavior");
    let expected_p95_ms = r.required_u64("expected_p95_ms");
    let problems = r.into_problems();
    match (trigger, behavior, expected_p95_ms) {
        (Some(trigger), Some(behavior), Some(expected_p95_ms)) if problems.is_empty() => {
            Ok(DegradationMode {
                trigger,
                behavior,
                expected_p95_ms,
            })
        }
        _ => Err(problems),
    }
}
