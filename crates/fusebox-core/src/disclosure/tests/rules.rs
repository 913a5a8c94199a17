//! Every validation rule, broken once and kept at its edge; freshness and
//! the derived deadline.

use super::{mode, now, spec_block};
use crate::disclosure::*;

#[test]
fn the_spec_example_is_valid_fresh_and_binding() {
    let block = spec_block();
    assert_eq!(block.p99_ms, 1850);
    assert_eq!(block.degradation_modes.len(), 2);
    assert_eq!(block.time_to_first_byte_ms, None);
    let a = assess(&block, now().plus_ms(DAY_MS));
    assert_eq!(a.problems, vec![]);
    assert!(a.is_valid && a.is_fresh && a.binding_p99 && a.is_usable());
    assert_eq!(a.freshness, Freshness::Fresh { age_ms: DAY_MS });
    // ceil(1850 × 1.2) = 2220.
    assert_eq!(a.deadline_ms(), Some(2220));
}

#[test]
fn the_exact_ratios_match_the_named_factors() {
    let deadline = DEADLINE_FACTOR_NUM as f64 / DEADLINE_FACTOR_DEN as f64;
    let penalty = PENALTY_P95_FACTOR_NUM as f64 / PENALTY_P95_FACTOR_DEN as f64;
    assert_eq!((deadline, penalty), (DEADLINE_FACTOR, PENALTY_P95_FACTOR));
    assert_eq!(deadline_for_p99(1850), 2220);
    assert_eq!(deadline_for_p99(1851), 2222); // 2221.2 rounds up
    assert_eq!(deadline_for_p99(u64::MAX), u64::MAX);
}

type Mutation = fn(&mut LatencyDisclosure);

/// Each case breaks one rule of the spec example and nothing else.
#[test]
fn each_rule_broken_once_gives_exactly_its_problem() {
    let cases: Vec<(Mutation, DisclosureRule, &str, String)> = vec![
        (
            |b| b.version = "2.0".into(),
            DisclosureRule::VersionMajor,
            "version",
            "version \"2.0\" has major 2; this reader knows major version 1 only".into(),
        ),
        (
            |b| b.version = "1".into(),
            DisclosureRule::VersionFormat,
            "version",
            "version \"1\" is not semver MAJOR.MINOR or MAJOR.MINOR.PATCH".into(),
        ),
        (
            |b| b.version = "1.01".into(),
            DisclosureRule::VersionFormat,
            "version",
            "version \"1.01\" is not semver MAJOR.MINOR or MAJOR.MINOR.PATCH".into(),
        ),
        (
            |b| b.observed_at = "2026-04-22".into(),
            DisclosureRule::ObservedAtFormat,
            "observed_at",
            "observed_at \"2026-04-22\" is not an ISO-8601 UTC datetime: expected 'T' at byte 10"
                .into(),
        ),
        (
            |b| b.observed_at = "2026-04-22T00:10:00Z".into(),
            DisclosureRule::ObservedAtFuture,
            "observed_at",
            "observed_at 2026-04-22T00:10:00Z is 10 min after now (2026-04-22T00:00:00Z), \
          beyond the 5 min of clock skew tolerated"
                .into(),
        ),
        (
            |b| b.observed_at = "2026-01-21T00:00:00Z".into(),
            DisclosureRule::Stale,
            "observed_at",
            "observed_at 2026-01-21T00:00:00Z is 91 days old at 2026-04-22T00:00:00Z, older \
          than the 90-day freshness ceiling; treat the disclosure as missing"
                .into(),
        ),
        (
            |b| b.measurement_window_days = 0,
            DisclosureRule::MeasurementWindow,
            "measurement_window_days",
            "measurement_window_days is 0; the window must span at least 1 day".into(),
        ),
        (
            |b| b.sample_size = 0,
            DisclosureRule::SampleSizeZero,
            "sample_size",
            "sample_size is 0; percentiles need at least one invocation".into(),
        ),
        (
            |b| b.sample_size = 999,
            DisclosureRule::P99NotBinding,
            "sample_size",
            "sample_size 999 is below 1000; p99_ms is not binding and yields no deadline".into(),
        ),
        (
            |b| b.p50_ms = 800,
            DisclosureRule::P50AboveP95,
            "p50_ms",
            "p50_ms 800 exceeds p95_ms 720".into(),
        ),
        (
            |b| b.p95_ms = 2000,
            DisclosureRule::P95AboveP99,
            "p95_ms",
            "p95_ms 2000 exceeds p99_ms 1850".into(),
        ),
        (
            |b| b.timeout_ms = 1800,
            DisclosureRule::P99AboveTimeout,
            "p99_ms",
            "p99_ms 1850 exceeds timeout_ms 1800".into(),
        ),
        (
            |b| b.timeout_ms = 2220,
            DisclosureRule::TimeoutHeadroom,
            "timeout_ms",
            "timeout_ms 2220 is not above p99_ms × 1.2 = 2220; the timeout sits within normal \
          variance"
                .into(),
        ),
        (
            |b| {
                b.p99_ms = 1851;
                b.timeout_ms = 2221
            },
            DisclosureRule::TimeoutHeadroom,
            "timeout_ms",
            "timeout_ms 2221 is not above p99_ms × 1.2 = 2221.2; the timeout sits within normal \
          variance"
                .into(),
        ),
        (
            |b| b.streaming = true,
            DisclosureRule::StreamingTtfbMissing,
            "time_to_first_byte_ms",
            "streaming is true but time_to_first_byte_ms is missing".into(),
        ),
        (
            |b| {
                b.streaming = true;
                b.time_to_first_byte_ms = Some(721)
            },
            DisclosureRule::TtfbAboveP95,
            "time_to_first_byte_ms",
            "time_to_first_byte_ms 721 exceeds p95_ms 720".into(),
        ),
        (
            |b| b.methodology_url = Some("example.com/m".into()),
            DisclosureRule::MethodologyUrl,
            "methodology_url",
            "methodology_url \"example.com/m\" is not an absolute URL (scheme://…)".into(),
        ),
        (
            |b| b.region = Some("x".repeat(DISCLOSURE_STRING_BYTES_MAX + 1)),
            DisclosureRule::FieldTooLong,
            "region",
            "region is 1025 bytes, at most 1024 allowed".into(),
        ),
        (
            |b| b.degradation_modes = (0..=DEGRADATION_MODES_MAX).map(mode).collect(),
            DisclosureRule::TooManyDegradationModes,
            "degradation_modes",
            "degradation_modes has 33 entries, at most 32 allowed".into(),
        ),
    ];
    for (mutate, rule, field, message) in cases {
        let mut block = spec_block();
        mutate(&mut block);
        let a = assess(&block, now());
        let want = vec![DisclosureProblem::new(rule, field, message)];
        assert_eq!(a.problems, want, "rule {rule:?}");
        assert_eq!(
            a.is_valid,
            rule.severity() == Severity::Warning,
            "rule {rule:?}"
        );
        // Only the headroom SHOULD leaves the block usable for a deadline.
        let keeps_deadline = rule == DisclosureRule::TimeoutHeadroom;
        assert_eq!(a.deadline_ms().is_some(), keeps_deadline, "rule {rule:?}");
    }
}

#[test]
fn rules_that_hold_at_their_edge_raise_nothing() {
    let edges: Vec<Mutation> = vec![
        |b| b.timeout_ms = 2221,
        |b| {
            b.p50_ms = 720;
            b.p95_ms = 1850;
            b.p99_ms = 1850
        },
        |b| {
            b.streaming = true;
            b.time_to_first_byte_ms = Some(720)
        },
        |b| b.sample_size = 1000,
        |b| b.version = "1.3.0".into(),
        |b| b.observed_at = "2026-04-22T00:05:00Z".into(),
        |b| b.degradation_modes = (0..DEGRADATION_MODES_MAX).map(mode).collect(),
        |b| b.region = Some("r".repeat(DISCLOSURE_STRING_BYTES_MAX)),
    ];
    for (i, mutate) in edges.into_iter().enumerate() {
        let mut block = spec_block();
        mutate(&mut block);
        assert_eq!(validate(&block, now()), vec![], "edge case {i}");
    }
}

#[test]
fn freshness_ends_after_ninety_days() {
    let block = spec_block();
    let at_days = |d: u64| assess(&block, now().plus_ms(d * DAY_MS));
    assert!(at_days(89).is_fresh);
    assert!(
        at_days(90).is_fresh,
        "exactly 90 days is not older than 90 days"
    );
    let stale = at_days(91);
    assert!(!stale.is_fresh && stale.is_valid && !stale.is_usable());
    assert_eq!(
        stale.freshness,
        Freshness::Stale {
            age_ms: 91 * DAY_MS
        }
    );
    assert_eq!(stale.deadline_ms(), None);
    let late = assess(&block, now().plus_ms(90 * DAY_MS + 1));
    assert_eq!(late.problems.len(), 1);
    assert_eq!(late.problems[0].rule, DisclosureRule::Stale);
}

#[test]
fn a_block_within_clock_skew_is_fresh_and_beyond_it_is_not() {
    let mut block = spec_block();
    block.observed_at = "2026-04-22T00:04:00Z".into();
    assert_eq!(
        assess(&block, now()).freshness,
        Freshness::Fresh { age_ms: 0 }
    );
    block.observed_at = "2026-04-22T01:00:00Z".into();
    let a = assess(&block, now());
    assert_eq!(
        a.freshness,
        Freshness::FromFuture {
            ahead_ms: 3_600_000
        }
    );
    assert!(!a.is_valid && !a.is_fresh);
}

#[test]
fn unrelated_broken_rules_are_all_listed_in_field_order() {
    let mut block = spec_block();
    block.version = "v1".into();
    block.p50_ms = 900;
    block.streaming = true;
    let rules: Vec<_> = validate(&block, now()).iter().map(|p| p.rule).collect();
    assert_eq!(
        rules,
        [
            DisclosureRule::VersionFormat,
            DisclosureRule::P50AboveP95,
            DisclosureRule::StreamingTtfbMissing
        ]
    );
}
