//! Latency disclosure: what a tool's publisher promises about its response
//! time, checked against what the fleet actually observes.
//!
//! The Agent Tool Latency Disclosure spec defines a `latency_disclosure`
//! block (p50/p95/p99, timeout, idempotency, streaming time-to-first-byte,
//! degradation modes) that lives in a tool manifest; for MCP it sits under a
//! tool's `annotations.latencyDisclosure`. Fusebox reads that block when a
//! manifest is imported, judges it, and uses it to set per-call deadlines:
//!
//! - [`LatencyDisclosure::from_json`] turns the untrusted JSON into a typed
//!   block, naming every missing field, wrong type or oversized value at once
//!   rather than stopping at the first serde error.
//! - [`assess`] applies every validation rule of the spec at a given `now`
//!   and returns an [`Assessment`]: the broken rules as [`DisclosureProblem`]s
//!   (each an error or a warning), the block's [`Freshness`], whether its p99
//!   is binding, and the derived per-call deadline.
//! - [`LatencySketch`] and [`WindowedSketch`] keep the latency the fleet
//!   observes per tool, mergeable across reporters and bounded in memory;
//!   [`ObservedLatency`] sets observed against disclosed and says whether the
//!   tool should be penalized in routing; [`emit_disclosure`] writes the
//!   publisher's side: a block built from observed telemetry.
//! - [`DegradationMode::advice`] reads what a documented mode tells a caller
//!   to do (fail fast: do not try again now; queue: wait for the mode's p95),
//!   and [`LatencyDisclosure::mode`] finds the mode a tool reports.
//!
//! Invariants this module keeps, and tests:
//! - **Pure and deterministic.** Nothing here reads a clock; `now` is a
//!   [`Timestamp`](crate::Timestamp) passed in. The same sketch inputs in the
//!   same order serialize to the same bytes, so a sketch can live in the
//!   replicated state machine's snapshot.
//! - **A deadline only from a trustworthy block.** [`Assessment::deadline_ms`]
//!   is `ceil(p99_ms × DEADLINE_FACTOR)` only when the block has no errors,
//!   is at most [`FRESHNESS_DAYS_MAX`] days old and its p99 is binding
//!   (`sample_size >= P99_BINDING_SAMPLES_MIN`); otherwise it is `None` and
//!   the caller falls back to the policy's timeout. A stale block is treated
//!   as missing, as the spec demands.
//! - **What we emit we accept.** A block from [`emit_disclosure`] passes
//!   [`assess`] with no errors; the function refuses rather than emit one
//!   that would not.
//! - **Bounds.** Strings are at most [`DISCLOSURE_STRING_BYTES_MAX`] bytes,
//!   degradation modes at most [`DEGRADATION_MODES_MAX`], a sketch at most
//!   [`SKETCH_BINS_MAX`] bins per sign, a window at most [`WINDOW_BUCKETS_MAX`]
//!   sketches.
//!
//! Decisions where the spec leaves room (each documented at its rule):
//! `sample_size` below 1000 is a *warning* (p99 not binding, no derived
//! deadline) and zero is an error; `p99_ms × 1.2 < timeout_ms` is a SHOULD
//! and so a warning; an `observed_at` more than [`OBSERVED_AT_SKEW_MS_MAX`]
//! after `now` is an error; staleness is a warning plus `is_fresh == false`,
//! since a stale block is well formed but must be ignored.

mod assessment;
mod block;
mod datetime;
mod emit;
mod hints;
mod json_fields;
mod modes;
mod observed;
mod problem;
mod sketch;
mod validate;
mod windowed;

#[cfg(test)]
mod tests;

pub use assessment::{deadline_for_p99, Assessment, Freshness};
pub use block::{DegradationMode, LatencyDisclosure};
pub use datetime::{format_utc, parse_utc, DatetimeError};
pub use emit::{emit_disclosure, PublisherFacts};
pub use hints::McpHints;
pub use modes::ModeAdvice;
pub use observed::ObservedLatency;
pub use problem::{DisclosureProblem, DisclosureRule, Severity};
pub use sketch::LatencySketch;
pub use validate::{assess, validate};
pub use windowed::WindowedSketch;

/// The spec's per-call deadline factor: agents wait `p99_ms × 1.2`, not the
/// publisher's `timeout_ms`. Integer code uses the exact ratio
/// [`DEADLINE_FACTOR_NUM`]`/`[`DEADLINE_FACTOR_DEN`] so replicas never
/// disagree over float rounding.
pub const DEADLINE_FACTOR: f64 = 1.2;
/// Numerator of [`DEADLINE_FACTOR`] as an exact ratio.
pub const DEADLINE_FACTOR_NUM: u64 = 6;
/// Denominator of [`DEADLINE_FACTOR`] as an exact ratio.
pub const DEADLINE_FACTOR_DEN: u64 = 5;
/// The spec's hard freshness ceiling: a block whose `observed_at` is older
/// than this many days before `now` must be treated as missing.
pub const FRESHNESS_DAYS_MAX: u64 = 90;
/// The spec's minimum `sample_size` for `p99_ms` to be binding; below it the
/// p99 is informative only and yields no deadline.
pub const P99_BINDING_SAMPLES_MIN: u64 = 1000;
/// How far `observed_at` may lie after `now`, in milliseconds, before the
/// block is refused: clocks of publishers and leaders disagree a little, a
/// block from tomorrow is a lie or a bug.
pub const OBSERVED_AT_SKEW_MS_MAX: u64 = 5 * 60 * 1000;
/// The spec's routing penalty: a tool whose observed p95 runs more than this
/// factor above its disclosed p95 is penalized. Exact ratio below.
pub const PENALTY_P95_FACTOR: f64 = 1.5;
/// Numerator of [`PENALTY_P95_FACTOR`] as an exact ratio.
pub const PENALTY_P95_FACTOR_NUM: u64 = 3;
/// Denominator of [`PENALTY_P95_FACTOR`] as an exact ratio.
pub const PENALTY_P95_FACTOR_DEN: u64 = 2;
/// Fewest observed samples before a tool may be penalized: the spec asks for
/// "a meaningful window", and a p95 over a handful of calls is noise.
pub const PENALTY_SAMPLES_MIN: u64 = 100;
/// Longest string field in a block (version, region, trigger, behavior,
/// methodology URL, observed_at), in bytes.
pub const DISCLOSURE_STRING_BYTES_MAX: usize = 1024;
/// Most degradation modes one block may list.
pub const DEGRADATION_MODES_MAX: usize = 32;
/// Relative accuracy of every latency sketch: a reported quantile is within
/// 1% of a true sample value.
pub const SKETCH_RELATIVE_ACCURACY: f64 = 0.01;
/// Most bins one sketch store may hold; with 1% accuracy 2048 bins span
/// about 1 ms to far beyond any timeout before the lowest bins collapse.
pub const SKETCH_BINS_MAX: u32 = 2048;
/// Most time buckets one [`WindowedSketch`] may hold, bounding its memory
/// to this many sketches.
pub const WINDOW_BUCKETS_MAX: usize = 64;
/// One day in milliseconds.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1000;
