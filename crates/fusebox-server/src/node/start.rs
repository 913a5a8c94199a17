//! Starting a node: storage, Raft, the gRPC server, the HTTP endpoints and
//! the leader's background duties.

use super::backend::RaftBackend;
use super::cluster::ClusterService;
use super::coalescer::{LedgerCoalescer, ReportCoalescer};
use super::config::NodeConfig;
use super::contact::LeaderContact;
use super::env::NodeEnv;
use super::incoming::{incoming, Connections};
use super::init_auth;
use super::observer::Observer;
use crate::api::{AuthService, Forwarder, Gateway, Services};
use crate::auth::{Guard, GuardLayer, PublishedAuth};
use crate::backend::Backend;
use crate::limits::{
    CENSUS_PERIOD_MS, CONNECTION_STREAMS_MAX, INSTALL_SNAPSHOT_TIMEOUT_MS,
    LEADER_CONTACT_ELECTIONS, LEDGER_CENSUS_MAX, METRICS_REFRESH_PERIOD_MS, PURGE_BATCH_ENTRIES,
    RAFT_ALIVE_CHECK_PERIOD_MS, RAFT_ALIVE_TIMEOUT_MS, RAFT_PAYLOAD_BYTES_MAX,
    SERVER_PING_INTERVAL_MS, SERVER_PING_TIMEOUT_MS, SHUTDOWN_TASK_WAIT_MS,
    SNAPSHOT_CHECK_PERIOD_MS, SNAPSHOT_SPACING_LEDGER_DIVISOR,
};
use crate::metrics::{self, Metrics};
use crate::raft::network::Network;
use crate::raft::service::RaftService;
use crate::watch::WatchHub;
use fusebox_core::machine::Command;
use fusebox_proto::net::Listener;
use fusebox_proto::tls::{
    ClientCerts, ClientTlsFiles, ServerTlsFiles, TlsAcceptor, TlsConnector, TlsError,
};
use fusebox_proto::v1::auth_server::AuthServer;
use fusebox_proto::v1::cluster_server::ClusterServer;
use fusebox_proto::v1::raft_server::RaftServer;
use fusebox_raft_store::{DirIdentity, RaftRuntime, StateStore};
use openraft::async_runtime::WatchReceiver;
use openraft::{Config, Raft, SnapshotPolicy};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::server::Router;
use tower::layer::util::{Identity, Stack};

/// Why a node could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration is inconsistent.
    #[error("config: {0}")]
    Config(String),
    /// The data directory could not be opened.
    #[error("storage: {0}")]
    Storage(String),
    /// openraft refused to start.
    #[error("raft: {0}")]
    Raft(String),
    /// A TLS certificate, key or CA could not be loaded.
    #[error("tls: {0}")]
    Tls(String),
    /// A listener could not bind.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running node and how to stop it.
pub struct RunningNode {
    /// The backend the services use (and tests can use directly).
    pub backend: RaftBackend,
    /// Where the gRPC API listens.
    pub grpc_addr: SocketAddr,
    /// Where the Raft transport listens, if apart from the API.
    pub peer_addr: Option<SocketAddr>,
    /// Where HTTP listens, if enabled.
    pub http_addr: Option<SocketAddr>,
    /// The node's metrics.
    pub metrics: Arc<Metrics>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

fn raft_config(config: &NodeConfig) -> Result<Config, StartError> {
    let t = &config.timing;
    let raft = Config {
        cluster_name: config.cluster_id.clone(),
        heartbeat_interval: t.heartbeat_ms,
        election_timeout_min: t.election_min_ms,
        election_timeout_max: t.election_max_ms,
        install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
        // Snapshots are triggered by `spawn_snapshotter`, which scales the
        // interval with the ledger's size.
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: t.log_kept_behind_snapshot,
        purge_batch_size: PURGE_BATCH_ENTRIES,
        // A voter whose data directory was lost and that restarts under the
        // same id reports a log shorter than the leader last saw. Without
        // this, openraft's debug builds panic the leader's core on it and
        // release builds accept it anyway; accepting it always keeps both
        // alike and lets the node catch up by snapshot. The safe procedure
        // (remove, restart with --join, add back) stays documented: see
        // docs/decisions/0003-openraft-and-rocksdb.md.
        allow_log_reversion: Some(true),
        // A leader that restarts must win a new election, as in standard
        // Raft. openraft's default restores it as leader of its old term at
        // once, with the commit index it last saved, which may be stale
        // (it is saved unsynced, and applies are not flushed): seed 26843
        // showed such a leader answer a linearizable lookup of a key whose
        // acknowledged `begin` it had not applied yet, 32 ms after a power
        // cut. A restored leader could also have lost log entries it never
        // flushed but its followers committed, and would then reuse their
        // indexes in the same term.
        enable_leader_restore: Some(false),
        ..Default::default()
    };
    raft.validate()
        .map_err(|e| StartError::Config(e.to_string()))
}

/// Opens storage and starts Raft, the servers and the background loops, on
/// this machine's network and clock.
pub async fn start(config: NodeConfig) -> Result<RunningNode, StartError> {
    start_in(config, NodeEnv::system()).await
}

/// [`start`] in the given environment (network, clock, Raft's seed).
pub async fn start_in(config: NodeConfig, env: NodeEnv) -> Result<RunningNode, StartError> {
    config.validate().map_err(StartError::Config)?;
    let dir = config.data_dir.clone();
    let me = DirIdentity {
        node_id: config.id,
        cluster_id: config.cluster_id.clone(),
    };
    // Opening reads the disk and may restore a large snapshot: off the workers.
    let (log_store, state) = fusebox_raft_store::blocking(move || {
        fusebox_raft_store::open(&dir, &me).map_err(|e| std::io::Error::other(e.to_string()))
    })
    .await
    .map_err(|e| StartError::Storage(e.to_string()))?;
    let hub = Arc::new(WatchHub::new());
    let metrics = Arc::new(Metrics::new());
    let auth = PublishedAuth::default();
    // The table as restored; the observer publishes every later change.
    auth.publish(&state.with_state(|s| s.auth().clone()));
    state.set_observer(Arc::new(Observer {
        hub: hub.clone(),
        metrics: metrics.clone(),
        auth: auth.clone(),
    }));
    let tls = Tls::load(&config)?;
    let contact = Arc::new(LeaderContact::starting_at(env.now_ms()));
    let network = Network {
        cluster_id: config.cluster_id.clone(),
        me: config.id,
        net: env.net.clone(),
        tls: tls.peer_client.clone(),
        contact: contact.clone(),
        clock: env.clock.clone(),
    };
    // openraft draws election timeouts from a generator seeded here, and
    // every task Raft spawns inherits a seed derived from it.
    let raft = RaftRuntime::scope(
        env.raft_seed,
        Raft::new(
            config.id,
            Arc::new(raft_config(&config)?),
            network,
            log_store,
            state.clone(),
        ),
    )
    .await
    .map_err(|e| StartError::Raft(e.to_string()))?;
    let (stop, stop_rx) = watch::channel(false);
    let proposer = {
        let (raft, metrics, clock) = (raft.clone(), metrics.clone(), env.clock.clone());
        move |command| {
            let (raft, metrics, clock) = (raft.clone(), metrics.clone(), clock.clone());
            async move { super::backend::propose(&raft, &metrics, &clock, command).await }
        }
    };
    let (reports, coalescer_task) = ReportCoalescer::start(proposer.clone(), stop_rx.clone());
    let (ledger, ledger_coalescer_task) = LedgerCoalescer::start(proposer, stop_rx.clone());
    let backend = RaftBackend {
        raft,
        state,
        hub,
        metrics: metrics.clone(),
        reports: Some(reports),
        ledger: Some(ledger),
        env: env.clone(),
        contact,
        contact_max_ms: config
            .timing
            .election_max_ms
            .saturating_mul(LEADER_CONTACT_ELECTIONS),
    };
    let (listener, grpc_addr) = bind(&env, config.listen).await?;
    let raft_service = RaftService {
        raft: backend.raft.clone(),
        cluster_id: config.cluster_id.clone(),
        me: config.id,
        contact: backend.contact.clone(),
        clock: env.clock.clone(),
        member_certs: tls.peer_server.is_some(),
        store: backend.state.clone(),
        receiving: RaftService::receiving_permits(),
        appending: RaftService::appending_permits(),
    };
    let first_admin = match &config.init_auth {
        Some(file) => Some(init_auth::load_or_create(file).map_err(StartError::Config)?),
        None => None,
    };
    let guard = Guard::new(
        auth.clone(),
        Arc::new(backend.clone()),
        config.auth_required(),
        config.caller_limits,
    );
    let mut tasks = vec![coalescer_task, ledger_coalescer_task];
    let peer_addr = match config.peer_listen {
        Some(addr) => {
            let (peer_listener, bound) = bind(&env, addr).await?;
            tasks.push(spawn_peer_grpc(
                raft_service.clone(),
                guard.clone(),
                peer_listener,
                tls.peer_server.clone(),
                stop_rx.clone(),
            ));
            Some(bound)
        }
        None => None,
    };
    let shared_raft = peer_addr.is_none().then_some(raft_service);
    tasks.push(spawn_grpc(
        &config,
        &backend,
        guard,
        (listener, tls.api_server.clone()),
        tls.api_client.clone(),
        shared_raft,
        stop_rx.clone(),
    ));
    let http_addr = match config.http {
        Some(addr) => {
            let (task, bound) = spawn_http(addr, metrics.clone(), stop_rx.clone()).await?;
            tasks.push(task);
            Some(bound)
        }
        None => None,
    };
    if !config.join {
        initialize(&backend, &config).await;
    }
    if let Some(token) = first_admin {
        tasks.push(init_auth::spawn(
            backend.clone(),
            auth,
            token,
            stop_rx.clone(),
        ));
    }
    tasks.push(spawn_ticker(
        backend.clone(),
        config.timing.tick_ms,
        stop_rx.clone(),
    ));
    tasks.push(spawn_snapshotter(
        backend.clone(),
        config.timing.snapshot_every_entries,
        stop_rx.clone(),
    ));
    tasks.push(spawn_metrics_loop(
        backend.clone(),
        metrics.clone(),
        stop_rx,
    ));
    if config.insecure && config.exposed_in_clear() {
        tracing::warn!(
            listen = %config.listen,
            peer_listen = ?config.peer_listen,
            "--insecure: serving beyond loopback without TLS or without auth; anyone who can \
             reach these addresses may read and change the cluster"
        );
    }
    tracing::info!(node = config.id, %grpc_addr, ?peer_addr, "node started");
    Ok(RunningNode {
        backend,
        grpc_addr,
        peer_addr,
        http_addr,
        metrics,
        stop,
        tasks,
    })
}

/// Forms the cluster from the static peers if this node's log is empty.
/// Every initial member does this with the same peers, which openraft allows:
/// the vote elects one leader.
async fn initialize(backend: &RaftBackend, config: &NodeConfig) {
    // `validate` checked they parse.
    let members = config.members().unwrap_or_default();
    match backend.raft.is_initialized().await {
        Ok(true) => {}
        Ok(false) => {
            if let Err(e) = backend.raft.initialize(members).await {
                tracing::info!(error = %e, "initialize skipped");
            }
        }
        Err(e) => tracing::error!(error = %e, "cannot tell whether raft is initialized"),
    }
}

/// The TLS each side of a node speaks, loaded from its files.
struct Tls {
    /// Clients to this node's API.
    api_server: Option<TlsAcceptor>,
    /// This node to the leader's API, forwarding.
    api_client: Option<TlsConnector>,
    /// Members to this node's peer listener (client certificates required).
    peer_server: Option<TlsAcceptor>,
    /// This node to other members.
    peer_client: Option<TlsConnector>,
}

impl Tls {
    fn load(config: &NodeConfig) -> Result<Tls, StartError> {
        let (api_server, api_client) = match &config.tls {
            Some(t) => both_sides(&t.cert, &t.key, &t.ca, ClientCerts::Optional)?,
            None => (None, None),
        };
        let (peer_server, peer_client) = match &config.peer_tls {
            Some(t) => both_sides(&t.cert, &t.key, &t.ca, ClientCerts::Required)?,
            None => (None, None),
        };
        Ok(Tls {
            api_server,
            api_client,
            peer_server,
            peer_client,
        })
    }
}

/// A listener's TLS and, with the same certificate and CA, the TLS this
/// node dials others' listeners of that kind with.
type Sides = (Option<TlsAcceptor>, Option<TlsConnector>);

fn both_sides(
    cert: &Path,
    key: &Path,
    ca: &Path,
    clients: ClientCerts,
) -> Result<Sides, StartError> {
    let tls = |e: TlsError| StartError::Tls(e.to_string());
    let server = TlsAcceptor::load(ServerTlsFiles {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        client_ca: Some(ca.to_path_buf()),
        client_certs: clients,
    })
    .map_err(tls)?;
    let client = TlsConnector::load(ClientTlsFiles {
        ca: ca.to_path_buf(),
        cert: Some(cert.to_path_buf()),
        key: Some(key.to_path_buf()),
        server_name: None,
    })
    .map_err(tls)?;
    Ok((Some(server), Some(client)))
}

async fn bind(
    env: &NodeEnv,
    addr: SocketAddr,
) -> Result<(Box<dyn Listener>, SocketAddr), StartError> {
    let listener = env
        .net
        .bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    Ok((listener, bound))
}

fn raft_server(raft: RaftService) -> RaftServer<RaftService> {
    RaftServer::new(raft)
        .max_decoding_message_size(RAFT_PAYLOAD_BYTES_MAX)
        .max_encoding_message_size(RAFT_PAYLOAD_BYTES_MAX)
}

/// The client API, and the Raft transport too when the node has no peer
/// listener (`shared_raft`).
fn spawn_grpc(
    config: &NodeConfig,
    backend: &RaftBackend,
    guard: Guard,
    (listener, tls): (Box<dyn Listener>, Option<TlsAcceptor>),
    forward_tls: Option<TlsConnector>,
    shared_raft: Option<RaftService>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    // One forwarder (one header, one set of deadlines, one channel cache)
    // for every service that hands requests to the leader.
    let forwarder = Arc::new(Forwarder::new(backend.env.net.clone(), forward_tls));
    let cluster = ClusterService {
        backend: backend.clone(),
        me: config.id,
        cluster_id: config.cluster_id.clone(),
        forwarder: forwarder.clone(),
    };
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    // Every call passes the guard first (`crate::auth`): its rule, its
    // caller, its role, and the server's deadline on the handler.
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(CONNECTION_STREAMS_MAX)
        .http2_keepalive_interval(Some(Duration::from_millis(SERVER_PING_INTERVAL_MS)))
        .http2_keepalive_timeout(Some(Duration::from_millis(SERVER_PING_TIMEOUT_MS)))
        .layer(GuardLayer::new(guard))
        .add_optional_service(shared_raft.map(raft_server))
        .add_service(ClusterServer::new(cluster))
        .add_service(health_service);
    let gateway = Gateway::with_forwarder(backend.clone(), forwarder)
        .guarded()
        .stopped_by(stop.clone());
    let auth = AuthServer::new(AuthService::new(gateway.clone()));
    let api = Services::with_gateway(gateway);
    let router = router
        .add_service(api.breakers)
        .add_service(api.ledger)
        .add_service(api.policy)
        .add_service(api.tools)
        .add_service(auth);
    tokio::spawn(async move {
        health_reporter
            .set_serving::<ClusterServer<ClusterService>>()
            .await;
        serve(router, listener, tls, stop, "grpc").await;
    })
}

/// A router behind the guard.
type GuardedRouter = Router<Stack<GuardLayer, Identity>>;

/// Serves `router` on `listener` until `stop` turns true.
async fn serve(
    router: GuardedRouter,
    listener: Box<dyn Listener>,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
) {
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    if let Err(e) = router
        .serve_with_incoming_shutdown(incoming(listener, tls, Connections::default()), shutdown)
        .await
    {
        tracing::error!(error = %e, server = what, "grpc server stopped");
    }
}

/// The peer listener: the Raft transport alone.
fn spawn_peer_grpc(
    raft: RaftService,
    guard: Guard,
    listener: Box<dyn Listener>,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    // The guard passes Raft calls on to the service's member check and
    // refuses any other path.
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(CONNECTION_STREAMS_MAX)
        .http2_keepalive_interval(Some(Duration::from_millis(SERVER_PING_INTERVAL_MS)))
        .http2_keepalive_timeout(Some(Duration::from_millis(SERVER_PING_TIMEOUT_MS)))
        .layer(GuardLayer::new(guard))
        .add_service(raft_server(raft));
    tokio::spawn(serve(router, listener, tls, stop, "peer grpc"))
}

async fn spawn_http(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    mut stop: watch::Receiver<bool>,
) -> Result<(JoinHandle<()>, SocketAddr), StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    let app = metrics::router(metrics);
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "http server stopped");
        }
    });
    Ok((task, bound))
}

/// The leader proposes a `Tick` now and then, so timers fire even when no
/// client writes (open periods end, leases lapse, retention purges).
fn spawn_ticker(backend: RaftBackend, tick_ms: u64, stop: watch::Receiver<bool>) -> JoinHandle<()> {
    every(Duration::from_millis(tick_ms), stop, move || {
        let backend = backend.clone();
        async move {
            if backend.raft.is_leader() {
                if let Err(e) = backend.write(Command::Tick).await {
                    tracing::debug!(error = %e, "tick not applied");
                }
            }
        }
    })
}

/// Asks for a snapshot once enough entries were applied since the last one:
/// `snapshot_every_entries`, or the ledger's records divided by
/// [`SNAPSHOT_SPACING_LEDGER_DIVISOR`] (a quarter) if that is more. A
/// snapshot copies the whole ledger, so spacing them by a fraction of its
/// size keeps the copying a constant cost per applied entry however large
/// the ledger grows; the log kept between snapshots grows with it.
fn spawn_snapshotter(
    backend: RaftBackend,
    every_entries: u64,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let period = Duration::from_millis(SNAPSHOT_CHECK_PERIOD_MS);
    every(period, stop, move || {
        let backend = backend.clone();
        async move {
            let m = backend.raft.metrics().borrow_watched().clone();
            let applied = m.last_applied.map_or(0, |l| l.index);
            let snapshot = m.snapshot.map_or(0, |l| l.index);
            let spaced = backend.state.ledger_records() / SNAPSHOT_SPACING_LEDGER_DIVISOR;
            let due = every_entries.max(spaced);
            if applied.saturating_sub(snapshot) >= due {
                tracing::info!(applied, snapshot, due, "asking for a snapshot");
                if let Err(e) = backend.raft.trigger().snapshot().await {
                    tracing::warn!(error = %e, "snapshot not triggered");
                }
            }
        }
    })
}

fn spawn_metrics_loop(
    backend: RaftBackend,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let mut leader = None;
    let mut census_due = Instant::now();
    every(
        Duration::from_millis(METRICS_REFRESH_PERIOD_MS),
        stop,
        move || {
            let m = backend.raft.metrics().borrow_watched().clone();
            metrics
                .term
                .set(i64::try_from(m.current_term).unwrap_or(i64::MAX));
            metrics.leader_id.set(
                m.current_leader
                    .map_or(0, |l| i64::try_from(l).unwrap_or(0)),
            );
            if m.current_leader != leader {
                metrics.leader_changes.inc();
                leader = m.current_leader;
            }
            let index = |l: Option<u64>| i64::try_from(l.unwrap_or(0)).unwrap_or(i64::MAX);
            metrics
                .commit_index
                .set(index(m.local_committed.map(|l| l.index)));
            metrics
                .applied_index
                .set(index(m.last_applied.map(|l| l.index)));
            metrics.set_ready(m.current_leader.is_some());
            let census = (Instant::now() >= census_due).then(|| {
                census_due = Instant::now() + Duration::from_millis(CENSUS_PERIOD_MS);
                (backend.state.clone(), metrics.clone())
            });
            async move {
                if let Some((state, metrics)) = census {
                    count_states(state, &metrics).await;
                }
            }
        },
    )
}

/// Counts breakers by state and open ledger records by status into their
/// gauges. The ledger's status index is on disk: off the worker threads.
async fn count_states(state: StateStore, metrics: &Metrics) {
    use fusebox_core::ledger::{Index, Status};
    let counted = fusebox_raft_store::blocking(move || {
        Ok(state.with_state(|s| {
            let mut breakers = BTreeMap::<&'static str, i64>::new();
            for (ns, _) in s.namespaces() {
                for (_, breaker) in s.breakers_in(ns) {
                    *breakers.entry(breaker.state().as_str()).or_default() += 1;
                }
            }
            let records = [Status::InProgress, Status::Ambiguous].map(|status| {
                let mut left = LEDGER_CENSUS_MAX;
                for (ns, _) in s.namespaces() {
                    let found = s.ledger().scan(ns, Index::Status(status), "", left).len();
                    left = left.saturating_sub(found);
                    if left == 0 {
                        break;
                    }
                }
                (status, LEDGER_CENSUS_MAX - left)
            });
            (breakers, records)
        }))
    })
    .await;
    let Ok((breakers, records)) = counted else {
        return;
    };
    for state in metrics::BREAKER_STATES {
        let name = state.as_str();
        Metrics::set_state(
            &metrics.breakers,
            name,
            breakers.get(name).copied().unwrap_or(0),
        );
    }
    for (status, n) in records {
        let value = i64::try_from(n).unwrap_or(i64::MAX);
        Metrics::set_state(&metrics.ledger_records, status.as_str(), value);
    }
}

/// Runs `f` every `period` until `stop` turns true.
fn every<F, Fut>(period: Duration, mut stop: watch::Receiver<bool>, mut f: F) -> JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => f().await,
                _ = stop.changed() => {
                    if *stop.borrow() {
                        return;
                    }
                }
            }
        }
    })
}

impl RunningNode {
    /// Resolves, with the reason, once this node's Raft core has stopped
    /// (a storage error, a panic): the node can then no longer take part
    /// and should exit so a supervisor restarts it, rather than linger.
    pub async fn raft_stopped(&self) -> String {
        let mut every = tokio::time::interval(Duration::from_millis(RAFT_ALIVE_CHECK_PERIOD_MS));
        let within = Duration::from_millis(RAFT_ALIVE_TIMEOUT_MS);
        loop {
            every.tick().await;
            let alive = self.backend.raft.with_raft_state(|_| ());
            if let Ok(Err(fatal)) = tokio::time::timeout(within, alive).await {
                return fatal.to_string();
            }
        }
    }

    /// Stops serving, shuts Raft down and waits for the background tasks.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.backend.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_millis(SHUTDOWN_TASK_WAIT_MS), task).await;
        }
    }
}
