//! Scenario tests for the breaker engine: every state and transition, the
//! slow-tool story (one slow MCP tool must not stall the agent) and the runbook's breaker cases.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use fusebox_core::breaker::{
    admit, Admission, Breaker, BreakerKey, BreakerState, BreakerView, Cause, Observation,
    ProbeAnswer, ProbeResult, Recorded, RejectScope,
};
use fusebox_core::machine::{Answer, Command, OperatorAction, OutcomeReport, StateMachine};
use fusebox_core::policy::{BreakerPolicy, OpenBackoff, Trip, WindowPolicy};
use fusebox_core::{OutcomeClass, ReplicaId, ServerName, Timestamp, ToolName, Verdict};
use std::borrow::Cow;

fn replica(n: u32) -> ReplicaId {
    ReplicaId::new(format!("replica-{n}")).unwrap()
}

fn obs(b: &Breaker, n: u32, verdict: Verdict, duration_ms: u64) -> Observation<'static> {
    Observation {
        replica: Cow::Owned(replica(n)),
        generation: b.generation(),
        verdict,
        duration_ms,
    }
}

fn fail(b: &mut Breaker, p: &BreakerPolicy, at: u64, from: u32) -> Recorded {
    let o = obs(b, from, Verdict::Failure, 10);
    b.record(p, Timestamp(at), &o)
}

fn succeed(b: &mut Breaker, p: &BreakerPolicy, at: u64) -> Recorded {
    let o = obs(b, 1, Verdict::Success, 10);
    b.record(p, Timestamp(at), &o)
}

fn window_policy() -> BreakerPolicy {
    BreakerPolicy {
        trip: Trip::SlidingWindow(WindowPolicy {
            window_ms: 60_000,
            minimum_calls: 20,
            failure_ratio: 0.5,
            slow_call_ms: Some(2_000),
            slow_call_ratio: 0.7,
        }),
        ..BreakerPolicy::default()
    }
}

fn grant(b: &mut Breaker, p: &BreakerPolicy, at: u64, who: u32) -> (u64, u64) {
    match b.acquire_probe(p, Timestamp(at), &replica(who)) {
        ProbeAnswer::Granted {
            permit_id,
            generation,
            ..
        } => (permit_id, generation),
        other => panic!("expected a permit, got {other:?}"),
    }
}

#[test]
fn four_consecutive_failures_open_and_a_success_resets_the_streak() {
    let p = BreakerPolicy::default();
    let mut b = Breaker::new();
    for at in 0..3 {
        fail(&mut b, &p, at, 1);
    }
    succeed(&mut b, &p, 3);
    for at in 4..7 {
        fail(&mut b, &p, at, 1);
    }
    assert_eq!(
        b.state(),
        BreakerState::Closed,
        "the success broke the streak"
    );
    fail(&mut b, &p, 7, 1);
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(b.open_until(), Some(Timestamp(7 + 30_000)));
    let entry = b.audit().last().unwrap();
    assert_eq!(entry.cause, Cause::ConsecutiveFailures);
    assert_eq!(entry.evidence.consecutive_failures, 4);
    assert_eq!(entry.evidence.reporters, vec![replica(1)]);
}

#[test]
fn sliding_window_needs_minimum_calls_then_trips_on_failure_ratio() {
    let p = window_policy();
    let mut b = Breaker::new();
    for at in 0..19 {
        fail(&mut b, &p, at * 100, 1);
    }
    assert_eq!(
        b.state(),
        BreakerState::Closed,
        "19 calls are under minimum_calls"
    );
    fail(&mut b, &p, 2_000, 1);
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(b.audit().last().unwrap().cause, Cause::FailureRatio);
}

#[test]
fn sliding_window_below_the_ratio_stays_closed_and_old_calls_expire() {
    let p = window_policy();
    let mut b = Breaker::new();
    for i in 0..40 {
        let verdict = if i % 3 == 0 {
            Verdict::Failure
        } else {
            Verdict::Success
        };
        let o = obs(&b, 1, verdict, 10);
        b.record(&p, Timestamp(i * 100), &o);
    }
    assert_eq!(
        b.state(),
        BreakerState::Closed,
        "a third failing is under 0.5"
    );
    // Old successes slide out; fresh failures alone are now the window.
    for i in 0..19 {
        fail(&mut b, &p, 120_000 + i, 1);
    }
    assert_eq!(b.state(), BreakerState::Closed);
    fail(&mut b, &p, 120_100, 1);
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn slow_calls_trip_by_their_own_ratio() {
    let p = window_policy();
    let mut b = Breaker::new();
    for i in 0..20 {
        let o = obs(&b, 1, Verdict::Success, if i < 14 { 2_500 } else { 100 });
        b.record(&p, Timestamp(i), &o);
    }
    assert_eq!(b.state(), BreakerState::Open, "14 of 20 slow is 0.7");
    assert_eq!(b.audit().last().unwrap().cause, Cause::SlowCallRatio);
}

#[test]
fn min_reporters_refuses_to_trip_on_one_replica() {
    let p = BreakerPolicy {
        min_reporters: 2,
        ..BreakerPolicy::default()
    };
    let mut b = Breaker::new();
    for at in 0..10 {
        fail(&mut b, &p, at, 1);
    }
    assert_eq!(
        b.state(),
        BreakerState::Closed,
        "one replica's broken network"
    );
    fail(&mut b, &p, 10, 2);
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(
        b.audit().last().unwrap().evidence.reporters,
        vec![replica(1), replica(2)]
    );
}

#[test]
fn stale_generations_and_ignored_outcomes_do_not_count() {
    let p = BreakerPolicy::default();
    let mut b = Breaker::new();
    let stale = Observation {
        replica: Cow::Owned(replica(1)),
        generation: 7,
        verdict: Verdict::Failure,
        duration_ms: 1,
    };
    for at in 0..10 {
        assert_eq!(b.record(&p, Timestamp(at), &stale), Recorded::Stale);
    }
    let ignored = obs(&b, 1, Verdict::Ignored, 1);
    assert_eq!(b.record(&p, Timestamp(11), &ignored), Recorded::Ignored);
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.consecutive_failures(), 0);
}

fn open_breaker(p: &BreakerPolicy) -> Breaker {
    let mut b = Breaker::new();
    for at in 0..4 {
        fail(&mut b, p, at, 1);
    }
    assert_eq!(b.state(), BreakerState::Open);
    b
}

#[test]
fn half_open_grants_one_probe_fleet_wide_and_closes_after_three_successes() {
    let p = BreakerPolicy::default();
    let mut b = open_breaker(&p);
    let denied = b.acquire_probe(&p, Timestamp(1_000), &replica(2));
    assert!(matches!(
        denied,
        ProbeAnswer::Denied {
            state: BreakerState::Open,
            ..
        }
    ));
    let after = 3 + 30_000;
    for round in 0..3 {
        let at = after + round * 100;
        let (permit, generation) = grant(&mut b, &p, at, 2);
        let second = b.acquire_probe(&p, Timestamp(at + 1), &replica(3));
        assert!(matches!(
            second,
            ProbeAnswer::Denied {
                state: BreakerState::HalfOpen,
                ..
            }
        ));
        let result = b.release_probe(&p, Timestamp(at + 2), permit, generation, Verdict::Success);
        let expected = if round == 2 {
            ProbeResult::Closed
        } else {
            ProbeResult::Counted
        };
        assert_eq!(result, expected);
    }
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.audit().last().unwrap().cause, Cause::ProbesSucceeded);
}

#[test]
fn a_probe_failure_reopens_for_longer_up_to_the_cap() {
    let p = BreakerPolicy {
        open: OpenBackoff {
            open_ms: 1_000,
            multiplier: 2,
            open_ms_max: 3_000,
        },
        ..BreakerPolicy::default()
    };
    let mut b = open_breaker(&p);
    let mut at = 3 + 1_000;
    for expected in [2_000, 3_000, 3_000] {
        let (permit, generation) = grant(&mut b, &p, at, 1);
        let r = b.release_probe(&p, Timestamp(at), permit, generation, Verdict::Failure);
        assert_eq!(r, ProbeResult::Reopened);
        assert_eq!(b.open_until(), Some(Timestamp(at + expected)));
        at += expected;
    }
}

#[test]
fn a_dead_probe_holder_returns_its_permit_when_the_lease_lapses() {
    let p = BreakerPolicy::default();
    let mut b = open_breaker(&p);
    let at = 3 + 30_000;
    let (permit, generation) = grant(&mut b, &p, at, 1);
    let lapse = at + p.probe_lease_ms;
    let (_, _) = grant(&mut b, &p, lapse, 2);
    let late = b.release_probe(
        &p,
        Timestamp(lapse + 1),
        permit,
        generation,
        Verdict::Success,
    );
    assert_eq!(
        late,
        ProbeResult::Stale,
        "the lapsed permit no longer counts"
    );
}

#[test]
fn concurrent_probes_bound_the_permits_out() {
    let p = BreakerPolicy {
        concurrent_probes: 3,
        ..BreakerPolicy::default()
    };
    let mut b = open_breaker(&p);
    let at = 3 + 30_000;
    let mut granted = 0;
    for who in 0..16 {
        if let ProbeAnswer::Granted { .. } = b.acquire_probe(&p, Timestamp(at), &replica(who)) {
            granted += 1;
        }
    }
    assert_eq!(granted, 3);
    assert_eq!(b.live_permits(), 3);
}

#[test]
fn forced_open_rejects_until_it_expires_then_closes() {
    let p = BreakerPolicy::default();
    let mut b = Breaker::new();
    b.force_open(
        Timestamp(0),
        "alice",
        "vendor maintenance",
        Some(Timestamp(600_000)),
    );
    assert_eq!(b.state(), BreakerState::ForcedOpen);
    let denied = b.acquire_probe(&p, Timestamp(1), &replica(1));
    assert_eq!(
        denied,
        ProbeAnswer::Denied {
            state: BreakerState::ForcedOpen,
            retry_after_ms: Some(599_999)
        }
    );
    assert_eq!(fail(&mut b, &p, 2, 1), Recorded::NotCounting);
    b.advance(Timestamp(600_000));
    assert_eq!(b.state(), BreakerState::Closed);
    let causes: Vec<Cause> = b.audit().map(|e| e.cause.clone()).collect();
    assert_eq!(causes, vec![Cause::ForcedOpen, Cause::ForceExpired]);
    let forced = b.audit().next().unwrap();
    assert_eq!(forced.actor.as_deref(), Some("alice"));
    assert_eq!(forced.reason.as_deref(), Some("vendor maintenance"));
}

#[test]
fn disabled_never_trips_and_reset_returns_to_closed() {
    let p = BreakerPolicy::default();
    let mut b = Breaker::new();
    b.disable(Timestamp(0), "bob", "known flaky, accepted", None);
    for at in 1..20 {
        fail(&mut b, &p, at, 1);
    }
    assert_eq!(b.state(), BreakerState::Disabled);
    b.reset(Timestamp(30), "bob", "vendor fixed it");
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.consecutive_failures(), 0);
}

#[test]
fn a_timed_disable_returns_to_fresh_evidence_when_it_expires() {
    let p = BreakerPolicy::default();
    let mut b = Breaker::new();
    b.disable(
        Timestamp(0),
        "bob",
        "vendor window",
        Some(Timestamp(60_000)),
    );
    assert_eq!(b.next_deadline(), Some(Timestamp(60_000)));
    assert_eq!(b.operator_until(), Some(Timestamp(60_000)));
    for at in 1..20 {
        fail(&mut b, &p, at, 1);
    }
    b.advance(Timestamp(59_999));
    assert_eq!(b.state(), BreakerState::Disabled);
    b.advance(Timestamp(60_000));
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.consecutive_failures(), 0, "fresh evidence");
    let causes: Vec<Cause> = b.audit().map(|e| e.cause.clone()).collect();
    assert_eq!(causes, vec![Cause::Disabled, Cause::OperatorExpired]);
    assert_eq!(b.next_deadline(), None);
}

#[test]
fn a_timed_shadow_enforces_its_own_verdict_when_it_expires() {
    let p = BreakerPolicy::default();
    let mut b = Breaker::new();
    b.metrics_only(Timestamp(0), "carol", "try it", Some(Timestamp(1_000)));
    for at in 1..5 {
        fail(&mut b, &p, at, 1);
    }
    assert_eq!(b.state(), BreakerState::MetricsOnly);
    assert_eq!(b.phase().state(), BreakerState::Open);
    b.advance(Timestamp(1_000));
    assert_eq!(b.state(), BreakerState::Open, "the shadow's verdict stands");
    let key = BreakerKey::parse("ns/srv/tool").unwrap();
    let view = BreakerView::of(&key, &b, &p);
    assert!(matches!(
        admit(
            &BreakerView::closed(key.server_key()),
            &view,
            Timestamp(1_001)
        ),
        Admission::Reject { .. }
    ));
}

#[test]
fn metrics_only_decides_and_counts_but_never_rejects() {
    let p = BreakerPolicy::default();
    let mut b = Breaker::new();
    b.metrics_only(Timestamp(0), "carol", "shadow rollout", None);
    for at in 1..5 {
        fail(&mut b, &p, at, 1);
    }
    assert_eq!(b.state(), BreakerState::MetricsOnly);
    assert_eq!(b.phase().state(), BreakerState::Open, "it decided to open");
    for at in 5..8 {
        fail(&mut b, &p, at, 1);
    }
    assert_eq!(
        b.would_reject(),
        3,
        "three calls an enforcing breaker would have refused"
    );
    let key = BreakerKey::parse("ns/srv/tool").unwrap();
    let view = BreakerView::of(&key, &b, &p);
    let server = BreakerView::closed(key.server_key());
    assert_eq!(
        admit(&server, &view, Timestamp(9)),
        Admission::Allow { would_reject: true }
    );
}

#[test]
fn policy_shadow_mode_behaves_like_metrics_only() {
    let p = BreakerPolicy {
        shadow: true,
        ..BreakerPolicy::default()
    };
    let mut b = Breaker::new();
    for at in 0..6 {
        fail(&mut b, &p, at, 1);
    }
    assert_eq!(b.state(), BreakerState::Open);
    assert!(!b.enforcing(&p));
    assert_eq!(b.would_reject(), 2);
    let probe = b.acquire_probe(&p, Timestamp(40_000), &replica(1));
    assert!(matches!(probe, ProbeAnswer::NotNeeded { .. }));
}

#[test]
fn generation_grows_with_every_transition() {
    let p = BreakerPolicy::default();
    let mut b = open_breaker(&p);
    let mut last = b.generation();
    b.advance(Timestamp(40_000));
    assert!(b.generation() > last);
    last = b.generation();
    b.force_open(Timestamp(40_001), "a", "r", None);
    assert!(b.generation() > last);
    let gens: Vec<u64> = b.audit().map(|e| e.generation).collect();
    assert!(gens.windows(2).all(|w| w[0] < w[1]));
}

fn outcome(tool: &str, class: OutcomeClass, sm: &StateMachine) -> OutcomeReport {
    let ns = fusebox_core::Namespace::new("agents").unwrap();
    let server = ServerName::new("vendor").unwrap();
    let tool = ToolName::new(tool).unwrap();
    let server_key = BreakerKey::server(ns.clone(), server.clone());
    let tool_key = BreakerKey::tool(ns, server.clone(), tool.clone());
    OutcomeReport {
        server,
        tool,
        backend: None,
        class,
        duration_ms: 10_000,
        server_generation: sm.view(&server_key).generation,
        tool_generation: sm.view(&tool_key).generation,
    }
}

fn report(sm: &mut StateMachine, who: u32, outcomes: Vec<OutcomeReport>, at: u64) {
    let cmd = Command::ReportOutcomes {
        namespace: fusebox_core::Namespace::new("agents").unwrap(),
        replica: replica(who),
        batch_seq: 0,
        outcomes,
    };
    let applied = sm.apply(&cmd, Timestamp(at));
    assert!(
        matches!(applied.answer, Answer::Reported(_)),
        "{:?}",
        applied.answer
    );
}

fn key(text: &str) -> BreakerKey {
    BreakerKey::parse(text).unwrap()
}

/// Seed 000: four timeouts open the tax tool; its siblings keep working; a
/// 200 with `isError` counts as a failure and "not found" does not.
#[test]
fn seed_000_the_slow_tax_tool_opens_alone() {
    let mut sm = StateMachine::new();
    for at in 0..3 {
        let batch = vec![
            outcome("tax_lookup", OutcomeClass::Timeout, &sm),
            outcome("geocode", OutcomeClass::Success, &sm),
            outcome("enrich", OutcomeClass::BusinessError, &sm),
        ];
        report(&mut sm, at as u32, batch, at);
    }
    assert_eq!(
        sm.view(&key("agents/vendor/tax_lookup")).state,
        BreakerState::Closed
    );
    let fourth = vec![outcome("tax_lookup", OutcomeClass::Timeout, &sm)];
    report(&mut sm, 3, fourth, 3);
    let tax = sm.view(&key("agents/vendor/tax_lookup"));
    assert_eq!(tax.state, BreakerState::Open);
    let geocode = sm.view(&key("agents/vendor/geocode"));
    let server = sm.view(&key("agents/vendor"));
    assert_eq!(
        server.state,
        BreakerState::Closed,
        "interleaved successes keep the server up"
    );
    assert!(matches!(
        admit(&server, &geocode, Timestamp(4)),
        Admission::Allow {
            would_reject: false
        }
    ));
    match admit(&server, &tax, Timestamp(4)) {
        Admission::Reject {
            scope: RejectScope::Tool,
            retry_after_ms: Some(ms),
            ..
        } => {
            assert_eq!(ms, 30_000 - 1);
        }
        other => panic!("expected a fast tool reject, got {other:?}"),
    }
    for at in 10..14 {
        let batch = vec![outcome("search", OutcomeClass::ToolError, &sm)];
        report(&mut sm, 1, batch, at);
    }
    assert_eq!(
        sm.view(&key("agents/vendor/search")).state,
        BreakerState::Open,
        "isError is a failure"
    );
    for at in 20..30 {
        let batch = vec![outcome("enrich", OutcomeClass::BusinessError, &sm)];
        report(&mut sm, 1, batch, at);
    }
    assert_eq!(
        sm.view(&key("agents/vendor/enrich")).state,
        BreakerState::Closed,
        "not found is healthy"
    );
}

#[test]
fn an_open_server_breaker_rejects_every_tool_on_it() {
    let mut sm = StateMachine::new();
    let tools = ["a", "b", "c", "d"];
    for (at, tool) in tools.iter().enumerate() {
        let batch = vec![outcome(tool, OutcomeClass::Transport, &sm)];
        report(&mut sm, 1, batch, at as u64);
    }
    let server = sm.view(&key("agents/vendor"));
    assert_eq!(
        server.state,
        BreakerState::Open,
        "four transport errors across tools"
    );
    let fresh_tool = sm.view(&key("agents/vendor/never_called"));
    assert!(matches!(
        admit(&server, &fresh_tool, Timestamp(5)),
        Admission::Reject {
            scope: RejectScope::Server,
            ..
        }
    ));
}

/// Runbook `sustained_dependency_failure`: the circuit opens and half-open
/// admits one probe at a time.
#[test]
fn sustained_failure_opens_and_probes_one_at_a_time_through_the_log() {
    let mut sm = StateMachine::new();
    for at in 0..4 {
        let batch = vec![outcome(
            "get_deployment_job",
            OutcomeClass::ServerError,
            &sm,
        )];
        report(&mut sm, 1, batch, at);
    }
    let k = key("agents/vendor/get_deployment_job");
    assert_eq!(sm.view(&k).state, BreakerState::Open);
    let tick = sm.apply(&Command::Tick, Timestamp(30_003));
    assert_eq!(sm.view(&k).state, BreakerState::HalfOpen);
    let changed: Vec<_> = tick
        .events
        .iter()
        .filter_map(|e| match e {
            fusebox_core::machine::WatchEvent::Breaker { view, .. } => Some(view.key.clone()),
            _ => None,
        })
        .collect();
    assert!(
        changed.contains(&k),
        "the half-open change reaches watchers"
    );
    let mut granted = 0;
    for who in 0..16 {
        let cmd = Command::AcquireProbe {
            key: k.clone(),
            replica: replica(who),
            lease_ms: None,
        };
        if let Answer::Probe(ProbeAnswer::Granted { .. }) = sm.apply(&cmd, Timestamp(30_004)).answer
        {
            granted += 1;
        }
    }
    assert_eq!(granted, 1);
}

#[test]
fn operators_force_open_for_a_duration_and_it_closes_by_itself() {
    let mut sm = StateMachine::new();
    let k = key("agents/vendor/tax_lookup");
    let cmd = Command::Operate {
        key: k.clone(),
        action: OperatorAction::ForceOpen {
            for_ms: Some(600_000),
        },
        actor: "alice".into(),
        reason: "vendor incident INC-42".into(),
    };
    let applied = sm.apply(&cmd, Timestamp(0));
    let Answer::Breaker(view) = applied.answer else {
        panic!("{:?}", applied.answer)
    };
    assert_eq!(view.state, BreakerState::ForcedOpen);
    assert_eq!(view.reason.as_deref(), Some("vendor incident INC-42"));
    sm.apply(&Command::Tick, Timestamp(599_999));
    assert_eq!(sm.view(&k).state, BreakerState::ForcedOpen);
    sm.apply(&Command::Tick, Timestamp(600_000));
    assert_eq!(sm.view(&k).state, BreakerState::Closed);
}

/// A coalesced batch is the same as its reports applied one by one at the
/// same time: same answers, same state; and a batch over its bound is
/// refused whole.
#[test]
fn a_report_batch_applies_like_its_reports_in_order() {
    use fusebox_core::machine::Report;
    let ns = fusebox_core::Namespace::new("agents").unwrap();
    let (mut one_by_one, mut batched) = (StateMachine::new(), StateMachine::new());
    let reports: Vec<Report> = (0..6u32)
        .map(|who| Report {
            namespace: ns.clone(),
            replica: replica(who),
            batch_seq: 0,
            outcomes: vec![
                outcome("tax", OutcomeClass::Timeout, &one_by_one),
                outcome("rates", OutcomeClass::Success, &one_by_one),
            ],
        })
        .collect();
    let mut expected = Vec::new();
    for r in &reports {
        let cmd = Command::ReportOutcomes {
            namespace: r.namespace.clone(),
            replica: r.replica.clone(),
            batch_seq: 0,
            outcomes: r.outcomes.clone(),
        };
        match one_by_one.apply(&cmd, Timestamp(5_000)).answer {
            Answer::Reported(summary) => expected.push(Ok(summary)),
            other => panic!("{other:?}"),
        }
    }
    let batch = Command::ReportBatch {
        reports: reports.clone(),
    };
    let applied = batched.apply(&batch, Timestamp(5_000));
    assert_eq!(applied.answer, Answer::ReportedBatch(expected));
    assert_eq!(batched.digest().unwrap(), one_by_one.digest().unwrap());
    // Six replicas' timeouts (the default trips at four) opened the tool.
    assert_eq!(
        batched.view(&key("agents/vendor/tax")).state,
        BreakerState::Open
    );

    let too_many = Command::ReportBatch {
        reports: vec![reports[0].clone(); fusebox_core::limits::REPORTS_PER_BATCH_MAX + 1],
    };
    let before = batched.digest().unwrap();
    // At the same time: a later one would move the clock, which is state.
    let refused = batched.apply(&too_many, Timestamp(5_000));
    assert!(matches!(refused.answer, Answer::Rejected(_)), "{refused:?}");
    assert_eq!(batched.digest().unwrap(), before);
}
