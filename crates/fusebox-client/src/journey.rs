//! A journey: one agent turn (or user intent) with a total time budget.
//!
//! The runbook builds budgets from the outside in: the user's deadline is
//! the journey's `budget`; the agent keeps a `reserve` of it for the final
//! answer; every tool call gets at most what is left of the budget less the
//! reserve. A tool deadline therefore always expires before the journey's,
//! and the agent can still say what happened.

use crate::error::Layer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One turn's time budget, its reserve and its cancellation.
#[derive(Debug)]
pub struct Journey {
    intent_id: String,
    started: Instant,
    budget: Duration,
    reserve: Duration,
    cancel: CancellationToken,
    pub(crate) counted: AtomicBool,
}

/// A deadline and the layer that set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deadline {
    pub(crate) duration: Duration,
    pub(crate) layer: Layer,
}

impl Journey {
    /// Starts a journey now. A reserve larger than the budget leaves no time
    /// for any call.
    pub fn new(intent_id: impl Into<String>, budget: Duration, reserve: Duration) -> Self {
        Journey {
            intent_id: intent_id.into(),
            started: Instant::now(),
            budget,
            reserve,
            cancel: CancellationToken::new(),
            counted: AtomicBool::new(false),
        }
    }

    /// The intent every attempt of this journey reports.
    pub fn intent_id(&self) -> &str {
        &self.intent_id
    }

    /// The total budget.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// The part of the budget kept for the final answer.
    pub fn reserve(&self) -> Duration {
        self.reserve
    }

    /// Time since the journey started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Budget left, the reserve included.
    pub fn remaining(&self) -> Duration {
        self.budget.saturating_sub(self.elapsed())
    }

    /// Budget left for tool calls: what remains less the reserve.
    pub fn available(&self) -> Duration {
        self.remaining().saturating_sub(self.reserve)
    }

    /// Cancels the journey: every running call's token fires and its future
    /// is dropped.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Whether [`Journey::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// A token for one call: fires when the journey is cancelled, and can be
    /// fired alone when the call's own deadline expires.
    pub(crate) fn call_token(&self) -> CancellationToken {
        self.cancel.child_token()
    }

    /// The journey's own token (cancelled with the journey).
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The deadline of a call whose own layer allows `own` (a tool's
    /// timeout, a cluster RPC's): capped by the journey's budget less its
    /// reserve, in which case the journey is the layer that will expire.
    pub(crate) fn deadline(&self, own: Duration, own_layer: Layer) -> Deadline {
        let available = self.available();
        let deadline = if own <= available {
            Deadline {
                duration: own,
                layer: own_layer,
            }
        } else {
            Deadline {
                duration: available,
                layer: Layer::Journey,
            }
        };
        debug_assert!(
            deadline.duration <= available,
            "an inner deadline never outlives the journey's budget less its reserve"
        );
        deadline
    }

    /// Counts the journey once in the client's metrics (`calls per intent`).
    pub(crate) fn first_use(&self) -> bool {
        !self.counted.swap(true, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_deadline_is_capped_by_the_budget_less_the_reserve() {
        let j = Journey::new("i", Duration::from_secs(10), Duration::from_secs(2));
        let d = j.deadline(Duration::from_secs(3), Layer::Tool);
        assert_eq!((d.duration, d.layer), (Duration::from_secs(3), Layer::Tool));
        let d = j.deadline(Duration::from_secs(60), Layer::Tool);
        assert_eq!(d.layer, Layer::Journey);
        assert!(d.duration <= Duration::from_secs(8));
    }

    #[test]
    fn a_reserve_above_the_budget_leaves_nothing() {
        let j = Journey::new("i", Duration::from_secs(1), Duration::from_secs(2));
        assert_eq!(j.available(), Duration::ZERO);
        assert_eq!(
            j.deadline(Duration::from_secs(1), Layer::Tool).layer,
            Layer::Journey
        );
    }

    #[test]
    fn cancelling_the_journey_fires_every_call_token() {
        let j = Journey::new("i", Duration::from_secs(1), Duration::ZERO);
        let call = j.call_token();
        j.cancel();
        assert!(call.is_cancelled());
    }
}
