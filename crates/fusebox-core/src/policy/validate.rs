//! Validation of a policy document: every broken rule, with its field path.
//!
//! Each layer (defaults, each server, each tool) is checked on its own fields
//! (ranges, ratios, a trip kind chosen twice, unretryable classes in
//! `retry_on`), then on what it resolves to together with the layers below it
//! (a non-idempotent write that would be retried, a cap below what it caps).
//! A resolved problem is reported at the layer that sets one of the fields
//! involved, so one bad default is reported once and not once per tool.

use super::document::{
    path_key, BreakerOverrides, LatencySettings, LedgerSettings, PolicyDocument, RetryOverrides,
    ToolOverrides,
};
use super::document_resolve::first;
use super::resolved::{BreakerPolicy, EffectClass, RetryPolicy};
use super::PolicyProblem;
use crate::limits::{
    ATTEMPTS_MAX, COUNT_MAX, LEASE_MS_MAX, MINIMUM_CALLS_MAX, OBSERVATION_WINDOW_MS_MAX,
    OBSERVATION_WINDOW_MS_MIN, OBSERVED_WINDOW_BUCKETS, OPEN_MS_MAX, OPEN_MULTIPLIER_MAX,
    POLICY_OVERRIDES_MAX, REPORTERS_TRACKED_MAX, RETENTION_MS_MAX, RETENTION_MS_MIN,
    TIMEOUT_MS_MAX, WINDOW_MS_MAX, WINDOW_MS_MIN,
};
use crate::outcome::OutcomeClass;

impl PolicyDocument {
    /// Lists every problem of the document (empty when it may be applied).
    pub fn validate(&self) -> Vec<PolicyProblem> {
        let mut problems = Problems::default();
        let defaults = &self.defaults;
        check_layer("defaults", defaults, &[defaults], &mut problems);
        for (server, overrides) in &self.servers {
            let server_path = format!("servers.{}", path_key(server.as_str()));
            let settings = overrides.settings();
            check_layer(
                &server_path,
                &settings,
                &[&settings, defaults],
                &mut problems,
            );
            for (tool, tool_layer) in &overrides.tools {
                let path = format!("{server_path}.tools.{}", path_key(tool.as_str()));
                let layers = [tool_layer, &settings, defaults];
                check_layer(&path, tool_layer, &layers, &mut problems);
            }
        }
        check_ledger(&self.ledger, &mut problems);
        check_latency(&self.latency, &mut problems);
        for (field, rule) in super::failover::problems(&self.failover) {
            problems.push(field, rule);
        }
        self.check_override_count(&mut problems);
        problems.list
    }

    fn check_override_count(&self, problems: &mut Problems) {
        let tools: usize = self.servers.values().map(|s| s.tools.len()).sum();
        let sections = self.servers.len().saturating_add(tools);
        if sections > POLICY_OVERRIDES_MAX {
            problems.push(
                "servers",
                format!(
                    "holds {sections} server and tool sections, at most {POLICY_OVERRIDES_MAX} allowed"
                ),
            );
        }
    }
}

/// The problems found so far, in the order the document is walked.
#[derive(Default)]
struct Problems {
    list: Vec<PolicyProblem>,
}

impl Problems {
    fn push(&mut self, field: impl Into<String>, rule: impl Into<String>) {
        self.list.push(PolicyProblem {
            field: field.into(),
            rule: rule.into(),
        });
    }

    /// `prefix.name` must lie in `lo..=hi` when set.
    fn range<V: Into<u64> + Copy>(
        &mut self,
        prefix: &str,
        name: &str,
        value: Option<V>,
        (lo, hi): (u64, u64),
        unit: &str,
    ) {
        let Some(v) = value.map(Into::into) else {
            return;
        };
        if v < lo || v > hi {
            let rule = format!("must be between {lo} and {hi}{unit}, got {v}");
            self.push(format!("{prefix}.{name}"), rule);
        }
    }

    /// `prefix.name` must lie in (0, 1] when set (NaN is refused too).
    fn ratio(&mut self, prefix: &str, name: &str, value: Option<f64>) {
        match value {
            Some(r) if !(r > 0.0 && r <= 1.0) => self.push(
                format!("{prefix}.{name}"),
                format!("must be between 0 (exclusive) and 1 (inclusive), got {r}"),
            ),
            _ => {}
        }
    }
}

fn check_layer(path: &str, own: &ToolOverrides, layers: &[&ToolOverrides], p: &mut Problems) {
    p.range(
        path,
        "timeout_ms",
        own.timeout_ms,
        (1, TIMEOUT_MS_MAX),
        " ms",
    );
    p.range(
        path,
        "stalled_after_ms",
        own.stalled_after_ms,
        (1, TIMEOUT_MS_MAX),
        " ms",
    );
    check_retry(&format!("{path}.retry"), &own.retry, p);
    check_breaker(&format!("{path}.breaker"), &own.breaker, p);
    for (field, rule) in own.classify.problems(&format!("{path}.classify")) {
        p.push(field, rule);
    }
    check_resolved(path, own, layers, p);
}

fn check_retry(prefix: &str, retry: &RetryOverrides, p: &mut Problems) {
    p.range(
        prefix,
        "max_attempts",
        retry.max_attempts,
        (1, ATTEMPTS_MAX),
        "",
    );
    let backoff = (0, TIMEOUT_MS_MAX);
    p.range(
        prefix,
        "backoff_initial_ms",
        retry.backoff_initial_ms,
        backoff,
        " ms",
    );
    p.range(
        prefix,
        "backoff_max_ms",
        retry.backoff_max_ms,
        backoff,
        " ms",
    );
    let classes = retry.retry_on.as_deref().unwrap_or(&[]);
    for (i, class) in classes.iter().enumerate() {
        if !class.is_retryable() {
            let retryable: Vec<&str> = OutcomeClass::ALL
                .iter()
                .filter(|c| c.is_retryable())
                .map(|c| c.as_str())
                .collect();
            let rule = format!(
                "`{}` is never retried automatically; only {} may be listed",
                class.as_str(),
                retryable.join(", ")
            );
            p.push(format!("{prefix}.retry_on"), rule);
        } else if classes[..i].contains(class) {
            let rule = format!("`{}` is listed more than once", class.as_str());
            p.push(format!("{prefix}.retry_on"), rule);
        }
    }
}

fn check_breaker(prefix: &str, b: &BreakerOverrides, p: &mut Problems) {
    let count = (1, COUNT_MAX);
    p.range(
        prefix,
        "consecutive_failures",
        b.consecutive_failures,
        count,
        "",
    );
    let window = (WINDOW_MS_MIN, WINDOW_MS_MAX);
    p.range(prefix, "window_ms", b.window_ms, window, " ms");
    let calls = (1, MINIMUM_CALLS_MAX);
    p.range(prefix, "minimum_calls", b.minimum_calls, calls, "");
    p.ratio(prefix, "failure_ratio", b.failure_ratio);
    p.range(
        prefix,
        "slow_call_ms",
        b.slow_call_ms,
        (1, TIMEOUT_MS_MAX),
        " ms",
    );
    p.ratio(prefix, "slow_call_ratio", b.slow_call_ratio);
    // A breaker remembers at most REPORTERS_TRACKED_MAX reporters: a higher
    // threshold could never be met and the breaker would never open.
    let reporters = (1, COUNT_MAX.min(REPORTERS_TRACKED_MAX as u64));
    p.range(prefix, "min_reporters", b.min_reporters, reporters, "");
    p.range(prefix, "open_ms", b.open_ms, (1, OPEN_MS_MAX), " ms");
    let multiplier = (1, OPEN_MULTIPLIER_MAX);
    p.range(
        prefix,
        "open_backoff_multiplier",
        b.open_backoff_multiplier,
        multiplier,
        "",
    );
    p.range(
        prefix,
        "open_ms_max",
        b.open_ms_max,
        (1, OPEN_MS_MAX),
        " ms",
    );
    p.range(prefix, "concurrent_probes", b.concurrent_probes, count, "");
    p.range(prefix, "probe_successes", b.probe_successes, count, "");
    p.range(
        prefix,
        "probe_lease_ms",
        b.probe_lease_ms,
        (1, LEASE_MS_MAX),
        " ms",
    );
    if b.consecutive_failures.is_some() && b.sets_window() {
        p.push(
            format!("{prefix}.consecutive_failures"),
            "cannot be set together with window fields (window_ms, minimum_calls, \
             failure_ratio, slow_call_ms, slow_call_ratio) in one section; choose one trip",
        );
    }
}

/// Checks what `own` resolves to over `layers` (most specific first, `own`
/// first), reporting only problems to which `own` contributes a field.
fn check_resolved(path: &str, own: &ToolOverrides, layers: &[&ToolOverrides], p: &mut Problems) {
    check_write_retries(path, own, layers, p);
    check_backoff_cap(path, own, layers, p);
    check_open_cap(path, own, layers, p);
}

/// A non-idempotent write is never retried automatically (the operations runbook: a write whose outcome is unknown is looked up, never re-sent).
fn check_write_retries(
    path: &str,
    own: &ToolOverrides,
    layers: &[&ToolOverrides],
    p: &mut Problems,
) {
    if own.effect.is_none() && own.retry.max_attempts.is_none() {
        return;
    }
    let effect = first(layers, |l| l.effect).unwrap_or(EffectClass::ReadOnly);
    let attempts = first(layers, |l| l.retry.max_attempts).unwrap_or(1);
    if effect == EffectClass::NonIdempotentWrite && attempts > 1 {
        let rule = format!(
            "non-idempotent writes are never retried automatically; \
             set max_attempts = 1 (resolves to {attempts})"
        );
        p.push(format!("{path}.retry.max_attempts"), rule);
    }
}

fn check_backoff_cap(path: &str, own: &ToolOverrides, layers: &[&ToolOverrides], p: &mut Problems) {
    if own.retry.backoff_initial_ms.is_none() && own.retry.backoff_max_ms.is_none() {
        return;
    }
    let initial = first(layers, |l| l.retry.backoff_initial_ms)
        .unwrap_or(RetryPolicy::default().backoff_initial_ms);
    if let Some(cap) = first(layers, |l| l.retry.backoff_max_ms).filter(|cap| *cap < initial) {
        let rule = format!("must be at least backoff_initial_ms ({initial}), got {cap}");
        p.push(format!("{path}.retry.backoff_max_ms"), rule);
    }
}

fn check_open_cap(path: &str, own: &ToolOverrides, layers: &[&ToolOverrides], p: &mut Problems) {
    if own.breaker.open_ms.is_none() && own.breaker.open_ms_max.is_none() {
        return;
    }
    let open_ms =
        first(layers, |l| l.breaker.open_ms).unwrap_or(BreakerPolicy::default().open.open_ms);
    if let Some(cap) = first(layers, |l| l.breaker.open_ms_max).filter(|cap| *cap < open_ms) {
        let rule = format!("must be at least open_ms ({open_ms}), got {cap}");
        p.push(format!("{path}.breaker.open_ms_max"), rule);
    }
}

fn check_ledger(ledger: &LedgerSettings, p: &mut Problems) {
    let retention = (RETENTION_MS_MIN, RETENTION_MS_MAX);
    p.range(
        "ledger",
        "retention_ms",
        ledger.retention_ms,
        retention,
        " ms",
    );
}

fn check_latency(latency: &LatencySettings, p: &mut Problems) {
    let window = (OBSERVATION_WINDOW_MS_MIN, OBSERVATION_WINDOW_MS_MAX);
    p.range("latency", "window_ms", latency.window_ms, window, " ms");
    let buckets = OBSERVED_WINDOW_BUCKETS as u64;
    if let Some(w) = latency.window_ms.filter(|w| !w.is_multiple_of(buckets)) {
        let rule = format!("must be a multiple of {buckets} (its buckets), got {w}");
        p.push("latency.window_ms".to_string(), rule);
    }
}
