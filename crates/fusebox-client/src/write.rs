//! The idempotent-write flow: `begin` on the ledger before the call,
//! `complete` after it.
//!
//! A write runs only on a `started` answer. A completed key is replayed from
//! the ledger with `replayed = true` and the tool is not called. A write
//! whose request may have left without a definitive answer (timeout, lost
//! connection, cancelled mid-flight, unparsable answer) is completed
//! AMBIGUOUS and the flow stops: this crate never sends it again, and every
//! later `begin` under the key answers ambiguous until an operator resolves
//! it. Only an idempotent write whose request never left (or was refused
//! with a 429 before anything happened) is retried, under the same key with
//! a new attempt id.
//!
//! A tool may answer a write with a handle to work still running (an MCP
//! task, a job id) rather than its result: [`Client::write_following`].
//! The call that started the work is the gated attempt; the record then
//! stays in progress, its lease held for the journey, while the caller's
//! `follow` sees the work to its end, and what `follow` answers completes
//! the record as the attempt's own answer would have.

use crate::call::{AttemptEnd, Pass};
use crate::client::Client;
use crate::convert::effect_to_proto;
use crate::error::{ClientError, Layer};
use crate::journey::Journey;
use crate::metrics::bump;
use crate::retry;
use crate::tool::{CallContext, Started, ToolFailure, ToolRef};
use fusebox_core::limits::{LEASE_MS_MAX, STORED_RESULT_BYTES_MAX};
use fusebox_core::policy::{EffectClass, ToolPolicy};
use fusebox_core::OutcomeClass;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::begin_response::Outcome as Begun;
use fusebox_proto::v1::complete_request::Outcome as Completion;
use fusebox_proto::v1::ledger_client::LedgerClient;
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often a held lease is renewed: a third of the longest lease.
const LEASE_RENEW_EVERY: Duration = Duration::from_millis(LEASE_MS_MAX / 3);

/// One write intent: the tool, its idempotency key, its target and the
/// fingerprint of its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRequest {
    /// The write tool.
    pub tool: ToolRef,
    /// The idempotency key, stable across retries of one intent (see
    /// [`derive_key`](crate::derive_key)).
    pub key: String,
    /// The target or backend the write aims at.
    pub target: String,
    /// SHA-256 of the request's meaningful arguments, so a key reused for a
    /// different request is caught.
    pub fingerprint: Vec<u8>,
}

impl WriteRequest {
    /// A write of `tool` under `key` aimed at `target`, fingerprinted from
    /// the canonical bytes of its arguments.
    pub fn new(
        tool: ToolRef,
        key: impl Into<String>,
        target: impl Into<String>,
        args: &[u8],
    ) -> Self {
        WriteRequest {
            tool,
            key: key.into(),
            target: target.into(),
            fingerprint: Sha256::digest(args).to_vec(),
        }
    }
}

/// What a write tool returns on success: the backend's operation id and a
/// small result the ledger stores for replays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteSuccess {
    /// The backend's id for the operation, to cross-check later.
    pub operation_id: String,
    /// The result to replay, at most the server's `stored_result_bytes_max`.
    pub result: Vec<u8>,
}

/// A write that succeeded now or earlier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteOutput {
    /// The backend's operation id.
    pub operation_id: Option<String>,
    /// The result, as stored.
    pub result: Vec<u8>,
    /// True when the ledger answered from an earlier success and the tool
    /// was not called.
    pub replayed: bool,
    /// The attempt that performed the write (this call's, or the earlier
    /// one's on a replay).
    pub attempt_id: String,
    /// Attempts this call made (0 on a replay).
    pub attempts: u32,
}

/// What the ledger said to `begin`, as the flow acts on it.
enum Claim {
    Started {
        attempt_id: String,
        /// The cluster shortened the lease asked for to its longest: the
        /// write must renew it while the tool runs.
        clamped: bool,
    },
    Replay(WriteOutput),
}

/// How an attempt's end is recorded in the ledger, and what follows.
enum Settled {
    Succeeded(WriteSuccess),
    Released {
        class: OutcomeClass,
        message: String,
    },
    Failed {
        class: OutcomeClass,
        message: String,
    },
    Ambiguous {
        reason: String,
    },
}

impl Client {
    /// Runs a write through the ledger (see the module essay). `f` is
    /// called only after a `started` answer; `ctx.idempotency_key` carries
    /// the key to send to the backend.
    ///
    /// Every error names the journey's intent id, for the user to quote.
    pub async fn write<F, Fut>(
        &self,
        journey: &Journey,
        request: &WriteRequest,
        f: F,
    ) -> Result<WriteOutput, ClientError>
    where
        F: FnMut(CallContext) -> Fut,
        Fut: Future<Output = Result<WriteSuccess, ToolFailure>>,
    {
        let mut f = f;
        let start = |ctx| {
            let call = f(ctx);
            async move { call.await.map(Started::Done) }
        };
        let follow = |never: Infallible| async move { match never {} };
        self.write_guarded(journey, request, start, follow)
            .await
            .map_err(|e| e.in_intent(journey.intent_id()))
    }

    /// [`Client::write`] for a tool that may answer with a handle to work
    /// still running. `start` is the attempt, as `f` is in `write`. When it
    /// answers [`Started::Running`], the record stays in progress with its
    /// lease held for the rest of the journey, and `follow(handle)` sees
    /// the work to its end, holding the attempt's admission (and probe
    /// permit) meanwhile. Its answer is the attempt's: one outcome for the
    /// breaker, and the record completed as `start`'s answer would have
    /// completed it (a failure whose request had left, such as a poll that
    /// got no answer, makes the write ambiguous). `follow` runs outside the
    /// attempt's deadline: it bounds itself, within the journey's budget.
    pub async fn write_following<F, Fut, H, G, Gut>(
        &self,
        journey: &Journey,
        request: &WriteRequest,
        start: F,
        follow: G,
    ) -> Result<WriteOutput, ClientError>
    where
        F: FnMut(CallContext) -> Fut,
        Fut: Future<Output = Result<Started<WriteSuccess, H>, ToolFailure>>,
        G: FnMut(H) -> Gut,
        Gut: Future<Output = Result<WriteSuccess, ToolFailure>>,
    {
        self.write_guarded(journey, request, start, follow)
            .await
            .map_err(|e| e.in_intent(journey.intent_id()))
    }

    async fn write_guarded<F, Fut, H, G, Gut>(
        &self,
        journey: &Journey,
        request: &WriteRequest,
        mut f: F,
        mut follow: G,
    ) -> Result<WriteOutput, ClientError>
    where
        F: FnMut(CallContext) -> Fut,
        Fut: Future<Output = Result<Started<WriteSuccess, H>, ToolFailure>>,
        G: FnMut(H) -> Gut,
        Gut: Future<Output = Result<WriteSuccess, ToolFailure>>,
    {
        let tool = &request.tool;
        let policy = as_write(self.open_intent(journey, tool)?);
        // `open_intent` checks the kill switch for tools whose policy says
        // they write; a write is a write whatever the view says.
        self.refuse_if_blocked(tool)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut pass = self.pass_gate(journey, tool, &policy).await?;
            let deadline = journey.deadline(self.tool_timeout(tool, &policy), Layer::Tool);
            let lease_ms = u64::try_from(deadline.duration.as_millis())
                .unwrap_or(u64::MAX)
                .saturating_add(self.inner.config.write_lease_margin_ms);
            let (attempt_id, clamped) = match self.begin(journey, request, &policy, lease_ms).await
            {
                Ok(Claim::Started {
                    attempt_id,
                    clamped,
                }) => (attempt_id, clamped),
                Ok(Claim::Replay(output)) => {
                    self.drop_pass(tool, pass);
                    bump(&self.inner.metrics.writes_replayed);
                    return Ok(output);
                }
                Err(e) => {
                    self.drop_pass(tool, pass);
                    return Err(e);
                }
            };
            bump(&self.inner.metrics.writes_started);
            let probe = pass.holds_cluster_permit();
            let mut ctx =
                self.context(journey, attempt, deadline, Some(request.key.clone()), probe);
            ctx.tool_call_id = attempt_id.clone();
            // A write is never ended when its breaker opens, nor at its
            // stall: ending it would turn a wait into an unknown outcome.
            let call = self.attempt(journey, tool, &mut pass, (ctx, false), deadline, &mut f);
            let (end, elapsed) = if clamped {
                // A call longer than the longest lease: keep the key ours
                // until it ends (`renewing` never finishes by itself).
                tokio::select! {
                    ended = call => ended,
                    () = self.renewing(journey, request, &attempt_id, LEASE_RENEW_EVERY, LEASE_MS_MAX) => unreachable!("renewing never ends"),
                }
            } else {
                call.await
            };
            // Work still running is followed to its end, which is then the
            // attempt's: one outcome for the breaker, one for the record.
            let (end, elapsed) = match end.running() {
                Err(end) => (end, elapsed),
                Ok(handle) => {
                    let following = Instant::now();
                    let ended = self
                        .follow_running(journey, request, &attempt_id, follow(handle))
                        .await;
                    (AttemptEnd::Done(ended), elapsed + following.elapsed())
                }
            };
            let class = end.class();
            let settled = self.settled(journey, tool, end, elapsed);
            self.settle(tool, pass, class, elapsed);
            let recorded = self.complete(journey, request, &attempt_id, &settled).await;
            match settled {
                Settled::Succeeded(s) => {
                    if let Err(e) = recorded {
                        tracing::warn!(key = %request.key, error = %e, "write succeeded but its completion was not recorded; the lease will lapse");
                    }
                    return Ok(WriteOutput {
                        operation_id: Some(s.operation_id),
                        result: s.result,
                        replayed: false,
                        attempt_id,
                        attempts: attempt,
                    });
                }
                Settled::Ambiguous { reason } => {
                    bump(&self.inner.metrics.writes_ambiguous);
                    return Err(ClientError::AmbiguousOutcome {
                        intent_id: None,
                        tool: tool.tool().to_owned(),
                        key: request.key.clone(),
                        attempt_id,
                        reason,
                    });
                }
                Settled::Failed { class, message } => {
                    return Err(self.write_failed(tool, class, message, attempt));
                }
                Settled::Released { class, message } => {
                    let wait = self.backoff(&policy, attempt);
                    let may = recorded.is_ok()
                        && policy.effect == EffectClass::IdempotentWrite
                        && retry::may_retry(&policy, class, attempt, wait, journey.available());
                    if !may {
                        return Err(self.write_failed(tool, class, message, attempt));
                    }
                    bump(&self.inner.metrics.retries);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Returns an unused probe permit (the tool was not called).
    fn drop_pass(&self, tool: &ToolRef, pass: Pass) {
        if pass.permit.is_some() {
            self.settle(tool, pass, OutcomeClass::Cancelled, Duration::ZERO);
        }
    }

    fn write_failed(
        &self,
        tool: &ToolRef,
        class: OutcomeClass,
        message: String,
        attempts: u32,
    ) -> ClientError {
        ClientError::ToolFailed {
            intent_id: None,
            tool: tool.tool().to_owned(),
            class,
            message,
            attempts,
        }
    }

    /// What the ledger must record for an attempt's end.
    fn settled(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        end: AttemptEnd<WriteSuccess>,
        elapsed: Duration,
    ) -> Settled {
        match end {
            AttemptEnd::Done(Ok(success)) => Settled::Succeeded(success),
            AttemptEnd::Done(Err(failure)) => settle_failure(failure),
            AttemptEnd::TimedOut { .. } | AttemptEnd::Cancelled | AttemptEnd::CircuitOpened(_) => {
                Settled::Ambiguous {
                    reason: format!(
                        "{}; the request had left",
                        self.stopped(journey, tool, &end, elapsed)
                    ),
                }
            }
        }
    }

    /// `begin` on the ledger; every answer but `started` and a successful
    /// replay is an error the model can act on.
    async fn begin(
        &self,
        journey: &Journey,
        request: &WriteRequest,
        policy: &ToolPolicy,
        lease_ms: u64,
    ) -> Result<Claim, ClientError> {
        let attempt_id = crate::call::new_attempt_id();
        let message = pb::BeginRequest {
            namespace: self.inner.config.namespace.to_string(),
            meta: None,
            key: request.key.clone(),
            fingerprint: request.fingerprint.clone(),
            intent_id: journey.intent_id().to_owned(),
            server: request.tool.server().to_owned(),
            tool: request.tool.tool().to_owned(),
            target: request.target.clone(),
            effect: effect_to_proto(policy.effect) as i32,
            attempt_id: attempt_id.clone(),
            // The server clamps a lease past its longest (the proto says so).
            lease_ms,
        };
        let rpc = journey.deadline(self.inner.config.rpc_timeout(), Layer::Cluster);
        let answer = self
            .inner
            .endpoints
            .call_with("ledger_begin", rpc.duration, message, |node, req| {
                node.begin(req)
            })
            .await
            .map_err(|e| self.begin_refused(&request.tool, e))?;
        self.claim(request, attempt_id, answer.outcome)
    }

    /// Awaits `followed`, the end of a write still running, with the
    /// record's lease stretched at once to the rest of the journey (capped
    /// at the longest lease, and renewed past that).
    async fn follow_running(
        &self,
        journey: &Journey,
        request: &WriteRequest,
        attempt_id: &str,
        followed: impl Future<Output = Result<WriteSuccess, ToolFailure>>,
    ) -> Result<WriteSuccess, ToolFailure> {
        let lease_ms = u64::try_from(journey.remaining().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(self.inner.config.write_lease_margin_ms)
            .min(LEASE_MS_MAX);
        tokio::select! {
            ended = followed => ended,
            () = self.renewing(journey, request, attempt_id, Duration::ZERO, lease_ms) => unreachable!("renewing never ends"),
        }
    }

    /// Renews the lease of `attempt_id`, first `first` from now to
    /// `first_lease_ms`, then to the longest lease a third of it apart, for
    /// as long as it is polled; a refused renewal (the lease lapsed, the
    /// key settled) stops renewing, and the completion will say what
    /// happened.
    async fn renewing(
        &self,
        journey: &Journey,
        request: &WriteRequest,
        attempt_id: &str,
        first: Duration,
        first_lease_ms: u64,
    ) {
        let mut next = (first, first_lease_ms);
        loop {
            let (wait, lease_ms) = std::mem::replace(&mut next, (LEASE_RENEW_EVERY, LEASE_MS_MAX));
            tokio::time::sleep(wait).await;
            let message = pb::RenewRequest {
                namespace: self.inner.config.namespace.to_string(),
                meta: None,
                key: request.key.clone(),
                attempt_id: attempt_id.to_owned(),
                lease_ms,
            };
            let rpc = journey.deadline(self.inner.config.rpc_timeout(), Layer::Cluster);
            let renewed = self
                .inner
                .endpoints
                .call(
                    "ledger_renew",
                    rpc.duration,
                    message,
                    |channel, req| async move { LedgerClient::new(channel).renew(req).await },
                )
                .await;
            if let Err(e) = renewed {
                tracing::warn!(key = %request.key, error = %e, "lease renewal refused; no more renewals for this attempt");
                std::future::pending::<()>().await;
            }
        }
    }

    fn claim(
        &self,
        request: &WriteRequest,
        attempt_id: String,
        outcome: Option<Begun>,
    ) -> Result<Claim, ClientError> {
        let tool = request.tool.tool().to_owned();
        let key = request.key.clone();
        match outcome {
            Some(Begun::Started(s)) => Ok(Claim::Started {
                clamped: s.lease_clamped,
                attempt_id: if s.attempt_id.is_empty() {
                    attempt_id
                } else {
                    s.attempt_id
                },
            }),
            Some(Begun::Completed(c)) => replay(tool, key, c.record),
            Some(Begun::InProgress(p)) => Err(ClientError::InProgress {
                intent_id: None,
                tool,
                key,
                holder_attempt_id: p.holder_attempt_id,
                retry_after_ms: p
                    .lease_until_ms
                    .saturating_sub(self.wall_clock().as_millis()),
            }),
            Some(Begun::Mismatch(_)) => Err(ClientError::Mismatch {
                tool,
                key,
                intent_id: None,
            }),
            Some(Begun::Ambiguous(a)) => {
                let record = a.record.unwrap_or_default();
                Err(ClientError::AmbiguousOutcome {
                    intent_id: None,
                    tool,
                    key,
                    attempt_id: record.attempt_id,
                    reason: record
                        .ambiguity_reason
                        .unwrap_or_else(|| "an earlier attempt's outcome is unknown".to_owned()),
                })
            }
            None => Err(ClientError::Cluster {
                intent_id: None,
                operation: "ledger_begin",
                code: tonic::Code::Internal,
                error_code: None,
                message: "begin answered nothing".to_owned(),
            }),
        }
    }

    /// Turns the server's WRITES_BLOCKED refusal into the model's error.
    fn begin_refused(&self, tool: &ToolRef, e: ClientError) -> ClientError {
        match e {
            ClientError::Cluster {
                intent_id: None,
                error_code: Some(code),
                message,
                ..
            } if code == pb::ErrorCode::WritesBlocked as i32 => {
                bump(&self.inner.metrics.writes_blocked);
                ClientError::WritesBlocked {
                    intent_id: None,
                    tool: tool.tool().to_owned(),
                    reason: message,
                }
            }
            other => other,
        }
    }

    /// `complete` on the ledger, within what is left of the journey (its
    /// reserve included: recording the outcome is part of answering). If it
    /// fails, the lease lapses: a non-idempotent write then turns ambiguous
    /// on the cluster by itself.
    async fn complete(
        &self,
        journey: &Journey,
        request: &WriteRequest,
        attempt_id: &str,
        settled: &Settled,
    ) -> Result<(), ClientError> {
        let outcome = match settled {
            Settled::Succeeded(s) => Completion::Succeeded(pb::CompleteSucceeded {
                operation_id: s.operation_id.clone(),
                result: storable(&request.key, &s.result),
            }),
            Settled::Released { message, .. } => {
                Completion::FailedBeforeExecution(pb::CompleteFailedBeforeExecution {
                    reason: message.clone(),
                })
            }
            Settled::Failed { message, .. } => Completion::Failed(pb::CompleteFailed {
                reason: message.clone(),
            }),
            Settled::Ambiguous { reason } => Completion::Ambiguous(pb::CompleteAmbiguous {
                reason: reason.clone(),
            }),
        };
        let message = pb::CompleteRequest {
            namespace: self.inner.config.namespace.to_string(),
            meta: None,
            key: request.key.clone(),
            attempt_id: attempt_id.to_owned(),
            outcome: Some(outcome),
        };
        let deadline = self.inner.config.rpc_timeout().min(journey.remaining());
        self.inner
            .endpoints
            .call_with("ledger_complete", deadline, message, |node, req| {
                node.complete(req)
            })
            .await
            .map(|_| ())
    }
}

/// The result as the ledger can keep it: one over
/// [`STORED_RESULT_BYTES_MAX`] would get the whole completion refused, the
/// lease would lapse and a non-idempotent write would turn ambiguous
/// although it succeeded. The success is recorded without it instead, and
/// a replay returns the operation id and an empty result.
fn storable(key: &str, result: &[u8]) -> Vec<u8> {
    if result.len() > STORED_RESULT_BYTES_MAX {
        tracing::warn!(
            key,
            bytes = result.len(),
            max = STORED_RESULT_BYTES_MAX,
            "write result too large to store; a replay of this key returns no result"
        );
        return Vec::new();
    }
    result.to_vec()
}

/// How a classified failure is recorded.
/// The policy a write goes by. A tool called through `write` is a write,
/// whatever effect its policy resolves to: a replica whose view has not yet
/// received the namespace's policy resolves every tool to the built-in
/// `read_only`, and a write recorded in the ledger as read-only (so
/// idempotent) was taken over once its lease lapsed and ran twice (chaos
/// seed 8263). So only a declared idempotent write keeps that effect;
/// anything else is treated as non-idempotent.
fn as_write(policy: Arc<ToolPolicy>) -> Arc<ToolPolicy> {
    if policy.effect.is_write() {
        return policy;
    }
    let mut write = (*policy).clone();
    write.effect = EffectClass::NonIdempotentWrite;
    Arc::new(write)
}

fn settle_failure(failure: ToolFailure) -> Settled {
    let ToolFailure {
        class,
        message,
        request_left,
        ..
    } = failure;
    if !request_left || class == OutcomeClass::RateLimited {
        return Settled::Released { class, message };
    }
    match class {
        OutcomeClass::Timeout
        | OutcomeClass::Transport
        | OutcomeClass::Cancelled
        | OutcomeClass::Unparsable => Settled::Ambiguous {
            reason: format!("{}: {message}; the request had left", class.as_str()),
        },
        _ => Settled::Failed { class, message },
    }
}

/// A completed key: the stored success, or the stored failure as an error.
fn replay(
    tool: String,
    key: String,
    record: Option<pb::LedgerRecord>,
) -> Result<Claim, ClientError> {
    let record = record.unwrap_or_default();
    if record.status == pb::LedgerStatus::Succeeded as i32 {
        return Ok(Claim::Replay(WriteOutput {
            operation_id: record.operation_id,
            result: record.result.unwrap_or_default(),
            replayed: true,
            attempt_id: record.attempt_id,
            attempts: 0,
        }));
    }
    let status = pb::LedgerStatus::try_from(record.status)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("LEDGER_STATUS_")
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|_| "unknown".to_owned());
    Err(ClientError::WriteNotReplayable {
        intent_id: None,
        tool,
        key,
        status,
        reason: record.failure_reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_core::policy::PolicyDocument;
    use fusebox_core::{ServerName, ToolName};

    #[test]
    fn a_write_is_non_idempotent_unless_declared_idempotent() {
        // What a view without the namespace's policy resolves: read-only.
        let unknown = PolicyDocument::default().tool_policy(
            &ServerName::new("billing").unwrap(),
            &ToolName::new("charge").unwrap(),
        );
        assert_eq!(unknown.effect, EffectClass::ReadOnly);
        let effect = |e: EffectClass| {
            let mut p = unknown.clone();
            p.effect = e;
            as_write(Arc::new(p)).effect
        };
        assert_eq!(
            effect(EffectClass::ReadOnly),
            EffectClass::NonIdempotentWrite
        );
        assert_eq!(
            effect(EffectClass::ExpensiveRead),
            EffectClass::NonIdempotentWrite
        );
        assert_eq!(
            effect(EffectClass::IdempotentWrite),
            EffectClass::IdempotentWrite
        );
        assert_eq!(
            effect(EffectClass::NonIdempotentWrite),
            EffectClass::NonIdempotentWrite
        );
    }

    #[test]
    fn a_write_whose_request_left_without_an_answer_is_ambiguous() {
        let lost = ToolFailure::new(OutcomeClass::Transport, "connection reset");
        assert!(matches!(settle_failure(lost), Settled::Ambiguous { .. }));
        let refused = ToolFailure::new(OutcomeClass::Transport, "refused").before_sending();
        assert!(matches!(settle_failure(refused), Settled::Released { .. }));
        let throttled = ToolFailure::new(OutcomeClass::RateLimited, "429");
        assert!(matches!(
            settle_failure(throttled),
            Settled::Released { .. }
        ));
        let said_no = ToolFailure::new(OutcomeClass::ServerError, "500");
        assert!(matches!(settle_failure(said_no), Settled::Failed { .. }));
    }

    #[test]
    fn a_result_too_large_to_store_is_recorded_empty() {
        assert_eq!(storable("k", b"ok"), b"ok".to_vec());
        let exact = vec![0u8; STORED_RESULT_BYTES_MAX];
        assert_eq!(storable("k", &exact).len(), STORED_RESULT_BYTES_MAX);
        assert!(storable("k", &vec![0u8; STORED_RESULT_BYTES_MAX + 1]).is_empty());
    }

    #[test]
    fn the_fingerprint_depends_on_the_arguments() {
        let tool = ToolRef::new("jobs", "restart").unwrap_or_else(|_| unreachable!());
        let a = WriteRequest::new(tool.clone(), "k", "job-1", b"{\"force\":true}");
        let b = WriteRequest::new(tool, "k", "job-1", b"{\"force\":false}");
        assert_ne!(a.fingerprint, b.fingerprint);
        assert_eq!(a.fingerprint.len(), 32);
    }
}
