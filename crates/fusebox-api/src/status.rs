//! Failures as gRPC statuses, each chosen on purpose and each carrying one
//! encoded [`FuseboxErrorDetail`] in the status details.
//!
//! The code each [`ErrorCode`] travels with is fixed by `common.proto`, so
//! generic gRPC clients retry exactly what is safe: only UNAVAILABLE invites
//! a retry, FAILED_PRECONDITION means "stop until state is fixed". Normal
//! answers (a ledger replay, a denied probe) never come through here.

use fusebox_core::policy::PolicyProblem;
use fusebox_core::CoreError;
use fusebox_proto::v1::fusebox_error_detail::Detail;
use fusebox_proto::v1::{
    AmbiguousDetail, ErrorCode, FieldProblem, FuseboxErrorDetail, InvalidArgumentDetail,
    InvalidStateDetail, LimitReachedDetail, NotFoundDetail, NotLeaderDetail, PolicyInvalidDetail,
    RateLimitedDetail, StaleDetail, WritesBlockedDetail,
};
use prost::Message;
use tonic::codegen::Bytes;
use tonic::{Code, Status};

/// A status with `detail` encoded in its details; the message is the
/// detail's message.
pub fn with_detail(
    code: Code,
    error: ErrorCode,
    message: String,
    detail: Option<Detail>,
) -> Status {
    let body = FuseboxErrorDetail {
        code: error as i32,
        message: message.clone(),
        detail,
    };
    Status::with_details(code, message, Bytes::from(body.encode_to_vec()))
}

/// Reads the detail back from a status (tests and clients).
pub fn detail_of(status: &Status) -> Option<FuseboxErrorDetail> {
    FuseboxErrorDetail::decode(status.details()).ok()
}

/// INVALID_ARGUMENT naming the request field, the rule and why.
pub fn invalid_argument(field: &str, rule: &str, message: impl Into<String>) -> Status {
    let message = message.into();
    let problem = FieldProblem {
        field: field.to_owned(),
        rule: rule.to_owned(),
        message: message.clone(),
    };
    with_detail(
        Code::InvalidArgument,
        ErrorCode::InvalidArgument,
        format!("invalid {field}: {message}"),
        Some(Detail::InvalidArgument(InvalidArgumentDetail {
            problem: Some(problem),
        })),
    )
}

/// INVALID_ARGUMENT for a field that broke a rule the core words as
/// `reason` ("must not be empty", "is 300 bytes, at most 256 allowed").
pub fn invalid_field(field: &str, reason: &str) -> Status {
    invalid_argument(field, rule_name(reason), reason)
}

/// INVALID_ARGUMENT listing every problem of a refused policy document.
pub fn policy_invalid(problems: &[PolicyProblem]) -> Status {
    let problems: Vec<FieldProblem> = problems
        .iter()
        .map(|p| FieldProblem {
            field: p.field.clone(),
            rule: rule_name(&p.rule).to_owned(),
            message: p.rule.clone(),
        })
        .collect();
    let listed: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect();
    with_detail(
        Code::InvalidArgument,
        ErrorCode::PolicyInvalid,
        format!(
            "policy rejected, {} problem(s): {}",
            problems.len(),
            listed.join("; ")
        ),
        Some(Detail::PolicyInvalid(PolicyInvalidDetail { problems })),
    )
}

/// RESOURCE_EXHAUSTED for a caller over a per-caller bound, with when to
/// try again.
pub fn rate_limited(limit: &str, retry_after_ms: u64, message: String) -> Status {
    with_detail(
        Code::ResourceExhausted,
        ErrorCode::RateLimited,
        message,
        Some(Detail::RateLimited(RateLimitedDetail {
            limit: limit.to_owned(),
            retry_after_ms,
        })),
    )
}

/// RESOURCE_EXHAUSTED naming the bound that was hit.
pub fn limit_reached(limit: &str, max: u64, actual: u64) -> Status {
    with_detail(
        Code::ResourceExhausted,
        ErrorCode::LimitReached,
        format!("limit {limit} reached: {actual} given or held, at most {max}"),
        Some(Detail::LimitReached(LimitReachedDetail {
            limit: limit.to_owned(),
            max,
            actual,
        })),
    )
}

/// NOT_FOUND for a thing of `kind` called `name`, with a sentence.
pub fn not_found(kind: &str, name: &str, message: impl Into<String>) -> Status {
    with_detail(
        Code::NotFound,
        ErrorCode::NotFound,
        message.into(),
        Some(Detail::NotFound(NotFoundDetail {
            kind: kind.to_owned(),
            name: name.to_owned(),
        })),
    )
}

/// FAILED_PRECONDITION: the request names something no longer current.
pub fn stale(what: &str, given: String, current: String) -> Status {
    with_detail(
        Code::FailedPrecondition,
        ErrorCode::Stale,
        format!("stale {what}: request has {given}, current is {current}"),
        Some(Detail::Stale(StaleDetail {
            what: what.to_owned(),
            given,
            current,
        })),
    )
}

/// FAILED_PRECONDITION: the record's state forbids the operation.
pub fn invalid_state(current: &str, allowed: &[&str], message: String) -> Status {
    with_detail(
        Code::FailedPrecondition,
        ErrorCode::InvalidState,
        message,
        Some(Detail::InvalidState(InvalidStateDetail {
            current: current.to_owned(),
            allowed: allowed.iter().map(|s| (*s).to_owned()).collect(),
        })),
    )
}

/// FAILED_PRECONDITION: an earlier attempt's outcome is unknown; stop and
/// look the key up.
pub fn ambiguous(key: &str, attempt_id: &str, reason: &str) -> Status {
    with_detail(
        Code::FailedPrecondition,
        ErrorCode::Ambiguous,
        format!(
            "the outcome of attempt {attempt_id} on key {key} is unknown ({reason}); look the key \
             up and let an operator resolve it"
        ),
        Some(Detail::Ambiguous(AmbiguousDetail {
            key: key.to_owned(),
            attempt_id: attempt_id.to_owned(),
            reason: reason.to_owned(),
        })),
    )
}

/// FAILED_PRECONDITION: the namespace's write kill switch is on.
pub fn writes_blocked(namespace: &str, reason: &str, actor: &str, since_ms: u64) -> Status {
    with_detail(
        Code::FailedPrecondition,
        ErrorCode::WritesBlocked,
        format!("writes are blocked in namespace {namespace} by {actor}: {reason}"),
        Some(Detail::WritesBlocked(WritesBlockedDetail {
            reason: reason.to_owned(),
            actor: actor.to_owned(),
            since_ms,
        })),
    )
}

/// UNAVAILABLE: this node is not the leader and did not forward.
pub fn not_leader(leader_id: Option<u64>, leader_addr: Option<String>, why: &str) -> Status {
    let hint = leader_addr
        .as_deref()
        .map_or_else(|| "unknown".to_owned(), str::to_owned);
    with_detail(
        Code::Unavailable,
        ErrorCode::NotLeader,
        format!("this node is not the leader ({why}); leader: {hint}"),
        Some(Detail::NotLeader(NotLeaderDetail {
            leader_id,
            leader_address: leader_addr,
        })),
    )
}

/// The status for a refusal of the core: each variant mapped on purpose.
pub fn from_core(error: &CoreError) -> Status {
    match error {
        CoreError::InvalidField { field, reason } => invalid_field(field, reason),
        CoreError::InvalidPolicy(problems) => policy_invalid(problems),
        CoreError::LimitReached { what, max } => {
            let max = u64::try_from(*max).unwrap_or(u64::MAX);
            limit_reached(&what.replace(' ', "_"), max, max)
        }
        CoreError::TooLarge { limit, max, actual } => limit_reached(limit, *max, *actual),
        CoreError::NotFound { what, name } => not_found(
            &what.replace(' ', "_"),
            name,
            format!("{what} not found: {name}"),
        ),
        CoreError::WritesBlocked {
            namespace,
            actor,
            reason,
            since_ms,
        } => writes_blocked(namespace, reason, actor, *since_ms),
        CoreError::Snapshot(reason) => with_detail(
            Code::Internal,
            ErrorCode::Unspecified,
            format!("state snapshot failed: {reason}"),
            None,
        ),
        CoreError::InUse { .. } => invalid_state("in_use", &["unused"], error.to_string()),
    }
}

/// A short stable rule name for a core reason, so tools can match on it.
fn rule_name(reason: &str) -> &'static str {
    if reason.contains("must not be empty") {
        "required"
    } else if reason.contains("bytes, at most") {
        "max_len"
    } else if reason.starts_with("character") {
        "charset"
    } else if reason.starts_with("must be") {
        "range"
    } else {
        "invalid"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_error_maps_to_its_documented_code() {
        let cases = [
            (
                CoreError::invalid("key", "must not be empty"),
                Code::InvalidArgument,
            ),
            (CoreError::InvalidPolicy(vec![]), Code::InvalidArgument),
            (
                CoreError::limit("breakers in namespace", 3),
                Code::ResourceExhausted,
            ),
            (
                CoreError::too_large("stored_result_bytes_max", 16, 17),
                Code::ResourceExhausted,
            ),
            (
                CoreError::not_found("policy version", "ns v3"),
                Code::NotFound,
            ),
            (CoreError::Snapshot("bad".into()), Code::Internal),
        ];
        for (error, code) in cases {
            let status = from_core(&error);
            assert_eq!(status.code(), code, "{error}");
            assert!(detail_of(&status).is_some());
        }
    }

    #[test]
    fn invalid_field_names_the_field_and_rule() {
        let status = from_core(&CoreError::invalid(
            "key",
            "is 300 bytes, at most 256 allowed",
        ));
        let Some(Detail::InvalidArgument(d)) = detail_of(&status).and_then(|d| d.detail) else {
            panic!("no invalid_argument detail");
        };
        let problem = d.problem.unwrap_or_default();
        assert_eq!(
            (problem.field.as_str(), problem.rule.as_str()),
            ("key", "max_len")
        );
    }
}
