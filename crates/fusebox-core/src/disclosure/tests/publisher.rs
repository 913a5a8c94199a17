//! The publisher's and the observer's side: the routing penalty and the
//! emitted block.

use proptest::prelude::*;
use serde_json::Value;

use super::{now, sketch_of, spec_block};
use crate::disclosure::*;

#[test]
fn a_tool_running_over_half_again_its_disclosed_p95_is_penalized() {
    let block = spec_block(); // p95 720, so the threshold is 1080
    let slow = sketch_of((0..200).map(|i| if i < 180 { 500 } else { 1200 }));
    let seen = ObservedLatency::compare(&block, &slow);
    assert_eq!(seen.penalty_threshold_p95_ms, 1080);
    assert_eq!(seen.observed_p95_ms, Some(1200));
    assert!(seen.penalized, "{seen:?}");
    let few = sketch_of((0..PENALTY_SAMPLES_MIN - 1).map(|_| 5000));
    assert!(
        !ObservedLatency::compare(&block, &few).penalized,
        "too few samples"
    );
    let at_threshold = sketch_of((0..500).map(|_| 1080));
    let seen = ObservedLatency::compare(&block, &at_threshold);
    assert_eq!(seen.observed_p95_ms, Some(1080));
    assert!(
        !seen.penalized,
        "exactly 1.5 × p95 is not more than 50% above"
    );
    let just_over = sketch_of((0..500).map(|_| 1081));
    assert!(ObservedLatency::compare(&block, &just_over).penalized);
}

fn facts() -> PublisherFacts {
    PublisherFacts {
        idempotent: true,
        retry_safe: true,
        methodology_url: Some("https://example.com/latency-methodology".into()),
        ..PublisherFacts::default()
    }
}

#[test]
fn an_emitted_block_passes_assessment_and_round_trips() {
    let observed = sketch_of((0..5000u64).map(|i| 100 + (i * 7919) % 900));
    let block = emit_disclosure(&observed, 7, now(), 1_000, &facts()).expect("emits");
    assert_eq!(
        (block.version.as_str(), block.observed_at.as_str()),
        ("1.0", "2026-04-22T00:00:00Z")
    );
    assert_eq!(block.sample_size, 5000);
    assert!(block.p50_ms <= block.p95_ms && block.p95_ms <= block.p99_ms);
    assert_eq!(
        block.timeout_ms,
        deadline_for_p99(block.p99_ms) + 1,
        "raised from 1000"
    );
    let a = assess(&block, now());
    assert_eq!(a.problems, vec![]);
    assert_eq!(a.deadline_ms(), Some(deadline_for_p99(block.p99_ms)));
    let text = serde_json::to_string(&block).expect("encode");
    let value: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(LatencyDisclosure::from_json(&value), Ok(block));
}

#[test]
fn a_generous_timeout_is_kept() {
    let observed = sketch_of(0..2000);
    let block = emit_disclosure(&observed, 30, now(), 60_000, &facts()).expect("emits");
    assert_eq!(block.timeout_ms, 60_000);
}

#[test]
fn emit_refuses_what_assess_would_reject() {
    let observed = sketch_of(0..2000);
    let empty = emit_disclosure(&LatencySketch::new(), 7, now(), 1, &facts());
    assert!(empty.is_err_and(|e| e.to_string().contains("no latency observed")));
    let streaming = PublisherFacts {
        streaming: true,
        ..facts()
    };
    let err = emit_disclosure(&observed, 7, now(), 60_000, &streaming).expect_err("no ttfb");
    assert_eq!(
        err.to_string(),
        "invalid latency_disclosure: streaming is true but time_to_first_byte_ms is missing"
    );
    let zero_window = emit_disclosure(&observed, 0, now(), 60_000, &facts());
    assert!(zero_window.is_err());
    let streaming = PublisherFacts {
        streaming: true,
        time_to_first_byte_ms: Some(300),
        ..facts()
    };
    assert!(emit_disclosure(&observed, 7, now(), 60_000, &streaming).is_ok());
}

#[test]
fn a_small_sample_emits_a_valid_block_with_a_non_binding_p99() {
    let block = emit_disclosure(&sketch_of([40, 50, 60]), 7, now(), 0, &facts()).expect("emits");
    let a = assess(&block, now());
    assert!(a.is_valid && !a.binding_p99);
    assert_eq!(
        a.problems.iter().map(|p| p.rule).collect::<Vec<_>>(),
        [DisclosureRule::P99NotBinding]
    );
    assert_eq!(a.deadline_ms(), None);
}

proptest! {
    #[test]
    fn any_sample_set_emits_a_valid_monotone_block(
        samples in prop::collection::vec(0u64..10_000_000, 1..3000),
        timeout_ms in 0u64..100_000_000,
    ) {
        let block = emit_disclosure(&sketch_of(samples.iter().copied()), 7, now(), timeout_ms, &facts());
        let block = block.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(block.p50_ms <= block.p95_ms && block.p95_ms <= block.p99_ms);
        prop_assert_eq!(block.sample_size, samples.len() as u64);
        let a = assess(&block, now());
        prop_assert!(a.is_valid, "{:?}", a.problems);
        let warnings: Vec<_> = a.warnings().map(|p| p.rule).collect();
        let expected = if samples.len() >= 1000 { vec![] } else { vec![DisclosureRule::P99NotBinding] };
        prop_assert_eq!(warnings, expected);
        prop_assert_eq!(LatencyDisclosure::from_json(&block.to_json()), Ok(block));
    }
}
