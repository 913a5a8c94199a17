//! The vocabulary for saying exactly which rule a disclosure block breaks.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How much a broken rule matters to a consuming agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The block breaks a MUST (or cannot be read): it is invalid and yields
    /// no deadline.
    Error,
    /// The block breaks a SHOULD, or is well formed but not to be relied on
    /// (stale, p99 not binding): shown to operators, never fatal alone.
    Warning,
}

/// One rule of the spec (or of this reader's bounds), so callers and tests
/// can match on the rule instead of on message text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisclosureRule {
    /// A required field is absent (or `null`).
    FieldMissing,
    /// A field holds the wrong JSON type (a string where an integer belongs,
    /// a negative or fractional millisecond count).
    FieldType,
    /// A string field exceeds `DISCLOSURE_STRING_BYTES_MAX`.
    FieldTooLong,
    /// `degradation_modes` lists more than `DEGRADATION_MODES_MAX` entries.
    TooManyDegradationModes,
    /// `version` is not `MAJOR.MINOR` or `MAJOR.MINOR.PATCH`.
    VersionFormat,
    /// `version` has a major other than 1, the only one this reader knows.
    VersionMajor,
    /// `observed_at` is not a strict ISO-8601 UTC datetime.
    ObservedAtFormat,
    /// `observed_at` lies after `now` by more than the tolerated clock skew.
    ObservedAtFuture,
    /// `observed_at` is older than `FRESHNESS_DAYS_MAX` days: the spec says
    /// to treat the block as missing.
    Stale,
    /// `measurement_window_days` is zero.
    MeasurementWindow,
    /// `sample_size` is zero: the percentiles summarize nothing.
    SampleSizeZero,
    /// `sample_size` is below `P99_BINDING_SAMPLES_MIN`, so `p99_ms` is not
    /// binding and no deadline is derived from it.
    P99NotBinding,
    /// `p50_ms > p95_ms`.
    P50AboveP95,
    /// `p95_ms > p99_ms`.
    P95AboveP99,
    /// `p99_ms > timeout_ms`.
    P99AboveTimeout,
    /// `p99_ms × 1.2 >= timeout_ms`: the timeout sits within normal variance.
    TimeoutHeadroom,
    /// `streaming: true` without `time_to_first_byte_ms`.
    StreamingTtfbMissing,
    /// `streaming: true` with `time_to_first_byte_ms > p95_ms`.
    TtfbAboveP95,
    /// `methodology_url` is not an absolute `scheme://…` URL.
    MethodologyUrl,
}

impl DisclosureRule {
    /// The severity this rule always carries, so it cannot disagree between
    /// the place a problem is made and the place it is judged.
    pub const fn severity(self) -> Severity {
        match self {
            DisclosureRule::Stale
            | DisclosureRule::P99NotBinding
            | DisclosureRule::TimeoutHeadroom => Severity::Warning,
            _ => Severity::Error,
        }
    }
}

/// One broken rule in one disclosure block, precise enough for a publisher
/// to fix it without reading the spec again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisclosureProblem {
    /// Which rule is broken, for programs.
    pub rule: DisclosureRule,
    /// The field's path in the block (`p95_ms`, `degradation_modes[2].trigger`).
    pub field: String,
    /// What is wrong, with the offending values, for people.
    pub message: String,
}

impl DisclosureProblem {
    /// Builds a problem; `field` is a path into the block.
    pub fn new(rule: DisclosureRule, field: impl Into<String>, message: impl Into<String>) -> Self {
        DisclosureProblem {
            rule,
            field: field.into(),
            message: message.into(),
        }
    }

    /// The rule's severity.
    pub const fn severity(&self) -> Severity {
        self.rule.severity()
    }

    /// Whether this problem makes the block invalid.
    pub const fn is_error(&self) -> bool {
        matches!(self.severity(), Severity::Error)
    }
}

impl fmt::Display for DisclosureProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Messages name their field already ("p50_ms 800 exceeds p95_ms 720").
        f.write_str(&self.message)
    }
}

/// Renders problems' messages joined by `; `, for error strings.
pub(super) fn render(problems: &[DisclosureProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
