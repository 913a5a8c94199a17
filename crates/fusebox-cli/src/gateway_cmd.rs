//! `fusebox gateway`: the MCP gateway ([`fusebox_gateway`]) in front of an
//! agent's MCP servers, until SIGTERM or Ctrl-C.

use crate::failure::Failure;
use anyhow::Context as _;
use clap::Args;
use fusebox_gateway::config::GatewayConfig;
use std::path::PathBuf;

/// Flags of `fusebox gateway`.
#[derive(Args, Debug)]
pub struct GatewayArgs {
    /// The gateway's TOML file: listen address, namespace, cluster, upstreams
    /// (docs/gateway.md).
    #[arg(long, env = "FUSEBOX_GATEWAY_CONFIG")]
    config: PathBuf,
    /// Serve one agent on stdin and stdout (the aggregated endpoint), for
    /// an agent that launches its MCP servers as commands; HTTP is served
    /// too when the file sets `listen`.
    #[arg(long)]
    stdio: bool,
    /// Log as JSON lines.
    #[arg(long, env = "FUSEBOX_LOG_JSON")]
    log_json: bool,
}

/// Runs the gateway until a termination signal.
/// Logs go to stderr: on stdio, stdout is the agent's MCP session.
pub async fn run(args: GatewayArgs) -> anyhow::Result<()> {
    crate::serve::init_tracing_to(args.log_json, crate::serve::LogTo::Stderr);
    let config = GatewayConfig::load(&args.config).map_err(Failure::bad_input)?;
    let served = if args.stdio {
        fusebox_gateway::serve_stdio(config, crate::serve::terminated()).await
    } else {
        fusebox_gateway::run(config, crate::serve::terminated()).await
    };
    served.context("the gateway stopped")
}
