//! The fallback when the cluster cannot be reached: breakers of this
//! replica alone, run by the core's own engine.
//!
//! Under `on_partition = fail_open_local` a replica keeps calling its tools,
//! guarded by a [`Breaker`] per key fed with its own outcomes only. The
//! policy is scaled to one replica: `min_reporters` becomes 1 (this replica
//! is the only reporter), a window's `minimum_calls` is divided by the
//! fleet size (one replica sees its share of the calls: the size the
//! cluster last reported, distinct replicas that reported in the last hour,
//! else the configured `fleet_replicas`), and one probe at a time. A consecutive-failures trip is kept as it is: a streak seen by one
//! replica is as telling as one seen by the fleet.
//!
//! These breakers are fed on every call, not only during a partition, so
//! that when the cluster goes away they already hold the recent evidence.
//! Time is the replica's wall clock, passed in as a value.

use crate::config::LOCAL_BREAKERS_MAX;
use crate::tool::ToolRef;
use fusebox_core::breaker::{
    admit, Admission, Breaker, BreakerKey, BreakerView, Observation, ProbeAnswer,
};
use fusebox_core::policy::{BreakerPolicy, Trip};
use fusebox_core::{Namespace, OutcomeClass, ReplicaId, Timestamp, Verdict};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A local probe permit: the breaker it belongs to and its fencing values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocalPermit {
    pub(crate) key: BreakerKey,
    pub(crate) permit_id: u64,
    pub(crate) generation: u64,
}

/// One breaker of this replica's own, shared by every resolved tool that
/// counts on it.
type Slot = Arc<Mutex<Breaker>>;

/// The two local breakers one tool's calls count on, its server's and its
/// own, held by the tool's resolution so that counting an outcome looks
/// nothing up. `None` where the bound on local breakers left no room.
#[derive(Debug, Default)]
pub(crate) struct LocalPair {
    server: Option<Slot>,
    tool: Option<Slot>,
}

/// The replica's own breakers.
#[derive(Debug)]
pub(crate) struct LocalBreakers {
    replica: ReplicaId,
    /// The fleet size the configuration gives, used until the cluster
    /// reports one.
    configured_fleet: u32,
    /// The fleet size the cluster last reported (0: none yet).
    reported_fleet: AtomicU32,
    /// Every local breaker by key, at most [`LOCAL_BREAKERS_MAX`]. Lock
    /// order: this map, then one breaker.
    breakers: Mutex<HashMap<BreakerKey, Slot>>,
}

/// `policy` as one replica of `fleet` should apply it.
pub(crate) fn scaled(policy: &BreakerPolicy, fleet: u32) -> BreakerPolicy {
    let mut local = policy.clone();
    local.min_reporters = 1;
    local.concurrent_probes = 1;
    local.shadow = policy.shadow;
    if let Trip::SlidingWindow(w) = &mut local.trip {
        w.minimum_calls = w.minimum_calls.div_ceil(fleet.max(1)).max(1);
    }
    local
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LocalBreakers {
    pub(crate) fn new(replica: ReplicaId, fleet_replicas: u32) -> Self {
        LocalBreakers {
            replica,
            configured_fleet: fleet_replicas,
            reported_fleet: AtomicU32::new(0),
            breakers: Mutex::new(HashMap::new()),
        }
    }

    /// Takes the fleet size the cluster reported (distinct recent
    /// reporters): thresholds scale by it from now on.
    pub(crate) fn learn_fleet(&self, replicas: u32) {
        self.reported_fleet.store(replicas, Ordering::Relaxed);
    }

    /// The fleet size thresholds are scaled by: the cluster's word when it
    /// gave one, else the configuration's.
    fn fleet(&self) -> u32 {
        match self.reported_fleet.load(Ordering::Relaxed) {
            0 => self.configured_fleet,
            n => n,
        }
    }

    /// The breakers of the two keys, made while there is room.
    pub(crate) fn pair(&self, server_key: &BreakerKey, tool_key: &BreakerKey) -> LocalPair {
        let mut map = lock(&self.breakers);
        let mut slot = |key: &BreakerKey| match map.get(key) {
            Some(slot) => Some(slot.clone()),
            None if map.len() >= LOCAL_BREAKERS_MAX => None,
            None => {
                let slot = Slot::default();
                map.insert(key.clone(), slot.clone());
                Some(slot)
            }
        };
        LocalPair {
            server: slot(server_key),
            tool: slot(tool_key),
        }
    }

    /// The admission rule over the local server and tool breakers.
    pub(crate) fn admit(
        &self,
        pair: &LocalPair,
        keys: (&BreakerKey, &BreakerKey),
        policies: (&BreakerPolicy, &BreakerPolicy),
        now: Timestamp,
    ) -> Admission {
        let fleet = self.fleet();
        let view = |slot: &Option<Slot>, key: &BreakerKey, policy| match slot {
            Some(slot) => {
                let mut breaker = lock(slot);
                breaker.advance(now);
                BreakerView::of(key, &breaker, &scaled(policy, fleet))
            }
            None => BreakerView::closed(key.clone()),
        };
        let server = view(&pair.server, keys.0, policies.0);
        let tool = view(&pair.tool, keys.1, policies.1);
        admit(&server, &tool, now)
    }

    /// Counts one outcome on the tool's and the server's local breakers.
    pub(crate) fn record(
        &self,
        pair: &LocalPair,
        policies: (&BreakerPolicy, &BreakerPolicy),
        class: OutcomeClass,
        duration_ms: u64,
        now: Timestamp,
    ) {
        let fleet = self.fleet();
        let sp = scaled(policies.0, fleet);
        let tp = scaled(policies.1, fleet);
        let tool_verdict = class.verdict(tp.rate_limited_is_failure);
        let server_verdict = class.server_verdict();
        for (slot, policy, verdict) in [
            (&pair.server, &sp, server_verdict),
            (&pair.tool, &tp, tool_verdict),
        ] {
            let Some(slot) = slot else { continue };
            if verdict == Verdict::Ignored {
                continue;
            }
            let mut breaker = lock(slot);
            let obs = Observation {
                replica: Cow::Borrowed(&self.replica),
                generation: breaker.generation(),
                verdict,
                duration_ms,
            };
            breaker.record(policy, now, &obs);
        }
    }

    /// The breaker of `key`, if it was ever made.
    fn slot(&self, key: &BreakerKey) -> Option<Slot> {
        lock(&self.breakers).get(key).cloned()
    }

    /// Asks the local breaker of `key` for a probe permit.
    pub(crate) fn acquire(
        &self,
        key: &BreakerKey,
        policy: &BreakerPolicy,
        now: Timestamp,
    ) -> Option<LocalPermit> {
        let p = scaled(policy, self.fleet());
        let slot = self.slot(key)?;
        let answer = lock(&slot).acquire_probe(&p, now, &self.replica);
        match answer {
            ProbeAnswer::Granted {
                permit_id,
                generation,
                ..
            } => Some(LocalPermit {
                key: key.clone(),
                permit_id,
                generation,
            }),
            ProbeAnswer::Denied { .. } | ProbeAnswer::NotNeeded { .. } => None,
        }
    }

    /// Returns a local permit with the probe's outcome.
    pub(crate) fn release(
        &self,
        permit: &LocalPermit,
        policy: &BreakerPolicy,
        class: OutcomeClass,
        now: Timestamp,
    ) {
        let p = scaled(policy, self.fleet());
        let verdict = class.verdict(p.rate_limited_is_failure);
        if let Some(slot) = self.slot(&permit.key) {
            lock(&slot).release_probe(&p, now, permit.permit_id, permit.generation, verdict);
        }
    }
}

/// The key of a tool's server breaker, for the local breakers.
pub(crate) fn server_key(namespace: &Namespace, tool: &ToolRef) -> BreakerKey {
    BreakerKey::server(namespace.clone(), tool.server.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_core::policy::WindowPolicy;

    fn names() -> (Namespace, ToolRef, ReplicaId) {
        let ns = Namespace::new("ns").unwrap_or_else(|_| unreachable!());
        let tool = ToolRef::new("tax", "lookup").unwrap_or_else(|_| unreachable!());
        let replica = ReplicaId::new("r1").unwrap_or_else(|_| unreachable!());
        (ns, tool, replica)
    }

    #[test]
    fn scaling_keeps_one_replica_able_to_trip() {
        let p = BreakerPolicy {
            min_reporters: 3,
            concurrent_probes: 4,
            trip: Trip::SlidingWindow(WindowPolicy::default()),
            ..BreakerPolicy::default()
        };
        let local = scaled(&p, 10);
        assert_eq!((local.min_reporters, local.concurrent_probes), (1, 1));
        let Trip::SlidingWindow(w) = local.trip else {
            panic!("trip kind changed")
        };
        assert_eq!(w.minimum_calls, 2);
    }

    #[test]
    fn the_fleet_size_the_cluster_reports_wins_over_the_configured_one() {
        let (ns, tool, replica) = names();
        // Configured as a fleet of one: a window needs 20 calls to trip.
        let local = LocalBreakers::new(replica, 1);
        let sk = server_key(&ns, &tool);
        let tk = BreakerKey::tool(ns, tool.server.clone(), tool.tool.clone());
        let p = BreakerPolicy {
            trip: Trip::SlidingWindow(WindowPolicy {
                minimum_calls: 20,
                ..WindowPolicy::default()
            }),
            ..BreakerPolicy::default()
        };
        let now = Timestamp(1_000);
        let pair = local.pair(&sk, &tk);
        let fail = |n: usize| {
            for _ in 0..n {
                local.record(&pair, (&p, &p), OutcomeClass::ToolError, 5, now);
            }
        };
        fail(5);
        assert!(matches!(
            local.admit(&pair, (&sk, &tk), (&p, &p), now),
            Admission::Allow { .. }
        ));
        // The cluster says ten replicas report: this one sees a tenth of
        // the calls, so two failing calls are as telling as twenty.
        local.learn_fleet(10);
        fail(1);
        assert!(matches!(
            local.admit(&pair, (&sk, &tk), (&p, &p), now),
            Admission::Reject { .. }
        ));
    }

    #[test]
    fn four_local_timeouts_open_the_local_breaker() {
        let (ns, tool, replica) = names();
        let local = LocalBreakers::new(replica, 1);
        let sk = server_key(&ns, &tool);
        let tk = BreakerKey::tool(ns, tool.server.clone(), tool.tool.clone());
        let p = BreakerPolicy::default();
        let now = Timestamp(1_000);
        let pair = local.pair(&sk, &tk);
        for _ in 0..4 {
            assert!(matches!(
                local.admit(&pair, (&sk, &tk), (&p, &p), now),
                Admission::Allow { .. }
            ));
            local.record(&pair, (&p, &p), OutcomeClass::ToolError, 5, now);
        }
        assert!(matches!(
            local.admit(&pair, (&sk, &tk), (&p, &p), now),
            Admission::Reject { .. }
        ));
        let later = now.plus_ms(p.open.open_ms);
        assert!(matches!(
            local.admit(&pair, (&sk, &tk), (&p, &p), later),
            Admission::Probe { .. }
        ));
        assert!(local.acquire(&tk, &p, later).is_some());
        assert!(
            local.acquire(&tk, &p, later).is_none(),
            "one probe at a time"
        );
    }
}
