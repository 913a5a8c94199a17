//! The gateway's own metrics, served in the OpenMetrics text format at
//! `/metrics` (with `prometheus-client`, as the server's are): calls,
//! refusals, timeouts, retries and ledger answers per server and tool, the
//! view of the cluster, and the latency the gateway adds to a call.
//!
//! Tool names come from agents, so the series are bounded: past
//! [`TOOLS_TRACKED_MAX`] server and tool pairs, further tools are counted
//! under `tool="_other"`.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Most server and tool pairs with series of their own.
pub const TOOLS_TRACKED_MAX: usize = 4096;

/// How one `tools/call` through the gateway ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The upstream answered and the gate passed the answer on.
    Answered,
    /// Refused before the upstream: an open breaker, or `on_partition`.
    Refused,
    /// The deadline or the budget ran out.
    TimedOut,
    /// The upstream failed (its error result or error is passed on).
    Failed,
    /// The arguments did not fit the tool's `inputSchema`: not sent, and
    /// not counted against the tool.
    InvalidArguments,
    /// The ledger answered instead of the upstream (a replay, a write in
    /// progress or ambiguous, the kill switch).
    Ledger,
    /// Anything else (the agent cancelled, bad arguments, the cluster).
    Other,
}

impl Ended {
    fn as_str(self) -> &'static str {
        match self {
            Ended::Answered => "answered",
            Ended::Refused => "refused",
            Ended::TimedOut => "timed_out",
            Ended::Failed => "failed",
            Ended::InvalidArguments => "invalid_arguments",
            Ended::Ledger => "ledger",
            Ended::Other => "other",
        }
    }
}

/// What the ledger answered a write.
pub type LedgerAnswer = &'static str;

/// A server and tool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    server: String,
    tool: String,
}

/// A server and tool, and a word (how a call ended, a ledger answer).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolKindLabels {
    server: String,
    tool: String,
    kind: String,
}

/// One finished call, as counted.
pub struct CallRecord<'a> {
    /// The upstream's name.
    pub server: &'a str,
    /// The tool's name at the upstream.
    pub tool: &'a str,
    /// How it ended.
    pub ended: Ended,
    /// Attempts sent upstream beyond the first.
    pub retries: u32,
    /// The ledger's answer, for writes.
    pub ledger: Option<LedgerAnswer>,
    /// Decided without a fresh view of the cluster.
    pub degraded: bool,
    /// The time the call spent in the gateway, not waiting on the upstream.
    pub added: Duration,
}

/// The gateway's counters.
pub struct GatewayMetrics {
    registry: Registry,
    calls: Family<ToolKindLabels, Counter>,
    rejects: Family<ToolLabels, Counter>,
    timeouts: Family<ToolLabels, Counter>,
    retries: Family<ToolLabels, Counter>,
    ledger_answers: Family<ToolKindLabels, Counter>,
    degraded_calls: Counter,
    added_latency_seconds: Histogram,
    view_fresh: Gauge,
    view_age_seconds: Gauge,
    /// The server and tool pairs with series of their own.
    tracked: Mutex<HashSet<(String, String)>>,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        let metrics = GatewayMetrics {
            registry: Registry::with_prefix("fusebox_gateway"),
            calls: Family::default(),
            rejects: Family::default(),
            timeouts: Family::default(),
            retries: Family::default(),
            ledger_answers: Family::default(),
            degraded_calls: Counter::default(),
            added_latency_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            view_fresh: Gauge::default(),
            view_age_seconds: Gauge::default(),
            tracked: Mutex::default(),
        };
        metrics.registered()
    }
}

impl GatewayMetrics {
    fn registered(mut self) -> GatewayMetrics {
        let r = &mut self.registry;
        r.register(
            "calls",
            "tools/call requests by how they ended (kind)",
            self.calls.clone(),
        );
        r.register(
            "rejects",
            "calls refused before the upstream (open breaker or on_partition)",
            self.rejects.clone(),
        );
        r.register(
            "timeouts",
            "calls ended by their deadline or budget",
            self.timeouts.clone(),
        );
        r.register(
            "retries",
            "attempts sent upstream beyond a call's first",
            self.retries.clone(),
        );
        r.register(
            "ledger_answers",
            "what the ledger answered writes (kind)",
            self.ledger_answers.clone(),
        );
        r.register(
            "degraded_calls",
            "calls decided without a fresh view of the cluster (on_partition)",
            self.degraded_calls.clone(),
        );
        r.register(
            "added_latency_seconds",
            "time a call spent in the gateway, not waiting on the upstream",
            self.added_latency_seconds.clone(),
        );
        r.register("view_fresh", "1 when calls are decided with a fresh view of the cluster, 0 when on_partition decides", self.view_fresh.clone());
        r.register(
            "view_age_seconds",
            "time since the view last heard from the cluster (heartbeats count)",
            self.view_age_seconds.clone(),
        );
        self
    }

    /// The labels a call is counted under: its own, or `_other` once the
    /// bound is reached.
    fn labels(&self, server: &str, tool: &str) -> ToolLabels {
        let mut tracked = self.tracked.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (server.to_owned(), tool.to_owned());
        let tool = if tracked.contains(&key) {
            key.1
        } else if tracked.len() < TOOLS_TRACKED_MAX {
            tracked.insert(key.clone());
            key.1
        } else {
            "_other".to_owned()
        };
        ToolLabels {
            server: server.to_owned(),
            tool,
        }
    }

    /// Counts a finished call.
    pub fn record(&self, call: &CallRecord<'_>) {
        let labels = self.labels(call.server, call.tool);
        let kind = |kind: &str| ToolKindLabels {
            server: labels.server.clone(),
            tool: labels.tool.clone(),
            kind: kind.to_owned(),
        };
        self.calls.get_or_create(&kind(call.ended.as_str())).inc();
        match call.ended {
            Ended::Refused => {
                self.rejects.get_or_create(&labels).inc();
            }
            Ended::TimedOut => {
                self.timeouts.get_or_create(&labels).inc();
            }
            _ => {}
        }
        if call.retries > 0 {
            self.retries
                .get_or_create(&labels)
                .inc_by(u64::from(call.retries));
        }
        if let Some(answer) = call.ledger {
            self.ledger_answers.get_or_create(&kind(answer)).inc();
        }
        if call.degraded {
            self.degraded_calls.inc();
        }
        self.added_latency_seconds.observe(call.added.as_secs_f64());
    }

    /// Sets the view gauges: fresh or not, and the age of its last event.
    pub fn set_view(&self, fresh: bool, age: Option<Duration>) {
        self.view_fresh.set(i64::from(fresh));
        let age = age.map_or(0, |a| i64::try_from(a.as_secs()).unwrap_or(i64::MAX));
        self.view_age_seconds.set(age);
    }

    /// The registry in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str, ended: Ended, added_us: u64) -> CallRecord<'_> {
        CallRecord {
            server: "vendor",
            tool,
            ended,
            retries: 1,
            ledger: (ended == Ended::Ledger).then_some("replayed"),
            degraded: false,
            added: Duration::from_micros(added_us),
        }
    }

    #[test]
    fn calls_are_counted_per_tool_and_added_latency_is_observed() {
        let metrics = GatewayMetrics::default();
        metrics.record(&call("lookup", Ended::Answered, 300));
        metrics.record(&call("lookup", Ended::Refused, 40));
        metrics.record(&call("charge", Ended::Ledger, 2_000));
        metrics.set_view(true, Some(Duration::from_secs(3)));
        let text = metrics.render();
        for line in [
            r#"fusebox_gateway_calls_total{server="vendor",tool="lookup",kind="answered"} 1"#,
            r#"fusebox_gateway_rejects_total{server="vendor",tool="lookup"} 1"#,
            r#"fusebox_gateway_retries_total{server="vendor",tool="lookup"} 2"#,
            r#"fusebox_gateway_ledger_answers_total{server="vendor",tool="charge",kind="replayed"} 1"#,
            r#"fusebox_gateway_added_latency_seconds_bucket{le="0.00005"} 1"#,
            "fusebox_gateway_added_latency_seconds_count 3",
            "fusebox_gateway_view_fresh 1",
            "fusebox_gateway_view_age_seconds 3",
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
    }

    #[test]
    fn tools_past_the_bound_share_one_series() {
        let metrics = GatewayMetrics::default();
        for i in 0..TOOLS_TRACKED_MAX + 10 {
            metrics.record(&call(&format!("t{i}"), Ended::Answered, 1));
        }
        let text = metrics.render();
        assert!(
            text.contains(r#"tool="_other",kind="answered"} 10"#),
            "{text}"
        );
        assert!(!text.contains(&format!("tool=\"t{}\"", TOOLS_TRACKED_MAX + 1)));
    }
}
