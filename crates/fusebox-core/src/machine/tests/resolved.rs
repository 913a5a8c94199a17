//! Tools are resolved once per policy version and kept with it (or, in a
//! namespace with no policy, once under the defaults and kept with the
//! fleet): a new version (an apply or a rollback) must be read afresh, and
//! the kept resolutions never make two states differ.

use crate::breaker::{BreakerKey, BreakerState};
use crate::machine::*;
use crate::name::{Namespace, ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::time::Timestamp;

fn ns() -> Namespace {
    Namespace::new("fleet").unwrap()
}

fn apply_policy(sm: &mut StateMachine, failures: u32, at: Timestamp) {
    let text = format!(
        "[servers.tax.breaker]\nconsecutive_failures = 1000\n\n[servers.tax.tools.lookup.breaker]\nconsecutive_failures = {failures}\n"
    );
    super::apply_policy(sm, "fleet", &text, at);
}

fn fail(sm: &mut StateMachine, seq: u64, at: Timestamp) {
    let report = super::one_outcome("fleet", seq, "tax", "lookup", OutcomeClass::ServerError);
    let applied = sm.apply(&report, at);
    assert!(matches!(applied.answer, Answer::Reported(_)), "{applied:?}");
}

fn lookup_state(sm: &StateMachine) -> BreakerState {
    let key = BreakerKey::tool(
        ns(),
        ServerName::new("tax").unwrap(),
        ToolName::new("lookup").unwrap(),
    );
    sm.view(&key).state
}

#[test]
fn a_new_policy_version_is_resolved_afresh() {
    let mut sm = StateMachine::new();
    let t = Timestamp::from_millis(1_000);
    apply_policy(&mut sm, 100, t);
    fail(&mut sm, 1, t);
    fail(&mut sm, 2, t);
    assert_eq!(lookup_state(&sm), BreakerState::Closed, "100 needed");
    // Three failures in a row now open it: the tool's resolution under the
    // first version (100) must not be used under the second (3).
    apply_policy(&mut sm, 3, t);
    fail(&mut sm, 3, t);
    assert_eq!(lookup_state(&sm), BreakerState::Open);
    // Only the version in force keeps resolutions.
    let kept: Vec<String> = sm.fleet.namespaces[&ns()]
        .policies
        .iter()
        .map(|v| format!("{:?}", v.resolved))
        .collect();
    assert_eq!(kept, ["ResolvedTools(0)", "ResolvedTools(1)"]);
}

#[test]
fn kept_resolutions_never_make_states_differ() {
    let mut sm = StateMachine::new();
    let t = Timestamp::from_millis(1_000);
    apply_policy(&mut sm, 100, t);
    fail(&mut sm, 1, t);
    // A copy (what a snapshot restores) starts with nothing resolved; it
    // must still equal the original and encode the same.
    let copy = sm.fleet.clone();
    assert!(copy == sm.fleet);
    assert_eq!(
        postcard::to_allocvec(&copy).unwrap(),
        postcard::to_allocvec(&sm.fleet).unwrap()
    );
    let resolved = |f: &Fleet| {
        format!(
            "{:?}",
            f.namespaces[&ns()].policies.back().unwrap().resolved
        )
    };
    assert_eq!(resolved(&sm.fleet), "ResolvedTools(1)");
    assert_eq!(resolved(&copy), "ResolvedTools(0)");
}

#[test]
fn tools_under_the_defaults_are_kept_until_the_namespace_has_a_policy() {
    let kept = |f: &Fleet| format!("{:?}", f.default_resolved);
    let mut sm = StateMachine::new();
    let t = Timestamp::from_millis(1_000);
    fail(&mut sm, 1, t);
    fail(&mut sm, 2, t);
    assert_eq!(
        lookup_state(&sm),
        BreakerState::Closed,
        "the defaults' window"
    );
    assert_eq!(kept(&sm.fleet), "DefaultResolved(1)");
    let copy = sm.fleet.clone();
    assert!(copy == sm.fleet);
    assert_eq!(kept(&copy), "DefaultResolved(0)");
    // One failure opens it under the policy: the resolution kept under the
    // defaults must not be used once there is one.
    apply_policy(&mut sm, 1, t);
    assert_eq!(kept(&sm.fleet), "DefaultResolved(0)");
    fail(&mut sm, 3, t);
    assert_eq!(lookup_state(&sm), BreakerState::Open);
}
