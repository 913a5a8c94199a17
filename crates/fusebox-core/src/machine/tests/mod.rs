//! Unit tests of the state machine, one file per command family (no IO).

mod batched;
mod probes;
mod quotas;
mod replay;
mod resolved;
mod snapshots;
mod tools;

use super::{Answer, Command, OutcomeReport, StateMachine};
use crate::limits::CLOCK_STEP_MS_MAX;
use crate::name::{Namespace, ReplicaId, ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::policy::{PolicyDocument, PolicyFormat};
use crate::time::Timestamp;

/// Replica `r1`'s report `seq` to `ns` of one 5 ms outcome of
/// `server`/`tool`, seen at generation 0.
pub(super) fn one_outcome(
    ns: &str,
    seq: u64,
    server: &str,
    tool: &str,
    class: OutcomeClass,
) -> Command {
    Command::ReportOutcomes {
        namespace: Namespace::new(ns).unwrap(),
        replica: ReplicaId::new("r1").unwrap(),
        batch_seq: seq,
        outcomes: vec![OutcomeReport {
            server: ServerName::new(server).unwrap(),
            tool: ToolName::new(tool).unwrap(),
            backend: None,
            class,
            duration_ms: 5,
            server_generation: 0,
            tool_generation: 0,
        }],
    }
}

/// Applies the TOML policy `text` to `ns` at `at`; it must be applied.
pub(super) fn apply_policy(sm: &mut StateMachine, ns: &str, text: &str, at: Timestamp) {
    let document = PolicyDocument::parse(text, PolicyFormat::Toml).unwrap();
    let applied = sm.apply(
        &Command::ApplyPolicy {
            namespace: Namespace::new(ns).unwrap(),
            document: Box::new(document),
            actor: "ops".into(),
            reason: String::new(),
        },
        at,
    );
    assert!(
        matches!(applied.answer, Answer::PolicyApplied { .. }),
        "{applied:?}"
    );
}

/// Lets time pass from `from` to `to` as a live cluster would: a `Tick` a
/// step apart, so the state clock follows (`clock.rs` paces big jumps).
pub(super) fn pass_time(sm: &mut StateMachine, from: Timestamp, to: Timestamp) {
    let mut at = from;
    while at < to {
        at = at.plus_ms(CLOCK_STEP_MS_MAX).min(to);
        sm.apply(&Command::Tick, at);
    }
    assert_eq!(sm.now(), to, "the clock followed the ticks");
}
