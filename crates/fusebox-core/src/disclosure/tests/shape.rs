//! Reading untrusted JSON: every shape problem named by field, the MCP
//! embedding, and the serde round trip.

use serde_json::{json, Value};

use super::{now, spec_block, spec_json};
use crate::disclosure::*;

#[test]
fn the_mcp_embedding_is_read_from_annotations() {
    let tool = json!({
        "name": "search_docs",
        "annotations": {
            "readOnlyHint": true,
            "latencyDisclosure": {
                "version": "1.0", "p50_ms": 180, "p95_ms": 720, "p99_ms": 1850,
                "timeout_ms": 30000, "idempotent": true, "retry_safe": true,
                "streaming": false, "observed_at": "2026-04-22T00:00:00Z",
                "measurement_window_days": 7, "sample_size": 12483
            }
        }
    });
    let block = LatencyDisclosure::from_mcp_annotations(&tool["annotations"])
        .expect("present")
        .expect("valid shape");
    assert_eq!(assess(&block, now()).deadline_ms(), Some(2220));
    assert!(LatencyDisclosure::from_mcp_annotations(&json!({"readOnlyHint": true})).is_none());
}

type JsonMutation = fn(&mut Value);

#[test]
fn shape_problems_name_each_field() {
    let cases: Vec<(JsonMutation, DisclosureRule, &str, &str)> = vec![
        (
            |v| {
                v.as_object_mut().map(|o| o.remove("p95_ms"));
            },
            DisclosureRule::FieldMissing,
            "p95_ms",
            "p95_ms is required but missing",
        ),
        (
            |v| v["idempotent"] = Value::Null,
            DisclosureRule::FieldMissing,
            "idempotent",
            "idempotent is required but null",
        ),
        (
            |v| v["p95_ms"] = json!("720"),
            DisclosureRule::FieldType,
            "p95_ms",
            "p95_ms must be a non-negative integer, got a string",
        ),
        (
            |v| v["p95_ms"] = json!(-5),
            DisclosureRule::FieldType,
            "p95_ms",
            "p95_ms must be a non-negative integer, got the number -5",
        ),
        (
            |v| v["p95_ms"] = json!(720.5),
            DisclosureRule::FieldType,
            "p95_ms",
            "p95_ms must be a non-negative integer, got the number 720.5",
        ),
        (
            |v| v["streaming"] = json!("false"),
            DisclosureRule::FieldType,
            "streaming",
            "streaming must be a boolean, got a string",
        ),
        (
            |v| v["region"] = json!(7),
            DisclosureRule::FieldType,
            "region",
            "region must be a string, got the number 7",
        ),
        (
            |v| v["cold_start_ms"] = json!(true),
            DisclosureRule::FieldType,
            "cold_start_ms",
            "cold_start_ms must be a non-negative integer, got a boolean",
        ),
        (
            |v| v["degradation_modes"] = json!({}),
            DisclosureRule::FieldType,
            "degradation_modes",
            "degradation_modes must be an array, got an object",
        ),
        (
            |v| v["degradation_modes"][0] = json!("queue"),
            DisclosureRule::FieldType,
            "degradation_modes[0]",
            "degradation_modes[0] must be an object, got a string",
        ),
        (
            |v| {
                v["degradation_modes"][1]
                    .as_object_mut()
                    .map(|o| o.remove("expected_p95_ms"));
            },
            DisclosureRule::FieldMissing,
            "degradation_modes[1].expected_p95_ms",
            "degradation_modes[1].expected_p95_ms is required but missing",
        ),
        (
            |v| v["degradation_modes"] = json!(vec![json!({}); 33]),
            DisclosureRule::TooManyDegradationModes,
            "degradation_modes",
            "degradation_modes has 33 entries, at most 32 allowed",
        ),
        (
            |v| v["methodology_url"] = json!("u".repeat(2000)),
            DisclosureRule::FieldTooLong,
            "methodology_url",
            "methodology_url is 2000 bytes, at most 1024 allowed",
        ),
        (
            |v| *v = json!([1, 2]),
            DisclosureRule::FieldType,
            "latency_disclosure",
            "latency_disclosure must be an object, got an array",
        ),
    ];
    for (mutate, rule, field, message) in cases {
        let mut value = spec_json();
        mutate(&mut value);
        let got = LatencyDisclosure::from_json(&value);
        assert_eq!(
            got,
            Err(vec![DisclosureProblem::new(rule, field, message)]),
            "{field}"
        );
    }
}

#[test]
fn every_shape_problem_is_reported_at_once() {
    let mut value = spec_json();
    value.as_object_mut().map(|o| o.remove("p50_ms"));
    value["sample_size"] = json!("many");
    value["unknown_future_field"] = json!(1);
    let fields: Vec<_> = LatencyDisclosure::from_json(&value)
        .expect_err("two problems")
        .into_iter()
        .map(|p| p.field)
        .collect();
    assert_eq!(fields, ["sample_size", "p50_ms"]);
}

#[test]
fn the_block_round_trips_through_json() {
    let block = spec_block();
    assert_eq!(
        LatencyDisclosure::from_json(&block.to_json()),
        Ok(block.clone())
    );
    let text = serde_json::to_string(&block).expect("encode");
    assert!(text.contains("\"time_to_first_byte_ms\":null"));
    let back: LatencyDisclosure = serde_json::from_str(&text).expect("decode");
    assert_eq!(back, block);
}
