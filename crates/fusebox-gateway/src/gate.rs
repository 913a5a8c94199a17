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
//! What the agent gets back: the upstream's own result or error when the
//! upstream answered, else (a refusal, a timeout, an ambiguous write) a
//! result with `isError: true` whose text is the SDK's one-line message for
//! the model.

use fusebox_client::{
    derive_key, CallContext, Client, ClientError, Journey, OutcomeClass, ToolFailure, ToolRef,
    WriteRequest, WriteSuccess,
};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ErrorCode, JsonObject};
use rmcp::{ErrorData, Peer, RoleClient, ServiceError};
use sha2::{Digest as _, Sha256};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The `_meta` field of a `tools/call` that carries the agent's intent id
/// (one user intent, stable across the agent's retries of it). A write's
/// idempotency key is derived from it and the call's canonical arguments.
pub const INTENT_META_KEY: &str = "fusebox/intentId";

/// Longest intent id taken from `_meta`.
const INTENT_BYTES_MAX: usize = 256;

/// What the upstream last answered, kept so the agent gets the upstream's
/// own words back when the gate ends the call on them.
#[derive(Clone, Debug)]
enum Answered {
    Result(CallToolResult),
    Error(ErrorData),
}

type LastAnswer = Arc<Mutex<Option<Answered>>>;

/// The gate one gateway process holds: one SDK client, one replica.
pub struct Gate {
    client: Client,
    budget: Duration,
}

impl Gate {
    /// A gate over `client`, each call allowed `budget` in all.
    pub fn new(client: Client, budget: Duration) -> Gate {
        Gate { client, budget }
    }

    /// The SDK client (for the view and metrics).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Calls `params` on `upstream` (the server named `server`) through the
    /// gate. `meta` is the call's `_meta`.
    pub async fn call(
        &self,
        upstream: &Peer<RoleClient>,
        server: &str,
        params: CallToolRequestParams,
        meta: &JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        let tool = ToolRef::new(server, &params.name)
            .map_err(|e| ErrorData::invalid_params(e.model_message(), None))?;
        let given = meta
            .get(INTENT_META_KEY)
            .and_then(|v| v.as_str())
            .filter(|id| !id.is_empty() && id.len() <= INTENT_BYTES_MAX);
        let intent = match given {
            Some(id) => id.to_owned(),
            None => format!("gw-{:016x}", fastrand::u64(..)),
        };
        let journey = Journey::new(intent, self.budget, Duration::ZERO);
        let last: LastAnswer = Arc::default();
        let effect = self.client.tool_policy(&tool).effect;
        let ended = if effect.is_write() {
            self.write(&journey, &tool, upstream, params, given.is_some(), &last)
                .await
        } else {
            self.read(&journey, &tool, upstream, params, &last).await
        };
        let kept = last.lock().unwrap_or_else(PoisonError::into_inner).take();
        match (ended, kept) {
            (Ok(result), _) => Ok(result),
            // The upstream answered and the gate stopped there: its words.
            (Err(ClientError::ToolFailed { .. }), Some(Answered::Result(r))) => Ok(r),
            (Err(ClientError::ToolFailed { .. }), Some(Answered::Error(e))) => Err(e),
            (Err(refused), _) => Ok(refusal(&refused)),
        }
    }

    async fn read(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        upstream: &Peer<RoleClient>,
        params: CallToolRequestParams,
        last: &LastAnswer,
    ) -> Result<CallToolResult, ClientError> {
        let out = self
            .client
            .call(journey, tool, |_ctx: CallContext| {
                let (upstream, params, last) = (upstream.clone(), params.clone(), last.clone());
                async move { classify(upstream.call_tool(params).await, &last) }
            })
            .await?;
        Ok(out.value)
    }

    async fn write(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        upstream: &Peer<RoleClient>,
        params: CallToolRequestParams,
        intended: bool,
        last: &LastAnswer,
    ) -> Result<CallToolResult, ClientError> {
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
        let out = self
            .client
            .write(journey, &request, |ctx: CallContext| {
                let (upstream, params, last) = (upstream.clone(), params.clone(), last.clone());
                async move {
                    let result = classify(upstream.call_tool(params).await, &last)?;
                    // Kept whole for this caller: the ledger may store it
                    // empty when it is over its size bound.
                    *last.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(Answered::Result(result.clone()));
                    Ok(WriteSuccess {
                        operation_id: ctx.tool_call_id,
                        result: serde_json::to_vec(&result).unwrap_or_default(),
                    })
                }
            })
            .await?;
        if !out.replayed {
            if let Some(Answered::Result(r)) =
                last.lock().unwrap_or_else(PoisonError::into_inner).take()
            {
                return Ok(r);
            }
        }
        Ok(replayed(&out.result, out.operation_id.as_deref()))
    }
}

/// An upstream answer as the gate counts it; the answer is kept in `last`.
fn classify(
    answer: Result<CallToolResult, ServiceError>,
    last: &LastAnswer,
) -> Result<CallToolResult, ToolFailure> {
    let keep = |a: Answered| *last.lock().unwrap_or_else(PoisonError::into_inner) = Some(a);
    match answer {
        Ok(result) if result.is_error == Some(true) => {
            let said = first_text(&result);
            keep(Answered::Result(result));
            Err(ToolFailure::new(OutcomeClass::ToolError, said))
        }
        Ok(result) => Ok(result),
        Err(ServiceError::McpError(e)) => {
            let callers = [
                ErrorCode::INVALID_PARAMS,
                ErrorCode::INVALID_REQUEST,
                ErrorCode::METHOD_NOT_FOUND,
            ]
            .contains(&e.code);
            let message = e.message.to_string();
            keep(Answered::Error(e));
            if callers {
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
        let last = LastAnswer::default();
        let error = CallToolResult::error(vec![ContentBlock::text("rate table missing")]);
        let failure = classify(Ok(error), &last).unwrap_err();
        assert_eq!(failure.class, OutcomeClass::ToolError);
        assert!(matches!(
            last.lock().unwrap().take(),
            Some(Answered::Result(_))
        ));

        let invalid = ErrorData::invalid_params("amount must be positive", None);
        let failure = classify(Err(ServiceError::McpError(invalid)), &last).unwrap_err();
        assert_eq!(failure.class, OutcomeClass::InvalidArguments);
        assert!(matches!(
            last.lock().unwrap().take(),
            Some(Answered::Error(_))
        ));

        let internal = ErrorData::internal_error("boom", None);
        let failure = classify(Err(ServiceError::McpError(internal)), &last).unwrap_err();
        assert_eq!(failure.class, OutcomeClass::ServerError);

        let closed = classify(Err(ServiceError::TransportClosed), &last).unwrap_err();
        assert_eq!(closed.class, OutcomeClass::Transport);

        let fine = CallToolResult::success(vec![ContentBlock::text("not found")]);
        assert!(classify(Ok(fine), &last).is_ok());
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
