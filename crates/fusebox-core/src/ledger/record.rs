//! A ledger record: one idempotency key and what became of its write.

use crate::name::ToolName;
use crate::policy::EffectClass;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// Where a key's write stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// An attempt holds the key under a lease.
    InProgress,
    /// The write happened; the result is stored for replay.
    Succeeded,
    /// The write definitively failed; replayed as such.
    Failed,
    /// Nobody knows whether the write happened: stop and look.
    Ambiguous,
    /// Nothing happened and the key is free for a new attempt.
    Released,
    /// An operator gave the intent up; replayed as such.
    Abandoned,
}

impl Status {
    /// Whether the record has a final answer that `begin` replays.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Abandoned)
    }

    /// Whether retention may purge the record once it is old enough.
    pub fn is_purgeable(self) -> bool {
        matches!(
            self,
            Status::Succeeded | Status::Failed | Status::Abandoned | Status::Released
        )
    }

    /// Whether a record in this status may be rewritten in `next`: the
    /// ledger's allowed edges. A free key (released) or a held one may be
    /// held; a held or ambiguous one may settle (an ambiguous one by its
    /// holder's late answer or an operator); nothing leaves a terminal
    /// status except retention's purge, which removes the record. A held
    /// record whose non-idempotent lease lapsed is ambiguous before the next
    /// tick rewrites it, so it moves as an ambiguous one does.
    pub fn may_become(self, next: Status) -> bool {
        use Status::*;
        match (self, next) {
            (Released | InProgress, InProgress) => true,
            (InProgress | Ambiguous, Succeeded | Failed | Ambiguous | Released) => true,
            (InProgress | Ambiguous, Abandoned) => true,
            (from, to) => from == to,
        }
    }

    /// The wire name (`snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Ambiguous => "ambiguous",
            Status::Released => "released",
            Status::Abandoned => "abandoned",
        }
    }
}

/// An operator's verdict on an ambiguous record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The write did happen; this is its backend operation id.
    Done {
        /// The backend's id for the operation the operator found.
        operation_id: String,
    },
    /// The write did not happen; the key is released for a new attempt.
    NotDone,
    /// Nobody will pursue the intent; the record stays as a final answer.
    Abandoned,
}

/// Who resolved an ambiguous record, how and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// The verdict.
    pub decision: Decision,
    /// Who decided (an operator identity).
    pub actor: String,
    /// Why, in the operator's words.
    pub note: String,
    /// When the resolution was applied.
    pub at: Timestamp,
}

/// Why a record became ambiguous.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmbiguityCause {
    /// The attempt said so (timeout or lost response after the request left).
    Reported,
    /// The attempt's lease lapsed before it completed a non-idempotent write.
    LeaseExpired,
}

/// One idempotency key's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The idempotency key (unique within the namespace).
    pub key: String,
    /// Digest of the request; the same key with another fingerprint is a mismatch.
    pub fingerprint: String,
    /// The intent the write serves (lookups by intent).
    pub intent_id: String,
    /// The write tool.
    pub tool: ToolName,
    /// The target of the write (a job id, an account).
    pub target: String,
    /// Idempotent or not: decides what a lapsed lease means.
    pub effect: EffectClass,
    /// Where the write stands.
    pub status: Status,
    /// The attempt that holds (or last held) the key.
    pub attempt: String,
    /// Attempts that were answered `started`.
    pub attempts: u32,
    /// When the holding attempt's lease lapses (in progress only).
    pub lease_until: Option<Timestamp>,
    /// When the key was first begun.
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
    /// When the record reached a final or released status.
    pub completed_at: Option<Timestamp>,
    /// When retention purges it (final and released records only).
    pub expires_at: Option<Timestamp>,
    /// The backend's id for the operation, when known.
    pub operation_id: Option<String>,
    /// The small result replayed to later attempts.
    pub result: Option<Vec<u8>>,
    /// Why it failed or is ambiguous, in the attempt's words.
    pub reason: Option<String>,
    /// Why it is ambiguous.
    pub ambiguity: Option<AmbiguityCause>,
    /// The operator's resolution, if any.
    pub resolution: Option<Resolution>,
}
