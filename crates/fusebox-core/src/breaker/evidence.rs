//! The evidence a closed breaker gathers before it trips.
//!
//! Two kinds, matching the two trip rules: a streak of consecutive failures
//! (in log order, fleet-wide) and a sliding time window of call counts, kept
//! as a fixed number of buckets so memory per breaker is bounded. Either way
//! the distinct replicas that saw failures are remembered (bounded), so
//! `min_reporters` can refuse to trip on one replica's broken network.

use crate::limits::REPORTERS_TRACKED_MAX;
use crate::name::ReplicaId;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Buckets a sliding window is split into.
pub const WINDOW_BUCKETS: u64 = 10;

/// Call counts over some span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Calls that counted (successes and failures; ignored outcomes excluded).
    pub calls: u64,
    /// Calls that failed.
    pub failures: u64,
    /// Calls at least `slow_call_ms` long.
    pub slow: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.calls = self.calls.saturating_add(other.calls);
        self.failures = self.failures.saturating_add(other.failures);
        self.slow = self.slow.saturating_add(other.slow);
    }
}

/// Counts over the last `window_ms`, in [`WINDOW_BUCKETS`] buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlidingWindow {
    /// (bucket index = time / bucket width, counts), oldest first.
    buckets: VecDeque<(u64, Counts)>,
}

impl SlidingWindow {
    fn bucket_ms(window_ms: u64) -> u64 {
        (window_ms / WINDOW_BUCKETS).max(1)
    }

    /// Adds one call observed at `now`.
    pub fn record(&mut self, window_ms: u64, now: Timestamp, counts: Counts) {
        let index = now.as_millis() / Self::bucket_ms(window_ms);
        self.expire(window_ms, now);
        match self.buckets.back_mut() {
            Some((last, c)) if *last == index => c.add(counts),
            // Entry times are monotonic per leader but a new leader's clock may
            // lag; a late call joins the newest bucket rather than reordering.
            Some((last, c)) if *last > index => c.add(counts),
            _ => self.buckets.push_back((index, counts)),
        }
    }

    /// Drops buckets that fell out of the window.
    pub fn expire(&mut self, window_ms: u64, now: Timestamp) {
        let index = now.as_millis() / Self::bucket_ms(window_ms);
        let oldest = index.saturating_sub(WINDOW_BUCKETS - 1);
        while matches!(self.buckets.front(), Some((i, _)) if *i < oldest) {
            self.buckets.pop_front();
        }
        debug_assert!(self.buckets.len() as u64 <= WINDOW_BUCKETS);
    }

    /// Totals over the live window at `now`.
    pub fn totals(&self, window_ms: u64, now: Timestamp) -> Counts {
        let index = now.as_millis() / Self::bucket_ms(window_ms);
        let oldest = index.saturating_sub(WINDOW_BUCKETS - 1);
        let mut total = Counts::default();
        for (_, c) in self.buckets.iter().filter(|(i, _)| *i >= oldest) {
            total.add(*c);
        }
        total
    }

    /// Totals over every bucket still held (audit evidence).
    pub fn sum_all(&self) -> Counts {
        let mut total = Counts::default();
        for (_, c) in &self.buckets {
            total.add(*c);
        }
        total
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.buckets.clear();
    }
}

/// Distinct replicas that reported failures, with the time of their latest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reporters {
    last_failure: BTreeMap<ReplicaId, Timestamp>,
}

impl Reporters {
    /// Notes a failure seen by `replica` at `now`; evicts the stalest when full.
    pub fn note(&mut self, replica: &ReplicaId, now: Timestamp) {
        // A replica already remembered is updated in place (no name copied).
        if let Some(at) = self.last_failure.get_mut(replica) {
            *at = now;
            return;
        }
        if self.last_failure.len() >= REPORTERS_TRACKED_MAX {
            let stalest = self
                .last_failure
                .iter()
                .min_by_key(|(id, at)| (**at, (*id).clone()))
                .map(|(id, _)| id.clone());
            if let Some(id) = stalest {
                self.last_failure.remove(&id);
            }
        }
        self.last_failure.insert(replica.clone(), now);
    }

    /// Forgets replicas whose latest failure is before `since`.
    pub fn expire_before(&mut self, since: Timestamp) {
        self.last_failure.retain(|_, at| *at >= since);
    }

    /// How many distinct replicas are remembered.
    pub fn count(&self) -> usize {
        self.last_failure.len()
    }

    /// The replicas, in order (audit evidence).
    pub fn list(&self) -> Vec<ReplicaId> {
        self.last_failure.keys().cloned().collect()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        if !self.last_failure.is_empty() {
            self.last_failure.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(fail: bool) -> Counts {
        Counts {
            calls: 1,
            failures: u64::from(fail),
            slow: 0,
        }
    }

    #[test]
    fn window_forgets_calls_older_than_its_width() {
        let mut w = SlidingWindow::default();
        w.record(60_000, Timestamp(0), one(true));
        w.record(60_000, Timestamp(30_000), one(false));
        assert_eq!(w.totals(60_000, Timestamp(30_000)).calls, 2);
        assert_eq!(w.totals(60_000, Timestamp(65_000)).calls, 1);
        w.expire(60_000, Timestamp(200_000));
        assert_eq!(w.totals(60_000, Timestamp(200_000)), Counts::default());
    }

    #[test]
    fn reporters_are_bounded() {
        let mut r = Reporters::default();
        for i in 0..(REPORTERS_TRACKED_MAX + 10) {
            let id = ReplicaId::new(format!("r{i}")).unwrap();
            r.note(&id, Timestamp(i as u64));
        }
        assert_eq!(r.count(), REPORTERS_TRACKED_MAX);
        assert!(!r.list().contains(&ReplicaId::new("r0").unwrap()));
    }
}
