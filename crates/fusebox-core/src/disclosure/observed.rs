//! Observed latency set against a disclosed promise.

use serde::{Deserialize, Serialize};

use super::block::LatencyDisclosure;
use super::sketch::LatencySketch;
use super::{PENALTY_P95_FACTOR_DEN, PENALTY_P95_FACTOR_NUM, PENALTY_SAMPLES_MIN};

/// What the fleet saw of one tool next to what its publisher disclosed,
/// and whether the gap is large enough to penalize the tool in routing.
///
/// The spec: agents that observe sustained latency more than 50% above the
/// disclosed p95 over a meaningful window SHOULD penalize the tool until a
/// fresher disclosure arrives. "Meaningful" is at least
/// [`PENALTY_SAMPLES_MIN`] observed calls; the window is the caller's
/// sketch. Whether the disclosure itself is fresh is for
/// [`assess`](super::assess): a stale block is missing, not compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedLatency {
    /// Calls observed in the window.
    pub sample_count: u64,
    /// Observed median, `None` before the first call.
    pub observed_p50_ms: Option<u64>,
    /// Observed p95, the figure the penalty rule judges.
    pub observed_p95_ms: Option<u64>,
    /// Observed p99, for operators weighing the disclosed deadline.
    pub observed_p99_ms: Option<u64>,
    /// The publisher's median.
    pub disclosed_p50_ms: u64,
    /// The publisher's p95, the reference of the penalty rule.
    pub disclosed_p95_ms: u64,
    /// The publisher's p99.
    pub disclosed_p99_ms: u64,
    /// The largest observed p95 that is not penalized: `disclosed_p95_ms ×
    /// 1.5`, rounded down (observed values are whole milliseconds).
    pub penalty_threshold_p95_ms: u64,
    /// Observed p95 exceeds the threshold over enough calls: route away.
    pub penalized: bool,
}

impl ObservedLatency {
    /// Sets the observed sketch against the disclosure.
    pub fn compare(disclosed: &LatencyDisclosure, observed: &LatencySketch) -> Self {
        let sample_count = observed.count();
        let observed_p95_ms = observed.p95();
        let threshold = u128::from(disclosed.p95_ms) * u128::from(PENALTY_P95_FACTOR_NUM)
            / u128::from(PENALTY_P95_FACTOR_DEN);
        let penalty_threshold_p95_ms = u64::try_from(threshold).unwrap_or(u64::MAX);
        let penalized = sample_count >= PENALTY_SAMPLES_MIN
            && observed_p95_ms.is_some_and(|p95| p95 > penalty_threshold_p95_ms);
        ObservedLatency {
            sample_count,
            observed_p50_ms: observed.p50(),
            observed_p95_ms,
            observed_p99_ms: observed.p99(),
            disclosed_p50_ms: disclosed.p50_ms,
            disclosed_p95_ms: disclosed.p95_ms,
            disclosed_p99_ms: disclosed.p99_ms,
            penalty_threshold_p95_ms,
            penalized,
        }
    }
}
