//! The ledger's rules, as pure functions of one record, a request and `now`.
//!
//! Storage (the in-memory [`super::Ledger`] here, RocksDB in the server) only
//! fetches the record, calls a rule and writes back what it returns, so every
//! store answers exactly alike.

use super::record::{AmbiguityCause, Decision, Record, Resolution, Status};
use super::request::{BeginRequest, CompleteRequest, Completion, RenewRequest, ResolveRequest};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// The one answer `begin` gives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BeginAnswer {
    /// The caller owns the key: make the call, then `complete`.
    Started {
        /// The attempt that now holds the key.
        attempt: String,
        /// It took over an idempotent write whose earlier lease lapsed.
        takeover: bool,
        /// When the attempt's lease lapses unless it completes.
        lease_until: Timestamp,
    },
    /// Another attempt holds a live lease (409-like): wait, do not call.
    InProgress {
        /// The holder.
        attempt: String,
        /// When its lease lapses.
        lease_until: Timestamp,
    },
    /// The write already has a final answer: replay it, do not call.
    Completed {
        /// The record, with its stored result.
        record: Box<Record>,
    },
    /// The key was used for a different request (422-like).
    Mismatch {
        /// The fingerprint the key is bound to.
        stored_fingerprint: String,
    },
    /// An earlier attempt's outcome is unknown: stop and look it up.
    Ambiguous {
        /// The record, with what is known.
        record: Box<Record>,
    },
}

/// The answer to `complete`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompleteAnswer {
    /// The completion was recorded.
    Recorded {
        /// The record after it.
        record: Box<Record>,
    },
    /// The same completion was already recorded (a retried `complete`).
    AlreadyRecorded {
        /// The record as it stands.
        record: Box<Record>,
    },
    /// The attempt does not hold the key (another attempt took it over, or
    /// the record was settled otherwise); nothing changed.
    Conflict {
        /// The record as it stands.
        record: Box<Record>,
    },
    /// No record for the key.
    NotFound,
}

/// The answer to `renew`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RenewAnswer {
    /// The lease now runs until `lease_until` (never earlier than before).
    Renewed {
        /// The record after it.
        record: Box<Record>,
    },
    /// The attempt does not hold the key with a live lease (another attempt
    /// holds it, the record was settled, or the lease lapsed first: a
    /// lapsed lease is never revived, since another attempt may have taken
    /// the key over); nothing changed.
    Conflict {
        /// The record as it stands.
        record: Box<Record>,
    },
    /// No record for the key.
    NotFound,
}

/// The answer to `resolve`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolveAnswer {
    /// The resolution was applied.
    Resolved {
        /// The record after it.
        record: Box<Record>,
    },
    /// Only ambiguous records can be resolved; nothing changed.
    NotAmbiguous {
        /// The record as it stands.
        record: Box<Record>,
    },
    /// No record for the key.
    NotFound,
}

/// Applies what time alone does: a lapsed lease on a non-idempotent write
/// makes the record ambiguous (never free). Returns whether it changed.
pub fn expire(record: &mut Record, now: Timestamp) -> bool {
    let lapsed =
        record.status == Status::InProgress && record.lease_until.is_some_and(|until| now >= until);
    if !lapsed || record.effect.is_idempotent() {
        return false;
    }
    record.status = Status::Ambiguous;
    record.ambiguity = Some(AmbiguityCause::LeaseExpired);
    record.lease_until = None;
    record.updated_at = now;
    true
}

fn fresh(req: &BeginRequest, now: Timestamp) -> Record {
    Record {
        key: req.key.clone(),
        fingerprint: req.fingerprint.clone(),
        intent_id: req.intent_id.clone(),
        tool: req.tool.clone(),
        target: req.target.clone(),
        effect: req.effect,
        status: Status::InProgress,
        attempt: req.attempt.clone(),
        attempts: 1,
        lease_until: Some(now.plus_ms(req.lease_ms)),
        created_at: now,
        updated_at: now,
        completed_at: None,
        expires_at: None,
        operation_id: None,
        result: None,
        reason: None,
        ambiguity: None,
        resolution: None,
    }
}

fn restart(mut record: Record, req: &BeginRequest, now: Timestamp) -> Record {
    record.status = Status::InProgress;
    record.attempt = req.attempt.clone();
    record.attempts = record.attempts.saturating_add(1);
    record.lease_until = Some(now.plus_ms(req.lease_ms));
    record.updated_at = now;
    record.completed_at = None;
    record.expires_at = None;
    record.reason = None;
    record.ambiguity = None;
    record
}

/// The `started` answer for the attempt that holds `record`.
fn started(record: &Record, takeover: bool) -> BeginAnswer {
    BeginAnswer::Started {
        attempt: record.attempt.clone(),
        takeover,
        lease_until: record.lease_until.unwrap_or(record.updated_at),
    }
}

/// Stores `record` and answers `started` for its holder.
fn stored_started(record: Record, takeover: bool) -> (Option<Record>, BeginAnswer) {
    let answer = started(&record, takeover);
    (Some(record), answer)
}

/// `begin`: returns the record to store (if it changed) and the answer.
pub fn begin(
    existing: Option<Record>,
    req: &BeginRequest,
    now: Timestamp,
) -> (Option<Record>, BeginAnswer) {
    let Some(mut record) = existing else {
        return stored_started(fresh(req, now), false);
    };
    if record.fingerprint != req.fingerprint {
        let stored_fingerprint = record.fingerprint.clone();
        return (None, BeginAnswer::Mismatch { stored_fingerprint });
    }
    let expired = expire(&mut record, now);
    let changed = expired.then(|| record.clone());
    match record.status {
        Status::Released => stored_started(restart(record, req, now), false),
        Status::InProgress if record.attempt == req.attempt => {
            // A retried `begin` from the holder itself: same answer again,
            // with its lease renewed if it had lapsed (idempotent writes
            // only; a lapsed non-idempotent lease is already ambiguous).
            let lapsed = record.lease_until.is_none_or(|until| now >= until);
            if lapsed {
                record.lease_until = Some(now.plus_ms(req.lease_ms));
                record.updated_at = now;
                return stored_started(record, false);
            }
            (changed, started(&record, false))
        }
        Status::InProgress => match record.lease_until {
            Some(until) if now < until => {
                let answer = BeginAnswer::InProgress {
                    attempt: record.attempt.clone(),
                    lease_until: until,
                };
                (changed, answer)
            }
            // Lapsed lease on an idempotent write: the backend dedups by key,
            // so a new attempt may take it over, if the new attempt agrees it
            // is idempotent. A caller that says the write is not (the record
            // was begun under a looser effect, say by a replica that had not
            // yet received the policy) gets the conservative answer: the
            // earlier attempt's outcome is unknown.
            _ if req.effect.is_idempotent() => stored_started(restart(record, req, now), true),
            _ => {
                record.status = Status::Ambiguous;
                record.ambiguity = Some(AmbiguityCause::LeaseExpired);
                record.lease_until = None;
                record.updated_at = now;
                let answer = BeginAnswer::Ambiguous {
                    record: Box::new(record.clone()),
                };
                (Some(record), answer)
            }
        },
        Status::Ambiguous => {
            let answer = BeginAnswer::Ambiguous {
                record: Box::new(record),
            };
            (changed, answer)
        }
        Status::Succeeded | Status::Failed | Status::Abandoned => {
            let answer = BeginAnswer::Completed {
                record: Box::new(record),
            };
            (changed, answer)
        }
    }
}

fn settle(
    mut record: Record,
    completion: &Completion,
    now: Timestamp,
    retention_ms: u64,
) -> Record {
    record.lease_until = None;
    record.updated_at = now;
    let (status, reason) = match completion {
        Completion::Succeeded {
            operation_id,
            result,
        } => {
            record.operation_id = (!operation_id.is_empty()).then(|| operation_id.clone());
            record.result = Some(result.clone());
            (Status::Succeeded, None)
        }
        Completion::FailedBeforeExecution { reason } => (Status::Released, Some(reason)),
        Completion::Failed { reason } => (Status::Failed, Some(reason)),
        Completion::Ambiguous { reason } => {
            record.ambiguity = Some(AmbiguityCause::Reported);
            (Status::Ambiguous, Some(reason))
        }
    };
    record.status = status;
    record.reason = reason.cloned();
    if status.is_purgeable() {
        record.completed_at = Some(now);
        record.expires_at = Some(now.plus_ms(retention_ms));
    }
    record
}

fn same_completion(record: &Record, completion: &Completion) -> bool {
    match completion {
        Completion::Succeeded { operation_id, .. } => {
            record.status == Status::Succeeded
                && record.operation_id.as_deref().unwrap_or("") == operation_id
        }
        Completion::FailedBeforeExecution { .. } => record.status == Status::Released,
        Completion::Failed { .. } => record.status == Status::Failed,
        Completion::Ambiguous { .. } => record.status == Status::Ambiguous,
    }
}

/// `complete`: returns the record to store (if it changed) and the answer.
pub fn complete(
    existing: Option<Record>,
    req: &CompleteRequest,
    now: Timestamp,
    retention_ms: u64,
) -> (Option<Record>, CompleteAnswer) {
    let Some(mut record) = existing else {
        return (None, CompleteAnswer::NotFound);
    };
    let expired = expire(&mut record, now);
    let changed = expired.then(|| record.clone());
    let owner = record.attempt == req.attempt;
    if owner && same_completion(&record, &req.completion) {
        let answer = CompleteAnswer::AlreadyRecorded {
            record: Box::new(record),
        };
        return (changed, answer);
    }
    // The holder's late but definitive answer settles an ambiguity that no
    // operator has resolved yet (a resolved record is no longer ambiguous):
    // no second write can have happened, since an ambiguous key answers
    // `ambiguous` to every `begin`.
    let late_answer = record.status == Status::Ambiguous
        && matches!(
            req.completion,
            Completion::Succeeded { .. } | Completion::Failed { .. }
        );
    if owner && (record.status == Status::InProgress || late_answer) {
        let settled = settle(record, &req.completion, now, retention_ms);
        let answer = CompleteAnswer::Recorded {
            record: Box::new(settled.clone()),
        };
        return (Some(settled), answer);
    }
    let answer = CompleteAnswer::Conflict {
        record: Box::new(record),
    };
    (changed, answer)
}

/// `renew`: the holder of a live lease extends it to `now + lease_ms`
/// (a renewal never shortens a lease).
pub fn renew(
    existing: Option<Record>,
    req: &RenewRequest,
    now: Timestamp,
) -> (Option<Record>, RenewAnswer) {
    let Some(mut record) = existing else {
        return (None, RenewAnswer::NotFound);
    };
    let expired = expire(&mut record, now);
    let live = record.status == Status::InProgress
        && record.attempt == req.attempt
        && record.lease_until.is_some_and(|until| now < until);
    if !live {
        let changed = expired.then(|| record.clone());
        let answer = RenewAnswer::Conflict {
            record: Box::new(record),
        };
        return (changed, answer);
    }
    let wanted = now.plus_ms(req.lease_ms);
    record.lease_until = record.lease_until.max(Some(wanted));
    record.updated_at = now;
    let answer = RenewAnswer::Renewed {
        record: Box::new(record.clone()),
    };
    (Some(record), answer)
}

/// `resolve`: an operator settles an ambiguous record.
pub fn resolve(
    existing: Option<Record>,
    req: &ResolveRequest,
    now: Timestamp,
    retention_ms: u64,
) -> (Option<Record>, ResolveAnswer) {
    let Some(mut record) = existing else {
        return (None, ResolveAnswer::NotFound);
    };
    let expired = expire(&mut record, now);
    if record.status != Status::Ambiguous {
        let changed = expired.then(|| record.clone());
        let answer = ResolveAnswer::NotAmbiguous {
            record: Box::new(record),
        };
        return (changed, answer);
    }
    record.status = match &req.decision {
        Decision::Done { operation_id } => {
            record.operation_id = Some(operation_id.clone());
            Status::Succeeded
        }
        Decision::NotDone => Status::Released,
        Decision::Abandoned => Status::Abandoned,
    };
    record.resolution = Some(Resolution {
        decision: req.decision.clone(),
        actor: req.actor.clone(),
        note: req.note.clone(),
        at: now,
    });
    record.updated_at = now;
    record.completed_at = Some(now);
    record.expires_at = Some(now.plus_ms(retention_ms));
    let answer = ResolveAnswer::Resolved {
        record: Box::new(record.clone()),
    };
    (Some(record), answer)
}
