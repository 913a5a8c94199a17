//! Tests of the policy document: parsing, precedence, every validation rule,
//! the shipped examples, canonical rendering and diffs. No IO: the examples
//! are compiled in.

use crate::error::CoreError;
use crate::limits::{POLICY_DOCUMENT_BYTES_MAX, POLICY_OVERRIDES_MAX};
use crate::name::{ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::policy::document::{LedgerSettings, ServerOverrides};
use crate::policy::*;
use proptest::prelude::*;

const RUNBOOK_TOML: &str = include_str!("../../../../../examples/policies/deployment_runbook.toml");
const RUNBOOK_YAML: &str = include_str!("../../../../../examples/policies/deployment_runbook.yaml");
const TAX_LOOKUP_TOML: &str = include_str!("../../../../../examples/policies/tax_lookup.toml");
const INVALID_TOML: &str = include_str!("../../../../../examples/policies/invalid.toml");

fn server(name: &str) -> ServerName {
    ServerName::new(name).expect("valid server name")
}

fn tool(name: &str) -> ToolName {
    ToolName::new(name).expect("valid tool name")
}

fn parse(text: &str) -> PolicyDocument {
    match PolicyDocument::parse(text, PolicyFormat::Toml) {
        Ok(document) => document,
        Err(e) => panic!("document should be valid: {e}"),
    }
}

fn problems_of(text: &str, format: PolicyFormat) -> Vec<PolicyProblem> {
    match PolicyDocument::parse(text, format) {
        Err(CoreError::InvalidPolicy(problems)) => problems,
        other => panic!("expected a refused policy, got {other:?}"),
    }
}

fn fields(problems: &[PolicyProblem]) -> Vec<&str> {
    problems.iter().map(|p| p.field.as_str()).collect()
}

#[test]
fn an_empty_document_resolves_to_the_built_in_defaults() {
    for text in ["", "# nothing yet\n"] {
        let document = parse(text);
        assert_eq!(document, PolicyDocument::default());
        assert_eq!(
            document.tool_policy(&server("s"), &tool("t")),
            ToolPolicy::default()
        );
        assert_eq!(
            document.server_breaker(&server("s")),
            BreakerPolicy::default()
        );
        assert_eq!(document.ledger_retention_ms(), 86_400_000);
    }
    let yaml = PolicyDocument::parse("# empty\n", PolicyFormat::Yaml).expect("empty yaml");
    assert_eq!(yaml, PolicyDocument::default());
}

const LAYERED: &str = r#"
[defaults]
timeout_ms = 2000
effect = "expensive_read"
on_partition = "fail_closed"
[defaults.retry]
max_attempts = 2
backoff_initial_ms = 100
[defaults.breaker]
consecutive_failures = 5
probe_successes = 2
min_reporters = 3

[servers.tax]
timeout_ms = 5000
shadow = true
[servers.tax.retry]
backoff_max_ms = 900
[servers.tax.breaker]
open_ms = 10000
probe_successes = 4

[servers.tax.tools.lookup]
timeout_ms = 10000
scope = "tool_and_backend"
[servers.tax.tools.lookup.breaker]
concurrent_probes = 2
"#;

#[test]
fn the_tool_layer_wins_then_the_server_then_the_defaults_field_by_field() {
    let document = parse(LAYERED);
    let lookup = document.tool_policy(&server("tax"), &tool("lookup"));
    assert_eq!(lookup.timeout_ms, 10_000);
    assert_eq!(lookup.effect, EffectClass::ExpensiveRead);
    assert_eq!(lookup.scope, Scope::ToolAndBackend);
    assert_eq!(lookup.on_partition, OnPartition::FailClosed);
    let retry = RetryPolicy {
        max_attempts: 2,
        backoff_initial_ms: 100,
        backoff_max_ms: 900,
        ..RetryPolicy::default()
    };
    assert_eq!(lookup.retry, retry);
    let breaker = BreakerPolicy {
        trip: Trip::ConsecutiveFailures { failures: 5 },
        min_reporters: 3,
        open: OpenBackoff {
            open_ms: 10_000,
            multiplier: 1,
            open_ms_max: 30_000,
        },
        concurrent_probes: 2,
        probe_successes: 4,
        shadow: true,
        ..BreakerPolicy::default()
    };
    assert_eq!(lookup.breaker, breaker);
}

#[test]
fn siblings_and_other_servers_do_not_inherit_a_tool_layer() {
    let document = parse(LAYERED);
    let sibling = document.tool_policy(&server("tax"), &tool("rates"));
    assert_eq!(sibling.timeout_ms, 5_000);
    assert_eq!(sibling.scope, Scope::Tool);
    assert_eq!(sibling.breaker.concurrent_probes, 1);
    assert!(sibling.breaker.shadow);
    let elsewhere = document.tool_policy(&server("geo"), &tool("geocode"));
    assert_eq!(elsewhere.timeout_ms, 2_000);
    assert_eq!(elsewhere.breaker.probe_successes, 2);
    assert_eq!(elsewhere.retry.backoff_max_ms, 1_500);
    assert!(!elsewhere.breaker.shadow);
}

#[test]
fn the_server_breaker_uses_the_server_and_defaults_layers_only() {
    let document = parse(LAYERED);
    let breaker = document.server_breaker(&server("tax"));
    assert_eq!(breaker.probe_successes, 4);
    assert_eq!(breaker.open.open_ms, 10_000);
    assert_eq!(breaker.concurrent_probes, 1);
    assert_eq!(breaker.min_reporters, 3);
    assert!(breaker.shadow);
    assert!(!document.server_breaker(&server("geo")).shadow);
}

#[test]
fn the_most_specific_trip_kind_wins_and_window_fields_resolve_one_by_one() {
    let document = parse(
        r#"
        [defaults.breaker]
        window_ms = 30000
        failure_ratio = 0.3
        [servers.tax.breaker]
        consecutive_failures = 6
        [servers.tax.tools.lookup.breaker]
        minimum_calls = 10
        "#,
    );
    let window = |minimum_calls| {
        Trip::SlidingWindow(WindowPolicy {
            window_ms: 30_000,
            minimum_calls,
            failure_ratio: 0.3,
            ..WindowPolicy::default()
        })
    };
    let trip = |s: &str, t: &str| document.tool_policy(&server(s), &tool(t)).breaker.trip;
    assert_eq!(trip("tax", "lookup"), window(10));
    assert_eq!(
        trip("tax", "rates"),
        Trip::ConsecutiveFailures { failures: 6 }
    );
    assert_eq!(trip("geo", "geocode"), window(20));
}

#[test]
fn a_non_idempotent_write_gets_one_attempt_unless_told_otherwise() {
    let document = parse(
        r#"
        [servers.deploy.tools.restart]
        effect = "non_idempotent_write"
        "#,
    );
    let restart = document.tool_policy(&server("deploy"), &tool("restart"));
    assert_eq!(restart.retry.max_attempts, 1);
    assert!(!restart.may_retry());
    let read = document.tool_policy(&server("deploy"), &tool("status"));
    assert_eq!(read.retry.max_attempts, 3);
}

#[test]
fn an_unset_cap_follows_what_it_caps() {
    let document = parse(
        r#"
        [defaults.breaker]
        open_ms = 60000
        [defaults.retry]
        backoff_initial_ms = 2000
        "#,
    );
    let policy = document.tool_policy(&server("s"), &tool("t"));
    assert_eq!(policy.breaker.open.open_ms_max, 60_000);
    assert_eq!(policy.retry.backoff_max_ms, 2_000);
}

#[test]
fn shadow_maps_into_the_breaker_policy() {
    let document = parse("[servers.tax.tools.lookup]\nshadow = true\n");
    assert!(
        document
            .tool_policy(&server("tax"), &tool("lookup"))
            .breaker
            .shadow
    );
    assert!(!document.server_breaker(&server("tax")).shadow);
}

/// One document per rule, each breaking exactly that rule once.
const BROKEN_ONCE: &[(&str, &str)] = &[
    ("[defaults]\ntimeout_ms = 0", "defaults.timeout_ms"),
    (
        "[servers.tax.tools.lookup]\ntimeout_ms = 600001",
        "servers.tax.tools.lookup.timeout_ms",
    ),
    (
        "[servers.tax.breaker]\nslow_call_ms = 0",
        "servers.tax.breaker.slow_call_ms",
    ),
    (
        "[defaults.breaker]\nfailure_ratio = 0.0",
        "defaults.breaker.failure_ratio",
    ),
    (
        "[defaults.breaker]\nslow_call_ratio = nan",
        "defaults.breaker.slow_call_ratio",
    ),
    (
        "[defaults.breaker]\nminimum_calls = 0",
        "defaults.breaker.minimum_calls",
    ),
    (
        "[defaults.breaker]\nwindow_ms = 999",
        "defaults.breaker.window_ms",
    ),
    (
        "[defaults.breaker]\nwindow_ms = 3600001",
        "defaults.breaker.window_ms",
    ),
    (
        "[defaults.breaker]\nconsecutive_failures = 0",
        "defaults.breaker.consecutive_failures",
    ),
    (
        "[defaults.breaker]\nconsecutive_failures = 1001",
        "defaults.breaker.consecutive_failures",
    ),
    (
        "[defaults.breaker]\nmin_reporters = 0",
        "defaults.breaker.min_reporters",
    ),
    (
        "[defaults.breaker]\nmin_reporters = 65",
        "defaults.breaker.min_reporters",
    ),
    (
        "[defaults.breaker]\nconcurrent_probes = 0",
        "defaults.breaker.concurrent_probes",
    ),
    (
        "[defaults.breaker]\nprobe_successes = 1001",
        "defaults.breaker.probe_successes",
    ),
    (
        "[defaults.breaker]\nprobe_lease_ms = 0",
        "defaults.breaker.probe_lease_ms",
    ),
    (
        "[defaults.breaker]\nprobe_lease_ms = 600001",
        "defaults.breaker.probe_lease_ms",
    ),
    (
        "[defaults.breaker]\nopen_ms = 0",
        "defaults.breaker.open_ms",
    ),
    (
        "[defaults.breaker]\nopen_ms = 86400001",
        "defaults.breaker.open_ms",
    ),
    (
        "[defaults.breaker]\nopen_backoff_multiplier = 0",
        "defaults.breaker.open_backoff_multiplier",
    ),
    (
        "[defaults.breaker]\nopen_backoff_multiplier = 17",
        "defaults.breaker.open_backoff_multiplier",
    ),
    (
        "[defaults.breaker]\nopen_ms = 5000\nopen_ms_max = 4000",
        "defaults.breaker.open_ms_max",
    ),
    (
        "[defaults.breaker]\nopen_ms_max = 40000\n[servers.s.tools.t.breaker]\nopen_ms = 50000",
        "servers.s.tools.t.breaker.open_ms_max",
    ),
    (
        "[defaults.breaker]\nconsecutive_failures = 4\nwindow_ms = 60000",
        "defaults.breaker.consecutive_failures",
    ),
    (
        "[defaults.retry]\nmax_attempts = 0",
        "defaults.retry.max_attempts",
    ),
    (
        "[defaults.retry]\nmax_attempts = 11",
        "defaults.retry.max_attempts",
    ),
    (
        "[defaults.retry]\nbackoff_max_ms = 600001",
        "defaults.retry.backoff_max_ms",
    ),
    (
        "[defaults.retry]\nbackoff_initial_ms = 2000\nbackoff_max_ms = 1000",
        "defaults.retry.backoff_max_ms",
    ),
    (
        "[defaults.retry]\nretry_on = [\"invalid_arguments\"]",
        "defaults.retry.retry_on",
    ),
    (
        "[defaults.retry]\nretry_on = [\"policy_denied\"]",
        "defaults.retry.retry_on",
    ),
    (
        "[defaults.retry]\nretry_on = [\"cancelled\"]",
        "defaults.retry.retry_on",
    ),
    (
        "[defaults.retry]\nretry_on = [\"transport\", \"transport\"]",
        "defaults.retry.retry_on",
    ),
    (
        "[servers.deploy.tools.restart]\neffect = \"non_idempotent_write\"\n\
         [servers.deploy.tools.restart.retry]\nmax_attempts = 2",
        "servers.deploy.tools.restart.retry.max_attempts",
    ),
    (
        "[defaults.retry]\nmax_attempts = 3\n\
         [servers.deploy.tools.restart]\neffect = \"non_idempotent_write\"",
        "servers.deploy.tools.restart.retry.max_attempts",
    ),
    ("[ledger]\nretention_ms = 59999", "ledger.retention_ms"),
    ("[ledger]\nretention_ms = 2592000001", "ledger.retention_ms"),
    ("[latency]\nwindow_ms = 4990", "latency.window_ms"),
    ("[latency]\nwindow_ms = 86400010", "latency.window_ms"),
    ("[latency]\nwindow_ms = 10005", "latency.window_ms"),
    (
        "[servers.\"api.prod:443\"]\ntimeout_ms = 0",
        "servers.\"api.prod:443\".timeout_ms",
    ),
];

#[test]
fn every_rule_broken_once_is_reported_once_at_its_field() {
    for (text, field) in BROKEN_ONCE {
        let problems = problems_of(text, PolicyFormat::Toml);
        assert_eq!(fields(&problems), vec![*field], "document:\n{text}");
    }
}

#[test]
fn rules_say_what_was_expected_and_what_was_found() {
    let text = "[servers.tax.tools.lookup.breaker]\nfailure_ratio = 1.5";
    let problems = problems_of(text, PolicyFormat::Toml);
    assert_eq!(
        problems,
        vec![PolicyProblem {
            field: "servers.tax.tools.lookup.breaker.failure_ratio".into(),
            rule: "must be between 0 (exclusive) and 1 (inclusive), got 1.5".into(),
        }]
    );
    let text = "[d.retry]\nmax_attempts = 3\n[d]\neffect = \"non_idempotent_write\"";
    let text = text.replace("[d", "[defaults");
    let rule = &problems_of(&text, PolicyFormat::Toml)[0].rule;
    assert!(rule.starts_with(
        "non-idempotent writes are never retried automatically; set max_attempts = 1"
    ));
}

#[test]
fn too_many_override_sections_is_a_problem() {
    let mut overrides = ServerOverrides::default();
    for i in 0..POLICY_OVERRIDES_MAX - 1 {
        overrides
            .tools
            .insert(tool(&format!("t{i}")), ToolOverrides::default());
    }
    let mut document = PolicyDocument::default();
    document.servers.insert(server("s"), overrides);
    assert!(document.validate().is_empty());
    let overrides = document.servers.get_mut(&server("s")).expect("server s");
    overrides
        .tools
        .insert(tool("one_too_many"), ToolOverrides::default());
    assert_eq!(fields(&document.validate()), vec!["servers"]);
}

#[test]
fn an_oversized_document_is_refused_before_parsing() {
    let text = format!("# {}\n", "x".repeat(POLICY_DOCUMENT_BYTES_MAX));
    assert_eq!(
        fields(&problems_of(&text, PolicyFormat::Toml)),
        vec!["document"]
    );
}

#[test]
fn unknown_fields_are_refused_with_their_path() {
    let cases = [
        (
            "[servers.tax.tools.lookup]\ntimeot_ms = 5",
            "servers.tax.tools.lookup.timeot_ms",
        ),
        (
            "[defaults.breaker]\nfailure_ration = 0.5",
            "defaults.breaker.failure_ration",
        ),
        ("[ledgr]\nretention_ms = 60000", "ledgr"),
        ("[servers.tax]\ntols = 1", "servers.tax.tols"),
    ];
    for (text, field) in cases {
        let problems = problems_of(text, PolicyFormat::Toml);
        assert_eq!(fields(&problems), vec![field], "document:\n{text}");
        assert!(problems[0].rule.contains("unknown field"), "{problems:?}");
    }
    let yaml = "servers:\n  tax:\n    tools:\n      lookup:\n        timeot_ms: 5\n";
    let problems = problems_of(yaml, PolicyFormat::Yaml);
    assert_eq!(
        fields(&problems),
        vec!["servers.tax.tools.lookup.timeot_ms"]
    );
}

#[test]
fn in_flight_on_open_defaults_to_finish_and_is_inherited_like_any_setting() {
    let document = parse(
        r#"
[servers.tax]
in_flight_on_open = "end"

[servers.tax.tools.file_return]
in_flight_on_open = "finish"
"#,
    );
    let on_open = |s: &str, t: &str| document.tool_policy(&server(s), &tool(t)).in_flight_on_open;
    assert_eq!(on_open("crm", "get_deal"), InFlightOnOpen::Finish);
    assert_eq!(on_open("tax", "lookup"), InFlightOnOpen::End);
    assert_eq!(on_open("tax", "file_return"), InFlightOnOpen::Finish);
    let problems = problems_of(
        "[defaults]
in_flight_on_open = \"abort\"",
        PolicyFormat::Toml,
    );
    assert_eq!(fields(&problems), vec!["defaults.in_flight_on_open"]);
}

#[test]
fn stalled_after_ms_is_unset_by_default_inherited_and_bounded() {
    let document = parse(
        r#"
[defaults]
stalled_after_ms = 5000

[servers.tax]
stalled_after_ms = 3000

[servers.tax.tools.file_return]
timeout_ms = 60000
"#,
    );
    let stalled = |s: &str, t: &str| document.tool_policy(&server(s), &tool(t)).stalled_after_ms;
    assert_eq!(stalled("crm", "get_deal"), Some(5_000));
    assert_eq!(stalled("tax", "lookup"), Some(3_000));
    assert_eq!(stalled("tax", "file_return"), Some(3_000));
    assert_eq!(
        parse("")
            .tool_policy(&server("crm"), &tool("get_deal"))
            .stalled_after_ms,
        None
    );
    for bad in ["0", "999999999"] {
        let problems = problems_of(
            &format!("[servers.tax.tools.lookup]\nstalled_after_ms = {bad}"),
            PolicyFormat::Toml,
        );
        assert_eq!(
            fields(&problems),
            vec!["servers.tax.tools.lookup.stalled_after_ms"],
            "{bad}"
        );
    }
}

#[test]
fn unreadable_documents_are_one_problem_naming_the_field_or_line() {
    let cases = [
        ("[defaults]\ntimeout_ms = \"fast\"", "defaults.timeout_ms"),
        ("[defaults]\neffect = \"write\"", "defaults.effect"),
        (
            "[defaults.retry]\nretry_on = [\"backend_503\"]",
            "defaults.retry.retry_on",
        ),
        (
            "[defaults.breaker]\nopen_ms = -1",
            "defaults.breaker.open_ms",
        ),
    ];
    for (text, field) in cases {
        let problems = problems_of(text, PolicyFormat::Toml);
        assert_eq!(
            fields(&problems),
            vec![field],
            "document:\n{text}\n{problems:?}"
        );
    }
    let problems = problems_of("[defaults\ntimeout_ms = 1", PolicyFormat::Toml);
    assert_eq!(problems.len(), 1);
    assert!(problems[0].rule.contains("line 1"), "{problems:?}");
    let problems = problems_of("[servers.\"a/b\"]\ntimeout_ms = 1", PolicyFormat::Toml);
    assert_eq!(problems.len(), 1);
    assert!(problems[0].rule.contains("not allowed"), "{problems:?}");
    assert_eq!(problems_of("defaults: [1", PolicyFormat::Yaml).len(), 1);
}

#[test]
fn the_runbook_example_resolves_as_the_runbook_says() {
    let document = parse(RUNBOOK_TOML);
    let deployments = server("deployments");
    let read = document.tool_policy(&deployments, &tool("get_deployment_job"));
    assert_eq!(read.timeout_ms, 10_000);
    assert_eq!(read.effect, EffectClass::ReadOnly);
    assert_eq!(read.scope, Scope::ToolAndBackend);
    assert_eq!(read.retry, RetryPolicy::default());
    let window = WindowPolicy {
        window_ms: 60_000,
        minimum_calls: 20,
        failure_ratio: 0.5,
        slow_call_ms: Some(7_000),
        slow_call_ratio: 0.7,
    };
    assert_eq!(read.breaker.trip, Trip::SlidingWindow(window));
    assert_eq!(read.breaker.open.duration_ms(3), 30_000);
    assert_eq!(
        (read.breaker.concurrent_probes, read.breaker.probe_successes),
        (1, 3)
    );
    let write = document.tool_policy(&deployments, &tool("restart_deployment_job"));
    assert_eq!(write.effect, EffectClass::NonIdempotentWrite);
    assert_eq!(write.retry.max_attempts, 1);
    assert!(!write.may_retry());
}

#[test]
fn the_yaml_runbook_equals_the_toml_runbook() {
    let yaml = PolicyDocument::parse(RUNBOOK_YAML, PolicyFormat::Yaml).expect("valid yaml");
    assert_eq!(yaml, parse(RUNBOOK_TOML));
    assert_eq!(yaml.to_toml(), parse(RUNBOOK_TOML).to_toml());
}

#[test]
fn the_tax_lookup_example_sizes_each_deadline() {
    let document = parse(TAX_LOOKUP_TOML);
    let timeout = |s: &str, t: &str| document.tool_policy(&server(s), &tool(t)).timeout_ms;
    assert_eq!(timeout("tax-vendor", "tax_lookup"), 10_000);
    assert_eq!(timeout("geocoder", "geocode"), 5_000);
    assert_eq!(timeout("accounts", "get_account"), 3_000);
    let geocode = document.tool_policy(&server("geocoder"), &tool("geocode"));
    assert_eq!(
        geocode.classify.success,
        vec!["address not found".to_owned()]
    );
    assert_eq!(
        geocode.classify.judge("Over Capacity, retry later", false),
        Some(crate::policy::Verdict::Failure)
    );
    let lookup = document.tool_policy(&server("tax-vendor"), &tool("tax_lookup"));
    assert!(
        lookup.classify.is_empty(),
        "another server's patterns do not apply"
    );
    let breaker = document.server_breaker(&server("tax-vendor"));
    assert_eq!(breaker.trip, Trip::ConsecutiveFailures { failures: 4 });
    assert_eq!(breaker.open.duration_ms(0), 20_000);
    let declared: Vec<(ServerName, ToolName)> = document.tools_declared().collect();
    assert_eq!(
        declared,
        vec![
            (server("geocoder"), tool("geocode")),
            (server("tax-vendor"), tool("tax_lookup")),
        ]
    );
}

#[test]
fn the_invalid_example_lists_every_problem() {
    let problems = problems_of(INVALID_TOML, PolicyFormat::Toml);
    let mut got = fields(&problems);
    got.sort_unstable();
    let expected = [
        "defaults.breaker.failure_ratio",
        "defaults.timeout_ms",
        "ledger.retention_ms",
        "servers.payments.breaker.consecutive_failures",
        "servers.payments.tools.refund.breaker.open_ms_max",
        "servers.payments.tools.refund.retry.max_attempts",
        "servers.payments.tools.refund.retry.retry_on",
    ];
    assert_eq!(got, expected, "{problems:#?}");
    assert_eq!(INVALID_TOML.matches("# BROKEN").count(), expected.len());
}

#[test]
fn a_diff_lists_changed_fields_in_path_order() {
    let before = parse(RUNBOOK_TOML);
    let mut after = before.clone();
    let deployments = after
        .servers
        .get_mut(&server("deployments"))
        .expect("server");
    let read = deployments
        .tools
        .get_mut(&tool("get_deployment_job"))
        .expect("tool");
    read.timeout_ms = Some(8_000);
    read.retry.retry_on = Some(vec![OutcomeClass::Transport]);
    deployments.tools.remove(&tool("restart_deployment_job"));
    after.ledger = LedgerSettings {
        retention_ms: Some(3_600_000),
    };
    after
        .servers
        .insert(server("tax"), ServerOverrides::default());
    let restart = "servers.deployments.tools.restart_deployment_job";
    let read = "servers.deployments.tools.get_deployment_job";
    assert_eq!(
        before.diff(&after),
        vec![
            "ledger.retention_ms: (unset) -> 3600000".to_string(),
            format!(
                "{read}.retry.retry_on: [\"transport\", \"rate_limited\", \"server_error\"] -> [\"transport\"]"
            ),
            format!("{read}.timeout_ms: (unset) -> 8000"),
            format!("{restart}.effect: \"non_idempotent_write\" -> (unset)"),
            format!("{restart}.retry.max_attempts: 1 -> (unset)"),
            format!("{restart}.scope: \"tool_and_backend\" -> (unset)"),
            "servers.tax: (unset) -> {}".to_string(),
        ]
    );
    assert!(before.diff(&before).is_empty());
}

#[test]
fn the_canonical_rendering_parses_back_to_the_same_document() {
    for text in [RUNBOOK_TOML, TAX_LOOKUP_TOML, LAYERED] {
        let document = parse(text);
        let rendered = document.to_toml();
        assert_eq!(parse(&rendered), document, "rendered:\n{rendered}");
        assert_eq!(parse(&rendered).to_toml(), rendered);
    }
}

#[test]
fn a_document_survives_compact_and_json_encodings() {
    // Log entries and snapshots use postcard, which cannot skip unset fields:
    // the document must still decode to itself there, and in JSON too.
    let document = parse(RUNBOOK_TOML);
    let bytes = postcard::to_allocvec(&document).expect("postcard encodes");
    let back: PolicyDocument = postcard::from_bytes(&bytes).expect("postcard decodes");
    assert_eq!(back, document);
    let json = serde_json::to_string(&document).expect("json encodes");
    assert!(!json.contains("null"), "unset fields are left out: {json}");
    let back: PolicyDocument = serde_json::from_str(&json).expect("json decodes");
    assert_eq!(back, document);
}

#[test]
fn formats_come_from_file_extensions() {
    assert_eq!(
        PolicyFormat::from_path_extension("toml"),
        Some(PolicyFormat::Toml)
    );
    assert_eq!(
        PolicyFormat::from_path_extension(".YML"),
        Some(PolicyFormat::Yaml)
    );
    assert_eq!(
        PolicyFormat::from_path_extension("policies/prod.yaml"),
        Some(PolicyFormat::Yaml)
    );
    assert_eq!(PolicyFormat::from_path_extension("policy.json"), None);
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_.-]{0,8}"
}

fn layer() -> impl Strategy<Value = ToolOverrides> {
    (
        proptest::option::of(1u64..=600_000),
        proptest::option::of(prop_oneof![
            Just(EffectClass::ReadOnly),
            Just(EffectClass::IdempotentWrite),
        ]),
        proptest::option::of(any::<bool>()),
        proptest::option::of(1u32..=10),
        proptest::option::of(1u32..=1000),
        proptest::option::of(0.001f64..=1.0),
    )
        .prop_map(|(timeout_ms, effect, shadow, attempts, failures, ratio)| {
            let mut layer = ToolOverrides {
                timeout_ms,
                effect,
                shadow,
                ..ToolOverrides::default()
            };
            layer.retry.max_attempts = attempts;
            layer.breaker.consecutive_failures = failures;
            layer.breaker.slow_call_ratio = ratio.filter(|_| failures.is_none());
            layer
        })
}

fn document() -> impl Strategy<Value = PolicyDocument> {
    let tools = proptest::collection::btree_map(name(), layer(), 0..3);
    let servers = proptest::collection::btree_map(name(), (layer(), tools), 0..3);
    (layer(), servers).prop_map(|(defaults, servers)| {
        let mut document = PolicyDocument {
            defaults,
            ..PolicyDocument::default()
        };
        for (s, (settings, tools)) in servers {
            let mut overrides = ServerOverrides {
                timeout_ms: settings.timeout_ms,
                shadow: settings.shadow,
                breaker: settings.breaker,
                ..ServerOverrides::default()
            };
            for (t, layer) in tools {
                overrides.tools.insert(tool(&t), layer);
            }
            document.servers.insert(server(&s), overrides);
        }
        document
    })
}

proptest! {
    #[test]
    fn any_valid_document_round_trips_and_diffs_empty_only_against_itself(
        a in document(),
        b in document(),
    ) {
        prop_assert_eq!(a.validate(), vec![]);
        let back = PolicyDocument::parse(&a.to_toml(), PolicyFormat::Toml);
        prop_assert_eq!(back.as_ref(), Ok(&a));
        prop_assert_eq!(a.diff(&b).is_empty(), a == b);
    }
}
