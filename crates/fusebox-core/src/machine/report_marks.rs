//! Which outcome batch each replica last had counted, so a batch resent
//! after a lost answer is not counted twice.
//!
//! A replica numbers its report batches (`batch_seq`, growing, 0 meaning
//! "unnumbered"). The SDK resends a batch whose answer it did not get, and
//! a lost answer is indistinguishable from a lost request: without a mark,
//! one replica's failures could be counted twice and trip a breaker early.
//! A batch numbered at or below the replica's mark is a repeat: it changes
//! nothing and its outcomes are answered as duplicates.
//!
//! Bounded: at most [`REPORT_MARKS_MAX`] marks, the least recently used
//! evicted first, and a mark idle for [`REPORT_MARK_IDLE_MS`] is dropped by
//! `Tick` (a replica silent that long has long stopped resending).

use crate::limits::{REPORT_MARKS_MAX, REPORT_MARK_IDLE_MS};
use crate::name::{Namespace, ReplicaId};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

type Reporter = (Namespace, ReplicaId);

/// Each replica's last counted batch number, and when it was noted.
///
/// The field order is the snapshot encoding's: do not reorder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReportMarks {
    marks: BTreeMap<Reporter, (u64, Timestamp)>,
    by_age: BTreeSet<(Timestamp, Reporter)>,
}

impl ReportMarks {
    /// Whether batch `seq` of `replica` was counted already.
    pub(super) fn is_repeat(&self, ns: &Namespace, replica: &ReplicaId, seq: u64) -> bool {
        seq != 0
            && self
                .marks
                .get(&(ns.clone(), replica.clone()))
                .is_some_and(|(mark, _)| seq <= *mark)
    }

    /// Notes that batch `seq` of `replica` was counted at `now`.
    pub(super) fn note(&mut self, ns: &Namespace, replica: &ReplicaId, seq: u64, now: Timestamp) {
        if seq == 0 {
            return;
        }
        let who = (ns.clone(), replica.clone());
        if let Some((_, at)) = self.marks.insert(who.clone(), (seq, now)) {
            self.by_age.remove(&(at, who.clone()));
        }
        self.by_age.insert((now, who));
        while self.marks.len() > REPORT_MARKS_MAX {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            self.marks.remove(&oldest);
        }
    }

    /// Drops marks idle for [`REPORT_MARK_IDLE_MS`], at most `budget` of
    /// them; returns how many went.
    pub(super) fn expire(&mut self, now: Timestamp, budget: usize) -> usize {
        let mut dropped = 0;
        while dropped < budget {
            let Some((at, _)) = self.by_age.first() else {
                break;
            };
            if at.plus_ms(REPORT_MARK_IDLE_MS) > now {
                break;
            }
            if let Some((_, who)) = self.by_age.pop_first() {
                self.marks.remove(&who);
                dropped += 1;
            }
        }
        dropped
    }

    /// Whether the age index holds exactly the marks (checked when a
    /// snapshot is restored).
    pub(super) fn consistent(&self) -> bool {
        self.marks.len() == self.by_age.len()
            && self
                .by_age
                .iter()
                .all(|(at, who)| self.marks.get(who).is_some_and(|(_, noted)| noted == at))
    }

    /// How many replicas of `ns` reported a numbered batch within
    /// [`REPORT_MARK_IDLE_MS`] (the fleet's size as the cluster sees it).
    pub(super) fn reporters_in(&self, ns: &Namespace) -> usize {
        // "!" is the smallest name a replica may have.
        let Ok(first) = ReplicaId::new("!") else {
            return 0;
        };
        self.marks
            .range((ns.clone(), first)..)
            .take_while(|((n, _), _)| n == ns)
            .count()
    }

    /// How many replicas have a mark.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.marks.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ns() -> Namespace {
        Namespace::new("ns").unwrap()
    }

    fn r(name: &str) -> ReplicaId {
        ReplicaId::new(name).unwrap()
    }

    #[test]
    fn a_batch_at_or_below_the_mark_is_a_repeat_and_unnumbered_ones_never_are() {
        let mut marks = ReportMarks::default();
        assert!(!marks.is_repeat(&ns(), &r("a"), 5));
        marks.note(&ns(), &r("a"), 5, Timestamp(1));
        assert!(marks.is_repeat(&ns(), &r("a"), 5));
        assert!(marks.is_repeat(&ns(), &r("a"), 4));
        assert!(!marks.is_repeat(&ns(), &r("a"), 6));
        assert!(!marks.is_repeat(&ns(), &r("b"), 5));
        marks.note(&ns(), &r("a"), 0, Timestamp(2));
        assert!(!marks.is_repeat(&ns(), &r("a"), 0));
        assert_eq!(marks.len(), 1);
    }

    #[test]
    fn reporters_are_counted_per_namespace_until_they_go_idle() {
        let mut marks = ReportMarks::default();
        let other = Namespace::new("nt").unwrap();
        let before = Namespace::new("nr").unwrap();
        for (i, name) in ["!", "a", "z~"].iter().enumerate() {
            marks.note(&ns(), &r(name), 1, Timestamp(i as u64));
        }
        marks.note(&other, &r("a"), 1, Timestamp(0));
        marks.note(&before, &r("a"), 1, Timestamp(0));
        assert_eq!(marks.reporters_in(&ns()), 3);
        assert_eq!(marks.reporters_in(&other), 1);
        assert_eq!(marks.reporters_in(&Namespace::new("empty").unwrap()), 0);
        marks.expire(Timestamp(REPORT_MARK_IDLE_MS + 1), usize::MAX);
        assert_eq!(marks.reporters_in(&ns()), 1, "only the last one is recent");
    }

    #[test]
    fn idle_marks_expire_within_the_budget() {
        let mut marks = ReportMarks::default();
        marks.note(&ns(), &r("a"), 1, Timestamp(0));
        marks.note(&ns(), &r("b"), 1, Timestamp(10));
        marks.note(&ns(), &r("a"), 2, Timestamp(20));
        assert_eq!(marks.expire(Timestamp(REPORT_MARK_IDLE_MS + 5), 8), 0);
        assert_eq!(marks.expire(Timestamp(REPORT_MARK_IDLE_MS + 15), 8), 1);
        assert!(!marks.is_repeat(&ns(), &r("b"), 1), "b's mark expired");
        assert!(marks.is_repeat(&ns(), &r("a"), 2));
        assert_eq!(marks.expire(Timestamp(REPORT_MARK_IDLE_MS + 100), 0), 0);
    }

    #[test]
    fn the_least_recently_noted_mark_is_evicted_past_the_bound() {
        let mut marks = ReportMarks::default();
        for i in 0..=REPORT_MARKS_MAX as u64 {
            marks.note(&ns(), &r(&format!("r{i}")), 1, Timestamp(i));
        }
        assert_eq!(marks.len(), REPORT_MARKS_MAX);
        assert!(!marks.is_repeat(&ns(), &r("r0"), 1), "the oldest went");
        assert!(marks.is_repeat(&ns(), &r("r1"), 1));
    }
}
