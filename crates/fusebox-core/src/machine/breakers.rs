//! Breaker commands: probe permits, operator actions, and the one place a
//! breaker changes (`with_breaker`), which keeps the timer index exact and
//! announces every generation bump.

use super::answer::Answer;
use super::command::OperatorAction;
use super::state_machine::StateMachine;
use super::watch_event::WatchEvent;
use crate::breaker::{Breaker, BreakerKey, BreakerState, ProbeAnswer};
use crate::error::CoreError;
use crate::ledger::LedgerStore;
use crate::limits::BREAKERS_PER_NAMESPACE_MAX;
use crate::name::ReplicaId;
use crate::outcome::{OutcomeClass, Verdict};
use crate::policy::BreakerPolicy;
use crate::time::Timestamp;
use std::collections::BTreeSet;

impl<L: LedgerStore> StateMachine<L> {
    pub(super) fn acquire_probe(
        &mut self,
        key: &BreakerKey,
        replica: &ReplicaId,
        lease_ms: Option<u64>,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        if let Some(until) = self.probed_beside(key, now) {
            let answer = ProbeAnswer::Denied {
                state: BreakerState::HalfOpen,
                retry_after_ms: Some(until.millis_since(now)),
            };
            return Ok(Answer::Probe(answer));
        }
        let mut policy = self.breaker_policy(key);
        // A caller whose probe call may run longer than the policy's lease
        // holds the permit for its call's deadline, so the permit does not
        // lapse mid-call and let a second probe through.
        if let Some(ms) = lease_ms {
            policy.probe_lease_ms = ms;
        }
        let answer = self.with_breaker(key, events, |b| b.acquire_probe(&policy, now, replica))?;
        Ok(Answer::Probe(answer))
    }

    /// When a probe permit on the other scope of `key`'s tool lapses, if
    /// one is out: a server's permit for a tool's key, or a permit on any of
    /// the server's tools for a server's key. A server's probe is a call on
    /// one of its tools, so the two scopes' permits would let two probes
    /// reach one tool at once; while one is out the other waits.
    fn probed_beside(&self, key: &BreakerKey, now: Timestamp) -> Option<Timestamp> {
        if key.is_server() {
            let server = key.server_key();
            self.fleet
                .breakers
                .range(server.clone()..)
                .take_while(|(k, _)| k.namespace == server.namespace && k.server == server.server)
                .filter(|(k, _)| !k.is_server())
                .filter_map(|(_, b)| b.permits_out_until(now))
                .max()
        } else {
            self.fleet
                .breakers
                .get(&key.server_key())
                .and_then(|b| b.permits_out_until(now))
        }
    }

    pub(super) fn release_probe(
        &mut self,
        key: &BreakerKey,
        permit_id: u64,
        generation: u64,
        outcome: OutcomeClass,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        let policy = self.breaker_policy(key);
        let verdict = verdict_for(key, outcome, &policy);
        let result = self.with_breaker(key, events, |b| {
            b.release_probe(&policy, now, permit_id, generation, verdict)
        })?;
        Ok(Answer::ProbeReleased(result))
    }

    pub(super) fn operate(
        &mut self,
        key: &BreakerKey,
        action: &OperatorAction,
        actor: &str,
        reason: &str,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        self.with_breaker(key, events, |b| match action {
            OperatorAction::ForceOpen { for_ms } => {
                b.force_open(now, actor, reason, for_ms.map(|ms| now.plus_ms(ms)))
            }
            OperatorAction::Reset => b.reset(now, actor, reason),
            OperatorAction::Disable { for_ms } => {
                b.disable(now, actor, reason, for_ms.map(|ms| now.plus_ms(ms)))
            }
            OperatorAction::MetricsOnly { for_ms } => {
                b.metrics_only(now, actor, reason, for_ms.map(|ms| now.plus_ms(ms)))
            }
        })?;
        Ok(Answer::Breaker(Box::new(self.view(key))))
    }

    /// Runs `f` on a breaker (created if new, within limits), keeping the
    /// deadline index exact and emitting an event if the generation grew.
    ///
    /// A breaker that exists is found with one lookup and changed in place:
    /// an outcome report records on two breakers per outcome, and each
    /// lookup compares names. Its namespace exists too (deleting a
    /// namespace removes its breakers; `Fleet::check_invariants` holds a
    /// restored state to it), so only a new breaker touches the namespace.
    pub(super) fn with_breaker<T>(
        &mut self,
        key: &BreakerKey,
        events: &mut Vec<WatchEvent>,
        f: impl FnOnce(&mut Breaker) -> T,
    ) -> Result<T, CoreError> {
        debug_assert!(key.check().is_ok(), "validated on entry");
        let (out, change) = if let Some(breaker) = self.fleet.breakers.get_mut(key) {
            change(breaker, key, &mut self.fleet.breaker_deadlines, f)
        } else {
            self.fleet.touch_namespace(&key.namespace)?;
            let mut fresh = self.new_breaker(key)?;
            let changed = change(&mut fresh, key, &mut self.fleet.breaker_deadlines, f);
            self.fleet.breakers.insert(key.clone(), fresh);
            changed
        };
        debug_assert!(
            change.live_permits
                <= change
                    .permits_before
                    .max(self.breaker_policy(key).concurrent_probes.max(1) as usize),
            "a grant never takes permits past the policy's bound"
        );
        if change.generation_grew {
            let revision = self.fleet.next_revision();
            events.push(WatchEvent::Breaker {
                revision,
                view: self.view(key),
            });
        }
        Ok(out)
    }

    /// A fresh breaker for `key`, counted against its namespace's bound.
    fn new_breaker(&mut self, key: &BreakerKey) -> Result<Breaker, CoreError> {
        let count = self
            .fleet
            .breakers_per_namespace
            .entry(key.namespace.clone())
            .or_default();
        if *count >= BREAKERS_PER_NAMESPACE_MAX {
            return Err(CoreError::limit(
                "breakers in namespace",
                BREAKERS_PER_NAMESPACE_MAX,
            ));
        }
        *count += 1;
        Ok(Breaker::new())
    }
}

/// What running a change on a breaker did, as `with_breaker` checks and
/// announces it.
struct Change {
    generation_grew: bool,
    permits_before: usize,
    live_permits: usize,
}

/// Runs `f` on `breaker`, moving its entry in the deadline index with it.
fn change<T>(
    breaker: &mut Breaker,
    key: &BreakerKey,
    deadlines: &mut BTreeSet<(Timestamp, BreakerKey)>,
    f: impl FnOnce(&mut Breaker) -> T,
) -> (T, Change) {
    let (deadline, generation) = (breaker.next_deadline(), breaker.generation());
    let permits_before = breaker.live_permits();
    let out = f(breaker);
    let (next_deadline, next_generation) = (breaker.next_deadline(), breaker.generation());
    if next_deadline != deadline {
        if let Some(at) = deadline {
            deadlines.remove(&(at, key.clone()));
        }
        if let Some(at) = next_deadline {
            deadlines.insert((at, key.clone()));
        }
    }
    debug_assert!(next_generation >= generation, "generations only grow");
    let change = Change {
        generation_grew: next_generation != generation,
        permits_before,
        live_permits: breaker.live_permits(),
    };
    (out, change)
}

/// What a probe's outcome says about the breaker it probed: a server's
/// breaker and a tool's read some classes differently.
fn verdict_for(key: &BreakerKey, class: OutcomeClass, policy: &BreakerPolicy) -> Verdict {
    if key.is_server() {
        class.server_verdict()
    } else {
        class.verdict(policy.rate_limited_is_failure)
    }
}
