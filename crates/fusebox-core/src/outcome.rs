//! How a tool call ended, and whether that says the dependency is unhealthy.
//!
//! Classification is honest about who is at fault: a timeout, a
//! transport error, a 5xx, a 200 whose result has `isError` set or a result
//! that does not parse all mean the tool is not working. A business answer
//! such as "not found", an invalid-arguments or policy-denied error (the
//! caller's fault) and a call the caller cancelled say nothing about the
//! tool's health. A 429 is its own class; the policy decides.

use serde::{Deserialize, Serialize};

/// The class of one tool call's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeClass {
    /// The tool did its job.
    Success,
    /// The tool answered with a legitimate business result such as "not found".
    BusinessError,
    /// HTTP 200 (or a JSON-RPC result) with `isError` set: the tool did not work.
    ToolError,
    /// No answer before the deadline.
    Timeout,
    /// Connection refused, reset, TLS failure: the request may not have arrived.
    Transport,
    /// The server answered 5xx.
    ServerError,
    /// The server answered 429: its rate limiter engaged.
    RateLimited,
    /// The caller sent bad arguments.
    InvalidArguments,
    /// A policy (ours or the tool's) refused the call.
    PolicyDenied,
    /// The caller gave up on purpose.
    Cancelled,
    /// The answer arrived but could not be parsed: the tool's contract changed.
    Unparsable,
}

impl OutcomeClass {
    /// Every class, in a fixed order (tables, tests).
    pub const ALL: [OutcomeClass; 11] = [
        OutcomeClass::Success,
        OutcomeClass::BusinessError,
        OutcomeClass::ToolError,
        OutcomeClass::Timeout,
        OutcomeClass::Transport,
        OutcomeClass::ServerError,
        OutcomeClass::RateLimited,
        OutcomeClass::InvalidArguments,
        OutcomeClass::PolicyDenied,
        OutcomeClass::Cancelled,
        OutcomeClass::Unparsable,
    ];

    /// How this outcome counts for a tool breaker.
    ///
    /// `rate_limited_is_failure` comes from the policy: counting 429s lets a
    /// fleet that is being throttled stop hammering the tool.
    pub fn verdict(self, rate_limited_is_failure: bool) -> Verdict {
        match self {
            OutcomeClass::Success | OutcomeClass::BusinessError => Verdict::Success,
            OutcomeClass::ToolError
            | OutcomeClass::Timeout
            | OutcomeClass::Transport
            | OutcomeClass::ServerError
            | OutcomeClass::Unparsable => Verdict::Failure,
            OutcomeClass::RateLimited if rate_limited_is_failure => Verdict::Failure,
            OutcomeClass::RateLimited
            | OutcomeClass::InvalidArguments
            | OutcomeClass::PolicyDenied
            | OutcomeClass::Cancelled => Verdict::Ignored,
        }
    }

    /// How this outcome counts for the breaker of the whole server.
    ///
    /// Only failures of the server itself count (timeout, transport, 5xx): one
    /// tool that answers `isError` must not take its healthy siblings offline.
    /// Successes of any tool show the server is up.
    pub fn server_verdict(self) -> Verdict {
        match self {
            OutcomeClass::Timeout | OutcomeClass::Transport | OutcomeClass::ServerError => {
                Verdict::Failure
            }
            OutcomeClass::Success | OutcomeClass::BusinessError | OutcomeClass::ToolError => {
                Verdict::Success
            }
            _ => Verdict::Ignored,
        }
    }

    /// Whether the call's duration is a response time the tool is
    /// accountable for, and so enters its observed latency: the tool
    /// answered. Timeouts are left out as the disclosure spec asks (calls
    /// aborted at the timeout are excluded from p95 and p99), as are
    /// transport failures, calls the caller cancelled and calls refused by
    /// policy before they reached the tool.
    pub fn has_latency(self) -> bool {
        !matches!(
            self,
            OutcomeClass::Timeout
                | OutcomeClass::Transport
                | OutcomeClass::Cancelled
                | OutcomeClass::PolicyDenied
        )
    }

    /// Whether a read-only or retry-safe call may be retried after this outcome.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            OutcomeClass::Transport | OutcomeClass::RateLimited | OutcomeClass::ServerError
        )
    }

    /// The wire name (`snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeClass::Success => "success",
            OutcomeClass::BusinessError => "business_error",
            OutcomeClass::ToolError => "tool_error",
            OutcomeClass::Timeout => "timeout",
            OutcomeClass::Transport => "transport",
            OutcomeClass::ServerError => "server_error",
            OutcomeClass::RateLimited => "rate_limited",
            OutcomeClass::InvalidArguments => "invalid_arguments",
            OutcomeClass::PolicyDenied => "policy_denied",
            OutcomeClass::Cancelled => "cancelled",
            OutcomeClass::Unparsable => "unparsable",
        }
    }
}

/// What one outcome means to a breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Evidence the dependency works.
    Success,
    /// Evidence the dependency is unhealthy.
    Failure,
    /// No evidence either way; the breaker does not count it.
    Ignored,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_table_matches_the_brief() {
        use OutcomeClass::*;
        let failures: Vec<_> = OutcomeClass::ALL
            .into_iter()
            .filter(|c| c.verdict(false) == Verdict::Failure)
            .collect();
        assert_eq!(
            failures,
            vec![ToolError, Timeout, Transport, ServerError, Unparsable]
        );
        assert_eq!(BusinessError.verdict(false), Verdict::Success);
        assert_eq!(InvalidArguments.verdict(true), Verdict::Ignored);
        assert_eq!(Cancelled.verdict(true), Verdict::Ignored);
        assert_eq!(RateLimited.verdict(false), Verdict::Ignored);
        assert_eq!(RateLimited.verdict(true), Verdict::Failure);
    }

    #[test]
    fn a_tool_error_does_not_fail_the_server() {
        assert_eq!(OutcomeClass::ToolError.server_verdict(), Verdict::Success);
        assert_eq!(OutcomeClass::Timeout.server_verdict(), Verdict::Failure);
    }
}
