//! Policy commands: a new version, a rollback (an old version's content as
//! a new version), and the namespace's write kill switch.

use super::answer::Answer;
use super::namespace::KillSwitch;
use super::state_machine::StateMachine;
use super::watch_event::WatchEvent;
use crate::error::CoreError;
use crate::ledger::LedgerStore;
use crate::name::Namespace;
use crate::policy::PolicyDocument;
use crate::time::Timestamp;

/// Who changed a namespace's policy, why, and from which version.
pub(super) struct PolicyChange<'a> {
    actor: &'a str,
    reason: &'a str,
    rolled_back_from: Option<u64>,
}

impl<'a> PolicyChange<'a> {
    /// A change that applies a new document.
    pub(super) fn new(actor: &'a str, reason: &'a str) -> Self {
        PolicyChange {
            actor,
            reason,
            rolled_back_from: None,
        }
    }
}

impl<L: LedgerStore> StateMachine<L> {
    pub(super) fn apply_policy(
        &mut self,
        ns: &Namespace,
        document: &PolicyDocument,
        change: &PolicyChange<'_>,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        debug_assert!(document.validate().is_empty(), "validated on entry");
        let state = self.fleet.touch_namespace(ns)?;
        let version = state.push_policy(
            document.clone(),
            now,
            change.actor,
            change.reason,
            change.rolled_back_from,
        );
        self.fleet.default_resolved.forget(ns);
        let revision = self.fleet.next_revision();
        events.push(WatchEvent::Policy {
            revision,
            namespace: ns.clone(),
            version,
        });
        Ok(Answer::PolicyApplied { version })
    }

    pub(super) fn rollback(
        &mut self,
        ns: &Namespace,
        version: u64,
        actor: &str,
        reason: &str,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        // A stored version passed validation when it was applied.
        let document = self
            .fleet
            .namespaces
            .get(ns)
            .and_then(|n| n.version(version))
            .map(|p| p.document.clone())
            .ok_or_else(|| CoreError::not_found("policy version", format!("{ns} v{version}")))?;
        let change = PolicyChange {
            actor,
            reason,
            rolled_back_from: Some(version),
        };
        self.apply_policy(ns, &document, &change, now, events)
    }

    pub(super) fn kill_switch(
        &mut self,
        ns: &Namespace,
        writes_blocked: bool,
        actor: &str,
        reason: &str,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        let state = self.fleet.touch_namespace(ns)?;
        let switch = KillSwitch {
            writes_blocked,
            actor: actor.to_owned(),
            reason: reason.to_owned(),
            at: now,
        };
        state.kill_switch = Some(switch.clone());
        let revision = self.fleet.next_revision();
        events.push(WatchEvent::KillSwitch {
            revision,
            namespace: ns.clone(),
            writes_blocked,
        });
        Ok(Answer::KillSwitch(switch))
    }
}
