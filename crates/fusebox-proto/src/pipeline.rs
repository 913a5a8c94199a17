//! What the two ends of `Ledger.Pipeline` agree on: how many calls travel
//! together, and how a failed call's status crosses inside a reply.

use crate::v1::CallStatus;
use tonic::{Code, Status};

/// Calls one `PipelineRequest` carries at most; a node ends a pipeline that
/// sends more with INVALID_ARGUMENT.
pub const CALLS_PER_MESSAGE_MAX: usize = 256;

/// Calls of one pipeline a node runs at once; it reads no further message of
/// the pipeline until some finish. A client keeps no more than this many
/// unanswered.
pub const CALLS_IN_FLIGHT_MAX: usize = 1_024;

/// Encoded bytes past which either end sends what it has gathered rather
/// than add another call or reply to the message (one call alone may be
/// larger, up to the 4 MiB a message may hold).
pub const MESSAGE_BYTES_TARGET: usize = 1024 * 1024;

/// A failed call's status as a reply carries it.
pub fn status_to_proto(status: &Status) -> CallStatus {
    CallStatus {
        code: status.code() as i32,
        message: status.message().to_owned(),
        details: status.details().to_vec(),
    }
}

/// The status a reply carries, as the unary call would have failed with it.
/// A code this version does not know stays visible as UNKNOWN, with the
/// number in the message.
pub fn status_from_proto(call: CallStatus) -> Status {
    // An error reply says OK only if the node is broken: UNKNOWN, not a
    // success.
    let code = match Code::from_i32(call.code) {
        Code::Ok => Code::Unknown,
        code => code,
    };
    let message = if code == Code::Unknown && call.code != Code::Unknown as i32 {
        format!("(status code {}) {}", call.code, call.message)
    } else {
        call.message
    };
    Status::with_details(code, message, call.details.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_crosses_with_its_code_message_and_details() {
        let sent = Status::with_details(Code::FailedPrecondition, "stale", vec![1, 2, 3].into());
        let got = status_from_proto(status_to_proto(&sent));
        assert_eq!(got.code(), Code::FailedPrecondition);
        assert_eq!(got.message(), "stale");
        assert_eq!(got.details(), &[1, 2, 3]);
    }

    #[test]
    fn an_error_that_says_ok_is_unknown() {
        let got = status_from_proto(CallStatus {
            code: 0,
            message: "fine".into(),
            details: Vec::new(),
        });
        assert_eq!(got.code(), Code::Unknown);
        assert_eq!(got.message(), "(status code 0) fine");
    }

    #[test]
    fn an_unknown_code_is_kept_in_the_message() {
        let got = status_from_proto(CallStatus {
            code: 99,
            message: "new".into(),
            details: Vec::new(),
        });
        assert_eq!(got.code(), Code::Unknown);
        assert_eq!(got.message(), "(status code 99) new");
    }
}
