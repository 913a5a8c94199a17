//! The verdict on one disclosure block at one instant.

use serde::{Deserialize, Serialize};

use super::problem::{DisclosureProblem, Severity};
use super::{DEADLINE_FACTOR_DEN, DEADLINE_FACTOR_NUM};

/// How old a block's `observed_at` is at the instant it was assessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Freshness {
    /// Within the freshness ceiling (an `observed_at` slightly ahead of `now`
    /// but within the tolerated skew counts as age zero).
    Fresh {
        /// Milliseconds from `observed_at` to `now`.
        age_ms: u64,
    },
    /// Older than the ceiling: the spec says to treat the block as missing.
    Stale {
        /// Milliseconds from `observed_at` to `now`.
        age_ms: u64,
    },
    /// Ahead of `now` by more than the tolerated skew: not to be believed.
    FromFuture {
        /// Milliseconds from `now` to `observed_at`.
        ahead_ms: u64,
    },
    /// `observed_at` could not be read, so the age is unknown.
    Unknown,
}

/// Everything an agent needs to decide whether to trust a block: the broken
/// rules, and the usable facts derived from them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assessment {
    /// Every broken rule, errors and warnings, in the block's field order.
    pub problems: Vec<DisclosureProblem>,
    /// No problem is an error: the block keeps every MUST of the spec.
    pub is_valid: bool,
    /// The block's age at the assessed instant.
    pub freshness: Freshness,
    /// `freshness` is [`Freshness::Fresh`]; a block that is not fresh is
    /// treated as missing.
    pub is_fresh: bool,
    /// `sample_size` reaches `P99_BINDING_SAMPLES_MIN`, so `p99_ms` may set
    /// a deadline.
    pub binding_p99: bool,
    /// The block's `p99_ms`, kept to derive the deadline.
    pub p99_ms: u64,
}

impl Assessment {
    /// Whether an agent may use the block at all: valid and fresh. A block
    /// that is not usable is treated as if the tool disclosed nothing.
    pub fn is_usable(&self) -> bool {
        self.is_valid && self.is_fresh
    }

    /// The per-call deadline the spec asks agents to use, `ceil(p99_ms ×
    /// 1.2)`, when the block is usable and its p99 binding; `None` tells the
    /// caller to fall back to its policy timeout.
    pub fn deadline_ms(&self) -> Option<u64> {
        (self.is_usable() && self.binding_p99).then(|| deadline_for_p99(self.p99_ms))
    }

    /// The problems that make the block invalid.
    pub fn errors(&self) -> impl Iterator<Item = &DisclosureProblem> {
        self.problems
            .iter()
            .filter(|p| p.severity() == Severity::Error)
    }

    /// The problems worth showing that do not invalidate the block.
    pub fn warnings(&self) -> impl Iterator<Item = &DisclosureProblem> {
        self.problems
            .iter()
            .filter(|p| p.severity() == Severity::Warning)
    }
}

/// `ceil(p99_ms × 1.2)` in exact integer arithmetic, saturating at
/// `u64::MAX`: the spec's per-call deadline for a given p99.
pub fn deadline_for_p99(p99_ms: u64) -> u64 {
    let scaled = u128::from(p99_ms) * u128::from(DEADLINE_FACTOR_NUM);
    let den = u128::from(DEADLINE_FACTOR_DEN);
    u64::try_from(scaled.div_ceil(den)).unwrap_or(u64::MAX)
}
