//! What an agent talks to: one MCP server per upstream, which passes
//! everything through to the upstream except `tools/call`, which goes
//! through the gate.

use crate::gate::Gate;
use crate::upstream::Upstream;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceError};
use std::sync::Arc;

/// The MCP server an agent sees for one upstream.
#[derive(Clone)]
pub struct Proxy {
    upstream: Arc<Upstream>,
    gate: Arc<Gate>,
}

impl Proxy {
    /// A proxy of `upstream` whose tool calls pass `gate`.
    pub fn new(upstream: Arc<Upstream>, gate: Arc<Gate>) -> Proxy {
        Proxy { upstream, gate }
    }
}

/// An upstream failure on a passed-through request, as a JSON-RPC error.
fn passed_on(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("upstream: {other}"), None),
    }
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        let info = self.upstream.info();
        let mut capabilities = info.capabilities.clone();
        // Long-running tasks and other extensions are not proxied: the
        // upstream must answer each call inline, under the gate's deadline.
        capabilities.extensions = None;
        let name = info
            .server_info
            .as_ref()
            .map_or_else(|| self.upstream.name.clone(), |s| s.name.clone());
        let mut config = ServerConfig::new(capabilities).with_server_info(Implementation::new(
            format!("{name} (through fusebox)"),
            env!("CARGO_PKG_VERSION"),
        ));
        config.instructions = info.instructions.clone();
        config
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.upstream
            .peer()
            .list_tools(request)
            .await
            .map_err(passed_on)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let meta = context.meta.0 .0.clone();
        let called = self
            .gate
            .call(self.upstream.peer(), &self.upstream.name, request, &meta);
        tokio::select! {
            result = called => result.map(CallToolResponse::from),
            // The agent gave up: dropping the call drops the upstream
            // request, which rmcp cancels upstream.
            () = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled by the caller", None)),
        }
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.upstream
            .peer()
            .list_resources(request)
            .await
            .map_err(passed_on)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.upstream
            .peer()
            .list_resource_templates(request)
            .await
            .map_err(passed_on)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.upstream
            .peer()
            .read_resource_once(request)
            .await
            .map_err(passed_on)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.upstream
            .peer()
            .list_prompts(request)
            .await
            .map_err(passed_on)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.upstream
            .peer()
            .get_prompt_once(request)
            .await
            .map_err(passed_on)
    }
}
