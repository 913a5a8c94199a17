//! The tools registry inside the state machine: imports judged and stored,
//! effect classes derived, bounds, observed latency and penalties, and the
//! whole of it surviving a snapshot.

use crate::disclosure::{DisclosureRule, LatencySketch, McpHints, PENALTY_SAMPLES_MIN};
use crate::limits::{DISCLOSURE_BLOCK_BYTES_MAX, OBSERVED_WINDOW_MS_DEFAULT, TOOLS_PER_SERVER_MAX};
use crate::machine::*;
use crate::name::{Namespace, ReplicaId, ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::policy::{EffectClass, PolicyDocument, PolicyFormat};
use crate::time::Timestamp;
use crate::tools::*;
use serde_json::json;

/// 2026-11-30T00:00:00Z.
const NOW_MS: u64 = 1_795_996_800_000;
const DAY_MS: u64 = 24 * 3600 * 1000;

fn now() -> Timestamp {
    Timestamp::from_millis(NOW_MS)
}

fn ns() -> Namespace {
    Namespace::new("fleet").unwrap()
}

fn server() -> ServerName {
    ServerName::new("docs").unwrap()
}

fn tool(name: &str) -> ToolName {
    ToolName::new(name).unwrap()
}

fn id(name: &str) -> ToolId {
    ToolId {
        namespace: ns(),
        server: server(),
        tool: tool(name),
    }
}

/// A valid block observed `age_days` before [`now`], with p95 `p95_ms`.
fn block(age_days: u64, p95_ms: u64) -> String {
    let observed =
        crate::disclosure::format_utc(Timestamp::from_millis(NOW_MS - age_days * DAY_MS));
    json!({
        "version": "1.0", "observed_at": observed, "measurement_window_days": 7,
        "sample_size": 12483, "p50_ms": p95_ms / 4, "p95_ms": p95_ms, "p99_ms": p95_ms * 2,
        "timeout_ms": 30000, "idempotent": true, "retry_safe": true, "streaming": false,
    })
    .to_string()
}

fn import(name: &str, hints: McpHints, disclosure_json: Option<String>) -> ToolImport {
    ToolImport {
        tool: tool(name),
        hints,
        disclosure_json,
    }
}

fn read_only() -> McpHints {
    McpHints {
        read_only: Some(true),
        ..McpHints::default()
    }
}

fn import_command(tools: Vec<ToolImport>) -> Command {
    Command::ImportTools {
        namespace: ns(),
        server: server(),
        tools,
        actor: "ops".into(),
    }
}

fn imported(applied: &Applied) -> &[ToolImported] {
    match &applied.answer {
        Answer::ToolsImported(results) => results,
        other => panic!("expected ToolsImported, got {other:?}"),
    }
}

fn report(name: &str, duration_ms: u64, count: usize) -> Command {
    let outcome = OutcomeReport {
        server: server(),
        tool: tool(name),
        backend: None,
        class: OutcomeClass::Success,
        duration_ms,
        server_generation: 0,
        tool_generation: 0,
    };
    Command::ReportOutcomes {
        namespace: ns(),
        replica: ReplicaId::new("r1").unwrap(),
        batch_seq: 0,
        outcomes: vec![outcome; count],
    }
}

fn tool_events(applied: &Applied) -> Vec<String> {
    applied
        .events
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Tool { tool, .. } => Some(tool.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn import_stores_valid_fresh_blocks_and_says_why_others_are_not() {
    let mut sm = StateMachine::new();
    let broken = block(1, 720).replace("\"p50_ms\":180", "\"p50_ms\":800");
    let applied = sm.apply(
        &import_command(vec![
            import("search", read_only(), Some(block(1, 720))),
            import("broken", read_only(), Some(broken)),
            import("old", read_only(), Some(block(91, 720))),
            import("silent", McpHints::default(), None),
        ]),
        now(),
    );
    let results = imported(&applied);
    assert!(
        matches!(&results[0].verdict, DisclosureVerdict::Accepted { warnings } if warnings.is_empty())
    );
    assert_eq!(results[0].deadline_ms, Some(1728), "p99 1440 x 1.2");
    let DisclosureVerdict::Invalid { problems } = &results[1].verdict else {
        panic!("broken block accepted: {:?}", results[1]);
    };
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].rule, DisclosureRule::P50AboveP95);
    assert_eq!(problems[0].message, "p50_ms 800 exceeds p95_ms 720");
    let DisclosureVerdict::Stale { problems } = &results[2].verdict else {
        panic!("stale block accepted: {:?}", results[2]);
    };
    assert_eq!(problems[0].rule, DisclosureRule::Stale);
    assert_eq!(results[3].verdict, DisclosureVerdict::Missing);
    assert_eq!(tool_events(&applied), ["search", "broken", "old", "silent"]);
    let stored: Vec<(String, bool)> = sm
        .tools()
        .tools_in(&ns())
        .map(|(id, r)| (id.tool.to_string(), r.disclosure().is_some()))
        .collect();
    let expected = [
        ("broken", false),
        ("old", false),
        ("search", true),
        ("silent", false),
    ];
    let expected: Vec<(String, bool)> = expected.iter().map(|(t, d)| (t.to_string(), *d)).collect();
    assert_eq!(stored, expected);
    assert_eq!(sm.tools().tool(&id("search")).unwrap().imported_at, now());
}

#[test]
fn effect_is_derived_from_hints_only_where_the_policy_is_silent() {
    let mut sm = StateMachine::new();
    apply_policy(
        &mut sm,
        "[servers.docs.tools.write_page]\neffect = \"idempotent_write\"\n",
    );
    let idempotent = McpHints {
        read_only: Some(false),
        idempotent: Some(true),
        ..McpHints::default()
    };
    let applied = sm.apply(
        &import_command(vec![
            import("search", read_only(), None),
            import("upsert", idempotent, None),
            import("delete", McpHints::default(), None),
            import("write_page", McpHints::default(), None),
        ]),
        now(),
    );
    let effects: Vec<(EffectClass, bool)> = imported(&applied)
        .iter()
        .map(|r| (r.effect, r.effect_derived))
        .collect();
    assert_eq!(
        effects,
        [
            (EffectClass::ReadOnly, true),
            (EffectClass::IdempotentWrite, true),
            (EffectClass::NonIdempotentWrite, true),
            (EffectClass::IdempotentWrite, false),
        ]
    );
}

#[test]
fn a_reimport_replaces_the_servers_tools_and_announces_the_dropped_ones() {
    let mut sm = StateMachine::new();
    sm.apply(
        &import_command(vec![
            import("a", read_only(), Some(block(1, 720))),
            import("b", read_only(), Some(block(1, 720))),
        ]),
        now(),
    );
    let applied = sm.apply(&import_command(vec![import("b", read_only(), None)]), now());
    assert_eq!(tool_events(&applied), ["a", "b"]);
    assert!(sm.tools().tool(&id("a")).is_none());
    assert!(sm.tools().tool(&id("b")).unwrap().disclosure().is_none());
}

#[test]
fn imports_over_a_bound_are_refused_whole() {
    let mut sm = StateMachine::new();
    sm.apply(&Command::Tick, now());
    let before = sm.clone();
    let too_many = (0..=TOOLS_PER_SERVER_MAX)
        .map(|i| import(&format!("t{i}"), read_only(), None))
        .collect();
    let twice = vec![
        import("a", read_only(), None),
        import("a", read_only(), None),
    ];
    let huge = vec![import(
        "a",
        read_only(),
        Some(" ".repeat(DISCLOSURE_BLOCK_BYTES_MAX + 1)),
    )];
    for tools in [too_many, twice, huge] {
        let applied = sm.apply(&import_command(tools), now());
        assert!(
            matches!(applied.answer, Answer::Rejected(_)),
            "{:?}",
            applied.answer
        );
        assert!(applied.events.is_empty());
    }
    assert_eq!(
        sm.fleet(),
        before.fleet(),
        "a refused import changes nothing"
    );
}

#[test]
fn a_tool_slower_than_disclosed_is_penalized_and_cleared_as_time_passes() {
    let mut sm = StateMachine::new();
    sm.apply(
        &import_command(vec![import("search", read_only(), Some(block(1, 720)))]),
        now(),
    );
    // Slow, but too few samples to judge.
    let few = sm.apply(
        &report("search", 2_000, PENALTY_SAMPLES_MIN as usize - 1),
        now(),
    );
    assert!(tool_events(&few).is_empty());
    assert!(!sm.tools().tool(&id("search")).unwrap().penalized);
    // One more sample makes the window meaningful: 2000 > 720 x 1.5.
    let enough = sm.apply(&report("search", 2_000, 1), now());
    assert_eq!(tool_events(&enough), ["search"]);
    assert!(sm.tools().tool(&id("search")).unwrap().penalized);
    let sketch: LatencySketch = sm.tools().observed(&id("search"), now());
    assert_eq!(sketch.count(), PENALTY_SAMPLES_MIN);
    // Still slow: no new event, the flag did not change.
    assert!(tool_events(&sm.apply(&report("search", 2_000, 10), now())).is_empty());
    // The window passes: a tick clears the penalty and says so.
    let almost = now().plus_ms(OBSERVED_WINDOW_MS_DEFAULT - 1_000);
    super::pass_time(&mut sm, now(), almost);
    assert!(sm.tools().tool(&id("search")).unwrap().penalized);
    let ticked = sm.apply(&Command::Tick, almost.plus_ms(1_001));
    assert_eq!(tool_events(&ticked), ["search"]);
    assert!(!sm.tools().tool(&id("search")).unwrap().penalized);
}

fn apply_policy(sm: &mut StateMachine, toml: &str) {
    super::apply_policy(sm, "fleet", toml, now());
}

#[test]
fn the_policy_sets_the_observation_window_and_a_new_width_starts_afresh() {
    let mut sm = StateMachine::new();
    apply_policy(&mut sm, "[latency]\nwindow_ms = 20000\n");
    sm.apply(
        &import_command(vec![import("search", read_only(), Some(block(1, 720)))]),
        now(),
    );
    sm.apply(
        &report("search", 2_000, PENALTY_SAMPLES_MIN as usize),
        now(),
    );
    assert!(sm.tools().tool(&id("search")).unwrap().penalized);
    // Half the window later the slow samples still count.
    let half = sm.apply(&Command::Tick, now().plus_ms(10_000));
    assert!(tool_events(&half).is_empty());
    assert!(sm.tools().tool(&id("search")).unwrap().penalized);
    // Once the 20 s window has passed, a tick clears the penalty.
    let later = now().plus_ms(20_001);
    let ticked = sm.apply(&Command::Tick, later);
    assert_eq!(tool_events(&ticked), ["search"]);
    assert!(!sm.tools().tool(&id("search")).unwrap().penalized);
    // The emitted block's window is the configured one, in whole days.
    let document = sm.policy_document(&ns()).clone();
    assert_eq!(document.observation_window_ms(), 20_000);
    sm.apply(&report("search", 100, 3), later);
    apply_policy(&mut sm, "[latency]\nwindow_ms = 60000\n");
    let at = later.plus_ms(1);
    sm.apply(&report("search", 100, 1), at);
    assert_eq!(
        sm.tools().observed(&id("search"), at).count(),
        1,
        "a window of another width starts empty"
    );
}

#[test]
fn a_tool_within_its_promise_is_not_penalized_and_unknown_tools_are_still_observed() {
    let mut sm = StateMachine::new();
    sm.apply(
        &import_command(vec![import("search", read_only(), Some(block(1, 720)))]),
        now(),
    );
    // 1080 = 720 x 1.5 exactly: not above the threshold.
    let applied = sm.apply(&report("search", 1_080, 500), now());
    assert!(tool_events(&applied).is_empty());
    assert!(!sm.tools().tool(&id("search")).unwrap().penalized);
    sm.apply(&report("unlisted", 40, 3), now());
    assert_eq!(sm.tools().observed(&id("unlisted"), now()).count(), 3);
    assert!(sm.tools().tool(&id("unlisted")).is_none());
    let timeout = match report("search", 30_000, 50) {
        Command::ReportOutcomes {
            namespace,
            replica,
            batch_seq: 0,
            mut outcomes,
        } => {
            outcomes
                .iter_mut()
                .for_each(|o| o.class = OutcomeClass::Timeout);
            Command::ReportOutcomes {
                namespace,
                replica,
                batch_seq: 0,
                outcomes,
            }
        }
        other => other,
    };
    sm.apply(&timeout, now());
    assert_eq!(
        sm.tools().observed(&id("search"), now()).count(),
        500,
        "timeouts stay out of observed latency"
    );
}

#[test]
fn the_registry_and_its_sketches_survive_a_snapshot() {
    let mut sm = StateMachine::new();
    sm.apply(
        &import_command(vec![import("search", read_only(), Some(block(1, 720)))]),
        now(),
    );
    sm.apply(&report("search", 2_000, 150), now());
    let bytes = sm.snapshot().unwrap();
    let restored = StateMachine::restore(&bytes).unwrap();
    assert_eq!(restored.fleet(), sm.fleet());
    assert_eq!(restored.digest().unwrap(), sm.digest().unwrap());
    assert!(restored.tools().tool(&id("search")).unwrap().penalized);
    assert_eq!(restored.tools().observed(&id("search"), now()).count(), 150);
}

#[test]
fn an_emitted_block_parses_back_and_passes_validation() {
    let mut sm = StateMachine::new();
    sm.apply(
        &import_command(vec![import("search", read_only(), Some(block(1, 720)))]),
        now(),
    );
    let id = id("search");
    // Observed over the default 10-minute window, which is not whole days:
    // no block claims a day of evidence.
    sm.apply(&report("search", 300, 10), now());
    let short = PolicyDocument::default();
    let refused = sm.tools().emit(&id, &short, None, now()).unwrap_err();
    assert!(refused.to_string().contains("whole days"), "{refused}");
    // Kept over a day, it is disclosed as one.
    let day = "[latency]\nwindow_ms = 86400000\n";
    let document = PolicyDocument::parse(day, PolicyFormat::Toml).unwrap();
    apply_policy(&mut sm, day);
    sm.apply(&report("search", 300, 1_000), now());
    sm.apply(&report("search", 900, 100), now());
    let block = sm.tools().emit(&id, &document, None, now()).unwrap();
    let text = serde_json::to_string(&block).unwrap();
    let back =
        crate::disclosure::LatencyDisclosure::from_json(&serde_json::from_str(&text).unwrap())
            .unwrap();
    let assessment = crate::disclosure::assess(&back, now());
    assert!(assessment.is_usable(), "{:?}", assessment.problems);
    assert!(assessment.problems.is_empty(), "{:?}", assessment.problems);
    assert_eq!((back.sample_size, back.measurement_window_days), (1_100, 1));
    assert_eq!(back.timeout_ms, 30_000, "the stored disclosure's timeout");
    assert!(back.idempotent && back.retry_safe);
    assert!(
        back.p50_ms.abs_diff(300) <= 3 && back.p99_ms.abs_diff(900) <= 9,
        "{back:?}"
    );
    // Nothing observed: refused rather than emitting an empty block.
    assert!(sm
        .tools()
        .emit(&self::id("other"), &document, None, now())
        .is_err());
}
