//! `fusebox bench soak`: a steady ledger and outcome load that rides out
//! faults, then checks what the cluster acknowledged.
//!
//! Writers begin fresh keys and complete them, as agents guarding
//! non-idempotent writes do. A call whose answer is lost (a node killed,
//! a link cut) is retried on the next node as a *new attempt* on the same
//! key, as another replica that never saw the outcome would retry it: the
//! ledger must then answer that the key is taken, never start it twice.
//! Reporters send numbered outcome batches as replicas do, resending a batch
//! whose answer was lost.
//!
//! The load runs for `--seconds` or until SIGTERM/SIGINT. Then the check:
//! - every key whose Complete was acknowledged is stored as succeeded with
//!   the attempt that completed it, and every key whose Begin was
//!   acknowledged is stored at all (nothing acknowledged was lost);
//! - no key was answered `started` for two attempts;
//! - once every node has applied the same log index, every node lists the
//!   same breakers in the same states.
//!
//! Each call goes to one node, moving to the next on a failure; every
//! endpoint is asked directly (no leader lookup), so the load keeps going
//! while any majority serves. `--timeline` gets one JSON line per second:
//! calls acknowledged and failed, for reading refusals against a fault
//! schedule. The report is one JSON line with `--json`; the exit code is 1
//! when the check found a violation.

use crate::client::{AuthedChannel, ClientArgs, Session};
use crate::failure::Failure;
use crate::out::outln;
use anyhow::Context as _;
use clap::Args;
use fusebox_proto::v1 as pb;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt as _;
use tokio::time::Instant;

/// Longest load.
const SECONDS_MAX: u64 = 24 * 3_600;
/// Most writers or reporters.
const WORKERS_MAX: usize = 1_024;
/// Keys remembered for the check; past it writers stop taking new keys.
const KEYS_MAX: usize = 2_000_000;
/// Attempts on one key before a writer gives it up (each a new attempt id).
const BEGIN_ATTEMPTS_MAX: u32 = 6;
/// Tries to complete a started key before giving it up as unknown.
const COMPLETE_TRIES_MAX: u32 = 20;
/// The deadline of one call during the load.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause after a failed call, so a refusing cluster is not spun on.
const FAILURE_PAUSE: Duration = Duration::from_millis(100);
/// Outcomes per report batch.
const BATCH_OUTCOMES: usize = 40;
/// The pause between one reporter's batches.
const REPORT_PERIOD: Duration = Duration::from_millis(100);
/// Sends of one batch before a reporter moves on to the next.
const REPORT_TRIES_MAX: u32 = 5;
/// Tools the reporters report on; the first always fails, so its breaker
/// trips, the rest mostly succeed.
const TOOLS: usize = 8;
/// Lookups in flight during the check.
const CHECK_CONCURRENCY: usize = 16;
/// Pages of breakers read from one node during the check.
const BREAKER_PAGES_MAX: usize = 1_000;
/// A lease long enough that no started key lapses during a soak's faults.
const LEASE_MS: u64 = 120_000;

/// Flags of `fusebox bench soak`.
#[derive(Args, Debug, Clone)]
pub(crate) struct SoakArgs {
    /// Seconds of load at most (SIGTERM or SIGINT ends it sooner).
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Concurrent ledger writers.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Concurrent outcome reporters, each a replica of its own.
    #[arg(long, default_value_t = 2)]
    reporters: usize,
    /// Namespace the keys and breakers go to.
    #[arg(long, default_value = "soak")]
    namespace: String,
    /// A file to append one JSON line per second of load to.
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// How long the check may wait for every node to answer and agree.
    #[arg(long, default_value_t = 120)]
    settle_seconds: u64,
}

/// Calls acknowledged and failed so far, for the timeline.
#[derive(Default)]
struct Counters {
    writes_ok: AtomicU64,
    writes_failed: AtomicU64,
    reports_ok: AtomicU64,
    reports_failed: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> [u64; 4] {
        [
            &self.writes_ok,
            &self.writes_failed,
            &self.reports_ok,
            &self.reports_failed,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }
}

/// What one key went through, as the writer saw it.
#[derive(Debug, Default)]
struct KeyLog {
    key: String,
    /// Begins sent, each as a new attempt.
    attempts: u32,
    /// Attempts the cluster answered `started`.
    started: Vec<String>,
    /// The attempt whose Complete was acknowledged.
    completed: Option<String>,
}

/// The nodes, one session each, tried in turn.
struct Nodes {
    names: Vec<String>,
    sessions: Vec<Session>,
}

impl Nodes {
    fn ledger(&self, i: usize) -> pb::ledger_client::LedgerClient<AuthedChannel> {
        self.sessions[i % self.sessions.len()].ledger()
    }

    fn breakers(&self, i: usize) -> pb::breakers_client::BreakersClient<AuthedChannel> {
        self.sessions[i % self.sessions.len()].breakers()
    }

    fn meta(&self) -> Option<pb::RequestMeta> {
        self.sessions[0].meta()
    }
}

fn timed<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CALL_TIMEOUT);
    request
}

fn check_args(args: &SoakArgs) -> Result<(), Failure> {
    let within = |name: &str, value: u64, min: u64, max: u64| {
        if value < min || value > max {
            Err(Failure::bad_input(format!(
                "--{name} must be {min} to {max}, got {value}"
            )))
        } else {
            Ok(())
        }
    };
    within("seconds", args.seconds, 1, SECONDS_MAX)?;
    within("writers", args.writers as u64, 1, WORKERS_MAX as u64)?;
    within("reporters", args.reporters as u64, 0, WORKERS_MAX as u64)?;
    within("settle-seconds", args.settle_seconds, 1, SECONDS_MAX)?;
    Ok(())
}

/// Runs `fusebox bench soak`.
pub(crate) async fn run(client: &ClientArgs, args: SoakArgs) -> anyhow::Result<()> {
    check_args(&args)?;
    let nodes = Arc::new(Nodes {
        names: client.endpoint_list(),
        sessions: client.lazy_sessions()?,
    });
    let run = format!("{:x}", crate::time_text::now_ms());
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let keys_left = Arc::new(AtomicU64::new(KEYS_MAX as u64));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..args.writers {
        let (nodes, stop, counters, keys_left) = (
            nodes.clone(),
            stop.clone(),
            counters.clone(),
            keys_left.clone(),
        );
        let (ns, prefix) = (args.namespace.clone(), format!("soak-{run}-{w}"));
        writers.spawn(async move {
            writer(&nodes, &ns, &prefix, w, &stop, &counters, &keys_left).await
        });
    }
    let mut reporters = tokio::task::JoinSet::new();
    for r in 0..args.reporters {
        let (nodes, stop, counters) = (nodes.clone(), stop.clone(), counters.clone());
        let (ns, replica) = (args.namespace.clone(), format!("soak-{run}-r{r}"));
        reporters.spawn(async move { reporter(&nodes, &ns, &replica, r, &stop, &counters).await });
    }
    let timeline = tokio::spawn(timeline(
        args.timeline.clone(),
        counters.clone(),
        stop.clone(),
    ));
    let started = Instant::now();
    tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(args.seconds)) => {}
        () = crate::serve::terminated() => {}
    }
    stop.store(true, Ordering::Relaxed);
    let load_seconds = started.elapsed().as_secs_f64();
    let mut logs = Vec::new();
    while let Some(joined) = writers.join_next().await {
        logs.extend(joined.context("a soak writer stopped")?);
    }
    while let Some(joined) = reporters.join_next().await {
        joined.context("a soak reporter stopped")?;
    }
    timeline.await.context("the soak timeline stopped")??;
    let [writes_ok, writes_failed, reports_ok, reports_failed] = counters.snapshot();
    let deadline = Instant::now() + Duration::from_secs(args.settle_seconds);
    let ledger = check_ledger(&nodes, &args.namespace, logs, deadline).await;
    let breakers = check_breakers(&nodes, &args.namespace, deadline).await;
    let mut violations = ledger.violations.clone();
    violations.extend(breakers.violations.iter().cloned());
    let report = json!({
        "load_seconds": (load_seconds * 10.0).round() / 10.0,
        "writes_acknowledged": writes_ok,
        "writes_failed": writes_failed,
        "reports_acknowledged": reports_ok,
        "reports_failed": reports_failed,
        "keys": ledger.keys,
        "keys_started": ledger.started,
        "keys_completed": ledger.completed,
        "keys_retried": ledger.retried,
        "records_checked": ledger.checked,
        "breakers_compared": breakers.compared,
        "nodes_agree_at_index": breakers.index,
        "violations": violations,
    });
    if client.json {
        outln!("{report}");
    } else {
        outln!(
            "soak: {load_seconds:.0} s of load, {writes_ok} writes acknowledged ({writes_failed} failed), \
             {reports_ok} report batches acknowledged ({reports_failed} failed)"
        );
        outln!(
            "ledger: {} keys, {} started, {} completed, {} retried as a new attempt; {} records checked",
            ledger.keys,
            ledger.started,
            ledger.completed,
            ledger.retried,
            ledger.checked
        );
        outln!(
            "breakers: {} compared on {} nodes at applied index {}",
            breakers.compared,
            nodes.names.len(),
            breakers
                .index
                .map_or_else(|| "(no agreement)".to_owned(), |i| i.to_string())
        );
        for v in &violations {
            outln!("VIOLATION: {v}");
        }
        outln!("{} violations", violations.len());
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(Failure::refused(format!("{} violations", violations.len())).into())
    }
}

/// One writer: fresh keys until told to stop.
async fn writer(
    nodes: &Nodes,
    ns: &str,
    prefix: &str,
    w: usize,
    stop: &AtomicBool,
    counters: &Counters,
    keys_left: &AtomicU64,
) -> Vec<KeyLog> {
    let mut logs = Vec::new();
    let mut node = w;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let taken =
            keys_left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| k.checked_sub(1));
        if taken.is_err() {
            break;
        }
        n += 1;
        let mut log = KeyLog {
            key: format!("{prefix}-{n}"),
            ..KeyLog::default()
        };
        write_key(nodes, ns, &mut log, &mut node, stop, counters).await;
        logs.push(log);
    }
    logs
}

/// Begins `log.key` (a new attempt after each lost answer) and completes it.
async fn write_key(
    nodes: &Nodes,
    ns: &str,
    log: &mut KeyLog,
    node: &mut usize,
    stop: &AtomicBool,
    counters: &Counters,
) {
    for a in 1..=BEGIN_ATTEMPTS_MAX {
        if a > 1 && stop.load(Ordering::Relaxed) {
            return;
        }
        let attempt = format!("{}-a{a}", log.key);
        log.attempts = a;
        let begin = pb::BeginRequest {
            namespace: ns.to_owned(),
            meta: nodes.meta(),
            key: log.key.clone(),
            fingerprint: log.key.as_bytes().to_vec(),
            intent_id: log.key.clone(),
            server: "soak".into(),
            tool: "write".into(),
            target: "soak".into(),
            effect: pb::Effect::NonIdempotentWrite as i32,
            attempt_id: attempt.clone(),
            lease_ms: LEASE_MS,
        };
        match nodes.ledger(*node).begin(timed(begin)).await {
            Ok(answer) => {
                counters.writes_ok.fetch_add(1, Ordering::Relaxed);
                // Any other answer: the key is taken by an attempt whose
                // answer was lost, and done with, as an agent's would be.
                if let Some(pb::begin_response::Outcome::Started(_)) = answer.into_inner().outcome {
                    log.started.push(attempt.clone());
                    complete(nodes, ns, log, attempt, node, counters).await;
                }
                return;
            }
            Err(_) => {
                counters.writes_failed.fetch_add(1, Ordering::Relaxed);
                *node += 1;
                tokio::time::sleep(FAILURE_PAUSE).await;
            }
        }
    }
}

/// Completes a started key as succeeded, retrying the same attempt.
async fn complete(
    nodes: &Nodes,
    ns: &str,
    log: &mut KeyLog,
    attempt: String,
    node: &mut usize,
    counters: &Counters,
) {
    for _ in 0..COMPLETE_TRIES_MAX {
        let request = pb::CompleteRequest {
            namespace: ns.to_owned(),
            meta: nodes.meta(),
            key: log.key.clone(),
            attempt_id: attempt.clone(),
            outcome: Some(pb::complete_request::Outcome::Succeeded(
                pb::CompleteSucceeded {
                    operation_id: attempt.clone(),
                    result: Vec::new(),
                },
            )),
        };
        match nodes.ledger(*node).complete(timed(request)).await {
            Ok(_) => {
                counters.writes_ok.fetch_add(1, Ordering::Relaxed);
                log.completed = Some(attempt);
                return;
            }
            Err(status) => {
                counters.writes_failed.fetch_add(1, Ordering::Relaxed);
                if matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument
                ) {
                    // Refused on its merits: retrying cannot help.
                    return;
                }
                *node += 1;
                tokio::time::sleep(FAILURE_PAUSE).await;
            }
        }
    }
}

/// One reporter: numbered batches, each resent until acknowledged (at most
/// [`REPORT_TRIES_MAX`] sends).
async fn reporter(
    nodes: &Nodes,
    ns: &str,
    replica: &str,
    r: usize,
    stop: &AtomicBool,
    counters: &Counters,
) {
    let mut node = r;
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let outcomes = (0..BATCH_OUTCOMES)
            .map(|i| {
                let tool = i % TOOLS;
                // Tool 0 always fails; the others fail one call in 13.
                let failed = tool == 0 || (seq as usize + i).is_multiple_of(13);
                pb::Outcome {
                    server: "soak".into(),
                    tool: format!("t{tool}"),
                    class: if failed {
                        pb::OutcomeClass::ServerError as i32
                    } else {
                        pb::OutcomeClass::Success as i32
                    },
                    duration_ms: 20,
                    ..pb::Outcome::default()
                }
            })
            .collect::<Vec<_>>();
        for _ in 0..REPORT_TRIES_MAX {
            let request = pb::ReportOutcomesRequest {
                namespace: ns.to_owned(),
                meta: nodes.meta(),
                replica_id: replica.to_owned(),
                batch_seq: seq,
                outcomes: outcomes.clone(),
            };
            if nodes
                .breakers(node)
                .report_outcomes(timed(request))
                .await
                .is_ok()
            {
                counters.reports_ok.fetch_add(1, Ordering::Relaxed);
                break;
            }
            counters.reports_failed.fetch_add(1, Ordering::Relaxed);
            node += 1;
            tokio::time::sleep(FAILURE_PAUSE).await;
        }
        tokio::time::sleep(REPORT_PERIOD).await;
    }
}

/// Appends a line a second to `path`: what was acknowledged and what failed
/// in that second.
async fn timeline(
    path: Option<PathBuf>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let Some(path) = path else {
        return Ok(());
    };
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .await
        .with_context(|| format!("opening --timeline {}", path.display()))?;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last = counters.snapshot();
    loop {
        tick.tick().await;
        let now = counters.snapshot();
        let d = |i: usize| now[i] - last[i];
        let line = json!({
            "t_ms": crate::time_text::now_ms(),
            "writes_ok": d(0),
            "writes_failed": d(1),
            "reports_ok": d(2),
            "reports_failed": d(3),
        });
        file.write_all(format!("{line}\n").as_bytes()).await?;
        file.flush().await?;
        last = now;
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
}

/// What the ledger check found.
#[derive(Default)]
struct LedgerCheck {
    keys: usize,
    started: usize,
    completed: usize,
    retried: usize,
    checked: usize,
    violations: Vec<String>,
}

/// Looks up every key that was started, and checks what was acknowledged.
async fn check_ledger(
    nodes: &Arc<Nodes>,
    ns: &str,
    logs: Vec<KeyLog>,
    deadline: Instant,
) -> LedgerCheck {
    let mut check = LedgerCheck {
        keys: logs.len(),
        ..LedgerCheck::default()
    };
    let mut to_look_up = Vec::new();
    for log in logs {
        check.retried += usize::from(log.attempts > 1);
        if log.started.len() > 1 {
            check.violations.push(format!(
                "key {} was started twice: attempts {:?}",
                log.key, log.started
            ));
        }
        if !log.started.is_empty() {
            check.started += 1;
            check.completed += usize::from(log.completed.is_some());
            to_look_up.push(log);
        }
    }
    let mut lookups = tokio::task::JoinSet::new();
    let mut pending = to_look_up.into_iter().enumerate();
    loop {
        while lookups.len() < CHECK_CONCURRENCY {
            let Some((i, log)) = pending.next() else {
                break;
            };
            let (nodes, ns) = (nodes.clone(), ns.to_owned());
            lookups.spawn(async move {
                let found = look_up(&nodes, &ns, &log.key, i, deadline).await;
                (log, found)
            });
        }
        let Some(joined) = lookups.join_next().await else {
            break;
        };
        let Ok((log, found)) = joined else {
            check.violations.push("a lookup task failed".into());
            continue;
        };
        check.checked += 1;
        if let Some(v) = judge(&log, found) {
            check.violations.push(v);
        }
    }
    check
}

/// What a key's record says against what was acknowledged for it.
fn judge(log: &KeyLog, found: Result<Option<pb::LedgerRecord>, String>) -> Option<String> {
    let key = &log.key;
    let record = match found {
        Err(e) => return Some(format!("key {key}: could not be looked up: {e}")),
        Ok(None) => {
            return Some(format!(
                "key {key}: acknowledged as started, but not stored"
            ))
        }
        Ok(Some(record)) => record,
    };
    let attempt = log.completed.as_ref()?;
    let succeeded = record.status == pb::LedgerStatus::Succeeded as i32;
    if !succeeded || record.operation_id.as_deref() != Some(attempt.as_str()) {
        return Some(format!(
            "key {key}: completion by {attempt} was acknowledged, but the record is {:?} with operation {:?}",
            pb::LedgerStatus::try_from(record.status).unwrap_or_default(),
            record.operation_id
        ));
    }
    None
}

/// Looks `key` up, moving to the next node on a failure, until `deadline`.
async fn look_up(
    nodes: &Nodes,
    ns: &str,
    key: &str,
    mut node: usize,
    deadline: Instant,
) -> Result<Option<pb::LedgerRecord>, String> {
    loop {
        let request = pb::LookupRequest {
            namespace: ns.to_owned(),
            meta: nodes.meta(),
            key: key.to_owned(),
        };
        match nodes.ledger(node).lookup(timed(request)).await {
            Ok(found) => return Ok(found.into_inner().record),
            Err(status) if status.code() == tonic::Code::NotFound => return Ok(None),
            Err(status) if Instant::now() >= deadline => {
                return Err(format!("{:?}: {}", status.code(), status.message()))
            }
            Err(_) => {
                node += 1;
                tokio::time::sleep(FAILURE_PAUSE).await;
            }
        }
    }
}

/// What the breaker check found.
#[derive(Default)]
struct BreakerCheck {
    compared: usize,
    index: Option<u64>,
    violations: Vec<String>,
}

/// Waits for every node to have applied the same index, then compares the
/// breakers each lists from its own state.
async fn check_breakers(nodes: &Nodes, ns: &str, deadline: Instant) -> BreakerCheck {
    let mut last_problem = String::from("no node answered");
    while Instant::now() < deadline {
        match agreeing_views(nodes, ns).await {
            Ok((index, views)) => {
                let mut check = BreakerCheck {
                    compared: views[0].len(),
                    index: Some(index),
                    violations: Vec::new(),
                };
                for (i, view) in views.iter().enumerate().skip(1) {
                    if view != &views[0] {
                        check.violations.push(format!(
                            "at applied index {index}, {} lists breakers other than {}: {} against {}",
                            nodes.names[i],
                            nodes.names[0],
                            summary(view),
                            summary(&views[0])
                        ));
                    }
                }
                return check;
            }
            Err(problem) => last_problem = problem,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    BreakerCheck {
        violations: vec![format!(
            "the nodes never reached the same applied index to compare breakers: {last_problem}"
        )],
        ..BreakerCheck::default()
    }
}

/// One line per breaker: its key, state and generation.
fn summary(views: &[pb::BreakerView]) -> String {
    let lines: Vec<String> = views
        .iter()
        .map(|v| {
            let key = v
                .key
                .as_ref()
                .map(|k| format!("{}/{}", k.server, k.tool.clone().unwrap_or_default()));
            format!("{}={}#{}", key.unwrap_or_default(), v.state, v.generation)
        })
        .collect();
    lines.join(",")
}

/// Every node's breakers, read while every node stood at one applied
/// index (asked before and after the listing); else what differed.
async fn agreeing_views(
    nodes: &Nodes,
    ns: &str,
) -> Result<(u64, Vec<Vec<pb::BreakerView>>), String> {
    let before = applied_indexes(nodes).await?;
    let index = before[0];
    if before.iter().any(|i| *i != index) {
        return Err(format!("applied indexes differ: {before:?}"));
    }
    let mut views = Vec::with_capacity(nodes.sessions.len());
    for i in 0..nodes.sessions.len() {
        views.push(list_breakers(nodes, ns, i).await?);
    }
    let after = applied_indexes(nodes).await?;
    if after != before {
        return Err(format!(
            "applied indexes moved while listing: {before:?} to {after:?}"
        ));
    }
    Ok((index, views))
}

async fn applied_indexes(nodes: &Nodes) -> Result<Vec<u64>, String> {
    let mut indexes = Vec::with_capacity(nodes.sessions.len());
    for (i, session) in nodes.sessions.iter().enumerate() {
        let status = session
            .cluster()
            .status(timed(pb::StatusRequest::default()))
            .await
            .map_err(|s| format!("{}: {:?} {}", nodes.names[i], s.code(), s.message()))?;
        indexes.push(status.into_inner().applied_index);
    }
    Ok(indexes)
}

/// Every breaker node `i` lists from its own applied state.
async fn list_breakers(nodes: &Nodes, ns: &str, i: usize) -> Result<Vec<pb::BreakerView>, String> {
    let mut all = Vec::new();
    let mut token = String::new();
    for _ in 0..BREAKER_PAGES_MAX {
        let request = pb::ListBreakersRequest {
            namespace: ns.to_owned(),
            meta: nodes.meta(),
            page_token: token,
            ..pb::ListBreakersRequest::default()
        };
        let page = nodes
            .breakers(i)
            .list_breakers(timed(request))
            .await
            .map_err(|s| format!("{}: {:?} {}", nodes.names[i], s.code(), s.message()))?
            .into_inner();
        all.extend(page.breakers);
        if page.next_page_token.is_empty() {
            return Ok(all);
        }
        token = page.next_page_token;
    }
    Err(format!(
        "{}: more than {BREAKER_PAGES_MAX} pages of breakers",
        nodes.names[i]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: pb::LedgerStatus, op: Option<&str>) -> pb::LedgerRecord {
        pb::LedgerRecord {
            status: status as i32,
            operation_id: op.map(str::to_owned),
            ..pb::LedgerRecord::default()
        }
    }

    fn log(started: &[&str], completed: Option<&str>) -> KeyLog {
        KeyLog {
            key: "k".into(),
            attempts: 1,
            started: started.iter().map(|s| (*s).to_owned()).collect(),
            completed: completed.map(str::to_owned),
        }
    }

    #[test]
    fn an_acknowledged_completion_must_be_stored_as_it_was_acknowledged() {
        let done = log(&["a1"], Some("a1"));
        assert_eq!(
            judge(
                &done,
                Ok(Some(record(pb::LedgerStatus::Succeeded, Some("a1"))))
            ),
            None
        );
        assert!(judge(&done, Ok(Some(record(pb::LedgerStatus::InProgress, None)))).is_some());
        assert!(judge(
            &done,
            Ok(Some(record(pb::LedgerStatus::Succeeded, Some("a2"))))
        )
        .is_some());
        assert!(judge(&done, Ok(None)).is_some());
        assert!(judge(&done, Err("unavailable".into())).is_some());
    }

    #[test]
    fn a_started_key_must_be_stored_whatever_its_status() {
        let started = log(&["a1"], None);
        assert_eq!(
            judge(
                &started,
                Ok(Some(record(pb::LedgerStatus::Ambiguous, None)))
            ),
            None
        );
        assert!(judge(&started, Ok(None)).is_some());
    }

    #[test]
    fn the_flags_are_bounded() {
        let args = SoakArgs {
            seconds: 0,
            writers: 1,
            reporters: 0,
            namespace: "soak".into(),
            timeline: None,
            settle_seconds: 1,
        };
        assert!(check_args(&args).is_err());
        assert!(check_args(&SoakArgs {
            seconds: 1,
            ..args.clone()
        })
        .is_ok());
        assert!(check_args(&SoakArgs {
            seconds: 1,
            writers: 0,
            ..args
        })
        .is_err());
    }
}
