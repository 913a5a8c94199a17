//! A gated tool call: admission, deadline, cancellation, outcome report and
//! bounded retries. Writes add the ledger around the same steps
//! (`write.rs`).

use crate::client::Client;
use crate::convert::tool_key;
use crate::decision::Decision;
use crate::error::{ClientError, Layer};
use crate::journey::{Deadline, Journey};
use crate::local_breakers::{server_key, LocalPermit};
use crate::metrics::bump;
use crate::probe::{self, ClusterPermit, ProbeAnswer};
use crate::reporter::Queued;
use crate::retry;
use crate::tool::{CallContext, CallOutput, Started, ToolFailure, ToolRef};
use crate::view::Resolved;
use fusebox_core::breaker::{Admission, BreakerState, RejectScope};
use fusebox_core::disclosure::{assess, DegradationMode, ModeAdvice};
use fusebox_core::policy::{EffectClass, InFlightOnOpen, OnPartition, ToolPolicy};
use fusebox_core::OutcomeClass;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument;

/// The permit a half-open call runs under.
#[derive(Debug)]
pub(crate) enum Permit {
    Cluster(ClusterPermit),
    Local(LocalPermit),
}

/// A call that passed the gate.
#[derive(Debug)]
pub(crate) struct Pass {
    pub(crate) decision: Decision,
    pub(crate) permit: Option<Permit>,
    /// When the call went unanswered past its policy's `stalled_after_ms`.
    /// A call without a permit was counted then, as a timeout, and its end
    /// is not counted again; a probe gives its permit back when its call
    /// ends, failed as the timeout it was at the stall.
    pub(crate) stalled: Option<Duration>,
}

impl Pass {
    /// The call is a probe under a fleet-wide permit (a local permit, taken
    /// while the view is stale, is not one).
    pub(crate) fn holds_cluster_permit(&self) -> bool {
        matches!(self.permit, Some(Permit::Cluster(_)))
    }
}

/// How one attempt ended.
pub(crate) enum AttemptEnd<T> {
    /// The tool answered (success or a classified failure).
    Done(Result<T, ToolFailure>),
    /// A deadline expired; the call was cancelled.
    TimedOut { layer: Layer, deadline: Duration },
    /// The journey was cancelled.
    Cancelled,
    /// The tool's breaker opened while the call ran, and its policy says
    /// `in_flight_on_open = "end"`: the call was ended with the refusal it
    /// would now get.
    CircuitOpened(Box<Refusal>),
}

/// An open breaker's refusal, as admission read it.
#[derive(Debug)]
pub(crate) struct Refusal {
    decision: Decision,
    scope: RejectScope,
    state: BreakerState,
    retry_after_ms: Option<u64>,
}

impl<T> AttemptEnd<T> {
    /// The class reported for the breaker. A call cut short by the journey's
    /// budget (not the tool's own deadline) says nothing about the tool, so
    /// it is reported cancelled, not timed out.
    pub(crate) fn class(&self) -> OutcomeClass {
        match self {
            AttemptEnd::Done(Ok(_)) => OutcomeClass::Success,
            AttemptEnd::Done(Err(f)) => f.class,
            AttemptEnd::TimedOut {
                layer: Layer::Tool, ..
            } => OutcomeClass::Timeout,
            // The breaker is open already; the call ended says nothing
            // more about the tool.
            AttemptEnd::TimedOut { .. } | AttemptEnd::Cancelled | AttemptEnd::CircuitOpened(_) => {
                OutcomeClass::Cancelled
            }
        }
    }
}

impl<T, H> AttemptEnd<Started<T, H>> {
    /// The handle when the attempt started work that is still running,
    /// else how the attempt ended.
    pub(crate) fn running(self) -> Result<H, AttemptEnd<T>> {
        match self {
            AttemptEnd::Done(Ok(Started::Running(handle))) => Ok(handle),
            AttemptEnd::Done(Ok(Started::Done(value))) => Err(AttemptEnd::Done(Ok(value))),
            AttemptEnd::Done(Err(failure)) => Err(AttemptEnd::Done(Err(failure))),
            AttemptEnd::TimedOut { layer, deadline } => {
                Err(AttemptEnd::TimedOut { layer, deadline })
            }
            AttemptEnd::Cancelled => Err(AttemptEnd::Cancelled),
            AttemptEnd::CircuitOpened(refusal) => Err(AttemptEnd::CircuitOpened(refusal)),
        }
    }
}

/// Whether a call in flight ends when its breaker opens: `policy` decides
/// for a read; a write always finishes, since ending it would turn a wait
/// into an unknown outcome (and `write`'s ledger records what it did, so
/// it never asks, whatever the view's policy says of the tool).
fn ends_on_open(policy: &ToolPolicy) -> bool {
    policy.effect == EffectClass::ReadOnly && policy.in_flight_on_open == InFlightOnOpen::End
}

/// When a call admitted under `policy` counts as stalled: its
/// `stalled_after_ms`, if that comes before `deadline`.
fn stalls_after(policy: &ToolPolicy, deadline: Duration) -> Option<Duration> {
    let after = Duration::from_millis(policy.stalled_after_ms?);
    (after < deadline).then_some(after)
}

/// A fresh id for one attempt.
pub(crate) fn new_attempt_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Client {
    /// Calls a tool through the gate: admission from the local view (a probe
    /// permit in HALF_OPEN), a deadline capped by the journey, cancellation,
    /// the outcome reported, and bounded retries for retry-safe tools.
    ///
    /// `f` is called once per attempt with that attempt's [`CallContext`];
    /// it should pass `ctx.cancel` on to its transport. A write-effect tool
    /// is refused while the kill switch is on; use [`Client::write`] for
    /// writes so the ledger guards them.
    ///
    /// Every error names the journey's intent id, for the user to quote.
    pub async fn call<T, F, Fut>(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        f: F,
    ) -> Result<CallOutput<T>, ClientError>
    where
        F: FnMut(CallContext) -> Fut,
        Fut: Future<Output = Result<T, ToolFailure>>,
    {
        let mut f = f;
        let start = |ctx| {
            let call = f(ctx);
            async move { call.await.map(Started::Done) }
        };
        let follow = |never: Infallible| async move { match never {} };
        self.call_gated(journey, tool, start, follow)
            .await
            .map_err(|e| e.in_intent(journey.intent_id()))
    }

    /// [`Client::call`] for a tool that may answer with a handle to work
    /// still running (an MCP task, a job id). `start` is the attempt, as
    /// `f` is in `call`. When it answers [`Started::Running`],
    /// `follow(handle)` sees the work to its end, holding the attempt's
    /// admission (and probe permit) meanwhile, and its answer is the
    /// attempt's: one outcome for the breaker, retried as `call` retries.
    /// `follow` runs outside the attempt's deadline: it bounds itself,
    /// within the journey's budget.
    pub async fn call_following<T, H, F, Fut, G, Gut>(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        start: F,
        follow: G,
    ) -> Result<CallOutput<T>, ClientError>
    where
        F: FnMut(CallContext) -> Fut,
        Fut: Future<Output = Result<Started<T, H>, ToolFailure>>,
        G: FnMut(H) -> Gut,
        Gut: Future<Output = Result<T, ToolFailure>>,
    {
        self.call_gated(journey, tool, start, follow)
            .await
            .map_err(|e| e.in_intent(journey.intent_id()))
    }

    async fn call_gated<T, H, F, Fut, G, Gut>(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        mut f: F,
        mut follow: G,
    ) -> Result<CallOutput<T>, ClientError>
    where
        F: FnMut(CallContext) -> Fut,
        Fut: Future<Output = Result<Started<T, H>, ToolFailure>>,
        G: FnMut(H) -> Gut,
        Gut: Future<Output = Result<T, ToolFailure>>,
    {
        let policy = self.open_intent(journey, tool)?;
        let mut attempt = 0;
        // A queueing mode the tool reported stretches later attempts.
        let mut stretched = Duration::ZERO;
        loop {
            attempt += 1;
            let mut pass = self.pass_gate(journey, tool, &policy).await?;
            let (circuit_state, degraded) = (pass.decision.state, pass.decision.degraded);
            let probe = pass.holds_cluster_permit();
            let timeout = self.tool_timeout(tool, &policy).max(stretched);
            let deadline = journey.deadline(timeout, Layer::Tool);
            let ctx = self.context(journey, attempt, deadline, None, probe);
            let ends = ends_on_open(&policy);
            let (end, elapsed) = self
                .attempt(journey, tool, &mut pass, (ctx, ends), deadline, &mut f)
                .await;
            let (end, elapsed) = match end.running() {
                Err(end) => (end, elapsed),
                Ok(handle) => {
                    let following = Instant::now();
                    let ended = follow(handle).await;
                    (AttemptEnd::Done(ended), elapsed + following.elapsed())
                }
            };
            self.settle(tool, pass, end.class(), elapsed);
            let failure = match end {
                AttemptEnd::Done(Ok(value)) => {
                    return Ok(CallOutput {
                        value,
                        attempts: attempt,
                        circuit_state,
                        degraded,
                        probe,
                    })
                }
                AttemptEnd::Done(Err(failure)) => failure,
                AttemptEnd::CircuitOpened(r) => {
                    return Err(self.rejected(
                        tool,
                        &r.decision,
                        r.scope,
                        r.state,
                        r.retry_after_ms,
                    ))
                }
                other => return Err(self.stopped(journey, tool, &other, elapsed)),
            };
            let mode = self.disclosed_mode(tool, &failure);
            let advice = mode
                .as_ref()
                .map_or(ModeAdvice::None, DegradationMode::advice);
            if advice == ModeAdvice::Queue {
                if let Some(m) = &mode {
                    stretched = Duration::from_millis(m.deadline_ms());
                }
            }
            let wait = self.backoff(&policy, attempt);
            let allowed = advice != ModeAdvice::FailFast
                && retry::may_retry(&policy, failure.class, attempt, wait, journey.available())
                && self.disclosure_allows_retry(tool, failure.class);
            if !allowed {
                let message = match &mode {
                    Some(m) => mode_note(failure.message, m),
                    None => failure.message,
                };
                return Err(ClientError::ToolFailed {
                    intent_id: None,
                    tool: tool.tool().to_owned(),
                    class: failure.class,
                    message,
                    attempts: attempt,
                });
            }
            tracing::debug!(tool = %tool.tool(), attempt, class = failure.class.as_str(), wait_ms = ms(wait), "retrying");
            bump(&self.inner.metrics.retries);
            tokio::time::sleep(wait).await;
        }
    }

    /// Reports the outcome of a call the agent made itself after
    /// [`Client::admit`] allowed it: into the report buffer (never blocks;
    /// dropped and counted when full) and to the local fallback breakers.
    pub fn report(
        &self,
        tool: &ToolRef,
        decision: &Decision,
        class: OutcomeClass,
        elapsed: Duration,
    ) {
        let pass = Pass {
            decision: decision.clone(),
            permit: None,
            stalled: None,
        };
        self.settle(tool, pass, class, elapsed);
    }

    /// The wait before the next attempt.
    pub(crate) fn backoff(&self, policy: &ToolPolicy, attempt: u32) -> Duration {
        Duration::from_millis(retry::backoff_ms(&policy.retry, attempt, fastrand::f64()))
    }

    /// `writes_blocked` when the kill switch is on (local view, no network).
    pub(crate) fn refuse_if_blocked(&self, tool: &ToolRef) -> Result<(), ClientError> {
        if !self.inner.view.writes_blocked() {
            return Ok(());
        }
        bump(&self.inner.metrics.writes_blocked);
        Err(ClientError::WritesBlocked {
            intent_id: None,
            tool: tool.tool().to_owned(),
            reason: self.inner.view.kill_switch().reason,
        })
    }

    /// The deadline a call on `tool` gets before any journey caps it: p99 ×
    /// 1.2 from a fresh, valid disclosure, else the policy's `timeout_ms`.
    pub fn tool_deadline(&self, tool: &ToolRef) -> Duration {
        let policy = self.inner.view.tool_policy(tool);
        self.tool_timeout(tool, &policy)
    }

    /// What the tool's own fresh, valid disclosure says of retrying after
    /// `class` (latency disclosure: retry budget only when `retry_safe`; a
    /// non-idempotent tool only on a transport failure, which never reached
    /// it). Without a usable disclosure the policy alone decides.
    pub(crate) fn disclosure_allows_retry(&self, tool: &ToolRef, class: OutcomeClass) -> bool {
        let Some(block) = self.inner.view.disclosure(tool) else {
            return true;
        };
        if !assess(&block, self.wall_clock()).is_usable() {
            return true;
        }
        retry::disclosed_retry(block.retry_safe, block.idempotent, class)
    }

    /// The documented degradation mode `failure` reports, from the tool's
    /// own fresh, valid disclosure.
    pub(crate) fn disclosed_mode(
        &self,
        tool: &ToolRef,
        failure: &ToolFailure,
    ) -> Option<DegradationMode> {
        let reported = failure.mode.as_deref()?;
        let block = self.inner.view.disclosure(tool)?;
        if !assess(&block, self.wall_clock()).is_usable() {
            return None;
        }
        block.mode(reported).cloned()
    }

    /// The tool's own deadline: p99 × 1.2 from a fresh, valid, binding
    /// disclosure, else the policy's `timeout_ms`.
    pub(crate) fn tool_timeout(&self, tool: &ToolRef, policy: &ToolPolicy) -> Duration {
        let disclosed = self
            .inner
            .view
            .disclosure(tool)
            .and_then(|block| assess(&block, self.wall_clock()).deadline_ms());
        Duration::from_millis(disclosed.unwrap_or(policy.timeout_ms))
    }

    /// Counts the intent and resolves the tool's policy; a write-effect tool
    /// is refused here while the kill switch is on.
    pub(crate) fn open_intent(
        &self,
        journey: &Journey,
        tool: &ToolRef,
    ) -> Result<Arc<ToolPolicy>, ClientError> {
        self.count_intent(journey);
        let policy = self.inner.view.tool_policy(tool);
        if policy.effect.is_write() {
            self.refuse_if_blocked(tool)?;
        }
        Ok(policy)
    }

    /// The context handed to one attempt.
    pub(crate) fn context(
        &self,
        journey: &Journey,
        attempt: u32,
        deadline: Deadline,
        idempotency_key: Option<String>,
        probe: bool,
    ) -> CallContext {
        CallContext {
            intent_id: journey.intent_id().to_owned(),
            tool_call_id: new_attempt_id(),
            attempt,
            deadline: deadline.duration,
            deadline_layer: deadline.layer,
            cancel: journey.call_token(),
            idempotency_key,
            probe,
        }
    }

    /// Budget, admission and, in HALF_OPEN, a probe permit.
    pub(crate) async fn pass_gate(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        policy: &ToolPolicy,
    ) -> Result<Pass, ClientError> {
        if journey.is_cancelled() {
            return Err(ClientError::Cancelled {
                intent_id: None,
                tool: tool.tool().to_owned(),
                elapsed_ms: 0,
            });
        }
        if journey.available().is_zero() {
            bump(&self.inner.metrics.budget_exhausted);
            return Err(ClientError::BudgetExhausted {
                tool: tool.tool().to_owned(),
                intent_id: journey.intent_id().to_owned(),
                elapsed_ms: ms(journey.elapsed()),
                budget_ms: ms(journey.budget()),
                reserve_ms: ms(journey.reserve()),
            });
        }
        let decision = self.admit_with(self.inner.view.resolved(tool));
        match decision.admission.clone() {
            Admission::Allow { would_reject } => {
                if would_reject {
                    bump(&self.inner.metrics.shadow_would_reject);
                }
                Ok(Pass {
                    decision,
                    permit: None,
                    stalled: None,
                })
            }
            Admission::Reject {
                scope,
                state,
                retry_after_ms,
            } => Err(self.rejected(tool, &decision, scope, state, retry_after_ms)),
            Admission::Probe { scope } => self.probe(journey, tool, policy, decision, scope).await,
        }
    }

    fn rejected(
        &self,
        tool: &ToolRef,
        decision: &Decision,
        scope: RejectScope,
        state: BreakerState,
        retry_after_ms: Option<u64>,
    ) -> ClientError {
        bump(&self.inner.metrics.rejects);
        if decision.on_partition == Some(OnPartition::FailClosed) {
            return ClientError::PartitionFailClosed {
                intent_id: None,
                tool: tool.tool().to_owned(),
                view_age_ms: decision.view_age_ms.unwrap_or(0),
            };
        }
        ClientError::CircuitOpen {
            intent_id: None,
            tool: tool.tool().to_owned(),
            server: tool.server().to_owned(),
            whole_server: scope == RejectScope::Server,
            state,
            retry_after_ms,
            degraded: decision.degraded,
            forced: decision.forced.clone().map(Box::new),
            evidence: decision.evidence,
        }
    }

    /// Asks for a probe permit: the cluster's when the view is fresh, the
    /// local breaker's when degraded.
    async fn probe(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        policy: &ToolPolicy,
        decision: Decision,
        scope: RejectScope,
    ) -> Result<Pass, ClientError> {
        let ns = &self.inner.config.namespace;
        let (key, breaker_policy) = match scope {
            RejectScope::Server => (
                server_key(ns, tool),
                self.inner.view.server_breaker_policy(tool),
            ),
            RejectScope::Tool => (tool_key(ns, tool, policy.scope), policy.breaker.clone()),
        };
        if decision.degraded {
            let permit = self
                .inner
                .local
                .acquire(&key, &breaker_policy, self.wall_clock());
            return match permit {
                Some(p) => Ok(Pass {
                    decision,
                    permit: Some(Permit::Local(p)),
                    stalled: None,
                }),
                None => Err(self.rejected(tool, &decision, scope, BreakerState::HalfOpen, None)),
            };
        }
        let rpc = journey.deadline(self.inner.config.rpc_timeout(), Layer::Cluster);
        // The probe call cannot outlive the journey's budget; the margin
        // covers returning the permit after it.
        let margin = Duration::from_millis(self.inner.config.write_lease_margin_ms);
        let lease = journey.available().saturating_add(margin);
        let answer = probe::acquire(
            &self.inner.endpoints,
            &self.inner.config,
            &key,
            rpc.duration,
            lease,
        )
        .await;
        match answer {
            Ok(ProbeAnswer::Granted(permit)) => {
                bump(&self.inner.metrics.probes_granted);
                Ok(Pass {
                    decision,
                    permit: Some(Permit::Cluster(permit)),
                    stalled: None,
                })
            }
            Ok(ProbeAnswer::NotNeeded { generation }) => {
                let mut decision = decision;
                decision.admission = Admission::Allow {
                    would_reject: false,
                };
                if scope == RejectScope::Tool {
                    decision.tool_generation = generation;
                } else {
                    decision.server_generation = generation;
                }
                Ok(Pass {
                    decision,
                    permit: None,
                    stalled: None,
                })
            }
            Ok(ProbeAnswer::Denied {
                state,
                retry_after_ms,
                whole_server,
            }) => {
                bump(&self.inner.metrics.probes_denied);
                let scope = if whole_server {
                    RejectScope::Server
                } else {
                    scope
                };
                Err(self.rejected(tool, &decision, scope, state, Some(retry_after_ms)))
            }
            Err(e) => {
                tracing::info!(tool = %tool.tool(), error = %e, "no probe permit: cluster did not answer");
                bump(&self.inner.metrics.probes_denied);
                Err(self.rejected(tool, &decision, scope, BreakerState::HalfOpen, None))
            }
        }
    }

    /// Runs one attempt under its deadline, in its own span. On expiry the
    /// call's token fires and its future is dropped. `ends` says whether the
    /// call ends when its breaker opens (`in_flight_on_open = "end"`, a
    /// read). A call still running when its policy's `stalled_after_ms`
    /// passes is counted then, as a timeout, and `pass` notes it, so its end
    /// is not counted again. A probe holds its permit for as long as its
    /// call runs, so that no other probe can start on the tool beside it: a
    /// probe that `ends` is timed out at its stall (its stall is its
    /// deadline) and gives its permit back, failed, at once; any other probe
    /// runs on, and gives its permit back when its call ends, failed as the
    /// timeout it was at the stall.
    pub(crate) async fn attempt<T, F, Fut>(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        pass: &mut Pass,
        (ctx, ends): (CallContext, bool),
        deadline: Deadline,
        f: &mut F,
    ) -> (AttemptEnd<T>, Duration)
    where
        F: FnMut(CallContext) -> Fut,
        Fut: Future<Output = Result<T, ToolFailure>>,
    {
        let span = tracing::info_span!(
            "fusebox.attempt",
            intent_id = %ctx.intent_id,
            tool_call_id = %ctx.tool_call_id,
            attempt = ctx.attempt,
            server = %tool.server(),
            tool = %tool.tool(),
            deadline_ms = ms(deadline.duration),
            deadline_layer = deadline.layer.as_str(),
            circuit_state = pass.decision.state.as_str(),
            degraded = pass.decision.degraded,
            probe = pass.holds_cluster_permit(),
            outcome_class = tracing::field::Empty,
            elapsed_ms = tracing::field::Empty,
            stalled = tracing::field::Empty,
        );
        bump(&self.inner.metrics.calls);
        let token = ctx.cancel.clone();
        let Pass {
            decision, permit, ..
        } = &mut *pass;
        let decision: &Decision = decision;
        let policy = &decision.resolution.0.policy;
        // Subscribed before the call starts, so no change is missed; a
        // probe is what tests the tool, and is never ended this way.
        let watching = (ends && permit.is_none()).then(|| self.inner.view.breaker_changes());
        let stall = stalls_after(policy, deadline.duration);
        let started = Instant::now();
        let call = f(ctx);
        let opened = self.opened(decision, watching);
        let stalling = async {
            match stall {
                Some(after) => {
                    tokio::time::sleep(after).await;
                    after
                }
                None => std::future::pending().await,
            }
        };
        let expiry = tokio::time::sleep(deadline.duration);
        let (end, stalled) = async {
            tokio::pin!(call, opened, stalling, expiry);
            let mut stalled = None;
            let end = loop {
                tokio::select! {
                    result = &mut call => break AttemptEnd::Done(result),
                    refusal = &mut opened => {
                        token.cancel();
                        break AttemptEnd::CircuitOpened(Box::new(refusal));
                    }
                    () = &mut expiry => {
                        token.cancel();
                        break AttemptEnd::TimedOut { layer: deadline.layer, deadline: deadline.duration };
                    }
                    after = &mut stalling, if stalled.is_none() => {
                        stalled = Some(after);
                        tracing::debug!(after_ms = ms(after), probe = permit.is_some(), "no answer yet: a timeout (a probe's is counted when its permit goes back)");
                        match permit {
                            Some(_) if ends => {
                                token.cancel();
                                break AttemptEnd::TimedOut { layer: Layer::Tool, deadline: after };
                            }
                            // Given back when the call ends (`settle`).
                            Some(_) => {}
                            None => self.count(tool, decision, OutcomeClass::Timeout, after),
                        }
                    }
                    () = journey.token().cancelled() => break AttemptEnd::Cancelled,
                }
            };
            (end, stalled)
        }
        .instrument(span.clone())
        .await;
        pass.stalled = stalled;
        let elapsed = started.elapsed();
        if let AttemptEnd::TimedOut { .. } = end {
            bump(&self.inner.metrics.timeouts);
        }
        span.record("outcome_class", end.class().as_str());
        span.record("elapsed_ms", ms(elapsed));
        span.record("stalled", stalled.is_some());
        (end, elapsed)
    }

    /// Resolves once the breakers of the call admitted by `decision` refuse
    /// calls (read at once, then again after each change the view takes
    /// in); never without a receiver, or once the view is gone.
    async fn opened(
        &self,
        decision: &Decision,
        watching: Option<tokio::sync::watch::Receiver<u64>>,
    ) -> Refusal {
        let Some(mut changes) = watching else {
            return std::future::pending().await;
        };
        loop {
            let decision = self.admit_with(decision.resolution.0.clone());
            if let Admission::Reject {
                scope,
                state,
                retry_after_ms,
            } = decision.admission
            {
                return Refusal {
                    decision,
                    scope,
                    state,
                    retry_after_ms,
                };
            }
            if changes.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// The error for an attempt that a deadline or a cancellation stopped.
    pub(crate) fn stopped<T>(
        &self,
        journey: &Journey,
        tool: &ToolRef,
        end: &AttemptEnd<T>,
        elapsed: Duration,
    ) -> ClientError {
        match end {
            AttemptEnd::TimedOut { layer, deadline } => ClientError::Timeout {
                tool: tool.tool().to_owned(),
                intent_id: journey.intent_id().to_owned(),
                layer: *layer,
                elapsed_ms: ms(elapsed),
                deadline_ms: ms(*deadline),
            },
            _ => ClientError::Cancelled {
                intent_id: None,
                tool: tool.tool().to_owned(),
                elapsed_ms: ms(elapsed),
            },
        }
    }

    /// Reports the outcome: the probe permit is returned with it, or it goes
    /// into the report buffer; the local breakers count it either way. A
    /// call counted when it stalled is not counted again, and a probe that
    /// stalled failed then, whatever its call did after.
    pub(crate) fn settle(
        &self,
        tool: &ToolRef,
        pass: Pass,
        class: OutcomeClass,
        elapsed: Duration,
    ) {
        match (pass.permit, pass.stalled) {
            (Some(permit), Some(after)) => self.give_back(
                tool,
                permit,
                &pass.decision,
                OutcomeClass::Timeout,
                (after, elapsed),
            ),
            (Some(permit), None) => {
                self.give_back(tool, permit, &pass.decision, class, (elapsed, elapsed))
            }
            (None, Some(_)) => {}
            (None, None) => self.count(tool, &pass.decision, class, elapsed),
        }
    }

    /// Returns a probe permit with the outcome of its call: a local permit
    /// to the local breaker; a cluster permit to the cluster, in the
    /// background, and the outcome to the local breakers too. The outcome
    /// took `duration` (a stalled probe's: until its stall); it is given
    /// back `elapsed` after the decision, which the local breakers reckon
    /// from.
    fn give_back(
        &self,
        tool: &ToolRef,
        permit: Permit,
        decision: &Decision,
        class: OutcomeClass,
        (duration, elapsed): (Duration, Duration),
    ) {
        let resolved = self.resolution(tool, decision);
        match permit {
            Permit::Local(permit) => {
                let p = if permit.key.is_server() {
                    &resolved.server_breaker
                } else {
                    &resolved.policy.breaker
                };
                let now = decision.decided_at.plus_ms(ms(elapsed));
                self.inner.local.release(&permit, p, class, now);
            }
            Permit::Cluster(permit) => {
                self.release_later(permit, class, ms(duration));
                self.count_locally(&resolved, decision, class, (duration, elapsed));
            }
        }
    }

    /// Counts the outcome of a call admitted without a permit: into the
    /// report buffer, and on the local breakers.
    fn count(&self, tool: &ToolRef, decision: &Decision, class: OutcomeClass, elapsed: Duration) {
        let resolved = self.resolution(tool, decision);
        self.inner.buffer.record(Queued {
            tool: resolved.clone(),
            class,
            duration_ms: ms(elapsed),
            generations: (decision.tool_generation, decision.server_generation),
        });
        self.count_locally(&resolved, decision, class, (elapsed, elapsed));
    }

    /// The resolution the call was admitted under (looked up again only
    /// for a decision made for another tool).
    fn resolution(&self, tool: &ToolRef, decision: &Decision) -> Arc<Resolved> {
        match decision.resolution.of(tool) {
            Some(r) => r.clone(),
            None => self.inner.view.resolved(tool),
        }
    }

    /// Counts an outcome that took `duration` on the local breakers, at the
    /// instant it came (`elapsed` after the decision, by the clock that
    /// admitted the call).
    fn count_locally(
        &self,
        resolved: &Resolved,
        decision: &Decision,
        class: OutcomeClass,
        (duration, elapsed): (Duration, Duration),
    ) {
        let now = decision.decided_at.plus_ms(ms(elapsed));
        self.inner.local.record(
            self.local_pair(resolved),
            (&resolved.server_breaker, &resolved.policy.breaker),
            class,
            ms(duration),
            now,
        );
    }

    /// Returns a cluster permit in the background (bounded by the RPC
    /// deadline), so the call returns at once; the answer updates the view.
    fn release_later(&self, permit: ClusterPermit, class: OutcomeClass, duration_ms: u64) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let released =
                probe::release(&inner.endpoints, &inner.config, permit, class, duration_ms).await;
            match released {
                Ok(Some(view)) => inner.view.offer_breaker(&view),
                Ok(None) => {}
                Err(e) => {
                    tracing::info!(error = %e, "probe permit not returned; its lease will lapse")
                }
            }
        });
    }
}

/// `message` with what the tool's disclosure says of the mode it reported,
/// for the model: the mode, its documented behavior and its p95.
fn mode_note(message: String, mode: &DegradationMode) -> String {
    format!(
        "{message} (the tool reports {}; its disclosure says it will {} in that mode, p95 {} ms)",
        mode.trigger, mode.behavior, mode.expected_p95_ms
    )
}
