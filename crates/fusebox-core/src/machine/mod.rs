//! The replicated state machine: one type that applies every command.
//!
//! The server's Raft log carries [`Command`]s stamped with the leader's
//! clock; [`StateMachine::apply`] applies one and returns a typed [`Answer`]
//! plus the [`WatchEvent`]s it caused, each with a revision. The state
//! encodes to a snapshot and hashes to a digest so replicas can be compared.
//!
//! Determinism: entry times are clamped so time never goes back (a new
//! leader's clock may lag), every collection is ordered, and nothing reads a
//! clock or a random source. Refused commands change nothing and answer
//! [`Answer::Rejected`] on every replica alike.

mod answer;
mod command;
mod namespace;
mod snapshot;
mod state_machine;
mod tools;

#[cfg(test)]
mod tools_tests;

pub use answer::{Answer, Applied, ReportSummary, WatchEvent};
pub use command::{Command, OperatorAction, OutcomeReport, Report};
pub use namespace::{KillSwitch, NamespaceState, PolicyVersion};
pub use snapshot::{
    hex_digest, SnapshotReader, SnapshotWriter, FLEET_BYTES_MAX, RECORD_BYTES_MAX, SNAPSHOT_FORMAT,
};
pub use state_machine::{Fleet, SharedStateMachine, StateMachine};
pub use tools::{
    effect_of, judge_block, DisclosureVerdict, StoredBlock, ToolId, ToolImport, ToolImported,
    ToolRecord, ToolRegistry,
};
