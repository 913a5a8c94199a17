//! Prometheus metrics and the HTTP health endpoints.
//!
//! `/metrics` serves the registry in the OpenMetrics text format; `/healthz`
//! answers 200 while the node runs; `/readyz` answers 200 once the node knows
//! a leader (it can serve writes, by forwarding if need be).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use fusebox_core::breaker::{BreakerState, ProbeAnswer};
use fusebox_core::ledger::{BeginAnswer, CompleteAnswer, ResolveAnswer, Status};
use fusebox_core::machine::Answer;
use fusebox_core::CoreError;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Labels for counters keyed by one word (an answer, a state).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The answer or state.
    pub kind: String,
}

/// Labels for gauges keyed by a state (a breaker's, a record's status).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// The state, by its wire name.
    pub state: String,
}

/// Why requests are refused, as `fusebox_rejects_total` labels them.
const REJECT_REASONS: [&str; 3] = ["probe_denied", "writes_blocked", "command_refused"];

/// Every ledger answer, as `fusebox_ledger_answers_total` labels it.
const LEDGER_ANSWERS: [&str; 12] = [
    "begin_started",
    "begin_in_progress",
    "begin_completed",
    "begin_mismatch",
    "begin_ambiguous",
    "complete_recorded",
    "complete_already_recorded",
    "complete_conflict",
    "complete_not_found",
    "resolve_resolved",
    "resolve_not_ambiguous",
    "resolve_not_found",
];

/// Every breaker state, as `fusebox_breakers` and
/// `fusebox_breaker_transitions_total` label it.
pub const BREAKER_STATES: [BreakerState; 6] = [
    BreakerState::Closed,
    BreakerState::Open,
    BreakerState::HalfOpen,
    BreakerState::ForcedOpen,
    BreakerState::Disabled,
    BreakerState::MetricsOnly,
];

/// Every metric a node exports.
pub struct Metrics {
    registry: Registry,
    /// The Raft term this node is in.
    pub term: Gauge,
    /// The leader's id (0: none known).
    pub leader_id: Gauge,
    /// Highest log index known committed.
    pub commit_index: Gauge,
    /// Highest log index applied to the state machine.
    pub applied_index: Gauge,
    /// Times the leader this node knows changed (to another node or to
    /// none).
    pub leader_changes: Counter,
    /// Breaker transitions applied, by new state.
    pub breaker_transitions: Family<KindLabel, Counter>,
    /// Breakers in this node's applied state, by state (counted every few
    /// seconds).
    pub breakers: Family<StateLabel, Gauge>,
    /// Ledger records still in progress or ambiguous, by status (counted
    /// every few seconds, up to [`crate::limits::LEDGER_CENSUS_MAX`] each).
    pub ledger_records: Family<StateLabel, Gauge>,
    /// Ledger operations, by answer.
    pub ledger_answers: Family<KindLabel, Counter>,
    /// Probe permits granted.
    pub probe_grants: Counter,
    /// Requests the cluster refused: probe permits denied (the breaker is
    /// open or its permits are out), writes blocked by the kill switch,
    /// and other refused commands.
    pub rejects: Family<KindLabel, Counter>,
    /// Time to apply one log entry to the state machine, in seconds.
    pub apply_latency_seconds: Histogram,
    /// Outcomes per report batch.
    pub report_batch_size: Histogram,
    /// Time from proposing a write to its answer, in seconds.
    pub write_latency_seconds: Histogram,
    /// Entries whose stamp jumped further ahead than the state clock may
    /// move at once (a leader's clock stepped, or a forged entry).
    pub clock_jumps: Gauge,
    /// How far the last entry's stamp is ahead of the state clock, in ms
    /// (non-zero while the clock catches up on a jump at a bounded pace).
    pub clock_behind_stamp_seconds: Gauge<f64, AtomicU64>,
    /// CPU time this process has used, user and system, in seconds
    /// (refreshed when scraped; Linux only).
    pub process_cpu_seconds: Counter<f64, AtomicU64>,
    /// WAL syncs made for log appends (refreshed when scraped).
    pub raft_log_syncs: Counter,
    /// Serializes the refresh of the two counters above.
    refresh: Mutex<()>,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every metric registered.
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::with_prefix("fusebox"),
            term: Gauge::default(),
            leader_id: Gauge::default(),
            commit_index: Gauge::default(),
            applied_index: Gauge::default(),
            leader_changes: Counter::default(),
            breaker_transitions: Family::default(),
            breakers: Family::default(),
            ledger_records: Family::default(),
            ledger_answers: Family::default(),
            probe_grants: Counter::default(),
            rejects: Family::default(),
            apply_latency_seconds: Histogram::new(exponential_buckets(0.00001, 2.0, 18)),
            report_batch_size: Histogram::new(exponential_buckets(1.0, 4.0, 8)),
            write_latency_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            clock_jumps: Gauge::default(),
            clock_behind_stamp_seconds: Gauge::default(),
            process_cpu_seconds: Counter::default(),
            raft_log_syncs: Counter::default(),
            refresh: Mutex::new(()),
            ready: AtomicBool::new(false),
        };
        let r = &mut m.registry;
        r.register("raft_term", "Raft term", m.term.clone());
        r.register(
            "raft_leader_id",
            "Leader id (0: unknown)",
            m.leader_id.clone(),
        );
        r.register(
            "raft_commit_index",
            "Committed log index",
            m.commit_index.clone(),
        );
        r.register(
            "raft_applied_index",
            "Applied log index",
            m.applied_index.clone(),
        );
        r.register(
            "breaker_transitions",
            "Breaker transitions by new state",
            m.breaker_transitions.clone(),
        );
        r.register(
            "ledger_answers",
            "Ledger operations by answer",
            m.ledger_answers.clone(),
        );
        r.register(
            "probe_grants",
            "Probe permits granted",
            m.probe_grants.clone(),
        );
        r.register("rejects", "Requests refused, by reason", m.rejects.clone());
        r.register(
            "raft_leader_changes",
            "Times the leader this node knows changed",
            m.leader_changes.clone(),
        );
        r.register(
            "breakers",
            "Breakers in this node's applied state, by state",
            m.breakers.clone(),
        );
        r.register(
            "ledger_records",
            "Ledger records in progress or ambiguous, by status (capped count)",
            m.ledger_records.clone(),
        );
        r.register(
            "clock_jumps",
            "Entry stamps that jumped further ahead than the state clock may move at once",
            m.clock_jumps.clone(),
        );
        r.register(
            "clock_behind_stamp_seconds",
            "How far the last entry stamp is ahead of the state clock",
            m.clock_behind_stamp_seconds.clone(),
        );
        r.register(
            "apply_latency_seconds",
            "Time to apply one log entry",
            m.apply_latency_seconds.clone(),
        );
        r.register(
            "report_batch_size",
            "Outcomes per report batch",
            m.report_batch_size.clone(),
        );
        r.register(
            "write_latency_seconds",
            "Write latency",
            m.write_latency_seconds.clone(),
        );
        r.register(
            "process_cpu_seconds",
            "CPU time this process used, user and system",
            m.process_cpu_seconds.clone(),
        );
        r.register(
            "raft_log_syncs",
            "WAL syncs made for Raft log appends",
            m.raft_log_syncs.clone(),
        );
        // Every labelled series exists from the start at zero, so a
        // dashboard draws a line (and an alert sees a rate) on every node,
        // leader or not, before the first event.
        let kind = |k: &str| KindLabel { kind: k.to_owned() };
        let state = |s: &str| StateLabel {
            state: s.to_owned(),
        };
        for reason in REJECT_REASONS {
            drop(m.rejects.get_or_create(&kind(reason)));
        }
        for answer in LEDGER_ANSWERS {
            drop(m.ledger_answers.get_or_create(&kind(answer)));
        }
        for s in BREAKER_STATES.map(BreakerState::as_str) {
            drop(m.breaker_transitions.get_or_create(&kind(s)));
            drop(m.breakers.get_or_create(&state(s)));
        }
        for status in [Status::InProgress, Status::Ambiguous].map(Status::as_str) {
            drop(m.ledger_records.get_or_create(&state(status)));
        }
        m
    }

    /// Sets a gauge of `family` labelled `state`.
    pub fn set_state(family: &Family<StateLabel, Gauge>, state: &str, value: i64) {
        family
            .get_or_create(&StateLabel {
                state: state.to_owned(),
            })
            .set(value);
    }

    /// Marks the node ready (a leader is known) or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The registry in the OpenMetrics text format.
    pub fn render(&self) -> String {
        self.refresh_process();
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Counts what one applied write tells: its latency, the ledger answer
    /// (each one of a ledger batch), a probe grant, a report batch's size.
    pub fn observe_write(&self, report_batch: Option<usize>, answer: &Answer, seconds: f64) {
        self.write_latency_seconds.observe(seconds);
        if let Some(outcomes) = report_batch {
            self.report_batch_size.observe(outcomes as f64);
        }
        match answer {
            Answer::LedgerBatch(answers) => answers.iter().for_each(|a| self.count_answer(a)),
            one => self.count_answer(one),
        }
    }

    /// Counts one command's answer by kind.
    fn count_answer(&self, answer: &Answer) {
        if let Some(kind) = ledger_answer(answer) {
            Metrics::count(&self.ledger_answers, kind);
        }
        if matches!(answer, Answer::Probe(ProbeAnswer::Granted { .. })) {
            self.probe_grants.inc();
        }
        if let Some(reason) = reject_reason(answer) {
            Metrics::count(&self.rejects, reason);
        }
    }

    /// Brings the process counters up to what the process has used.
    fn refresh_process(&self) {
        let _one_at_a_time = self.refresh.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cpu) = process_cpu_seconds() {
            let behind = cpu - self.process_cpu_seconds.get();
            if behind > 0.0 {
                self.process_cpu_seconds.inc_by(behind);
            }
        }
        let syncs = fusebox_raft_store::wal_syncs();
        let behind = syncs.saturating_sub(self.raft_log_syncs.get());
        if behind > 0 {
            self.raft_log_syncs.inc_by(behind);
        }
    }

    /// Counts a labelled event.
    pub fn count(family: &Family<KindLabel, Counter>, kind: &str) {
        family
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
    }
}

/// User and system CPU time of this process, from `/proc/self/stat`
/// (fields 14 and 15, in ticks of the kernel's USER_HZ, which is 100 on
/// every architecture Fusebox builds for); `None` elsewhere.
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    cpu_seconds_of_stat(&stat)
}

/// The CPU seconds in one `/proc/<pid>/stat` line. The command name (field
/// 2) is in parentheses and may hold spaces, so fields are counted after
/// its closing one.
fn cpu_seconds_of_stat(stat: &str) -> Option<f64> {
    const USER_HZ: f64 = 100.0;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((user + system) as f64 / USER_HZ)
}

/// Why the cluster refused a request, if `answer` is a refusal.
fn reject_reason(answer: &Answer) -> Option<&'static str> {
    match answer {
        Answer::Probe(ProbeAnswer::Denied { .. }) => Some("probe_denied"),
        Answer::Rejected(CoreError::WritesBlocked { .. }) => Some("writes_blocked"),
        Answer::Rejected(_) => Some("command_refused"),
        _ => None,
    }
}

/// The label of a ledger answer, if `answer` is one.
fn ledger_answer(answer: &Answer) -> Option<&'static str> {
    Some(match answer {
        Answer::Begin(BeginAnswer::Started { .. }) => "begin_started",
        Answer::Begin(BeginAnswer::InProgress { .. }) => "begin_in_progress",
        Answer::Begin(BeginAnswer::Completed { .. }) => "begin_completed",
        Answer::Begin(BeginAnswer::Mismatch { .. }) => "begin_mismatch",
        Answer::Begin(BeginAnswer::Ambiguous { .. }) => "begin_ambiguous",
        Answer::Complete(CompleteAnswer::Recorded { .. }) => "complete_recorded",
        Answer::Complete(CompleteAnswer::AlreadyRecorded { .. }) => "complete_already_recorded",
        Answer::Complete(CompleteAnswer::Conflict { .. }) => "complete_conflict",
        Answer::Complete(CompleteAnswer::NotFound) => "complete_not_found",
        Answer::Resolve(ResolveAnswer::Resolved { .. }) => "resolve_resolved",
        Answer::Resolve(ResolveAnswer::NotAmbiguous { .. }) => "resolve_not_ambiguous",
        Answer::Resolve(ResolveAnswer::NotFound) => "resolve_not_found",
        _ => return None,
    })
}

/// The HTTP routes for metrics and health.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(metrics)
}

async fn metrics_page(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.render(),
    )
}

async fn ready(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "no leader known")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_are_read_after_the_command_name() {
        let line = "4242 (fusebox (node) 1) S 1 4242 4242 0 -1 4194560 \
                    900 0 3 0 1234 566 0 0 20 0 9 0 100 0 0";
        assert_eq!(cpu_seconds_of_stat(line), Some(18.0));
        assert_eq!(cpu_seconds_of_stat("4242 (x) S 1 2"), None);
        assert_eq!(cpu_seconds_of_stat("no name here"), None);
    }

    #[test]
    fn a_scrape_shows_the_process_counters() {
        let page = Metrics::new().render();
        assert!(page.contains("process_cpu_seconds_total"), "{page}");
        assert!(page.contains("raft_log_syncs_total"), "{page}");
    }

    #[test]
    fn every_labelled_series_is_there_before_its_first_event() {
        let page = Metrics::new().render();
        for series in [
            "fusebox_rejects_total{kind=\"writes_blocked\"} 0",
            "fusebox_ledger_answers_total{kind=\"begin_ambiguous\"} 0",
            "fusebox_breaker_transitions_total{kind=\"open\"} 0",
            "fusebox_breakers{state=\"forced_open\"} 0",
            "fusebox_ledger_records{state=\"ambiguous\"} 0",
        ] {
            assert!(page.contains(series), "{series} missing from {page}");
        }
        if cfg!(target_os = "linux") {
            assert!(process_cpu_seconds().is_some());
        }
    }
}
