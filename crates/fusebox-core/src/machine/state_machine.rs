//! The replicated state machine: its state, its accessors, and `apply`, the
//! table of contents that hands each command to its family's handler.

use super::answer::{Answer, Applied};
use super::clock::StateClock;
use super::command::{Command, LedgerOp};
use super::fleet::{breaker_policy_in, min_server, Fleet};
use super::namespace::NamespaceState;
use super::policy::PolicyChange;
use super::watch_event::WatchEvent;
use crate::auth::AuthTable;
use crate::breaker::{Breaker, BreakerKey, BreakerView};
use crate::error::CoreError;
use crate::ledger::{BoxedLedger, Ledger, LedgerStore};
use crate::name::Namespace;
use crate::policy::{BreakerPolicy, PolicyDocument};
use crate::time::Timestamp;
use crate::tools::ToolRegistry;
use std::sync::LazyLock;

/// The policy of a namespace that never applied one.
pub(super) static DEFAULT_POLICY: LazyLock<PolicyDocument> = LazyLock::new(PolicyDocument::default);

/// The whole replicated state: the [`Fleet`] and the ledger, in a store
/// of the caller's choice (in memory by default).
///
/// The fleet never depends on what the ledger answers: every command's
/// effect on the fleet is decided before or without the ledger. A store
/// may therefore replay entries whose ledger effects it already holds
/// (see the server's RocksDB ledger) and still reach the same fleet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StateMachine<L = Ledger> {
    pub(super) fleet: Fleet,
    pub(super) ledger: L,
}

/// A state machine over any ledger store, so one type serves them all.
pub type SharedStateMachine = StateMachine<BoxedLedger>;

impl StateMachine<Ledger> {
    /// An empty state with an in-memory ledger.
    pub fn new() -> Self {
        StateMachine::default()
    }
}

impl<L> StateMachine<L> {
    /// A state from its parts (a restored fleet and a ledger store).
    pub fn from_parts(fleet: Fleet, ledger: L) -> Self {
        StateMachine { fleet, ledger }
    }

    /// The fleet part (copied into snapshots).
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// Replaces the fleet (a store installing a snapshot, whose ledger it
    /// has installed itself).
    pub fn replace_fleet(&mut self, fleet: Fleet) {
        self.fleet = fleet;
    }

    /// Swaps the ledger store for another (boxing one, for example).
    pub fn map_ledger<M>(self, f: impl FnOnce(L) -> M) -> StateMachine<M> {
        StateMachine {
            fleet: self.fleet,
            ledger: f(self.ledger),
        }
    }
}

impl<L: LedgerStore> StateMachine<L> {
    /// The last revision handed to a watch event.
    pub fn revision(&self) -> u64 {
        self.fleet.revision
    }

    /// The state's clock: the latest instant entries moved it to (it never
    /// goes back and follows a jumping stamp at a bounded pace).
    pub fn now(&self) -> Timestamp {
        self.fleet.clock.now()
    }

    /// The state's clock, with how often it held an entry's stamp back.
    pub fn clock(&self) -> &StateClock {
        &self.fleet.clock
    }

    /// A namespace's settings, if it exists.
    pub fn namespace(&self, ns: &Namespace) -> Option<&NamespaceState> {
        self.fleet.namespaces.get(ns)
    }

    /// Every namespace, in order.
    pub fn namespaces(&self) -> impl Iterator<Item = (&Namespace, &NamespaceState)> {
        self.fleet.namespaces.iter()
    }

    /// Distinct replicas of `ns` that reported outcomes within the last
    /// hour (`REPORT_MARK_IDLE_MS`): the fleet size replicas scale their
    /// local fallback breakers by.
    pub fn fleet_replicas(&self, ns: &Namespace) -> u32 {
        u32::try_from(self.fleet.report_marks.reporters_in(ns)).unwrap_or(u32::MAX)
    }

    /// The ledger.
    pub fn ledger(&self) -> &L {
        &self.ledger
    }

    /// Who may call: principals, hashed tokens, whether enforcement is on.
    pub fn auth(&self) -> &AuthTable {
        &self.fleet.auth
    }

    /// The tools registry: imported manifests and observed latency.
    pub fn tools(&self) -> &ToolRegistry {
        &self.fleet.tools
    }

    /// A breaker, if it exists.
    pub fn breaker(&self, key: &BreakerKey) -> Option<&Breaker> {
        self.fleet.breakers.get(key)
    }

    /// Every breaker of a namespace, in key order.
    pub fn breakers_in<'a>(
        &'a self,
        ns: &'a Namespace,
    ) -> impl Iterator<Item = (&'a BreakerKey, &'a Breaker)> + 'a {
        self.fleet
            .breakers
            .range(BreakerKey::server(ns.clone(), min_server())..)
            .take_while(move |(k, _)| &k.namespace == ns)
    }

    /// The policy document in force in a namespace (defaults if none).
    pub fn policy_document(&self, ns: &Namespace) -> &PolicyDocument {
        self.fleet
            .namespaces
            .get(ns)
            .and_then(|n| n.policy())
            .map_or(&*DEFAULT_POLICY, |p| &p.document)
    }

    /// The breaker policy in force for a key.
    pub fn breaker_policy(&self, key: &BreakerKey) -> BreakerPolicy {
        breaker_policy_in(self.policy_document(&key.namespace), key)
    }

    /// A breaker as replicas see it (closed at generation 0 if never seen).
    pub fn view(&self, key: &BreakerKey) -> BreakerView {
        match self.fleet.breakers.get(key) {
            Some(b) => BreakerView::of(key, b, &self.breaker_policy(key)),
            None => BreakerView::closed(key.clone()),
        }
    }

    /// Applies one command stamped with its entry time. A command that
    /// breaks a rule ([`Command::validate`]) or meets a full bound is
    /// refused and changes nothing.
    pub fn apply(&mut self, command: &Command, entry_time: Timestamp) -> Applied {
        // Time never goes back, and a stamp far ahead is followed at a
        // bounded pace (`clock.rs`).
        let now = self.fleet.clock.follow(entry_time);
        let mut events = Vec::new();
        let answer = match command
            .validate()
            .and_then(|()| self.dispatch(command, now, &mut events))
        {
            Ok(answer) => answer,
            Err(e) => Answer::Rejected(e),
        };
        Applied {
            answer,
            events,
            revision: self.fleet.revision,
        }
    }

    /// Applies an entry whose ledger changes are already stored: a restart
    /// re-applying the log behind a ledger on disk that is ahead of the
    /// fleet restored from the last snapshot. The fleet changes exactly as
    /// under [`apply`](Self::apply); ledger calls neither read nor write the
    /// ledger (their answers went out before the restart), which makes a
    /// restart's replay cost the fleet's work only. Other commands are
    /// applied whole, and their ledger writes are the store's to discard;
    /// one whose fleet change reads the ledger
    /// ([`Command::fleet_reads_ledger`]) must not be replayed this way (the
    /// store saves the fleet with it instead). Returns the watch events, as
    /// `apply` would.
    pub fn replay(&mut self, command: &Command, entry_time: Timestamp) -> Vec<WatchEvent> {
        match command {
            Command::Begin { namespace, request } => {
                self.fleet.clock.follow(entry_time);
                if command.validate().is_ok() {
                    // A refusal changes nothing, as under `apply`.
                    let _ = self.admit_begin(namespace, request);
                }
                Vec::new()
            }
            Command::LedgerBatch { ops } => {
                self.fleet.clock.follow(entry_time);
                if command.validate().is_ok() {
                    for op in ops {
                        if let (Ok(()), LedgerOp::Begin { namespace, request }) =
                            (op.validate(), op)
                        {
                            let _ = self.admit_begin(namespace, request);
                        }
                    }
                }
                Vec::new()
            }
            Command::Complete { .. } | Command::Resolve { .. } | Command::Renew { .. } => {
                self.fleet.clock.follow(entry_time);
                Vec::new()
            }
            _ => self.apply(command, entry_time).events,
        }
    }

    /// Hands a validated command to its family's handler: breakers
    /// (`breakers.rs`), outcome reports (`outcomes.rs`), the ledger
    /// (`ledger.rs`), policy and the kill switch (`policy.rs`), tools
    /// (`tools.rs`) and time (`fleet.rs`).
    fn dispatch(
        &mut self,
        command: &Command,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        match command {
            Command::ReportOutcomes {
                namespace,
                replica,
                batch_seq,
                outcomes,
            } => self.report(namespace, replica, *batch_seq, outcomes, now, events),
            Command::ReportBatch { reports } => Ok(self.report_batch(reports, now, events)),
            Command::AcquireProbe {
                key,
                replica,
                lease_ms,
            } => self.acquire_probe(key, replica, *lease_ms, now, events),
            Command::ReleaseProbe {
                key,
                permit_id,
                generation,
                outcome,
            } => self.release_probe(key, *permit_id, *generation, *outcome, now, events),
            Command::Operate {
                key,
                action,
                actor,
                reason,
            } => self.operate(key, action, actor, reason, now, events),
            Command::Begin { namespace, request } => self.begin(namespace, request, now),
            Command::Complete { namespace, request } => self.complete(namespace, request, now),
            Command::Resolve { namespace, request } => self.resolve(namespace, request, now),
            Command::Renew { namespace, request } => {
                Ok(Answer::Renew(self.ledger.renew(namespace, request, now)))
            }
            Command::ApplyPolicy {
                namespace,
                document,
                actor,
                reason,
            } => {
                let change = PolicyChange::new(actor, reason);
                self.apply_policy(namespace, document, &change, now, events)
            }
            Command::RollbackPolicy {
                namespace,
                version,
                actor,
                reason,
            } => self.rollback(namespace, *version, actor, reason, now, events),
            Command::SetKillSwitch {
                namespace,
                writes_blocked,
                actor,
                reason,
            } => self.kill_switch(namespace, *writes_blocked, actor, reason, now, events),
            Command::Tick => Ok(self.tick(now, events)),
            Command::ImportTools {
                namespace,
                server,
                tools,
                actor,
            } => self.import_tools(namespace, server, tools, actor, now, events),
            Command::Auth { change, actor } => {
                self.fleet.auth.apply(change, actor, now)?;
                Ok(Answer::AuthChanged {
                    version: self.fleet.auth.version(),
                })
            }
            Command::DeleteNamespace { namespace, .. } => self.delete_namespace(namespace, events),
            Command::LedgerBatch { ops } => Ok(self.ledger_batch(ops, now)),
        }
    }

    /// Applies each ledger call of a batch in order, as if alone: a call
    /// that breaks a rule is refused on its own and the others go on.
    fn ledger_batch(&mut self, ops: &[LedgerOp], now: Timestamp) -> Answer {
        let answers = ops
            .iter()
            .map(|op| {
                let answer = op.validate().and_then(|()| match op {
                    LedgerOp::Begin { namespace, request } => self.begin(namespace, request, now),
                    LedgerOp::Complete { namespace, request } => {
                        self.complete(namespace, request, now)
                    }
                });
                answer.unwrap_or_else(Answer::Rejected)
            })
            .collect();
        Answer::LedgerBatch(answers)
    }
}
