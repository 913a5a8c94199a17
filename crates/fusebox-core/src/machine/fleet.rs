//! The fleet: the replicated state apart from the ledger, and what time
//! alone changes in it (`Tick`).

use super::answer::Answer;
use super::clock::StateClock;
use super::namespace::{DefaultResolved, NamespaceState};
use super::report_marks::ReportMarks;
use super::state_machine::StateMachine;
use super::watch_event::WatchEvent;
use crate::auth::AuthTable;
use crate::breaker::{Breaker, BreakerKey};
use crate::error::CoreError;
use crate::keyed::KeyedMap;
use crate::ledger::LedgerStore;
use crate::limits::{NAMESPACES_MAX, TICK_TIMERS_MAX};
use crate::name::{Namespace, ServerName};
use crate::policy::{BreakerPolicy, PolicyDocument};
use crate::time::Timestamp;
use crate::tools::ToolRegistry;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The replicated state apart from the ledger: namespaces, breakers and
/// their timers, the watch revision and the clock. It is small (bounded by
/// namespaces and breakers) and lives in memory on every store.
///
/// The field order is the snapshot encoding's: do not reorder.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    pub(super) namespaces: BTreeMap<Namespace, NamespaceState>,
    pub(super) breakers: KeyedMap<BreakerKey, Breaker>,
    pub(super) breakers_per_namespace: BTreeMap<Namespace, usize>,
    pub(super) breaker_deadlines: BTreeSet<(Timestamp, BreakerKey)>,
    pub(super) revision: u64,
    pub(super) clock: StateClock,
    pub(super) tools: ToolRegistry,
    pub(super) report_marks: ReportMarks,
    pub(super) auth: AuthTable,
    /// Derived, never encoded: see [`DefaultResolved`].
    #[serde(skip)]
    pub(super) default_resolved: DefaultResolved,
}

impl Fleet {
    /// Creates the namespace on first use, within [`NAMESPACES_MAX`].
    pub(super) fn touch_namespace(
        &mut self,
        ns: &Namespace,
    ) -> Result<&mut NamespaceState, CoreError> {
        self.check_namespace_room(ns)?;
        // Looked up before `entry`, which would copy the name every time.
        if !self.namespaces.contains_key(ns) {
            self.namespaces
                .insert(ns.clone(), NamespaceState::default());
        }
        match self.namespaces.get_mut(ns) {
            Some(state) => Ok(state),
            None => Err(CoreError::invalid("namespace", "vanished while touched")),
        }
    }

    /// Refuses a new namespace once [`NAMESPACES_MAX`] exist.
    pub(super) fn check_namespace_room(&self, ns: &Namespace) -> Result<(), CoreError> {
        if !self.namespaces.contains_key(ns) && self.namespaces.len() >= NAMESPACES_MAX {
            return Err(CoreError::limit("namespaces", NAMESPACES_MAX));
        }
        Ok(())
    }

    /// The next revision, for one watch event.
    pub(super) fn next_revision(&mut self) -> u64 {
        self.revision += 1;
        self.revision
    }

    /// Checks that a restored state's per-namespace breaker counts agree
    /// with its breakers (the counts travel in the snapshot), and that its
    /// indexes hold exactly its timers and marks. A store calls it on any
    /// fleet it reads back from disk.
    pub fn check_invariants(&self) -> Result<(), CoreError> {
        let mut counts: BTreeMap<&Namespace, usize> = BTreeMap::new();
        for key in self.breakers.keys() {
            *counts.entry(&key.namespace).or_default() += 1;
        }
        let same = counts.len() == self.breakers_per_namespace.len()
            && counts
                .iter()
                .all(|(ns, n)| self.breakers_per_namespace.get(*ns) == Some(n));
        if !same {
            return Err(CoreError::Snapshot(
                "breaker counts disagree with breakers".into(),
            ));
        }
        // A breaker's namespace exists: `with_breaker` touches it only when
        // it creates the breaker.
        if counts.keys().any(|ns| !self.namespaces.contains_key(*ns)) {
            return Err(CoreError::Snapshot(
                "a breaker's namespace is missing".into(),
            ));
        }
        // The timers index is derived from the breakers; `tick` trusts it to
        // name only breakers that exist, at the times they are due.
        let due: BTreeSet<(Timestamp, &BreakerKey)> = self
            .breakers
            .iter()
            .filter_map(|(key, b)| b.next_deadline().map(|at| (at, key)))
            .collect();
        let timers_agree = due.len() == self.breaker_deadlines.len()
            && due
                .iter()
                .zip(&self.breaker_deadlines)
                .all(|((at, key), (t, k))| at == t && *key == k);
        if !timers_agree {
            return Err(CoreError::Snapshot(
                "breaker timers disagree with breakers".into(),
            ));
        }
        if !self.report_marks.consistent() {
            return Err(CoreError::Snapshot(
                "report marks disagree with their age index".into(),
            ));
        }
        Ok(())
    }
}

impl<L: LedgerStore> StateMachine<L> {
    /// Applies what time alone changes: breakers whose open period or
    /// forced-open expiry is due, penalties whose slow samples have left the
    /// window, ledger leases and retention, and idle report marks. At most
    /// [`TICK_TIMERS_MAX`] breakers and ledger deadlines together, and
    /// apart from the ledger's, at most as many breakers and marks.
    pub(super) fn tick(&mut self, now: Timestamp, events: &mut Vec<WatchEvent>) -> Answer {
        let due: Vec<BreakerKey> = self
            .fleet
            .breaker_deadlines
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(TICK_TIMERS_MAX)
            .map(|(_, k)| k.clone())
            .collect();
        for key in &due {
            debug_assert!(
                self.fleet.breakers.contains_key(key),
                "timers index breakers"
            );
            // Existing breakers only: `with_breaker` cannot fail for them.
            let _ = self.with_breaker(key, events, |b| b.advance(now));
        }
        // Slow samples leave the window with time alone: clear penalties.
        let penalized = self.fleet.tools.penalized();
        self.update_penalties(&penalized, now, events);
        let budget = TICK_TIMERS_MAX.saturating_sub(due.len());
        let ledger = self.ledger.tick(now, budget);
        // The marks' budget is not what the ledger left: what a tick does
        // to the fleet must not depend on what the ledger holds, since a
        // restart replays ticks behind a ledger that has moved on
        // (`StateMachine::replay`).
        let marks = self.fleet.report_marks.expire(now, budget);
        let timers = u32::try_from(due.len() + ledger + marks).unwrap_or(u32::MAX);
        Answer::Ticked { timers }
    }
}

/// The smallest server name, to start a range scan of a namespace.
pub(super) fn min_server() -> ServerName {
    // "!" is the smallest printable ASCII character a name may hold.
    ServerName::new("!").unwrap_or_else(|_| unreachable!("\"!\" is a valid name"))
}

/// The breaker policy `document` sets for `key`.
pub(super) fn breaker_policy_in(document: &PolicyDocument, key: &BreakerKey) -> BreakerPolicy {
    match &key.tool {
        Some(tool) => document.tool_policy(&key.server, tool).breaker,
        None => document.server_breaker(&key.server),
    }
}
