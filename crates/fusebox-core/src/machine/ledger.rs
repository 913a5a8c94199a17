//! Ledger commands: `begin`, `complete` and `resolve`, with the
//! namespace's kill switch and retention applied in log order.

use super::answer::Answer;
use super::state_machine::StateMachine;
use crate::error::CoreError;
use crate::ledger::{BeginRequest, CompleteRequest, LedgerStore, ResolveRequest};
use crate::name::Namespace;
use crate::policy::EffectClass;
use crate::time::Timestamp;

impl<L: LedgerStore> StateMachine<L> {
    pub(super) fn begin(
        &mut self,
        ns: &Namespace,
        request: &BeginRequest,
        now: Timestamp,
    ) -> Result<Answer, CoreError> {
        self.admit_begin(ns, request)?;
        Ok(Answer::Begin(self.ledger.begin(ns, request, now)?))
    }

    /// What a `begin` does to the fleet, all of it: refused while the
    /// namespace's kill switch is thrown, else its namespace is created on
    /// first use. The ledger's answer changes nothing in the fleet, which is
    /// what lets [`StateMachine::replay`] skip the ledger.
    pub(super) fn admit_begin(
        &mut self,
        ns: &Namespace,
        request: &BeginRequest,
    ) -> Result<(), CoreError> {
        self.check_writes_allowed(ns, request.effect)?;
        self.fleet.touch_namespace(ns)?;
        Ok(())
    }

    pub(super) fn complete(
        &mut self,
        ns: &Namespace,
        request: &CompleteRequest,
        now: Timestamp,
    ) -> Result<Answer, CoreError> {
        let retention = self.policy_document(ns).ledger_retention_ms();
        let answer = self.ledger.complete(ns, request, now, retention)?;
        Ok(Answer::Complete(answer))
    }

    pub(super) fn resolve(
        &mut self,
        ns: &Namespace,
        request: &ResolveRequest,
        now: Timestamp,
    ) -> Result<Answer, CoreError> {
        let retention = self.policy_document(ns).ledger_retention_ms();
        let answer = self.ledger.resolve(ns, request, now, retention)?;
        Ok(Answer::Resolve(answer))
    }

    /// Refuses to begin a write while the namespace's kill switch is
    /// thrown; decided here, in log order, so no write slips past a switch.
    fn check_writes_allowed(&self, ns: &Namespace, effect: EffectClass) -> Result<(), CoreError> {
        let switch = self
            .fleet
            .namespaces
            .get(ns)
            .and_then(|n| n.kill_switch.as_ref());
        match switch {
            Some(k) if k.writes_blocked && effect.is_write() => Err(CoreError::WritesBlocked {
                namespace: ns.to_string(),
                actor: k.actor.clone(),
                reason: k.reason.clone(),
                since_ms: k.at.as_millis(),
            }),
            _ => Ok(()),
        }
    }
}
