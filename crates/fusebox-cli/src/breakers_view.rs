//! Breakers and their audit trail as tables, field lists and JSON.
//!
//! Names of states and causes are the proto enum names shortened and in
//! lower case (`forced_open`, `consecutive_failures`), the same in tables
//! and JSON, so what an operator reads is what a script matches on.

use crate::known::key_text;
use crate::table::{or_dash, Table};
use crate::time_text::{instant, instant_from, span};
use fusebox_core::policy::{BreakerPolicy, ToolPolicy, Trip};
use fusebox_proto::v1 as pb;
use serde_json::{json, Value};

/// A breaker state's short name.
pub fn state_name(state: i32) -> &'static str {
    match pb::BreakerState::try_from(state) {
        Ok(pb::BreakerState::Closed) => "closed",
        Ok(pb::BreakerState::Open) => "open",
        Ok(pb::BreakerState::HalfOpen) => "half_open",
        Ok(pb::BreakerState::ForcedOpen) => "forced_open",
        Ok(pb::BreakerState::Disabled) => "disabled",
        Ok(pb::BreakerState::MetricsOnly) => "metrics_only",
        _ => "unknown",
    }
}

/// A transition cause's short name.
pub fn cause_name(cause: i32) -> &'static str {
    match pb::TransitionCause::try_from(cause) {
        Ok(pb::TransitionCause::ConsecutiveFailures) => "consecutive_failures",
        Ok(pb::TransitionCause::FailureRatio) => "failure_ratio",
        Ok(pb::TransitionCause::SlowCallRatio) => "slow_call_ratio",
        Ok(pb::TransitionCause::OpenElapsed) => "open_elapsed",
        Ok(pb::TransitionCause::ProbesSucceeded) => "probes_succeeded",
        Ok(pb::TransitionCause::ProbeFailed) => "probe_failed",
        Ok(pb::TransitionCause::Operator) => "operator",
        Ok(pb::TransitionCause::ForceExpired) => "force_expired",
        Ok(pb::TransitionCause::OperatorExpired) => "operator_expired",
        Ok(pb::TransitionCause::PolicyChanged) => "policy_changed",
        _ => "unknown",
    }
}

/// The state as a table shows it: `open (shadow)` when it is not enforced.
fn state_cell(v: &pb::BreakerView) -> String {
    let name = state_name(v.state);
    if v.shadow && v.state != pb::BreakerState::MetricsOnly as i32 {
        format!("{name} (shadow)")
    } else {
        name.to_owned()
    }
}

fn key_of(v: &pb::BreakerView) -> String {
    v.key.as_ref().map_or_else(|| "?".to_owned(), key_text)
}

/// One breaker as JSON.
pub fn view_json(v: &pb::BreakerView) -> Value {
    let key = v.key.clone().unwrap_or_default();
    let window = v.window.unwrap_or_default();
    let forced = v.forced.as_ref().map(|f| {
        json!({"reason": f.reason, "actor": f.actor, "since_ms": f.since_ms,
               "expires_at_ms": f.expires_at_ms})
    });
    let held = v.operator.as_ref().map(|o| {
        json!({"reason": o.reason, "actor": o.actor, "since_ms": o.since_ms,
               "expires_at_ms": o.expires_at_ms})
    });
    json!({
        "key": key_text(&key), "namespace": key.namespace, "server": key.server,
        "tool": key.tool, "backend": key.backend,
        "state": state_name(v.state), "automatic_state": state_name(v.automatic_state),
        "shadow": v.shadow, "generation": v.generation,
        "open_until_ms": v.open_until_ms, "forced": forced, "operator": held,
        "probes": {"live": v.live_probes, "max": v.concurrent_probes,
                   "successes": v.probe_successes, "successes_needed": v.probe_successes_needed},
        "window": {"window_ms": window.window_ms, "calls": window.calls,
                   "failures": window.failures, "slow_calls": window.slow_calls,
                   "rate_limited": window.rate_limited,
                   "consecutive_failures": window.consecutive_failures,
                   "failure_reporters": window.failure_reporters},
        "shadow_would_reject": v.shadow_would_reject,
        "reopen_count": v.reopen_count, "changed_at_ms": v.changed_at_ms,
    })
}

/// When a breaker admits calls again, if it is out.
fn until_cell(v: &pb::BreakerView, now: u64) -> String {
    let until = v
        .open_until_ms
        .or_else(|| v.forced.as_ref().and_then(|f| f.expires_at_ms));
    match (until, v.state == pb::BreakerState::ForcedOpen as i32) {
        (Some(ms), _) => instant_from(ms, now),
        (None, true) => "until reset".to_owned(),
        (None, false) => "-".to_owned(),
    }
}

/// The listing table; shadow breakers show what they would have rejected.
pub fn list_table(views: &[pb::BreakerView], now: u64) -> Table {
    let mut table = Table::new(&[
        "BREAKER",
        "STATE",
        "GEN",
        "CALLS",
        "FAILURES",
        "IN-A-ROW",
        "REPORTERS",
        "PROBES",
        "WOULD-REJECT",
        "OPEN-UNTIL",
    ]);
    for v in views {
        let w = v.window.unwrap_or_default();
        let would_reject = if v.shadow || v.shadow_would_reject > 0 {
            v.shadow_would_reject.to_string()
        } else {
            "-".to_owned()
        };
        table.row(vec![
            key_of(v),
            state_cell(v),
            v.generation.to_string(),
            w.calls.to_string(),
            w.failures.to_string(),
            w.consecutive_failures.to_string(),
            w.failure_reporters.to_string(),
            format!("{}/{}", v.live_probes, v.concurrent_probes),
            would_reject,
            until_cell(v, now),
        ]);
    }
    table
}

/// The breaker's own fields for `breakers show`.
pub fn view_fields(v: &pb::BreakerView, now: u64) -> Vec<(&'static str, String)> {
    let w = v.window.unwrap_or_default();
    let window = if w.window_ms > 0 {
        format!("last {}", span(w.window_ms))
    } else {
        "since the last change".to_owned()
    };
    let mut fields = vec![
        ("breaker", key_of(v)),
        ("state", state_cell(v)),
        ("generation", v.generation.to_string()),
        ("changed", instant_from(v.changed_at_ms, now)),
        (
            "counts",
            format!(
                "{window}: {} calls, {} failures, {} slow, {} rate-limited, {} failures in a row",
                w.calls, w.failures, w.slow_calls, w.rate_limited, w.consecutive_failures
            ),
        ),
        (
            "reporters",
            format!(
                "{} replica(s) behind the current failures",
                w.failure_reporters
            ),
        ),
        ("open until", until_cell(v, now)),
        (
            "probes",
            format!(
                "{} of {} permits out; {} of {} successes to close",
                v.live_probes, v.concurrent_probes, v.probe_successes, v.probe_successes_needed
            ),
        ),
        ("reopens", v.reopen_count.to_string()),
    ];
    if let Some(f) = &v.forced {
        let since = instant_from(f.since_ms, now);
        fields.push((
            "forced by",
            format!("{} since {since}: {}", f.actor, f.reason),
        ));
    }
    if let Some(o) = &v.operator {
        let since = instant_from(o.since_ms, now);
        let until = o.expires_at_ms.map_or_else(
            || "until reset".to_owned(),
            |at| format!("until {}", instant_from(at, now)),
        );
        fields.push((
            "held by",
            format!(
                "{} since {since}, {until}: {}; its own evidence says {}",
                o.actor,
                o.reason,
                state_name(v.automatic_state)
            ),
        ));
    }
    if v.shadow || v.shadow_would_reject > 0 {
        let note = "calls it would have rejected (shadow: it rejects nothing)";
        fields.push(("would reject", format!("{} {note}", v.shadow_would_reject)));
    }
    fields
}

/// The policy in force for a breaker, resolved from the namespace's
/// document: the tool's policy for a tool breaker, the server breaker's
/// settings for a server breaker.
pub struct PolicyInForce {
    /// The version it comes from; `None` for the built-in defaults.
    pub version: Option<u64>,
    /// The resolved tool policy, for a tool breaker.
    pub tool: Option<ToolPolicy>,
    /// The resolved breaker settings.
    pub breaker: BreakerPolicy,
}

impl PolicyInForce {
    /// As JSON (the core's own serialization of the resolved values).
    pub fn to_json(&self) -> Value {
        json!({
            "version": self.version,
            "tool": self.tool.as_ref().and_then(|t| serde_json::to_value(t).ok()),
            "breaker": serde_json::to_value(&self.breaker).ok(),
        })
    }

    /// As lines for `breakers show`.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let source = self.version.map_or_else(
            || "built-in defaults (no policy applied)".to_owned(),
            |v| format!("v{v}"),
        );
        let b = &self.breaker;
        let trip = match &b.trip {
            Trip::ConsecutiveFailures { failures } => format!("{failures} failures in a row"),
            Trip::SlidingWindow(w) => format!(
                "{:.0}% of at least {} calls fail in {} (slow: {} at {:.0}%)",
                w.failure_ratio * 100.0,
                w.minimum_calls,
                span(w.window_ms),
                or_dash(w.slow_call_ms.map(|ms| format!("{ms}ms"))),
                w.slow_call_ratio * 100.0
            ),
        };
        let mut fields = vec![
            ("policy", source),
            (
                "trips on",
                format!("{trip}, seen by at least {} replica(s)", b.min_reporters),
            ),
            (
                "stays open",
                format!(
                    "{} (up to {})",
                    span(b.open.open_ms),
                    span(b.open.open_ms_max)
                ),
            ),
            ("shadow", b.shadow.to_string()),
        ];
        if let Some(t) = &self.tool {
            fields.push(("effect", t.effect.as_str().to_owned()));
            fields.push(("timeout", format!("{}ms", t.timeout_ms)));
            fields.push((
                "retry",
                format!("at most {} attempt(s)", t.retry.max_attempts),
            ));
        }
        fields
    }
}

/// One audited transition as JSON.
pub fn transition_json(t: &pb::BreakerTransition) -> Value {
    let e = t.evidence.clone().unwrap_or_default();
    json!({
        "at_ms": t.at_ms, "generation": t.generation,
        "from": state_name(t.from_state), "to": state_name(t.to_state),
        "cause": cause_name(t.cause), "actor": t.actor, "reason": t.reason,
        "evidence": {"calls": e.calls, "failures": e.failures, "slow_calls": e.slow_calls,
                     "consecutive_failures": e.consecutive_failures, "reporters": e.reporters},
    })
}

/// The audit trail, newest first.
pub fn history_table(transitions: &[pb::BreakerTransition]) -> Table {
    let mut table = Table::new(&[
        "AT", "GEN", "FROM", "TO", "CAUSE", "BY", "EVIDENCE", "REASON",
    ]);
    for t in transitions {
        let e = t.evidence.clone().unwrap_or_default();
        let reporters = if e.reporters.is_empty() {
            String::new()
        } else {
            format!(" from {}", e.reporters.join(","))
        };
        let evidence = format!(
            "{} calls, {} failures, {} in a row{reporters}",
            e.calls, e.failures, e.consecutive_failures
        );
        let by = if t.actor.is_empty() {
            "fusebox".to_owned()
        } else {
            t.actor.clone()
        };
        table.row(vec![
            instant(t.at_ms),
            t.generation.to_string(),
            state_name(t.from_state).to_owned(),
            state_name(t.to_state).to_owned(),
            cause_name(t.cause).to_owned(),
            by,
            evidence,
            t.reason.clone(),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shadow_view() -> pb::BreakerView {
        pb::BreakerView {
            key: Some(pb::BreakerKey {
                namespace: "agents".into(),
                server: "search".into(),
                tool: Some("web".into()),
                backend: None,
            }),
            state: pb::BreakerState::Open as i32,
            generation: 1,
            shadow: true,
            shadow_would_reject: 7,
            concurrent_probes: 1,
            ..Default::default()
        }
    }

    #[test]
    fn a_shadow_breaker_lists_what_it_would_have_rejected() {
        let text = list_table(&[shadow_view()], 0).render();
        let row = text.lines().nth(1).unwrap_or_default();
        assert!(row.starts_with("agents/search/web  open (shadow)"), "{row}");
        let json = view_json(&shadow_view());
        assert_eq!(json["shadow_would_reject"], 7);
        assert_eq!(json["state"], "open");
        assert_eq!(json["shadow"], true);
    }

    #[test]
    fn an_enforcing_breaker_shows_no_would_reject_count() {
        let view = pb::BreakerView {
            shadow: false,
            shadow_would_reject: 0,
            ..shadow_view()
        };
        let text = list_table(&[view], 0).render();
        let cells: Vec<&str> = text
            .lines()
            .nth(1)
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(cells[1], "open");
        assert_eq!(cells[8], "-");
    }

    #[test]
    fn operator_transitions_name_who_and_why() {
        let t = pb::BreakerTransition {
            at_ms: 1_700_000_000_000,
            generation: 2,
            from_state: pb::BreakerState::Closed as i32,
            to_state: pb::BreakerState::ForcedOpen as i32,
            cause: pb::TransitionCause::Operator as i32,
            actor: "alice".into(),
            reason: "deploy freeze".into(),
            evidence: None,
        };
        let text = history_table(std::slice::from_ref(&t)).render();
        assert!(text.contains("forced_open  operator  alice"), "{text}");
        assert!(text.ends_with("deploy freeze"), "{text}");
        assert_eq!(transition_json(&t)["actor"], "alice");
    }
}
