//! `fusebox gateway`: an MCP proxy that puts the Fusebox gate in front of an
//! agent's MCP servers, so a fleet adopts Fusebox by changing a URL instead
//! of its code.
//!
//! One gateway process is one replica of the fleet (one SDK client). For
//! each configured upstream it serves Streamable HTTP at
//! `/servers/NAME/mcp`: the agent points that server's URL there and keeps
//! the tool names it knows. Everything passes through to the upstream
//! unchanged (`initialize`, `tools/list`, resources, prompts) except
//! `tools/call`, which goes through the gate ([`gate`]): the fleet's
//! breaker admits or refuses it (a refusal is an `isError` result with the
//! SDK's one-line message for the model), a deadline bounds it (the
//! upstream is sent `notifications/cancelled` when it expires), its outcome
//! is reported, read-only tools are retried within bounds, and writes are
//! guarded by the idempotency ledger, keyed by the agent's intent id in
//! `_meta` ([`gate::INTENT_META_KEY`]) and the canonical arguments.
//!
//! At start the gateway imports each upstream's tool annotations into the
//! cluster (as `fusebox tools import` does), so a tool's effect class comes
//! from the namespace's policy, else from its `readOnlyHint`,
//! `destructiveHint` and `idempotentHint`.
//!
//! Not built yet (issue 17): the aggregated endpoint, stdio for agents,
//! latency disclosures from tool metadata, progress pass-through, upstream
//! reconnects, the gateway's own metrics.

#![deny(missing_docs)]

pub mod config;
pub mod gate;
mod import;
pub mod proxy;
pub mod upstream;

use config::GatewayConfig;
use fusebox_client::{Client, ClientConfig};
use gate::Gate;
use proxy::Proxy;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use upstream::Upstream;

/// How long the gateway waits at start for a fresh view of the namespace
/// before serving anyway (calls are then decided by `on_partition`).
const FRESH_VIEW_WAIT: Duration = Duration::from_secs(10);

/// Why the gateway could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The configuration is wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// The cluster client could not be made.
    #[error("cluster: {0}")]
    Cluster(String),
    /// An upstream could not be reached or misbehaved.
    #[error("upstream {name}: {message}")]
    Upstream {
        /// The upstream's configured name.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// The listener failed.
    #[error("listening on {addr}: {message}")]
    Listen {
        /// Where.
        addr: SocketAddr,
        /// What went wrong.
        message: String,
    },
}

/// A started gateway: where it listens, and how to stop it.
pub struct RunningGateway {
    /// The address agents connect to.
    pub addr: SocketAddr,
    stop: CancellationToken,
    served: tokio::task::JoinHandle<()>,
    gate: Arc<Gate>,
    _upstreams: Vec<Arc<Upstream>>,
}

impl RunningGateway {
    /// Stops serving and closes the cluster client.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.served.await;
        self.gate.client().flush_reports();
    }
}

/// Connects to the cluster and the upstreams, imports the upstreams' tool
/// annotations, and serves.
pub async fn start(config: GatewayConfig) -> Result<RunningGateway, GatewayError> {
    config.validate().map_err(GatewayError::Config)?;
    // HTTPS upstreams use rustls with ring (decision 0007); installing it
    // twice (a second gateway in one process) is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let token = match &config.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| GatewayError::Config(format!("token_file {}: {e}", path.display())))?
                .trim()
                .to_owned(),
        ),
        None => None,
    };
    let replica = match &config.replica_id {
        Some(id) => id.clone(),
        None => hostname(),
    };
    let mut client_config = ClientConfig::new(config.cluster.clone(), &config.namespace, &replica)
        .map_err(|e| GatewayError::Config(e.model_message()))?;
    client_config.token = token.clone();
    let client =
        Client::connect(client_config).map_err(|e| GatewayError::Cluster(e.model_message()))?;
    let mut upstreams = Vec::with_capacity(config.upstreams.len());
    for u in &config.upstreams {
        let upstream = Arc::new(Upstream::connect(u).await?);
        let tools = upstream.tools().await?;
        if let Err(e) = import::hints(&config, token.as_deref(), &upstream.name, &tools).await {
            tracing::warn!(upstream = %upstream.name, error = %e, "tool annotations not imported; effect classes come from the policy alone");
        }
        tracing::info!(upstream = %upstream.name, tools = tools.len(), "upstream connected");
        upstreams.push(upstream);
    }
    if !client.wait_fresh(FRESH_VIEW_WAIT).await {
        tracing::warn!(
            "no fresh view of the namespace yet: calls follow on_partition until it comes"
        );
    }
    let gate = Arc::new(Gate::new(client, Duration::from_millis(config.budget_ms)));
    let stop = CancellationToken::new();
    let mut router = axum::Router::new();
    for upstream in &upstreams {
        let proxy = Proxy::new(upstream.clone(), gate.clone());
        let mut http =
            StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token());
        if !config.listen.ip().is_loopback() {
            // The Host check guards browsers on this machine against DNS
            // rebinding; beyond loopback the agents name the host.
            http = http.disable_allowed_hosts();
        }
        let service: StreamableHttpService<Proxy, LocalSessionManager> =
            StreamableHttpService::new(move || Ok(proxy.clone()), Default::default(), http);
        router = router.nest_service(&format!("/servers/{}/mcp", upstream.name), service);
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| GatewayError::Listen {
            addr: config.listen,
            message: e.to_string(),
        })?;
    let addr = listener.local_addr().map_err(|e| GatewayError::Listen {
        addr: config.listen,
        message: e.to_string(),
    })?;
    let until = stop.clone();
    let served = tokio::spawn(async move {
        let serving = axum::serve(listener, router).with_graceful_shutdown(until.cancelled_owned());
        if let Err(e) = serving.await {
            tracing::error!(error = %e, "the gateway's listener failed");
        }
    });
    tracing::info!(%addr, upstreams = upstreams.len(), "gateway serving");
    Ok(RunningGateway {
        addr,
        stop,
        served,
        gate,
        _upstreams: upstreams,
    })
}

/// Runs the gateway until `stop` resolves.
pub async fn run(
    config: GatewayConfig,
    stop: impl Future<Output = ()>,
) -> Result<(), GatewayError> {
    let gateway = start(config).await?;
    stop.await;
    tracing::info!("gateway shutting down");
    gateway.shutdown().await;
    Ok(())
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "gateway".to_owned())
}
