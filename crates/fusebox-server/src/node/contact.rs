//! Whether a node can vouch that its state is current.
//!
//! A node cut off from the leader but still a member keeps its state, frozen
//! at what it last received. Watch heartbeats from it would keep replicas'
//! views looking fresh while the cluster moves on, so a node sends them only
//! while it is in touch: as follower, it accepted a message from the leader
//! (entries, heartbeat or snapshot) within the contact bound; as leader, a
//! quorum of voters (itself included) acknowledged its entries within the
//! bound. (openraft's own `last_quorum_acked` is a metrics snapshot, only as
//! fresh as the last published metrics: an idle leader's went stale and it
//! refused watches it should have served.) Otherwise its watch streams end
//! with UNAVAILABLE and replicas watch another node.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// When this node last heard from a leader it accepted, in the node's wall
/// clock (Unix ms); shared by the Raft service, which records it, and the
/// backend, which judges it.
#[derive(Debug, Default)]
pub struct LeaderContact {
    /// The last accepted leader message, or the node's start: a node just
    /// started gets the same grace as one whose leader just went quiet.
    last_ms: AtomicU64,
    /// When each peer last accepted this node's entries as leader.
    peer_acks: Mutex<BTreeMap<u64, u64>>,
}

impl LeaderContact {
    /// A node starting at `now_ms`, not yet having heard from a leader.
    pub fn starting_at(now_ms: u64) -> Self {
        let contact = LeaderContact::default();
        contact.heard(now_ms);
        contact
    }

    /// Records that a leader's message was accepted at `now_ms`.
    pub fn heard(&self, now_ms: u64) {
        self.last_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// Records that `peer` accepted this node's entries (as its leader) at
    /// `now_ms`.
    pub fn acked_by(&self, peer: u64, now_ms: u64) {
        let mut acks = self
            .peer_acks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let at = acks.entry(peer).or_default();
        *at = (*at).max(now_ms);
    }

    /// Whether a majority of `voters` (`me` counting for itself) accepted
    /// this node's entries within the last `max_ms`.
    pub fn quorum_within(&self, voters: &[u64], me: u64, now_ms: u64, max_ms: u64) -> bool {
        let acks = self
            .peer_acks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let fresh = voters
            .iter()
            .filter(|v| {
                **v == me
                    || acks
                        .get(v)
                        .is_some_and(|at| now_ms.saturating_sub(*at) <= max_ms)
            })
            .count();
        fresh * 2 > voters.len()
    }

    /// How long ago the last accepted leader message (or the start) was.
    pub fn silent_for_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.last_ms.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_is_measured_from_the_latest_contact() {
        let contact = LeaderContact::starting_at(500);
        assert_eq!(
            contact.silent_for_ms(5_000),
            4_500,
            "silent since the start"
        );
        contact.heard(1_000);
        contact.heard(900);
        assert_eq!(contact.silent_for_ms(5_000), 4_000);
    }

    #[test]
    fn a_leader_is_in_touch_while_a_majority_acknowledged_it_recently() {
        let contact = LeaderContact::default();
        assert!(
            contact.quorum_within(&[1], 1, 10_000, 100),
            "alone, it is its quorum"
        );
        assert!(!contact.quorum_within(&[1, 2, 3], 1, 10_000, 100));
        contact.acked_by(2, 9_950);
        assert!(contact.quorum_within(&[1, 2, 3], 1, 10_000, 100));
        assert!(
            !contact.quorum_within(&[1, 2, 3], 1, 10_100, 100),
            "the ack aged out"
        );
        assert!(!contact.quorum_within(&[1, 2, 3, 4, 5], 1, 10_000, 100));
        contact.acked_by(4, 10_000);
        assert!(contact.quorum_within(&[1, 2, 3, 4, 5], 1, 10_000, 100));
    }
}
