//! Bounded retries: which failures may be retried, and how long to wait.
//!
//! The runbook's rule: retry only read-only or retry-safe tools, only for
//! retryable classes (transport, 429, 503 by default; the policy's
//! `retry_on`), only while the journey has budget for the wait and another
//! attempt, with exponential backoff and full jitter, at most `max_attempts`
//! in all. A non-idempotent write is never retried.

use fusebox_core::policy::{EffectClass, RetryPolicy, ToolPolicy};
use fusebox_core::OutcomeClass;
use std::time::Duration;

/// The wait before attempt `attempt + 1` (`attempt` counts from 1), in
/// milliseconds: `initial × 2^(attempt-1)` capped at `max`, and with jitter a
/// uniform draw in `[0, that]` from `unit` (a number in `[0, 1)`).
pub fn backoff_ms(policy: &RetryPolicy, attempt: u32, unit: f64) -> u64 {
    let exp = attempt.saturating_sub(1).min(32);
    let ceiling = policy
        .backoff_initial_ms
        .saturating_mul(1u64 << exp)
        .min(policy.backoff_max_ms.max(policy.backoff_initial_ms));
    if policy.jitter {
        (ceiling as f64 * unit.clamp(0.0, 1.0)) as u64
    } else {
        ceiling
    }
}

/// Whether the gate may retry after attempt `attempt` ended in `class`,
/// given the journey's `available` time and the wait it would take.
pub(crate) fn may_retry(
    policy: &ToolPolicy,
    class: OutcomeClass,
    attempt: u32,
    wait: Duration,
    available: Duration,
) -> bool {
    policy.effect != EffectClass::NonIdempotentWrite
        && policy.may_retry()
        && attempt < policy.retry.max_attempts
        && policy.retry.retry_on.contains(&class)
        && !callers_fault_or_success(class)
        && wait < available
}

/// Whether a tool's disclosed flags allow a retry after `class`: never
/// unless `retry_safe`; for a tool that is not `idempotent`, only after a
/// transport failure (the request never reached it).
pub(crate) fn disclosed_retry(retry_safe: bool, idempotent: bool, class: OutcomeClass) -> bool {
    retry_safe && (idempotent || class == OutcomeClass::Transport)
}

/// The policy's `retry_on` may list any class; the gate still refuses to
/// retry an answer that says the caller is at fault or gave up, or a
/// success.
fn callers_fault_or_success(class: OutcomeClass) -> bool {
    matches!(
        class,
        OutcomeClass::Success
            | OutcomeClass::BusinessError
            | OutcomeClass::InvalidArguments
            | OutcomeClass::PolicyDenied
            | OutcomeClass::Cancelled
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_only() -> ToolPolicy {
        ToolPolicy::default()
    }

    #[test]
    fn disclosed_flags_govern_retries() {
        assert!(disclosed_retry(true, true, OutcomeClass::ServerError));
        assert!(!disclosed_retry(false, true, OutcomeClass::Transport));
        assert!(disclosed_retry(true, false, OutcomeClass::Transport));
        assert!(!disclosed_retry(true, false, OutcomeClass::ServerError));
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_without_jitter() {
        let p = RetryPolicy {
            jitter: false,
            ..RetryPolicy::default()
        };
        let got: Vec<u64> = (1..=5).map(|a| backoff_ms(&p, a, 0.5)).collect();
        assert_eq!(got, vec![250, 500, 1_000, 1_500, 1_500]);
    }

    #[test]
    fn jitter_stays_within_the_ceiling() {
        let p = RetryPolicy::default();
        assert_eq!(backoff_ms(&p, 3, 0.0), 0);
        assert_eq!(backoff_ms(&p, 3, 0.5), 500);
        assert!(backoff_ms(&p, 3, 0.999) < 1_000);
    }

    #[test]
    fn only_retryable_classes_of_retry_safe_tools_with_budget_are_retried() {
        let p = read_only();
        let ms = Duration::from_millis;
        assert!(may_retry(&p, OutcomeClass::Transport, 1, ms(10), ms(1_000)));
        assert!(!may_retry(&p, OutcomeClass::Timeout, 1, ms(10), ms(1_000)));
        assert!(!may_retry(
            &p,
            OutcomeClass::Transport,
            3,
            ms(10),
            ms(1_000)
        ));
        assert!(!may_retry(&p, OutcomeClass::Transport, 1, ms(10), ms(5)));
        let mut write = read_only();
        write.effect = EffectClass::NonIdempotentWrite;
        write.retry.max_attempts = 5;
        assert!(!may_retry(
            &write,
            OutcomeClass::Transport,
            1,
            ms(1),
            ms(1_000)
        ));
    }

    #[test]
    fn a_policy_cannot_make_the_callers_fault_retryable() {
        let mut p = read_only();
        p.retry.retry_on.push(OutcomeClass::InvalidArguments);
        let ms = Duration::from_millis;
        assert!(!may_retry(
            &p,
            OutcomeClass::InvalidArguments,
            1,
            ms(1),
            ms(1_000)
        ));
    }
}
