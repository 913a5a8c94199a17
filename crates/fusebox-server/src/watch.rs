//! Watch streams: snapshot-then-changes, resumable by revision.
//!
//! Every applied command's [`WatchEvent`]s are published here, in revision
//! order, while the state lock is held; subscribing takes the same lock, so a
//! subscriber's snapshot and its live events neither overlap nor leave a gap.
//! The hub keeps the last [`WATCH_HISTORY_EVENTS_MAX`] events so a client that
//! reconnects with its last revision gets only what it missed; older
//! revisions get a fresh snapshot, flagged `resync_required`.
//!
//! Each watched namespace has a channel of its own, so an event wakes only
//! the streams of its namespace: a busy namespace neither wakes nor lags the
//! streams of another. A channel carries one message per applied entry (that
//! entry's events of the namespace, [`WatchBatch`]), so a burst of any size
//! (a tick that moves thousands of breakers) is one message, not thousands.
//! A channel is dropped once its last subscriber has gone, and a node keeps
//! at most [`WATCHED_NAMESPACES_MAX`]. Events are shared (`Arc`), not copied,
//! between the history and every channel.

use crate::backend::BackendError;
use crate::limits::{WATCHED_NAMESPACES_MAX, WATCH_CHANNEL_ENTRIES_MAX, WATCH_HISTORY_EVENTS_MAX};
use fusebox_core::breaker::BreakerView;
use fusebox_core::machine::{SharedStateMachine, WatchEvent};
use fusebox_core::Namespace;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::broadcast;

/// A namespace's watchable state at one revision.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchSnapshot {
    /// The revision the snapshot reflects.
    pub revision: u64,
    /// Every breaker of the namespace.
    pub breakers: Vec<BreakerView>,
    /// The policy version in force (0: built-in defaults).
    pub policy_version: u64,
    /// Whether the write kill switch is thrown.
    pub writes_blocked: bool,
}

impl WatchSnapshot {
    /// Reads a namespace's snapshot from the state.
    pub fn of(state: &SharedStateMachine, namespace: &Namespace) -> Self {
        let breakers = state
            .breakers_in(namespace)
            .map(|(key, _)| state.view(key))
            .collect();
        let ns = state.namespace(namespace);
        WatchSnapshot {
            revision: state.revision(),
            breakers,
            policy_version: ns.map_or(0, |n| n.policy_version()),
            writes_blocked: ns.is_some_and(|n| n.writes_blocked()),
        }
    }
}

/// What a new subscriber starts from.
#[derive(Debug)]
pub struct WatchStart {
    /// The namespace watched.
    pub namespace: Namespace,
    /// A full snapshot, when starting fresh or when the revision was too old.
    pub snapshot: Option<WatchSnapshot>,
    /// The requested revision was older than the hub remembers.
    pub resync_required: bool,
    /// Missed events of this namespace after the requested revision.
    pub backlog: Vec<Arc<WatchEvent>>,
    /// Live events of this namespace. A lagged receiver must resubscribe
    /// from its last revision.
    pub events: broadcast::Receiver<WatchBatch>,
}

/// One applied entry's events of one namespace, in revision order.
pub type WatchBatch = Arc<[Arc<WatchEvent>]>;

/// Fans applied events out to watchers and remembers recent ones.
#[derive(Default)]
pub struct WatchHub {
    history: Mutex<VecDeque<Arc<WatchEvent>>>,
    /// One channel per namespace with subscribers, at most
    /// [`WATCHED_NAMESPACES_MAX`]. Cleared when a snapshot is installed,
    /// which closes every live subscription.
    channels: Mutex<BTreeMap<Namespace, broadcast::Sender<WatchBatch>>>,
}

impl WatchHub {
    /// An empty hub.
    pub fn new() -> Self {
        WatchHub::default()
    }

    /// Publishes applied events; call with the state lock held.
    pub fn publish(&self, events: &[WatchEvent]) {
        if events.is_empty() {
            return;
        }
        let events: Vec<Arc<WatchEvent>> = events.iter().cloned().map(Arc::new).collect();
        if let Ok(mut history) = self.history.lock() {
            for event in &events {
                if history.len() >= WATCH_HISTORY_EVENTS_MAX {
                    history.pop_front();
                }
                history.push_back(Arc::clone(event));
            }
        }
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if channels.is_empty() {
            return;
        }
        let mut batches: BTreeMap<&Namespace, Vec<Arc<WatchEvent>>> = BTreeMap::new();
        for event in events
            .iter()
            .filter(|e| channels.contains_key(e.namespace()))
        {
            batches
                .entry(event.namespace())
                .or_default()
                .push(Arc::clone(event));
        }
        for (namespace, batch) in batches {
            let sent = channels.get(namespace).map(|tx| tx.send(batch.into()));
            // Fails only when nobody is left watching the namespace.
            if matches!(sent, Some(Err(_))) {
                channels.remove(namespace);
            }
        }
    }

    /// After a snapshot was installed: the state may have jumped several
    /// revisions whose events were never published here. History is
    /// forgotten, and every live subscription is closed (its stream ends
    /// with UNAVAILABLE), so each watcher comes back from its last revision
    /// and, finding no backlog, gets a fresh snapshot. Without the close, a
    /// watcher would wait on revisions that will never be published while
    /// heartbeats kept its stale view looking fresh.
    pub fn reset(&self) {
        if let Ok(mut history) = self.history.lock() {
            history.clear();
        }
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Subscribes; call with the state lock held so nothing slips between.
    /// Refused when the node already serves streams of
    /// [`WATCHED_NAMESPACES_MAX`] other namespaces.
    pub fn subscribe(
        &self,
        state: &SharedStateMachine,
        namespace: &Namespace,
        from_revision: Option<u64>,
    ) -> Result<WatchStart, BackendError> {
        let events = {
            let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
            if !channels.contains_key(namespace) && channels.len() >= WATCHED_NAMESPACES_MAX {
                // Namespaces whose watchers have all gone since their last event.
                channels.retain(|_, tx| tx.receiver_count() > 0);
                if channels.len() >= WATCHED_NAMESPACES_MAX {
                    return Err(BackendError::LimitReached {
                        limit: "watched_namespaces_max",
                        max: WATCHED_NAMESPACES_MAX,
                    });
                }
            }
            channels
                .entry(namespace.clone())
                .or_insert_with(|| broadcast::channel(WATCH_CHANNEL_ENTRIES_MAX).0)
                .subscribe()
        };
        let backlog = from_revision.and_then(|r| self.backlog_after(state, namespace, r));
        let resync_required = from_revision.is_some() && backlog.is_none();
        let snapshot = backlog
            .is_none()
            .then(|| WatchSnapshot::of(state, namespace));
        Ok(WatchStart {
            namespace: namespace.clone(),
            snapshot,
            resync_required,
            backlog: backlog.unwrap_or_default(),
            events,
        })
    }

    /// Events of `namespace` after `revision`, or `None` if some were forgotten.
    fn backlog_after(
        &self,
        state: &SharedStateMachine,
        namespace: &Namespace,
        revision: u64,
    ) -> Option<Vec<Arc<WatchEvent>>> {
        if revision > state.revision() {
            return None;
        }
        if revision == state.revision() {
            return Some(Vec::new());
        }
        let history = self.history.lock().ok()?;
        let oldest = history.front()?.revision();
        if oldest > revision + 1 {
            return None;
        }
        Some(
            history
                .iter()
                .filter(|e| e.revision() > revision && e.namespace() == namespace)
                .cloned()
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::broadcast::error::TryRecvError;

    fn state() -> SharedStateMachine {
        fusebox_core::machine::StateMachine::new()
            .map_ledger(|l| Box::new(l) as fusebox_core::ledger::BoxedLedger)
    }

    fn namespace(name: &str) -> Namespace {
        Namespace::new(name).expect("valid name")
    }

    fn live(hub: &WatchHub, ns: &Namespace) -> broadcast::Receiver<WatchBatch> {
        hub.subscribe(&state(), ns, None)
            .expect("subscribed")
            .events
    }

    fn kill_switch(revision: u64, namespace: &Namespace) -> WatchEvent {
        WatchEvent::KillSwitch {
            revision,
            namespace: namespace.clone(),
            writes_blocked: true,
        }
    }

    fn revisions(batch: &WatchBatch) -> Vec<u64> {
        batch.iter().map(|e| e.revision()).collect()
    }

    #[test]
    fn installing_a_snapshot_closes_live_subscriptions_and_forgets_history() {
        let hub = WatchHub::new();
        let ns = namespace("fleet");
        let mut live_before = live(&hub, &ns);
        hub.reset();
        assert_eq!(live_before.try_recv(), Err(TryRecvError::Closed));
        // A new subscription after the reset is live again.
        let mut fresh = live(&hub, &ns);
        assert_eq!(fresh.try_recv(), Err(TryRecvError::Empty));
    }

    #[test]
    fn an_event_reaches_only_the_subscribers_of_its_namespace() {
        let hub = WatchHub::new();
        let (busy, idle) = (namespace("busy"), namespace("idle"));
        let mut busy_rx = live(&hub, &busy);
        let mut idle_rx = live(&hub, &idle);

        hub.publish(&[kill_switch(1, &busy), kill_switch(2, &busy)]);
        let batch = busy_rx.try_recv().expect("the entry's events");
        assert_eq!(revisions(&batch), vec![1, 2]);
        assert_eq!(idle_rx.try_recv(), Err(TryRecvError::Empty));

        // The idle namespace's channel goes with its last subscriber.
        drop(idle_rx);
        hub.publish(&[kill_switch(3, &idle)]);
        let watched: Vec<Namespace> = hub
            .channels
            .lock()
            .expect("hub lock")
            .keys()
            .cloned()
            .collect();
        assert_eq!(watched, vec![busy]);
    }

    #[test]
    fn an_entry_larger_than_the_channel_is_one_message_and_lags_no_one() {
        let hub = WatchHub::new();
        let (a, b) = (namespace("a"), namespace("b"));
        let mut a_rx = live(&hub, &a);
        let mut b_rx = live(&hub, &b);
        // A tick may move thousands of breakers in one entry.
        let burst = WATCH_CHANNEL_ENTRIES_MAX as u64 * 4;
        let events: Vec<WatchEvent> = (1..=burst)
            .map(|r| kill_switch(r, if r % 2 == 0 { &a } else { &b }))
            .collect();
        hub.publish(&events);
        let got_a = a_rx.try_recv().expect("not lagged");
        let got_b = b_rx.try_recv().expect("not lagged");
        assert_eq!(
            revisions(&got_a),
            (2..=burst).step_by(2).collect::<Vec<_>>()
        );
        assert_eq!(
            revisions(&got_b),
            (1..=burst).step_by(2).collect::<Vec<_>>()
        );
        assert_eq!(a_rx.try_recv(), Err(TryRecvError::Empty));
    }

    #[test]
    fn a_node_serves_streams_of_a_bounded_number_of_namespaces() {
        let hub = WatchHub::new();
        let mut held: Vec<_> = (0..WATCHED_NAMESPACES_MAX)
            .map(|i| live(&hub, &namespace(&format!("ns-{i}"))))
            .collect();
        let one_more = namespace("one-more");
        let refused = hub.subscribe(&state(), &one_more, None).map(|_| ());
        assert!(
            matches!(
                refused,
                Err(BackendError::LimitReached {
                    limit: "watched_namespaces_max",
                    ..
                })
            ),
            "{refused:?}"
        );
        // A namespace already watched still takes more streams.
        assert!(hub.subscribe(&state(), &namespace("ns-0"), None).is_ok());
        // Once a namespace's streams have all gone, its room is free again.
        held.truncate(WATCHED_NAMESPACES_MAX - 1);
        assert!(hub.subscribe(&state(), &one_more, None).is_ok());
    }
}
