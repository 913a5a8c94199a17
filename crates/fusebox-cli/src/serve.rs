//! `fusebox serve`: run one node until SIGTERM or Ctrl-C.

use crate::out::outln;
use anyhow::{bail, Context};
use clap::Args;
use fusebox_server::node::{start, NodeConfig};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Flags of `fusebox serve`; a config file holds the same settings.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// A TOML file with the node's settings (flags override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// This node's id.
    #[arg(long)]
    id: Option<u64>,
    /// Where gRPC listens.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The initial members: `1=HOST:PORT,2=HOST:PORT,...`.
    #[arg(long)]
    peers: Option<String>,
    /// The data directory.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where `/metrics`, `/healthz` and `/readyz` listen.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// The cluster's name.
    #[arg(long)]
    cluster_id: Option<String>,
    /// Join an existing cluster instead of forming one (wait to be added).
    #[arg(long)]
    join: bool,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

fn config_of(args: &ServeArgs) -> anyhow::Result<NodeConfig> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => NodeConfig::single_node(),
    };
    if let Some(id) = args.id {
        config.id = id;
    }
    if let Some(listen) = args.listen {
        config.listen = listen;
        if args.peers.is_none() && args.config.is_none() {
            config.peers = [(config.id, listen.to_string())].into();
        }
    }
    if let Some(peers) = &args.peers {
        config.peers = NodeConfig::parse_peers(peers).map_err(anyhow::Error::msg)?;
    }
    if let Some(data) = &args.data {
        config.data_dir = data.clone();
    }
    if args.http.is_some() || args.listen.is_some() || args.peers.is_some() {
        // The default metrics port belongs to the embedded default only.
        config.http = args.http;
    }
    if let Some(id) = &args.cluster_id {
        config.cluster_id = id.clone();
    }
    config.join |= args.join;
    if let Err(problem) = config.validate() {
        bail!("invalid configuration: {problem}");
    }
    Ok(config)
}

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Runs the node until a termination signal, then shuts down gracefully.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    init_tracing(args.log_json);
    let config = config_of(&args)?;
    let node = start(config.clone()).await.context("starting the node")?;
    outln!(
        "fusebox node {} serving gRPC on {}{} with data in {}",
        config.id,
        node.grpc_addr,
        node.http_addr
            .map(|a| format!(", metrics on http://{a}/metrics"))
            .unwrap_or_default(),
        config.data_dir.display()
    );
    tokio::select! {
        () = terminated() => {
            tracing::info!("shutting down");
            node.shutdown().await;
            Ok(())
        }
        fatal = node.raft_stopped() => {
            tracing::error!(error = %fatal, "raft stopped on this node; exiting");
            node.shutdown().await;
            anyhow::bail!("raft stopped on this node: {fatal}")
        }
    }
}
