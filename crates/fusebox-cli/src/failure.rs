//! Failures as operators and scripts see them: one legible message, and an
//! exit code that says what kind of failure it was.
//!
//! Every error a command returns is classified here, whether it came from
//! the cluster (a gRPC status with its `FuseboxErrorDetail`), from the
//! network, from clap, or from the CLI's own checks (an unknown namespace,
//! an unreadable file). The classes are the exit codes documented in
//! `--help` and `docs/operators.md`; a script may branch on them:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | the cluster refused or failed (wrong state, stale view, internal) |
//! | 2 | bad usage or input (flags, key syntax, invalid policy document) |
//! | 3 | not found (namespace, key, breaker, tool or policy version) |
//! | 4 | cluster unreachable or unavailable (no leader, timeout): retry later |

use fusebox_proto::v1::{
    fusebox_error_detail::Detail, ErrorCode, FieldProblem, FuseboxErrorDetail,
};
use prost::Message;
use serde_json::json;
use std::fmt;
use std::future::Future;
use tonic::Code;

/// The exit codes, as `--help` prints them.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  the cluster refused or failed (wrong state, stale view, internal error)
  2  bad usage or input (flags, key syntax, invalid policy document)
  3  not found (unknown namespace, key, breaker, tool or policy version)
  4  cluster unreachable or unavailable (no leader, timeout): retry later";

/// What kind of failure, one per exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// The cluster refused the request or failed serving it.
    Refused,
    /// The request is malformed: fix the command line or the file.
    BadInput,
    /// The named thing does not exist.
    NotFound,
    /// No member could serve now; the same command may work later.
    Unavailable,
}

impl ExitKind {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitKind::Refused => 1,
            ExitKind::BadInput => 2,
            ExitKind::NotFound => 3,
            ExitKind::Unavailable => 4,
        }
    }

    /// A stable name for JSON output.
    pub fn name(self) -> &'static str {
        match self {
            ExitKind::Refused => "refused",
            ExitKind::BadInput => "bad_input",
            ExitKind::NotFound => "not_found",
            ExitKind::Unavailable => "unavailable",
        }
    }

    fn of_status(code: Code) -> ExitKind {
        match code {
            Code::InvalidArgument | Code::OutOfRange => ExitKind::BadInput,
            Code::NotFound => ExitKind::NotFound,
            Code::Unavailable | Code::DeadlineExceeded => ExitKind::Unavailable,
            _ => ExitKind::Refused,
        }
    }
}

/// A failure with its class, the server's error code when there is one, and
/// every policy problem when a document was refused.
#[derive(Debug)]
pub struct Failure {
    kind: ExitKind,
    code: Option<&'static str>,
    message: String,
    problems: Vec<FieldProblem>,
}

impl Failure {
    /// A failure of `kind` with a message.
    pub fn new(kind: ExitKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            code: None,
            message: message.into(),
            problems: Vec::new(),
        }
    }

    /// The command line or a file is wrong.
    pub fn bad_input(message: impl Into<String>) -> Failure {
        Failure::new(ExitKind::BadInput, message)
    }

    /// The named thing does not exist.
    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure::new(ExitKind::NotFound, message)
    }

    /// The cluster's state forbids the command.
    pub fn refused(message: impl Into<String>) -> Failure {
        Failure::new(ExitKind::Refused, message)
    }

    /// A gRPC status from `what`, with the detail the server attached.
    pub fn from_status(what: &str, status: &tonic::Status) -> Failure {
        let detail = FuseboxErrorDetail::decode(status.details()).ok();
        let code = detail
            .as_ref()
            .and_then(|d| ErrorCode::try_from(d.code).ok())
            .filter(|c| *c != ErrorCode::Unspecified)
            .map(|c| {
                let name = c.as_str_name();
                name.strip_prefix("ERROR_CODE_").unwrap_or(name)
            });
        let problems = match detail.and_then(|d| d.detail) {
            Some(Detail::PolicyInvalid(p)) => p.problems,
            _ => Vec::new(),
        };
        // A status made on this side of the wire (it has an underlying
        // error) means the connection failed, not the cluster: the node is
        // unreachable. A node serving TLS drops a client speaking in the
        // clear, which then sees only a broken connection (an HTTP/2 error,
        // a cancelled call, a transport error): say what to try.
        let broken_connection = code.is_none() && std::error::Error::source(status).is_some();
        let timed_out = status.message().contains("Timeout expired");
        let message = if broken_connection && !timed_out {
            format!(
                "{what}: {} (the connection broke; if the cluster serves TLS, pass --tls-ca)",
                status.message()
            )
        } else if problems.is_empty() {
            format!("{what}: {}", status.message())
        } else {
            format!(
                "{what}: policy refused with {} problem(s); nothing was stored and the \
                 version in force is unchanged",
                problems.len()
            )
        };
        let kind = if broken_connection {
            ExitKind::Unavailable
        } else {
            ExitKind::of_status(status.code())
        };
        Failure {
            kind,
            code,
            message,
            problems,
        }
    }

    /// This failure as JSON, for `--json` callers reading stderr.
    pub fn to_json(&self) -> serde_json::Value {
        let problems: Vec<_> = self
            .problems
            .iter()
            .map(|p| json!({"field": p.field, "rule": p.rule, "message": p.message}))
            .collect();
        json!({"error": {
            "kind": self.kind.name(),
            "exit_code": self.kind.code(),
            "code": self.code,
            "message": self.message,
            "problems": problems,
        }})
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        for p in &self.problems {
            write!(f, "\n  - {}: {} [{}]", p.field, p.message, p.rule)?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// Awaits one RPC; a failed status becomes a [`Failure`] naming `what`.
pub async fn rpc<T>(
    what: &str,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, Failure> {
    call.await
        .map(tonic::Response::into_inner)
        .map_err(|status| Failure::from_status(what, &status))
}

/// The class of any error a command returned.
pub fn exit_kind(e: &anyhow::Error) -> ExitKind {
    for cause in e.chain() {
        if let Some(f) = cause.downcast_ref::<Failure>() {
            return f.kind;
        }
        if let Some(s) = cause.downcast_ref::<tonic::Status>() {
            return ExitKind::of_status(s.code());
        }
        if cause.downcast_ref::<tonic::transport::Error>().is_some() {
            return ExitKind::Unavailable;
        }
        if cause.downcast_ref::<clap::Error>().is_some() {
            return ExitKind::BadInput;
        }
    }
    ExitKind::Refused
}

/// Any error as JSON: a [`Failure`] with its details, anything else by its
/// message and class.
pub fn error_json(e: &anyhow::Error) -> serde_json::Value {
    if let Some(f) = e.downcast_ref::<Failure>() {
        return f.to_json();
    }
    let kind = exit_kind(e);
    Failure::new(kind, format!("{e:#}")).to_json()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_proto::v1::PolicyInvalidDetail;
    use tonic::codegen::Bytes;

    fn status_with(code: Code, detail: FuseboxErrorDetail) -> tonic::Status {
        tonic::Status::with_details(code, "refused", Bytes::from(detail.encode_to_vec()))
    }

    #[test]
    fn status_codes_map_to_documented_exit_codes() {
        let cases = [
            (Code::InvalidArgument, 2),
            (Code::NotFound, 3),
            (Code::Unavailable, 4),
            (Code::DeadlineExceeded, 4),
            (Code::FailedPrecondition, 1),
            (Code::Internal, 1),
        ];
        for (code, exit) in cases {
            let e = anyhow::Error::new(Failure::from_status("x", &tonic::Status::new(code, "m")));
            assert_eq!(exit_kind(&e).code(), exit, "{code:?}");
        }
    }

    #[test]
    fn policy_problems_are_listed_one_per_line() {
        let problems = vec![
            FieldProblem {
                field: "defaults.timeout_ms".into(),
                rule: "range".into(),
                message: "must be at least 1".into(),
            },
            FieldProblem {
                field: "ledger.retention_ms".into(),
                rule: "range".into(),
                message: "must be at least 60000".into(),
            },
        ];
        let detail = FuseboxErrorDetail {
            code: ErrorCode::PolicyInvalid as i32,
            message: "bad".into(),
            detail: Some(Detail::PolicyInvalid(PolicyInvalidDetail { problems })),
        };
        let failure =
            Failure::from_status("policy apply", &status_with(Code::InvalidArgument, detail));
        let text = failure.to_string();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains("\n  - defaults.timeout_ms: must be at least 1 [range]"));
        let json = failure.to_json();
        assert_eq!(json["error"]["code"], "POLICY_INVALID");
        assert_eq!(json["error"]["exit_code"], 2);
        assert_eq!(json["error"]["problems"][1]["field"], "ledger.retention_ms");
    }

    #[test]
    fn errors_of_unknown_origin_are_refusals() {
        let e = anyhow::anyhow!("something odd");
        assert_eq!(exit_kind(&e), ExitKind::Refused);
        assert_eq!(error_json(&e)["error"]["exit_code"], 1);
    }
}
