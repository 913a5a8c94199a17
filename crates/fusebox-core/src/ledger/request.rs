//! What callers send to the ledger, validated at the boundary.

use crate::error::{check_len, check_max_len, CoreError};
use crate::limits::{
    FINGERPRINT_BYTES_MAX, IDEMPOTENCY_KEY_BYTES_MAX, ID_BYTES_MAX, LEASE_MS_MAX, REASON_BYTES_MAX,
    STORED_RESULT_BYTES_MAX,
};
use crate::name::ToolName;
use crate::policy::EffectClass;
use serde::{Deserialize, Serialize};

use super::record::Decision;

/// `begin`: claim a key for one attempt of a write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginRequest {
    /// The idempotency key.
    pub key: String,
    /// Digest of the request body; guards against key reuse for another request.
    pub fingerprint: String,
    /// The intent the write serves.
    pub intent_id: String,
    /// The write tool.
    pub tool: ToolName,
    /// The target of the write.
    pub target: String,
    /// Whether the backend dedups by key (decides what a lapsed lease means).
    pub effect: EffectClass,
    /// This attempt's id (a new one per attempt).
    pub attempt: String,
    /// How long the attempt may hold the key without completing.
    pub lease_ms: u64,
}

impl BeginRequest {
    /// Checks every field against its bound.
    pub fn validate(&self) -> Result<(), CoreError> {
        check_len("key", &self.key, IDEMPOTENCY_KEY_BYTES_MAX)?;
        check_len("fingerprint", &self.fingerprint, FINGERPRINT_BYTES_MAX)?;
        check_len("intent_id", &self.intent_id, ID_BYTES_MAX)?;
        check_max_len("target", &self.target, ID_BYTES_MAX)?;
        check_len("attempt_id", &self.attempt, ID_BYTES_MAX)?;
        check_lease(self.lease_ms)?;
        Ok(())
    }
}

/// How an attempt ended, as `complete` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Completion {
    /// The backend accepted the write.
    Succeeded {
        /// The backend's id for the operation.
        operation_id: String,
        /// A small result to replay (at most [`STORED_RESULT_BYTES_MAX`]).
        result: Vec<u8>,
    },
    /// The request never left: nothing happened, the key is released.
    FailedBeforeExecution {
        /// What stopped it.
        reason: String,
    },
    /// The backend definitively refused or failed the write.
    Failed {
        /// What the backend said.
        reason: String,
    },
    /// The request left and its outcome is unknown (timeout, lost response).
    Ambiguous {
        /// What was seen.
        reason: String,
    },
}

impl Completion {
    /// Checks every field against its bound.
    pub fn validate(&self) -> Result<(), CoreError> {
        match self {
            Completion::Succeeded {
                operation_id,
                result,
            } => {
                check_max_len("operation_id", operation_id, ID_BYTES_MAX)?;
                if result.len() > STORED_RESULT_BYTES_MAX {
                    return Err(CoreError::too_large(
                        "stored_result_bytes_max",
                        STORED_RESULT_BYTES_MAX,
                        result.len(),
                    ));
                }
                Ok(())
            }
            Completion::FailedBeforeExecution { reason }
            | Completion::Failed { reason }
            | Completion::Ambiguous { reason } => check_max_len("reason", reason, REASON_BYTES_MAX),
        }
    }
}

/// `complete`: report how an attempt ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteRequest {
    /// The idempotency key.
    pub key: String,
    /// The attempt reporting; must hold the key.
    pub attempt: String,
    /// How it ended.
    pub completion: Completion,
}

impl CompleteRequest {
    /// Checks every field against its bound.
    pub fn validate(&self) -> Result<(), CoreError> {
        check_len("key", &self.key, IDEMPOTENCY_KEY_BYTES_MAX)?;
        check_len("attempt_id", &self.attempt, ID_BYTES_MAX)?;
        self.completion.validate()
    }
}

/// A lease (of a key, of a probe permit) lasts 1 ms to [`LEASE_MS_MAX`].
pub fn check_lease(lease_ms: u64) -> Result<(), CoreError> {
    if lease_ms == 0 || lease_ms > LEASE_MS_MAX {
        return Err(CoreError::invalid(
            "lease_ms",
            format!("must be 1..={LEASE_MS_MAX}, got {lease_ms}"),
        ));
    }
    Ok(())
}

/// `renew`: the attempt holding a key extends its lease (a long write).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewRequest {
    /// The idempotency key.
    pub key: String,
    /// The attempt renewing; must hold the key with a live lease.
    pub attempt: String,
    /// The new lease, from the entry's time: 1 to [`LEASE_MS_MAX`].
    pub lease_ms: u64,
}

impl RenewRequest {
    /// Checks every field against its bound.
    pub fn validate(&self) -> Result<(), CoreError> {
        check_len("key", &self.key, IDEMPOTENCY_KEY_BYTES_MAX)?;
        check_len("attempt_id", &self.attempt, ID_BYTES_MAX)?;
        check_lease(self.lease_ms)?;
        Ok(())
    }
}

/// `resolve`: an operator settles an ambiguous record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolveRequest {
    /// The idempotency key.
    pub key: String,
    /// The verdict.
    pub decision: Decision,
    /// Who decides.
    pub actor: String,
    /// Why.
    pub note: String,
}

impl ResolveRequest {
    /// Checks every field against its bound.
    pub fn validate(&self) -> Result<(), CoreError> {
        check_len("key", &self.key, IDEMPOTENCY_KEY_BYTES_MAX)?;
        check_len("actor", &self.actor, ID_BYTES_MAX)?;
        check_len("note", &self.note, REASON_BYTES_MAX)?;
        if let Decision::Done { operation_id } = &self.decision {
            check_len("operation_id", operation_id, ID_BYTES_MAX)?;
        }
        Ok(())
    }
}
