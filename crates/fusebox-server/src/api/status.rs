//! Failures as gRPC statuses. The statuses every request check uses live in
//! [`fusebox_api::status`]; this adds the node's own failures (not the
//! leader, unavailable, outcome unknown, a storage error).

pub use fusebox_api::status::*;

use crate::backend::BackendError;
use fusebox_proto::v1::ErrorCode;
use tonic::{Code, Status};

/// The status for a node that could not serve (after forwarding was
/// considered: a `NotLeader` here was not forwarded).
pub fn from_backend(error: &BackendError) -> Status {
    match error {
        BackendError::NotLeader {
            leader_id,
            leader_addr,
        } => not_leader(*leader_id, leader_addr.clone(), "leader unknown"),
        BackendError::Unavailable(reason) => with_detail(
            Code::Unavailable,
            ErrorCode::Unspecified,
            format!("cluster unavailable, retry later: {reason}"),
            None,
        ),
        BackendError::Indeterminate(reason) => with_detail(
            Code::Unavailable,
            ErrorCode::Unspecified,
            format!(
                "outcome unknown, the write may or may not have been applied ({reason}); \
                 ledger begin and complete are idempotent per attempt, retry them with the \
                 same attempt id, and look other writes up before repeating them"
            ),
            None,
        ),
        BackendError::TooLarge { bytes, max } => {
            let as_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
            limit_reached("entry_bytes_max", as_u64(*max), as_u64(*bytes))
        }
        BackendError::LimitReached { limit, max } => {
            let max = u64::try_from(*max).unwrap_or(u64::MAX);
            limit_reached(limit, max, max.saturating_add(1))
        }
        BackendError::Fatal(reason) => with_detail(
            Code::Internal,
            ErrorCode::Unspecified,
            format!("node stopped after a storage error: {reason}"),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_errors_say_whether_to_retry() {
        let unknown = from_backend(&BackendError::Indeterminate("leader changed".into()));
        assert_eq!(unknown.code(), Code::Unavailable);
        assert!(unknown.message().contains("outcome unknown"));
        assert_eq!(
            from_backend(&BackendError::Fatal("io".into())).code(),
            Code::Internal
        );
        let huge = from_backend(&BackendError::TooLarge { bytes: 9, max: 8 });
        assert_eq!(huge.code(), Code::ResourceExhausted);
        let leader = from_backend(&BackendError::NotLeader {
            leader_id: Some(2),
            leader_addr: Some("10.0.0.2:7000".into()),
        });
        let detail = detail_of(&leader).unwrap_or_default();
        assert_eq!(detail.code, ErrorCode::NotLeader as i32);
    }
}
