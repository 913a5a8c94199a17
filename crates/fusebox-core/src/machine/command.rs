//! What the log carries: one command per entry, stamped with the leader's time.
//!
//! [`Command::validate`] states every rule a command's fields must keep, in
//! one place. The server calls it before proposing (a bad request costs no
//! log entry) and the state machine calls it again on every entry it applies
//! (an entry comes from disk or a peer, and every replica must refuse it
//! alike); the handlers behind it only `debug_assert!` what it checked.

use crate::auth::AuthChange;
use crate::breaker::BreakerKey;
use crate::error::{check_len, check_max_len, CoreError};
use crate::ledger::{check_lease, BeginRequest, CompleteRequest, RenewRequest, ResolveRequest};
use crate::limits::{
    BATCH_OUTCOMES_MAX, FORCE_OPEN_MS_MAX, ID_BYTES_MAX, LEDGER_BATCH_OPS_MAX, REASON_BYTES_MAX,
    REPORTS_PER_BATCH_MAX,
};
use crate::name::{BackendName, Namespace, ReplicaId, ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::policy::PolicyDocument;
use crate::tools::{check_import, ToolImport};
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
    /// Allow every call, until lifted or for `for_ms`.
    Disable {
        /// How long; `None` holds until an operator acts.
        for_ms: Option<u64>,
    },
    /// Decide and count, never reject, until lifted or for `for_ms`.
    MetricsOnly {
        /// How long; `None` holds until an operator acts.
        for_ms: Option<u64>,
    },
}

impl OperatorAction {
    /// How long the operator's state is to last, if bounded.
    pub fn for_ms(&self) -> Option<u64> {
        match self {
            OperatorAction::ForceOpen { for_ms }
            | OperatorAction::Disable { for_ms }
            | OperatorAction::MetricsOnly { for_ms } => *for_ms,
            OperatorAction::Reset => None,
        }
    }
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
        /// The replica's batch number, growing (0: unnumbered); a batch at
        /// or below the last one counted is a resend and counts nothing.
        batch_seq: u64,
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
        /// How long the permit is held, in ms, if the caller says (its call's
        /// deadline); else the policy's `probe_lease_ms`. 1 to `LEASE_MS_MAX`.
        lease_ms: Option<u64>,
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
    /// Ledger `renew`: the holder of a key extends its lease.
    Renew {
        /// The namespace.
        namespace: Namespace,
        /// The request.
        request: RenewRequest,
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
        /// The document.
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
    /// Change who may call: principals, tokens, enforcement.
    Auth {
        /// The change.
        change: AuthChange,
        /// Who made it (the authenticated caller).
        actor: String,
    },
    /// Delete a namespace with no live state: its policy versions, its
    /// closed breakers and its imported tools go, and its place under
    /// [`crate::limits::NAMESPACES_MAX`] is freed. Refused while it holds
    /// ledger records, a breaker that is not closed (or has a probe out),
    /// or a thrown kill switch.
    DeleteNamespace {
        /// The namespace.
        namespace: Namespace,
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
    /// Many ledger `begin` and `complete` calls in one entry: the leader
    /// coalesces concurrent calls so a busy fleet's writes cost few log
    /// entries. Each is applied in order, as if alone, and answered on its
    /// own; one refused call refuses only itself.
    LedgerBatch {
        /// 1 to [`crate::limits::LEDGER_BATCH_OPS_MAX`] calls.
        ops: Vec<LedgerOp>,
    },
}

/// One ledger call in a [`Command::LedgerBatch`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LedgerOp {
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
}

impl LedgerOp {
    /// The command this call is when it travels alone.
    pub fn into_command(self) -> Command {
        match self {
            LedgerOp::Begin { namespace, request } => Command::Begin { namespace, request },
            LedgerOp::Complete { namespace, request } => Command::Complete { namespace, request },
        }
    }

    /// Checks the call's fields, as [`Command::validate`] does alone.
    pub fn validate(&self) -> Result<(), CoreError> {
        match self {
            LedgerOp::Begin { request, .. } => request.validate(),
            LedgerOp::Complete { request, .. } => request.validate(),
        }
    }
}

/// One replica's outcome report, as a [`Command::ReportBatch`] carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The namespace all outcomes belong to.
    pub namespace: Namespace,
    /// The reporting replica.
    pub replica: ReplicaId,
    /// The replica's batch number, growing (0: unnumbered).
    pub batch_seq: u64,
    /// The outcomes.
    pub outcomes: Vec<OutcomeReport>,
}

impl Command {
    /// Whether what this command does to the fleet depends on what the
    /// ledger holds: deleting a namespace is refused while it holds records.
    /// A store that keeps the ledger ahead of the fleet (and replays the log
    /// with [`StateMachine::replay`](super::StateMachine::replay) after a
    /// restart) must save the fleet with such an entry, so that no replay
    /// decides it again against a ledger that has moved on.
    pub fn fleet_reads_ledger(&self) -> bool {
        matches!(self, Command::DeleteNamespace { .. })
    }

    /// Checks every field of the command against its rule and bound; the
    /// state is not consulted, so the answer is the same everywhere.
    pub fn validate(&self) -> Result<(), CoreError> {
        match self {
            Command::ReportOutcomes { outcomes, .. } => check_report(outcomes.len()),
            Command::ReportBatch { reports } => check_batch(reports),
            Command::AcquireProbe { key, lease_ms, .. } => {
                key.check()?;
                lease_ms.map_or(Ok(()), check_lease)
            }
            Command::ReleaseProbe { key, .. } => key.check(),
            Command::Operate {
                key,
                action,
                actor,
                reason,
            } => {
                key.check()?;
                check_change(actor, reason)?;
                check_force_open(action)
            }
            Command::Begin { request, .. } => request.validate(),
            Command::Complete { request, .. } => request.validate(),
            Command::Resolve { request, .. } => request.validate(),
            Command::Renew { request, .. } => request.validate(),
            Command::ApplyPolicy {
                document,
                actor,
                reason,
                ..
            } => {
                check_change(actor, reason)?;
                let problems = document.validate();
                if problems.is_empty() {
                    Ok(())
                } else {
                    Err(CoreError::InvalidPolicy(problems))
                }
            }
            Command::RollbackPolicy { actor, reason, .. }
            | Command::SetKillSwitch { actor, reason, .. }
            | Command::DeleteNamespace { actor, reason, .. } => check_change(actor, reason),
            // Each call is checked when it is applied, so one bad call
            // refuses only itself.
            Command::LedgerBatch { ops } => check_ledger_batch(ops.len()),
            Command::Tick => Ok(()),
            Command::ImportTools { tools, actor, .. } => check_import(tools, actor),
            Command::Auth { change, actor } => {
                check_len("actor", actor, ID_BYTES_MAX)?;
                change.validate()
            }
        }
    }
}

/// Who made an operator change (required) and why (optional), both bounded.
fn check_change(actor: &str, reason: &str) -> Result<(), CoreError> {
    check_len("actor", actor, ID_BYTES_MAX)?;
    check_max_len("reason", reason, REASON_BYTES_MAX)
}

/// An operator's period (forced open, disabled, metrics only), when given,
/// lasts 1 ms to [`FORCE_OPEN_MS_MAX`].
fn check_force_open(action: &OperatorAction) -> Result<(), CoreError> {
    match action.for_ms() {
        Some(ms) if ms == 0 || ms > FORCE_OPEN_MS_MAX => Err(CoreError::invalid(
            "duration_ms",
            format!("must be 1..={FORCE_OPEN_MS_MAX}, got {ms}"),
        )),
        _ => Ok(()),
    }
}

/// One replica's report carries at most [`BATCH_OUTCOMES_MAX`] outcomes.
fn check_report(outcomes: usize) -> Result<(), CoreError> {
    if outcomes > BATCH_OUTCOMES_MAX {
        let reason = format!("{outcomes} in one batch, at most {BATCH_OUTCOMES_MAX}");
        return Err(CoreError::invalid("outcomes", reason));
    }
    Ok(())
}

/// One coalesced entry carries at most [`REPORTS_PER_BATCH_MAX`] reports
/// with at most [`BATCH_OUTCOMES_MAX`] outcomes among them.
fn check_ledger_batch(ops: usize) -> Result<(), CoreError> {
    if ops == 0 || ops > LEDGER_BATCH_OPS_MAX {
        return Err(CoreError::invalid(
            "ops",
            format!("{ops} ledger calls in one batch, 1 to {LEDGER_BATCH_OPS_MAX} allowed"),
        ));
    }
    Ok(())
}

fn check_batch(reports: &[Report]) -> Result<(), CoreError> {
    let outcomes: usize = reports.iter().map(|r| r.outcomes.len()).sum();
    if reports.len() > REPORTS_PER_BATCH_MAX || outcomes > BATCH_OUTCOMES_MAX {
        return Err(CoreError::invalid(
            "reports",
            format!(
                "{} reports with {outcomes} outcomes in one batch, at most \
                 {REPORTS_PER_BATCH_MAX} with {BATCH_OUTCOMES_MAX}",
                reports.len()
            ),
        ));
    }
    Ok(())
}
