//! Ledger requests and records between wire and core.
//!
//! Fingerprints are bytes on the wire and text in the core: they travel as
//! lowercase hex, so any byte string (a raw SHA-256, a hex digest) is kept
//! exactly and compared exactly.
//!
//! Only what the wire itself decides is checked here (names, enums, oneofs
//! and required choices, the fingerprint's bytes, the lease clamp the proto
//! promises). Every length and bound of a request is the core's rule
//! ([`fusebox_core::machine::Command::validate`]), checked once by the
//! gateway before the command is proposed.

use super::{actor, bounded, meta, name, namespace, page_limit, required};
use crate::caller::Caller;
use crate::status;
use fusebox_core::ledger::{
    AmbiguityCause, BeginAnswer, BeginRequest, CompleteRequest, Completion, Decision, ListFilter,
    Record, RenewRequest, ResolveRequest, Status as RecordStatus,
};
use fusebox_core::limits::{
    FINGERPRINT_BYTES_MAX, IDEMPOTENCY_KEY_BYTES_MAX, ID_BYTES_MAX, LEASE_MS_MAX,
};
use fusebox_core::policy::EffectClass;
use fusebox_core::{Namespace, ServerName, ToolName};
use fusebox_proto::v1 as pb;
use tonic::Status;

/// A validated `Begin`: the namespace and the core request.
pub fn begin_from_proto(req: &pb::BeginRequest) -> Result<(Namespace, BeginRequest), Status> {
    meta(req.meta.as_ref())?;
    let ns = namespace(&req.namespace)?;
    let fingerprint = fingerprint_from_proto(&req.fingerprint)?;
    // The core record keeps no server; it is still a name and checked as one.
    name("server", &req.server, ServerName::new)?;
    let tool = name("tool", &req.tool, ToolName::new)?;
    let request = BeginRequest {
        key: req.key.clone(),
        fingerprint,
        intent_id: req.intent_id.clone(),
        tool,
        target: req.target.clone(),
        effect: effect_from_proto(req.effect)?,
        attempt: req.attempt_id.clone(),
        // The proto promises a clamp to the longest lease, not a refusal.
        lease_ms: req.lease_ms.min(LEASE_MS_MAX),
    };
    Ok((ns, request))
}

/// A validated `Complete`.
pub fn complete_from_proto(
    req: &pb::CompleteRequest,
) -> Result<(Namespace, CompleteRequest), Status> {
    use pb::complete_request::Outcome;
    meta(req.meta.as_ref())?;
    let ns = namespace(&req.namespace)?;
    let completion = match &req.outcome {
        None => return Err(status::invalid_field("outcome", "must not be empty")),
        Some(Outcome::Succeeded(s)) => Completion::Succeeded {
            operation_id: s.operation_id.clone(),
            result: s.result.clone(),
        },
        Some(Outcome::FailedBeforeExecution(f)) => Completion::FailedBeforeExecution {
            reason: f.reason.clone(),
        },
        Some(Outcome::Failed(f)) => Completion::Failed {
            reason: f.reason.clone(),
        },
        Some(Outcome::Ambiguous(a)) => Completion::Ambiguous {
            reason: a.reason.clone(),
        },
    };
    let request = CompleteRequest {
        key: req.key.clone(),
        attempt: req.attempt_id.clone(),
        completion,
    };
    Ok((ns, request))
}

/// A validated `Resolve`: a decision, who and why are all required.
pub fn resolve_from_proto(
    req: &pb::ResolveRequest,
    caller: &Caller,
) -> Result<(Namespace, ResolveRequest), Status> {
    use pb::ResolutionDecision as D;
    meta(req.meta.as_ref())?;
    let ns = namespace(&req.namespace)?;
    let decision = match D::try_from(req.decision) {
        Ok(D::Done) => Decision::Done {
            operation_id: req.operation_id.clone().unwrap_or_default(),
        },
        Ok(D::NotDone) => Decision::NotDone,
        Ok(D::Abandoned) => Decision::Abandoned,
        Ok(D::Unspecified) | Err(_) => {
            return Err(status::invalid_argument(
                "decision",
                "enum",
                "must be DONE, NOT_DONE or ABANDONED",
            ));
        }
    };
    let request = ResolveRequest {
        key: req.key.clone(),
        decision,
        actor: actor(caller, &req.actor, req.meta.as_ref())?,
        note: req.note.clone(),
    };
    Ok((ns, request))
}

/// A validated `List`: filters and a page.
pub fn list_from_proto(req: &pb::ListRecordsRequest) -> Result<(Namespace, ListFilter), Status> {
    meta(req.meta.as_ref())?;
    let ns = namespace(&req.namespace)?;
    if let Some(intent) = &req.intent_id {
        required("intent_id", intent, ID_BYTES_MAX)?;
    }
    if let Some(op) = &req.operation_id {
        required("operation_id", op, ID_BYTES_MAX)?;
    }
    bounded("page_token", &req.page_token, IDEMPOTENCY_KEY_BYTES_MAX)?;
    let tool = match &req.tool {
        Some(tool) => Some(name("tool", tool, ToolName::new)?),
        None => None,
    };
    let status = match req.status {
        Some(value) => Some(status_from_proto(value)?),
        None => None,
    };
    let filter = ListFilter {
        intent_id: req.intent_id.clone(),
        tool,
        status,
        operation_id: req.operation_id.clone(),
        after_key: (!req.page_token.is_empty()).then(|| req.page_token.clone()),
        limit: page_limit(req.limit),
    };
    Ok((ns, filter))
}

fn fingerprint_from_proto(bytes: &[u8]) -> Result<String, Status> {
    let max = FINGERPRINT_BYTES_MAX / 2;
    if bytes.is_empty() {
        return Err(status::invalid_field("fingerprint", "must not be empty"));
    }
    if bytes.len() > max {
        let reason = format!("is {} bytes, at most {max} allowed", bytes.len());
        return Err(status::invalid_field("fingerprint", &reason));
    }
    Ok(fusebox_core::hex::lower(bytes))
}

/// The bytes a stored fingerprint was made from (hex decoded; text that is
/// not this server's hex is returned as its bytes).
pub fn fingerprint_to_proto(text: &str) -> Vec<u8> {
    let decoded: Option<Vec<u8>> = text
        .len()
        .is_multiple_of(2)
        .then(|| {
            (0..text.len())
                .step_by(2)
                .map(|i| {
                    text.get(i..i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect()
        })
        .flatten();
    decoded.unwrap_or_else(|| text.as_bytes().to_vec())
}

/// An effect class from the wire; unspecified is the most cautious class.
pub fn effect_from_proto(value: i32) -> Result<EffectClass, Status> {
    match pb::Effect::try_from(value) {
        Ok(pb::Effect::Unspecified | pb::Effect::NonIdempotentWrite) => {
            Ok(EffectClass::NonIdempotentWrite)
        }
        Ok(pb::Effect::ReadOnly) => Ok(EffectClass::ReadOnly),
        Ok(pb::Effect::ExpensiveRead) => Ok(EffectClass::ExpensiveRead),
        Ok(pb::Effect::IdempotentWrite) => Ok(EffectClass::IdempotentWrite),
        Err(_) => Err(status::invalid_argument(
            "effect",
            "enum",
            format!("{value} is not an effect class"),
        )),
    }
}

/// An effect class on the wire.
pub fn effect_to_proto(effect: EffectClass) -> pb::Effect {
    match effect {
        EffectClass::ReadOnly => pb::Effect::ReadOnly,
        EffectClass::ExpensiveRead => pb::Effect::ExpensiveRead,
        EffectClass::IdempotentWrite => pb::Effect::IdempotentWrite,
        EffectClass::NonIdempotentWrite => pb::Effect::NonIdempotentWrite,
    }
}

fn status_from_proto(value: i32) -> Result<RecordStatus, Status> {
    use pb::LedgerStatus as S;
    match S::try_from(value) {
        Ok(S::InProgress) => Ok(RecordStatus::InProgress),
        Ok(S::Succeeded) => Ok(RecordStatus::Succeeded),
        Ok(S::Failed) => Ok(RecordStatus::Failed),
        Ok(S::Ambiguous) => Ok(RecordStatus::Ambiguous),
        Ok(S::Released) => Ok(RecordStatus::Released),
        Ok(S::Abandoned) => Ok(RecordStatus::Abandoned),
        Ok(S::Unspecified) | Err(_) => Err(status::invalid_argument(
            "status",
            "enum",
            format!("{value} is not a ledger status"),
        )),
    }
}

/// A record status on the wire.
pub fn status_to_proto(status: RecordStatus) -> pb::LedgerStatus {
    match status {
        RecordStatus::InProgress => pb::LedgerStatus::InProgress,
        RecordStatus::Succeeded => pb::LedgerStatus::Succeeded,
        RecordStatus::Failed => pb::LedgerStatus::Failed,
        RecordStatus::Ambiguous => pb::LedgerStatus::Ambiguous,
        RecordStatus::Released => pb::LedgerStatus::Released,
        RecordStatus::Abandoned => pb::LedgerStatus::Abandoned,
    }
}

/// The wire name of a record status (`LEDGER_STATUS_SUCCEEDED`).
pub fn status_name(status: RecordStatus) -> &'static str {
    status_to_proto(status).as_str_name()
}

/// A record on the wire. The core keeps no server name, so `server` is
/// empty.
pub fn record_to_proto(ns: &Namespace, r: &Record) -> pb::LedgerRecord {
    let ambiguity_reason = r.ambiguity.as_ref().map(|cause| match cause {
        AmbiguityCause::LeaseExpired => {
            "the lease expired before the attempt completed a non-idempotent write".to_owned()
        }
        AmbiguityCause::Reported => match &r.reason {
            Some(reason) if !reason.is_empty() => format!("the attempt reported: {reason}"),
            _ => "the attempt reported its outcome unknown".to_owned(),
        },
    });
    let failure_reason = matches!(r.status, RecordStatus::Failed | RecordStatus::Released)
        .then(|| r.reason.clone())
        .flatten();
    pb::LedgerRecord {
        namespace: ns.to_string(),
        key: r.key.clone(),
        fingerprint: fingerprint_to_proto(&r.fingerprint),
        intent_id: r.intent_id.clone(),
        server: String::new(),
        tool: r.tool.to_string(),
        target: r.target.clone(),
        effect: effect_to_proto(r.effect) as i32,
        status: status_to_proto(r.status) as i32,
        attempt_id: r.attempt.clone(),
        attempts: r.attempts,
        lease_until_ms: (r.status == RecordStatus::InProgress)
            .then(|| r.lease_until.map(|t| t.as_millis()))
            .flatten(),
        created_at_ms: r.created_at.as_millis(),
        updated_at_ms: r.updated_at.as_millis(),
        completed_at_ms: r.completed_at.map(|t| t.as_millis()),
        result: r.result.clone(),
        operation_id: r.operation_id.clone(),
        resolution: r.resolution.as_ref().map(resolution_to_proto),
        ambiguity_reason,
        failure_reason,
        expires_at_ms: r.expires_at.map(|t| t.as_millis()),
    }
}

fn resolution_to_proto(r: &fusebox_core::ledger::Resolution) -> pb::Resolution {
    let decision = match r.decision {
        Decision::Done { .. } => pb::ResolutionDecision::Done,
        Decision::NotDone => pb::ResolutionDecision::NotDone,
        Decision::Abandoned => pb::ResolutionDecision::Abandoned,
    };
    pb::Resolution {
        actor: r.actor.clone(),
        note: r.note.clone(),
        decision: decision as i32,
        at_ms: r.at.as_millis(),
    }
}

/// A validated `Renew`: the namespace, the core request and whether the
/// lease asked for was clamped to the longest.
pub fn renew_from_proto(req: &pb::RenewRequest) -> Result<(Namespace, RenewRequest, bool), Status> {
    meta(req.meta.as_ref())?;
    let ns = namespace(&req.namespace)?;
    let request = RenewRequest {
        key: req.key.clone(),
        attempt: req.attempt_id.clone(),
        lease_ms: req.lease_ms.min(LEASE_MS_MAX),
    };
    Ok((ns, request, req.lease_ms > LEASE_MS_MAX))
}

/// One of the five begin answers as an OK body.
pub fn begin_to_proto(ns: &Namespace, answer: &BeginAnswer) -> pb::BeginResponse {
    use pb::begin_response::Outcome as O;
    let outcome = match answer {
        BeginAnswer::Started {
            attempt,
            takeover,
            lease_until,
        } => O::Started(pb::BeginStarted {
            attempt_id: attempt.clone(),
            takeover: *takeover,
            lease_until_ms: lease_until.as_millis(),
            lease_clamped: false,
        }),
        BeginAnswer::InProgress {
            attempt,
            lease_until,
        } => O::InProgress(pb::BeginInProgress {
            holder_attempt_id: attempt.clone(),
            lease_until_ms: lease_until.as_millis(),
        }),
        BeginAnswer::Completed { record } => O::Completed(pb::BeginCompleted {
            record: Some(record_to_proto(ns, record)),
            replayed: true,
        }),
        BeginAnswer::Mismatch { stored_fingerprint } => O::Mismatch(pb::BeginMismatch {
            stored_fingerprint: fingerprint_to_proto(stored_fingerprint),
        }),
        BeginAnswer::Ambiguous { record } => O::Ambiguous(pb::BeginAmbiguous {
            record: Some(record_to_proto(ns, record)),
        }),
    };
    pb::BeginResponse {
        outcome: Some(outcome),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_round_trip_any_bytes() {
        let raw = vec![0u8, 0xff, 0x10, 0xab];
        let text = fingerprint_from_proto(&raw).unwrap_or_default();
        assert_eq!(text, "00ff10ab");
        assert_eq!(fingerprint_to_proto(&text), raw);
        assert_eq!(fingerprint_to_proto("not hex!"), b"not hex!".to_vec());
    }

    #[test]
    fn an_unspecified_effect_is_the_most_cautious() {
        assert_eq!(
            effect_from_proto(0).ok(),
            Some(EffectClass::NonIdempotentWrite)
        );
        assert!(effect_from_proto(99).is_err());
    }
}
