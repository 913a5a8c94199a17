//! `fusebox.v1.Breakers`: watch, outcome reports, probe permits, reads and
//! operator overrides.
//!
//! Reports, probe permits and operator commands are commands through the
//! log (a permit granted anywhere but the log could exceed the policy's
//! fleet-wide count); reads and the watch stream are served from this
//! node's applied state and carry the revision they reflect.

use super::convert::breakers::{
    key_from_proto, state_from_proto, transition_to_proto, view_to_proto,
};
use super::convert::outcomes::{self, batch_from_proto, probe_to_proto, report_to_proto};
use super::convert::{meta, name, namespace, number_token, page_limit};
use super::gateway::{unexpected, Gateway, Served};
use super::operator::{self, OperatorCommand};
use super::{status, watch_stream};
use crate::auth::{Recheck, StreamPermit};
use crate::backend::Backend;
use fusebox_core::breaker::{BreakerKey, BreakerState};
use fusebox_core::machine::{Answer, Command, ReportSummary, SharedStateMachine};
use fusebox_core::{Namespace, ReplicaId, ServerName};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::breakers_server::Breakers;
use tonic::{Request, Response, Status};

/// The Breakers service over a backend.
pub struct BreakersService<B> {
    gateway: Gateway<B>,
}

impl<B: Backend> BreakersService<B> {
    /// A service proposing and reading through `gateway`.
    pub fn new(gateway: Gateway<B>) -> Self {
        BreakersService { gateway }
    }

    /// A denial when the key's server breaker is out (rejecting), so a tool
    /// is not probed while its whole server is down. Advisory: read from
    /// this node's state at this node's time.
    async fn server_out(
        &self,
        key: &BreakerKey,
    ) -> Result<Option<pb::AcquireProbeResponse>, Status> {
        if key.is_server() {
            return Ok(None);
        }
        let server = key.server_key();
        let view = self
            .gateway
            .read_local(move |s| (s.view(&server), s.now()))
            .await?;
        let (view, state_now) = view;
        let now = state_now.as_millis().max(self.gateway.backend().now_ms());
        let until = view.open_until.map(|t| t.as_millis());
        let out = match view.state {
            BreakerState::ForcedOpen => until.is_none_or(|u| u > now),
            BreakerState::Open => until.is_some_and(|u| u > now),
            _ => false,
        };
        if !out {
            return Ok(None);
        }
        let wait = until.map(|u| u.saturating_sub(now));
        let denied = outcomes::denied(key, view.state, wait, true);
        Ok(Some(pb::AcquireProbeResponse {
            result: Some(pb::acquire_probe_response::Result::Denied(denied)),
        }))
    }

    /// The breaker view after a command, from this node's state.
    async fn view_now(&self, key: BreakerKey) -> Result<pb::BreakerView, Status> {
        self.gateway
            .read_local(move |s| view_to_proto(s, &s.view(&key)))
            .await
    }
}

#[tonic::async_trait]
impl<B: Backend> Breakers for BreakersService<B> {
    type WatchStream = watch_stream::WatchEvents;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let (_, ns) = self.gateway.admit(&request, &request.get_ref().namespace)?;
        // The caller's stream slot (`auth::limits`) lives as long as the stream.
        let slot = request.extensions().get::<StreamPermit>().cloned();
        let recheck = request.extensions().get::<Recheck>().cloned();
        let req = request.into_inner();
        meta(req.meta.as_ref())?;
        if !req.replica_id.is_empty() {
            name("replica_id", &req.replica_id, ReplicaId::new)?;
        }
        tracing::debug!(namespace = %ns, replica = %req.replica_id, from = ?req.from_revision, "watch requested");
        let events =
            watch_stream::start(self.gateway.clone(), ns, req.from_revision, (slot, recheck))
                .await?;
        Ok(Response::new(events))
    }

    async fn report_outcomes(
        &self,
        request: Request<pb::ReportOutcomesRequest>,
    ) -> Result<Response<pb::ReportOutcomesResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let batch = batch_from_proto(req)?;
        let (sent, unclassified) = (batch.outcomes.len(), batch.unclassified);
        if sent == 0 {
            let revision = self
                .gateway
                .read_local(SharedStateMachine::revision)
                .await?;
            return Ok(Response::new(report_to_proto(
                &ReportSummary::default(),
                0,
                unclassified,
                revision,
            )));
        }
        let reports = if batch
            .outcomes
            .iter()
            .any(outcomes::PendingOutcome::needs_generations)
        {
            let (ns, pending) = (ns.clone(), batch.outcomes);
            self.gateway
                .read_local(move |s| outcomes::reports(s, &ns, pending))
                .await?
        } else {
            outcomes::reports_as_given(batch.outcomes)
        };
        let command = Command::ReportOutcomes {
            namespace: ns,
            replica: batch.replica,
            batch_seq: req.batch_seq,
            outcomes: reports,
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            BreakersClient::report_outcomes
        );
        let Answer::Reported(summary) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        if summary.dropped_limit > 0 {
            tracing::warn!(namespace = %request.get_ref().namespace, dropped = summary.dropped_limit, "outcomes dropped: the namespace holds its maximum of breakers");
        }
        let revision = applied.revision;
        Ok(Response::new(report_to_proto(
            summary,
            sent,
            unclassified,
            revision,
        )))
    }

    async fn acquire_probe(
        &self,
        request: Request<pb::AcquireProbeRequest>,
    ) -> Result<Response<pb::AcquireProbeResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let key = key_from_proto(&ns, req.key.as_ref())?;
        let replica = name("replica_id", &req.replica_id, ReplicaId::new)?;
        if let Some(denied) = self.server_out(&key).await? {
            return Ok(Response::new(denied));
        }
        let command = Command::AcquireProbe {
            key: key.clone(),
            replica,
            lease_ms: req.lease_ms,
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            BreakersClient::acquire_probe
        );
        let Answer::Probe(answer) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        let lookup = key.clone();
        let generation = self
            .gateway
            .read_local(move |s| s.view(&lookup).generation)
            .await?;
        tracing::debug!(breaker = %key, answer = ?answer, "probe asked");
        Ok(Response::new(probe_to_proto(&key, answer, generation)))
    }

    async fn release_probe(
        &self,
        request: Request<pb::ReleaseProbeRequest>,
    ) -> Result<Response<pb::ReleaseProbeResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let key = key_from_proto(&ns, req.key.as_ref())?;
        let permit_id = outcomes::permit_id(&req.permit_id)?;
        let Some(outcome) = outcomes::outcome_class(req.outcome) else {
            return Err(status::invalid_argument(
                "outcome",
                "enum",
                "must say how the probe ended",
            ));
        };
        let command = Command::ReleaseProbe {
            key: key.clone(),
            permit_id,
            generation: req.generation,
            outcome,
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            BreakersClient::release_probe
        );
        let Answer::ProbeReleased(result) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        let accepted = outcomes::release_accepted(*result);
        tracing::debug!(breaker = %key, permit_id, result = ?result, "probe released");
        let breaker = self.view_now(key).await?;
        Ok(Response::new(pb::ReleaseProbeResponse {
            accepted,
            breaker: Some(breaker),
        }))
    }

    async fn get_breaker(
        &self,
        request: Request<pb::GetBreakerRequest>,
    ) -> Result<Response<pb::GetBreakerResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let key = key_from_proto(&ns, req.key.as_ref())?;
        let (breaker, revision) = self
            .gateway
            .read_local(move |s| (view_to_proto(s, &s.view(&key)), s.revision()))
            .await?;
        Ok(Response::new(pb::GetBreakerResponse {
            breaker: Some(breaker),
            revision,
        }))
    }

    async fn list_breakers(
        &self,
        request: Request<pb::ListBreakersRequest>,
    ) -> Result<Response<pb::ListBreakersResponse>, Status> {
        self.gateway.admit(&request, &request.get_ref().namespace)?;
        let query = ListQuery::from_proto(request.get_ref())?;
        let page = self.gateway.read_local(move |s| query.run(s)).await?;
        Ok(Response::new(page))
    }

    async fn force_open(
        &self,
        request: Request<pb::ForceOpenRequest>,
    ) -> Result<Response<pb::BreakerChangeResponse>, Status> {
        let (caller, _) = self.gateway.admit(&request, &request.get_ref().namespace)?;
        let operator = OperatorCommand::force_open(request.get_ref(), &caller)?;
        let served = operator::run(operator, &self.gateway).await?;
        let answer = here_or_forward!(self, request, served, BreakersClient::force_open);
        Ok(Response::new(answer))
    }

    async fn reset(
        &self,
        request: Request<pb::ResetBreakerRequest>,
    ) -> Result<Response<pb::BreakerChangeResponse>, Status> {
        let (caller, _) = self.gateway.admit(&request, &request.get_ref().namespace)?;
        let operator = OperatorCommand::reset(request.get_ref(), &caller)?;
        let served = operator::run(operator, &self.gateway).await?;
        let answer = here_or_forward!(self, request, served, BreakersClient::reset);
        Ok(Response::new(answer))
    }

    async fn disable(
        &self,
        request: Request<pb::DisableBreakerRequest>,
    ) -> Result<Response<pb::BreakerChangeResponse>, Status> {
        let (caller, _) = self.gateway.admit(&request, &request.get_ref().namespace)?;
        let operator = OperatorCommand::disable(request.get_ref(), &caller)?;
        let served = operator::run(operator, &self.gateway).await?;
        let answer = here_or_forward!(self, request, served, BreakersClient::disable);
        Ok(Response::new(answer))
    }

    async fn set_metrics_only(
        &self,
        request: Request<pb::SetMetricsOnlyRequest>,
    ) -> Result<Response<pb::BreakerChangeResponse>, Status> {
        let (caller, _) = self.gateway.admit(&request, &request.get_ref().namespace)?;
        let operator = OperatorCommand::metrics_only(request.get_ref(), &caller)?;
        let served = operator::run(operator, &self.gateway).await?;
        let answer = here_or_forward!(self, request, served, BreakersClient::set_metrics_only);
        Ok(Response::new(answer))
    }

    async fn breaker_history(
        &self,
        request: Request<pb::BreakerHistoryRequest>,
    ) -> Result<Response<pb::BreakerHistoryResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let key = key_from_proto(&ns, req.key.as_ref())?;
        let below = number_token("page_token", &req.page_token)?;
        let limit = page_limit(req.limit);
        let page = self
            .gateway
            .read_local(move |s| history_page(s, &key, below, limit))
            .await?;
        Ok(Response::new(page))
    }
}

/// A validated `ListBreakers`.
struct ListQuery {
    namespace: Namespace,
    states: Vec<BreakerState>,
    server: Option<ServerName>,
    after: Option<BreakerKey>,
    limit: usize,
}

impl ListQuery {
    fn from_proto(req: &pb::ListBreakersRequest) -> Result<Self, Status> {
        meta(req.meta.as_ref())?;
        let namespace = namespace(&req.namespace)?;
        let states = req
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| state_from_proto(&format!("states[{i}]"), *s))
            .collect::<Result<Vec<_>, _>>()?;
        let server = match &req.server {
            Some(server) => Some(name("server", server, ServerName::new)?),
            None => None,
        };
        let after = if req.page_token.is_empty() {
            None
        } else {
            let key = BreakerKey::parse(&req.page_token)
                .ok()
                .filter(|k| k.namespace == namespace);
            let bad = || {
                status::invalid_argument(
                    "page_token",
                    "page_token",
                    "is not a token this server issued",
                )
            };
            Some(key.ok_or_else(bad)?)
        };
        Ok(ListQuery {
            namespace,
            states,
            server,
            after,
            limit: page_limit(req.limit),
        })
    }

    /// One page in key order; breakers per namespace are bounded, so the
    /// scan is too.
    fn run(&self, s: &SharedStateMachine) -> pb::ListBreakersResponse {
        let mut views = s
            .breakers_in(&self.namespace)
            .filter(|(k, _)| self.after.as_ref().is_none_or(|a| *k > a))
            .filter(|(k, _)| self.server.as_ref().is_none_or(|srv| &k.server == srv))
            .map(|(k, _)| s.view(k))
            .filter(|v| self.states.is_empty() || self.states.contains(&v.state))
            .take(self.limit + 1)
            .collect::<Vec<_>>();
        let more = views.len() > self.limit;
        views.truncate(self.limit);
        let next_page_token = if more {
            views.last().map(|v| v.key.to_string()).unwrap_or_default()
        } else {
            String::new()
        };
        pb::ListBreakersResponse {
            breakers: views.iter().map(|v| view_to_proto(s, v)).collect(),
            next_page_token,
            revision: s.revision(),
        }
    }
}

/// One page of a breaker's audit trail, newest first, below a generation.
fn history_page(
    s: &SharedStateMachine,
    key: &BreakerKey,
    below: Option<u64>,
    limit: usize,
) -> pb::BreakerHistoryResponse {
    let entries: Vec<_> = s
        .breaker(key)
        .map(|b| b.audit().collect::<Vec<_>>())
        .unwrap_or_default();
    let mut page: Vec<_> = entries
        .into_iter()
        .rev()
        .filter(|e| below.is_none_or(|g| e.generation < g))
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let next_page_token = match (more, page.last()) {
        (true, Some(last)) => last.generation.to_string(),
        _ => String::new(),
    };
    pb::BreakerHistoryResponse {
        key: Some(super::convert::breakers::key_to_proto(key)),
        transitions: page.into_iter().map(transition_to_proto).collect(),
        next_page_token,
    }
}
