//! Errors a model can plan around.
//!
//! Each variant is one thing an agent can do something about, and its
//! `Display` is one lowercase line that says what happened and what to do
//! next ("tax_lookup is unavailable for about 18 s; continue without it").
//! [`ClientError::kind`] gives the stable snake_case name code can branch on.

use crate::decision::Evidence;
use fusebox_core::breaker::BreakerState;
use fusebox_core::OutcomeClass;
use std::fmt;
use thiserror::Error;

/// Which deadline expired, from the innermost out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The tool's own deadline (policy `timeout_ms` or disclosed p99 × 1.2).
    Tool,
    /// The journey's budget less its reserve for the final answer: the agent
    /// runtime stopped the call so the turn can still answer in time.
    Journey,
    /// A call to the Fusebox cluster itself (ledger, probe permit).
    Cluster,
}

impl Layer {
    /// The stable name used in errors, spans and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Tool => "tool",
            Layer::Journey => "journey",
            Layer::Cluster => "fusebox_cluster",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `intent_id` slot of the variants stamped at the journey's entry
/// points (`Timeout` and `BudgetExhausted` are made with their id): one list
/// of variants for reading and for stamping.
macro_rules! stamped_intent {
    ($error:expr) => {
        match $error {
            ClientError::CircuitOpen { intent_id, .. }
            | ClientError::WritesBlocked { intent_id, .. }
            | ClientError::InProgress { intent_id, .. }
            | ClientError::AmbiguousOutcome { intent_id, .. }
            | ClientError::Mismatch { intent_id, .. }
            | ClientError::WriteNotReplayable { intent_id, .. }
            | ClientError::PartitionFailClosed { intent_id, .. }
            | ClientError::ToolFailed { intent_id, .. }
            | ClientError::Cancelled { intent_id, .. }
            | ClientError::ClusterUnavailable { intent_id, .. }
            | ClientError::Cluster { intent_id, .. }
            | ClientError::InvalidArgument { intent_id, .. } => Some(intent_id),
            ClientError::Timeout { .. } | ClientError::BudgetExhausted { .. } => None,
        }
    };
}

/// Everything that can stop a tool call, worded for the model.
#[derive(Debug, Error)]
pub enum ClientError {
    /// A breaker rejects the tool (or its whole server) without calling it.
    #[error("{tool} is unavailable{}{}{}; continue without it{}{}", forced_by(forced.as_deref()), for_about(*retry_after_ms), whole(*whole_server, server), evidence_note(*evidence), intent_note(intent_id.as_deref()))]
    CircuitOpen {
        /// The tool refused.
        tool: String,
        /// Its server.
        server: String,
        /// True when the server's breaker, not the tool's, is out: sibling
        /// tools on the server are out too.
        whole_server: bool,
        /// The refusing state (open, half-open with no permit, forced open).
        state: BreakerState,
        /// How long until a retry may be admitted, when known.
        retry_after_ms: Option<u64>,
        /// The decision was made without a fresh view of the cluster.
        degraded: bool,
        /// When an operator forced it open: who, and the reason they gave
        /// (shown to the model, which can pass it on).
        forced: Option<Box<Forced>>,
        /// What the refusal was decided from (fresh, cached with its age,
        /// this replica's own breakers, or no view at all).
        evidence: Evidence,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// A deadline expired; the call was cancelled.
    #[error("{tool} timed out after {elapsed_ms} ms ({layer} deadline of {deadline_ms} ms; intent {intent_id}); {}", timeout_advice(*layer))]
    Timeout {
        /// The tool called.
        tool: String,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: String,
        /// The layer whose deadline expired.
        layer: Layer,
        /// Time spent in the attempt when it was stopped.
        elapsed_ms: u64,
        /// The deadline that expired.
        deadline_ms: u64,
    },
    /// The journey has no budget left for another call once its reserve for
    /// the final answer is kept.
    #[error("no time left for {tool}: {elapsed_ms} ms of the {budget_ms} ms turn are spent and {reserve_ms} ms are kept to answer (intent {intent_id}); answer with what you have")]
    BudgetExhausted {
        /// The tool that would have been called.
        tool: String,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: String,
        /// Time the journey has run.
        elapsed_ms: u64,
        /// The journey's total budget.
        budget_ms: u64,
        /// The part kept for the final answer.
        reserve_ms: u64,
    },
    /// The namespace's write kill switch blocks every write-effect tool.
    #[error("{tool} is a write and writes are blocked by an operator ({reason}); reads still work, do not retry the write{}", intent_note(intent_id.as_deref()))]
    WritesBlocked {
        /// The write tool refused.
        tool: String,
        /// The operator's reason.
        reason: String,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// Another attempt holds the idempotency key right now.
    #[error("{tool} with key {key} is already running in another attempt; wait about {} s and check its result, do not start it again{}", secs(*retry_after_ms), intent_note(intent_id.as_deref()))]
    InProgress {
        /// The write tool.
        tool: String,
        /// The idempotency key.
        key: String,
        /// The attempt holding the key.
        holder_attempt_id: String,
        /// When its lease lapses, from now.
        retry_after_ms: u64,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// A write's outcome is unknown: it may or may not have happened.
    #[error("{tool} with key {key} may or may not have happened ({reason}); do not retry it, report key {key} so an operator can check and resolve it{}", intent_note(intent_id.as_deref()))]
    AmbiguousOutcome {
        /// The write tool.
        tool: String,
        /// The idempotency key to look up.
        key: String,
        /// The attempt whose outcome is unknown.
        attempt_id: String,
        /// Why it is unknown.
        reason: String,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// The key was used before for a different request.
    #[error("{tool}: key {key} was already used for a different request; this is a bug in the key, do not retry{}", intent_note(intent_id.as_deref()))]
    Mismatch {
        /// The write tool.
        tool: String,
        /// The reused key.
        key: String,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// A write under this key already ended without success; the ledger
    /// replays that end rather than run the write again.
    #[error(
        "{tool} with key {key} already ended as {status}{}; it will not run again under this key{}",
        reason_note(reason),
        intent_note(intent_id.as_deref())
    )]
    WriteNotReplayable {
        /// The write tool.
        tool: String,
        /// The idempotency key.
        key: String,
        /// The stored end (`failed`, `abandoned`).
        status: String,
        /// The stored reason, if any.
        reason: Option<String>,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// The cluster has been unreachable too long and the tool's policy says
    /// to fail closed.
    #[error("{tool} is unavailable: the breaker service has been unreachable for {view_age_ms} ms and this tool fails closed; continue without it{}", intent_note(intent_id.as_deref()))]
    PartitionFailClosed {
        /// The tool refused.
        tool: String,
        /// How old the view is.
        view_age_ms: u64,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// The tool answered with a failure (or a business error).
    #[error("{tool} failed ({}): {message}{}{}", class.as_str(), attempts_note(*attempts), intent_note(intent_id.as_deref()))]
    ToolFailed {
        /// The tool called.
        tool: String,
        /// How the last attempt ended.
        class: OutcomeClass,
        /// What the tool said.
        message: String,
        /// Attempts made, retries included.
        attempts: u32,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// The journey was cancelled by its owner while the call ran.
    #[error("{tool} was cancelled after {elapsed_ms} ms because the turn was cancelled{}", intent_note(intent_id.as_deref()))]
    Cancelled {
        /// The tool called.
        tool: String,
        /// Time spent in the attempt.
        elapsed_ms: u64,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// No node of the cluster answered.
    #[error("fusebox cluster unreachable during {operation}: {message}{}", intent_note(intent_id.as_deref()))]
    ClusterUnavailable {
        /// The cluster call that failed.
        operation: &'static str,
        /// The last node's error.
        message: String,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// The cluster refused a request.
    #[error("fusebox refused {operation} ({code:?}): {message}{}", intent_note(intent_id.as_deref()))]
    Cluster {
        /// The cluster call that failed.
        operation: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The server's `ErrorCode`, when it attached one.
        error_code: Option<i32>,
        /// The server's message.
        message: String,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
    /// A name or setting is malformed.
    #[error("invalid {field}: {message}{}", intent_note(intent_id.as_deref()))]
    InvalidArgument {
        /// The offending field.
        field: String,
        /// What is wrong.
        message: String,
        /// The journey's intent (correlation) id, for the user to quote.
        intent_id: Option<String>,
    },
}

impl ClientError {
    /// The stable snake_case name of the error, for code and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::CircuitOpen { .. } => "circuit_open",
            ClientError::Timeout { .. } => "timeout",
            ClientError::BudgetExhausted { .. } => "budget_exhausted",
            ClientError::WritesBlocked { .. } => "writes_blocked",
            ClientError::InProgress { .. } => "in_progress",
            ClientError::AmbiguousOutcome { .. } => "ambiguous_outcome",
            ClientError::Mismatch { .. } => "mismatch",
            ClientError::WriteNotReplayable { .. } => "write_not_replayable",
            ClientError::PartitionFailClosed { .. } => "partition_fail_closed",
            ClientError::ToolFailed { .. } => "tool_failed",
            ClientError::Cancelled { .. } => "cancelled",
            ClientError::ClusterUnavailable { .. } => "cluster_unavailable",
            ClientError::Cluster { .. } => "cluster_refused",
            ClientError::InvalidArgument { .. } => "invalid_argument",
        }
    }

    /// Whether the cluster answered and refused (a quota, a permission, a
    /// bad request), as opposed to not answering: sending it again as is
    /// will not help.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ClientError::Cluster { .. } | ClientError::InvalidArgument { .. }
        )
    }

    /// The intent (correlation) id of the journey the error ended, when it
    /// ended one: the id the user can quote.
    pub fn intent_id(&self) -> Option<&str> {
        match self {
            ClientError::Timeout { intent_id, .. }
            | ClientError::BudgetExhausted { intent_id, .. } => Some(intent_id),
            other => stamped_intent!(other).and_then(|id| id.as_deref()),
        }
    }

    /// The error, stamped with the journey it ended (kept if already set).
    pub(crate) fn in_intent(mut self, id: &str) -> ClientError {
        if let Some(slot) = stamped_intent!(&mut self) {
            slot.get_or_insert_with(|| id.to_owned());
        }
        self
    }

    /// The one-line message for the model (the `Display` text).
    pub fn model_message(&self) -> String {
        self.to_string()
    }

    /// Builds a mapper from a core validation error for `field`.
    pub(crate) fn invalid(field: &'static str) -> impl Fn(fusebox_core::CoreError) -> ClientError {
        move |e| ClientError::InvalidArgument {
            intent_id: None,
            field: field.to_owned(),
            message: e.to_string(),
        }
    }
}

fn secs(ms: u64) -> u64 {
    ms.div_ceil(1_000).max(1)
}

/// An operator's forced-open, as a refused agent is told of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forced {
    /// Who forced it.
    pub by: String,
    /// Why, in the operator's words.
    pub reason: String,
}

fn forced_by(forced: Option<&Forced>) -> String {
    forced.map_or_else(String::new, |f| {
        format!(" (an operator, {}, closed it off: {})", f.by, f.reason)
    })
}

fn for_about(retry_after_ms: Option<u64>) -> String {
    retry_after_ms.map_or_else(String::new, |ms| format!(" for about {} s", secs(ms)))
}

fn whole(whole_server: bool, server: &str) -> String {
    if whole_server {
        format!(" (its whole server {server} is out, so its sibling tools are too)")
    } else {
        String::new()
    }
}

fn evidence_note(evidence: Evidence) -> String {
    match evidence {
        Evidence::Fresh => String::new(),
        other => format!(" (decided {})", other.describe()),
    }
}

fn intent_note(intent_id: Option<&str>) -> String {
    intent_id.map_or_else(String::new, |id| format!(" (intent {id})"))
}

fn timeout_advice(layer: Layer) -> &'static str {
    match layer {
        Layer::Tool => "the tool is slow right now, continue without it or try later",
        Layer::Journey => "the turn's time budget is nearly spent, answer with what you have",
        Layer::Cluster => "the breaker service is slow, try again shortly",
    }
}

fn attempts_note(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

fn reason_note(reason: &Option<String>) -> String {
    reason
        .as_deref()
        .map_or_else(String::new, |r| format!(" ({r})"))
}
