//! `fusebox.v1.Policy`: versioned policy documents and the write kill
//! switch.
//!
//! `Apply` parses and validates the document here, before anything is
//! proposed: an invalid document is refused with every problem listed and
//! the log never sees it (the state machine validates again on apply, so a
//! replica never stores what this node let through by mistake).

use super::convert::policy::{
    draft_to_proto, format_from_proto, kill_switch_to_proto, version_to_proto,
};
use super::convert::{actor, bounded, cut_to_page_bytes, meta, number_token, page_limit, required};
use super::gateway::{unexpected, Gateway, Served};
use super::status;
use crate::auth::Caller;
use crate::backend::Backend;
use crate::limits::POLICY_PARSE_TIMEOUT_MS;
use fusebox_core::breaker::BreakerState;
use fusebox_core::limits::{NAMESPACES_MAX, REASON_BYTES_MAX};
use fusebox_core::machine::{Answer, Applied, Command, SharedStateMachine};
use fusebox_core::policy::{PolicyDocument, PolicyFormat};
use fusebox_core::Namespace;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::policy_client::PolicyClient;
use fusebox_proto::v1::policy_server::Policy;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// The Policy service over a backend.
pub struct PolicyService<B> {
    gateway: Gateway<B>,
}

/// The version in force and its canonical text, before an apply.
struct Current {
    version: u64,
    text: Option<String>,
    stored: Option<pb::PolicyVersion>,
}

impl<B: Backend> PolicyService<B> {
    /// A service proposing and reading through `gateway`.
    pub fn new(gateway: Gateway<B>) -> Self {
        PolicyService { gateway }
    }

    async fn current(&self, ns: &Namespace) -> Result<Current, Status> {
        let ns = ns.clone();
        self.gateway
            .read_local(move |s| {
                let policy = s.namespace(&ns).and_then(|n| n.policy());
                Current {
                    version: policy.map_or(0, |p| p.version),
                    text: policy.map(|p| p.document.to_toml()),
                    stored: policy.map(|p| version_to_proto(&ns, p, true)),
                }
            })
            .await
    }

    /// The version an apply or a rollback stored, on the wire.
    async fn stored(&self, ns: &Namespace, applied: &Applied) -> Result<pb::PolicyVersion, Status> {
        let Answer::PolicyApplied { version } = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        self.version(ns, Some(*version)).await
    }

    /// A stored version on the wire, or NOT_FOUND saying which is missing.
    async fn version(
        &self,
        ns: &Namespace,
        version: Option<u64>,
    ) -> Result<pb::PolicyVersion, Status> {
        let lookup = ns.clone();
        let found = self
            .gateway
            .read_local(move |s| {
                let n = s.namespace(&lookup)?;
                let v = match version {
                    Some(v) => n.version(v),
                    None => n.policy(),
                };
                Some((
                    n.policy_version(),
                    v.map(|v| version_to_proto(&lookup, v, true)),
                ))
            })
            .await?;
        match (found, version) {
            (Some((_, Some(v))), _) => Ok(v),
            (Some((current, None)), Some(v)) if current > 0 => Err(status::not_found(
                "policy_version",
                &format!("{ns} v{v}"),
                format!("policy version {v} of namespace {ns} does not exist or has rolled off (current is {current})"),
            )),
            _ => Err(no_policy(ns)),
        }
    }
}

fn no_policy(ns: &Namespace) -> Status {
    status::not_found(
        "policy",
        ns.as_str(),
        format!("namespace {ns} has no policy; built-in defaults apply"),
    )
}

/// Parses a document on the blocking pool within [`POLICY_PARSE_TIMEOUT_MS`]:
/// a parser's time grows with what the caller sent, and the runtime's
/// workers must keep serving Raft and every other request meanwhile.
async fn parse_off_workers(text: String, format: PolicyFormat) -> Result<PolicyDocument, Status> {
    let within = Duration::from_millis(POLICY_PARSE_TIMEOUT_MS);
    let parse = fusebox_raft_store::blocking(move || Ok(PolicyDocument::parse(&text, format)));
    match tokio::time::timeout(within, parse).await {
        Err(_) => Err(status::invalid_argument(
            "document",
            "parse_time",
            format!("took longer than {POLICY_PARSE_TIMEOUT_MS} ms to parse"),
        )),
        Ok(Err(e)) => Err(Status::internal(format!("policy parser failed: {e}"))),
        Ok(Ok(parsed)) => parsed.map_err(|e| status::from_core(&e)),
    }
}

#[tonic::async_trait]
impl<B: Backend> Policy for PolicyService<B> {
    async fn apply(
        &self,
        request: Request<pb::ApplyPolicyRequest>,
    ) -> Result<Response<pb::ApplyPolicyResponse>, Status> {
        let req = request.get_ref();
        let (caller, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let format = format_from_proto(req.format)?;
        let who = actor(&caller, &req.actor, req.meta.as_ref())?;
        bounded("reason", &req.reason, REASON_BYTES_MAX)?;
        let document = parse_off_workers(req.document.clone(), format).await?;
        let current = self.current(&ns).await?;
        if let Some(expected) = req.expected_version {
            if expected != current.version {
                return Err(status::stale(
                    "policy_version",
                    expected.to_string(),
                    current.version.to_string(),
                ));
            }
        }
        if let (Some(text), Some(stored)) = (&current.text, current.stored) {
            if *text == document.to_toml() {
                return Ok(Response::new(pb::ApplyPolicyResponse {
                    policy: Some(stored),
                    unchanged: true,
                    warnings: Vec::new(),
                }));
            }
        }
        if req.dry_run {
            let draft = draft_to_proto(&ns, current.version + 1, &document, &who, &req.reason);
            return Ok(Response::new(pb::ApplyPolicyResponse {
                policy: Some(draft),
                unchanged: false,
                warnings: Vec::new(),
            }));
        }
        tracing::info!(namespace = %ns, actor = %who, from_version = current.version, "applying policy");
        let command = Command::ApplyPolicy {
            namespace: ns.clone(),
            document: Box::new(document),
            actor: who,
            reason: req.reason.clone(),
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            PolicyClient::apply
        );
        Ok(Response::new(pb::ApplyPolicyResponse {
            policy: Some(self.stored(&ns, &applied).await?),
            unchanged: false,
            warnings: Vec::new(),
        }))
    }

    async fn get(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let policy = self.version(&ns, req.version).await?;
        Ok(Response::new(pb::GetPolicyResponse {
            policy: Some(policy),
        }))
    }

    async fn history(
        &self,
        request: Request<pb::PolicyHistoryRequest>,
    ) -> Result<Response<pb::PolicyHistoryResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let below = number_token("page_token", &req.page_token)?;
        let (limit, documents) = (page_limit(req.limit), req.include_documents);
        let lookup = ns.clone();
        let page = self
            .gateway
            .read_local(move |s| history_page(s, &lookup, below, limit, documents))
            .await?;
        page.map(Response::new).ok_or_else(|| no_policy(&ns))
    }

    async fn rollback(
        &self,
        request: Request<pb::RollbackPolicyRequest>,
    ) -> Result<Response<pb::RollbackPolicyResponse>, Status> {
        let req = request.get_ref();
        let (caller, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        if req.version == 0 {
            return Err(status::invalid_argument(
                "version",
                "range",
                "must name a stored version (1 or more)",
            ));
        }
        let who = actor(&caller, &req.actor, req.meta.as_ref())?;
        bounded("reason", &req.reason, REASON_BYTES_MAX)?;
        tracing::info!(namespace = %ns, actor = %who, to_version = req.version, "rolling policy back");
        let command = Command::RollbackPolicy {
            namespace: ns.clone(),
            version: req.version,
            actor: who,
            reason: req.reason.clone(),
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            PolicyClient::rollback
        );
        Ok(Response::new(pb::RollbackPolicyResponse {
            policy: Some(self.stored(&ns, &applied).await?),
        }))
    }

    async fn set_kill_switch(
        &self,
        request: Request<pb::SetKillSwitchRequest>,
    ) -> Result<Response<pb::SetKillSwitchResponse>, Status> {
        let req = request.get_ref();
        let (caller, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let who = actor(&caller, &req.actor, req.meta.as_ref())?;
        if req.writes_blocked {
            // Agents show the reason to explain the refusal: it is required.
            required("reason", &req.reason, REASON_BYTES_MAX)?;
        } else {
            bounded("reason", &req.reason, REASON_BYTES_MAX)?;
        }
        tracing::warn!(namespace = %ns, actor = %who, writes_blocked = req.writes_blocked, "kill switch set");
        let command = Command::SetKillSwitch {
            namespace: ns,
            writes_blocked: req.writes_blocked,
            actor: who,
            reason: req.reason.clone(),
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            PolicyClient::set_kill_switch
        );
        let Answer::KillSwitch(switch) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        Ok(Response::new(pb::SetKillSwitchResponse {
            kill_switch: Some(kill_switch_to_proto(Some(switch))),
        }))
    }

    async fn get_kill_switch(
        &self,
        request: Request<pb::GetKillSwitchRequest>,
    ) -> Result<Response<pb::GetKillSwitchResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let switch = self
            .gateway
            .read_local(move |s| {
                kill_switch_to_proto(s.namespace(&ns).and_then(|n| n.kill_switch.as_ref()))
            })
            .await?;
        Ok(Response::new(pb::GetKillSwitchResponse {
            kill_switch: Some(switch),
        }))
    }

    async fn list_namespaces(
        &self,
        request: Request<pb::ListNamespacesRequest>,
    ) -> Result<Response<pb::ListNamespacesResponse>, Status> {
        let caller = self.gateway.caller(&request)?;
        meta(request.get_ref().meta.as_ref())?;
        let response = self
            .gateway
            .read_local(move |s| namespaces_summary(s, &caller))
            .await?;
        Ok(Response::new(response))
    }

    async fn delete_namespace(
        &self,
        request: Request<pb::DeleteNamespaceRequest>,
    ) -> Result<Response<pb::DeleteNamespaceResponse>, Status> {
        let req = request.get_ref();
        let (caller, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let who = actor(&caller, &req.actor, req.meta.as_ref())?;
        bounded("reason", &req.reason, REASON_BYTES_MAX)?;
        tracing::warn!(namespace = %ns, actor = %who, reason = %req.reason, "namespace delete asked");
        let command = Command::DeleteNamespace {
            namespace: ns,
            actor: who,
            reason: req.reason.clone(),
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            PolicyClient::delete_namespace
        );
        let Answer::NamespaceDeleted(gone) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        Ok(Response::new(pb::DeleteNamespaceResponse {
            breakers: u64::from(gone.breakers),
            tools: u64::from(gone.tools),
            policy_versions: u64::from(gone.policy_versions),
        }))
    }
}

/// The namespaces `caller` holds, each with what it holds.
fn namespaces_summary(s: &SharedStateMachine, caller: &Caller) -> pb::ListNamespacesResponse {
    let namespaces = s
        .namespaces()
        .filter(|(ns, _)| caller.namespaces.allows(ns))
        .map(|(ns, n)| {
            let (breakers, not_closed) =
                s.breakers_in(ns).fold((0u64, 0u64), |(all, open), (_, b)| {
                    (all + 1, open + u64::from(b.state() != BreakerState::Closed))
                });
            pb::NamespaceSummary {
                namespace: ns.to_string(),
                ledger_records: s.ledger().len(ns) as u64,
                breakers,
                breakers_not_closed: not_closed,
                tools: s.tools().tools_in(ns).count() as u64,
                policy_version: n.policy_version(),
                writes_blocked: n.writes_blocked(),
            }
        })
        .collect();
    pb::ListNamespacesResponse {
        namespaces,
        cluster_namespaces: s.namespaces().count() as u64,
        cluster_namespaces_max: NAMESPACES_MAX as u64,
    }
}

/// One page of versions, newest first, below a version; `None` when the
/// namespace has no policy.
fn history_page(
    s: &SharedStateMachine,
    ns: &Namespace,
    below: Option<u64>,
    limit: usize,
    documents: bool,
) -> Option<pb::PolicyHistoryResponse> {
    let n = s.namespace(ns).filter(|n| n.policy_version() > 0)?;
    let mut page: Vec<_> = n
        .policies
        .iter()
        .rev()
        .filter(|v| below.is_none_or(|b| v.version < b))
        .take(limit + 1)
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let mut versions: Vec<pb::PolicyVersion> = page
        .into_iter()
        .map(|v| version_to_proto(ns, v, documents))
        .collect();
    // With documents (up to 256 KiB each) a page is cut by bytes too.
    let cut = cut_to_page_bytes(&mut versions);
    let next_page_token = match (more || cut, versions.last()) {
        (true, Some(last)) => last.version.to_string(),
        _ => String::new(),
    };
    Some(pb::PolicyHistoryResponse {
        versions,
        next_page_token,
    })
}
