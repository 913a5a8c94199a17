//! The replicated state machine: one type that applies every command.
//!
//! The server's Raft log carries [`Command`]s stamped with the leader's
//! clock; [`StateMachine::apply`] checks one ([`Command::validate`]), applies
//! it and returns a typed [`Answer`] plus the [`WatchEvent`]s it caused,
//! each with a revision. The state encodes to a snapshot and hashes to a
//! digest so replicas can be compared.
//!
//! Layout: `state_machine.rs` holds the state and `apply`, a short table of
//! contents; each family of commands has its own file of handlers
//! (`breakers`, `outcomes`, `ledger`, `policy`, `tools`, and `fleet` for
//! what time alone changes).
//!
//! Determinism: entry stamps move the state's clock only forward and at a
//! bounded pace (`clock.rs`), every collection is ordered, and nothing reads a
//! clock or a random source. Refused commands change nothing and answer
//! [`Answer::Rejected`] on every replica alike.

mod answer;
mod breakers;
mod clock;
mod command;
mod fleet;
mod ledger;
mod namespace;
mod namespace_delete;
mod outcomes;
mod policy;
mod report_marks;
mod snapshot;
mod state_machine;
mod tools;
mod watch_event;

#[cfg(test)]
mod tests;

pub use answer::{Answer, Applied, NamespaceDeleted, ReportSummary};
pub use clock::StateClock;
pub use command::{Command, LedgerOp, OperatorAction, OutcomeReport, Report};
pub use fleet::Fleet;
pub use namespace::{KillSwitch, NamespaceState, PolicyVersion};
pub use snapshot::{hex_digest, SnapshotReader, SnapshotWriter, SNAPSHOT_FORMAT};
pub use state_machine::{SharedStateMachine, StateMachine};
pub use watch_event::WatchEvent;
