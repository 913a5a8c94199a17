//! An upstream's tool annotations into the cluster's tool registry, as
//! `fusebox tools import` puts them there, so the namespace's effect
//! classes fall back on the upstream's own hints.

use crate::config::GatewayConfig;
use fusebox_proto::bearer::Bearer;
use fusebox_proto::net::Net;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::tools_client::ToolsClient;
use rmcp::model::Tool;
use std::time::Duration;
use tonic::transport::Endpoint;

/// The deadline of the import call.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long dialing one cluster member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A tool's annotations, as the registry takes them.
fn manifest_tool(tool: &Tool) -> pb::ManifestTool {
    let hints = tool.annotations.as_ref();
    pb::ManifestTool {
        tool: tool.name.to_string(),
        read_only_hint: hints.and_then(|h| h.read_only_hint),
        destructive_hint: hints.and_then(|h| h.destructive_hint),
        idempotent_hint: hints.and_then(|h| h.idempotent_hint),
        open_world_hint: hints.and_then(|h| h.open_world_hint),
        latency_disclosure_json: None,
    }
}

/// Imports `tools` as server `server`'s manifest, trying each cluster
/// member in turn (any member forwards it to the leader).
pub(crate) async fn hints(
    config: &GatewayConfig,
    token: Option<&str>,
    server: &str,
    tools: &[Tool],
) -> Result<(), String> {
    let bearer = match token {
        Some(t) => Bearer::token(t)?,
        None => Bearer::none(),
    };
    let request = pb::ImportToolsRequest {
        namespace: config.namespace.clone(),
        meta: Some(pb::RequestMeta {
            caller: "fusebox-gateway".into(),
            ..Default::default()
        }),
        server: server.to_owned(),
        tools: tools.iter().map(manifest_tool).collect(),
        actor: "fusebox-gateway".into(),
    };
    let mut last = String::from("no cluster member named");
    for member in &config.cluster {
        let endpoint = Endpoint::from_shared(format!("http://{member}"))
            .map_err(|e| format!("cluster member {member:?}: {e}"))?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(IMPORT_TIMEOUT);
        let channel = Net::Tcp.channel(endpoint);
        let mut tools_client = ToolsClient::with_interceptor(channel, bearer.clone());
        match tools_client.import(request.clone()).await {
            Ok(_) => return Ok(()),
            Err(status) => last = format!("{member}: {}", status.message()),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;
    use std::sync::Arc;

    #[test]
    fn hints_are_carried_and_missing_ones_stay_unset() {
        let mut tool = Tool::new("charge", "Charges a card", Arc::new(Default::default()));
        assert_eq!(manifest_tool(&tool).read_only_hint, None);
        tool.annotations = Some(ToolAnnotations::new().read_only(false).idempotent(false));
        let m = manifest_tool(&tool);
        assert_eq!(
            (m.tool.as_str(), m.read_only_hint, m.idempotent_hint),
            ("charge", Some(false), Some(false))
        );
        assert_eq!(m.destructive_hint, None);
    }
}
