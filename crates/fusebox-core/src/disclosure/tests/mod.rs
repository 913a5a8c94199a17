//! Scenario tests of the disclosure module as a whole: the spec's own
//! example, every rule broken exactly once, freshness, deadlines, the
//! penalty rule and the emitted block. Shared fixtures live here.

mod publisher;
mod rules;
mod shape;

use serde_json::{json, Value};

use super::*;
use crate::time::Timestamp;

/// The spec's `observed_at`, 2026-04-22T00:00:00Z.
pub(super) const OBSERVED_MS: u64 = 1_776_816_000_000;

pub(super) fn now() -> Timestamp {
    Timestamp::from_millis(OBSERVED_MS)
}

/// The block of the spec's section 3, as JSON.
pub(super) fn spec_json() -> Value {
    json!({
        "version": "1.0",
        "observed_at": "2026-04-22T00:00:00Z",
        "measurement_window_days": 7,
        "sample_size": 12483,
        "region": "us-east-1",
        "p50_ms": 180,
        "p95_ms": 720,
        "p99_ms": 1850,
        "cold_start_ms": 1200,
        "timeout_ms": 30000,
        "idempotent": true,
        "retry_safe": true,
        "streaming": false,
        "time_to_first_byte_ms": null,
        "degradation_modes": [
            {"trigger": "queue_depth>50", "behavior": "queue and serve", "expected_p95_ms": 4500},
            {"trigger": "downstream_dependency_unavailable", "behavior": "fail fast with 503",
             "expected_p95_ms": 200}
        ],
        "methodology_url": "https://example.com/latency-methodology"
    })
}

pub(super) fn spec_block() -> LatencyDisclosure {
    LatencyDisclosure::from_json(&spec_json()).expect("the spec's example parses")
}

pub(super) fn mode(i: usize) -> DegradationMode {
    DegradationMode {
        trigger: format!("queue_depth>{i}"),
        behavior: "queue and serve".to_string(),
        expected_p95_ms: 4500,
    }
}

pub(super) fn sketch_of(values: impl IntoIterator<Item = u64>) -> LatencySketch {
    let mut sketch = LatencySketch::new();
    values.into_iter().for_each(|v| sketch.add(v));
    sketch
}
