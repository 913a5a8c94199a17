//! The replicated state machine: every command, applied deterministically.

use super::answer::{Answer, Applied, ReportSummary, WatchEvent};
use super::command::{Command, OperatorAction, OutcomeReport, Report};
use super::namespace::{KillSwitch, NamespaceState};
use super::tools::{Announce, ManifestOf, ToolId, ToolImport, ToolRegistry};
use crate::breaker::{Breaker, BreakerKey, BreakerView, Observation, Recorded};
use crate::error::{check_len, check_max_len, CoreError};
use crate::ledger::{BoxedLedger, Ledger, LedgerStore};
use crate::limits::{
    BATCH_OUTCOMES_MAX, BREAKERS_PER_NAMESPACE_MAX, FORCE_OPEN_MS_MAX, ID_BYTES_MAX,
    NAMESPACES_MAX, REASON_BYTES_MAX, REPORTS_PER_BATCH_MAX, TICK_TIMERS_MAX,
};
use crate::name::{Namespace, ReplicaId, ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::policy::{BreakerPolicy, EffectClass, PolicyDocument, Scope, ToolPolicy};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// The replicated state apart from the ledger: namespaces, breakers and
/// their timers, the watch revision and the clock. It is small (bounded by
/// namespaces and breakers) and lives in memory on every store.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    namespaces: BTreeMap<Namespace, NamespaceState>,
    breakers: BTreeMap<BreakerKey, Breaker>,
    breakers_per_namespace: BTreeMap<Namespace, usize>,
    breaker_deadlines: BTreeSet<(Timestamp, BreakerKey)>,
    revision: u64,
    now: Timestamp,
    tools: ToolRegistry,
}

/// The whole replicated state: the [`Fleet`] and the ledger, in a store
/// of the caller's choice (in memory by default).
///
/// The fleet never depends on what the ledger answers: every command's
/// effect on the fleet is decided before or without the ledger. A store
/// may therefore replay entries whose ledger effects it already holds
/// (see the server's RocksDB ledger) and still reach the same fleet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StateMachine<L = Ledger> {
    fleet: Fleet,
    ledger: L,
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

    /// The ledger store, for storage adapters (entry boundaries, commits);
    /// ledger changes must go through [`StateMachine::apply`].
    pub fn ledger_mut(&mut self) -> &mut L {
        &mut self.ledger
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

    /// The latest entry time applied (entry times are clamped to never go back).
    pub fn now(&self) -> Timestamp {
        self.fleet.now
    }

    /// A namespace's settings, if it exists.
    pub fn namespace(&self, ns: &Namespace) -> Option<&NamespaceState> {
        self.fleet.namespaces.get(ns)
    }

    /// Every namespace, in order.
    pub fn namespaces(&self) -> impl Iterator<Item = (&Namespace, &NamespaceState)> {
        self.fleet.namespaces.iter()
    }

    /// The ledger.
    pub fn ledger(&self) -> &L {
        &self.ledger
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
        static DEFAULTS: LazyLock<PolicyDocument> = LazyLock::new(PolicyDocument::default);
        self.fleet
            .namespaces
            .get(ns)
            .and_then(|n| n.policy())
            .map_or(&*DEFAULTS, |p| &p.document)
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

    /// Applies one command stamped with its entry time.
    pub fn apply(&mut self, command: &Command, entry_time: Timestamp) -> Applied {
        // A new leader's clock may lag the old one's: time never goes back.
        self.fleet.now = self.fleet.now.max(entry_time);
        let now = self.fleet.now;
        let mut events = Vec::new();
        let answer = match self.dispatch(command, now, &mut events) {
            Ok(answer) => answer,
            Err(e) => Answer::Rejected(e),
        };
        Applied { answer, events }
    }

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
                outcomes,
            } => self.report(namespace, replica, outcomes, now, events),
            Command::ReportBatch { reports } => self.report_batch(reports, now, events),
            Command::AcquireProbe { key, replica } => {
                let policy = self.breaker_policy(key);
                let answer =
                    self.with_breaker(key, events, |b| b.acquire_probe(&policy, now, replica))?;
                Ok(Answer::Probe(answer))
            }
            Command::ReleaseProbe {
                key,
                permit_id,
                generation,
                outcome,
            } => {
                let policy = self.breaker_policy(key);
                let verdict = verdict_for(key, *outcome, &policy);
                let result = self.with_breaker(key, events, |b| {
                    b.release_probe(&policy, now, *permit_id, *generation, verdict)
                })?;
                Ok(Answer::ProbeReleased(result))
            }
            Command::Operate {
                key,
                action,
                actor,
                reason,
            } => self.operate(key, action, actor, reason, now, events),
            Command::Begin { namespace, request } => {
                request.validate()?;
                self.check_writes_allowed(namespace, request.effect)?;
                self.touch_namespace(namespace)?;
                Ok(Answer::Begin(self.ledger.begin(namespace, request, now)?))
            }
            Command::Complete { namespace, request } => {
                let retention = self.policy_document(namespace).ledger_retention_ms();
                let answer = self.ledger.complete(namespace, request, now, retention)?;
                Ok(Answer::Complete(answer))
            }
            Command::Resolve { namespace, request } => {
                let retention = self.policy_document(namespace).ledger_retention_ms();
                let answer = self.ledger.resolve(namespace, request, now, retention)?;
                Ok(Answer::Resolve(answer))
            }
            Command::ApplyPolicy {
                namespace,
                document,
                actor,
                reason,
            } => {
                let change = PolicyChange {
                    actor,
                    reason,
                    rolled_back_from: None,
                };
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
        }
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

    /// Creates the namespace on first use, within [`NAMESPACES_MAX`].
    fn touch_namespace(&mut self, ns: &Namespace) -> Result<&mut NamespaceState, CoreError> {
        if !self.fleet.namespaces.contains_key(ns) && self.fleet.namespaces.len() >= NAMESPACES_MAX
        {
            return Err(CoreError::limit("namespaces", NAMESPACES_MAX));
        }
        Ok(self.fleet.namespaces.entry(ns.clone()).or_default())
    }

    /// Runs `f` on a breaker (created if new, within limits), keeping the
    /// deadline index exact and emitting an event if the generation grew.
    fn with_breaker<T>(
        &mut self,
        key: &BreakerKey,
        events: &mut Vec<WatchEvent>,
        f: impl FnOnce(&mut Breaker) -> T,
    ) -> Result<T, CoreError> {
        if key.backend.is_some() && key.tool.is_none() {
            return Err(CoreError::invalid("backend", "a backend needs a tool"));
        }
        self.touch_namespace(&key.namespace)?;
        let mut breaker = match self.fleet.breakers.remove(key) {
            Some(b) => b,
            None => {
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
                Breaker::new()
            }
        };
        let (deadline, generation) = (breaker.next_deadline(), breaker.generation());
        let out = f(&mut breaker);
        if breaker.next_deadline() != deadline {
            if let Some(at) = deadline {
                self.fleet.breaker_deadlines.remove(&(at, key.clone()));
            }
            if let Some(at) = breaker.next_deadline() {
                self.fleet.breaker_deadlines.insert((at, key.clone()));
            }
        }
        debug_assert!(breaker.generation() >= generation, "generations only grow");
        if breaker.generation() != generation {
            self.fleet.revision += 1;
            let policy = breaker_policy_in(self.policy_document(&key.namespace), key);
            events.push(WatchEvent::Breaker {
                revision: self.fleet.revision,
                view: BreakerView::of(key, &breaker, &policy),
            });
        }
        self.fleet.breakers.insert(key.clone(), breaker);
        Ok(out)
    }

    fn report(
        &mut self,
        ns: &Namespace,
        replica: &ReplicaId,
        outcomes: &[OutcomeReport],
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        if outcomes.len() > BATCH_OUTCOMES_MAX {
            return Err(CoreError::invalid(
                "outcomes",
                format!(
                    "{} in one batch, at most {BATCH_OUTCOMES_MAX}",
                    outcomes.len()
                ),
            ));
        }
        // One clone per batch: the breakers below borrow `self` mutably.
        let document = self.policy_document(ns).clone();
        let mut resolved: BTreeMap<(ServerName, ToolName), ToolPolicy> = BTreeMap::new();
        let mut summary = ReportSummary::default();
        let mut timed: BTreeSet<ToolId> = BTreeSet::new();
        let window_ms = document.observation_window_ms();
        for o in outcomes {
            if o.class.has_latency() {
                let id = ToolId {
                    namespace: ns.clone(),
                    server: o.server.clone(),
                    tool: o.tool.clone(),
                };
                if self.fleet.tools.observe(&id, now, o.duration_ms, window_ms) {
                    timed.insert(id);
                }
            }
            let tool_policy = resolved
                .entry((o.server.clone(), o.tool.clone()))
                .or_insert_with(|| document.tool_policy(&o.server, &o.tool))
                .clone();
            let server_key = BreakerKey::server(ns.clone(), o.server.clone());
            let server_policy = document.server_breaker(&o.server);
            let server_obs = Observation {
                replica: replica.clone(),
                generation: o.server_generation,
                verdict: o.class.server_verdict(),
                duration_ms: o.duration_ms,
            };
            let tool_key = tool_key(ns, o, &tool_policy);
            let tool_obs = Observation {
                replica: replica.clone(),
                generation: o.tool_generation,
                verdict: o.class.verdict(tool_policy.breaker.rate_limited_is_failure),
                duration_ms: o.duration_ms,
            };
            let pairs = [
                (server_key, server_policy, server_obs),
                (tool_key, tool_policy.breaker, tool_obs),
            ];
            for (key, policy, obs) in pairs {
                match self.with_breaker(&key, events, |b| b.record(&policy, now, &obs)) {
                    Ok(Recorded::Counted) => summary.counted += 1,
                    Ok(Recorded::Stale) => summary.stale += 1,
                    Ok(Recorded::Ignored | Recorded::NotCounting) => summary.ignored += 1,
                    Err(CoreError::LimitReached { .. }) => summary.dropped_limit += 1,
                    Err(e) => return Err(e),
                }
            }
        }
        let mut announce = Announce {
            revision: &mut self.fleet.revision,
            events,
        };
        self.fleet
            .tools
            .update_penalties(&timed, now, &mut announce);
        Ok(Answer::Reported(summary))
    }

    fn import_tools(
        &mut self,
        ns: &Namespace,
        server: &ServerName,
        tools: &[ToolImport],
        actor: &str,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        // A refused import changes nothing: check the namespace limit first,
        // create the namespace only once the import is taken.
        if !self.fleet.namespaces.contains_key(ns) && self.fleet.namespaces.len() >= NAMESPACES_MAX
        {
            return Err(CoreError::limit("namespaces", NAMESPACES_MAX));
        }
        let document = self.policy_document(ns).clone();
        let of = ManifestOf {
            namespace: ns,
            server,
            actor,
        };
        let mut announce = Announce {
            revision: &mut self.fleet.revision,
            events,
        };
        let imported = self
            .fleet
            .tools
            .import(&of, tools, &document, now, &mut announce)?;
        self.touch_namespace(ns)?;
        Ok(Answer::ToolsImported(imported))
    }

    fn report_batch(
        &mut self,
        reports: &[Report],
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        let outcomes: usize = reports.iter().map(|r| r.outcomes.len()).sum();
        if reports.len() > REPORTS_PER_BATCH_MAX || outcomes > BATCH_OUTCOMES_MAX {
            return Err(CoreError::invalid(
                "reports",
                format!(
                    "{} reports with {outcomes} outcomes in one batch, at most \
                     {REPORTS_PER_BATCH_MAX} with {BATCH_OUTCOMES_MAX}",
                    reports.len()
                ),
            ));
        }
        let answers = reports
            .iter()
            .map(
                |r| match self.report(&r.namespace, &r.replica, &r.outcomes, now, events) {
                    Ok(Answer::Reported(summary)) => Ok(summary),
                    Ok(_) => Err(CoreError::invalid("reports", "unexpected answer")),
                    Err(e) => Err(e),
                },
            )
            .collect();
        Ok(Answer::ReportedBatch(answers))
    }

    fn operate(
        &mut self,
        key: &BreakerKey,
        action: &OperatorAction,
        actor: &str,
        reason: &str,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        check_len("actor", actor, ID_BYTES_MAX)?;
        check_max_len("reason", reason, REASON_BYTES_MAX)?;
        if let OperatorAction::ForceOpen { for_ms: Some(ms) } = action {
            if *ms == 0 || *ms > FORCE_OPEN_MS_MAX {
                return Err(CoreError::invalid(
                    "duration_ms",
                    format!("must be 1..={FORCE_OPEN_MS_MAX}, got {ms}"),
                ));
            }
        }
        self.with_breaker(key, events, |b| match action {
            OperatorAction::ForceOpen { for_ms } => {
                b.force_open(now, actor, reason, for_ms.map(|ms| now.plus_ms(ms)))
            }
            OperatorAction::Reset => b.reset(now, actor, reason),
            OperatorAction::Disable => b.disable(now, actor, reason),
            OperatorAction::MetricsOnly => b.metrics_only(now, actor, reason),
        })?;
        Ok(Answer::Breaker(Box::new(self.view(key))))
    }

    fn apply_policy(
        &mut self,
        ns: &Namespace,
        document: &PolicyDocument,
        change: &PolicyChange<'_>,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        check_len("actor", change.actor, ID_BYTES_MAX)?;
        check_max_len("reason", change.reason, REASON_BYTES_MAX)?;
        let problems = document.validate();
        if !problems.is_empty() {
            return Err(CoreError::InvalidPolicy(problems));
        }
        let state = self.touch_namespace(ns)?;
        let version = state.push_policy(
            document.clone(),
            now,
            change.actor,
            change.reason,
            change.rolled_back_from,
        );
        self.fleet.revision += 1;
        events.push(WatchEvent::Policy {
            revision: self.fleet.revision,
            namespace: ns.clone(),
            version,
        });
        Ok(Answer::PolicyApplied { version })
    }

    fn rollback(
        &mut self,
        ns: &Namespace,
        version: u64,
        actor: &str,
        reason: &str,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        check_max_len("reason", reason, REASON_BYTES_MAX)?;
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

    fn kill_switch(
        &mut self,
        ns: &Namespace,
        writes_blocked: bool,
        actor: &str,
        reason: &str,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        check_len("actor", actor, ID_BYTES_MAX)?;
        check_max_len("reason", reason, REASON_BYTES_MAX)?;
        let state = self.touch_namespace(ns)?;
        let switch = KillSwitch {
            writes_blocked,
            actor: actor.to_owned(),
            reason: reason.to_owned(),
            at: now,
        };
        state.kill_switch = Some(switch.clone());
        self.fleet.revision += 1;
        events.push(WatchEvent::KillSwitch {
            revision: self.fleet.revision,
            namespace: ns.clone(),
            writes_blocked,
        });
        Ok(Answer::KillSwitch(switch))
    }

    fn tick(&mut self, now: Timestamp, events: &mut Vec<WatchEvent>) -> Answer {
        let due: Vec<BreakerKey> = self
            .fleet
            .breaker_deadlines
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(TICK_TIMERS_MAX)
            .map(|(_, k)| k.clone())
            .collect();
        for key in &due {
            // Existing breakers only: `with_breaker` cannot fail for them.
            let _ = self.with_breaker(key, events, |b| b.advance(now));
        }
        // Slow samples leave the window with time alone: clear penalties.
        let penalized = self.fleet.tools.penalized();
        let mut announce = Announce {
            revision: &mut self.fleet.revision,
            events,
        };
        self.fleet
            .tools
            .update_penalties(&penalized, now, &mut announce);
        let budget = TICK_TIMERS_MAX.saturating_sub(due.len());
        let ledger = self.ledger.tick(now, budget);
        let timers = u32::try_from(due.len() + ledger).unwrap_or(u32::MAX);
        Answer::Ticked { timers }
    }
}

impl Fleet {
    /// Checks that a restored state's per-namespace breaker counts agree
    /// with its breakers (the counts travel in the snapshot).
    pub(crate) fn check_invariants(&self) -> Result<(), CoreError> {
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
        Ok(())
    }
}

/// Who changed a namespace's policy, why, and from which version.
struct PolicyChange<'a> {
    actor: &'a str,
    reason: &'a str,
    rolled_back_from: Option<u64>,
}

fn min_server() -> ServerName {
    // "!" is the smallest printable ASCII character a name may hold.
    ServerName::new("!").unwrap_or_else(|_| unreachable!("\"!\" is a valid name"))
}

fn tool_key(ns: &Namespace, o: &OutcomeReport, policy: &ToolPolicy) -> BreakerKey {
    let key = BreakerKey::tool(ns.clone(), o.server.clone(), o.tool.clone());
    match policy.scope {
        Scope::ToolAndBackend => key.with_backend(o.backend.clone()),
        Scope::Tool => key,
    }
}

fn breaker_policy_in(document: &PolicyDocument, key: &BreakerKey) -> BreakerPolicy {
    match &key.tool {
        Some(tool) => document.tool_policy(&key.server, tool).breaker,
        None => document.server_breaker(&key.server),
    }
}

fn verdict_for(key: &BreakerKey, class: OutcomeClass, policy: &BreakerPolicy) -> crate::Verdict {
    if key.is_server() {
        class.server_verdict()
    } else {
        class.verdict(policy.rate_limited_is_failure)
    }
}
