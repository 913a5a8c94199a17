//! The tool servers behind the gateway: an MCP client session to each, over
//! Streamable HTTP or to a child process on stdio.
//!
//! A session that fails is made again: a call that finds the transport
//! closed (the upstream restarted, its process died) drops the session, and
//! the next request connects anew, at most once per [`RECONNECT_PAUSE`].
//! Between attempts requests fail at once as transport failures, which the
//! gate counts against the server like any other.
//!
//! Each `tools/call` sent upstream is cancelled (`notifications/cancelled`)
//! when the gateway stops waiting for it: the deadline passed, the agent
//! gave up, or the gateway is stopping. Progress notifications the upstream
//! sends for a call are passed to the agent that asked for them, under the
//! agent's own progress token.
//!
//! Sessions declare the MCP tasks extension (SEP-2663), so an upstream may
//! answer a `tools/call` with a task handle ([`Called::Task`]); the gate
//! then polls it with [`Upstream::poll_task`], and a task it stops
//! following is cancelled upstream (`tasks/cancel`).

use crate::config::{UpstreamAt, UpstreamConfig};
use crate::import::Importer;
use crate::GatewayError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelTaskParams,
    CancelledNotificationParam, ClientConfig, ClientRequest, ErrorData, GetTaskParams, JsonObject,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestId, RequestMetaObject,
    ServerPeerInfo, ServerResult, Task, TaskPayload, Tool, TASKS_EXTENSION_ID,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt as _, NotificationContext, PeerRequestOptions,
    RunningService,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, RoleServer, ServiceError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long connecting to an upstream (and its `initialize`) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The least time between two attempts to connect to one upstream.
pub const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
/// How long listing an upstream's tools may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long an idle connection to an upstream is kept for the next call.
const IDLE_CONNECTION_KEPT: Duration = Duration::from_secs(30);
/// Most idle connections kept per upstream host.
const IDLE_CONNECTIONS_MAX: usize = 64;
/// How long opening a TCP connection to an upstream may take.
const TCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most tools read from one upstream (the cluster imports at most 512).
pub const TOOLS_MAX: usize = 512;
/// Most calls at once whose progress is passed on, per upstream; past it a
/// call still runs, without progress.
const PROGRESS_ROUTES_MAX: usize = 4096;

/// How soon a task is polled when its upstream suggests no interval, and
/// the bounds on what it suggests.
const TASK_POLL_DEFAULT: Duration = Duration::from_millis(500);
const TASK_POLL_MIN: Duration = Duration::from_millis(50);
const TASK_POLL_MAX: Duration = Duration::from_secs(5);
/// How long sending `tasks/cancel` for an abandoned task may take.
const TASK_CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// Most tool schemas kept per upstream (past it they are forgotten and
/// read again at the next listing).
const SCHEMAS_MAX: usize = 2 * TOOLS_MAX;

/// Where the progress of one upstream call goes: the agent's session and
/// the token the agent chose.
pub type ProgressTarget = (Peer<RoleServer>, ProgressToken);

/// The upstream's progress tokens of calls in flight, to the agents'.
#[derive(Clone, Default)]
struct ProgressRoutes(Arc<Mutex<HashMap<ProgressToken, ProgressTarget>>>);

impl ProgressRoutes {
    fn insert(&self, token: ProgressToken, target: ProgressTarget) -> bool {
        let mut routes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if routes.len() >= PROGRESS_ROUTES_MAX {
            return false;
        }
        routes.insert(token, target);
        true
    }

    fn get(&self, token: &ProgressToken) -> Option<ProgressTarget> {
        let routes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        routes.get(token).cloned()
    }

    fn remove(&self, token: &ProgressToken) {
        let mut routes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        routes.remove(token);
    }
}

/// The gateway's side of an upstream session: it passes progress on.
#[derive(Clone, Default)]
struct UpstreamHandler {
    routes: ProgressRoutes,
}

impl ClientHandler for UpstreamHandler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
        info
    }

    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let Some((agent, token)) = self.routes.get(&params.progress_token) else {
            return;
        };
        params.progress_token = token;
        if let Err(e) = agent.notify_progress(params).await {
            tracing::debug!(error = %e, "progress not passed to the agent");
        }
    }
}

type Session = RunningService<RoleClient, UpstreamHandler>;

/// The current session, if any, and when the last attempt to make one was.
#[derive(Default)]
struct Slot {
    session: Option<Arc<Session>>,
    /// Counts sessions made, to tell whether a failed one is still current.
    generation: u64,
    tried: Option<Instant>,
}

/// A session's peer, and which session it is.
#[derive(Clone)]
struct Lease {
    peer: Peer<RoleClient>,
    generation: u64,
}

/// One upstream: its name, where it is, and a session made on demand.
pub struct Upstream {
    /// The configured name: the breakers' server.
    pub name: String,
    at: UpstreamAt,
    handler: UpstreamHandler,
    slot: tokio::sync::Mutex<Slot>,
    info: Mutex<Option<Arc<ServerPeerInfo>>>,
    importer: Option<Importer>,
    /// Each listed tool's `inputSchema`, compiled.
    schemas: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

/// What an upstream answered a `tools/call` with.
#[derive(Debug)]
pub enum Called {
    /// The tool's result.
    Result(CallToolResult),
    /// A task still running: its id and when to poll it first.
    Task(TaskHandle),
}

/// A task an upstream is running for a call (SEP-2663).
#[derive(Clone, Debug)]
pub struct TaskHandle {
    /// The upstream's task id.
    pub id: String,
    /// How long to wait before the next poll.
    pub poll_after: Duration,
}

/// What a poll of a task found.
#[derive(Debug)]
pub enum TaskState {
    /// Still running; poll again after the given wait.
    Running(Duration),
    /// The task waits for input from the caller (which a gateway cannot give).
    InputRequired,
    /// Done: the tool's result.
    Done(CallToolResult),
    /// Ended by a JSON-RPC error.
    Failed(ErrorData),
    /// Cancelled upstream.
    Cancelled,
}

/// The wait before polling a task, as its upstream suggests, within bounds.
fn poll_after(task: &Task) -> Duration {
    task.poll_interval_ms
        .map_or(TASK_POLL_DEFAULT, Duration::from_millis)
        .clamp(TASK_POLL_MIN, TASK_POLL_MAX)
}

/// Why a call's arguments do not fit its tool's `inputSchema`.
#[derive(Debug, PartialEq, Eq)]
pub struct InvalidArguments(pub String);

/// A call sent upstream that is cancelled there if dropped unanswered.
struct InFlight {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    token: ProgressToken,
    routes: ProgressRoutes,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.routes.remove(&self.token);
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let reason = "the fusebox gateway stopped waiting (deadline or caller)";
            let cancelled = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
            if let Err(e) = peer.notify_cancelled(cancelled).await {
                tracing::debug!(error = %e, "notifications/cancelled not sent upstream");
            }
        });
    }
}

impl Upstream {
    /// An upstream not yet connected. `importer` (when given) takes the
    /// upstream's tool annotations into the cluster at every new session.
    pub fn new(
        config: &UpstreamConfig,
        importer: Option<Importer>,
    ) -> Result<Upstream, GatewayError> {
        let at = config.at().map_err(|message| GatewayError::Upstream {
            name: config.name.clone(),
            message,
        })?;
        Ok(Upstream {
            name: config.name.clone(),
            at,
            handler: UpstreamHandler::default(),
            slot: tokio::sync::Mutex::default(),
            info: Mutex::default(),
            importer,
            schemas: Mutex::default(),
        })
    }

    /// Makes the first session now, and waits until the tools it lists
    /// are imported into the cluster (so the first call already finds its
    /// effect class there).
    pub async fn connect_now(&self) -> Result<(), ServiceError> {
        self.lease_with(true).await.map(drop)
    }

    /// The live session, connecting first when there is none.
    async fn lease(&self) -> Result<Lease, ServiceError> {
        self.lease_with(false).await
    }

    /// [`Upstream::lease`]; `wait_import` waits for a new session's tools
    /// to be imported, else the import runs in the background so a call
    /// that reconnects is not held up by the cluster.
    async fn lease_with(&self, wait_import: bool) -> Result<Lease, ServiceError> {
        let mut slot = self.slot.lock().await;
        if let Some(session) = &slot.session {
            if !session.is_closed() && !session.peer().is_transport_closed() {
                return Ok(Lease {
                    peer: session.peer().clone(),
                    generation: slot.generation,
                });
            }
            slot.session = None;
        }
        if slot.tried.is_some_and(|t| t.elapsed() < RECONNECT_PAUSE) {
            return Err(ServiceError::TransportClosed);
        }
        slot.tried = Some(Instant::now());
        match self.connect().await {
            Ok(session) => {
                slot.generation += 1;
                let lease = Lease {
                    peer: session.peer().clone(),
                    generation: slot.generation,
                };
                slot.session = Some(Arc::new(session));
                drop(slot);
                self.after_connect(&lease.peer, wait_import).await;
                Ok(lease)
            }
            Err(message) => {
                tracing::warn!(upstream = %self.name, error = %message, "upstream not reachable");
                Err(ServiceError::TransportClosed)
            }
        }
    }

    /// Drops the session `lease` is of, so the next request connects anew
    /// (called when a request found the transport broken).
    async fn forget(&self, lease: &Lease) {
        let mut slot = self.slot.lock().await;
        if slot.session.is_some() && slot.generation == lease.generation {
            tracing::info!(upstream = %self.name, "upstream session lost; the next call reconnects");
            slot.session = None;
        }
    }

    async fn connect(&self) -> Result<Session, String> {
        let handler = self.handler.clone();
        let started = async {
            match &self.at {
                UpstreamAt::Url(url) => {
                    let transport = StreamableHttpClientTransport::with_client(
                        http_client()?,
                        StreamableHttpClientTransportConfig::with_uri(url.clone()),
                    );
                    handler
                        .serve_with_lifecycle(transport, lifecycle())
                        .await
                        .map_err(|e| e.to_string())
                }
                UpstreamAt::Command { program, args } => {
                    let mut command = tokio::process::Command::new(program);
                    command.args(args).kill_on_drop(true);
                    let child = TokioChildProcess::new(command).map_err(|e| e.to_string())?;
                    handler
                        .serve_with_lifecycle(child, lifecycle())
                        .await
                        .map_err(|e| e.to_string())
                }
            }
        };
        let session = tokio::time::timeout(CONNECT_TIMEOUT, started)
            .await
            .map_err(|_| format!("no session within {CONNECT_TIMEOUT:?}"))??;
        let info = session
            .peer()
            .peer_info()
            .ok_or_else(|| "the upstream sent no initialize result".to_owned())?;
        *self.info.lock().unwrap_or_else(PoisonError::into_inner) = Some(info);
        Ok(session)
    }

    /// Lists the tools of a new session and imports their annotations.
    async fn after_connect(&self, peer: &Peer<RoleClient>, wait_import: bool) {
        let tools = match list_tools(peer).await {
            Ok(tools) => tools,
            Err(e) => {
                tracing::warn!(upstream = %self.name, error = %e, "tools/list failed after connecting");
                return;
            }
        };
        tracing::info!(upstream = %self.name, tools = tools.len(), "upstream connected");
        self.remember(&tools);
        let Some(importer) = self.importer.clone() else {
            return;
        };
        let name = self.name.clone();
        let import = async move {
            if let Err(e) = importer.import(&name, &tools).await {
                tracing::warn!(upstream = %name, error = %e, "tool annotations not imported; effect classes come from the policy alone");
            }
        };
        if wait_import {
            import.await;
        } else {
            tokio::spawn(import);
        }
    }

    /// Whether a session is up now; `None` while one is being made.
    pub fn connected(&self) -> Option<bool> {
        let slot = self.slot.try_lock().ok()?;
        Some(
            slot.session
                .as_ref()
                .is_some_and(|s| !s.is_closed() && !s.peer().is_transport_closed()),
        )
    }

    /// What the upstream said of itself when its last session began (none
    /// before the first session).
    pub fn info(&self) -> Option<Arc<ServerPeerInfo>> {
        self.info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every tool the upstream lists (at most [`TOOLS_MAX`]).
    pub async fn tools(&self) -> Result<Vec<Tool>, ServiceError> {
        let lease = self.lease().await?;
        let listed = list_tools(&lease.peer).await;
        match &listed {
            Ok(tools) => self.remember(tools),
            Err(e) => self.failed(&lease, e).await,
        }
        listed
    }

    /// Keeps the tools' input schemas, compiled, to check calls against.
    /// A schema that does not compile (a remote `$ref`, say) is skipped:
    /// the upstream checks that tool's arguments itself.
    pub fn remember(&self, tools: &[Tool]) {
        let mut compiled = Vec::with_capacity(tools.len());
        for tool in tools {
            let schema = serde_json::Value::Object(tool.input_schema.as_ref().clone());
            match jsonschema::validator_for(&schema) {
                Ok(v) => compiled.push((tool.name.to_string(), Arc::new(v))),
                Err(e) => {
                    tracing::debug!(upstream = %self.name, tool = %tool.name, error = %e, "inputSchema not checked by the gateway");
                }
            }
        }
        let mut schemas = self.schemas.lock().unwrap_or_else(PoisonError::into_inner);
        if schemas.len() + compiled.len() > SCHEMAS_MAX {
            schemas.clear();
        }
        schemas.extend(compiled);
    }

    /// Checks `arguments` against tool `tool`'s `inputSchema`, when the
    /// gateway has seen it listed.
    pub fn check_arguments(
        &self,
        tool: &str,
        arguments: Option<&rmcp::model::JsonObject>,
    ) -> Result<(), InvalidArguments> {
        let validator = {
            let schemas = self.schemas.lock().unwrap_or_else(PoisonError::into_inner);
            match schemas.get(tool) {
                Some(v) => v.clone(),
                None => return Ok(()),
            }
        };
        let empty = rmcp::model::JsonObject::new();
        let value = serde_json::Value::Object(arguments.unwrap_or(&empty).clone());
        let problems: Vec<String> = validator
            .iter_errors(&value)
            .take(3)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InvalidArguments(problems.join("; ")))
        }
    }

    /// Sends a request that is not a tool call (a list, a read, a prompt)
    /// and passes its answer back, dropping the session if it broke.
    pub async fn pass<T, F, Fut>(&self, send: F) -> Result<T, ServiceError>
    where
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<T, ServiceError>>,
    {
        let lease = self.lease().await?;
        let answer = send(lease.peer.clone()).await;
        if let Err(e) = &answer {
            self.failed(&lease, e).await;
        }
        answer
    }

    /// Calls a tool upstream. `meta` is passed on (the upstream gets its
    /// own progress token); `progress`, when the agent asked for progress,
    /// is where the upstream's progress notifications go. Dropping the
    /// future before the answer cancels the call upstream.
    pub async fn call_tool(
        &self,
        mut params: CallToolRequestParams,
        meta: Option<RequestMetaObject>,
        progress: Option<ProgressTarget>,
    ) -> Result<Called, ServiceError> {
        let lease = self.lease().await?;
        params.meta = None;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut options = PeerRequestOptions::no_options();
        if let Some(meta) = meta {
            options = options.with_meta(meta);
        }
        let handle = match lease.peer.send_request_with_option(request, options).await {
            Ok(handle) => handle,
            Err(e) => {
                self.failed(&lease, &e).await;
                return Err(e);
            }
        };
        let mut in_flight = InFlight {
            peer: lease.peer.clone(),
            id: Some(handle.id.clone()),
            token: handle.progress_token.clone(),
            routes: self.handler.routes.clone(),
        };
        if let Some(target) = progress {
            if !self
                .handler
                .routes
                .insert(handle.progress_token.clone(), target)
            {
                tracing::debug!(upstream = %self.name, "too many calls in flight to pass progress on");
            }
        }
        let answer = handle.await_response().await;
        in_flight.id = None;
        drop(in_flight);
        match answer {
            Ok(ServerResult::CallToolResult(result)) => Ok(Called::Result(result)),
            Ok(ServerResult::CreateTaskResult(created)) => Ok(Called::Task(TaskHandle {
                poll_after: poll_after(&created.task),
                id: created.task.task_id,
            })),
            Ok(_) => Err(ServiceError::UnexpectedResponse),
            Err(e) => {
                self.failed(&lease, &e).await;
                Err(e)
            }
        }
    }

    /// Polls a task (`tasks/get`).
    pub async fn poll_task(&self, id: &str) -> Result<TaskState, ServiceError> {
        let params = GetTaskParams::new(id);
        let got = self
            .pass(|peer| async move { peer.get_task(params).await })
            .await?;
        Ok(match got.task.payload {
            TaskPayload::Working => TaskState::Running(poll_after(&got.task.task)),
            TaskPayload::InputRequired { .. } => TaskState::InputRequired,
            TaskPayload::Completed { result } => {
                let result = serde_json::from_value(serde_json::Value::Object(result))
                    .map_err(|_| ServiceError::UnexpectedResponse)?;
                TaskState::Done(result)
            }
            TaskPayload::Failed { error } => TaskState::Failed(
                serde_json::from_value(serde_json::Value::Object(error)).unwrap_or_else(|_| {
                    ErrorData::internal_error("the task failed with an unreadable error", None)
                }),
            ),
            // A status this gateway does not know yet reads as cancelled:
            // the task will not end well for this call.
            _ => TaskState::Cancelled,
        })
    }

    /// Asks the upstream to cancel a task, in the background (cancellation
    /// is cooperative; the answer is not waited for).
    pub fn cancel_task_soon(self: &Arc<Self>, id: String) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let upstream = self.clone();
        runtime.spawn(async move {
            let params = CancelTaskParams::new(id);
            let sent = tokio::time::timeout(
                TASK_CANCEL_TIMEOUT,
                upstream.pass(|peer| async move { peer.cancel_task(params).await }),
            )
            .await;
            if !matches!(sent, Ok(Ok(()))) {
                tracing::debug!(upstream = %upstream.name, "tasks/cancel not acknowledged");
            }
        });
    }

    async fn failed(&self, lease: &Lease, e: &ServiceError) {
        let broken = matches!(
            e,
            ServiceError::TransportClosed | ServiceError::TransportSend(_)
        ) || lease.peer.is_transport_closed();
        if broken {
            self.forget(lease).await;
        }
    }

    /// Closes the session, if any.
    pub async fn close(&self) {
        let taken = self.slot.lock().await.session.take();
        if let Some(session) = taken.and_then(|s| Arc::try_unwrap(s).ok()) {
            let _ = session.cancel().await;
        }
    }
}

/// How a session starts: the newest protocol the upstream speaks (MCP
/// tasks need 2026-07-28's per-request capabilities), else the
/// `initialize` handshake of older servers.
pub(crate) fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: None,
    }
}

/// The HTTP client of an upstream session. rmcp's default opens a TCP
/// connection per request (it turns pooling off against delayed-ACK stalls
/// it saw when a connection was reused); this one keeps idle connections,
/// with Nagle off, so an answer read to its end saves the next call a
/// connect and a close. An SSE answer that rmcp stops reading after its
/// message is not reused (hyper discards such a connection). Measured with
/// `fusebox bench gateway`: p50 added 1.15 ms against 1.36 ms with rmcp's
/// client. (The stalls come from the side that writes with Nagle on: the
/// gateway's own listener sets `TCP_NODELAY`.) Redirects are not followed:
/// an upstream is named by its endpoint.
pub(crate) fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(TCP_CONNECT_TIMEOUT)
        .pool_idle_timeout(IDLE_CONNECTION_KEPT)
        .pool_max_idle_per_host(IDLE_CONNECTIONS_MAX)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("the HTTP client: {e}"))
}

async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, ServiceError> {
    let listed = tokio::time::timeout(LIST_TIMEOUT, peer.list_all_tools())
        .await
        .map_err(|_| ServiceError::Timeout {
            timeout: LIST_TIMEOUT,
        })??;
    if listed.len() > TOOLS_MAX {
        return Err(ServiceError::McpError(rmcp::ErrorData::internal_error(
            format!(
                "the upstream lists {} tools, at most {TOOLS_MAX}",
                listed.len()
            ),
            None,
        )));
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn upstream() -> Upstream {
        let config = UpstreamConfig {
            name: "vendor".into(),
            url: Some("http://127.0.0.1:9/mcp".into()),
            command: None,
        };
        Upstream::new(&config, None).unwrap()
    }

    fn object(value: serde_json::Value) -> rmcp::model::JsonObject {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn arguments_are_checked_against_the_listed_schema() {
        let upstream = upstream();
        let schema = object(json!({
            "type": "object",
            "properties": {"cents": {"type": "integer"}},
            "required": ["cents"]
        }));
        upstream.remember(&[Tool::new("strict", "whole cents", Arc::new(schema))]);
        let good = object(json!({"cents": 5}));
        assert_eq!(upstream.check_arguments("strict", Some(&good)), Ok(()));
        let wrong = object(json!({"cents": "abc"}));
        let InvalidArguments(why) = upstream
            .check_arguments("strict", Some(&wrong))
            .unwrap_err();
        assert!(why.contains("/cents") && why.contains("integer"), "{why}");
        let missing = upstream.check_arguments("strict", None).unwrap_err();
        assert!(missing.0.contains("cents"), "{missing:?}");
        // A tool never listed is the upstream's to check.
        assert_eq!(upstream.check_arguments("other", Some(&wrong)), Ok(()));
    }

    #[test]
    fn a_schema_that_does_not_compile_is_not_checked() {
        let upstream = upstream();
        let remote = object(json!({"$ref": "https://example.com/schema.json"}));
        upstream.remember(&[Tool::new("remote", "", Arc::new(remote))]);
        let anything = object(json!({"x": 1}));
        assert_eq!(upstream.check_arguments("remote", Some(&anything)), Ok(()));
    }
}
