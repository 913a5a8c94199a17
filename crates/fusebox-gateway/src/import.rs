//! An upstream's tool annotations into the cluster's tool registry, as
//! `fusebox tools import` puts them there, so the namespace's effect
//! classes fall back on the upstream's own hints, and a tool's latency
//! disclosure sets its deadline.
//!
//! The disclosure is read from the tool's `_meta` under
//! [`DISCLOSURE_META_KEY`]. The seed's place for it,
//! `annotations.latencyDisclosure`, does not survive rmcp 3.11's typed
//! `ToolAnnotations` (unknown keys are dropped when the list is read);
//! such servers' disclosures are imported with `fusebox tools import` from
//! a saved `tools/list`.

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

/// The key of a tool's `_meta` read as its latency disclosure block.
pub const DISCLOSURE_META_KEY: &str = "latencyDisclosure";
/// Largest disclosure block taken (the cluster's own bound).
const DISCLOSURE_BYTES_MAX: usize = 4096;

/// A tool's annotations, as the registry takes them.
fn manifest_tool(tool: &Tool) -> pb::ManifestTool {
    let hints = tool.annotations.as_ref();
    let disclosure = tool
        .meta
        .as_ref()
        .and_then(|m| m.0.get(DISCLOSURE_META_KEY))
        .filter(|block| block.is_object())
        .map(|block| block.to_string())
        .filter(|text| text.len() <= DISCLOSURE_BYTES_MAX);
    pb::ManifestTool {
        tool: tool.name.to_string(),
        read_only_hint: hints.and_then(|h| h.read_only_hint),
        destructive_hint: hints.and_then(|h| h.destructive_hint),
        idempotent_hint: hints.and_then(|h| h.idempotent_hint),
        open_world_hint: hints.and_then(|h| h.open_world_hint),
        latency_disclosure_json: disclosure,
    }
}

/// Where and as whom the gateway imports tool manifests.
#[derive(Clone)]
pub struct Importer {
    cluster: Vec<String>,
    namespace: String,
    bearer: Bearer,
}

impl Importer {
    /// An importer into `namespace` on `cluster`, with `token` if given.
    pub fn new(
        cluster: Vec<String>,
        namespace: String,
        token: Option<&str>,
    ) -> Result<Importer, String> {
        let bearer = match token {
            Some(t) => Bearer::token(t)?,
            None => Bearer::none(),
        };
        Ok(Importer {
            cluster,
            namespace,
            bearer,
        })
    }

    /// Imports `tools` as server `server`'s manifest.
    pub async fn import(&self, server: &str, tools: &[Tool]) -> Result<(), String> {
        hints(&self.cluster, &self.namespace, &self.bearer, server, tools).await
    }
}

/// Imports `tools` as server `server`'s manifest, trying each cluster
/// member in turn (any member forwards it to the leader).
async fn hints(
    cluster: &[String],
    namespace: &str,
    bearer: &Bearer,
    server: &str,
    tools: &[Tool],
) -> Result<(), String> {
    let request = pb::ImportToolsRequest {
        namespace: namespace.to_owned(),
        meta: Some(pb::RequestMeta {
            caller: "fusebox-gateway".into(),
            ..Default::default()
        }),
        server: server.to_owned(),
        tools: tools.iter().map(manifest_tool).collect(),
        actor: "fusebox-gateway".into(),
    };
    let mut last = String::from("no cluster member named");
    for member in cluster {
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
        assert_eq!(m.latency_disclosure_json, None);
    }

    #[test]
    fn a_disclosure_in_meta_is_carried_and_a_malformed_one_is_not() {
        let mut tool = Tool::new("search", "Searches", Arc::new(Default::default()));
        let mut meta = rmcp::model::MetaObject::new();
        meta.0.insert(
            DISCLOSURE_META_KEY.into(),
            serde_json::json!({"version": "1.0", "p95_ms": 720}),
        );
        tool.meta = Some(meta.clone());
        let carried = manifest_tool(&tool).latency_disclosure_json.unwrap();
        let carried: serde_json::Value = serde_json::from_str(&carried).unwrap();
        assert_eq!(
            carried,
            serde_json::json!({"version": "1.0", "p95_ms": 720})
        );
        meta.0
            .insert(DISCLOSURE_META_KEY.into(), serde_json::json!("fast"));
        tool.meta = Some(meta);
        assert_eq!(manifest_tool(&tool).latency_disclosure_json, None);
    }
}
