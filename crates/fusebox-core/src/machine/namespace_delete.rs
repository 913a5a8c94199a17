//! Deleting a namespace an operator no longer wants (`DeleteNamespace`).
//!
//! Namespaces are created on first use and counted against
//! [`crate::limits::NAMESPACES_MAX`]; a typo or a test run can take a place
//! for good. Deleting one frees its place, but only when nothing live
//! depends on it: a ledger record is the memory that stops a write from
//! running twice, a breaker that is not closed is a decision replicas act
//! on, and a thrown kill switch is an operator's stop. Those must end first
//! (records leave by retention once final; breakers close or are reset; the
//! switch is lifted). What goes with the namespace is configuration and
//! history: policy versions, closed breakers, imported tools and their
//! observed latency.

use super::answer::{Answer, NamespaceDeleted};
use super::state_machine::StateMachine;
use super::watch_event::WatchEvent;
use crate::breaker::{BreakerKey, BreakerState};
use crate::error::CoreError;
use crate::ledger::LedgerStore;
use crate::name::Namespace;
use std::borrow::Cow;

fn in_use(ns: &Namespace, reason: String) -> CoreError {
    CoreError::InUse {
        what: Cow::Borrowed("namespace"),
        name: ns.to_string(),
        reason,
    }
}

impl<L: LedgerStore> StateMachine<L> {
    pub(super) fn delete_namespace(
        &mut self,
        ns: &Namespace,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        let Some(state) = self.fleet.namespaces.get(ns) else {
            return Err(CoreError::not_found("namespace", ns.to_string()));
        };
        if state.writes_blocked() {
            return Err(in_use(
                ns,
                "its write kill switch is thrown; lift it first".into(),
            ));
        }
        let records = self.ledger.len(ns);
        if records > 0 {
            return Err(in_use(
                ns,
                format!(
                    "it holds {records} ledger record(s); final ones leave by retention, \
                     in-progress and ambiguous ones must end or be resolved first"
                ),
            ));
        }
        let live = self
            .breakers_in(ns)
            .find(|(_, b)| b.state() != BreakerState::Closed || b.live_permits() > 0);
        if let Some((key, b)) = live {
            return Err(in_use(
                ns,
                format!(
                    "breaker {key} is {} with {} probe(s) out; wait for it to close or \
                     reset it first",
                    b.state().as_str(),
                    b.live_permits()
                ),
            ));
        }
        let keys: Vec<BreakerKey> = self.breakers_in(ns).map(|(k, _)| k.clone()).collect();
        for key in &keys {
            if let Some(at) = self
                .fleet
                .breakers
                .remove(key)
                .and_then(|b| b.next_deadline())
            {
                self.fleet.breaker_deadlines.remove(&(at, key.clone()));
            }
        }
        self.fleet.breakers_per_namespace.remove(ns);
        self.fleet.default_resolved.forget(ns);
        let tools = self.fleet.tools.remove_namespace(ns);
        let policies = self
            .fleet
            .namespaces
            .remove(ns)
            .map_or(0, |n| n.policies.len());
        // Watchers forget it all: each breaker, each tool, and the policy
        // (version 0: the built-in defaults).
        for key in &keys {
            let revision = self.fleet.next_revision();
            events.push(WatchEvent::BreakerRemoved {
                revision,
                key: key.clone(),
            });
        }
        for id in &tools {
            let revision = self.fleet.next_revision();
            events.push(WatchEvent::Tool {
                revision,
                namespace: ns.clone(),
                server: id.server.clone(),
                tool: id.tool.clone(),
            });
        }
        if policies > 0 {
            let revision = self.fleet.next_revision();
            events.push(WatchEvent::Policy {
                revision,
                namespace: ns.clone(),
                version: 0,
            });
        }
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(Answer::NamespaceDeleted(NamespaceDeleted {
            breakers: count(keys.len()),
            tools: count(tools.len()),
            policy_versions: count(policies),
        }))
    }
}
