//! What an agent talks to: an MCP server that passes everything through to
//! the upstreams except `tools/call`, which goes through the gate.
//!
//! Two shapes:
//! - **one upstream** (`/servers/NAME/mcp`): every request passes through
//!   as it is, pages included, so the agent keeps the tool names it knows;
//! - **aggregated** (`/mcp`, and stdio): the upstreams' tools and prompts
//!   are merged into one list, each name prefixed with its server's when
//!   two upstreams share it, or always ([`ToolPrefix`]); resources keep
//!   their URIs. A call is routed by the name it gives. An upstream that
//!   cannot be reached is left out of the lists until it answers again.

use crate::config::ToolPrefix;
use crate::gate::Gate;
use crate::upstream::Upstream;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, Prompt, PromptsCapability, ReadResourceRequestParams,
    ReadResourceResponse, ResourcesCapability, ServerCapabilities, ServerConfig, Tool,
    ToolsCapability,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceError};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The MCP server an agent sees.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    upstreams: Vec<Arc<Upstream>>,
    gate: Arc<Gate>,
    /// `None` for one upstream passed through as it is.
    naming: Option<Naming>,
    routes: Mutex<Routes>,
}

/// How the aggregated endpoint names what it merges.
#[derive(Clone, Debug)]
pub struct Naming {
    /// When names are prefixed.
    pub prefix: ToolPrefix,
    /// What joins a server's name and a tool's.
    pub separator: String,
}

/// The aggregated names last listed: name -> (upstream index, its name).
#[derive(Default)]
struct Routes {
    tools: HashMap<String, (usize, String)>,
    /// When the tools were last listed, so a name no upstream has does not
    /// send every call to list them all again.
    tools_listed: Option<Instant>,
    prompts: HashMap<String, (usize, String)>,
    resources: HashMap<String, usize>,
}

/// The least time between two listings made to find an unknown tool name.
const RELIST_PAUSE: Duration = Duration::from_secs(1);

/// An upstream failure on a passed-through request, as a JSON-RPC error.
fn passed_on(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("upstream: {other}"), None),
    }
}

/// The names `items` of each upstream are listed under: prefixed when the
/// mode says so, else only where two upstreams share a name.
fn merged_names(naming: &Naming, servers: &[&str], names: &[Vec<String>]) -> Vec<Vec<String>> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for list in names {
        for name in list {
            *seen.entry(name.as_str()).or_default() += 1;
        }
    }
    servers
        .iter()
        .zip(names)
        .map(|(server, list)| {
            list.iter()
                .map(|name| {
                    let shared = seen.get(name.as_str()).copied().unwrap_or(0) > 1;
                    if naming.prefix == ToolPrefix::Always || shared {
                        format!("{server}{}{name}", naming.separator)
                    } else {
                        name.clone()
                    }
                })
                .collect()
        })
        .collect()
}

/// Merges each upstream's items (tools or prompts) into one list under
/// their merged names (`name_of` reads an item's name, `set_name` sets
/// it). The routes map each merged name to (upstream, its own name).
fn merge<T>(
    naming: &Naming,
    servers: &[&str],
    lists: Vec<Vec<T>>,
    name_of: impl Fn(&T) -> String,
    set_name: impl Fn(&mut T, String),
) -> (Vec<T>, HashMap<String, (usize, String)>) {
    let names: Vec<Vec<String>> = lists
        .iter()
        .map(|l| l.iter().map(&name_of).collect())
        .collect();
    let named = merged_names(naming, servers, &names);
    let mut routes = HashMap::new();
    let mut merged = Vec::new();
    for (i, ((items, own), named)) in lists.into_iter().zip(names).zip(named).enumerate() {
        for ((mut item, own), name) in items.into_iter().zip(own).zip(named) {
            set_name(&mut item, name.clone());
            routes.insert(name, (i, own));
            merged.push(item);
        }
    }
    (merged, routes)
}

impl Proxy {
    /// A proxy of one upstream, passed through as it is.
    pub fn single(upstream: Arc<Upstream>, gate: Arc<Gate>) -> Proxy {
        Proxy::build(vec![upstream], gate, None)
    }

    /// A proxy merging `upstreams` under one endpoint.
    pub fn aggregated(upstreams: Vec<Arc<Upstream>>, gate: Arc<Gate>, naming: Naming) -> Proxy {
        Proxy::build(upstreams, gate, Some(naming))
    }

    fn build(upstreams: Vec<Arc<Upstream>>, gate: Arc<Gate>, naming: Option<Naming>) -> Proxy {
        Proxy {
            inner: Arc::new(Inner {
                upstreams,
                gate,
                naming,
                routes: Mutex::default(),
            }),
        }
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.inner
            .routes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn servers(&self) -> Vec<&str> {
        self.inner
            .upstreams
            .iter()
            .map(|u| u.name.as_str())
            .collect()
    }

    /// Every upstream's tools, merged and named; the routes are updated.
    async fn merged_tools(&self, naming: &Naming) -> Vec<Tool> {
        let mut lists = Vec::with_capacity(self.inner.upstreams.len());
        for upstream in &self.inner.upstreams {
            match upstream.tools().await {
                Ok(tools) => lists.push(tools),
                Err(e) => {
                    tracing::warn!(upstream = %upstream.name, error = %e, "left out of the aggregated tools/list");
                    lists.push(Vec::new());
                }
            }
        }
        let (merged, routes) = merge(
            naming,
            &self.servers(),
            lists,
            |tool: &Tool| tool.name.to_string(),
            |tool, name| tool.name = name.into(),
        );
        let mut known = self.routes();
        known.tools = routes;
        known.tools_listed = Some(Instant::now());
        drop(known);
        merged
    }

    /// Every upstream's prompts, merged and named; the routes are updated.
    async fn merged_prompts(&self, naming: &Naming) -> Vec<Prompt> {
        let mut lists = Vec::with_capacity(self.inner.upstreams.len());
        for upstream in &self.inner.upstreams {
            let listed = upstream.pass(|peer| async move { peer.list_all_prompts().await });
            lists.push(listed.await.unwrap_or_default());
        }
        let (merged, routes) = merge(
            naming,
            &self.servers(),
            lists,
            |prompt: &Prompt| prompt.name.clone(),
            |prompt, name| prompt.name = name,
        );
        self.routes().prompts = routes;
        merged
    }

    /// Which upstream serves the aggregated tool `name`, and its own name
    /// for it; the list is read again once when the name is not known (at
    /// most once per [`RELIST_PAUSE`]).
    async fn route_tool(&self, naming: &Naming, name: &str) -> Option<(usize, String)> {
        {
            let known = self.routes();
            if let Some(found) = known.tools.get(name).cloned() {
                return Some(found);
            }
            if known
                .tools_listed
                .is_some_and(|t| t.elapsed() < RELIST_PAUSE)
            {
                return None;
            }
        }
        self.merged_tools(naming).await;
        self.routes().tools.get(name).cloned()
    }
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        let infos: Vec<_> = self.inner.upstreams.iter().map(|u| u.info()).collect();
        let (mut capabilities, name, instructions) = match (&self.inner.naming, &infos[..]) {
            (None, [Some(info)]) => {
                let name = info
                    .server_info
                    .as_ref()
                    .map_or_else(|| self.inner.upstreams[0].name.clone(), |s| s.name.clone());
                (info.capabilities.clone(), name, info.instructions.clone())
            }
            _ => {
                let mut capabilities = ServerCapabilities::default();
                capabilities.tools = Some(ToolsCapability::default());
                for info in infos.iter().flatten() {
                    if info.capabilities.prompts.is_some() {
                        capabilities.prompts = Some(PromptsCapability::default());
                    }
                    if info.capabilities.resources.is_some() {
                        capabilities.resources = Some(ResourcesCapability::default());
                    }
                }
                let name = match &self.inner.naming {
                    None => self.inner.upstreams[0].name.clone(),
                    Some(_) => "fusebox-gateway".to_owned(),
                };
                (capabilities, name, None)
            }
        };
        // Extensions are not proxied. An upstream's tasks are followed by
        // the gate, so the agent gets each call's result inline.
        capabilities.extensions = None;
        let mut config = ServerConfig::new(capabilities).with_server_info(Implementation::new(
            format!("{name} (through fusebox)"),
            env!("CARGO_PKG_VERSION"),
        ));
        config.instructions = instructions;
        config
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        match &self.inner.naming {
            None => {
                let upstream = &self.inner.upstreams[0];
                let page = upstream
                    .pass(|peer| async move { peer.list_tools(request).await })
                    .await
                    .map_err(passed_on)?;
                upstream.remember(&page.tools);
                Ok(page)
            }
            Some(naming) => Ok(ListToolsResult::with_all_items(
                self.merged_tools(naming).await,
            )),
        }
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let upstream = match &self.inner.naming {
            None => self.inner.upstreams[0].clone(),
            Some(naming) => {
                let Some((i, name)) = self.route_tool(naming, &request.name).await else {
                    let message = format!("no upstream lists a tool named {}", request.name);
                    return Err(ErrorData::invalid_params(message, None));
                };
                request.name = name.into();
                self.inner.upstreams[i].clone()
            }
        };
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| (context.peer.clone(), token));
        let meta = context.meta.clone();
        let called = self.inner.gate.call(&upstream, request, meta, progress);
        tokio::select! {
            result = called => result.map(CallToolResponse::from),
            // The agent gave up: dropping the call cancels it upstream.
            () = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled by the caller", None)),
        }
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        if self.inner.naming.is_none() {
            return self.inner.upstreams[0]
                .pass(|peer| async move { peer.list_resources(request).await })
                .await
                .map_err(passed_on);
        }
        let mut merged = Vec::new();
        let mut routes = HashMap::new();
        for (i, upstream) in self.inner.upstreams.iter().enumerate() {
            let listed = upstream.pass(|peer| async move { peer.list_all_resources().await });
            for resource in listed.await.unwrap_or_default() {
                routes.entry(resource.uri.clone()).or_insert(i);
                merged.push(resource);
            }
        }
        self.routes().resources = routes;
        Ok(ListResourcesResult::with_all_items(merged))
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        if self.inner.naming.is_none() {
            return self.inner.upstreams[0]
                .pass(|peer| async move { peer.list_resource_templates(request).await })
                .await
                .map_err(passed_on);
        }
        let mut merged = Vec::new();
        for upstream in &self.inner.upstreams {
            let listed =
                upstream.pass(|peer| async move { peer.list_all_resource_templates().await });
            merged.extend(listed.await.unwrap_or_default());
        }
        Ok(ListResourceTemplatesResult::with_all_items(merged))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let known = self.routes().resources.get(&request.uri).copied();
        // A URI not listed (a template's, say) is asked of each upstream in
        // turn until one has it.
        let order: Vec<usize> = match known {
            Some(i) => vec![i],
            None => (0..self.inner.upstreams.len()).collect(),
        };
        let mut last =
            ErrorData::resource_not_found(format!("no upstream has {}", request.uri), None);
        for i in order {
            let request = request.clone();
            let read = self.inner.upstreams[i]
                .pass(|peer| async move { peer.read_resource_once(request).await })
                .await;
            match read {
                Ok(found) => return Ok(found),
                Err(e) => last = passed_on(e),
            }
        }
        Err(last)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        match &self.inner.naming {
            None => self.inner.upstreams[0]
                .pass(|peer| async move { peer.list_prompts(request).await })
                .await
                .map_err(passed_on),
            Some(naming) => Ok(ListPromptsResult::with_all_items(
                self.merged_prompts(naming).await,
            )),
        }
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let i = match &self.inner.naming {
            None => 0,
            Some(naming) => {
                let mut found = self.routes().prompts.get(&request.name).cloned();
                if found.is_none() {
                    self.merged_prompts(naming).await;
                    found = self.routes().prompts.get(&request.name).cloned();
                }
                let Some((i, name)) = found else {
                    let message = format!("no upstream lists a prompt named {}", request.name);
                    return Err(ErrorData::invalid_params(message, None));
                };
                request.name = name;
                i
            }
        };
        self.inner.upstreams[i]
            .pass(|peer| async move { peer.get_prompt_once(request).await })
            .await
            .map_err(passed_on)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn only_shared_names_are_prefixed_unless_always() {
        let mut naming = Naming {
            prefix: ToolPrefix::OnCollision,
            separator: "__".into(),
        };
        let lists = [names(&["lookup", "charge"]), names(&["lookup", "refund"])];
        let named = merged_names(&naming, &["tax", "pay"], &lists);
        assert_eq!(named[0], names(&["tax__lookup", "charge"]));
        assert_eq!(named[1], names(&["pay__lookup", "refund"]));
        naming.prefix = ToolPrefix::Always;
        let named = merged_names(&naming, &["tax", "pay"], &lists);
        assert_eq!(named[1], names(&["pay__lookup", "pay__refund"]));
    }

    #[test]
    fn merged_names_route_to_the_upstream_and_its_own_name() {
        let naming = Naming {
            prefix: ToolPrefix::OnCollision,
            separator: "__".into(),
        };
        let lists = vec![names(&["lookup", "charge"]), names(&["lookup"])];
        let (merged, routes) = merge(
            &naming,
            &["tax", "pay"],
            lists,
            String::clone,
            |item, name| *item = name,
        );
        assert_eq!(merged, names(&["tax__lookup", "charge", "pay__lookup"]));
        assert_eq!(routes["pay__lookup"], (1, "lookup".to_owned()));
        assert_eq!(routes["charge"], (0, "charge".to_owned()));
    }
}
