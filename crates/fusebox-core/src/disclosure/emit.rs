//! The publisher's side: a disclosure block written from observed telemetry.

use serde::{Deserialize, Serialize};

use super::assessment::deadline_for_p99;
use super::block::{DegradationMode, LatencyDisclosure};
use super::datetime::format_utc;
use super::problem::render;
use super::sketch::LatencySketch;
use super::validate::assess;
use crate::error::CoreError;
use crate::time::Timestamp;

/// The schema version Fusebox writes.
const EMITTED_VERSION: &str = "1.0";

/// What telemetry cannot tell about a tool and its publisher must state:
/// semantics, streaming, and the optional descriptive fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublisherFacts {
    /// Whether repeating a call with identical input has the same effect.
    pub idempotent: bool,
    /// Whether an agent may retry on transport failure without semantic risk.
    pub retry_safe: bool,
    /// Whether the tool streams; then `time_to_first_byte_ms` is required.
    pub streaming: bool,
    /// p95 time to first byte, measured by the publisher, when streaming.
    pub time_to_first_byte_ms: Option<u64>,
    /// The region the telemetry comes from, when latency varies by region.
    pub region: Option<String>,
    /// Median extra latency on a cold start, if the tool has one.
    pub cold_start_ms: Option<u64>,
    /// Documented degradation modes.
    pub degradation_modes: Vec<DegradationMode>,
    /// Where the measurement methodology is described.
    pub methodology_url: Option<String>,
}

/// Writes a version 1.0 disclosure from `observed` (the window's merged
/// sketch), stamped `observed_at = now`.
///
/// The percentiles are forced monotone (`p50 <= p95 <= p99`) and
/// `timeout_ms` is raised, if needed, to `ceil(p99 × 1.2) + 1` so the block
/// keeps the spec's headroom SHOULD; the caller must then really abort at
/// the emitted timeout, not at the lower one it passed. The block is
/// assessed before it is returned: anything it would fail (no samples, a
/// zero-day window, streaming without a time to first byte, a time to first
/// byte above p95, oversized strings) is refused instead. Fewer than 1000
/// samples is allowed; the block then carries a non-binding p99.
pub fn emit_disclosure(
    observed: &LatencySketch,
    window_days: u64,
    now: Timestamp,
    timeout_ms: u64,
    facts: &PublisherFacts,
) -> Result<LatencyDisclosure, CoreError> {
    let (Some(p50), Some(p95), Some(p99)) = (observed.p50(), observed.p95(), observed.p99()) else {
        return Err(CoreError::invalid(
            "sample_size",
            "no latency observed; a disclosure needs at least one sample",
        ));
    };
    let p95 = p95.max(p50);
    let p99 = p99.max(p95);
    let block = LatencyDisclosure {
        version: EMITTED_VERSION.to_string(),
        observed_at: format_utc(now),
        measurement_window_days: window_days,
        sample_size: observed.count(),
        region: facts.region.clone(),
        p50_ms: p50,
        p95_ms: p95,
        p99_ms: p99,
        cold_start_ms: facts.cold_start_ms,
        timeout_ms: timeout_ms.max(deadline_for_p99(p99).saturating_add(1)),
        idempotent: facts.idempotent,
        retry_safe: facts.retry_safe,
        streaming: facts.streaming,
        time_to_first_byte_ms: facts.time_to_first_byte_ms,
        degradation_modes: facts.degradation_modes.clone(),
        methodology_url: facts.methodology_url.clone(),
    };
    let assessment = assess(&block, now);
    if !assessment.is_valid {
        let errors: Vec<_> = assessment.errors().cloned().collect();
        return Err(CoreError::invalid("latency_disclosure", render(&errors)));
    }
    debug_assert!(block.p50_ms <= block.p95_ms && block.p95_ms <= block.p99_ms);
    Ok(block)
}
