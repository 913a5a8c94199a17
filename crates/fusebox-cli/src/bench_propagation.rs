//! `fusebox bench propagation`: how long a breaker change takes to reach
//! every replica watching the namespace.
//!
//! `--watchers` watch streams are opened, spread over every endpoint given
//! and over connections of at most `--streams-per-connection` streams each,
//! as a fleet's replicas hold them. Once every stream has its snapshot, each
//! of `--rounds` rounds changes the breaker of a fresh tool and times, from
//! the moment the request is sent, its arrival on every stream:
//! - `--change force-open`: an operator's `ForceOpen` (it lapses by itself
//!   after a minute);
//! - `--change trip`: a batch of `--trip-failures` failed outcomes from one
//!   replica, which trips the tool's breaker under the policy in force (the
//!   default trips at four failures in a row).
//!
//! After its rounds the run closes its streams and resets every breaker it
//! changed. Left alone, each would change again when its open period ended
//! or its forced one lapsed, and that change would reach every stream of a
//! later run, queued in front of the changes it times.
//!
//! The run prints the request's latency, the delivery to each stream and
//! the delivery to the last stream of each round (p50, p99, max), and, when
//! `--metrics` names the nodes' metrics listeners, the server CPU time per
//! round summed over those nodes.

use crate::bench_cmd::{percentile_ms, scrape_all, within, Server};
use crate::client::{ClientArgs, Session};
use crate::failure::Failure;
use crate::out::outln;
use clap::{Args, ValueEnum};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::watch_event::Event;
use serde_json::json;
use std::io::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Most watch streams one run may open.
const WATCHERS_MAX: usize = 10_000;
/// Most rounds one run may take.
const ROUNDS_MAX: u32 = 10_000;
/// Most streams one connection may carry (the server's bound is 1,024).
const STREAMS_PER_CONNECTION_MAX: usize = 1_000;
/// How long a change may take to reach every stream before the round
/// counts the missing ones.
const ROUND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long every stream may take to receive its snapshot.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the change request may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a forced-open bench breaker stays open.
const FORCED_FOR_MS: u64 = 60_000;
/// The tool server the bench's breakers are on.
const SERVER: &str = "bench-propagation";

/// What each round changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Change {
    /// An operator forces the breaker open.
    ForceOpen,
    /// Failed outcomes trip the breaker.
    Trip,
}

/// Flags of `fusebox bench propagation`.
#[derive(Args, Debug, Clone)]
pub(crate) struct PropagationBench {
    /// Watch streams, as replicas of the fleet hold them.
    #[arg(long, default_value_t = 16)]
    watchers: usize,
    /// Changes made, one at a time, each on a fresh tool.
    #[arg(long, default_value_t = 20)]
    rounds: u32,
    /// What each round changes.
    #[arg(long, value_enum, default_value_t = Change::ForceOpen)]
    change: Change,
    /// Failed outcomes sent to trip a breaker (`--change trip`).
    #[arg(long, default_value_t = 32)]
    trip_failures: usize,
    /// Streams carried by one connection.
    #[arg(long, default_value_t = 100)]
    streams_per_connection: usize,
    /// Pause between rounds, in ms.
    #[arg(long, default_value_t = 100)]
    pause_ms: u64,
    /// Namespace the breakers are in.
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// The nodes' metrics listeners (`HOST:PORT,...`), for server CPU.
    #[arg(long, value_delimiter = ',')]
    metrics: Vec<String>,
}

fn check(bench: &PropagationBench) -> Result<(), Failure> {
    within("watchers", bench.watchers as u64, WATCHERS_MAX as u64)?;
    within("rounds", u64::from(bench.rounds), u64::from(ROUNDS_MAX))?;
    within(
        "trip-failures",
        bench.trip_failures as u64,
        fusebox_core::limits::BATCH_OUTCOMES_MAX as u64,
    )?;
    within(
        "streams-per-connection",
        bench.streams_per_connection as u64,
        STREAMS_PER_CONNECTION_MAX as u64,
    )?;
    if bench.pause_ms > 60_000 {
        return Err(Failure::bad_input("--pause-ms must be at most 60000"));
    }
    Ok(())
}

/// The round in progress, as the watchers see it.
struct Round {
    /// The tool whose change is awaited; empty between rounds.
    tool: String,
    /// When each stream saw it.
    arrivals: Vec<Option<Instant>>,
    /// How many have.
    arrived: usize,
}

/// What the driver and the watchers share.
struct Shared {
    round: Mutex<Round>,
    /// Streams whose snapshot has arrived.
    ready: Mutex<usize>,
    /// Woken when every stream is ready or has seen the change.
    all_in: Notify,
    watchers: usize,
}

impl Shared {
    fn round(&self) -> std::sync::MutexGuard<'_, Round> {
        self.round.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ready(&self) -> std::sync::MutexGuard<'_, usize> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stream `i` saw `view` change at `at`.
    fn saw(&self, i: usize, view: &pb::BreakerView, at: Instant) {
        let open = [pb::BreakerState::Open, pb::BreakerState::ForcedOpen]
            .iter()
            .any(|s| *s as i32 == view.state);
        let tool = view.key.as_ref().and_then(|k| k.tool.as_deref());
        let mut round = self.round();
        if !open || round.tool.is_empty() || tool != Some(round.tool.as_str()) {
            return;
        }
        if let Some(slot @ None) = round.arrivals.get_mut(i) {
            *slot = Some(at);
            round.arrived += 1;
            if round.arrived == self.watchers {
                self.all_in.notify_waiters();
            }
        }
    }
}

/// What the rounds measured, in µs.
#[derive(Default)]
struct Tally {
    request: Vec<u32>,
    delivery: Vec<u32>,
    last: Vec<u32>,
    /// Stream arrivals that did not come within the round's timeout.
    missed: u64,
    /// Rounds whose change request failed.
    failed: u64,
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Runs `fusebox bench propagation`.
pub(crate) async fn run(client: &ClientArgs, bench: PropagationBench) -> anyhow::Result<()> {
    check(&bench)?;
    let run = format!("{:x}", crate::time_text::now_ms());
    let shared = Arc::new(Shared {
        round: Mutex::new(Round {
            tool: String::new(),
            arrivals: vec![None; bench.watchers],
            arrived: 0,
        }),
        ready: Mutex::new(0),
        all_in: Notify::new(),
        watchers: bench.watchers,
    });
    let mut streams = tokio::task::JoinSet::new();
    let mut connection: Option<Session> = None;
    for i in 0..bench.watchers {
        if i % bench.streams_per_connection == 0 {
            let mut sessions = client.lazy_sessions()?;
            let endpoint = (i / bench.streams_per_connection) % sessions.len();
            connection = Some(sessions.swap_remove(endpoint));
        }
        let Some(session) = connection.as_ref() else {
            unreachable!("a connection is opened at the first stream")
        };
        let request = pb::WatchRequest {
            namespace: bench.namespace.clone(),
            meta: session.meta(),
            from_revision: None,
            replica_id: format!("bench-{run}-watch-{i}"),
        };
        let (mut breakers, shared) = (session.breakers(), shared.clone());
        streams.spawn(async move { watch(i, &mut breakers, request, &shared).await });
    }
    let json = client.json;
    wait_ready(&shared, bench.watchers, json).await?;
    let driver = client.session().await?;
    let before = scrape_all(&bench.metrics).await;
    let mut tally = Tally::default();
    for r in 0..bench.rounds {
        let tool = format!("prop-{run}-{r}");
        {
            let mut round = shared.round();
            round.tool.clone_from(&tool);
            round.arrivals.iter_mut().for_each(|a| *a = None);
            round.arrived = 0;
        }
        let sent = Instant::now();
        let changed = change(&driver, &bench, &tool, &run).await;
        let answered = sent.elapsed();
        if let Err(e) = changed {
            tally.failed += 1;
            if !json {
                eprintln!("  round {r}: the change failed: {e}");
            }
        } else {
            tally.request.push(micros(answered));
            let all = shared.all_in.notified();
            let complete = shared.round().arrived == bench.watchers;
            if !complete {
                let _ = tokio::time::timeout(ROUND_TIMEOUT, all).await;
            }
            let round = shared.round();
            let seen: Vec<u32> = round
                .arrivals
                .iter()
                .flatten()
                .map(|at| micros(at.saturating_duration_since(sent)))
                .collect();
            tally.missed += (bench.watchers - seen.len()) as u64;
            if let Some(last) = seen.iter().max() {
                tally.last.push(*last);
            }
            tally.delivery.extend(seen);
        }
        shared.round().tool.clear();
        if !json {
            eprint!("\r  round {}/{}   ", r + 1, bench.rounds);
            let _ = std::io::stderr().flush();
        }
        tokio::time::sleep(Duration::from_millis(bench.pause_ms)).await;
    }
    if !json {
        eprintln!();
    }
    let after = scrape_all(&bench.metrics).await;
    streams.abort_all();
    reset_all(&driver, &bench, &run, json).await;
    let server = Server::around(before, after);
    report(json, &bench, tally, &server);
    server.read()
}

/// Resets every breaker the rounds changed: each round's tool's and, as
/// failed outcomes count on it too, the server's. A reset that fails is
/// said and skipped; the run's figures stand either way.
async fn reset_all(session: &Session, bench: &PropagationBench, run: &str, json: bool) {
    let tools = (0..bench.rounds).map(|r| Some(format!("prop-{run}-{r}")));
    let server = (bench.change == Change::Trip).then_some(None);
    let mut breakers = session.breakers();
    let mut failed = 0u32;
    for tool in tools.chain(server) {
        let mut request = tonic::Request::new(pb::ResetBreakerRequest {
            namespace: bench.namespace.clone(),
            meta: session.meta(),
            key: Some(pb::BreakerKey {
                namespace: bench.namespace.clone(),
                server: SERVER.into(),
                tool,
                backend: None,
            }),
            actor: "bench".into(),
            reason: "fusebox bench propagation: cleaning up".into(),
            expected_generation: None,
        });
        request.set_timeout(CALL_TIMEOUT);
        if breakers.reset(request).await.is_err() {
            failed += 1;
        }
    }
    if failed > 0 && !json {
        eprintln!(
            "  {failed} of the run's breakers were not reset; they may change during a later run"
        );
    }
}

/// One watch stream: stamps the changes it is waiting for until aborted.
async fn watch(
    i: usize,
    breakers: &mut fusebox_proto::v1::breakers_client::BreakersClient<crate::client::AuthedChannel>,
    request: pb::WatchRequest,
    shared: &Shared,
) -> Result<(), tonic::Status> {
    let mut stream = breakers.watch(request).await?.into_inner();
    let mut ready = false;
    while let Some(event) = stream.message().await? {
        let at = Instant::now();
        match event.event {
            Some(Event::Snapshot(chunk)) if chunk.last_chunk && !ready => {
                ready = true;
                let mut count = shared.ready();
                *count += 1;
                if *count == shared.watchers {
                    shared.all_in.notify_waiters();
                }
            }
            Some(Event::Breaker(view)) => shared.saw(i, &view, at),
            _ => {}
        }
    }
    Ok(())
}

/// Waits until every stream has its snapshot.
async fn wait_ready(shared: &Shared, watchers: usize, json: bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let all = shared.all_in.notified();
        let ready = *shared.ready();
        if ready == watchers {
            if !json {
                eprintln!("  {watchers} watch streams open");
            }
            return Ok(());
        }
        if tokio::time::timeout_at(deadline, all).await.is_err() {
            let message = format!(
                "only {ready} of {watchers} watch streams had a snapshot after {READY_TIMEOUT:?}"
            );
            return Err(Failure::new(crate::failure::ExitKind::Unavailable, message).into());
        }
    }
}

/// Makes round's change on `tool`.
async fn change(
    session: &Session,
    bench: &PropagationBench,
    tool: &str,
    run: &str,
) -> Result<(), tonic::Status> {
    let key = pb::BreakerKey {
        namespace: bench.namespace.clone(),
        server: SERVER.into(),
        tool: Some(tool.to_owned()),
        backend: None,
    };
    let mut breakers = session.breakers();
    match bench.change {
        Change::ForceOpen => {
            let mut request = tonic::Request::new(pb::ForceOpenRequest {
                namespace: bench.namespace.clone(),
                meta: session.meta(),
                key: Some(key),
                reason: "fusebox bench propagation".into(),
                duration_ms: Some(FORCED_FOR_MS),
                actor: "bench".into(),
                expected_generation: None,
            });
            request.set_timeout(CALL_TIMEOUT);
            breakers.force_open(request).await?;
        }
        Change::Trip => {
            let failed = pb::Outcome {
                server: SERVER.into(),
                tool: tool.to_owned(),
                class: pb::OutcomeClass::ToolError as i32,
                duration_ms: 20,
                generation_seen: Some(0),
                server_generation_seen: Some(0),
                ..pb::Outcome::default()
            };
            let mut request = tonic::Request::new(pb::ReportOutcomesRequest {
                namespace: bench.namespace.clone(),
                meta: session.meta(),
                replica_id: format!("bench-{run}-driver"),
                batch_seq: crate::time_text::now_ms(),
                outcomes: vec![failed; bench.trip_failures],
            });
            request.set_timeout(CALL_TIMEOUT);
            breakers.report_outcomes(request).await?;
        }
    }
    Ok(())
}

fn report(json: bool, bench: &PropagationBench, mut tally: Tally, server: &Server) {
    let figures = |samples: &mut Vec<u32>| {
        samples.sort_unstable();
        (
            percentile_ms(samples, 50),
            percentile_ms(samples, 99),
            percentile_ms(samples, 100),
        )
    };
    let request = figures(&mut tally.request);
    let delivery = figures(&mut tally.delivery);
    let last = figures(&mut tally.last);
    let rounds = tally.request.len();
    let cpu_per_round = server.counted().map(|(before, after)| {
        (after.cpu_seconds - before.cpu_seconds) * 1000.0 / rounds.max(1) as f64
    });
    let change = match bench.change {
        Change::ForceOpen => "force-open",
        Change::Trip => "trip",
    };
    if json {
        let ms = |f: (f64, f64, f64)| json!({"p50": f.0, "p99": f.1, "max": f.2});
        outln!(
            "{}",
            json!({
                "bench": "propagation",
                "change": change,
                "watchers": bench.watchers,
                "rounds": rounds,
                "failed_rounds": tally.failed,
                "missed_deliveries": tally.missed,
                "request_ms": ms(request),
                "delivery_ms": ms(delivery),
                "last_watcher_ms": ms(last),
                "server_cpu_ms_per_round": cpu_per_round,
                "server_unread": server.unread(),
            })
        );
        return;
    }
    outln!(
        "propagation of a {change} to {} watch streams, {rounds} rounds",
        bench.watchers
    );
    for (what, f) in [
        ("request", request),
        ("each stream", delivery),
        ("last stream", last),
    ] {
        outln!(
            "  {what:<12} p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            f.0,
            f.1,
            f.2
        );
    }
    if let Some(cpu) = cpu_per_round {
        outln!(
            "  server CPU (summed over {} nodes): {cpu:.2} ms per round",
            bench.metrics.len()
        );
    } else if let Some(line) = server.unread_line() {
        outln!("{line}");
    }
    if tally.missed > 0 || tally.failed > 0 {
        outln!(
            "  {} deliveries missed (not within {ROUND_TIMEOUT:?}), {} changes failed",
            tally.missed,
            tally.failed
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(tool: &str, state: pb::BreakerState) -> pb::BreakerView {
        pb::BreakerView {
            key: Some(pb::BreakerKey {
                server: SERVER.into(),
                tool: Some(tool.into()),
                ..pb::BreakerKey::default()
            }),
            state: state as i32,
            ..pb::BreakerView::default()
        }
    }

    #[test]
    fn only_the_awaited_tool_opening_counts_and_once_per_stream() {
        let shared = Shared {
            round: Mutex::new(Round {
                tool: "t1".into(),
                arrivals: vec![None; 2],
                arrived: 0,
            }),
            ready: Mutex::new(0),
            all_in: Notify::new(),
            watchers: 2,
        };
        let at = Instant::now();
        shared.saw(0, &view("t0", pb::BreakerState::Open), at);
        shared.saw(0, &view("t1", pb::BreakerState::Closed), at);
        assert_eq!(shared.round().arrived, 0);
        shared.saw(0, &view("t1", pb::BreakerState::ForcedOpen), at);
        shared.saw(0, &view("t1", pb::BreakerState::Open), at);
        assert_eq!(shared.round().arrived, 1);
        shared.saw(1, &view("t1", pb::BreakerState::Open), at);
        assert_eq!(shared.round().arrived, 2);
    }
}
