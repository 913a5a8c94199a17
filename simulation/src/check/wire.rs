//! What a client saw of a ledger call, read from its gRPC answer.
//!
//! The simulation's replicas and the nemesis test's clients (real processes
//! on a real network) both read answers here, so the checker judges both
//! histories by one reading of the wire.

use super::ledger_model::{LedgerOutput, RecordView};
use fusebox_core::ledger::Status;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::begin_response::Outcome as Begun;
use tonic::Code;

/// How one call goes into a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Answered: an operation with a return and this output.
    Answer(LedgerOutput),
    /// No answer arrived (a timeout, a lost reply, a node that went away):
    /// an operation without a return, which may or may not have happened.
    NoAnswer,
    /// Refused before it reached the ledger, or a read that failed: it
    /// changed nothing and belongs out of the history.
    NoEffect,
}

impl Seen {
    /// The output to record, `None` for an operation without a return.
    /// `NoEffect` is `None` too; callers leave those out first.
    pub fn output(self) -> Option<LedgerOutput> {
        match self {
            Seen::Answer(output) => Some(output),
            Seen::NoAnswer | Seen::NoEffect => None,
        }
    }

    fn of_record(record: Option<&pb::LedgerRecord>, f: fn(RecordView) -> LedgerOutput) -> Seen {
        record.map_or(Seen::NoAnswer, |r| Seen::Answer(f(RecordView::of_wire(r))))
    }
}

/// A gRPC code that says the request was refused before it reached the
/// ledger and changed nothing.
pub fn is_refusal(code: Code) -> bool {
    matches!(code, Code::InvalidArgument | Code::PermissionDenied)
}

/// A `Begin`'s answer.
pub fn begun(answer: Result<pb::BeginResponse, tonic::Status>) -> Seen {
    let outcome = match answer {
        Ok(response) => response.outcome,
        Err(s) if is_refusal(s.code()) => return Seen::NoEffect,
        Err(_) => return Seen::NoAnswer,
    };
    match outcome {
        Some(Begun::Started(s)) => Seen::Answer(LedgerOutput::Started {
            attempt: s.attempt_id,
            takeover: s.takeover,
        }),
        Some(Begun::InProgress(p)) => Seen::Answer(LedgerOutput::InProgress {
            holder: p.holder_attempt_id,
        }),
        Some(Begun::Completed(c)) => Seen::of_record(c.record.as_ref(), LedgerOutput::Completed),
        Some(Begun::Ambiguous(a)) => Seen::of_record(a.record.as_ref(), LedgerOutput::Ambiguous),
        Some(Begun::Mismatch(_)) => Seen::Answer(LedgerOutput::Mismatch),
        None => Seen::NoAnswer,
    }
}

/// A `Complete`'s answer: recorded now or before (gRPC answers both with
/// the record), a conflict, or no record.
pub fn completed(answer: Result<pb::CompleteResponse, tonic::Status>) -> Seen {
    match answer {
        Ok(r) => Seen::of_record(r.record.as_ref(), LedgerOutput::Accepted),
        Err(s) if s.code() == Code::FailedPrecondition => Seen::Answer(LedgerOutput::Conflict),
        Err(s) if s.code() == Code::NotFound => Seen::Answer(LedgerOutput::NotFound),
        Err(s) if is_refusal(s.code()) => Seen::NoEffect,
        Err(_) => Seen::NoAnswer,
    }
}

/// A `Resolve`'s answer.
pub fn resolved(answer: Result<pb::ResolveResponse, tonic::Status>) -> Seen {
    match answer {
        Ok(r) => Seen::of_record(r.record.as_ref(), LedgerOutput::Resolved),
        Err(s) if s.code() == Code::FailedPrecondition => Seen::Answer(LedgerOutput::NotAmbiguous),
        Err(s) if s.code() == Code::NotFound => Seen::Answer(LedgerOutput::NotFound),
        Err(s) if is_refusal(s.code()) => Seen::NoEffect,
        Err(_) => Seen::NoAnswer,
    }
}

/// A `Lookup`'s answer; a failed read tells nothing and changes nothing.
pub fn looked_up(answer: Result<pb::LookupResponse, tonic::Status>) -> Seen {
    match answer {
        Ok(r) => match r.record {
            Some(record) => Seen::Answer(LedgerOutput::Found(RecordView::of_wire(&record))),
            None => Seen::NoEffect,
        },
        Err(s) if s.code() == Code::NotFound => Seen::Answer(LedgerOutput::NotFound),
        Err(_) => Seen::NoEffect,
    }
}

impl RecordView {
    /// What a client compares of a record from the wire.
    pub fn of_wire(record: &pb::LedgerRecord) -> Self {
        let status = match pb::LedgerStatus::try_from(record.status) {
            Ok(pb::LedgerStatus::InProgress) => Status::InProgress,
            Ok(pb::LedgerStatus::Succeeded) => Status::Succeeded,
            Ok(pb::LedgerStatus::Failed) => Status::Failed,
            Ok(pb::LedgerStatus::Abandoned) => Status::Abandoned,
            Ok(pb::LedgerStatus::Ambiguous) => Status::Ambiguous,
            Ok(pb::LedgerStatus::Released | pb::LedgerStatus::Unspecified) | Err(_) => {
                Status::Released
            }
        };
        RecordView {
            status,
            attempt: record.attempt_id.clone(),
            operation_id: record.operation_id.clone(),
            result: record.result.clone(),
            lease_expired: record
                .ambiguity_reason
                .as_deref()
                .is_some_and(|r| r.contains("lease")),
        }
    }
}
