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
    /// Log as JSON lines.
    #[arg(long, env = "FUSEBOX_LOG_JSON")]
    log_json: bool,
}

/// Runs the gateway until a termination signal.
pub async fn run(args: GatewayArgs) -> anyhow::Result<()> {
    crate::serve::init_tracing(args.log_json);
    let config = GatewayConfig::load(&args.config).map_err(Failure::bad_input)?;
    fusebox_gateway::run(config, crate::serve::terminated())
        .await
        .context("the gateway stopped")
}
