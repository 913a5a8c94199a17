//! `fusebox.v1.Ledger`: idempotency keys for write tools.
//!
//! All five `Begin` answers are OK bodies: a replay is a success, and
//! in-progress, mismatch and ambiguous are answers the caller must act on,
//! not transport failures. `Complete` and `Resolve` cannot answer a wrong
//! state in a body, so they fail with FAILED_PRECONDITION and a detail that
//! names what is current. `Lookup` is linearizable: after an ambiguous
//! timeout it must reflect every acknowledged write.

use super::convert::ledger::{
    begin_from_proto, begin_to_proto, complete_from_proto, list_from_proto, record_to_proto,
    renew_from_proto, resolve_from_proto, status_name,
};
use super::convert::{cut_to_page_bytes, meta, required};
use super::gateway::{unexpected, Gateway, Leader, Served};
use super::ledger_pipeline::{self, PipelineReplies, PipelinedCalls};
use super::status;
use crate::auth::Caller;
use crate::backend::{Backend, Consistency};
use fusebox_core::ledger::{
    CompleteAnswer, LedgerStore, Record, RenewAnswer, ResolveAnswer, Status as RecordStatus,
};
use fusebox_core::limits::{IDEMPOTENCY_KEY_BYTES_MAX, LEASE_MS_MAX};
use fusebox_core::machine::{Answer, Command};
use fusebox_core::{Namespace, Timestamp};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::ledger_server::Ledger;
use tonic::{Request, Response, Status, Streaming};

/// The Ledger service over a backend.
pub struct LedgerService<B> {
    gateway: Gateway<B>,
    pipelined: PipelinedCalls,
}

impl<B: Clone> Clone for LedgerService<B> {
    fn clone(&self) -> Self {
        LedgerService {
            gateway: self.gateway.clone(),
            pipelined: self.pipelined.clone(),
        }
    }
}

impl<B: Backend> LedgerService<B> {
    /// A service proposing and reading through `gateway`.
    pub fn new(gateway: Gateway<B>) -> Self {
        LedgerService {
            gateway,
            pipelined: PipelinedCalls::default(),
        }
    }

    /// The gateway the service goes through.
    pub(super) fn gateway(&self) -> &Gateway<B> {
        &self.gateway
    }

    /// `Begin` from `caller`, answered here; or the leader, when only it
    /// can answer. The unary call and a pipelined one both come here: a
    /// pipelined call builds a unary request only to forward it.
    pub(super) async fn begin_for(
        &self,
        caller: &Caller,
        req: &pb::BeginRequest,
    ) -> Result<Served<pb::BeginResponse>, Status> {
        self.gateway.admit_caller(caller, &req.namespace)?;
        let clamped = req.lease_ms > LEASE_MS_MAX;
        // The kill switch is checked by the state machine, in log order.
        let (ns, begin) = begin_from_proto(req)?;
        let command = Command::Begin {
            namespace: ns.clone(),
            request: begin,
        };
        let applied = match self.gateway.write(command).await? {
            Served::Here(applied) => applied,
            Served::Leader(leader) => return Ok(Served::Leader(leader)),
        };
        let Answer::Begin(answer) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        tracing::debug!(namespace = %ns, key = %req.key, attempt = %req.attempt_id, answer = ?answer, "ledger begin");
        let mut response = begin_to_proto(&ns, answer);
        if let Some(pb::begin_response::Outcome::Started(started)) = &mut response.outcome {
            started.lease_clamped = clamped;
        }
        Ok(Served::Here(response))
    }

    /// `Complete` from `caller`, answered here; or the leader, when only it
    /// can answer.
    pub(super) async fn complete_for(
        &self,
        caller: &Caller,
        req: &pb::CompleteRequest,
    ) -> Result<Served<pb::CompleteResponse>, Status> {
        self.gateway.admit_caller(caller, &req.namespace)?;
        let (ns, complete) = complete_from_proto(req)?;
        let command = Command::Complete {
            namespace: ns.clone(),
            request: complete,
        };
        let applied = match self.gateway.write(command).await? {
            Served::Here(applied) => applied,
            Served::Leader(leader) => return Ok(Served::Leader(leader)),
        };
        let Answer::Complete(answer) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        tracing::debug!(namespace = %ns, key = %req.key, attempt = %req.attempt_id, "ledger complete");
        match answer {
            CompleteAnswer::Recorded { record } | CompleteAnswer::AlreadyRecorded { record } => {
                Ok(Served::Here(pb::CompleteResponse {
                    record: Some(record_to_proto(&ns, record)),
                }))
            }
            CompleteAnswer::Conflict { record } => Err(complete_conflict(&req.attempt_id, record)),
            CompleteAnswer::NotFound => Err(record_not_found(&ns, &req.key)),
        }
    }

    /// Sends a `Begin` only the leader can answer there.
    pub(super) async fn forward_begin(
        &self,
        request: Request<pb::BeginRequest>,
        leader: Leader,
    ) -> Result<Response<pb::BeginResponse>, Status> {
        self.gateway
            .forward(request, leader, |channel, request| async move {
                LedgerClient::new(channel).begin(request).await
            })
            .await
    }

    /// Sends a `Complete` only the leader can answer there.
    pub(super) async fn forward_complete(
        &self,
        request: Request<pb::CompleteRequest>,
        leader: Leader,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        self.gateway
            .forward(request, leader, |channel, request| async move {
                LedgerClient::new(channel).complete(request).await
            })
            .await
    }
}

/// FAILED_PRECONDITION for a completion or a renewal the record does not
/// take: another attempt holds the key (STALE), the attempt's outcome is
/// unknown (AMBIGUOUS), or the record is in another state (`why`).
fn not_held(attempt: &str, record: &Record, why: String) -> Status {
    if record.attempt != attempt {
        return status::stale("attempt_id", attempt.to_owned(), record.attempt.clone());
    }
    if record.status == RecordStatus::Ambiguous {
        let reason = record
            .reason
            .as_deref()
            .unwrap_or("lease expired or outcome reported unknown");
        return status::ambiguous(&record.key, attempt, reason);
    }
    let current = status_name(record.status);
    status::invalid_state(current, &[status_name(RecordStatus::InProgress)], why)
}

/// A completion the record no longer accepts.
fn complete_conflict(attempt: &str, record: &Record) -> Status {
    let current = status_name(record.status);
    let why = format!(
        "key {} is already {current}; this completion differs from the one recorded",
        record.key
    );
    not_held(attempt, record, why)
}

/// A renewal the record does not take.
fn renew_conflict(attempt: &str, record: &Record) -> Status {
    let current = status_name(record.status);
    let why = format!(
        "key {} is {current}, or its lease lapsed before the renewal; a lapsed lease is never \
         renewed (another attempt may hold the key)",
        record.key
    );
    not_held(attempt, record, why)
}

fn record_not_found(ns: &Namespace, key: &str) -> Status {
    status::not_found(
        "ledger_record",
        key,
        format!(
            "no ledger record for key {key:?} in namespace {ns}; it was never begun or has expired"
        ),
    )
}

#[tonic::async_trait]
impl<B: Backend> Ledger for LedgerService<B> {
    type PipelineStream = PipelineReplies;

    async fn pipeline(
        &self,
        request: Request<Streaming<pb::PipelineRequest>>,
    ) -> Result<Response<PipelineReplies>, Status> {
        let room = self.pipelined.clone();
        Ok(Response::new(ledger_pipeline::open(
            self.clone(),
            room,
            request,
        )))
    }

    async fn begin(
        &self,
        request: Request<pb::BeginRequest>,
    ) -> Result<Response<pb::BeginResponse>, Status> {
        let caller = self.gateway.caller(&request)?;
        match self.begin_for(&caller, request.get_ref()).await? {
            Served::Here(answer) => Ok(Response::new(answer)),
            Served::Leader(leader) => self.forward_begin(request, leader).await,
        }
    }

    async fn complete(
        &self,
        request: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        let caller = self.gateway.caller(&request)?;
        match self.complete_for(&caller, request.get_ref()).await? {
            Served::Here(answer) => Ok(Response::new(answer)),
            Served::Leader(leader) => self.forward_complete(request, leader).await,
        }
    }

    async fn lookup(
        &self,
        request: Request<pb::LookupRequest>,
    ) -> Result<Response<pb::LookupResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        required("key", &req.key, IDEMPOTENCY_KEY_BYTES_MAX)?;
        let (lookup_ns, key, wall) = (ns.clone(), req.key.clone(), self.gateway.backend().now_ms());
        let read = self
            .gateway
            .read(Consistency::Linearizable, move |s| {
                // A lapsed lease shows as what the next tick will make it.
                let now = Timestamp::from_millis(wall).max(s.now());
                s.ledger().lookup(&lookup_ns, &key, now)
            })
            .await?;
        let found = match read {
            Served::Here(found) => found,
            Served::Leader(leader) => {
                return self
                    .gateway
                    .forward(request, leader, |channel, request| async move {
                        LedgerClient::new(channel).lookup(request).await
                    })
                    .await;
            }
        };
        match found {
            Some(record) => Ok(Response::new(pb::LookupResponse {
                record: Some(record_to_proto(&ns, &record)),
            })),
            None => Err(record_not_found(&ns, &request.get_ref().key)),
        }
    }

    async fn list(
        &self,
        request: Request<pb::ListRecordsRequest>,
    ) -> Result<Response<pb::ListRecordsResponse>, Status> {
        self.gateway.admit(&request, &request.get_ref().namespace)?;
        let (ns, filter) = list_from_proto(request.get_ref())?;
        let (lookup_ns, wall) = (ns.clone(), self.gateway.backend().now_ms());
        let page = self
            .gateway
            .read_local(move |s| {
                let known = s.namespace(&lookup_ns).is_some() || s.ledger().len(&lookup_ns) > 0;
                let now = Timestamp::from_millis(wall).max(s.now());
                known.then(|| s.ledger().list(&lookup_ns, &filter, now))
            })
            .await?;
        let Some(page) = page else {
            return Err(status::not_found(
                "namespace",
                ns.as_str(),
                format!("namespace {ns} has no ledger records"),
            ));
        };
        let mut records: Vec<pb::LedgerRecord> = page
            .records
            .iter()
            .map(|r| record_to_proto(&ns, r))
            .collect();
        // Records carry results of up to 16 KiB: a full page by count could
        // exceed what a client decodes, so it is cut by bytes too.
        let next_page_token = if cut_to_page_bytes(&mut records) {
            records.last().map(|r| r.key.clone()).unwrap_or_default()
        } else {
            page.next_after_key.unwrap_or_default()
        };
        Ok(Response::new(pb::ListRecordsResponse {
            records,
            next_page_token,
        }))
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        self.gateway.admit(&request, &request.get_ref().namespace)?;
        let (ns, renew, clamped) = renew_from_proto(request.get_ref())?;
        let (key, attempt) = (renew.key.clone(), renew.attempt.clone());
        let command = Command::Renew {
            namespace: ns.clone(),
            request: renew,
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            LedgerClient::renew
        );
        let Answer::Renew(answer) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        match answer {
            RenewAnswer::Renewed { record } => Ok(Response::new(pb::RenewResponse {
                record: Some(record_to_proto(&ns, record)),
                lease_clamped: clamped,
            })),
            RenewAnswer::Conflict { record } => Err(renew_conflict(&attempt, record)),
            RenewAnswer::NotFound => Err(record_not_found(&ns, &key)),
        }
    }

    async fn resolve(
        &self,
        request: Request<pb::ResolveRequest>,
    ) -> Result<Response<pb::ResolveResponse>, Status> {
        let (caller, _) = self.gateway.admit(&request, &request.get_ref().namespace)?;
        let (ns, resolve) = resolve_from_proto(request.get_ref(), &caller)?;
        let key = resolve.key.clone();
        tracing::info!(namespace = %ns, key = %key, actor = %resolve.actor, decision = ?resolve.decision, "ledger resolve");
        let command = Command::Resolve {
            namespace: ns.clone(),
            request: resolve,
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            LedgerClient::resolve
        );
        let Answer::Resolve(answer) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        match answer {
            ResolveAnswer::Resolved { record } => Ok(Response::new(pb::ResolveResponse {
                record: Some(record_to_proto(&ns, record)),
            })),
            ResolveAnswer::NotAmbiguous { record } => {
                let current = status_name(record.status);
                Err(status::invalid_state(
                    current,
                    &[status_name(RecordStatus::Ambiguous)],
                    format!("key {key} is {current}; only an ambiguous record can be resolved"),
                ))
            }
            ResolveAnswer::NotFound => Err(record_not_found(&ns, &key)),
        }
    }
}
