//! Probe permits across a server's breaker and its tools' breakers: a
//! server's probe is a call on one of its tools, so while a permit on one
//! scope is out, the other scope's permit waits.

use crate::breaker::{BreakerKey, BreakerState, ProbeAnswer, ProbeResult};
use crate::machine::*;
use crate::name::{Namespace, ReplicaId, ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::time::Timestamp;

const POLICY: &str = "[defaults.breaker]\nconsecutive_failures = 2\nopen_ms = 1000\n\
                      probe_lease_ms = 3000\nprobe_successes = 1\nconcurrent_probes = 1\n";

fn ns() -> Namespace {
    Namespace::new("fleet").unwrap()
}

fn server_key() -> BreakerKey {
    BreakerKey::server(ns(), ServerName::new("search").unwrap())
}

fn tool_key(tool: &str) -> BreakerKey {
    BreakerKey::tool(
        ns(),
        ServerName::new("search").unwrap(),
        ToolName::new(tool).unwrap(),
    )
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(1_000_000 + ms)
}

/// A state whose server breaker and whose tools `lookup` and `fetch` are
/// all half-open at `at(2_000)`.
fn all_half_open() -> StateMachine {
    let mut sm = StateMachine::new();
    super::apply_policy(&mut sm, "fleet", POLICY, at(0));
    let failure = |tool: &str| OutcomeReport {
        server: ServerName::new("search").unwrap(),
        tool: ToolName::new(tool).unwrap(),
        backend: None,
        class: OutcomeClass::ServerError,
        duration_ms: 5,
        server_generation: 0,
        tool_generation: 0,
    };
    let report = Command::ReportOutcomes {
        namespace: ns(),
        replica: ReplicaId::new("r0").unwrap(),
        batch_seq: 0,
        outcomes: vec![
            failure("lookup"),
            failure("lookup"),
            failure("fetch"),
            failure("fetch"),
        ],
    };
    sm.apply(&report, at(1));
    sm.apply(&Command::Tick, at(2_000));
    for key in [server_key(), tool_key("lookup"), tool_key("fetch")] {
        assert_eq!(sm.view(&key).state, BreakerState::HalfOpen, "{key}");
    }
    sm
}

fn acquire(sm: &mut StateMachine, key: BreakerKey, replica: &str, ms: u64) -> ProbeAnswer {
    acquire_for(sm, key, replica, ms, None)
}

fn acquire_for(
    sm: &mut StateMachine,
    key: BreakerKey,
    replica: &str,
    ms: u64,
    lease_ms: Option<u64>,
) -> ProbeAnswer {
    let command = Command::AcquireProbe {
        key,
        replica: ReplicaId::new(replica).unwrap(),
        lease_ms,
    };
    match sm.apply(&command, at(ms)).answer {
        Answer::Probe(answer) => answer,
        other => panic!("expected a probe answer, got {other:?}"),
    }
}

fn granted(answer: &ProbeAnswer) -> (u64, u64) {
    match answer {
        ProbeAnswer::Granted {
            permit_id,
            generation,
            ..
        } => (*permit_id, *generation),
        other => panic!("expected a permit, got {other:?}"),
    }
}

#[test]
fn a_tool_permit_holds_off_its_servers_probe_and_the_reverse() {
    let mut sm = all_half_open();
    let lookup = granted(&acquire(&mut sm, tool_key("lookup"), "r1", 2_010));
    let server = acquire(&mut sm, server_key(), "r2", 2_020);
    assert!(
        matches!(server, ProbeAnswer::Denied { retry_after_ms: Some(ms), .. } if ms == 2_990),
        "{server:?}"
    );
    let release = Command::ReleaseProbe {
        key: tool_key("lookup"),
        permit_id: lookup.0,
        generation: lookup.1,
        outcome: OutcomeClass::Success,
    };
    let released = sm.apply(&release, at(2_100)).answer;
    assert!(
        matches!(released, Answer::ProbeReleased(ProbeResult::Closed)),
        "{released:?}"
    );
    granted(&acquire(&mut sm, server_key(), "r2", 2_110));
    // The server's probe holds off every tool's.
    let fetch = acquire(&mut sm, tool_key("fetch"), "r3", 2_120);
    assert!(matches!(fetch, ProbeAnswer::Denied { .. }), "{fetch:?}");
}

#[test]
fn a_lapsed_permit_holds_off_nothing() {
    let mut sm = all_half_open();
    granted(&acquire(&mut sm, tool_key("lookup"), "r1", 2_010));
    // The holder died: past its lease the server may be probed.
    granted(&acquire(&mut sm, server_key(), "r2", 5_011));
}

#[test]
fn a_requested_probe_lease_holds_the_permit_for_the_call() {
    let mut sm = all_half_open();
    let key = tool_key("lookup");
    // The policy's lease is 3 s; this probe's call may take 45 s.
    let answer = acquire_for(&mut sm, key.clone(), "r1", 3_000, Some(45_000));
    let ProbeAnswer::Granted { expires, .. } = answer else {
        panic!("expected a permit, got {answer:?}");
    };
    assert_eq!(expires, at(48_000));
    // Past the policy's 3 s the permit still holds: no second probe.
    sm.apply(&Command::Tick, at(20_000));
    let second = acquire(&mut sm, key.clone(), "r2", 20_000);
    assert!(matches!(second, ProbeAnswer::Denied { .. }), "{second:?}");
    // Past the requested lease it lapses, and another replica may probe.
    for t in (30_000..=50_000).step_by(10_000) {
        sm.apply(&Command::Tick, at(t));
    }
    let third = acquire(&mut sm, key, "r2", 50_000);
    assert!(matches!(third, ProbeAnswer::Granted { .. }), "{third:?}");
}

#[test]
fn a_probe_lease_out_of_range_is_refused() {
    let mut sm = all_half_open();
    for lease in [0, crate::limits::LEASE_MS_MAX + 1] {
        let command = Command::AcquireProbe {
            key: tool_key("lookup"),
            replica: ReplicaId::new("r1").unwrap(),
            lease_ms: Some(lease),
        };
        let answer = sm.apply(&command, at(3_000)).answer;
        assert!(matches!(answer, Answer::Rejected(_)), "{lease}: {answer:?}");
    }
}
