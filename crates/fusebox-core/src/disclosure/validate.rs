//! Every validation rule of the spec, one small check each.
//!
//! Checks are independent and report in the block's field order. Where one
//! broken rule would imply another (`p99_ms > timeout_ms` implies no
//! headroom, `sample_size == 0` implies a non-binding p99), only the stronger
//! is reported, so a block that breaks one rule gets exactly one problem.

use super::assessment::{Assessment, Freshness};
use super::block::LatencyDisclosure;
use super::datetime::format_utc;
use super::problem::{DisclosureProblem, DisclosureRule as Rule};
use super::{
    DAY_MS, DEADLINE_FACTOR_DEN, DEADLINE_FACTOR_NUM, FRESHNESS_DAYS_MAX, OBSERVED_AT_SKEW_MS_MAX,
    P99_BINDING_SAMPLES_MIN,
};
use crate::time::{span_text, Timestamp};

/// Judges `block` at the instant `now`: every broken rule, its freshness,
/// whether its p99 binds, and so whether it yields a deadline.
pub fn assess(block: &LatencyDisclosure, now: Timestamp) -> Assessment {
    let (freshness, problems) = check_all(block, now);
    let is_valid = !problems.iter().any(DisclosureProblem::is_error);
    Assessment {
        problems,
        is_valid,
        freshness,
        is_fresh: matches!(freshness, Freshness::Fresh { .. }),
        binding_p99: block.sample_size >= P99_BINDING_SAMPLES_MIN,
        p99_ms: block.p99_ms,
    }
}

/// Every rule `block` breaks at `now`, errors and warnings alike.
pub fn validate(block: &LatencyDisclosure, now: Timestamp) -> Vec<DisclosureProblem> {
    check_all(block, now).1
}

fn check_all(block: &LatencyDisclosure, now: Timestamp) -> (Freshness, Vec<DisclosureProblem>) {
    let mut problems = block.bound_problems();
    problems.extend(check_version(&block.version));
    let (freshness, time_problem) = check_observed_at(block, now);
    problems.extend(time_problem);
    problems.extend(check_window(block.measurement_window_days));
    problems.extend(check_sample_size(block.sample_size));
    problems.extend(check_order(block));
    problems.extend(check_streaming(block));
    problems.extend(block.methodology_url.as_deref().and_then(check_url));
    (freshness, problems)
}

/// A semver number part: digits, no leading zero unless it is `0`.
fn semver_part(part: &str) -> Option<u64> {
    let well_formed = !part.is_empty()
        && part.bytes().all(|b| b.is_ascii_digit())
        && (part == "0" || !part.starts_with('0'));
    well_formed.then(|| part.parse().ok()).flatten()
}

fn check_version(version: &str) -> Option<DisclosureProblem> {
    let parts: Vec<&str> = version.split('.').collect();
    let numbers: Option<Vec<u64>> = parts.iter().map(|p| semver_part(p)).collect();
    let major = match numbers {
        Some(n) if (2..=3).contains(&n.len()) => n[0],
        _ => {
            let message =
                format!("version \"{version}\" is not semver MAJOR.MINOR or MAJOR.MINOR.PATCH");
            return Some(DisclosureProblem::new(
                Rule::VersionFormat,
                "version",
                message,
            ));
        }
    };
    (major != 1).then(|| {
        let message = format!(
            "version \"{version}\" has major {major}; this reader knows major version 1 only"
        );
        DisclosureProblem::new(Rule::VersionMajor, "version", message)
    })
}

/// Reads `observed_at` and places it against `now`: its freshness, and the
/// one problem (unreadable, from the future, stale) if there is one.
fn check_observed_at(
    block: &LatencyDisclosure,
    now: Timestamp,
) -> (Freshness, Option<DisclosureProblem>) {
    let text = &block.observed_at;
    let observed = match block.observed_at_time() {
        Ok(at) => at,
        Err(e) => {
            let message = format!("observed_at \"{text}\" is not an ISO-8601 UTC datetime: {e}");
            let problem = DisclosureProblem::new(Rule::ObservedAtFormat, "observed_at", message);
            return (Freshness::Unknown, Some(problem));
        }
    };
    let ahead_ms = observed.millis_since(now);
    if ahead_ms > OBSERVED_AT_SKEW_MS_MAX {
        let message = format!(
            "observed_at {text} is {} after now ({}), beyond the \
             {} of clock skew tolerated",
            span_text(ahead_ms),
            format_utc(now),
            span_text(OBSERVED_AT_SKEW_MS_MAX)
        );
        let problem = DisclosureProblem::new(Rule::ObservedAtFuture, "observed_at", message);
        return (Freshness::FromFuture { ahead_ms }, Some(problem));
    }
    let age_ms = now.millis_since(observed);
    if age_ms <= FRESHNESS_DAYS_MAX * DAY_MS {
        return (Freshness::Fresh { age_ms }, None);
    }
    let message = format!(
        "observed_at {text} is {} old at {}, older than the \
         {FRESHNESS_DAYS_MAX}-day freshness ceiling; treat the disclosure as missing",
        span_text(age_ms),
        format_utc(now)
    );
    let problem = DisclosureProblem::new(Rule::Stale, "observed_at", message);
    (Freshness::Stale { age_ms }, Some(problem))
}

fn check_window(days: u64) -> Option<DisclosureProblem> {
    (days == 0).then(|| {
        DisclosureProblem::new(
            Rule::MeasurementWindow,
            "measurement_window_days",
            "measurement_window_days is 0; the window must span at least 1 day",
        )
    })
}

/// Zero samples is an error; fewer than the binding minimum is a warning:
/// p50 and p95 still inform routing, but p99 sets no deadline.
fn check_sample_size(samples: u64) -> Option<DisclosureProblem> {
    if samples == 0 {
        let message = "sample_size is 0; percentiles need at least one invocation";
        return Some(DisclosureProblem::new(
            Rule::SampleSizeZero,
            "sample_size",
            message,
        ));
    }
    (samples < P99_BINDING_SAMPLES_MIN).then(|| {
        let message = format!(
            "sample_size {samples} is below {P99_BINDING_SAMPLES_MIN}; p99_ms is not binding \
             and yields no deadline"
        );
        DisclosureProblem::new(Rule::P99NotBinding, "sample_size", message)
    })
}

fn exceeds(
    rule: Rule,
    field: &str,
    value: u64,
    other: &str,
    bound: u64,
) -> Option<DisclosureProblem> {
    (value > bound).then(|| {
        let message = format!("{field} {value} exceeds {other} {bound}");
        DisclosureProblem::new(rule, field, message)
    })
}

/// `p50 <= p95 <= p99 <= timeout`, then the SHOULD that
/// `p99 × 1.2 < timeout` (only when `p99 <= timeout`, which it strengthens).
fn check_order(b: &LatencyDisclosure) -> Vec<DisclosureProblem> {
    let mut problems: Vec<DisclosureProblem> = [
        exceeds(Rule::P50AboveP95, "p50_ms", b.p50_ms, "p95_ms", b.p95_ms),
        exceeds(Rule::P95AboveP99, "p95_ms", b.p95_ms, "p99_ms", b.p99_ms),
        exceeds(
            Rule::P99AboveTimeout,
            "p99_ms",
            b.p99_ms,
            "timeout_ms",
            b.timeout_ms,
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    if b.p99_ms <= b.timeout_ms {
        problems.extend(check_headroom(b.p99_ms, b.timeout_ms));
    }
    problems
}

fn check_headroom(p99_ms: u64, timeout_ms: u64) -> Option<DisclosureProblem> {
    let scaled = u128::from(p99_ms) * u128::from(DEADLINE_FACTOR_NUM);
    let limit = u128::from(timeout_ms) * u128::from(DEADLINE_FACTOR_DEN);
    (scaled >= limit).then(|| {
        let message = format!(
            "timeout_ms {timeout_ms} is not above p99_ms × 1.2 = {}; the timeout sits within \
             normal variance",
            tenths(u128::from(p99_ms) * u128::from(DEADLINE_FACTOR_NUM * 10 / DEADLINE_FACTOR_DEN))
        );
        DisclosureProblem::new(Rule::TimeoutHeadroom, "timeout_ms", message)
    })
}

/// A count of tenths as an exact decimal: `22200` → `2220`, `22212` → `2221.2`.
fn tenths(value: u128) -> String {
    match value % 10 {
        0 => format!("{}", value / 10),
        rest => format!("{}.{rest}", value / 10),
    }
}

fn check_streaming(b: &LatencyDisclosure) -> Option<DisclosureProblem> {
    if !b.streaming {
        return None;
    }
    let Some(ttfb) = b.time_to_first_byte_ms else {
        return Some(DisclosureProblem::new(
            Rule::StreamingTtfbMissing,
            "time_to_first_byte_ms",
            "streaming is true but time_to_first_byte_ms is missing",
        ));
    };
    exceeds(
        Rule::TtfbAboveP95,
        "time_to_first_byte_ms",
        ttfb,
        "p95_ms",
        b.p95_ms,
    )
}

/// An absolute URL's shape: `scheme://rest`, a letter-led scheme, a
/// non-empty rest without whitespace or control characters.
fn check_url(url: &str) -> Option<DisclosureProblem> {
    let well_formed = url.split_once("://").is_some_and(|(scheme, rest)| {
        let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        let rest_ok =
            !rest.is_empty() && !rest.chars().any(|c| c.is_whitespace() || c.is_control());
        scheme_ok && rest_ok
    });
    (!well_formed).then(|| {
        let message = format!("methodology_url \"{url}\" is not an absolute URL (scheme://…)");
        DisclosureProblem::new(Rule::MethodologyUrl, "methodology_url", message)
    })
}
