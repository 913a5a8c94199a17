//! What the agent hands the gate (a tool's name, how an attempt failed) and
//! what the gate hands back (the call's context, its output).

use crate::error::ClientError;
use crate::Layer;
use fusebox_core::breaker::BreakerState;
use fusebox_core::{BackendName, OutcomeClass, ServerName, ToolName};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One tool, optionally on one backend, with its names validated once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ToolRef {
    pub(crate) server: ServerName,
    pub(crate) tool: ToolName,
    pub(crate) backend: Option<BackendName>,
}

impl ToolRef {
    /// The tool `tool` on server `server`; names follow the core's rules.
    pub fn new(server: &str, tool: &str) -> Result<Self, ClientError> {
        Ok(ToolRef {
            server: ServerName::new(server).map_err(ClientError::invalid("server"))?,
            tool: ToolName::new(tool).map_err(ClientError::invalid("tool"))?,
            backend: None,
        })
    }

    /// The same tool narrowed to one backend (breakers scoped
    /// `tool_and_backend` key on it).
    pub fn on_backend(mut self, backend: &str) -> Result<Self, ClientError> {
        self.backend = Some(BackendName::new(backend).map_err(ClientError::invalid("backend"))?);
        Ok(self)
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        self.server.as_str()
    }

    /// The tool's name.
    pub fn tool(&self) -> &str {
        self.tool.as_str()
    }

    /// The backend, if narrowed.
    pub fn backend(&self) -> Option<&str> {
        self.backend.as_ref().map(BackendName::as_str)
    }
}

/// How one attempt of a tool call failed, classified honestly: the class
/// decides whether the breaker counts it and whether it may be retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolFailure {
    /// The class (a business "not found" is [`OutcomeClass::BusinessError`],
    /// not a failure of the tool).
    pub class: OutcomeClass,
    /// What the tool or transport said, passed on to the model.
    pub message: String,
    /// Whether the request may have reached the tool. A write whose request
    /// left without a definitive answer becomes ambiguous; one that never
    /// left releases its key.
    pub request_left: bool,
    /// The degradation mode the tool said it is in (`rate_limit`,
    /// `downstream_dependency_unavailable`, `queue_depth`), when it said
    /// one. [`crate::Client::call`] acts on what the tool's disclosure
    /// documents for that mode.
    pub mode: Option<String>,
}

impl ToolFailure {
    /// A failure of `class` after the request left (the cautious default).
    pub fn new(class: OutcomeClass, message: impl Into<String>) -> Self {
        ToolFailure {
            class,
            message: message.into(),
            request_left: true,
            mode: None,
        }
    }

    /// Records the degradation mode the tool reported (a header, an error
    /// code, a field of its answer): a mode its disclosure documents as
    /// failing fast ends the call without another attempt, and one that
    /// queues gives the next attempt the mode's p95 × 1.2.
    pub fn in_mode(mut self, trigger: impl Into<String>) -> Self {
        self.mode = Some(trigger.into());
        self
    }

    /// Marks that nothing was sent (connection refused, local validation):
    /// a write's key is released and the tool did nothing.
    pub fn before_sending(mut self) -> Self {
        self.request_left = false;
        self
    }
}

/// What one attempt is told: who it is, how long it has, and the token to
/// watch for cancellation (fired when its deadline expires or the journey is
/// cancelled).
#[derive(Clone, Debug)]
pub struct CallContext {
    /// The journey's intent id (one agent turn or user intent).
    pub intent_id: String,
    /// This attempt's id; every retry gets a new one.
    pub tool_call_id: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The attempt's deadline.
    pub deadline: Duration,
    /// Which layer set the deadline.
    pub deadline_layer: Layer,
    /// Fired when the deadline expires or the journey is cancelled; pass it
    /// to the transport so a slow call is stopped, not just abandoned.
    pub cancel: CancellationToken,
    /// The idempotency key, for writes (send it to the backend).
    pub idempotency_key: Option<String>,
    /// This attempt is a half-open probe holding a fleet-wide permit.
    pub probe: bool,
}

/// A successful call and how it was made.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOutput<T> {
    /// What the tool returned.
    pub value: T,
    /// Attempts made, the successful one included.
    pub attempts: u32,
    /// The breaker state the call was admitted under.
    pub circuit_state: BreakerState,
    /// Admitted without a fresh view of the cluster (`on_partition`).
    pub degraded: bool,
    /// The call ran as a half-open probe with a fleet-wide permit.
    pub probe: bool,
}

/// What the call that starts a tool's work answered: its result, or a
/// handle to work still running (an MCP task, a job id) for the caller's
/// `follow` to see to its end ([`Client::call_following`],
/// [`Client::write_following`]).
///
/// [`Client::call_following`]: crate::Client::call_following
/// [`Client::write_following`]: crate::Client::write_following
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Started<T, H> {
    /// The work finished within the call.
    Done(T),
    /// The work runs on; the handle is given to `follow`.
    Running(H),
}
