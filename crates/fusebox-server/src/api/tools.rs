//! `fusebox.v1.Tools`: imported tool manifests, disclosed against observed
//! latency, and observed `latency_disclosure` blocks.
//!
//! `Import` is a write: the manifest's blocks travel raw in the log and are
//! judged by the state machine at the entry's time, so every replica stores
//! the same verdicts. An invalid block is an answer (a verdict with its
//! broken rules), not a failed call. Reads are local and carry the revision
//! and the state time the observed windows end at.

use super::convert::tools::tool_latency;
use super::convert::tools::{imported_to_proto, manifest_from_proto, problem_to_proto, tool_ids};
use super::convert::{actor, cut_to_page_bytes, meta, name};
use super::gateway::{unexpected, Gateway, Served};
use super::status;
use crate::backend::Backend;
use fusebox_core::disclosure::{assess, LatencyDisclosure};
use fusebox_core::machine::{Answer, Command, SharedStateMachine};
use fusebox_core::tools::ToolId;
use fusebox_core::{CoreError, Namespace, ServerName, ToolName};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::tools_client::ToolsClient;
use fusebox_proto::v1::tools_server::Tools;
use fusebox_proto::v1::ErrorCode;
use tonic::{Code, Request, Response, Status};

/// The Tools service over a backend.
pub struct ToolsService<B> {
    gateway: Gateway<B>,
}

impl<B: Backend> ToolsService<B> {
    /// A service proposing and reading through `gateway`.
    pub fn new(gateway: Gateway<B>) -> Self {
        ToolsService { gateway }
    }
}

/// The tool a `Tools.List` page continues after (`SERVER/TOOL`).
fn page_after(ns: &Namespace, token: &str) -> Result<Option<ToolId>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || {
        status::invalid_argument(
            "page_token",
            "page_token",
            "is not a token this server issued",
        )
    };
    let (server, tool) = token.split_once('/').ok_or_else(bad)?;
    tool_id(ns, server, tool).map(Some).map_err(|_| bad())
}

/// A tool's id from request fields, each checked.
fn tool_id(ns: &Namespace, server: &str, tool: &str) -> Result<ToolId, Status> {
    Ok(ToolId {
        namespace: ns.clone(),
        server: name("server", server, ServerName::new)?,
        tool: name("tool", tool, ToolName::new)?,
    })
}

fn unknown_tool(id: &ToolId) -> Status {
    let name = format!("{}/{}", id.server, id.tool);
    status::not_found(
        "tool",
        &name,
        format!(
            "tool {name} is neither imported nor observed in namespace {}",
            id.namespace
        ),
    )
}

fn is_known(state: &SharedStateMachine, id: &ToolId) -> bool {
    state.tools().tool(id).is_some() || state.tools().observed_in(&id.namespace).any(|o| o == id)
}

/// The emitted block, or why there is none.
/// The extension field an emitted block states its method in.
const MEASUREMENT_FIELD: &str = "x_fusebox_measurement";
/// How the fleet measured what an emitted block discloses.
const MEASUREMENT_METHOD: &str = "client-side: wall-clock at the calling agents from request \
    sent to response received, network included; calls that timed out are excluded";

fn emit(
    state: &SharedStateMachine,
    id: &ToolId,
    timeout_ms: Option<u64>,
) -> Result<pb::EmitDisclosureResponse, Status> {
    if !is_known(state, id) {
        return Err(unknown_tool(id));
    }
    let document = state.policy_document(&id.namespace);
    let now = state.now();
    let block: LatencyDisclosure = match state.tools().emit(id, document, timeout_ms, now) {
        Ok(block) => block,
        Err(CoreError::InvalidField { reason, .. }) => {
            return Err(status::with_detail(
                Code::FailedPrecondition,
                ErrorCode::InvalidState,
                format!("no disclosure for {}/{}: {reason}", id.server, id.tool),
                None,
            ))
        }
        Err(other) => return Err(status::from_core(&other)),
    };
    // The spec's percentiles are server-side; these are the fleet's own
    // observations. Readers ignore unknown fields, so the block says so in
    // one of its own.
    let mut value = block.to_json();
    if let Some(fields) = value.as_object_mut() {
        fields.insert(
            MEASUREMENT_FIELD.to_owned(),
            serde_json::Value::String(MEASUREMENT_METHOD.to_owned()),
        );
    }
    let block_json = serde_json::to_string_pretty(&value)
        .map_err(|e| Status::internal(format!("encoding the block failed: {e}")))?;
    Ok(pb::EmitDisclosureResponse {
        block_json,
        warnings: assess(&block, now)
            .problems
            .iter()
            .map(problem_to_proto)
            .collect(),
        window_ms: document.observation_window_ms(),
    })
}

#[tonic::async_trait]
impl<B: Backend> Tools for ToolsService<B> {
    async fn import(
        &self,
        request: Request<pb::ImportToolsRequest>,
    ) -> Result<Response<pb::ImportToolsResponse>, Status> {
        let req = request.get_ref();
        let (caller, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let server = name("server", &req.server, ServerName::new)?;
        let who = actor(&caller, &req.actor, req.meta.as_ref())?;
        let tools = manifest_from_proto(&req.tools)?;
        tracing::info!(namespace = %ns, server = %server, tools = tools.len(), actor = %who, "importing tools");
        let command = Command::ImportTools {
            namespace: ns,
            server,
            tools,
            actor: who,
        };
        let applied = here_or_forward!(
            self,
            request,
            self.gateway.write(command).await?,
            ToolsClient::import
        );
        let Answer::ToolsImported(results) = &applied.answer else {
            return Err(unexpected(&applied.answer));
        };
        Ok(Response::new(pb::ImportToolsResponse {
            tools: results.iter().map(imported_to_proto).collect(),
            revision: applied.revision,
        }))
    }

    async fn list(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let (_, ns) = self.gateway.admit(&request, &request.get_ref().namespace)?;
        let req = request.into_inner();
        meta(req.meta.as_ref())?;
        if let Some(server) = &req.server {
            name("server", server, ServerName::new)?;
        }
        if let Some(tool) = &req.tool {
            name("tool", tool, ToolName::new)?;
        }
        let after = page_after(&ns, &req.page_token)?;
        let response = self
            .gateway
            .read_local(move |s| {
                let ids = tool_ids(s, &ns, req.server.as_deref(), req.tool.as_deref());
                let mut tools: Vec<pb::ToolLatency> = ids
                    .iter()
                    .filter(|id| after.as_ref().is_none_or(|a| *id > a))
                    .map(|id| tool_latency(s, id))
                    .collect();
                // Each tool may carry a 16 KiB disclosure: page by bytes.
                let next_page_token = if cut_to_page_bytes(&mut tools) {
                    tools
                        .last()
                        .map(|t| format!("{}/{}", t.server, t.tool))
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                pb::ListToolsResponse {
                    tools,
                    revision: s.revision(),
                    as_of_ms: s.now().as_millis(),
                    next_page_token,
                }
            })
            .await?;
        Ok(Response::new(response))
    }

    async fn get(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> Result<Response<pb::GetToolResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let id = tool_id(&ns, &req.server, &req.tool)?;
        let tool = self
            .gateway
            .read_local(move |s| is_known(s, &id).then(|| tool_latency(s, &id)).ok_or(id))
            .await?
            .map_err(|id| unknown_tool(&id))?;
        Ok(Response::new(pb::GetToolResponse { tool: Some(tool) }))
    }

    async fn emit_disclosure(
        &self,
        request: Request<pb::EmitDisclosureRequest>,
    ) -> Result<Response<pb::EmitDisclosureResponse>, Status> {
        let req = request.get_ref();
        let (_, ns) = self.gateway.admit(&request, &req.namespace)?;
        meta(req.meta.as_ref())?;
        let id = tool_id(&ns, &req.server, &req.tool)?;
        let timeout_ms = req.timeout_ms;
        let response = self
            .gateway
            .read_local(move |s| emit(s, &id, timeout_ms))
            .await??;
        Ok(Response::new(response))
    }
}
