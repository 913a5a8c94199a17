//! What a disclosed degradation mode tells a caller to do.
//!
//! The spec's `degradation_modes` name a trigger (`queue_depth>50`,
//! `downstream_dependency_unavailable`, `rate_limit`, ...) and describe the
//! tool's behavior in that mode in free text ("queue and serve", "fail fast
//! with 503"), with the p95 to plan for. Two behaviors say what a caller
//! should do, and the SDK acts on them when a failed call reports its mode:
//!
//! - **Fail fast**: the tool answers at once with an error while the mode
//!   lasts, so another attempt in the same journey would only fail again.
//! - **Queue**: the tool still serves, later; an attempt deserves the mode's
//!   p95 × 1.2 rather than the healthy p99 × 1.2.
//!
//! Any other behavior (degrade quality, fall back) changes nothing here.

use super::block::{DegradationMode, LatencyDisclosure};
use super::{DEADLINE_FACTOR_DEN, DEADLINE_FACTOR_NUM};

/// What a mode's behavior says a caller should do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeAdvice {
    /// The tool fails at once in this mode: do not try it again now.
    FailFast,
    /// The tool queues and serves in this mode: wait for the mode's p95.
    Queue,
    /// Nothing a caller should change.
    None,
}

impl DegradationMode {
    /// What this mode's behavior says a caller should do. The behavior is
    /// free text: "fail fast" (or "fail-fast", "fails fast") and "reject"
    /// mean [`ModeAdvice::FailFast`], "queue" means [`ModeAdvice::Queue`];
    /// a behavior that says both is taken as failing fast.
    pub fn advice(&self) -> ModeAdvice {
        let behavior = self.behavior.to_ascii_lowercase().replace('-', " ");
        let fails_fast = ["fail fast", "fails fast", "reject"]
            .iter()
            .any(|w| behavior.contains(w));
        if fails_fast {
            ModeAdvice::FailFast
        } else if behavior.contains("queue") {
            ModeAdvice::Queue
        } else {
            ModeAdvice::None
        }
    }

    /// Whether a tool that reports `reported` is in this mode: the same
    /// trigger, or the trigger's name before its threshold (`queue_depth`
    /// for `queue_depth>50`). Case and surrounding spaces do not matter.
    pub fn matches(&self, reported: &str) -> bool {
        let reported = reported.trim();
        if reported.is_empty() {
            return false;
        }
        let trigger = self.trigger.trim();
        let name = trigger
            .split(['>', '<', '='])
            .next()
            .unwrap_or(trigger)
            .trim();
        trigger.eq_ignore_ascii_case(reported) || name.eq_ignore_ascii_case(reported)
    }

    /// The deadline an attempt deserves in this mode: `expected_p95_ms ×
    /// 1.2`, rounded up.
    pub fn deadline_ms(&self) -> u64 {
        let scaled = u128::from(self.expected_p95_ms) * u128::from(DEADLINE_FACTOR_NUM);
        let den = u128::from(DEADLINE_FACTOR_DEN);
        u64::try_from(scaled.div_ceil(den)).unwrap_or(u64::MAX)
    }
}

impl LatencyDisclosure {
    /// The documented mode a tool that reports `reported` is in, if the
    /// block documents one (the first that matches).
    pub fn mode(&self, reported: &str) -> Option<&DegradationMode> {
        self.degradation_modes.iter().find(|m| m.matches(reported))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(trigger: &str, behavior: &str, expected_p95_ms: u64) -> DegradationMode {
        DegradationMode {
            trigger: trigger.into(),
            behavior: behavior.into(),
            expected_p95_ms,
        }
    }

    #[test]
    fn the_behavior_text_says_what_to_do() {
        let advice = |behavior| mode("x", behavior, 1).advice();
        assert_eq!(advice("fail fast with 503"), ModeAdvice::FailFast);
        assert_eq!(advice("Fail-fast"), ModeAdvice::FailFast);
        assert_eq!(advice("fails fast"), ModeAdvice::FailFast);
        assert_eq!(advice("reject new requests"), ModeAdvice::FailFast);
        assert_eq!(advice("queue and serve"), ModeAdvice::Queue);
        assert_eq!(advice("Queued, then served"), ModeAdvice::Queue);
        assert_eq!(
            advice("queue briefly, then fail fast"),
            ModeAdvice::FailFast
        );
        assert_eq!(advice("degrade quality"), ModeAdvice::None);
        assert_eq!(advice(""), ModeAdvice::None);
    }

    #[test]
    fn a_reported_trigger_matches_by_name_or_whole() {
        let queue = mode("queue_depth>50", "queue and serve", 4500);
        assert!(queue.matches("queue_depth"));
        assert!(queue.matches("queue_depth>50"));
        assert!(queue.matches(" QUEUE_DEPTH "));
        assert!(!queue.matches("queue"));
        assert!(!queue.matches(""));
        let down = mode("downstream_dependency_unavailable", "fail fast", 200);
        assert!(down.matches("downstream_dependency_unavailable"));
        assert!(!down.matches("rate_limit"));
    }

    #[test]
    fn a_mode_deadline_is_its_p95_times_the_factor_rounded_up() {
        assert_eq!(mode("q", "queue", 4500).deadline_ms(), 5400);
        assert_eq!(mode("q", "queue", 1).deadline_ms(), 2);
        assert_eq!(mode("q", "queue", 0).deadline_ms(), 0);
        assert_eq!(mode("q", "queue", u64::MAX).deadline_ms(), u64::MAX);
    }
}
