//! The replica's local copy of its namespace, fed by the watch stream.
//!
//! It holds every breaker the cluster tracks (an absent one is CLOSED at
//! generation 0), the policy in force with a cache of resolved tools, the
//! write kill switch and latency disclosures. Admission reads it under a
//! read lock with string lookups only: no allocation, no network.
//!
//! A resolved tool ([`Resolved`]) is everything the call path derives from
//! the policy for one [`ToolRef`]: its policy, its server's breaker policy,
//! the keys of both breakers and a handle on this replica's own breakers
//! for them. It is built once per policy version, so admitting a call and
//! recording its outcome copy no name.
//!
//! Freshness is tracked apart from the data, in atomics: the instant of the
//! last event (heartbeats included) and whether the stream is up. A view is
//! fresh while its last event is younger than `view_stale_after_ms` and the
//! stream has not been down longer than `disconnect_grace_ms`; a view that
//! never received a snapshot is never fresh.

use crate::config::{DISCLOSURES_MAX, TOOL_POLICIES_CACHED_MAX};
use crate::convert::{self, tool_key, view_from_proto};
use crate::error::ClientError;
use crate::error::Forced;
use crate::local_breakers::{server_key, LocalPair};
use crate::tool::ToolRef;
use fusebox_core::breaker::BreakerKey;
use fusebox_core::breaker::{admit, Admission, BreakerState, BreakerView};
use fusebox_core::disclosure::LatencyDisclosure;
use fusebox_core::limits::BREAKERS_PER_NAMESPACE_MAX;
use fusebox_core::policy::{BreakerPolicy, EffectClass, PolicyDocument, Scope, ToolPolicy};
use fusebox_core::{Namespace, ServerName, Timestamp};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::watch_event::Event;
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use tokio::time::Instant;

/// How fresh the local view is, for the agent and its dashboards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewStatus {
    /// Revision of the last change applied; `None` before the first
    /// snapshot.
    pub revision: Option<u64>,
    /// Whether the watch stream is up now.
    pub connected: bool,
    /// Milliseconds since the last event (heartbeats count); `None` before
    /// the first.
    pub age_ms: Option<u64>,
    /// Whether decisions use this view (`false`: `on_partition` decides and
    /// every decision is degraded).
    pub fresh: bool,
    /// Version of the policy in force; `None` when the namespace has none
    /// (built-in defaults apply).
    pub policy_version: Option<u64>,
    /// Whether the write kill switch is on.
    pub writes_blocked: bool,
    /// Breakers tracked (not an untouched CLOSED one).
    pub breakers: usize,
    /// The fleet's size as the cluster last reported it (distinct replicas
    /// that reported in the last hour); `None` before the first heartbeat
    /// that carried one.
    pub fleet_replicas: Option<u32>,
}

/// The write kill switch as the view holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KillSwitch {
    pub(crate) writes_blocked: bool,
    pub(crate) reason: String,
}

#[derive(Debug, Default)]
struct ToolEntry {
    view: Option<BreakerView>,
    backends: FxHashMap<String, BreakerView>,
}

#[derive(Debug, Default)]
struct ServerEntry {
    view: Option<BreakerView>,
    tools: FxHashMap<String, ToolEntry>,
}

/// One tool as the policy in force resolves it: what the call path needs,
/// derived once per policy version (see the module essay).
#[derive(Debug)]
pub(crate) struct Resolved {
    /// The tool it was resolved for.
    pub(crate) tool: ToolRef,
    /// The tool's effective policy.
    pub(crate) policy: Arc<ToolPolicy>,
    /// Its server's breaker policy.
    pub(crate) server_breaker: BreakerPolicy,
    /// The key of its server's breaker.
    pub(crate) server_key: BreakerKey,
    /// The key of its own breaker, under the policy's scope.
    pub(crate) tool_key: BreakerKey,
    /// This replica's own breakers for the two keys, taken on first use
    /// (the view does not own them: the client does).
    pub(crate) local: OnceLock<LocalPair>,
}

/// What one admission read out of the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Admitted {
    pub(crate) admission: Admission,
    pub(crate) state: BreakerState,
    /// The operator behind a forced-open refusal.
    pub(crate) forced: Option<Forced>,
    pub(crate) tool_generation: u64,
    pub(crate) server_generation: u64,
}

#[derive(Debug)]
struct Policies {
    version: Option<u64>,
    document: Arc<PolicyDocument>,
    tools: FxHashMap<ToolRef, Arc<Resolved>>,
    /// Bumped whenever a tool's hinted effect changes, so a policy resolved
    /// with the old hint is not cached.
    hints_epoch: u64,
}

#[derive(Debug, Default)]
struct PendingSnapshot {
    breakers: Vec<BreakerView>,
    policy: Option<pb::PolicyVersion>,
    kill_switch: Option<pb::KillSwitch>,
    disclosures: Vec<pb::ToolDisclosure>,
}

#[derive(Debug, Default)]
struct Data {
    revision: Option<u64>,
    servers: FxHashMap<String, ServerEntry>,
    breakers: usize,
    kill_switch: KillSwitch,
    disclosures: HashMap<(String, String), LatencyDisclosure>,
    latency: HashMap<(String, String), ToolLatency>,
    /// The effect class each imported tool's MCP hints imply, used where the
    /// policy declares none.
    hinted: HashMap<(String, String), EffectClass>,
    pending: Option<PendingSnapshot>,
}

/// What the fleet knows of a tool's latency, for routing among equivalents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ToolLatency {
    /// Observed p95 if the fleet has enough samples, else the disclosed one.
    pub(crate) p95_ms: Option<u64>,
    /// The cluster flagged its observed p95 as regressed (penalized).
    pub(crate) penalized: bool,
}

/// The local view.
#[derive(Debug)]
pub(crate) struct LocalView {
    namespace: Namespace,
    data: RwLock<Data>,
    policies: RwLock<Policies>,
    imported: RwLock<HashMap<(String, String), LatencyDisclosure>>,
    closed: BreakerView,
    epoch: Instant,
    last_event_ms: AtomicU64,
    /// The fleet's size as the cluster last reported it (0: not yet).
    fleet_replicas: AtomicU32,
    connected: AtomicBool,
    disconnected_at_ms: AtomicU64,
    stale_after_ms: u64,
    disconnect_grace_ms: u64,
    /// Counts the breaker changes the view took in (events, snapshots,
    /// probe answers), so a call in flight under `in_flight_on_open = "end"`
    /// can wait for one and look at its breakers again.
    breaker_changes: tokio::sync::watch::Sender<u64>,
}

/// Never: the instant-offset meaning "no event yet".
const NEVER: u64 = u64::MAX;

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

impl LocalView {
    /// An empty view: every breaker closed, built-in policy, never fresh.
    pub(crate) fn new(
        namespace: Namespace,
        stale_after_ms: u64,
        disconnect_grace_ms: u64,
    ) -> Result<Self, ClientError> {
        let placeholder = ServerName::new("_").map_err(ClientError::invalid("server"))?;
        let closed = BreakerView::closed(BreakerKey::server(namespace.clone(), placeholder));
        Ok(LocalView {
            namespace,
            data: RwLock::new(Data::default()),
            policies: RwLock::new(Policies {
                version: None,
                document: Arc::new(PolicyDocument::default()),
                tools: FxHashMap::default(),
                hints_epoch: 0,
            }),
            imported: RwLock::new(HashMap::new()),
            closed,
            epoch: Instant::now(),
            last_event_ms: AtomicU64::new(NEVER),
            fleet_replicas: AtomicU32::new(0),
            connected: AtomicBool::new(false),
            disconnected_at_ms: AtomicU64::new(0),
            stale_after_ms,
            disconnect_grace_ms,
            breaker_changes: tokio::sync::watch::Sender::new(0),
        })
    }

    /// A receiver told of every breaker change the view takes in after now.
    pub(crate) fn breaker_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.breaker_changes.subscribe()
    }

    fn breakers_changed(&self) {
        self.breaker_changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn since_epoch_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Milliseconds since the last event, `None` before the first.
    pub(crate) fn age_ms(&self) -> Option<u64> {
        let last = self.last_event_ms.load(Ordering::Acquire);
        (last != NEVER).then(|| self.since_epoch_ms().saturating_sub(last))
    }

    /// Whether decisions may use the view (see the module essay).
    pub(crate) fn is_fresh(&self) -> bool {
        self.freshness().0
    }

    /// Whether decisions may use the view, and its age (`None` before the
    /// first event), from one reading of the clock.
    pub(crate) fn freshness(&self) -> (bool, Option<u64>) {
        let now = self.since_epoch_ms();
        let last = self.last_event_ms.load(Ordering::Acquire);
        if last == NEVER {
            return (false, None);
        }
        let age = now.saturating_sub(last);
        let fresh = age < self.stale_after_ms
            && (self.connected.load(Ordering::Acquire)
                || now.saturating_sub(self.disconnected_at_ms.load(Ordering::Acquire))
                    < self.disconnect_grace_ms);
        (fresh, Some(age))
    }

    /// The stream is up (`true`) or went down (`false`).
    pub(crate) fn set_connected(&self, up: bool) {
        if !up && self.connected.load(Ordering::Acquire) {
            self.disconnected_at_ms
                .store(self.since_epoch_ms(), Ordering::Release);
        }
        self.connected.store(up, Ordering::Release);
    }

    /// The revision to resume the stream from.
    pub(crate) fn revision(&self) -> Option<u64> {
        read(&self.data).revision
    }

    /// The view's freshness and headline facts.
    pub(crate) fn status(&self) -> ViewStatus {
        let data = read(&self.data);
        ViewStatus {
            revision: data.revision,
            connected: self.connected.load(Ordering::Acquire),
            age_ms: self.age_ms(),
            fresh: self.is_fresh(),
            policy_version: read(&self.policies).version,
            writes_blocked: data.kill_switch.writes_blocked,
            breakers: data.breakers,
            fleet_replicas: self.fleet_replicas(),
        }
    }

    /// The kill switch as last seen.
    pub(crate) fn kill_switch(&self) -> KillSwitch {
        read(&self.data).kill_switch.clone()
    }

    /// Whether the kill switch is on (no allocation).
    pub(crate) fn writes_blocked(&self) -> bool {
        read(&self.data).kill_switch.writes_blocked
    }

    /// The admission rule applied to the cached server and tool breakers.
    pub(crate) fn admit(&self, tool: &ToolRef, scope: Scope, now: Timestamp) -> Admitted {
        let data = read(&self.data);
        let entry = data.servers.get(tool.server());
        let server_view = entry.and_then(|e| e.view.as_ref()).unwrap_or(&self.closed);
        let tool_entry = entry.and_then(|e| e.tools.get(tool.tool()));
        let tool_view = match (scope, tool.backend()) {
            (Scope::ToolAndBackend, Some(b)) => tool_entry.and_then(|t| t.backends.get(b)),
            _ => tool_entry.and_then(|t| t.view.as_ref()),
        }
        .unwrap_or(&self.closed);
        let admission = admit(server_view, tool_view, now);
        let state = match &admission {
            Admission::Reject { state, .. } => *state,
            Admission::Probe { scope } => match scope {
                fusebox_core::breaker::RejectScope::Server => server_view.state,
                fusebox_core::breaker::RejectScope::Tool => tool_view.state,
            },
            Admission::Allow { .. } => tool_view.state,
        };
        let forced = match &admission {
            Admission::Reject {
                scope,
                state: BreakerState::ForcedOpen,
                ..
            } => {
                let view = match scope {
                    fusebox_core::breaker::RejectScope::Server => server_view,
                    fusebox_core::breaker::RejectScope::Tool => tool_view,
                };
                Some(Forced {
                    by: view.actor.clone().unwrap_or_default(),
                    reason: view.reason.clone().unwrap_or_default(),
                })
            }
            _ => None,
        };
        Admitted {
            admission,
            state,
            forced,
            tool_generation: tool_view.generation,
            server_generation: server_view.generation,
        }
    }

    /// The effective policy of a tool, resolved once per policy version:
    /// where the policy declares no effect, the one the tool's MCP hints
    /// imply (if it was imported).
    pub(crate) fn tool_policy(&self, tool: &ToolRef) -> Arc<ToolPolicy> {
        self.resolved(tool).policy.clone()
    }

    /// `tool` as the policy in force resolves it, from the cache when the
    /// policy and the tools' hints have not changed since.
    pub(crate) fn resolved(&self, tool: &ToolRef) -> Arc<Resolved> {
        let (version, epoch, document) = {
            let policies = read(&self.policies);
            if let Some(r) = policies.tools.get(tool) {
                return r.clone();
            }
            (
                policies.version,
                policies.hints_epoch,
                policies.document.clone(),
            )
        };
        let key = (tool.server().to_owned(), tool.tool().to_owned());
        let hinted = read(&self.data).hinted.get(&key).copied();
        let policy = document.tool_policy_hinted(&tool.server, &tool.tool, hinted);
        let resolved = Arc::new(Resolved {
            tool: tool.clone(),
            server_breaker: document.server_breaker(&tool.server),
            server_key: server_key(&self.namespace, tool),
            tool_key: tool_key(&self.namespace, tool, policy.scope),
            policy: Arc::new(policy),
            local: OnceLock::new(),
        });
        let mut policies = write(&self.policies);
        let current = policies.version == version && policies.hints_epoch == epoch;
        if current && policies.tools.len() < TOOL_POLICIES_CACHED_MAX {
            policies.tools.insert(tool.clone(), resolved.clone());
        }
        resolved
    }

    /// Whether the policy lets `other` stand in for `primary` while a
    /// breaker refuses `primary`: both in one failover group.
    pub(crate) fn may_fail_over(&self, primary: &ToolRef, other: &ToolRef) -> bool {
        read(&self.policies)
            .document
            .failover_group(&primary.server, &primary.tool)
            .is_some_and(|g| g.contains(&other.server, &other.tool))
    }

    /// The fleet's size as the cluster last reported it (distinct recent
    /// reporters), if it has.
    pub(crate) fn fleet_replicas(&self) -> Option<u32> {
        match self.fleet_replicas.load(Ordering::Acquire) {
            0 => None,
            n => Some(n),
        }
    }

    /// The effective policy of a server's own breaker.
    pub(crate) fn server_breaker_policy(&self, tool: &ToolRef) -> BreakerPolicy {
        self.resolved(tool).server_breaker.clone()
    }

    /// The disclosure for a tool: the cluster's if it has one, else one the
    /// replica imported from a manifest.
    pub(crate) fn disclosure(&self, tool: &ToolRef) -> Option<LatencyDisclosure> {
        let key = (tool.server().to_owned(), tool.tool().to_owned());
        if let Some(d) = read(&self.data).disclosures.get(&key) {
            return Some(d.clone());
        }
        read(&self.imported).get(&key).cloned()
    }

    /// The fleet's latency figures for a tool, if it has any.
    pub(crate) fn latency(&self, tool: &ToolRef) -> ToolLatency {
        let key = (tool.server.to_string(), tool.tool.to_string());
        read(&self.data)
            .latency
            .get(&key)
            .copied()
            .unwrap_or_default()
    }

    /// Keeps a disclosure read from a tool manifest; `false` when the bound
    /// of kept disclosures is reached.
    pub(crate) fn import_disclosure(&self, tool: &ToolRef, block: LatencyDisclosure) -> bool {
        let mut imported = write(&self.imported);
        let key = (tool.server().to_owned(), tool.tool().to_owned());
        if imported.len() >= DISCLOSURES_MAX && !imported.contains_key(&key) {
            return false;
        }
        imported.insert(key, block);
        true
    }

    /// Applies one event of the watch stream.
    pub(crate) fn apply(&self, event: pb::WatchEvent) {
        self.last_event_ms
            .store(self.since_epoch_ms(), Ordering::Release);
        let Some(kind) = event.event else {
            return;
        };
        let breakers_changed = matches!(
            kind,
            Event::Snapshot(_) | Event::Breaker(_) | Event::BreakerRemoved(_)
        );
        self.apply_locked(&mut write(&self.data), kind, event.revision);
        if breakers_changed {
            self.breakers_changed();
        }
    }

    fn apply_locked(&self, data: &mut Data, kind: Event, revision: u64) {
        match kind {
            Event::Snapshot(chunk) => {
                if let Some(done) = self.add_chunk(data, chunk) {
                    self.install(data, done);
                    // A snapshot replaces the whole view, so its revision
                    // is the view's now, even below the one held (a node
                    // behind answered the resume): a later resume must ask
                    // for every event after it, or the events between the
                    // two would never come.
                    data.revision = Some(revision);
                }
                return;
            }
            Event::Breaker(view) => {
                if let Some(view) = view_from_proto(&self.namespace, &view) {
                    upsert(data, view, true);
                }
            }
            Event::BreakerRemoved(removed) => {
                let key = removed
                    .key
                    .as_ref()
                    .and_then(|k| convert::key_from_proto(&self.namespace, k));
                if let Some(key) = key {
                    remove(data, &key);
                }
            }
            // Version 0: the namespace's policies were deleted with it; the
            // built-in defaults apply.
            Event::Policy(version) if version.version == 0 => self.set_policy(None),
            Event::Policy(version) => self.set_policy(Some(&version)),
            Event::KillSwitch(k) => data.kill_switch = kill_from_proto(&k),
            Event::Disclosure(d) => {
                if set_disclosure(data, &d) {
                    forget_resolved(&mut write(&self.policies));
                }
            }
            Event::Heartbeat(beat) => {
                self.fleet_replicas
                    .store(beat.fleet_replicas, Ordering::Release);
            }
            Event::ResyncRequired(_) => {}
        }
        data.revision = Some(data.revision.map_or(revision, |r| r.max(revision)));
    }

    /// A breaker view learned outside the stream (a probe release answer):
    /// kept only if it is newer than the one held.
    pub(crate) fn offer_breaker(&self, view: &pb::BreakerView) {
        if let Some(view) = view_from_proto(&self.namespace, view) {
            upsert(&mut write(&self.data), view, false);
            self.breakers_changed();
        }
    }

    fn add_chunk(&self, data: &mut Data, chunk: pb::WatchSnapshot) -> Option<PendingSnapshot> {
        let pending = data.pending.get_or_insert_with(PendingSnapshot::default);
        if chunk.policy.is_some() {
            pending.policy = chunk.policy;
        }
        if chunk.kill_switch.is_some() {
            pending.kill_switch = chunk.kill_switch;
        }
        for view in &chunk.breakers {
            if pending.breakers.len() >= BREAKERS_PER_NAMESPACE_MAX {
                tracing::warn!(namespace = %self.namespace, "snapshot holds more breakers than a namespace may; extra ones ignored");
                break;
            }
            pending
                .breakers
                .extend(view_from_proto(&self.namespace, view));
        }
        let room = DISCLOSURES_MAX.saturating_sub(pending.disclosures.len());
        pending
            .disclosures
            .extend(chunk.disclosures.into_iter().take(room));
        if chunk.last_chunk {
            data.pending.take()
        } else {
            None
        }
    }

    fn install(&self, data: &mut Data, snapshot: PendingSnapshot) {
        data.servers.clear();
        data.breakers = 0;
        for view in snapshot.breakers {
            upsert(data, view, true);
        }
        data.kill_switch = snapshot
            .kill_switch
            .as_ref()
            .map(kill_from_proto)
            .unwrap_or_default();
        data.disclosures.clear();
        data.latency.clear();
        data.hinted.clear();
        for d in &snapshot.disclosures {
            set_disclosure(data, d);
        }
        forget_resolved(&mut write(&self.policies));
        self.set_policy(snapshot.policy.as_ref());
    }

    fn set_policy(&self, version: Option<&pb::PolicyVersion>) {
        let parsed = match version {
            Some(v) => match convert::policy_from_proto(v) {
                Some(document) => (Some(v.version), document),
                None => return,
            },
            None => (None, PolicyDocument::default()),
        };
        let mut policies = write(&self.policies);
        if policies.version == parsed.0 && parsed.0.is_some() {
            return;
        }
        policies.version = parsed.0;
        policies.document = Arc::new(parsed.1);
        policies.tools.clear();
    }
}

fn kill_from_proto(k: &pb::KillSwitch) -> KillSwitch {
    KillSwitch {
        writes_blocked: k.writes_blocked,
        reason: k.reason.clone(),
    }
}

/// Drops every cached tool policy because a hinted effect changed.
fn forget_resolved(policies: &mut Policies) {
    policies.tools.clear();
    policies.hints_epoch += 1;
}

/// Takes in one tool's disclosure entry; `true` when its hinted effect
/// changed, so resolved tool policies are stale.
fn set_disclosure(data: &mut Data, d: &pb::ToolDisclosure) -> bool {
    let key = (d.server.clone(), d.tool.clone());
    let hinted = convert::hinted_effect_from_proto(d.hinted_effect);
    let before = data.hinted.get(&key).copied();
    let hint_changed = before != hinted;
    match hinted {
        Some(effect) if data.hinted.len() < DISCLOSURES_MAX || before.is_some() => {
            data.hinted.insert(key.clone(), effect);
        }
        Some(_) => {}
        None => {
            data.hinted.remove(&key);
        }
    }
    let p95_ms = d
        .observed
        .as_ref()
        .or(d.disclosed.as_ref())
        .map(|b| b.p95_ms);
    if d.disclosed.is_none() && d.observed.is_none() {
        data.latency.remove(&key);
    } else if data.latency.len() < DISCLOSURES_MAX || data.latency.contains_key(&key) {
        let latency = ToolLatency {
            p95_ms,
            penalized: d.p95_regressed,
        };
        data.latency.insert(key.clone(), latency);
    }
    match d
        .disclosed
        .as_ref()
        .and_then(convert::disclosure_from_proto)
    {
        Some(block)
            if data.disclosures.len() < DISCLOSURES_MAX || data.disclosures.contains_key(&key) =>
        {
            data.disclosures.insert(key, block);
        }
        Some(_) => {}
        None => {
            data.disclosures.remove(&key);
        }
    }
    hint_changed
}

fn upsert(data: &mut Data, view: BreakerView, ordered: bool) {
    let count = data.breakers;
    let server = data.servers.entry(view.key.server.to_string()).or_default();
    let existing: Option<&BreakerView> = match (&view.key.tool, &view.key.backend) {
        (None, _) => server.view.as_ref(),
        (Some(t), None) => server.tools.get(t.as_str()).and_then(|e| e.view.as_ref()),
        (Some(t), Some(b)) => server
            .tools
            .get(t.as_str())
            .and_then(|e| e.backends.get(b.as_str())),
    };
    if !ordered && existing.is_some_and(|e| e.generation >= view.generation) {
        return;
    }
    let added = existing.is_none();
    if added && count >= BREAKERS_PER_NAMESPACE_MAX {
        return;
    }
    match (view.key.tool.clone(), view.key.backend.clone()) {
        (None, _) => server.view = Some(view),
        (Some(t), None) => server.tools.entry(t.to_string()).or_default().view = Some(view),
        (Some(t), Some(b)) => {
            server
                .tools
                .entry(t.to_string())
                .or_default()
                .backends
                .insert(b.to_string(), view);
        }
    }
    if added {
        data.breakers += 1;
    }
}

fn remove(data: &mut Data, key: &BreakerKey) {
    let Some(server) = data.servers.get_mut(key.server.as_str()) else {
        return;
    };
    let removed = match (&key.tool, &key.backend) {
        (None, _) => server.view.take().is_some(),
        (Some(t), None) => server
            .tools
            .get_mut(t.as_str())
            .is_some_and(|e| e.view.take().is_some()),
        (Some(t), Some(b)) => server
            .tools
            .get_mut(t.as_str())
            .is_some_and(|e| e.backends.remove(b.as_str()).is_some()),
    };
    if removed {
        data.breakers = data.breakers.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(revision: u64, event: Event) -> pb::WatchEvent {
        pb::WatchEvent {
            revision,
            event: Some(event),
        }
    }

    fn snapshot() -> Event {
        Event::Snapshot(pb::WatchSnapshot {
            last_chunk: true,
            ..Default::default()
        })
    }

    #[test]
    fn a_snapshot_from_a_node_behind_takes_the_view_back_to_its_revision() {
        let ns = Namespace::new("fleet").expect("namespace");
        let view = LocalView::new(ns, 15_000, 5_000).expect("view");
        view.apply(event(10, snapshot()));
        let beat = Event::Heartbeat(pb::WatchHeartbeat::default());
        view.apply(event(40, beat));
        assert_eq!(view.revision(), Some(40));
        // A resume answered by a node that has applied only up to 25.
        view.apply(event(25, snapshot()));
        assert_eq!(view.revision(), Some(25), "the resume must ask from 25");
        // Events still only move it forward.
        view.apply(event(31, Event::ResyncRequired(Default::default())));
        view.apply(event(30, Event::ResyncRequired(Default::default())));
        assert_eq!(view.revision(), Some(31));
    }
}
