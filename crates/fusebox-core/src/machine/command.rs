//! What the log carries: one command per entry, stamped with the leader's time.

use super::tools::ToolImport;
use crate::breaker::BreakerKey;
use crate::ledger::{BeginRequest, CompleteRequest, ResolveRequest};
use crate::name::{BackendName, Namespace, ReplicaId, ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::policy::PolicyDocument;
use serde::{Deserialize, Serialize};

/// One tool call's outcome, as a replica reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeReport {
    /// The tool server.
    pub server: ServerName,
    /// The tool.
    pub tool: ToolName,
    /// The backend, for tools scoped `tool_and_backend`.
    pub backend: Option<BackendName>,
    /// How the call ended.
    pub class: OutcomeClass,
    /// How long it took.
    pub duration_ms: u64,
    /// The server breaker's generation the replica saw.
    pub server_generation: u64,
    /// The tool breaker's generation the replica saw.
    pub tool_generation: u64,
}

/// What an operator does to a breaker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatorAction {
    /// Reject every call, until lifted or for `for_ms`.
    ForceOpen {
        /// How long; `None` holds until an operator acts.
        for_ms: Option<u64>,
    },
    /// Back to the automatic machine, closed, with fresh evidence.
    Reset,
    /// Allow every call.
    Disable,
    /// Decide and count, never reject.
    MetricsOnly,
}

/// One replicated command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// A batch of outcomes from one replica (one entry carries many).
    ReportOutcomes {
        /// The namespace all outcomes belong to.
        namespace: Namespace,
        /// The reporting replica.
        replica: ReplicaId,
        /// The outcomes, at most [`crate::limits::BATCH_OUTCOMES_MAX`].
        outcomes: Vec<OutcomeReport>,
    },
    /// Many replicas' outcome reports in one entry: the leader coalesces
    /// concurrent `ReportOutcomes` calls so a busy fleet costs few log
    /// entries. Each report is applied in order, as if alone.
    ReportBatch {
        /// At most [`crate::limits::REPORTS_PER_BATCH_MAX`] reports, with at
        /// most [`crate::limits::BATCH_OUTCOMES_MAX`] outcomes among them.
        reports: Vec<Report>,
    },
    /// Ask for a half-open probe permit.
    AcquireProbe {
        /// The breaker.
        key: BreakerKey,
        /// Who would call.
        replica: ReplicaId,
    },
    /// Return a probe permit with the probe's outcome.
    ReleaseProbe {
        /// The breaker.
        key: BreakerKey,
        /// The permit granted.
        permit_id: u64,
        /// The generation it was granted under.
        generation: u64,
        /// How the probe ended.
        outcome: OutcomeClass,
    },
    /// An operator steers a breaker.
    Operate {
        /// The breaker.
        key: BreakerKey,
        /// What to do.
        action: OperatorAction,
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
    /// Ledger `begin`.
    Begin {
        /// The namespace.
        namespace: Namespace,
        /// The request.
        request: BeginRequest,
    },
    /// Ledger `complete`.
    Complete {
        /// The namespace.
        namespace: Namespace,
        /// The request.
        request: CompleteRequest,
    },
    /// Ledger `resolve`.
    Resolve {
        /// The namespace.
        namespace: Namespace,
        /// The request.
        request: ResolveRequest,
    },
    /// Store a new policy version.
    ApplyPolicy {
        /// The namespace.
        namespace: Namespace,
        /// The document (validated again on apply).
        document: Box<PolicyDocument>,
        /// Who applied it.
        actor: String,
        /// Why, in the operator's words (may be empty).
        reason: String,
    },
    /// Store an earlier version's content as a new version.
    RollbackPolicy {
        /// The namespace.
        namespace: Namespace,
        /// The version to return to.
        version: u64,
        /// Who rolled back.
        actor: String,
        /// Why.
        reason: String,
    },
    /// Throw or lift the write kill switch.
    SetKillSwitch {
        /// The namespace.
        namespace: Namespace,
        /// Whether write-effect tools are blocked.
        writes_blocked: bool,
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
    /// Apply what time alone changes (open periods, leases, retention).
    Tick,
    /// Replace one tool server's tool list in a namespace with an imported
    /// manifest (an MCP `tools/list`): hints and raw disclosure blocks, each
    /// block judged on apply at the entry's time.
    ImportTools {
        /// The namespace.
        namespace: Namespace,
        /// The tool server the manifest describes.
        server: ServerName,
        /// The manifest's tools, at most
        /// [`crate::limits::TOOLS_PER_SERVER_MAX`], names unique.
        tools: Vec<ToolImport>,
        /// Who imported it.
        actor: String,
    },
}

/// One replica's outcome report, as a [`Command::ReportBatch`] carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The namespace all outcomes belong to.
    pub namespace: Namespace,
    /// The reporting replica.
    pub replica: ReplicaId,
    /// The outcomes.
    pub outcomes: Vec<OutcomeReport>,
}
