//! `fusebox bench ledger`: how many idempotent writes a cluster guards per
//! second, measured against any cluster.
//!
//! Each of `--clients` workers begins a fresh key and completes it,
//! back to back (the ledger pair an agent's write costs), for `--seconds`
//! after a `--warmup-seconds` that is not counted. The run prints keys per
//! second, the pair's latency (p50, p99, max) and, when `--metrics` names
//! the nodes' metrics listeners, the server CPU time and WAL syncs per key
//! summed over those nodes (read from `fusebox_process_cpu_seconds_total`
//! and `fusebox_raft_log_syncs_total` before and after). `--json` prints one line.
//! A node whose metrics cannot be read (it died mid-run, say) costs only
//! the server figures: the run's own are printed, with the reason, and the
//! command then fails with it.
//!
//! Keys are `bench-<run>-<worker>-<n>` in `--namespace` (default `bench`);
//! `fusebox namespace delete bench` removes them afterwards.
//!
//! `fusebox bench etcd-ledger` runs the same workload against etcd, for a
//! side-by-side figure: per key a transaction that puts the key only if it
//! does not exist yet, then a put of its outcome ([`crate::bench_etcd`]).

use crate::client::{ClientArgs, Session};
use crate::failure::Failure;
use crate::out::outln;
use anyhow::Context as _;
use clap::{Args, Subcommand};
use fusebox_client::pipeline::Sent;
use fusebox_proto::v1 as pb;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Most workers one run may start.
pub(crate) const CLIENTS_MAX: usize = 4_096;
/// Most connections one run may open.
const CONNECTIONS_MAX: usize = 64;
/// Longest run.
pub(crate) const SECONDS_MAX: u64 = 3_600;
/// Latency samples kept per worker; later pairs are counted, not sampled.
pub(crate) const SAMPLES_PER_WORKER_MAX: usize = 1 << 20;
/// Largest metrics page read.
const METRICS_PAGE_BYTES_MAX: usize = 4 << 20;
/// How long one metrics scrape may take.
const METRICS_TIMEOUT: Duration = Duration::from_secs(3);
/// The pause after a failed pair, so a refusing cluster is not spun on.
pub(crate) const FAILURE_PAUSE: Duration = Duration::from_millis(20);

/// `fusebox bench ...`
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Begin and complete fresh ledger keys from many clients at once.
    Ledger(LedgerBench),
    /// A steady ledger and outcome load that rides out faults, then a check
    /// that nothing acknowledged was lost and the nodes agree.
    Soak(crate::bench_soak::SoakArgs),
    /// The latency `fusebox gateway` adds to an MCP tool call: the same
    /// tool called directly and through the gateway, in turns.
    Gateway(GatewayBenchArgs),
    /// Outcome reports from many replicas at once, in batches.
    Outcomes(crate::bench_outcomes::OutcomesBench),
    /// How long a breaker change takes to reach every watch stream.
    Propagation(crate::bench_propagation::PropagationBench),
    /// What the agent SDK's gate costs a call (admit + record), in process.
    Gate(crate::bench_gate::GateBench),
    /// The same workload against etcd: put-if-absent, then put, per key.
    EtcdLedger {
        /// etcd's client endpoints (`HOST:PORT,...`); connections spread
        /// over them.
        #[arg(long, value_delimiter = ',', required = true)]
        etcd: Vec<String>,
        #[command(flatten)]
        bench: LedgerBench,
    },
}

#[derive(Args, Debug, Clone)]
pub(crate) struct LedgerBench {
    /// Concurrent workers, each doing one Begin + Complete at a time.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// gRPC connections the workers share (to the leader when known).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Seconds measured.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds run first and not counted.
    #[arg(long, default_value_t = 2)]
    warmup_seconds: u64,
    /// Namespace the keys go to.
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// The nodes' metrics listeners (`HOST:PORT,...`), for server CPU and
    /// WAL syncs per key.
    #[arg(long, value_delimiter = ',')]
    metrics: Vec<String>,
    /// How a Fusebox worker sends its calls: on each connection's ledger
    /// pipeline, as the agent SDK does, or as one unary call each.
    #[arg(long, value_enum, default_value_t = Transport::Pipeline)]
    transport: Transport,
}

/// How `fusebox bench ledger` sends Begin and Complete.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// `Ledger.Pipeline`: calls and answers that meet on a connection
    /// travel together.
    Pipeline,
    /// `Ledger.Begin` and `Ledger.Complete`, one request each.
    Unary,
}

/// Flags of `fusebox bench gateway`.
#[derive(Args, Debug, Clone)]
pub(crate) struct GatewayBenchArgs {
    /// The upstream's own Streamable HTTP endpoint.
    #[arg(long)]
    direct: String,
    /// The gateway's endpoint for the same upstream
    /// (`http://HOST:PORT/servers/NAME/mcp`).
    #[arg(long)]
    via: String,
    /// The tool to call (a read-only one: it is called many times).
    #[arg(long)]
    tool: String,
    /// Its arguments, a JSON object.
    #[arg(long, default_value = "{}")]
    arguments: String,
    /// Concurrent agents, each count measured in turn.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    agents: Vec<usize>,
    /// Seconds measured per path and agent count.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Turns each path takes per agent count (the paths alternate).
    #[arg(long, default_value_t = 4)]
    rounds: u32,
    /// Seconds run before each turn and not counted.
    #[arg(long, default_value_t = 0.5)]
    warmup_seconds: f64,
}

async fn bench_gateway(json: bool, args: GatewayBenchArgs) -> anyhow::Result<()> {
    let arguments: serde_json::Value = serde_json::from_str(&args.arguments)
        .map_err(|e| Failure::bad_input(format!("--arguments is not JSON: {e}")))?;
    let serde_json::Value::Object(arguments) = arguments else {
        return Err(Failure::bad_input("--arguments must be a JSON object").into());
    };
    let agents_ok = !args.agents.is_empty()
        && args
            .agents
            .iter()
            .all(|&n| (1..=fusebox_gateway::bench::AGENTS_MAX).contains(&n));
    if !agents_ok {
        let max = fusebox_gateway::bench::AGENTS_MAX;
        return Err(Failure::bad_input(format!("--agents: counts from 1 to {max}")).into());
    }
    let limit = SECONDS_MAX as f64;
    let in_bounds = args.seconds > 0.0
        && args.seconds <= limit
        && (0.0..=limit).contains(&args.warmup_seconds)
        && (1..=100).contains(&args.rounds);
    if !in_bounds {
        let message = format!("--seconds in (0, {SECONDS_MAX}], --warmup-seconds in [0, {SECONDS_MAX}], --rounds 1 to 100");
        return Err(Failure::bad_input(message).into());
    }
    let bench = fusebox_gateway::bench::GatewayBench {
        direct: args.direct,
        via: args.via,
        tool: args.tool,
        arguments,
        agents: args.agents,
        seconds: args.seconds,
        rounds: args.rounds,
        warmup_seconds: args.warmup_seconds,
    };
    let figures = fusebox_gateway::bench::run(&bench, |turn| {
        if !json {
            eprintln!("  {turn}");
        }
    })
    .await
    .map_err(|e| Failure::new(crate::failure::ExitKind::Unavailable, e))?;
    if json {
        outln!(
            "{}",
            json!({ "bench": "gateway", "tool": bench.tool, "results": figures })
        );
        return Ok(());
    }
    outln!(
        "{:>6}  {:<8} {:>9} {:>10} {:>9} {:>9} {:>9} {:>7}",
        "agents",
        "path",
        "calls",
        "calls/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "errors"
    );
    for f in &figures {
        for (path, p) in [("direct", &f.direct), ("gateway", &f.via)] {
            outln!(
                "{:>6}  {:<8} {:>9} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>7}",
                f.agents,
                path,
                p.calls,
                p.calls_per_second,
                p.p50_ms,
                p.p99_ms,
                p.max_ms,
                p.errors
            );
        }
        outln!(
            "{:>6}  {:<8} {:>9} {:>10} {:>+9.3} {:>+9.3}",
            f.agents,
            "added",
            "",
            "",
            f.added_p50_ms,
            f.added_p99_ms
        );
    }
    Ok(())
}

/// Runs a `fusebox bench` command.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Ledger(bench) => {
            check(&bench)?;
            let mut sessions = Vec::with_capacity(bench.connections);
            for _ in 0..bench.connections {
                sessions.push(Arc::new(args.client.session().await?));
            }
            let ns = bench.namespace.clone();
            let transport = bench.transport;
            let pairs = move |w: usize| FuseboxPair {
                session: sessions[w % sessions.len()].clone(),
                namespace: ns.clone(),
                transport,
            };
            measure(args.client.json, "fusebox", &bench, pairs).await
        }
        BenchCommand::Soak(soak) => crate::bench_soak::run(&args.client, soak).await,
        BenchCommand::Outcomes(bench) => crate::bench_outcomes::run(&args.client, bench).await,
        BenchCommand::Propagation(bench) => {
            crate::bench_propagation::run(&args.client, bench).await
        }
        BenchCommand::Gate(bench) => crate::bench_gate::run(&args.client, bench).await,
        BenchCommand::Gateway(gateway) => bench_gateway(args.client.json, gateway).await,
        BenchCommand::EtcdLedger { etcd, bench } => {
            check(&bench)?;
            let pairs = crate::bench_etcd::pairs(&etcd, bench.connections).await?;
            measure(args.client.json, "etcd", &bench, pairs).await
        }
    }
}

/// One ledger pair on a fresh key, against some store.
pub(crate) trait Pair: Send + 'static {
    /// Takes `key`, then records its outcome; on failure, what failed.
    fn pair(&mut self, key: &str) -> impl std::future::Future<Output = Result<(), String>> + Send;
}

/// The pair against a Fusebox cluster: Begin, then Complete.
struct FuseboxPair {
    session: Arc<Session>,
    namespace: String,
    transport: Transport,
}

impl Pair for FuseboxPair {
    async fn pair(&mut self, key: &str) -> Result<(), String> {
        pair(&self.session, &self.namespace, key, self.transport).await
    }
}

/// What one worker saw.
#[derive(Default)]
struct WorkerTally {
    /// Pairs finished in the measured window.
    pairs: u64,
    /// Their latencies in µs (at most [`SAMPLES_PER_WORKER_MAX`]).
    micros: Vec<u32>,
    /// Failures in the measured window, by what failed.
    failures: BTreeMap<String, u64>,
}

/// Runs `bench` with one [`Pair`] per worker (`pairs(w)` makes worker
/// `w`'s) and prints what it measured.
async fn measure<P: Pair>(
    json: bool,
    store: &'static str,
    bench: &LedgerBench,
    pairs: impl Fn(usize) -> P,
) -> anyhow::Result<()> {
    let run = format!("{:x}", crate::time_text::now_ms());
    let started = Instant::now();
    let measured_from = started + Duration::from_secs(bench.warmup_seconds);
    let until = measured_from + Duration::from_secs(bench.seconds);
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..bench.clients {
        let (pair, run, done) = (pairs(w), run.clone(), done.clone());
        workers.spawn(async move { worker(pair, &run, w, measured_from, until, &done).await });
    }
    let progress = (!json).then(|| tokio::spawn(progress("keys", done.clone(), started, until)));
    tokio::time::sleep_until(measured_from).await;
    let before = scrape_all(&bench.metrics).await;
    let mut tally = WorkerTally::default();
    while let Some(joined) = workers.join_next().await {
        let one = joined.context("a bench worker stopped")?;
        tally.pairs += one.pairs;
        tally.micros.extend(one.micros);
        for (what, n) in one.failures {
            *tally.failures.entry(what).or_default() += n;
        }
    }
    let after = scrape_all(&bench.metrics).await;
    if let Some(progress) = progress {
        progress.abort();
        eprintln!();
    }
    let server = Server::around(before, after);
    report(json, store, bench, tally, &server);
    server.read()
}

/// `--NAME` must be 1 to `max`.
pub(crate) fn within(name: &str, value: u64, max: u64) -> Result<(), Failure> {
    if value == 0 || value > max {
        Err(Failure::bad_input(format!(
            "--{name} must be 1 to {max}, got {value}"
        )))
    } else {
        Ok(())
    }
}

fn check(bench: &LedgerBench) -> Result<(), Failure> {
    within("clients", bench.clients as u64, CLIENTS_MAX as u64)?;
    within(
        "connections",
        bench.connections as u64,
        CONNECTIONS_MAX as u64,
    )?;
    within("seconds", bench.seconds, SECONDS_MAX)?;
    if bench.warmup_seconds > SECONDS_MAX {
        return Err(Failure::bad_input(format!(
            "--warmup-seconds must be at most {SECONDS_MAX}"
        )));
    }
    Ok(())
}

/// One worker: pairs on fresh keys until `until`, counting those that end
/// after `measured_from`.
async fn worker<P: Pair>(
    mut pair: P,
    run: &str,
    w: usize,
    measured_from: Instant,
    until: Instant,
    done: &std::sync::atomic::AtomicU64,
) -> WorkerTally {
    let mut tally = WorkerTally::default();
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let key = format!("bench-{run}-{w}-{n}");
        let began = Instant::now();
        let outcome = pair.pair(&key).await;
        let ended = Instant::now();
        let counted = measured_from <= ended && ended <= until;
        match outcome {
            Ok(()) if counted => {
                tally.pairs += 1;
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if tally.micros.len() < SAMPLES_PER_WORKER_MAX {
                    let micros = (ended - began).as_micros();
                    tally.micros.push(u32::try_from(micros).unwrap_or(u32::MAX));
                }
            }
            Ok(()) => {}
            Err(what) => {
                if counted {
                    *tally.failures.entry(what).or_default() += 1;
                }
                // Warming up or not, a refusing cluster is not spun on.
                tokio::time::sleep(FAILURE_PAUSE).await;
            }
        }
    }
    tally
}

/// How long one call of a pair may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Begins `key` and completes it as succeeded; on failure, what failed.
async fn pair(session: &Session, ns: &str, key: &str, transport: Transport) -> Result<(), String> {
    let attempt = format!("{key}-a");
    let begin = pb::BeginRequest {
        namespace: ns.to_owned(),
        meta: session.meta(),
        key: key.to_owned(),
        fingerprint: key.as_bytes().to_vec(),
        intent_id: key.to_owned(),
        server: "bench".into(),
        tool: "write".into(),
        target: "bench".into(),
        effect: pb::Effect::NonIdempotentWrite as i32,
        attempt_id: attempt.clone(),
        lease_ms: 60_000,
    };
    let answer = begin_on(session, begin, transport)
        .await
        .map_err(|s| format!("begin: {:?}", s.code()))?;
    if !matches!(
        answer.outcome,
        Some(pb::begin_response::Outcome::Started(_))
    ) {
        return Err("begin: not started".into());
    }
    let complete = pb::CompleteRequest {
        namespace: ns.to_owned(),
        meta: session.meta(),
        key: key.to_owned(),
        attempt_id: attempt.clone(),
        outcome: Some(pb::complete_request::Outcome::Succeeded(
            pb::CompleteSucceeded {
                operation_id: attempt,
                result: Vec::new(),
            },
        )),
    };
    complete_on(session, complete, transport)
        .await
        .map_err(|s| format!("complete: {:?}", s.code()))?;
    Ok(())
}

async fn begin_on(
    session: &Session,
    request: pb::BeginRequest,
    transport: Transport,
) -> Result<pb::BeginResponse, tonic::Status> {
    let request = match transport {
        Transport::Pipeline => match session.ledger_pipeline().begin(request, CALL_TIMEOUT).await {
            Sent::Answered(answer) => return answer.map(tonic::Response::into_inner),
            Sent::Unsent(request) => request,
        },
        Transport::Unary => request,
    };
    let mut request = tonic::Request::new(request);
    request.set_timeout(CALL_TIMEOUT);
    Ok(session.ledger().begin(request).await?.into_inner())
}

async fn complete_on(
    session: &Session,
    request: pb::CompleteRequest,
    transport: Transport,
) -> Result<pb::CompleteResponse, tonic::Status> {
    let request = match transport {
        Transport::Pipeline => {
            match session
                .ledger_pipeline()
                .complete(request, CALL_TIMEOUT)
                .await
            {
                Sent::Answered(answer) => return answer.map(tonic::Response::into_inner),
                Sent::Unsent(request) => request,
            }
        }
        Transport::Unary => request,
    };
    let mut request = tonic::Request::new(request);
    request.set_timeout(CALL_TIMEOUT);
    Ok(session.ledger().complete(request).await?.into_inner())
}

/// A progress line on stderr, once a second, counting `unit`.
pub(crate) async fn progress(
    unit: &'static str,
    done: Arc<std::sync::atomic::AtomicU64>,
    started: Instant,
    until: Instant,
) {
    let total = (until - started).as_secs();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last = 0;
    loop {
        tick.tick().await;
        let now = done.load(std::sync::atomic::Ordering::Relaxed);
        let elapsed = started.elapsed().as_secs().min(total);
        let filled = usize::try_from(elapsed * 30 / total.max(1)).unwrap_or(30);
        eprint!(
            "\r[{}{}] {elapsed}/{total} s, {now} {unit}, {} {unit}/s   ",
            "=".repeat(filled),
            " ".repeat(30 - filled.min(30)),
            now - last
        );
        let _ = std::io::stderr().flush();
        last = now;
    }
}

/// The two process counters of every node named, summed; `None` when no
/// node was named.
pub(crate) async fn scrape_all(nodes: &[String]) -> anyhow::Result<Option<ServerCounters>> {
    if nodes.is_empty() {
        return Ok(None);
    }
    let mut sum = ServerCounters::default();
    for node in nodes {
        let page = tokio::time::timeout(METRICS_TIMEOUT, metrics_page(node))
            .await
            .map_err(|_| {
                anyhow::anyhow!("metrics of {node}: no answer in {METRICS_TIMEOUT:?}")
            })??;
        let counters = ServerCounters::of(&page)
            .ok_or_else(|| anyhow::anyhow!("metrics of {node}: no process counters"))?;
        sum.cpu_seconds += counters.cpu_seconds;
        sum.log_syncs += counters.log_syncs;
    }
    Ok(Some(sum))
}

/// The nodes' counters around a measured window: both scrapes, none asked
/// for (no `--metrics`), or why one failed. A failed scrape costs the
/// server figures only; the run's own are reported either way.
pub(crate) enum Server {
    NotAsked,
    Counted(ServerCounters, ServerCounters),
    Unread(String),
}

impl Server {
    /// From the scrapes before and after the window.
    pub(crate) fn around(
        before: anyhow::Result<Option<ServerCounters>>,
        after: anyhow::Result<Option<ServerCounters>>,
    ) -> Server {
        match (before, after) {
            (Ok(Some(before)), Ok(Some(after))) => Server::Counted(before, after),
            (Err(e), _) | (_, Err(e)) => Server::Unread(format!("{e:#}")),
            _ => Server::NotAsked,
        }
    }

    /// Both counters, when both scrapes were read.
    pub(crate) fn counted(&self) -> Option<(ServerCounters, ServerCounters)> {
        match self {
            Server::Counted(before, after) => Some((*before, *after)),
            _ => None,
        }
    }

    /// Why the counters were not read, when a scrape failed.
    pub(crate) fn unread(&self) -> Option<&str> {
        match self {
            Server::Unread(why) => Some(why),
            _ => None,
        }
    }

    /// The command's outcome once the figures are out: a failed scrape
    /// fails it.
    pub(crate) fn read(&self) -> anyhow::Result<()> {
        match self.unread() {
            Some(why) => Err(anyhow::anyhow!(
                "the run's figures are above; the server's were not read: {why}"
            )),
            None => Ok(()),
        }
    }

    /// The text report's line for a failed scrape.
    pub(crate) fn unread_line(&self) -> Option<String> {
        self.unread()
            .map(|why| format!("  server figures not read: {why}"))
    }

    /// The line a text report prints instead of the server figures (per
    /// `what`).
    pub(crate) fn missing_line(&self, what: &str) -> String {
        self.unread_line().unwrap_or_else(|| {
            format!("  server CPU and syncs per {what}: pass --metrics HOST:PORT,... to see them")
        })
    }
}

/// `GET /metrics` from `node` (`HOST:PORT`), bounded.
async fn metrics_page(node: &str) -> anyhow::Result<String> {
    let page = crate::http_get::get(node, "/metrics", METRICS_PAGE_BYTES_MAX)
        .await
        .with_context(|| format!("metrics of {node}"))?;
    Ok(page.body)
}

/// What a node's metrics say it has spent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ServerCounters {
    pub(crate) cpu_seconds: f64,
    pub(crate) log_syncs: f64,
}

impl ServerCounters {
    /// Reads the two counters from a metrics page.
    fn of(page: &str) -> Option<ServerCounters> {
        let value = |name: &str| {
            page.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        };
        Some(ServerCounters {
            cpu_seconds: value("fusebox_process_cpu_seconds_total")?,
            log_syncs: value("fusebox_raft_log_syncs_total")?,
        })
    }
}

/// The p-th percentile (0..=100) of sorted samples, in ms.
pub(crate) fn percentile_ms(sorted: &[u32], p: u32) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (sorted.len() - 1) * p as usize / 100;
    f64::from(sorted[rank]) / 1000.0
}

fn report(json: bool, store: &str, bench: &LedgerBench, mut tally: WorkerTally, server: &Server) {
    tally.micros.sort_unstable();
    let keys_per_second = tally.pairs as f64 / bench.seconds as f64;
    let (p50, p99) = (
        percentile_ms(&tally.micros, 50),
        percentile_ms(&tally.micros, 99),
    );
    let max = percentile_ms(&tally.micros, 100);
    let per_key = server.counted().map(|(before, after)| {
        let keys = tally.pairs.max(1) as f64;
        (
            (after.cpu_seconds - before.cpu_seconds) * 1000.0 / keys,
            (after.log_syncs - before.log_syncs) / keys,
        )
    });
    let failures: u64 = tally.failures.values().sum();
    if json {
        outln!(
            "{}",
            json!({
            "bench": "ledger",
            "store": store,
            "clients": bench.clients,
            "connections": bench.connections,
            "transport": (store == "fusebox").then(|| format!("{:?}", bench.transport).to_lowercase()),
            "seconds": bench.seconds,
            "keys": tally.pairs,
            "keys_per_second": keys_per_second,
            "pair_latency_ms": {"p50": p50, "p99": p99, "max": max},
            "failures": tally.failures,
            "server_cpu_ms_per_key": per_key.map(|p| p.0),
            "log_syncs_per_key": per_key.map(|p| p.1),
            "server_unread": server.unread(),
            })
        );
        return;
    }
    let transport = match (store, bench.transport) {
        ("fusebox", Transport::Pipeline) => ", pipelined",
        ("fusebox", Transport::Unary) => ", unary calls",
        _ => "",
    };
    outln!(
        "{store} ledger pair (take a fresh key, record its outcome): {} clients over {} connections{transport}, {} s",
        bench.clients,
        bench.connections,
        bench.seconds
    );
    outln!(
        "  {} keys, {keys_per_second:.0} keys/s; pair latency p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms",
        tally.pairs
    );
    match per_key {
        Some((cpu, syncs)) => outln!(
            "  server (summed over {} nodes): {cpu:.3} ms CPU and {syncs:.3} WAL syncs per key",
            bench.metrics.len()
        ),
        None => outln!("{}", server.missing_line("key")),
    }
    if failures > 0 {
        outln!("  failures: {failures} {:?}", tally.failures);
    }
    if store == "fusebox" {
        outln!(
            "  the keys stay in namespace {:?}: `fusebox namespace delete {}` removes them",
            bench.namespace,
            bench.namespace
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_scrape_costs_only_the_server_figures() {
        let counters = |cpu| ServerCounters {
            cpu_seconds: cpu,
            log_syncs: 0.0,
        };
        let counted = Server::around(Ok(Some(counters(1.0))), Ok(Some(counters(2.0))));
        assert_eq!(counted.counted(), Some((counters(1.0), counters(2.0))));
        assert!(counted.read().is_ok());
        let not_asked = Server::around(Ok(None), Ok(None));
        assert_eq!(not_asked.counted(), None);
        assert!(not_asked.read().is_ok());
        assert!(not_asked.missing_line("key").contains("pass --metrics"));
        let died = Server::around(
            Ok(Some(counters(1.0))),
            Err(anyhow::anyhow!("metrics of 127.0.0.1:9: refused")),
        );
        assert_eq!(died.counted(), None);
        assert_eq!(died.unread(), Some("metrics of 127.0.0.1:9: refused"));
        assert!(died
            .missing_line("key")
            .contains("not read: metrics of 127.0.0.1:9"));
        let failed = died.read().expect_err("a failed scrape fails the command");
        assert!(failed.to_string().contains("127.0.0.1:9"), "{failed}");
    }

    #[test]
    fn process_counters_are_read_from_a_metrics_page() {
        let page = "# HELP fusebox_process_cpu_seconds CPU\n\
                    fusebox_process_cpu_seconds_total 12.5\n\
                    fusebox_raft_log_syncs_total 300\n\
                    fusebox_raft_log_syncs_created 1.0\n";
        assert_eq!(
            ServerCounters::of(page),
            Some(ServerCounters {
                cpu_seconds: 12.5,
                log_syncs: 300.0
            })
        );
        assert_eq!(ServerCounters::of("fusebox_raft_log_syncs_total 3\n"), None);
    }

    #[test]
    fn percentiles_come_from_sorted_samples() {
        let samples: Vec<u32> = (1..=100).map(|ms| ms * 1000).collect();
        assert_eq!(percentile_ms(&samples, 50), 50.0);
        assert_eq!(percentile_ms(&samples, 99), 99.0);
        assert_eq!(percentile_ms(&samples, 100), 100.0);
        assert_eq!(percentile_ms(&[], 99), 0.0);
    }

    #[test]
    fn out_of_range_runs_are_refused() {
        let bench = |clients, seconds| LedgerBench {
            clients,
            connections: 1,
            seconds,
            warmup_seconds: 0,
            namespace: "bench".into(),
            metrics: Vec::new(),
            transport: Transport::Pipeline,
        };
        assert!(check(&bench(1, 1)).is_ok());
        assert!(check(&bench(0, 1)).is_err());
        assert!(check(&bench(CLIENTS_MAX + 1, 1)).is_err());
        assert!(check(&bench(1, 0)).is_err());
    }
}
