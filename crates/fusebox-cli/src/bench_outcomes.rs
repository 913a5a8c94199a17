//! `fusebox bench outcomes`: how many call outcomes a cluster takes in per
//! second, as a fleet of agent replicas reports them.
//!
//! Each of `--clients` workers is one replica: it sends batches of
//! `--batch` outcomes (`ReportOutcomes`, as the SDK's flusher does), back to
//! back, spread over `--tools` tools of one server, for `--seconds` after a
//! `--warmup-seconds` that is not counted. Workers start spread over every
//! endpoint given, each with connections of its own, and then go where the
//! SDK's reporter goes: to the leader a forwarded answer names (its
//! `x-fusebox-leader` header), if that is one of the endpoints. (Unlike the
//! SDK, a worker neither follows NOT_LEADER hints nor leaves a node that
//! fails it: the bench expects a healthy cluster.) With
//! `--stay` each keeps to its first endpoint, so a follower forwards its
//! share to the leader, as agents did before the SDK followed the leader.
//! Every outcome is a success, so no breaker trips and the load stays the
//! same throughout.
//!
//! The run prints outcomes per second, the batch's latency (p50, p99,
//! max) and, when `--metrics` names the nodes' metrics listeners, the server
//! CPU time and WAL syncs per thousand outcomes summed over those nodes.

use crate::bench_cmd::{
    percentile_ms, progress, scrape_all, within, Server, CLIENTS_MAX, FAILURE_PAUSE,
    SAMPLES_PER_WORKER_MAX, SECONDS_MAX,
};
use crate::client::{ClientArgs, Session};
use crate::failure::Failure;
use crate::out::outln;
use anyhow::Context as _;
use clap::Args;
use fusebox_proto::v1 as pb;
use fusebox_proto::{leader_named, same_address};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Most outcomes in one batch (the server's own bound).
const BATCH_MAX: usize = fusebox_core::limits::BATCH_OUTCOMES_MAX;
/// Most distinct tools the outcomes spread over.
const TOOLS_MAX: usize = 1_000;
/// How long one batch may take before it counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Flags of `fusebox bench outcomes`.
#[derive(Args, Debug, Clone)]
pub(crate) struct OutcomesBench {
    /// Concurrent replicas, each sending one batch at a time.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Outcomes per batch.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Distinct tools (of one server) the outcomes spread over.
    #[arg(long, default_value_t = 64)]
    tools: usize,
    /// Seconds measured.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds run first and not counted.
    #[arg(long, default_value_t = 2)]
    warmup_seconds: u64,
    /// Namespace the outcomes go to.
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// Each replica keeps sending to the endpoint it started on, instead of
    /// going to the leader a forwarded answer names (the SDK's way).
    #[arg(long)]
    stay: bool,
    /// The nodes' metrics listeners (`HOST:PORT,...`), for server CPU and
    /// WAL syncs per outcome.
    #[arg(long, value_delimiter = ',')]
    metrics: Vec<String>,
}

/// What one worker saw.
#[derive(Default)]
struct Tally {
    /// Outcomes the cluster accepted in the measured window.
    outcomes: u64,
    /// Batches acknowledged in the measured window.
    batches: u64,
    /// Their latencies in µs (at most [`SAMPLES_PER_WORKER_MAX`]).
    micros: Vec<u32>,
    /// Failed batches in the measured window, by gRPC code.
    failures: BTreeMap<String, u64>,
}

fn check(bench: &OutcomesBench) -> Result<(), Failure> {
    within("clients", bench.clients as u64, CLIENTS_MAX as u64)?;
    within("batch", bench.batch as u64, BATCH_MAX as u64)?;
    within("tools", bench.tools as u64, TOOLS_MAX as u64)?;
    within("seconds", bench.seconds, SECONDS_MAX)?;
    if bench.warmup_seconds > SECONDS_MAX {
        return Err(Failure::bad_input(format!(
            "--warmup-seconds must be at most {SECONDS_MAX}"
        )));
    }
    Ok(())
}

/// Runs `fusebox bench outcomes`.
pub(crate) async fn run(client: &ClientArgs, bench: OutcomesBench) -> anyhow::Result<()> {
    check(&bench)?;
    let run = format!("{:x}", crate::time_text::now_ms());
    let started = Instant::now();
    let measured_from = started + Duration::from_secs(bench.warmup_seconds);
    let until = measured_from + Duration::from_secs(bench.seconds);
    let done = Arc::new(AtomicU64::new(0));
    let outcomes = Arc::new(batch(&bench));
    let mut workers = tokio::task::JoinSet::new();
    let addresses = Arc::new(client.endpoint_list());
    for w in 0..bench.clients {
        // Connections of its own, starting at the next endpoint in turn.
        let sessions = client.lazy_sessions()?;
        let worker = Worker {
            at: w % sessions.len(),
            sessions,
            addresses: addresses.clone(),
            stay: bench.stay,
            namespace: bench.namespace.clone(),
            replica: format!("bench-{run}-{w}"),
            outcomes: outcomes.clone(),
            measured_from,
            until,
            done: done.clone(),
        };
        workers.spawn(worker.run());
    }
    let json = client.json;
    let progress =
        (!json).then(|| tokio::spawn(progress("outcomes", done.clone(), started, until)));
    tokio::time::sleep_until(measured_from).await;
    let before = scrape_all(&bench.metrics).await;
    let mut tally = Tally::default();
    while let Some(joined) = workers.join_next().await {
        let one = joined.context("a bench worker stopped")?;
        tally.outcomes += one.outcomes;
        tally.batches += one.batches;
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
    report(json, &bench, tally, &server);
    server.read()
}

/// One batch's outcomes: successes spread over the tools in turn, each
/// with the breaker generations it was called under, as the SDK's reporter
/// sends them (0: a breaker that never changed; successes change none).
/// An outcome without them makes the server look them up first, which the
/// SDK never asks for.
fn batch(bench: &OutcomesBench) -> Vec<pb::Outcome> {
    (0..bench.batch)
        .map(|i| pb::Outcome {
            server: "bench-outcomes".into(),
            tool: format!("tool-{}", i % bench.tools),
            class: pb::OutcomeClass::Success as i32,
            duration_ms: 20,
            generation_seen: Some(0),
            server_generation_seen: Some(0),
            ..pb::Outcome::default()
        })
        .collect()
}

/// One replica's load.
struct Worker {
    /// One per endpoint, in the order given.
    sessions: Vec<Session>,
    /// The endpoints, as a leader's address is matched against them.
    addresses: Arc<Vec<String>>,
    /// The endpoint it sends to.
    at: usize,
    /// Whether it keeps to its first endpoint.
    stay: bool,
    namespace: String,
    replica: String,
    outcomes: Arc<Vec<pb::Outcome>>,
    measured_from: Instant,
    until: Instant,
    done: Arc<AtomicU64>,
}

impl Worker {
    async fn run(mut self) -> Tally {
        let mut tally = Tally::default();
        let mut seq = 0u64;
        while Instant::now() < self.until {
            seq += 1;
            let session = &self.sessions[self.at];
            let mut request = tonic::Request::new(pb::ReportOutcomesRequest {
                namespace: self.namespace.clone(),
                meta: session.meta(),
                replica_id: self.replica.clone(),
                batch_seq: seq,
                outcomes: self.outcomes.to_vec(),
            });
            request.set_timeout(CALL_TIMEOUT);
            let began = Instant::now();
            let answer = session.breakers().report_outcomes(request).await;
            let ended = Instant::now();
            let counted = self.measured_from <= ended && ended <= self.until;
            if let (Ok(answer), false) = (&answer, self.stay) {
                self.follow(answer.metadata());
            }
            match answer {
                Ok(answer) if counted => {
                    let accepted = u64::from(answer.into_inner().accepted);
                    tally.outcomes += accepted;
                    tally.batches += 1;
                    self.done.fetch_add(accepted, Ordering::Relaxed);
                    if tally.micros.len() < SAMPLES_PER_WORKER_MAX {
                        let micros = (ended - began).as_micros();
                        tally.micros.push(u32::try_from(micros).unwrap_or(u32::MAX));
                    }
                }
                Ok(_) => {}
                Err(status) => {
                    if counted {
                        let code = format!("{:?}", status.code());
                        *tally.failures.entry(code).or_default() += 1;
                    }
                    tokio::time::sleep(FAILURE_PAUSE).await;
                }
            }
        }
        tally
    }

    /// Goes to the endpoint a forwarded answer names as the leader, as the
    /// SDK does; an answer that names none came from the leader itself.
    fn follow(&mut self, metadata: &tonic::metadata::MetadataMap) {
        if let Some(i) = named_endpoint(&self.addresses, metadata) {
            self.at = i;
        }
    }
}

/// The endpoint of `addresses` an answer names as the leader, a scheme in
/// front or not.
fn named_endpoint(addresses: &[String], metadata: &tonic::metadata::MetadataMap) -> Option<usize> {
    let named = leader_named(metadata)?;
    addresses.iter().position(|a| same_address(a, named))
}

fn report(json: bool, bench: &OutcomesBench, mut tally: Tally, server: &Server) {
    tally.micros.sort_unstable();
    let per_second = tally.outcomes as f64 / bench.seconds as f64;
    let (p50, p99, max) = (
        percentile_ms(&tally.micros, 50),
        percentile_ms(&tally.micros, 99),
        percentile_ms(&tally.micros, 100),
    );
    let per_thousand = server.counted().map(|(before, after)| {
        let thousands = (tally.outcomes.max(1) as f64) / 1000.0;
        (
            (after.cpu_seconds - before.cpu_seconds) * 1000.0 / thousands,
            (after.log_syncs - before.log_syncs) / thousands,
        )
    });
    let failures: u64 = tally.failures.values().sum();
    if json {
        outln!(
            "{}",
            json!({
                "bench": "outcomes",
                "clients": bench.clients,
                "batch": bench.batch,
                "tools": bench.tools,
                "stay": bench.stay,
                "seconds": bench.seconds,
                "outcomes": tally.outcomes,
                "batches": tally.batches,
                "outcomes_per_second": per_second,
                "batch_latency_ms": {"p50": p50, "p99": p99, "max": max},
                "failures": tally.failures,
                "server_cpu_ms_per_1000_outcomes": per_thousand.map(|p| p.0),
                "log_syncs_per_1000_outcomes": per_thousand.map(|p| p.1),
                "server_unread": server.unread(),
            })
        );
        return;
    }
    let route = if bench.stay {
        "each on its first endpoint"
    } else {
        "following the leader"
    };
    outln!(
        "outcome reports: {} replicas ({route}), batches of {} over {} tools, {} s",
        bench.clients,
        bench.batch,
        bench.tools,
        bench.seconds
    );
    outln!(
        "  {} outcomes in {} batches, {per_second:.0} outcomes/s; batch latency p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms",
        tally.outcomes,
        tally.batches
    );
    match per_thousand {
        Some((cpu, syncs)) => outln!(
            "  server (summed over {} nodes): {cpu:.3} ms CPU and {syncs:.3} WAL syncs per 1,000 outcomes",
            bench.metrics.len()
        ),
        None => outln!("{}", server.missing_line("outcome")),
    }
    if failures > 0 {
        outln!("  failed batches: {failures} {:?}", tally.failures);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(clients: usize, batch: usize, tools: usize) -> OutcomesBench {
        OutcomesBench {
            clients,
            batch,
            tools,
            seconds: 1,
            warmup_seconds: 0,
            namespace: "bench".into(),
            stay: false,
            metrics: Vec::new(),
        }
    }

    #[test]
    fn a_worker_follows_a_listed_leader_only() {
        let addresses = ["127.0.0.1:7101".to_owned(), "127.0.0.1:7102".to_owned()];
        let mut metadata = tonic::metadata::MetadataMap::new();
        assert_eq!(named_endpoint(&addresses, &metadata), None);
        fusebox_proto::name_leader(&mut metadata, "127.0.0.1:7102");
        assert_eq!(named_endpoint(&addresses, &metadata), Some(1));
        fusebox_proto::name_leader(&mut metadata, "http://127.0.0.1:7101");
        assert_eq!(named_endpoint(&addresses, &metadata), Some(0));
        fusebox_proto::name_leader(&mut metadata, "fusebox-1.internal:7100");
        assert_eq!(named_endpoint(&addresses, &metadata), None);
    }

    #[test]
    fn a_batch_spreads_successes_over_the_tools() {
        let outcomes = batch(&bench(1, 5, 2));
        let tools: Vec<&str> = outcomes.iter().map(|o| o.tool.as_str()).collect();
        assert_eq!(tools, ["tool-0", "tool-1", "tool-0", "tool-1", "tool-0"]);
        assert!(outcomes
            .iter()
            .all(|o| o.class == pb::OutcomeClass::Success as i32));
    }

    #[test]
    fn out_of_range_runs_are_refused() {
        assert!(check(&bench(16, 100, 64)).is_ok());
        assert!(check(&bench(0, 100, 64)).is_err());
        assert!(check(&bench(16, BATCH_MAX + 1, 64)).is_err());
        assert!(check(&bench(16, 100, 0)).is_err());
    }
}
