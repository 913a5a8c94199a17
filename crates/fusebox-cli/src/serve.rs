//! `fusebox serve`: run one node until SIGTERM or Ctrl-C.

use crate::out::outln;
use anyhow::{bail, Context};
use clap::Args;
use fusebox_server::node::config::{ApiTls, PeerTls};
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
    /// Where the gRPC API listens.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Where the Raft transport listens, apart from clients (needed for TLS).
    #[arg(long)]
    peer_listen: Option<SocketAddr>,
    /// The initial members: `1=HOST:PORT,...`, or with peer listeners
    /// `1=API_HOST:PORT@PEER_HOST:PORT,...`.
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
    /// The API's TLS certificate (PEM); with --tls-key and --tls-ca.
    #[arg(long, requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// The API certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The CA trusted for client certificates and other members' API
    /// certificates (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_ca: Option<PathBuf>,
    /// This member's peer certificate (PEM, naming `fusebox://node/ID`);
    /// with --peer-key and --peer-ca.
    #[arg(long, requires_all = ["peer_key", "peer_ca"])]
    peer_cert: Option<PathBuf>,
    /// The peer certificate's private key (PEM).
    #[arg(long, requires = "peer_cert")]
    peer_key: Option<PathBuf>,
    /// The cluster's CA, which signed every member's peer certificate (PEM).
    #[arg(long, requires = "peer_cert")]
    peer_ca: Option<PathBuf>,
    /// Serve a non-loopback address without TLS or auth (a warning is
    /// logged at every start).
    #[arg(long)]
    insecure: bool,
    /// Require every caller to authenticate (a token or a client
    /// certificate naming a principal), from the first request.
    #[arg(long)]
    auth: bool,
    /// The first admin token's file (created with a fresh token if
    /// missing): while the cluster has no admin, the leader issues it as
    /// principal `admin` and switches enforcement on. Implies --auth.
    #[arg(long, value_name = "FILE")]
    init_auth: Option<PathBuf>,
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
    if let Some(peer) = args.peer_listen {
        config.peer_listen = Some(peer);
    }
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if (args.listen.is_some() || args.peer_listen.is_some())
        && args.peers.is_none()
        && args.config.is_none()
    {
        let me = match config.peer_listen {
            Some(peer) => format!("{}@{peer}", config.listen),
            None => config.listen.to_string(),
        };
        config.peers = [(config.id, me)].into();
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
    config.insecure |= args.insecure;
    config.auth |= args.auth;
    if let Some(file) = &args.init_auth {
        config.init_auth = Some(file.clone());
    }
    if let (Some(cert), Some(key), Some(ca)) = (&args.tls_cert, &args.tls_key, &args.tls_ca) {
        config.tls = Some(ApiTls {
            cert: cert.clone(),
            key: key.clone(),
            ca: ca.clone(),
        });
    }
    if let (Some(cert), Some(key), Some(ca)) = (&args.peer_cert, &args.peer_key, &args.peer_ca) {
        config.peer_tls = Some(PeerTls {
            cert: cert.clone(),
            key: key.clone(),
            ca: ca.clone(),
        });
    }
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
        "fusebox node {} serving gRPC on {}{}{}{}{} with data in {}",
        config.id,
        node.grpc_addr,
        if config.tls.is_some() { " (TLS)" } else { "" },
        node.peer_addr
            .map(|a| format!(", peers on {a}"))
            .unwrap_or_default(),
        if config.peer_tls.is_some() {
            " (mutual TLS)"
        } else {
            ""
        },
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
