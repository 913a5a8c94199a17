//! `fusebox tools import|latency|disclosure`: tool manifests, observed
//! latency against disclosed, and observed disclosure blocks.
//!
//! `import` sends an MCP `tools/list` result for one server. The cluster
//! judges each tool's `latencyDisclosure` block by the spec's rules and
//! stores the valid, fresh ones; this command prints each tool's verdict
//! with every broken rule, and whether its effect class was derived from
//! the MCP hints (the policy says nothing about it).
//!
//! Exit code of `import`: 2 when any block is invalid, **after** the import
//! is stored. The valid blocks are imported anyway, so one publisher's
//! broken block does not keep its siblings' disclosures from the fleet,
//! while a script or CI job still sees that the manifest needs fixing.
//! Stale and missing blocks are not errors (the spec treats both as
//! missing): they exit 0 with their verdict printed.

use crate::client::{ClientArgs, Session};
use crate::failure::{rpc, Failure};
use crate::manifest::read_manifest;
use crate::out::outln;
use crate::table::{effect_name, or_dash, Table};
use clap::{Args, Subcommand};
use fusebox_proto::v1 as pb;
use serde_json::{json, Value};
use std::path::PathBuf;

/// `fusebox tools ...`
#[derive(Args, Debug)]
pub struct ToolsArgs {
    #[command(subcommand)]
    command: ToolsCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum ToolsCommand {
    /// Import a server's MCP `tools/list` result (JSON): hints and latency
    /// disclosures. Prints each block's verdict and broken rules; exits 2
    /// if any block is invalid (the valid ones are imported anyway).
    Import {
        /// The `tools/list` result, or a JSON-RPC response holding one.
        file: PathBuf,
        /// Namespace to import into.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// The tool server the manifest describes; its tool list is replaced.
        #[arg(long)]
        server: String,
    },
    /// Observed p50/p95/p99 and samples next to the disclosed ones, and
    /// whether the tool is penalized.
    Latency {
        /// Only this tool (`TOOL` or `SERVER/TOOL`).
        tool: Option<String>,
        /// Namespace to read.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// Only this server's tools.
        #[arg(long)]
        server: Option<String>,
    },
    /// Emit a `latency_disclosure` block from observed fleet telemetry,
    /// valid by the spec, for the tool's publisher to ship.
    Disclosure {
        /// The tool (`TOOL` or `SERVER/TOOL`).
        tool: String,
        /// Namespace to read.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// The tool's server, when the tool name alone is ambiguous.
        #[arg(long)]
        server: Option<String>,
        /// The publisher's hard timeout (default: the stored disclosure's,
        /// else the policy's); raised if p99 × 1.2 would reach it.
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
}

/// Runs a tools command.
pub async fn run(args: ToolsArgs) -> anyhow::Result<()> {
    let s = args.client.session().await?;
    match args.command {
        ToolsCommand::Import { file, ns, server } => {
            let tools = read_manifest(&file)?;
            let request = pb::ImportToolsRequest {
                namespace: ns,
                meta: s.meta(),
                server,
                tools,
                actor: s.actor()?,
            };
            import(&s, request).await
        }
        ToolsCommand::Latency { tool, ns, server } => {
            let (server, tool) = split_tool(server, tool);
            latency(&s, &ns, server, tool).await
        }
        ToolsCommand::Disclosure {
            tool,
            ns,
            server,
            timeout_ms,
        } => {
            let (server, tool) = split_tool(server, Some(tool));
            let tool = tool.unwrap_or_default();
            disclosure(&s, &ns, server, &tool, timeout_ms).await
        }
    }
}

/// `SERVER/TOOL` split in two; a plain `TOOL` keeps `--server`.
fn split_tool(server: Option<String>, tool: Option<String>) -> (Option<String>, Option<String>) {
    match tool.as_deref().and_then(|t| t.split_once('/')) {
        Some((s, t)) => (Some(s.to_owned()), Some(t.to_owned())),
        None => (server, tool),
    }
}

fn verdict_name(verdict: i32) -> &'static str {
    match pb::DisclosureVerdict::try_from(verdict) {
        Ok(pb::DisclosureVerdict::Accepted) => "accepted",
        Ok(pb::DisclosureVerdict::Invalid) => "invalid",
        Ok(pb::DisclosureVerdict::Stale) => "stale (treated as missing)",
        Ok(pb::DisclosureVerdict::Missing) => "missing",
        _ => "unknown",
    }
}

fn effect_text(effect: i32, derived: bool) -> String {
    let source = if derived {
        "from MCP hints"
    } else {
        "from policy"
    };
    format!("{} ({source})", effect_name(effect))
}

/// One problem as its line: `error p50_above_p95 at p50_ms: p50_ms 800 exceeds p95_ms 720`.
fn problem_line(p: &pb::DisclosureProblem) -> String {
    let severity = if p.error { "error" } else { "warning" };
    let at = if p.field.is_empty() {
        String::new()
    } else {
        format!(" at {}", p.field)
    };
    format!("{severity} {}{at}: {}", p.rule, p.message)
}

fn problem_json(p: &pb::DisclosureProblem) -> Value {
    let severity = if p.error { "error" } else { "warning" };
    json!({"rule": p.rule, "field": p.field, "severity": severity, "message": p.message})
}

fn import_json(ns: &str, server: &str, reply: &pb::ImportToolsResponse) -> Value {
    let tools: Vec<Value> = reply
        .tools
        .iter()
        .map(|t| {
            let verdict = verdict_name(t.verdict)
                .split(' ')
                .next()
                .unwrap_or("unknown");
            json!({"tool": t.tool, "verdict": verdict, "effect": effect_name(t.effect),
                   "effect_derived": t.effect_derived, "deadline_ms": t.deadline_ms,
                   "problems": t.problems.iter().map(problem_json).collect::<Vec<_>>()})
        })
        .collect();
    json!({"namespace": ns, "server": server, "revision": reply.revision, "tools": tools})
}

async fn import(s: &Session, request: pb::ImportToolsRequest) -> anyhow::Result<()> {
    let (ns, server) = (request.namespace.clone(), request.server.clone());
    let reply = rpc("tools import", s.tools().import(request)).await?;
    if s.json {
        outln!("{}", import_json(&ns, &server, &reply));
    } else {
        print_import(&ns, &server, &reply);
    }
    let invalid: Vec<&str> = reply
        .tools
        .iter()
        .filter(|t| t.verdict == pb::DisclosureVerdict::Invalid as i32)
        .map(|t| t.tool.as_str())
        .collect();
    if invalid.is_empty() {
        return Ok(());
    }
    let message = format!(
        "{} of {} disclosure blocks are invalid ({}); the other tools were imported",
        invalid.len(),
        reply.tools.len(),
        invalid.join(", ")
    );
    Err(Failure::bad_input(message).into())
}

fn print_import(ns: &str, server: &str, reply: &pb::ImportToolsResponse) {
    outln!(
        "imported {} tools of server {server} into namespace {ns} (revision {})",
        reply.tools.len(),
        reply.revision
    );
    let mut table = Table::new(&["TOOL", "DISCLOSURE", "DEADLINE", "EFFECT"]);
    for t in &reply.tools {
        table.row(vec![
            t.tool.clone(),
            verdict_name(t.verdict).to_owned(),
            or_dash(t.deadline_ms.map(|ms| format!("{ms} ms"))),
            effect_text(t.effect, t.effect_derived),
        ]);
    }
    table.print();
    for t in reply.tools.iter().filter(|t| !t.problems.is_empty()) {
        outln!();
        outln!("{}:", t.tool);
        for p in &t.problems {
            outln!("  {}", problem_line(p));
        }
    }
}

async fn list(
    s: &Session,
    ns: &str,
    server: Option<String>,
    tool: Option<String>,
) -> anyhow::Result<pb::ListToolsResponse> {
    // A page holds at most 2 MiB of tools; a namespace's imported and
    // observed tools fit in far fewer pages than this.
    const PAGES_MAX: usize = 256;
    let mut all: Option<pb::ListToolsResponse> = None;
    let mut page_token = String::new();
    for _ in 0..PAGES_MAX {
        let request = pb::ListToolsRequest {
            namespace: ns.to_owned(),
            meta: s.meta(),
            server: server.clone(),
            tool: tool.clone(),
            page_token: page_token.clone(),
        };
        let page = rpc("tools latency", s.tools().list(request)).await?;
        page_token.clone_from(&page.next_page_token);
        match &mut all {
            None => all = Some(page),
            Some(all) => all.tools.extend(page.tools),
        }
        if page_token.is_empty() {
            break;
        }
    }
    let mut all = all.unwrap_or_default();
    all.next_page_token = page_token;
    Ok(all)
}

/// `p50/p95/p99` of optional figures, `-` for each missing one.
fn triple(p50: Option<u64>, p95: Option<u64>, p99: Option<u64>) -> String {
    format!("{}/{}/{}", or_dash(p50), or_dash(p95), or_dash(p99))
}

fn latency_json(t: &pb::ToolLatency) -> Value {
    let observed = t.observed.unwrap_or_default();
    let disclosed = t.disclosed.as_ref().map(|d| {
        json!({"p50_ms": d.p50_ms, "p95_ms": d.p95_ms, "p99_ms": d.p99_ms,
               "sample_size": d.sample_size, "timeout_ms": d.timeout_ms})
    });
    json!({"server": t.server, "tool": t.tool, "imported": t.imported,
           "imported_at_ms": t.imported_at_ms, "imported_by": t.imported_by,
           "observed": {"sample_count": observed.sample_count, "p50_ms": observed.p50_ms,
                        "p95_ms": observed.p95_ms, "p99_ms": observed.p99_ms},
           "window_ms": t.window_ms, "disclosed": disclosed,
           "disclosure_fresh": t.disclosure_fresh, "deadline_ms": t.deadline_ms,
           "penalty_threshold_p95_ms": t.penalty_threshold_p95_ms, "penalized": t.penalized,
           "effect": effect_name(t.effect), "effect_derived": t.effect_derived})
}

async fn latency(
    s: &Session,
    ns: &str,
    server: Option<String>,
    tool: Option<String>,
) -> anyhow::Result<()> {
    let named = tool.clone();
    let reply = list(s, ns, server, tool).await?;
    if let (Some(tool), true) = (named, reply.tools.is_empty()) {
        let message = format!("tool {tool} is neither imported nor observed in namespace {ns}");
        return Err(Failure::not_found(message).into());
    }
    if s.json {
        let tools: Vec<Value> = reply.tools.iter().map(latency_json).collect();
        let out = json!({"namespace": ns, "revision": reply.revision,
                         "as_of_ms": reply.as_of_ms, "tools": tools});
        outln!("{out}");
        return Ok(());
    }
    let mut table = Table::new(&[
        "TOOL",
        "SAMPLES",
        "OBSERVED P50/P95/P99",
        "DISCLOSED P50/P95/P99",
        "P95 LIMIT",
        "PENALIZED",
    ]);
    for t in &reply.tools {
        let observed = t.observed.unwrap_or_default();
        let disclosed = t.disclosed.as_ref().map_or_else(
            || "-".to_owned(),
            |d| triple(Some(d.p50_ms), Some(d.p95_ms), Some(d.p99_ms)),
        );
        let limit = t.disclosed.as_ref().map(|_| t.penalty_threshold_p95_ms);
        table.row(vec![
            format!("{}/{}", t.server, t.tool),
            observed.sample_count.to_string(),
            triple(observed.p50_ms, observed.p95_ms, observed.p99_ms),
            disclosed,
            or_dash(limit),
            if t.penalized { "yes" } else { "no" }.to_owned(),
        ]);
    }
    table.print();
    Ok(())
}

/// The one server holding `tool`, or why there is not exactly one.
async fn server_of(s: &Session, ns: &str, tool: &str) -> anyhow::Result<String> {
    let reply = list(s, ns, None, Some(tool.to_owned())).await?;
    let servers: Vec<&str> = reply.tools.iter().map(|t| t.server.as_str()).collect();
    match servers.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => {
            let message = format!("tool {tool} is neither imported nor observed in namespace {ns}");
            Err(Failure::not_found(message).into())
        }
        many => {
            let message = format!(
                "tool {tool} exists on servers {}; pass --server or SERVER/TOOL",
                many.join(", ")
            );
            Err(Failure::bad_input(message).into())
        }
    }
}

async fn disclosure(
    s: &Session,
    ns: &str,
    server: Option<String>,
    tool: &str,
    timeout_ms: Option<u64>,
) -> anyhow::Result<()> {
    let server = match server {
        Some(server) => server,
        None => server_of(s, ns, tool).await?,
    };
    let request = pb::EmitDisclosureRequest {
        namespace: ns.to_owned(),
        meta: s.meta(),
        server: server.clone(),
        tool: tool.to_owned(),
        timeout_ms,
    };
    let reply = rpc("tools disclosure", s.tools().emit_disclosure(request)).await?;
    let block: Value = serde_json::from_str(&reply.block_json)
        .map_err(|e| Failure::refused(format!("the cluster sent a block that is not JSON: {e}")))?;
    if s.json {
        let warnings: Vec<Value> = reply.warnings.iter().map(problem_json).collect();
        let out = json!({"server": server, "tool": tool, "window_ms": reply.window_ms,
                         "latency_disclosure": block, "warnings": warnings});
        outln!("{out}");
        return Ok(());
    }
    outln!("{}", reply.block_json);
    for w in &reply.warnings {
        eprintln!("{}", problem_line(w));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_may_name_its_server() {
        assert_eq!(
            split_tool(None, Some("docs/search".into())),
            (Some("docs".into()), Some("search".into()))
        );
        assert_eq!(
            split_tool(Some("docs".into()), Some("search".into())),
            (Some("docs".into()), Some("search".into()))
        );
        assert_eq!(split_tool(None, None), (None, None));
    }

    #[test]
    fn a_problem_reads_as_severity_rule_field_and_message() {
        let p = pb::DisclosureProblem {
            rule: "p50_above_p95".into(),
            field: "p50_ms".into(),
            message: "p50_ms 800 exceeds p95_ms 720".into(),
            error: true,
        };
        assert_eq!(
            problem_line(&p),
            "error p50_above_p95 at p50_ms: p50_ms 800 exceeds p95_ms 720"
        );
        assert_eq!(effect_text(1, true), "read_only (from MCP hints)");
        assert_eq!(effect_text(3, false), "idempotent_write (from policy)");
    }
}
