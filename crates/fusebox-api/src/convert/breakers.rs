//! Breaker keys, states, views and transitions between wire and core.

use super::name;
use crate::status;
use fusebox_core::breaker::{
    AuditEntry, BreakerKey, BreakerState, BreakerView, Cause, Mode, Phase,
};
use fusebox_core::machine::SharedStateMachine;
use fusebox_core::policy::Trip;
use fusebox_core::{BackendName, Namespace, ServerName, ToolName};
use fusebox_proto::v1 as pb;
use tonic::Status;

/// A request's breaker key: required, in the request's namespace, with a
/// backend only under a tool.
pub fn key_from_proto(
    namespace: &Namespace,
    key: Option<&pb::BreakerKey>,
) -> Result<BreakerKey, Status> {
    let Some(key) = key else {
        return Err(status::invalid_field("key", "must not be empty"));
    };
    if !key.namespace.is_empty() && key.namespace != namespace.as_str() {
        let reason = format!(
            "namespace {:?} differs from the request's namespace {namespace:?}",
            key.namespace
        );
        return Err(status::invalid_argument(
            "key.namespace",
            "same_namespace",
            reason,
        ));
    }
    let server = name("key.server", &key.server, ServerName::new)?;
    let mut core = BreakerKey::server(namespace.clone(), server);
    if let Some(tool) = &key.tool {
        core.tool = Some(name("key.tool", tool, ToolName::new)?);
    }
    if let Some(backend) = &key.backend {
        core.backend = Some(name("key.backend", backend, BackendName::new)?);
    }
    // The rule is the core's (`BreakerKey::check`); the wire names it.
    core.check().map_err(|_| {
        status::invalid_argument(
            "key.backend",
            "needs_tool",
            "a backend narrows a tool breaker; set key.tool too",
        )
    })?;
    Ok(core)
}

/// A core key on the wire.
pub fn key_to_proto(key: &BreakerKey) -> pb::BreakerKey {
    pb::BreakerKey {
        namespace: key.namespace.to_string(),
        server: key.server.to_string(),
        tool: key.tool.as_ref().map(ToString::to_string),
        backend: key.backend.as_ref().map(ToString::to_string),
    }
}

/// A core state on the wire.
pub fn state_to_proto(state: BreakerState) -> pb::BreakerState {
    match state {
        BreakerState::Closed => pb::BreakerState::Closed,
        BreakerState::Open => pb::BreakerState::Open,
        BreakerState::HalfOpen => pb::BreakerState::HalfOpen,
        BreakerState::ForcedOpen => pb::BreakerState::ForcedOpen,
        BreakerState::Disabled => pb::BreakerState::Disabled,
        BreakerState::MetricsOnly => pb::BreakerState::MetricsOnly,
    }
}

/// A state filter from the wire; unspecified and unknown values are refused.
pub fn state_from_proto(field: &str, value: i32) -> Result<BreakerState, Status> {
    match pb::BreakerState::try_from(value) {
        Ok(pb::BreakerState::Closed) => Ok(BreakerState::Closed),
        Ok(pb::BreakerState::Open) => Ok(BreakerState::Open),
        Ok(pb::BreakerState::HalfOpen) => Ok(BreakerState::HalfOpen),
        Ok(pb::BreakerState::ForcedOpen) => Ok(BreakerState::ForcedOpen),
        Ok(pb::BreakerState::Disabled) => Ok(BreakerState::Disabled),
        Ok(pb::BreakerState::MetricsOnly) => Ok(BreakerState::MetricsOnly),
        Ok(pb::BreakerState::Unspecified) | Err(_) => Err(status::invalid_argument(
            field,
            "enum",
            format!("{value} is not a breaker state"),
        )),
    }
}

/// A breaker as replicas need it: the view (from an event or the state)
/// completed with the policy numbers and evidence the state holds now.
pub fn view_to_proto(state: &SharedStateMachine, view: &BreakerView) -> pb::BreakerView {
    let policy = state.breaker_policy(&view.key);
    let breaker = state.breaker(&view.key);
    let audit_last = breaker.and_then(|b| b.audit().last());
    let (successes, reopens) = match breaker.map(|b| b.phase()) {
        Some(Phase::HalfOpen {
            successes, reopens, ..
        }) => (*successes, *reopens),
        Some(Phase::Open { reopens, .. }) => (0, *reopens),
        _ => (0, 0),
    };
    let counts = breaker.map(|b| b.window_counts(&policy, state.now()));
    let window_ms = match &policy.trip {
        Trip::SlidingWindow(w) => w.window_ms,
        Trip::ConsecutiveFailures { .. } => 0,
    };
    pb::BreakerView {
        key: Some(key_to_proto(&view.key)),
        state: state_to_proto(view.state) as i32,
        generation: view.generation,
        open_until_ms: (view.auto_state == BreakerState::Open)
            .then(|| view.open_until.map(|t| t.as_millis()))
            .flatten(),
        automatic_state: state_to_proto(view.auto_state) as i32,
        forced: forced_to_proto(view, breaker.map(|b| b.mode()), breaker),
        operator: hold_to_proto(view, breaker),
        live_probes: view.live_probes,
        concurrent_probes: policy.concurrent_probes.max(1),
        probe_successes: successes,
        probe_successes_needed: policy.probe_successes,
        window: Some(pb::WindowCounts {
            window_ms,
            calls: counts.map_or(0, |c| c.calls),
            failures: counts.map_or(0, |c| c.failures),
            slow_calls: counts.map_or(0, |c| c.slow),
            rate_limited: 0,
            consecutive_failures: breaker.map_or(0, |b| u64::from(b.consecutive_failures())),
            failure_reporters: breaker.map_or(0, |b| {
                u32::try_from(b.reporters().len()).unwrap_or(u32::MAX)
            }),
        }),
        shadow_would_reject: view.would_reject,
        reopen_count: reopens,
        changed_at_ms: audit_last.map_or(0, |e| e.at.as_millis()),
        shadow: view.shadow,
    }
}

fn forced_to_proto(
    view: &BreakerView,
    mode: Option<&Mode>,
    breaker: Option<&fusebox_core::breaker::Breaker>,
) -> Option<pb::ForcedOpen> {
    if view.state != BreakerState::ForcedOpen {
        return None;
    }
    let actor = match mode {
        Some(Mode::ForcedOpen { actor, .. }) => actor.clone(),
        _ => String::new(),
    };
    let since = breaker
        .and_then(|b| {
            b.audit()
                .filter(|e| e.to == BreakerState::ForcedOpen)
                .last()
        })
        .map_or(0, |e| e.at.as_millis());
    Some(pb::ForcedOpen {
        reason: view.reason.clone().unwrap_or_default(),
        actor,
        since_ms: since,
        expires_at_ms: view.open_until.map(|t| t.as_millis()),
    })
}

/// Who holds a breaker disabled or metrics-only, since and until when.
fn hold_to_proto(
    view: &BreakerView,
    breaker: Option<&fusebox_core::breaker::Breaker>,
) -> Option<pb::OperatorHold> {
    let breaker = breaker?;
    let held = matches!(
        breaker.mode(),
        Mode::Disabled { .. } | Mode::MetricsOnly { .. }
    );
    if !held {
        return None;
    }
    let since = breaker
        .audit()
        .filter(|e| matches!(e.cause, Cause::Disabled | Cause::MetricsOnly))
        .last()
        .map_or(0, |e| e.at.as_millis());
    Some(pb::OperatorHold {
        reason: view.reason.clone().unwrap_or_default(),
        actor: view.actor.clone().unwrap_or_default(),
        since_ms: since,
        expires_at_ms: view.operator_until.map(|t| t.as_millis()),
    })
}

/// One audited transition on the wire.
pub fn transition_to_proto(entry: &AuditEntry) -> pb::BreakerTransition {
    let reason = entry.reason.clone().unwrap_or_else(|| summary(entry));
    pb::BreakerTransition {
        at_ms: entry.at.as_millis(),
        generation: entry.generation,
        from_state: state_to_proto(entry.from) as i32,
        to_state: state_to_proto(entry.to) as i32,
        cause: cause_to_proto(&entry.cause) as i32,
        actor: entry.actor.clone().unwrap_or_default(),
        reason,
        evidence: Some(pb::TransitionEvidence {
            calls: entry.evidence.calls,
            failures: entry.evidence.failures,
            slow_calls: entry.evidence.slow_calls,
            consecutive_failures: u64::from(entry.evidence.consecutive_failures),
            reporters: entry
                .evidence
                .reporters
                .iter()
                .map(ToString::to_string)
                .collect(),
        }),
    }
}

fn cause_to_proto(cause: &Cause) -> pb::TransitionCause {
    match cause {
        Cause::ConsecutiveFailures => pb::TransitionCause::ConsecutiveFailures,
        Cause::FailureRatio => pb::TransitionCause::FailureRatio,
        Cause::SlowCallRatio => pb::TransitionCause::SlowCallRatio,
        Cause::OpenElapsed => pb::TransitionCause::OpenElapsed,
        Cause::ProbesSucceeded => pb::TransitionCause::ProbesSucceeded,
        Cause::ProbeFailed => pb::TransitionCause::ProbeFailed,
        Cause::ForceExpired => pb::TransitionCause::ForceExpired,
        Cause::OperatorExpired => pb::TransitionCause::OperatorExpired,
        Cause::ForcedOpen | Cause::Reset | Cause::Disabled | Cause::MetricsOnly => {
            pb::TransitionCause::Operator
        }
    }
}

/// A generated reason for an automatic transition.
fn summary(entry: &AuditEntry) -> String {
    let e = &entry.evidence;
    match entry.cause {
        Cause::ConsecutiveFailures => format!("{} failures in a row", e.consecutive_failures),
        Cause::FailureRatio => format!("{} of {} calls failed in the window", e.failures, e.calls),
        Cause::SlowCallRatio => format!(
            "{} of {} calls were slow in the window",
            e.slow_calls, e.calls
        ),
        Cause::OpenElapsed => "open period ended; probing".to_owned(),
        Cause::ProbesSucceeded => "enough probes succeeded".to_owned(),
        Cause::ProbeFailed => "a probe failed".to_owned(),
        Cause::ForceExpired => "forced-open period expired".to_owned(),
        Cause::OperatorExpired => "disabled or metrics-only period expired".to_owned(),
        Cause::ForcedOpen | Cause::Reset | Cause::Disabled | Cause::MetricsOnly => {
            "operator command".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> Namespace {
        Namespace::new("fleet").unwrap_or_else(|_| unreachable!())
    }

    #[test]
    fn keys_must_stay_in_the_request_namespace() {
        let key = pb::BreakerKey {
            namespace: "other".into(),
            server: "srv".into(),
            ..Default::default()
        };
        let err = key_from_proto(&ns(), Some(&key))
            .err()
            .map(|s| s.message().to_owned());
        assert!(err.unwrap_or_default().contains("key.namespace"));
    }

    #[test]
    fn a_backend_needs_a_tool_and_keys_round_trip() {
        let bad = pb::BreakerKey {
            server: "srv".into(),
            backend: Some("b".into()),
            ..Default::default()
        };
        assert!(key_from_proto(&ns(), Some(&bad)).is_err());
        let good = pb::BreakerKey {
            namespace: "fleet".into(),
            server: "srv".into(),
            tool: Some("t".into()),
            backend: Some("b".into()),
        };
        let core = key_from_proto(&ns(), Some(&good)).ok();
        assert_eq!(core.as_ref().map(key_to_proto), Some(good));
    }
}
