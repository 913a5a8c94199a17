//! Between the wire (`fusebox.v1`) and the core's types, for the few values
//! the gate decides on locally.

use crate::tool::ToolRef;
use fusebox_core::breaker::{BreakerKey, BreakerState, BreakerView};
use fusebox_core::disclosure::LatencyDisclosure;
use fusebox_core::limits::DISCLOSURE_BLOCK_BYTES_MAX;
use fusebox_core::policy::{EffectClass, PolicyDocument, PolicyFormat, Scope};
use fusebox_core::{BackendName, Namespace, OutcomeClass, ServerName, Timestamp, ToolName};
use fusebox_proto::v1 as pb;

/// A breaker state from the wire; unspecified or unknown values are `None`.
pub(crate) fn state_from_proto(value: i32) -> Option<BreakerState> {
    match pb::BreakerState::try_from(value).ok()? {
        pb::BreakerState::Closed => Some(BreakerState::Closed),
        pb::BreakerState::Open => Some(BreakerState::Open),
        pb::BreakerState::HalfOpen => Some(BreakerState::HalfOpen),
        pb::BreakerState::ForcedOpen => Some(BreakerState::ForcedOpen),
        pb::BreakerState::Disabled => Some(BreakerState::Disabled),
        pb::BreakerState::MetricsOnly => Some(BreakerState::MetricsOnly),
        pb::BreakerState::Unspecified => None,
    }
}

/// A breaker key from the wire, in `namespace`; `None` when a name breaks
/// the core's rules (a server never sends one).
pub(crate) fn key_from_proto(namespace: &Namespace, key: &pb::BreakerKey) -> Option<BreakerKey> {
    let mut core = BreakerKey::server(namespace.clone(), ServerName::new(&key.server).ok()?);
    if let Some(tool) = &key.tool {
        core.tool = Some(ToolName::new(tool).ok()?);
    }
    if let Some(backend) = &key.backend {
        core.backend = Some(BackendName::new(backend).ok()?);
    }
    Some(core)
}

/// A core key on the wire.
pub(crate) fn key_to_proto(key: &BreakerKey) -> pb::BreakerKey {
    pb::BreakerKey {
        namespace: key.namespace.to_string(),
        server: key.server.to_string(),
        tool: key.tool.as_ref().map(ToString::to_string),
        backend: key.backend.as_ref().map(ToString::to_string),
    }
}

/// The breaker a call on `tool` is admitted under ([`BreakerKey::for_call`]).
pub(crate) fn tool_key(namespace: &Namespace, tool: &ToolRef, scope: Scope) -> BreakerKey {
    let backend = tool.backend.as_ref();
    BreakerKey::for_call(namespace, &tool.server, &tool.tool, backend, scope)
}

/// A breaker view from the wire as the core's admission rule reads it.
///
/// The wire shows the state in force; the automatic phase is the same
/// except under operator modes, where the core's rule does not read it
/// (forced open and disabled decide alone; metrics-only never rejects).
pub(crate) fn view_from_proto(
    namespace: &Namespace,
    view: &pb::BreakerView,
) -> Option<BreakerView> {
    let key = key_from_proto(namespace, view.key.as_ref()?)?;
    let state = state_from_proto(view.state)?;
    // The automatic machine's state, when the node sends it (under
    // METRICS_ONLY the would-reject count follows it); else what `state`
    // implies.
    let auto_state = match state_from_proto(view.automatic_state) {
        Some(s @ (BreakerState::Open | BreakerState::HalfOpen | BreakerState::Closed)) => s,
        _ => match state {
            BreakerState::Open | BreakerState::HalfOpen => state,
            _ => BreakerState::Closed,
        },
    };
    let open_until = match state {
        _ if auto_state == BreakerState::Open => view.open_until_ms.map(Timestamp::from_millis),
        BreakerState::ForcedOpen => view
            .forced
            .as_ref()
            .and_then(|f| f.expires_at_ms)
            .map(Timestamp::from_millis),
        _ => None,
    };
    Some(BreakerView {
        key,
        state,
        auto_state,
        generation: view.generation,
        open_until,
        shadow: view.shadow || state == BreakerState::MetricsOnly,
        reason: view
            .forced
            .as_ref()
            .map(|f| f.reason.clone())
            .or_else(|| view.operator.as_ref().map(|o| o.reason.clone())),
        actor: view
            .forced
            .as_ref()
            .map(|f| f.actor.clone())
            .or_else(|| view.operator.as_ref().map(|o| o.actor.clone())),
        operator_until: view
            .forced
            .as_ref()
            .and_then(|f| f.expires_at_ms)
            .or_else(|| view.operator.as_ref().and_then(|o| o.expires_at_ms))
            .map(Timestamp::from_millis),
        live_probes: view.live_probes,
        would_reject: view.shadow_would_reject,
    })
}

/// An outcome class on the wire.
pub(crate) fn class_to_proto(class: OutcomeClass) -> pb::OutcomeClass {
    match class {
        OutcomeClass::Success => pb::OutcomeClass::Success,
        OutcomeClass::BusinessError => pb::OutcomeClass::BusinessError,
        OutcomeClass::ToolError => pb::OutcomeClass::ToolError,
        OutcomeClass::Timeout => pb::OutcomeClass::Timeout,
        OutcomeClass::Transport => pb::OutcomeClass::Transport,
        OutcomeClass::ServerError => pb::OutcomeClass::ServerError,
        OutcomeClass::RateLimited => pb::OutcomeClass::RateLimited,
        OutcomeClass::InvalidArguments => pb::OutcomeClass::InvalidArguments,
        OutcomeClass::PolicyDenied => pb::OutcomeClass::PolicyDenied,
        OutcomeClass::Cancelled => pb::OutcomeClass::Cancelled,
        OutcomeClass::Unparsable => pb::OutcomeClass::Unparsable,
    }
}

/// An effect class on the wire.
pub(crate) fn effect_to_proto(effect: EffectClass) -> pb::Effect {
    match effect {
        EffectClass::ReadOnly => pb::Effect::ReadOnly,
        EffectClass::ExpensiveRead => pb::Effect::ExpensiveRead,
        EffectClass::IdempotentWrite => pb::Effect::IdempotentWrite,
        EffectClass::NonIdempotentWrite => pb::Effect::NonIdempotentWrite,
    }
}

/// A hinted effect class from the wire; unspecified (or unknown) is none.
pub(crate) fn hinted_effect_from_proto(value: i32) -> Option<EffectClass> {
    match pb::Effect::try_from(value).ok()? {
        pb::Effect::Unspecified => None,
        pb::Effect::ReadOnly => Some(EffectClass::ReadOnly),
        pb::Effect::ExpensiveRead => Some(EffectClass::ExpensiveRead),
        pb::Effect::IdempotentWrite => Some(EffectClass::IdempotentWrite),
        pb::Effect::NonIdempotentWrite => Some(EffectClass::NonIdempotentWrite),
    }
}

/// A policy version's document, parsed as the server validated it.
pub(crate) fn policy_from_proto(version: &pb::PolicyVersion) -> Option<PolicyDocument> {
    let format = match pb::PolicyFormat::try_from(version.format).ok()? {
        pb::PolicyFormat::Toml => PolicyFormat::Toml,
        pb::PolicyFormat::Yaml => PolicyFormat::Yaml,
        pb::PolicyFormat::Unspecified => return None,
    };
    match PolicyDocument::parse(&version.document, format) {
        Ok(document) => Some(document),
        Err(e) => {
            tracing::warn!(version = version.version, error = %e, "policy from the cluster does not parse; keeping the previous one");
            None
        }
    }
}

/// The block a node sent, read from its spec JSON with the core's reader;
/// `None` when the node sent none (an older node) or it does not read as
/// one: the replica then goes by its policy rather than by made-up fields.
pub(crate) fn disclosure_from_proto(d: &pb::LatencyDisclosure) -> Option<LatencyDisclosure> {
    if d.block_json.is_empty() || d.block_json.len() > DISCLOSURE_BLOCK_BYTES_MAX {
        return None;
    }
    LatencyDisclosure::from_json_text(&d.block_json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_core::breaker::{admit, Admission};

    fn ns() -> Namespace {
        Namespace::new("ns").unwrap_or_else(|_| unreachable!())
    }

    fn wire(state: pb::BreakerState, open_until_ms: Option<u64>) -> pb::BreakerView {
        pb::BreakerView {
            key: Some(pb::BreakerKey {
                namespace: "ns".into(),
                server: "tax".into(),
                tool: Some("lookup".into()),
                backend: None,
            }),
            state: state as i32,
            generation: 3,
            open_until_ms,
            ..Default::default()
        }
    }

    #[test]
    fn an_open_view_from_the_wire_rejects_until_it_elapses() {
        let tool = view_from_proto(&ns(), &wire(pb::BreakerState::Open, Some(10_000)));
        let Some(tool) = tool else {
            panic!("view did not convert")
        };
        let server = BreakerView::closed(tool.key.server_key());
        assert!(matches!(
            admit(&server, &tool, Timestamp(5_000)),
            Admission::Reject {
                retry_after_ms: Some(5_000),
                ..
            }
        ));
        assert!(matches!(
            admit(&server, &tool, Timestamp(10_000)),
            Admission::Probe { .. }
        ));
    }

    #[test]
    fn an_operator_shadow_over_an_open_breaker_counts_what_it_would_reject() {
        let mut view = wire(pb::BreakerState::MetricsOnly, Some(10_000));
        view.automatic_state = pb::BreakerState::Open as i32;
        view.shadow = true;
        let Some(tool) = view_from_proto(&ns(), &view) else {
            panic!("view did not convert")
        };
        let server = BreakerView::closed(tool.key.server_key());
        assert_eq!(
            admit(&server, &tool, Timestamp(5_000)),
            Admission::Allow { would_reject: true }
        );
        // Its open period over, the machine would probe: nothing to count.
        assert_eq!(
            admit(&server, &tool, Timestamp(10_000)),
            Admission::Allow {
                would_reject: false
            }
        );
    }

    #[test]
    fn a_disclosure_arrives_whole_or_not_at_all() {
        let text = r#"{"version": "1.2", "observed_at": "2026-11-30T00:00:00Z",
            "measurement_window_days": 30, "sample_size": 5000, "region": "eu-west-1",
            "p50_ms": 100, "p95_ms": 400, "p99_ms": 900, "timeout_ms": 5000,
            "idempotent": true, "retry_safe": true, "streaming": false,
            "time_to_first_byte_ms": null,
            "degradation_modes": [{"trigger": "rate_limited", "expected_p95_ms": 2000,
                                   "behavior": "answers 429; back off 1 s"}],
            "methodology_url": "https://example.com/m"}"#;
        let wire = pb::LatencyDisclosure {
            p95_ms: 400,
            block_json: text.to_owned(),
            ..Default::default()
        };
        let block = disclosure_from_proto(&wire).expect("the block reads");
        assert_eq!(block, LatencyDisclosure::from_json_text(text).unwrap());
        assert_eq!(
            (block.version.as_str(), block.measurement_window_days),
            ("1.2", 30)
        );
        assert_eq!(block.region.as_deref(), Some("eu-west-1"));
        assert_eq!(block.degradation_modes.len(), 1);
        assert!(block.methodology_url.is_some());
        // Without the block (an older node), nothing is made up.
        let bare = pb::LatencyDisclosure {
            p95_ms: 400,
            ..Default::default()
        };
        assert_eq!(disclosure_from_proto(&bare), None);
    }

    #[test]
    fn metrics_only_never_rejects() {
        let Some(tool) = view_from_proto(&ns(), &wire(pb::BreakerState::MetricsOnly, None)) else {
            panic!("view did not convert")
        };
        let server = BreakerView::closed(tool.key.server_key());
        assert!(matches!(
            admit(&server, &tool, Timestamp(1)),
            Admission::Allow { .. }
        ));
    }
}
