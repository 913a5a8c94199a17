//! What a client saw of a ledger call, read from its gRPC answer.
//!
//! The simulation's replicas and the nemesis test's clients (real processes
//! on a real network) both read answers here, so the checker judges both
//! histories by one reading of the wire.

use super::ledger_model::{LedgerOutput, RecordView};
use fusebox_core::ledger::Status;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::begin_response::Outcome as Begun;
use prost::Message;
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

/// Whether the call failed to open its connection, so no byte of the
/// request left the client: hyper's "tcp connect error" (refused, or the
/// connect deadline passed), or a refused connection anywhere in the
/// error's chain. Such a call changed nothing; leaving it out of the
/// history, rather than keeping it as maybe applied, spares the checker a
/// search over operations that never happened.
pub fn never_sent(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        let refused = e
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
        if refused || e.to_string().starts_with("tcp connect error") {
            return true;
        }
        source = e.source();
    }
    false
}

/// Whether a node answered NOT_LEADER: it proposed nothing (openraft
/// refused the write before appending it, or no leader was known to forward
/// to). A write appended and then lost to a leader change is answered
/// otherwise ("outcome unknown"), and stays maybe applied.
pub fn not_leader(status: &tonic::Status) -> bool {
    pb::FuseboxErrorDetail::decode(status.details()).is_ok_and(|d| {
        matches!(
            d.detail,
            Some(pb::fusebox_error_detail::Detail::NotLeader(_))
        )
    })
}

/// Whether a failed call changed nothing: refused, never sent, or answered
/// NOT_LEADER.
fn no_effect(status: &tonic::Status) -> bool {
    is_refusal(status.code()) || never_sent(status) || not_leader(status)
}

/// A `Begin`'s answer.
pub fn begun(answer: Result<pb::BeginResponse, tonic::Status>) -> Seen {
    let outcome = match answer {
        Ok(response) => response.outcome,
        Err(s) if no_effect(&s) => return Seen::NoEffect,
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
        Err(s) if no_effect(&s) => Seen::NoEffect,
        Err(_) => Seen::NoAnswer,
    }
}

/// A `Resolve`'s answer.
pub fn resolved(answer: Result<pb::ResolveResponse, tonic::Status>) -> Seen {
    match answer {
        Ok(r) => Seen::of_record(r.record.as_ref(), LedgerOutput::Resolved),
        Err(s) if s.code() == Code::FailedPrecondition => Seen::Answer(LedgerOutput::NotAmbiguous),
        Err(s) if s.code() == Code::NotFound => Seen::Answer(LedgerOutput::NotFound),
        Err(s) if no_effect(&s) => Seen::NoEffect,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn only_a_connection_that_never_opened_means_never_sent() {
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        assert!(never_sent(&tonic::Status::from_error(Box::new(refused))));
        let reset = io::Error::new(io::ErrorKind::ConnectionReset, "reset mid-call");
        assert!(!never_sent(&tonic::Status::from_error(Box::new(reset))));
        // An answer from a server carries no local cause: it may have run.
        assert!(!never_sent(&tonic::Status::unavailable(
            "tcp connect error"
        )));
        let lost = Err(tonic::Status::deadline_exceeded("timeout"));
        assert_eq!(begun(lost), Seen::NoAnswer);
        let detail = pb::FuseboxErrorDetail {
            detail: Some(pb::fusebox_error_detail::Detail::NotLeader(
                pb::NotLeaderDetail::default(),
            )),
            ..Default::default()
        };
        let details = detail.encode_to_vec().into();
        let not_leader = tonic::Status::with_details(Code::Unavailable, "not the leader", details);
        assert_eq!(begun(Err(not_leader)), Seen::NoEffect);
        let never = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(
            begun(Err(tonic::Status::from_error(Box::new(never)))),
            Seen::NoEffect
        );
    }
}
