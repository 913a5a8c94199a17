//! Whether a node can vouch that its state is current.
//!
//! A node cut off from the leader but still a member keeps its state, frozen
//! at what it last received. Watch heartbeats from it would keep replicas'
//! views looking fresh while the cluster moves on, so a node sends them only
//! while it is in touch: as follower, it accepted a message from the leader
//! (entries, heartbeat or snapshot) within the contact bound; as leader, a
//! quorum acknowledged it within the bound. Otherwise its watch streams end
//! with UNAVAILABLE and replicas watch another node.

use std::sync::atomic::{AtomicU64, Ordering};

/// When this node last heard from a leader it accepted, in the node's wall
/// clock (Unix ms); shared by the Raft service, which records it, and the
/// backend, which judges it.
#[derive(Debug, Default)]
pub struct LeaderContact {
    last_ms: AtomicU64,
}

impl LeaderContact {
    /// Records that a leader's message was accepted at `now_ms`.
    pub fn heard(&self, now_ms: u64) {
        self.last_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// How long ago the last accepted leader message was, in ms (`None`:
    /// never since this process started).
    pub fn silent_for_ms(&self, now_ms: u64) -> Option<u64> {
        match self.last_ms.load(Ordering::Relaxed) {
            0 => None,
            last => Some(now_ms.saturating_sub(last)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_is_measured_from_the_latest_contact() {
        let contact = LeaderContact::default();
        assert_eq!(contact.silent_for_ms(5_000), None);
        contact.heard(1_000);
        contact.heard(900);
        assert_eq!(contact.silent_for_ms(5_000), Some(4_000));
    }
}
