//! The gateway's own metrics, served as Prometheus text at `/metrics`:
//! calls, refusals, timeouts, retries and ledger answers per server and
//! tool, and the latency the gateway adds to a call.
//!
//! Tool names come from agents, so the series are bounded: past
//! [`TOOLS_TRACKED_MAX`] server and tool pairs, further tools are counted
//! under `tool="_other"`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Most server and tool pairs with series of their own.
pub const TOOLS_TRACKED_MAX: usize = 4096;

/// Upper bounds of the added-latency histogram, in seconds.
const ADDED_BUCKETS: [f64; 12] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// How one `tools/call` through the gateway ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
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

#[derive(Default)]
struct ToolSeries {
    ended: BTreeMap<Ended, u64>,
    retries: u64,
    ledger: BTreeMap<LedgerAnswer, u64>,
    degraded: u64,
}

/// The gateway's counters.
#[derive(Default)]
pub struct GatewayMetrics {
    tools: Mutex<BTreeMap<(String, String), ToolSeries>>,
    added_buckets: [AtomicU64; ADDED_BUCKETS.len()],
    added_count: AtomicU64,
    added_sum_ns: AtomicU64,
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

impl GatewayMetrics {
    /// Counts a finished call.
    pub fn record(&self, call: &CallRecord<'_>) {
        {
            let mut tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
            let mut key = (call.server.to_owned(), call.tool.to_owned());
            if !tools.contains_key(&key) && tools.len() >= TOOLS_TRACKED_MAX {
                key.1 = "_other".to_owned();
            }
            let series = tools.entry(key).or_default();
            *series.ended.entry(call.ended).or_default() += 1;
            series.retries += u64::from(call.retries);
            if let Some(answer) = call.ledger {
                *series.ledger.entry(answer).or_default() += 1;
            }
            series.degraded += u64::from(call.degraded);
        }
        let seconds = call.added.as_secs_f64();
        for (bucket, bound) in self.added_buckets.iter().zip(ADDED_BUCKETS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.added_count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(call.added.as_nanos()).unwrap_or(u64::MAX);
        self.added_sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The Prometheus text exposition, with `extra` lines appended.
    pub fn render(&self, extra: &str) -> String {
        let mut out = String::new();
        let tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
        let families: [(&str, &str, &str); 5] = [
            (
                "fusebox_gateway_calls_total",
                "counter",
                "tools/call requests by how they ended",
            ),
            (
                "fusebox_gateway_rejects_total",
                "counter",
                "calls refused before the upstream (open breaker or on_partition)",
            ),
            (
                "fusebox_gateway_timeouts_total",
                "counter",
                "calls ended by their deadline or budget",
            ),
            (
                "fusebox_gateway_retries_total",
                "counter",
                "attempts sent upstream beyond a call's first",
            ),
            (
                "fusebox_gateway_ledger_answers_total",
                "counter",
                "what the ledger answered writes",
            ),
        ];
        for (name, kind, help) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for ((server, tool), series) in tools.iter() {
                let labels = format!("server=\"{}\",tool=\"{}\"", escape(server), escape(tool));
                match name {
                    "fusebox_gateway_calls_total" => {
                        for (ended, n) in &series.ended {
                            let _ = writeln!(
                                out,
                                "{name}{{{labels},ended=\"{}\"}} {n}",
                                ended.as_str()
                            );
                        }
                    }
                    "fusebox_gateway_rejects_total" => {
                        let n = series.ended.get(&Ended::Refused).copied().unwrap_or(0);
                        let _ = writeln!(out, "{name}{{{labels}}} {n}");
                    }
                    "fusebox_gateway_timeouts_total" => {
                        let n = series.ended.get(&Ended::TimedOut).copied().unwrap_or(0);
                        let _ = writeln!(out, "{name}{{{labels}}} {n}");
                    }
                    "fusebox_gateway_retries_total" => {
                        let _ = writeln!(out, "{name}{{{labels}}} {}", series.retries);
                    }
                    _ => {
                        for (answer, n) in &series.ledger {
                            let _ = writeln!(out, "{name}{{{labels},answer=\"{answer}\"}} {n}");
                        }
                    }
                }
            }
        }
        let name = "fusebox_gateway_degraded_calls_total";
        let _ = writeln!(out, "# HELP {name} calls decided without a fresh view of the cluster (on_partition)\n# TYPE {name} counter");
        let degraded: u64 = tools.values().map(|s| s.degraded).sum();
        let _ = writeln!(out, "{name} {degraded}");
        drop(tools);
        let name = "fusebox_gateway_added_latency_seconds";
        let _ = writeln!(out, "# HELP {name} time a call spent in the gateway, not waiting on the upstream\n# TYPE {name} histogram");
        for (bucket, bound) in self.added_buckets.iter().zip(ADDED_BUCKETS) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.added_count.load(Ordering::Relaxed);
        let sum = self.added_sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_sum {sum}\n{name}_count {count}"
        );
        out.push_str(extra);
        out
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(tool: &'a str, ended: Ended, added_us: u64) -> CallRecord<'a> {
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
    fn calls_are_counted_per_tool_and_added_latency_is_bucketed() {
        let metrics = GatewayMetrics::default();
        metrics.record(&call("lookup", Ended::Answered, 300));
        metrics.record(&call("lookup", Ended::Refused, 50));
        metrics.record(&call("charge", Ended::Ledger, 2_000));
        let text = metrics.render("");
        for line in [
            r#"fusebox_gateway_calls_total{server="vendor",tool="lookup",ended="answered"} 1"#,
            r#"fusebox_gateway_rejects_total{server="vendor",tool="lookup"} 1"#,
            r#"fusebox_gateway_retries_total{server="vendor",tool="lookup"} 2"#,
            r#"fusebox_gateway_ledger_answers_total{server="vendor",tool="charge",answer="replayed"} 1"#,
            r#"fusebox_gateway_added_latency_seconds_bucket{le="0.0001"} 1"#,
            r#"fusebox_gateway_added_latency_seconds_bucket{le="0.0005"} 2"#,
            r#"fusebox_gateway_added_latency_seconds_bucket{le="0.0025"} 3"#,
            "fusebox_gateway_added_latency_seconds_count 3",
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
        let text = metrics.render("");
        assert!(text.contains(r#"tool="_other",ended="answered"} 10"#));
        assert!(!text.contains(&format!("tool=\"t{}\"", TOOLS_TRACKED_MAX + 1)));
    }
}
