//! What applying a command returns: a typed answer and the watch events.

use super::namespace::KillSwitch;
use super::watch_event::WatchEvent;
use crate::breaker::{BreakerView, ProbeAnswer, ProbeResult};
use crate::error::CoreError;
use crate::ledger::{BeginAnswer, CompleteAnswer, RenewAnswer, ResolveAnswer};
use crate::tools::ToolImported;
use serde::{Deserialize, Serialize};

/// How a batch of outcome reports was taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportSummary {
    /// Breaker updates that counted as evidence (up to two per outcome:
    /// the server's breaker and the tool's).
    pub counted: u32,
    /// Updates fenced off by a stale generation.
    pub stale: u32,
    /// Updates that carried no evidence or met a breaker not counting.
    pub ignored: u32,
    /// Outcomes dropped because the namespace holds its maximum of breakers.
    pub dropped_limit: u32,
    /// Outcomes of a batch counted before (a resend after a lost answer).
    pub duplicate: u32,
}

/// The typed answer to one command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Answer {
    /// To `ReportOutcomes`.
    Reported(ReportSummary),
    /// To `ReportBatch`: each report's own answer, in order.
    ReportedBatch(Vec<Result<ReportSummary, CoreError>>),
    /// To `AcquireProbe`.
    Probe(ProbeAnswer),
    /// To `ReleaseProbe`.
    ProbeReleased(ProbeResult),
    /// To `Operate`: the breaker after the change.
    Breaker(Box<BreakerView>),
    /// To ledger `begin`.
    Begin(BeginAnswer),
    /// To ledger `complete`.
    Complete(CompleteAnswer),
    /// To ledger `resolve`.
    Resolve(ResolveAnswer),
    /// To ledger `renew`.
    Renew(RenewAnswer),
    /// To `ApplyPolicy` and `RollbackPolicy`: the version now in force.
    PolicyApplied {
        /// The new version number.
        version: u64,
    },
    /// To `SetKillSwitch`.
    KillSwitch(KillSwitch),
    /// To `Tick`: how many timers fired.
    Ticked {
        /// Breaker and ledger deadlines applied.
        timers: u32,
    },
    /// The command was refused; the state did not change.
    Rejected(CoreError),
    /// To `ImportTools`: what became of each tool, in manifest order.
    ToolsImported(Vec<ToolImported>),
    /// To `Auth`: the table's version after the change.
    AuthChanged {
        /// [`crate::auth::AuthTable::version`] now.
        version: u64,
    },
    /// To `DeleteNamespace`: what went with it.
    NamespaceDeleted(NamespaceDeleted),
    /// To `LedgerBatch`: each call's own answer, in order (`Begin`,
    /// `Complete` or `Rejected`).
    LedgerBatch(Vec<Answer>),
}

/// What deleting a namespace removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceDeleted {
    /// Closed breakers.
    pub breakers: u32,
    /// Imported tools.
    pub tools: u32,
    /// Stored policy versions.
    pub policy_versions: u32,
}

/// The result of applying one command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// The answer for the caller.
    pub answer: Answer,
    /// The changes for watchers, in revision order.
    pub events: Vec<WatchEvent>,
    /// The state's revision once the command was applied (its last event's,
    /// or the one before it if it changed nothing watched).
    pub revision: u64,
}
