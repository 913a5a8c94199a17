//! One `tools/call` through the Fusebox gate, as the SDK does it for a Rust
//! agent: admission from the fleet's breaker, a deadline, the outcome
//! reported, bounded retries of read-only tools, and writes guarded by the
//! idempotency ledger.
//!
//! How an upstream's answer is classified (what counts against the tool):
//!
//! | upstream answer | class | counts as a failure |
//! |---|---|---|
//! | a result | success | no |
//! | a result with `isError: true` | tool error | yes |
//! | JSON-RPC invalid params, invalid request, method not found | invalid arguments (the caller's error) | no |
//! | any other JSON-RPC error | server error | yes |
//! | the connection failed or closed | transport | yes |
//! | no answer within the deadline | timeout (the SDK drops the call, and rmcp sends `notifications/cancelled` upstream) | yes |
//!
//! The tool's policy may overrule an answer's form by its words (its
//! `classify` lists, matched in the answer's text content, or in a JSON-RPC
//! error's message):
//!
//! | pattern list | applies to | the answer becomes |
//! |---|---|---|
//! | `caller_error` | an `isError` result, a JSON-RPC error | invalid arguments: not counted |
//! | `success` | an `isError` result, a JSON-RPC error | a success (a JSON-RPC error reaches the agent as an `isError` result with its message) |
//! | `failure` | a plain result | a tool error: counted |
//!
//! What the agent gets back: the upstream's own result or error when the
//! upstream answered, else (a refusal, a timeout, an ambiguous write) a
//! result with `isError: true` whose text is the SDK's one-line message for
//! the model.
//!
//! An upstream may answer with an MCP task handle (long-running work). The
//! gateway follows the task for the agent, which gets the task's result as
//! the answer to its `tools/call` (agents need no tasks support):
//! - each poll (`tasks/get`) is admitted by the tool's breaker and gets the
//!   tool's deadline; a poll refused, unanswered or failed ends the call,
//!   and the task is cancelled upstream (`tasks/cancel`);
//! - the whole task is one call for the breaker, judged by how it ended,
//!   and holds its admission (a probe permit in HALF_OPEN) until then;
//! - a write's ledger record stays in progress, its lease held, until the
//!   task ends, and then records its result; a task whose end was not seen
//!   leaves the write ambiguous;
//! - the call's budget (`budget_ms`) bounds the whole task; a task still
//!   running when it runs out is cancelled.

use crate::metrics::{CallRecord, Ended, GatewayMetrics, LedgerAnswer};
use crate::upstream::{Called, ProgressTarget, TaskHandle, TaskState, Upstream};
use fusebox_client::{
    derive_key, Admission, CallContext, Classification, Client, ClientError, Journey, OutcomeClass,
    Started, ToolFailure, ToolRef, Verdict, WriteRequest, WriteSuccess,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ErrorCode, MetaObject, RequestMetaObject,
};
use rmcp::{ErrorData, ServiceError};
use sha2::{Digest as _, Sha256};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tracing::Instrument as _;

/// The `_meta` field of a `tools/call` that carries the agent's intent id
/// (one user intent, stable across the agent's retries of it). A write's
/// idempotency key is derived from it and the call's canonical arguments.
pub const INTENT_META_KEY: &str = "fusebox/intentId";

/// The `_meta` field set to `true` on a result the gate admitted without a
/// fresh view of the cluster (the breaker's `on_partition` decided).
pub const DEGRADED_META_KEY: &str = "fusebox/degraded";

/// Longest intent id taken from `_meta`.
const INTENT_BYTES_MAX: usize = 256;

/// The most of a call's budget kept back from the tool for recording its
/// outcome (a write's completion after a long task).
const RESERVE_MAX: Duration = Duration::from_secs(2);

/// What the upstream last answered, kept so the agent gets the upstream's
/// own words back when the gate ends the call on them.
#[derive(Clone, Debug)]
enum Answered {
    Result(CallToolResult),
    Error(ErrorData),
}

type LastAnswer = Mutex<Option<Answered>>;

/// One call's trace through the gate: what the upstream last answered,
/// how many attempts went upstream, and how long they took there.
#[derive(Default)]
struct Trace {
    last: LastAnswer,
    sent: AtomicU32,
    upstream_ns: AtomicU64,
}

impl Trace {
    fn keep(&self, answer: Answered) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
    }

    fn take(&self) -> Option<Answered> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// Adds an attempt's time upstream to its trace, however the attempt ends
/// (answered, or dropped at its deadline).
struct Upstreamed<'a> {
    trace: &'a Trace,
    started: Instant,
}

impl Drop for Upstreamed<'_> {
    fn drop(&mut self) {
        let ns = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.trace.upstream_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// How a gated call ended, for the gate's own bookkeeping.
struct Finished {
    result: Result<CallToolResult, ErrorData>,
    ended: Ended,
    ledger: Option<LedgerAnswer>,
    degraded: bool,
}

/// The gate one gateway process holds: one SDK client, one replica.
pub struct Gate {
    client: Client,
    budget: Duration,
    metrics: GatewayMetrics,
}

impl Gate {
    /// A gate over `client`, each call allowed `budget` in all.
    pub fn new(client: Client, budget: Duration) -> Gate {
        Gate {
            client,
            budget,
            metrics: GatewayMetrics::default(),
        }
    }

    /// The SDK client (for the view and metrics).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The gateway's counters.
    pub fn metrics(&self) -> &GatewayMetrics {
        &self.metrics
    }

    /// Calls `params` on `upstream` through the gate. `meta` is the call's
    /// `_meta` (passed upstream); `progress`, when the agent asked for
    /// progress, is where the upstream's progress notifications go.
    pub async fn call(
        &self,
        upstream: &Arc<Upstream>,
        params: CallToolRequestParams,
        meta: RequestMetaObject,
        progress: Option<ProgressTarget>,
    ) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let span = tracing::info_span!(
            "fusebox.gateway.call",
            server = %upstream.name,
            tool = %params.name,
            intent_id = tracing::field::Empty,
            ended = tracing::field::Empty,
            added_us = tracing::field::Empty,
        );
        let tool_name = params.name.to_string();
        let trace = Arc::new(Trace::default());
        let finished = match upstream.check_arguments(&params.name, params.arguments.as_ref()) {
            // The caller's mistake: not sent, not counted against the tool,
            // and said to the model so it can correct the call.
            Err(invalid) => Finished {
                result: Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "Invalid arguments for {tool_name}: {}. The tool was not called; fix the arguments and call it again.",
                    invalid.0
                ))])),
                ended: Ended::InvalidArguments,
                ledger: None,
                degraded: false,
            },
            Ok(()) => {
                self.gated(upstream, params, meta, progress, &trace)
                    .instrument(span.clone())
                    .await
            }
        };
        let upstream_time = Duration::from_nanos(trace.upstream_ns.load(Ordering::Relaxed));
        let added = started.elapsed().saturating_sub(upstream_time);
        let sent = trace.sent.load(Ordering::Relaxed);
        span.record("ended", tracing::field::debug(finished.ended));
        span.record("added_us", added.as_micros() as u64);
        self.metrics.record(&CallRecord {
            server: &upstream.name,
            tool: &tool_name,
            ended: finished.ended,
            retries: sent.saturating_sub(1),
            ledger: finished.ledger,
            degraded: finished.degraded,
            added,
        });
        finished.result
    }

    async fn gated(
        &self,
        upstream: &Arc<Upstream>,
        params: CallToolRequestParams,
        meta: RequestMetaObject,
        progress: Option<ProgressTarget>,
        trace: &Arc<Trace>,
    ) -> Finished {
        let tool = match ToolRef::new(&upstream.name, &params.name) {
            Ok(tool) => tool,
            Err(e) => {
                return Finished {
                    result: Err(ErrorData::invalid_params(e.model_message(), None)),
                    ended: Ended::Other,
                    ledger: None,
                    degraded: false,
                }
            }
        };
        let (given, intent) = intent_of(&meta);
        tracing::Span::current().record("intent_id", intent.as_str());
        let reserve = (self.budget / 10).min(RESERVE_MAX);
        let journey = Journey::new(intent, self.budget, reserve);
        let mut forwarded = meta;
        forwarded.0 .0.remove("progressToken");
        let policy = self.client.tool_policy(&tool);
        let send = Sender {
            upstream: upstream.clone(),
            meta: forwarded,
            progress,
            trace: trace.clone(),
            patterns: Arc::new(policy.classify.clone()),
        };
        let effect = policy.effect;
        let (ended, degraded, ledger) = if effect.is_write() {
            let ended = self
                .write(&journey, &tool, &send, params, given.is_some())
                .await;
            let ledger = match &ended {
                Ok((_, true)) => Some("replayed"),
                Ok((_, false)) => Some("performed"),
                Err(e) => ledger_answer(e),
            };
            (ended.map(|(r, _)| r), false, ledger)
        } else {
            match self.read(&journey, &tool, &send, params).await {
                Ok((result, degraded)) => (Ok(result), degraded, None),
                Err(e) => (Err(e), false, None),
            }
        };
        finish(ended, trace.take(), degraded, ledger)
    }

    async fn read(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        send: &Sender,
        params: CallToolRequestParams,
    ) -> Result<(CallToolResult, bool), ClientError> {
        let start = |_ctx: CallContext| {
            let (send, params) = (send.clone(), params.clone());
            async move { send.call(params).await }
        };
        let follow = |task: TaskHandle| send.follow(&self.client, tool, journey, task);
        let out = self
            .client
            .call_following(journey, tool, start, follow)
            .await?;
        Ok((out.value, out.degraded))
    }

    /// A write through the ledger; the flag is true on a replay.
    async fn write(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        send: &Sender,
        params: CallToolRequestParams,
        intended: bool,
    ) -> Result<(CallToolResult, bool), ClientError> {
        let args = canonical_json(&serde_json::Value::Object(
            params.arguments.clone().unwrap_or_default(),
        ));
        let args_hash = hex(&Sha256::digest(args.as_bytes()));
        let target = format!("{}/{}", tool.server(), tool.tool());
        let key = derive_key(journey.intent_id(), &target, &args_hash, "");
        let request = WriteRequest::new(tool.clone(), key, target, args.as_bytes());
        if !intended {
            tracing::debug!(tool = %tool.tool(), "a write without {INTENT_META_KEY}: guarded for this call only");
        }
        // A task is followed under the operation id of the attempt that
        // started it.
        let start = |ctx: CallContext| {
            let (send, params) = (send.clone(), params.clone());
            async move {
                let operation = ctx.tool_call_id;
                Ok(match send.call(params).await? {
                    Started::Done(result) => Started::Done(send.succeeded(operation, result)),
                    Started::Running(task) => Started::Running((operation, task)),
                })
            }
        };
        let follow = |(operation, task): (String, TaskHandle)| async move {
            let result = send.follow(&self.client, tool, journey, task).await?;
            Ok(send.succeeded(operation, result))
        };
        let out = self
            .client
            .write_following(journey, &request, start, follow)
            .await?;
        if !out.replayed {
            if let Some(Answered::Result(r)) = send.trace.take() {
                return Ok((r, false));
            }
        }
        Ok((
            replayed(&out.result, out.operation_id.as_deref()),
            out.replayed,
        ))
    }
}

/// The intent id the agent gave in `_meta`, if any, and the one the call
/// runs under (the given one, else a fresh one for this call alone).
fn intent_of(meta: &RequestMetaObject) -> (Option<String>, String) {
    let given = meta
        .0
         .0
        .get(INTENT_META_KEY)
        .and_then(|v| v.as_str())
        .filter(|id| !id.is_empty() && id.len() <= INTENT_BYTES_MAX)
        .map(str::to_owned);
    let intent = given
        .clone()
        .unwrap_or_else(|| format!("gw-{:016x}", fastrand::u64(..)));
    (given, intent)
}

/// What the agent gets back, and how the call ended: the gate's result
/// (marked degraded when `on_partition` admitted it), else the upstream's
/// own answer when the gate stopped on it (`kept`), else the gate's
/// refusal as the model reads it.
fn finish(
    ended: Result<CallToolResult, ClientError>,
    kept: Option<Answered>,
    degraded: bool,
    ledger: Option<LedgerAnswer>,
) -> Finished {
    let (result, how) = match (ended, kept) {
        (Ok(mut result), _) => {
            if degraded {
                let meta = result.meta.get_or_insert_with(MetaObject::new);
                meta.0
                    .insert(DEGRADED_META_KEY.into(), serde_json::Value::Bool(true));
            }
            let how = if ledger == Some("replayed") {
                Ended::Ledger
            } else {
                Ended::Answered
            };
            (Ok(result), how)
        }
        (Err(ClientError::ToolFailed { .. }), Some(Answered::Result(r))) => (Ok(r), Ended::Failed),
        (Err(ClientError::ToolFailed { .. }), Some(Answered::Error(e))) => (Err(e), Ended::Failed),
        (Err(refused), _) => (Ok(refusal(&refused)), ended_by(&refused)),
    };
    Finished {
        result,
        ended: how,
        ledger,
        degraded,
    }
}

/// What one attempt needs to call the upstream.
#[derive(Clone)]
struct Sender {
    upstream: Arc<Upstream>,
    meta: RequestMetaObject,
    progress: Option<ProgressTarget>,
    trace: Arc<Trace>,
    /// The tool's answer patterns, from its policy.
    patterns: Arc<Classification>,
}

impl Sender {
    /// One attempt: the call upstream, its answer classified, or the task
    /// it started.
    async fn call(
        &self,
        params: CallToolRequestParams,
    ) -> Result<Started<CallToolResult, TaskHandle>, ToolFailure> {
        self.trace.sent.fetch_add(1, Ordering::Relaxed);
        let timed = Upstreamed {
            trace: &self.trace,
            started: Instant::now(),
        };
        let answer = self
            .upstream
            .call_tool(params, Some(self.meta.clone()), self.progress.clone())
            .await;
        drop(timed);
        match answer {
            Ok(Called::Task(task)) => Ok(Started::Running(task)),
            Ok(Called::Result(result)) => {
                classify(Ok(result), &self.trace, &self.patterns).map(Started::Done)
            }
            Err(e) => classify(Err(e), &self.trace, &self.patterns).map(Started::Done),
        }
    }

    /// A write's success: its result kept whole for this caller (the
    /// ledger may store it empty when it is over its size bound).
    fn succeeded(&self, operation_id: String, result: CallToolResult) -> WriteSuccess {
        self.trace.keep(Answered::Result(result.clone()));
        WriteSuccess {
            operation_id,
            result: serde_json::to_vec(&result).unwrap_or_default(),
        }
    }

    /// Follows a task upstream to its end (see the module essay): its
    /// result, classified as a direct answer would be.
    async fn follow(
        &self,
        client: &Client,
        tool: &ToolRef,
        journey: &Journey,
        task: TaskHandle,
    ) -> Result<CallToolResult, ToolFailure> {
        let _timed = Upstreamed {
            trace: &self.trace,
            started: Instant::now(),
        };
        let mut abandoned = Abandoned {
            upstream: &self.upstream,
            id: Some(task.id.clone()),
        };
        let id = task.id.as_str();
        let mut wait = task.poll_after;
        loop {
            if journey.available() <= wait {
                let budget = journey.budget().as_millis();
                return Err(ToolFailure::new(
                    OutcomeClass::Timeout,
                    format!("task {id} was still running when the call's budget of {budget} ms ran out; it was cancelled"),
                ));
            }
            tokio::time::sleep(wait).await;
            if matches!(client.admit(tool).admission, Admission::Reject { .. }) {
                return Err(ToolFailure::new(
                    OutcomeClass::Cancelled,
                    format!("stopped following task {id}: the tool's breaker opened meanwhile; the task was cancelled"),
                ));
            }
            let deadline = client.tool_deadline(tool).min(journey.available());
            let polled = tokio::time::timeout(deadline, self.upstream.poll_task(id)).await;
            let state = match polled {
                Err(_) => {
                    let ms = deadline.as_millis();
                    return Err(ToolFailure::new(
                        OutcomeClass::Timeout,
                        format!("tasks/get for task {id} got no answer within {ms} ms; the task was cancelled"),
                    ));
                }
                Ok(Err(e)) => return classify(Err(e), &self.trace, &self.patterns),
                Ok(Ok(state)) => state,
            };
            match state {
                TaskState::Running(next) => wait = next,
                TaskState::InputRequired => {
                    return Err(ToolFailure::new(
                        OutcomeClass::ServerError,
                        format!(
                        "task {id} asks for input, which the gateway cannot give; it was cancelled"
                    ),
                    ))
                }
                TaskState::Done(result) => {
                    abandoned.id = None;
                    return classify(Ok(result), &self.trace, &self.patterns);
                }
                TaskState::Failed(error) => {
                    abandoned.id = None;
                    let e = ServiceError::McpError(error);
                    return classify(Err(e), &self.trace, &self.patterns);
                }
                TaskState::Cancelled => {
                    abandoned.id = None;
                    return Err(ToolFailure::new(
                        OutcomeClass::ServerError,
                        format!("the upstream cancelled task {id}"),
                    ));
                }
            }
        }
    }
}

/// A task followed until it ended; dropped before that (the call gave up,
/// a poll failed, the agent cancelled), it is cancelled upstream.
struct Abandoned<'a> {
    upstream: &'a Arc<Upstream>,
    id: Option<String>,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.upstream.cancel_task_soon(id);
        }
    }
}

/// How a refusal or a gate failure ended the call.
fn ended_by(e: &ClientError) -> Ended {
    match e {
        ClientError::CircuitOpen { .. } | ClientError::PartitionFailClosed { .. } => Ended::Refused,
        ClientError::Timeout { .. } | ClientError::BudgetExhausted { .. } => Ended::TimedOut,
        ClientError::ToolFailed { .. } => Ended::Failed,
        e if ledger_answer(e).is_some() => Ended::Ledger,
        _ => Ended::Other,
    }
}

/// What the ledger answered, when it ended a write.
fn ledger_answer(e: &ClientError) -> Option<LedgerAnswer> {
    Some(match e {
        ClientError::WritesBlocked { .. } => "writes_blocked",
        ClientError::InProgress { .. } => "in_progress",
        ClientError::AmbiguousOutcome { .. } => "ambiguous",
        ClientError::Mismatch { .. } => "mismatch",
        ClientError::WriteNotReplayable { .. } => "not_replayable",
        _ => return None,
    })
}

/// An upstream answer as the gate counts it, by its form and then by the
/// tool's `patterns`; an answer the gate ends the call on is kept in `trace`.
fn classify(
    answer: Result<CallToolResult, ServiceError>,
    trace: &Trace,
    patterns: &Classification,
) -> Result<CallToolResult, ToolFailure> {
    let keep = |a: Answered| trace.keep(a);
    match answer {
        Ok(result) => {
            let is_error = result.is_error == Some(true);
            let verdict = patterns.judge(&answer_text(&result), is_error);
            match (is_error, verdict) {
                (true, Some(Verdict::Success)) | (false, None | Some(Verdict::Success)) => {
                    Ok(result)
                }
                (true, Some(Verdict::CallerError)) => {
                    let said = first_text(&result);
                    keep(Answered::Result(result));
                    // The upstream refused the call as the caller's mistake.
                    Err(ToolFailure::new(OutcomeClass::InvalidArguments, said).before_sending())
                }
                _ => {
                    let said = first_text(&result);
                    keep(Answered::Result(result));
                    Err(ToolFailure::new(OutcomeClass::ToolError, said))
                }
            }
        }
        Err(ServiceError::McpError(e)) => {
            let callers = [
                ErrorCode::INVALID_PARAMS,
                ErrorCode::INVALID_REQUEST,
                ErrorCode::METHOD_NOT_FOUND,
            ]
            .contains(&e.code);
            let message = e.message.to_string();
            let verdict = patterns.judge(&message, true);
            if !callers && verdict == Some(Verdict::Success) {
                // The tool did its job and said so as an error: the agent
                // gets its words as a result, and nothing is counted.
                return Ok(CallToolResult::error(vec![ContentBlock::text(message)]));
            }
            keep(Answered::Error(e));
            if callers || verdict == Some(Verdict::CallerError) {
                // The upstream refused the arguments: it did nothing.
                Err(ToolFailure::new(OutcomeClass::InvalidArguments, message).before_sending())
            } else {
                Err(ToolFailure::new(OutcomeClass::ServerError, message))
            }
        }
        Err(other) => Err(ToolFailure::new(
            OutcomeClass::Transport,
            format!("upstream: {other}"),
        )),
    }
}

/// A refusal or a gate failure, as the model reads it.
fn refusal(e: &ClientError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.model_message())])
}

/// A write the ledger answered from an earlier success: its stored result,
/// or, when there is none (an operator resolved the write, or its result
/// was over the ledger's size bound), a note saying it is done. The note is
/// an `isError` result: a success would have to match the tool's output
/// schema, which the gateway cannot make up; its text says plainly that
/// the write happened.
fn replayed(stored: &[u8], operation: Option<&str>) -> CallToolResult {
    if let Ok(result) = serde_json::from_slice::<CallToolResult>(stored) {
        return result;
    }
    let op = operation.unwrap_or("unknown");
    CallToolResult::error(vec![ContentBlock::text(format!(
        "Not an error: this write already happened (operation {op}), and its result was not kept. Do not repeat it; continue as if it succeeded."
    ))])
}

/// An answer's words: its text content, one block a line.
fn answer_text(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    texts.join("\n")
}

fn first_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_else(|| "the tool reported an error".to_owned())
}

/// JSON with every object's keys sorted, so equal arguments give equal
/// bytes whatever order the agent wrote them in.
pub fn canonical_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical_json(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_arguments_give_equal_bytes_in_any_order() {
        let a = json!({"b": [1, {"y": 2, "x": 1}], "a": "é"});
        let b = json!({"a": "é", "b": [1, {"x": 1, "y": 2}]});
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":"é","b":[1,{"x":1,"y":2}]}"#);
        assert_ne!(canonical_json(&a), canonical_json(&json!({"a": "é"})));
    }

    #[test]
    fn an_error_result_counts_and_invalid_arguments_do_not() {
        let last = Trace::default();
        let none = Classification::default();
        let error = CallToolResult::error(vec![ContentBlock::text("rate table missing")]);
        let failure = classify(Ok(error), &last, &none).unwrap_err();
        assert_eq!(failure.class, OutcomeClass::ToolError);
        assert!(matches!(last.take(), Some(Answered::Result(_))));

        let invalid = ErrorData::invalid_params("amount must be positive", None);
        let failure = classify(Err(ServiceError::McpError(invalid)), &last, &none).unwrap_err();
        assert_eq!(failure.class, OutcomeClass::InvalidArguments);
        assert!(matches!(last.take(), Some(Answered::Error(_))));

        let internal = ErrorData::internal_error("boom", None);
        let failure = classify(Err(ServiceError::McpError(internal)), &last, &none).unwrap_err();
        assert_eq!(failure.class, OutcomeClass::ServerError);

        let closed = classify(Err(ServiceError::TransportClosed), &last, &none).unwrap_err();
        assert_eq!(closed.class, OutcomeClass::Transport);

        let fine = CallToolResult::success(vec![ContentBlock::text("not found")]);
        assert!(classify(Ok(fine), &last, &none).is_ok());
    }

    #[test]
    fn the_policy_patterns_overrule_an_answers_form() {
        let patterns = Classification {
            failure: vec!["temporarily unavailable".into()],
            success: vec!["no such customer".into()],
            caller_error: vec!["invalid customer id".into()],
        };
        let last = Trace::default();
        let judge = |answer| classify(answer, &last, &patterns);

        let unavailable =
            CallToolResult::success(vec![ContentBlock::text("Service Temporarily Unavailable")]);
        assert_eq!(
            judge(Ok(unavailable)).unwrap_err().class,
            OutcomeClass::ToolError
        );
        assert!(matches!(last.take(), Some(Answered::Result(_))));

        let absent = CallToolResult::error(vec![ContentBlock::text("No such customer: 42")]);
        let kept = judge(Ok(absent)).expect("a success");
        assert_eq!(
            kept.is_error,
            Some(true),
            "the agent gets the upstream's own result"
        );

        let mistake = CallToolResult::error(vec![ContentBlock::text("invalid customer id 'x'")]);
        assert_eq!(
            judge(Ok(mistake)).unwrap_err().class,
            OutcomeClass::InvalidArguments
        );

        let rpc_absent = ErrorData::internal_error("no such customer", None);
        let said = judge(Err(ServiceError::McpError(rpc_absent))).expect("a success");
        assert_eq!(first_text(&said), "no such customer");

        let rpc_mistake = ErrorData::internal_error("Invalid customer id", None);
        let failure = judge(Err(ServiceError::McpError(rpc_mistake))).unwrap_err();
        assert_eq!(failure.class, OutcomeClass::InvalidArguments);

        // What no pattern names is judged by its form.
        let other = CallToolResult::error(vec![ContentBlock::text("rate table missing")]);
        assert_eq!(judge(Ok(other)).unwrap_err().class, OutcomeClass::ToolError);
        let fine = CallToolResult::success(vec![ContentBlock::text("42 results")]);
        assert!(judge(Ok(fine)).is_ok());
    }

    #[test]
    fn a_replay_gives_the_stored_result_or_says_it_was_not_kept() {
        let stored = CallToolResult::success(vec![ContentBlock::text("charged 12.00")]);
        let bytes = serde_json::to_vec(&stored).unwrap();
        assert_eq!(first_text(&replayed(&bytes, Some("op-1"))), "charged 12.00");
        let note = replayed(&[], Some("op-1"));
        assert!(first_text(&note).contains("already happened (operation op-1)"));
    }
}
