//! `fusebox serve`: run one node until SIGTERM or Ctrl-C.

use crate::out::outln;
use anyhow::{bail, Context};
use clap::Args;
use fusebox_server::node::config::{ApiTls, PeerTls};
use fusebox_server::node::{start_in, NodeConfig, NodeEnv};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Flags of `fusebox serve`; a config file holds the same settings, and
/// each flag can also come from its `FUSEBOX_*` environment variable
/// (flags win over variables, both over the file).
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// A TOML file with the node's settings (flags override it).
    #[arg(long, env = "FUSEBOX_CONFIG")]
    config: Option<PathBuf>,
    /// This node's id.
    #[arg(long, env = "FUSEBOX_ID", conflicts_with = "id_from_hostname")]
    id: Option<u64>,
    /// Take the id from the host name's trailing ordinal plus one
    /// (`fusebox-0` is node 1), as a Kubernetes StatefulSet names its pods.
    /// A node whose id is not among the initial peers waits to be added.
    #[arg(long, env = "FUSEBOX_ID_FROM_HOSTNAME")]
    id_from_hostname: bool,
    /// Where the gRPC API listens.
    #[arg(long, env = "FUSEBOX_LISTEN")]
    listen: Option<SocketAddr>,
    /// Where the Raft transport listens, apart from clients (needed for TLS).
    #[arg(long, env = "FUSEBOX_PEER_LISTEN")]
    peer_listen: Option<SocketAddr>,
    /// How the other members reach this node, `HOST:PORT` or
    /// `API_HOST:PORT@PEER_HOST:PORT`, when that is not where it listens
    /// (a container listening on 0.0.0.0 behind a DNS name).
    #[arg(long, env = "FUSEBOX_ADVERTISE")]
    advertise: Option<String>,
    /// The initial members: `1=HOST:PORT,...`, or with peer listeners
    /// `1=API_HOST:PORT@PEER_HOST:PORT,...`.
    #[arg(long, env = "FUSEBOX_PEERS")]
    peers: Option<String>,
    /// The data directory.
    #[arg(long, env = "FUSEBOX_DATA_DIR")]
    data: Option<PathBuf>,
    /// Where `/metrics`, `/healthz` and `/readyz` listen.
    #[arg(long, env = "FUSEBOX_HTTP")]
    http: Option<SocketAddr>,
    /// The cluster's name.
    #[arg(long, env = "FUSEBOX_CLUSTER_ID")]
    cluster_id: Option<String>,
    /// Join an existing cluster instead of forming one (wait to be added).
    #[arg(long, env = "FUSEBOX_JOIN")]
    join: bool,
    /// Log as JSON lines.
    #[arg(long, env = "FUSEBOX_LOG_JSON")]
    log_json: bool,
    /// The API's TLS certificate (PEM); with --tls-key and --tls-ca.
    #[arg(long, env = "FUSEBOX_API_TLS_CERT", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// The API certificate's private key (PEM).
    #[arg(long, env = "FUSEBOX_API_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The CA trusted for client certificates and other members' API
    /// certificates (PEM).
    #[arg(long, env = "FUSEBOX_API_TLS_CA", requires = "tls_cert")]
    tls_ca: Option<PathBuf>,
    /// This member's peer certificate (PEM, naming `fusebox://node/ID`);
    /// with --peer-key and --peer-ca.
    #[arg(long, env = "FUSEBOX_PEER_TLS_CERT", requires_all = ["peer_key", "peer_ca"])]
    peer_cert: Option<PathBuf>,
    /// The peer certificate's private key (PEM).
    #[arg(long, env = "FUSEBOX_PEER_TLS_KEY", requires = "peer_cert")]
    peer_key: Option<PathBuf>,
    /// The cluster's CA, which signed every member's peer certificate (PEM).
    #[arg(long, env = "FUSEBOX_PEER_TLS_CA", requires = "peer_cert")]
    peer_ca: Option<PathBuf>,
    /// Serve a non-loopback address without TLS or auth (a warning is
    /// logged at every start).
    #[arg(long, env = "FUSEBOX_INSECURE")]
    insecure: bool,
    /// Require every caller to authenticate (a token or a client
    /// certificate naming a principal), from the first request.
    #[arg(long, env = "FUSEBOX_AUTH")]
    auth: bool,
    /// The first admin token's file (created with a fresh token if
    /// missing): while the cluster has no admin, the leader issues it as
    /// principal `admin` and switches enforcement on. Implies --auth.
    #[arg(long, env = "FUSEBOX_INIT_AUTH", value_name = "FILE")]
    init_auth: Option<PathBuf>,
    /// Fault injection, for tests only (tests/nemesis): a file holding a
    /// signed offset in ms added to this node's wall clock, re-read every
    /// 100 ms.
    #[arg(
        long,
        env = "FUSEBOX_FAULT_CLOCK_OFFSET_FILE",
        value_name = "FILE",
        hide = true
    )]
    fault_clock_offset_file: Option<PathBuf>,
    /// Fault injection, for tests only (tests/nemesis): a real bug to have,
    /// so a test can show its checker catches it. `skip-read-linearizer`:
    /// answer linearizable reads from local state without confirming
    /// leadership, so a deposed leader serves stale records.
    #[arg(
        long,
        env = "FUSEBOX_FAULT_INJECT_BUG",
        value_name = "BUG",
        hide = true
    )]
    fault_inject_bug: Option<InjectedBug>,
}

/// The bugs `--fault-inject-bug` can give a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InjectedBug {
    /// Linearizable reads served from local state without a leadership check.
    SkipReadLinearizer,
}

/// The node id a host name gives: its trailing `-N` plus one.
fn id_of_hostname(host: &str) -> Result<u64, String> {
    let ordinal = host
        .rsplit_once('-')
        .map(|(_, n)| n)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| format!("host name {host:?} does not end in -N (a pod ordinal)"))?;
    ordinal
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| format!("host name {host:?}: ordinal out of range"))
}

/// This machine's host name: `HOSTNAME` if set (containers set it), else
/// the kernel's.
fn hostname() -> anyhow::Result<String> {
    if let Some(name) = std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty()) {
        return Ok(name);
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("reading the host name (/proc/sys/kernel/hostname)")?;
    Ok(name.trim().to_owned())
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
    if args.id_from_hostname {
        config.id = id_of_hostname(&hostname()?).map_err(anyhow::Error::msg)?;
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
        let me = match (&args.advertise, config.peer_listen) {
            (Some(advertised), _) => advertised.clone(),
            (None, Some(peer)) => format!("{}@{peer}", config.listen),
            (None, None) => config.listen.to_string(),
        };
        config.peers = [(config.id, me)].into();
    }
    if let Some(peers) = &args.peers {
        config.peers = NodeConfig::parse_peers(peers).map_err(anyhow::Error::msg)?;
    }
    if let Some(advertise) = &args.advertise {
        config.advertise = Some(advertise.clone());
    }
    if args.id_from_hostname && !config.peers.contains_key(&config.id) {
        // A pod past the founding members (a scaled-out StatefulSet).
        config.join = true;
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

/// Where log lines are written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogTo {
    Stdout,
    Stderr,
}

pub(crate) fn init_tracing(json: bool) {
    init_tracing_to(json, LogTo::Stdout);
}

pub(crate) fn init_tracing_to(json: bool, to: LogTo) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    // Colours only for a terminal, and not there if `NO_COLOR` is set: a
    // log file or a collector gets plain text.
    let terminal = match to {
        LogTo::Stdout => std::io::stdout().is_terminal(),
        LogTo::Stderr => std::io::stderr().is_terminal(),
    };
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(terminal && !no_color);
    match (json, to) {
        (true, LogTo::Stdout) => builder.json().init(),
        (false, LogTo::Stdout) => builder.init(),
        (true, LogTo::Stderr) => builder.json().with_writer(std::io::stderr).init(),
        (false, LogTo::Stderr) => builder.with_writer(std::io::stderr).init(),
    }
}

pub(crate) async fn terminated() {
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
    let mut env = match &args.fault_clock_offset_file {
        Some(file) => {
            tracing::warn!(file = %file.display(), "this node's clock is offset by a test's file");
            crate::fault_clock::env_with_offset_file(file.clone())
                .context("starting the fault clock")?
        }
        None => NodeEnv::system(),
    };
    if let Some(bug) = args.fault_inject_bug {
        tracing::warn!(?bug, "this node has a bug injected on purpose, for a test");
        match bug {
            InjectedBug::SkipReadLinearizer => env.bugs.skip_read_linearizer = true,
        }
    }
    let node = start_in(config.clone(), env)
        .await
        .context("starting the node")?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn config(flags: &[&str]) -> anyhow::Result<NodeConfig> {
        let parsed = Serve::try_parse_from(std::iter::once("serve").chain(flags.iter().copied()))?;
        config_of(&parsed.args)
    }

    #[test]
    fn a_pod_ordinal_gives_the_node_id() {
        assert_eq!(id_of_hostname("fusebox-0"), Ok(1));
        assert_eq!(id_of_hostname("my-fusebox-12"), Ok(13));
        assert!(id_of_hostname("fusebox").is_err());
        assert!(id_of_hostname("fusebox-").is_err());
        assert!(id_of_hostname("fusebox-1a").is_err());
        assert!(id_of_hostname("fusebox-99999999999999999999").is_err());
    }

    #[test]
    fn a_node_listening_everywhere_is_reached_at_its_advertised_name() {
        let config = config(&[
            "--id",
            "2",
            "--listen",
            "0.0.0.0:7600",
            "--advertise",
            "fusebox-2:7600",
            "--insecure",
        ])
        .unwrap();
        assert_eq!(
            config.peers.get(&2).map(String::as_str),
            Some("fusebox-2:7600")
        );
        assert_eq!(config.advertised().unwrap().addr, "fusebox-2:7600");
    }

    #[test]
    fn a_node_missing_from_the_peers_is_refused_unless_it_joins() {
        let peers = "1=a:7600,2=b:7600,3=c:7600";
        let err = config(&["--id", "4", "--peers", peers, "--listen", "127.0.0.1:7600"]);
        assert!(err.unwrap_err().to_string().contains("peers must include"));
        let joining = config(&[
            "--id",
            "4",
            "--peers",
            peers,
            "--listen",
            "127.0.0.1:7600",
            "--join",
        ])
        .unwrap();
        assert!(joining.join);
    }

    #[test]
    fn the_id_comes_from_a_flag_or_the_host_name_not_both() {
        assert!(config(&["--id", "1", "--id-from-hostname"]).is_err());
    }
}
