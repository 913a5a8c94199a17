//! The client a replica embeds: connection, local view, reporter, metrics.

use crate::config::{ClientConfig, CACHED_OPEN_SKEW_MS, CLOSE_GRACE_MS, VIEW_POLL_PERIOD_MS};
use crate::decision::{Decision, Evidence, Resolution};
use crate::endpoints::Endpoints;
use crate::env::ClientEnv;
use crate::error::ClientError;
use crate::journey::Journey;
use crate::local_breakers::{LocalBreakers, LocalPair};
use crate::metrics::{bump, Metrics, MetricsSnapshot};
use crate::reporter::{self, OutcomeBuffer};
use crate::tool::ToolRef;
use crate::view::{LocalView, Resolved, ViewStatus};
use crate::watch::WatchTask;
use fusebox_core::breaker::{Admission, RejectScope};
use fusebox_core::disclosure::LatencyDisclosure;
use fusebox_core::policy::{OnPartition, ToolPolicy};
use fusebox_core::Timestamp;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::ledger_client::LedgerClient;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The gate every tool call of a replica passes through. Cheap to clone;
/// clones share one view, one buffer and one set of counters.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: ClientConfig,
    pub(crate) env: ClientEnv,
    pub(crate) endpoints: Arc<Endpoints>,
    pub(crate) view: Arc<LocalView>,
    pub(crate) buffer: OutcomeBuffer,
    pub(crate) local: LocalBreakers,
    pub(crate) metrics: Arc<Metrics>,
    stop: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Client {
    /// Starts the watch stream and the report flusher; returns at once.
    /// Until the first snapshot arrives decisions are degraded (see
    /// [`Client::wait_fresh`]). Must be called inside a tokio runtime.
    pub fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        Client::connect_in(config, ClientEnv::system())
    }

    /// [`Client::connect`] over the given network and wall clock.
    pub fn connect_in(config: ClientConfig, env: ClientEnv) -> Result<Client, ClientError> {
        config.validate()?;
        let endpoints = Arc::new(Endpoints::new(
            &config.endpoints,
            Duration::from_millis(config.connect_timeout_ms),
            &env.net,
            config.tls.as_ref(),
            config.token.as_deref(),
        )?);
        let view = Arc::new(LocalView::new(
            config.namespace.clone(),
            config.view_stale_after_ms,
            config.disconnect_grace_ms,
        )?);
        let metrics = Arc::new(Metrics::default());
        let stop = CancellationToken::new();
        // Starting from the wall clock keeps sequence numbers growing across
        // restarts of a replica that keeps its id.
        let first_seq = env.now().as_millis().saturating_mul(1_000);
        let (buffer, flusher) = reporter::channel(
            &config,
            endpoints.clone(),
            metrics.clone(),
            stop.clone(),
            first_seq,
        );
        let watch = WatchTask {
            config: config.clone(),
            endpoints: endpoints.clone(),
            view: view.clone(),
            metrics: metrics.clone(),
            stop: stop.clone(),
        };
        let tasks = vec![tokio::spawn(watch.run()), tokio::spawn(flusher.run())];
        let local = LocalBreakers::new(config.replica_id.clone(), config.fleet_replicas);
        Ok(Client {
            inner: Arc::new(Inner {
                config,
                env,
                endpoints,
                view,
                buffer,
                local,
                metrics,
                stop,
                tasks: Mutex::new(tasks),
            }),
        })
    }

    /// Waits until the view is fresh, at most `within`; `false` if it is not.
    pub async fn wait_fresh(&self, within: Duration) -> bool {
        let started = Instant::now();
        while !self.inner.view.is_fresh() {
            if started.elapsed() >= within {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(VIEW_POLL_PERIOD_MS)).await;
        }
        true
    }

    /// Stops the background tasks after sending the outcomes still
    /// buffered (bounded by the RPC deadline).
    pub async fn close(self) {
        self.inner.stop.cancel();
        let tasks: Vec<_> = std::mem::take(
            &mut *self
                .inner
                .tasks
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let bound = self.inner.config.rpc_timeout() + Duration::from_millis(CLOSE_GRACE_MS);
        for task in tasks {
            let _ = tokio::time::timeout(bound, task).await;
        }
    }

    /// How fresh the local view is.
    pub fn view_status(&self) -> ViewStatus {
        self.inner.view.status()
    }

    /// The counters, read now.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// This replica's wall clock, to compare with the leader's stamps.
    pub(crate) fn wall_clock(&self) -> Timestamp {
        self.inner.env.now()
    }

    /// The effective policy of a tool, as the view holds it.
    pub fn tool_policy(&self, tool: &ToolRef) -> Arc<ToolPolicy> {
        self.inner.view.tool_policy(tool)
    }

    /// Keeps a latency disclosure read from the tool's manifest (an MCP
    /// `annotations.latencyDisclosure`); while fresh and valid it sets the
    /// tool's deadline to p99 × 1.2. A disclosure pushed by the cluster wins.
    /// `false` when the bound on kept disclosures is reached.
    pub fn import_disclosure(&self, tool: &ToolRef, block: LatencyDisclosure) -> bool {
        self.inner.view.import_disclosure(tool, block)
    }

    /// Asks for the buffered outcomes to be sent now rather than at the
    /// next interval.
    pub fn flush_reports(&self) {
        self.inner.buffer.flush_soon();
    }

    /// The local admission decision for a call on `tool`: no network call,
    /// no allocation on the fresh path. HALF_OPEN answers
    /// [`Admission::Probe`]; [`Client::call`] then asks for a permit.
    pub fn admit(&self, tool: &ToolRef) -> Decision {
        self.admit_with(self.inner.view.resolved(tool))
    }

    /// Whether the cluster flagged `tool` as running well above its
    /// disclosed p95 (the flag arrives through the watch stream).
    pub fn is_penalized(&self, tool: &ToolRef) -> bool {
        self.inner.view.latency(tool).penalized
    }

    /// Picks, among equivalent tools, the one to call: the lowest p95 (the
    /// fleet's observed figure, else the disclosed one) among those neither
    /// penalized nor refused by their breaker; if every one is penalized,
    /// the fastest one not refused; `None` when every breaker refuses.
    /// Decided from the local view, with no network call.
    ///
    /// The first tool is the one asked for. While its breaker refuses, an
    /// open circuit is not bypassed: another tool is picked only if the
    /// policy puts both in one failover group (`[[failover]]`, declared
    /// for tools that are truly independent, such as another provider);
    /// otherwise `None`.
    pub fn route<'a>(&self, equivalents: &'a [ToolRef]) -> Option<&'a ToolRef> {
        let mut candidates: Vec<RouteCandidate> = equivalents
            .iter()
            .map(|tool| {
                let latency = self.inner.view.latency(tool);
                RouteCandidate {
                    refused: matches!(self.admit(tool).admission, Admission::Reject { .. }),
                    penalized: latency.penalized,
                    p95_ms: latency.p95_ms,
                }
            })
            .collect();
        let primary = equivalents.first()?;
        if candidates.first().is_some_and(|c| c.refused) {
            for (tool, c) in equivalents.iter().zip(candidates.iter_mut()).skip(1) {
                if !self.inner.view.may_fail_over(primary, tool) {
                    c.refused = true;
                }
            }
        }
        choose_route(&candidates).map(|i| &equivalents[i])
    }

    pub(crate) fn admit_with(&self, resolved: Arc<Resolved>) -> Decision {
        let (tool, policy) = (&resolved.tool, &resolved.policy);
        let view = &self.inner.view;
        let now = self.wall_clock();
        let (fresh, view_age_ms) = view.freshness();
        if fresh {
            let a = view.admit(tool, policy.scope, now);
            return Decision {
                admission: a.admission,
                state: a.state,
                degraded: false,
                on_partition: None,
                tool_generation: a.tool_generation,
                server_generation: a.server_generation,
                view_age_ms,
                forced: a.forced,
                evidence: Evidence::Fresh,
                decided_at: now,
                resolution: Resolution(resolved),
            };
        }
        bump(&self.inner.metrics.degraded_decisions);
        // What the fleet last knew holds first: an OPEN breaker until its
        // leader-stamped end (judged `CACHED_OPEN_SKEW_MS` late, since this
        // replica's clock may run ahead of the leader's), a FORCED_OPEN one
        // until an operator's change arrives. Only then do local breakers
        // decide from what this replica sees.
        let skewed = Timestamp::from_millis(now.as_millis().saturating_sub(CACHED_OPEN_SKEW_MS));
        let cached = view.admit(tool, policy.scope, skewed);
        let held = matches!(cached.admission, Admission::Reject { .. });
        let evidence = match view_age_ms {
            None => Evidence::Missing,
            Some(age_ms) if held || policy.on_partition == OnPartition::FailClosed => {
                Evidence::Cached { age_ms }
            }
            Some(view_age_ms) => Evidence::Local { view_age_ms },
        };
        let (admission, forced) = match policy.on_partition {
            OnPartition::FailClosed => (
                Admission::Reject {
                    scope: RejectScope::Tool,
                    state: cached.state,
                    retry_after_ms: None,
                },
                None,
            ),
            OnPartition::FailOpenLocal if held => (cached.admission, cached.forced),
            OnPartition::FailOpenLocal => {
                if let Some(replicas) = view.fleet_replicas() {
                    self.inner.local.learn_fleet(replicas);
                }
                let local = self.inner.local.admit(
                    self.local_pair(&resolved),
                    (&resolved.server_key, &resolved.tool_key),
                    (&resolved.server_breaker, &policy.breaker),
                    now,
                );
                // A local refusal names no operator.
                (local, None)
            }
        };
        Decision {
            admission,
            state: cached.state,
            degraded: true,
            on_partition: Some(policy.on_partition),
            tool_generation: cached.tool_generation,
            server_generation: cached.server_generation,
            view_age_ms,
            forced,
            evidence,
            decided_at: now,
            resolution: Resolution(resolved),
        }
    }

    /// This replica's own breakers for a resolved tool, taken on first use.
    pub(crate) fn local_pair<'r>(&self, resolved: &'r Resolved) -> &'r LocalPair {
        resolved.local.get_or_init(|| {
            self.inner
                .local
                .pair(&resolved.server_key, &resolved.tool_key)
        })
    }

    /// Counts a journey once, at its first call.
    pub(crate) fn count_intent(&self, journey: &Journey) {
        if journey.first_use() {
            bump(&self.inner.metrics.intents);
        }
    }

    /// Reads a ledger record by key, linearizably: after an ambiguous
    /// outcome this reflects every acknowledged write.
    pub async fn lookup(&self, key: &str) -> Result<pb::LedgerRecord, ClientError> {
        let request = pb::LookupRequest {
            namespace: self.inner.config.namespace.to_string(),
            meta: None,
            key: key.to_owned(),
        };
        let response = self
            .inner
            .endpoints
            .call(
                "ledger_lookup",
                self.inner.config.rpc_timeout(),
                request,
                |channel, req| async move { LedgerClient::new(channel).lookup(req).await },
            )
            .await?;
        response.record.ok_or_else(|| ClientError::Cluster {
            intent_id: None,
            operation: "ledger_lookup",
            code: tonic::Code::Internal,
            error_code: None,
            message: "lookup answered without a record".to_owned(),
        })
    }

    /// Settles an ambiguous record (an operator's decision, with who and
    /// why); `operation_id` is required with [`pb::ResolutionDecision::Done`].
    pub async fn resolve(
        &self,
        key: &str,
        decision: pb::ResolutionDecision,
        operation_id: Option<String>,
        actor: &str,
        note: &str,
    ) -> Result<pb::LedgerRecord, ClientError> {
        let request = pb::ResolveRequest {
            namespace: self.inner.config.namespace.to_string(),
            meta: None,
            key: key.to_owned(),
            decision: decision as i32,
            operation_id,
            actor: actor.to_owned(),
            note: note.to_owned(),
        };
        let response = self
            .inner
            .endpoints
            .call(
                "ledger_resolve",
                self.inner.config.rpc_timeout(),
                request,
                |channel, req| async move { LedgerClient::new(channel).resolve(req).await },
            )
            .await?;
        response.record.ok_or_else(|| ClientError::Cluster {
            intent_id: None,
            operation: "ledger_resolve",
            code: tonic::Code::Internal,
            error_code: None,
            message: "resolve answered without a record".to_owned(),
        })
    }
}

/// What routing knows of one equivalent tool.
#[derive(Clone, Copy, Debug)]
struct RouteCandidate {
    refused: bool,
    penalized: bool,
    p95_ms: Option<u64>,
}

/// The index to call: not refused first, then not penalized, then the
/// lowest p95 (unknown last), then the caller's order.
fn choose_route(candidates: &[RouteCandidate]) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.refused)
        .min_by_key(|(i, c)| (c.penalized, c.p95_ms.is_none(), c.p95_ms, *i))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod route_tests {
    use super::*;

    fn c(refused: bool, penalized: bool, p95_ms: Option<u64>) -> RouteCandidate {
        RouteCandidate {
            refused,
            penalized,
            p95_ms,
        }
    }

    #[test]
    fn routing_prefers_fast_healthy_tools_and_never_an_open_one() {
        // The fastest is penalized: the next fastest healthy one wins.
        let picked = choose_route(&[c(false, true, Some(100)), c(false, false, Some(300))]);
        assert_eq!(picked, Some(1));
        // An open breaker is never chosen, however fast.
        let picked = choose_route(&[c(true, false, Some(10)), c(false, false, Some(900))]);
        assert_eq!(picked, Some(1));
        // Known latency beats unknown; ties keep the caller's order.
        let picked = choose_route(&[c(false, false, None), c(false, false, Some(900))]);
        assert_eq!(picked, Some(1));
        let picked = choose_route(&[c(false, false, Some(5)), c(false, false, Some(5))]);
        assert_eq!(picked, Some(0));
        // All penalized: the fastest one still answers.
        let picked = choose_route(&[c(false, true, Some(500)), c(false, true, Some(200))]);
        assert_eq!(picked, Some(1));
        // Every breaker refuses: nothing to call.
        assert_eq!(choose_route(&[c(true, false, Some(1))]), None);
    }
}
