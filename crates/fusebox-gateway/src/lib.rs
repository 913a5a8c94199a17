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
//! It also serves an aggregated endpoint at `/mcp` that merges every
//! upstream (see [`proxy`]), the same on stdio for an agent that launches
//! its MCP servers as commands ([`serve_stdio`]), `/metrics` (the
//! gateway's counters, [`metrics`]) and `/healthz` (whether calls are
//! decided with a fresh view of the cluster or degraded to
//! `on_partition`, and which upstreams are connected).
//!
//! At every new upstream session the gateway imports the upstream's tool
//! annotations (and latency disclosures in a tool's `_meta`) into the
//! cluster, as `fusebox tools import` does, so a tool's effect class comes
//! from the namespace's policy, else from its `readOnlyHint`,
//! `destructiveHint` and `idempotentHint`.

#![deny(missing_docs)]

pub mod bench;
pub mod config;
pub mod gate;
mod import;
pub mod metrics;
pub mod proxy;
pub mod upstream;

use axum::serve::ListenerExt as _;
use config::GatewayConfig;
use fusebox_client::{Client, ClientConfig};
use gate::Gate;
use import::Importer;
use proxy::{Naming, Proxy};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt as _;
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
    /// The stdio session with the agent could not begin.
    #[error("stdio: {0}")]
    Stdio(String),
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
    /// The address agents connect to (`None` when serving stdio only).
    pub addr: Option<SocketAddr>,
    stop: CancellationToken,
    served: Option<tokio::task::JoinHandle<()>>,
    gate: Arc<Gate>,
    upstreams: Vec<Arc<Upstream>>,
    naming: Naming,
}

impl RunningGateway {
    /// Stops serving, closes the upstream sessions and flushes the outcome
    /// reports.
    pub async fn shutdown(self) {
        self.stop.cancel();
        if let Some(served) = self.served {
            let _ = served.await;
        }
        for upstream in &self.upstreams {
            upstream.close().await;
        }
        self.gate.client().flush_reports();
    }

    /// The proxy merging every upstream (the aggregated endpoint's).
    pub fn aggregated(&self) -> Proxy {
        Proxy::aggregated(
            self.upstreams.clone(),
            self.gate.clone(),
            self.naming.clone(),
        )
    }
}

/// Connects to the cluster and the upstreams and serves: HTTP on `listen`
/// when it is set (always, unless the caller serves stdio).
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
    let importer = Importer::new(
        config.cluster.clone(),
        config.namespace.clone(),
        token.as_deref(),
    )
    .map_err(GatewayError::Config)?;
    let mut upstreams = Vec::with_capacity(config.upstreams.len());
    for u in &config.upstreams {
        let upstream = Arc::new(Upstream::new(u, Some(importer.clone()))?);
        // A first session now, so the tools are imported before the first
        // call; an upstream that is down is connected on demand later.
        if let Err(e) = upstream.connect_now().await {
            tracing::warn!(upstream = %upstream.name, error = %e, "upstream not reachable at start; it is tried again on demand");
        }
        upstreams.push(upstream);
    }
    if !client.wait_fresh(FRESH_VIEW_WAIT).await {
        tracing::warn!(
            "no fresh view of the namespace yet: calls follow on_partition until it comes"
        );
    }
    let gate = Arc::new(Gate::new(client, Duration::from_millis(config.budget_ms)));
    let naming = Naming {
        prefix: config.tool_prefix,
        separator: config.tool_prefix_separator.clone(),
    };
    let stop = CancellationToken::new();
    let (addr, served) = match config.listen {
        Some(listen) => {
            let router = router(&upstreams, &gate, &naming, listen, &stop);
            let listener =
                tokio::net::TcpListener::bind(listen)
                    .await
                    .map_err(|e| GatewayError::Listen {
                        addr: listen,
                        message: e.to_string(),
                    })?;
            let addr = listener.local_addr().map_err(|e| GatewayError::Listen {
                addr: listen,
                message: e.to_string(),
            })?;
            // Nagle off: an SSE answer is written in small pieces, and on a
            // connection the agent keeps, the last one would wait for a
            // delayed ACK (40 ms a call, measured with a pooled client).
            let listener = listener.tap_io(|stream| {
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY not set");
                }
            });
            let until = stop.clone();
            let served = tokio::spawn(async move {
                let serving =
                    axum::serve(listener, router).with_graceful_shutdown(until.cancelled_owned());
                if let Err(e) = serving.await {
                    tracing::error!(error = %e, "the gateway's listener failed");
                }
            });
            tracing::info!(%addr, upstreams = upstreams.len(), "gateway serving");
            (Some(addr), Some(served))
        }
        None => (None, None),
    };
    Ok(RunningGateway {
        addr,
        stop,
        served,
        gate,
        upstreams,
        naming,
    })
}

/// The HTTP routes: one endpoint per upstream, the aggregated one,
/// `/metrics` and `/healthz`.
fn router(
    upstreams: &[Arc<Upstream>],
    gate: &Arc<Gate>,
    naming: &Naming,
    listen: SocketAddr,
    stop: &CancellationToken,
) -> axum::Router {
    let mcp = |proxy: Proxy| {
        let mut http =
            StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token());
        if !listen.ip().is_loopback() {
            // The Host check guards browsers on this machine against DNS
            // rebinding; beyond loopback the agents name the host.
            http = http.disable_allowed_hosts();
        }
        let service: StreamableHttpService<Proxy, LocalSessionManager> =
            StreamableHttpService::new(move || Ok(proxy.clone()), Default::default(), http);
        service
    };
    let mut router = axum::Router::new();
    for upstream in upstreams {
        let proxy = Proxy::single(upstream.clone(), gate.clone());
        router = router.nest_service(&format!("/servers/{}/mcp", upstream.name), mcp(proxy));
    }
    let all = Proxy::aggregated(upstreams.to_vec(), gate.clone(), naming.clone());
    router = router.nest_service("/mcp", mcp(all));
    let (metrics_gate, health_gate) = (gate.clone(), gate.clone());
    let health_upstreams = upstreams.to_vec();
    router
        .route(
            "/metrics",
            axum::routing::get(move || {
                let gate = metrics_gate.clone();
                async move { metrics_text(&gate) }
            }),
        )
        .route(
            "/healthz",
            axum::routing::get(move || {
                let (gate, upstreams) = (health_gate.clone(), health_upstreams.clone());
                async move { health_text(&gate, &upstreams) }
            }),
        )
}

/// The gateway's counters, with its view of the cluster as of now.
fn metrics_text(gate: &Gate) -> String {
    let view = gate.client().view_status();
    let age = view.age_ms.map(Duration::from_millis);
    gate.metrics().set_view(view.fresh, age);
    gate.metrics().render()
}

/// `/healthz`: the gateway serves; whether its decisions are degraded and
/// which upstreams have a session. Always 200 while serving: a degraded
/// gateway still answers, by `on_partition`.
fn health_text(gate: &Gate, upstreams: &[Arc<Upstream>]) -> String {
    let view = gate.client().view_status();
    let mut connected = serde_json::Map::new();
    for upstream in upstreams {
        let state = match upstream.connected() {
            Some(true) => "connected",
            Some(false) => "disconnected",
            None => "connecting",
        };
        connected.insert(upstream.name.clone(), state.into());
    }
    let health = serde_json::json!({
        "status": if view.fresh { "ok" } else { "degraded" },
        "detail": if view.fresh {
            "calls are decided with a fresh view of the cluster".to_owned()
        } else {
            let heard = view.age_ms.map_or_else(
                || "never heard from".to_owned(),
                |ms| format!("last heard {ms} ms ago"),
            );
            format!("no fresh view of the cluster ({heard}): each breaker's on_partition decides")
        },
        "view_age_ms": view.age_ms,
        "upstreams": connected,
    });
    format!("{health}\n")
}

/// Runs the gateway until `stop` resolves.
pub async fn run(
    config: GatewayConfig,
    stop: impl Future<Output = ()>,
) -> Result<(), GatewayError> {
    if config.listen.is_none() {
        return Err(GatewayError::Config(
            "listen: give the address agents connect to (or serve one agent with --stdio)".into(),
        ));
    }
    let gateway = start(config).await?;
    stop.await;
    tracing::info!("gateway shutting down");
    gateway.shutdown().await;
    Ok(())
}

/// Serves the aggregated proxy to one agent on stdin and stdout (also HTTP
/// on `listen` when it is set) until the agent closes stdin or `stop`
/// resolves. Logs must go to stderr.
pub async fn serve_stdio(
    config: GatewayConfig,
    stop: impl Future<Output = ()>,
) -> Result<(), GatewayError> {
    let gateway = start(config).await?;
    let session = gateway
        .aggregated()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| GatewayError::Stdio(e.to_string()))?;
    let cancel = session.cancellation_token();
    tokio::select! {
        ended = session.waiting() => {
            tracing::info!(reason = ?ended, "the agent closed stdio");
        }
        () = stop => {
            cancel.cancel();
        }
    }
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
