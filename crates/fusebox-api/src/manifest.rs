//! Reading an MCP `tools/list` result into the tools of an import manifest,
//! for `fusebox tools import` (which reads the file, `fusebox_cli`'s
//! `manifest.rs`).
//!
//! Accepted shapes: the result object `{"tools": [...]}`, or the whole
//! JSON-RPC response `{"jsonrpc": "2.0", "id": 1, "result": {"tools": [...]}}`.
//! Only one page is read (`nextCursor` is ignored): the import replaces the
//! server's tool list with exactly the tools given, so merge pages first.
//!
//! Per tool the reader takes `name`, the four MCP hints under `annotations`
//! and `annotations.latencyDisclosure` as raw JSON. It checks only the shape
//! a manifest must have to be imported at all (a name, boolean hints); the
//! disclosure block is judged by the cluster, by the spec's rules, at the
//! leader's time, so every replica agrees on its verdict.

use fusebox_core::limits::{DISCLOSURE_BLOCK_BYTES_MAX, TOOLS_PER_SERVER_MAX};
use fusebox_proto::v1 as pb;
use serde_json::Value;

/// The MCP annotation keys of the four hints, in the wire field order.
const HINTS: [&str; 4] = [
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
];

/// The tools of a `tools/list` result (or of a JSON-RPC response holding one).
pub fn parse_manifest(value: &Value) -> Result<Vec<pb::ManifestTool>, String> {
    let result = value.get("result").unwrap_or(value);
    let Some(tools) = result.get("tools").and_then(Value::as_array) else {
        return Err("no \"tools\" array (expected a tools/list result)".to_owned());
    };
    if tools.len() > TOOLS_PER_SERVER_MAX {
        return Err(format!(
            "{} tools, at most {TOOLS_PER_SERVER_MAX} per server",
            tools.len()
        ));
    }
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| parse_tool(i, t))
        .collect()
}

fn parse_tool(i: usize, tool: &Value) -> Result<pb::ManifestTool, String> {
    let Some(name) = tool.get("name").and_then(Value::as_str) else {
        return Err(format!("tools[{i}] has no \"name\" string"));
    };
    let annotations = tool.get("annotations").unwrap_or(&Value::Null);
    if !(annotations.is_null() || annotations.is_object()) {
        return Err(format!("tool {name}: \"annotations\" is not an object"));
    }
    let mut hints = [None; 4];
    for (slot, key) in hints.iter_mut().zip(HINTS) {
        *slot = match annotations.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                return Err(format!(
                    "tool {name}: annotations.{key} is {other}, not true or false"
                ))
            }
        };
    }
    let block = match annotations.get("latencyDisclosure") {
        None | Some(Value::Null) => None,
        Some(block) => Some(block.to_string()),
    };
    if let Some(text) = &block {
        if text.len() > DISCLOSURE_BLOCK_BYTES_MAX {
            return Err(format!(
                "tool {name}: annotations.latencyDisclosure is {} bytes, at most \
                 {DISCLOSURE_BLOCK_BYTES_MAX}",
                text.len()
            ));
        }
    }
    let [read_only_hint, destructive_hint, idempotent_hint, open_world_hint] = hints;
    Ok(pb::ManifestTool {
        tool: name.to_owned(),
        read_only_hint,
        destructive_hint,
        idempotent_hint,
        open_world_hint,
        latency_disclosure_json: block,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_json_rpc_response_with_hints_and_blocks() {
        let response = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
            {"name": "search", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true, "openWorldHint": false,
                             "latencyDisclosure": {"p95_ms": 720}}},
            {"name": "bare", "inputSchema": {"type": "object"}}
        ]}});
        let tools = parse_manifest(&response).unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0].tool, "search");
        assert_eq!(tools[0].read_only_hint, Some(true));
        assert_eq!(tools[0].open_world_hint, Some(false));
        assert_eq!(tools[0].idempotent_hint, None);
        assert_eq!(
            tools[0].latency_disclosure_json.as_deref(),
            Some("{\"p95_ms\":720}")
        );
        assert_eq!(tools[1].latency_disclosure_json, None);
        assert_eq!(parse_manifest(&response["result"]).unwrap(), tools);
    }

    #[test]
    fn a_malformed_manifest_says_where() {
        let no_tools = parse_manifest(&json!({"result": {}})).unwrap_err();
        assert!(no_tools.contains("no \"tools\" array"), "{no_tools}");
        let no_name = parse_manifest(&json!({"tools": [{"title": "x"}]})).unwrap_err();
        assert_eq!(no_name, "tools[0] has no \"name\" string");
        let hint = json!({"tools": [{"name": "t", "annotations": {"readOnlyHint": "yes"}}]});
        assert_eq!(
            parse_manifest(&hint).unwrap_err(),
            "tool t: annotations.readOnlyHint is \"yes\", not true or false"
        );
    }
}
