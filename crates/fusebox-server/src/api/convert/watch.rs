//! Watch snapshots and events on the wire.
//!
//! Core events say *what* changed at a revision (a breaker view, a policy
//! version number, the kill switch flag); the wire carries the whole thing
//! (the policy document, who threw the switch and why). These functions run
//! inside one read of the state, so the details come from the state as it
//! is when the event is sent; the fields that decide admission (state,
//! generation, open-until, version number, writes blocked) always come from
//! the event itself.

use super::breakers::view_to_proto;
use super::policy::{kill_switch_to_proto, version_to_proto};
use super::tools::{disclosures_in, tool_disclosure};
use crate::watch::WatchSnapshot;
use fusebox_core::machine::{SharedStateMachine, WatchEvent};
use fusebox_core::tools::ToolId;
use fusebox_core::Namespace;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::watch_event::Event;

/// Events of `ns` on the wire, in the order given.
pub fn events_to_proto(
    state: &SharedStateMachine,
    ns: &Namespace,
    events: &[WatchEvent],
) -> Vec<pb::WatchEvent> {
    events
        .iter()
        .filter(|e| e.namespace() == ns)
        .map(|e| pb::WatchEvent {
            revision: e.revision(),
            event: Some(event_to_proto(state, e)),
        })
        .collect()
}

fn event_to_proto(state: &SharedStateMachine, event: &WatchEvent) -> Event {
    match event {
        WatchEvent::Breaker { view, .. } => Event::Breaker(view_to_proto(state, view)),
        WatchEvent::Policy {
            namespace, version, ..
        } => Event::Policy(policy_version(state, namespace, *version)),
        WatchEvent::KillSwitch {
            namespace,
            writes_blocked,
            ..
        } => Event::KillSwitch(kill_switch(state, namespace, *writes_blocked)),
        WatchEvent::Tool {
            namespace,
            server,
            tool,
            ..
        } => Event::Disclosure(tool_disclosure(
            state,
            &ToolId {
                namespace: namespace.clone(),
                server: server.clone(),
                tool: tool.clone(),
            },
        )),
    }
}

fn policy_version(state: &SharedStateMachine, ns: &Namespace, version: u64) -> pb::PolicyVersion {
    match state.namespace(ns).and_then(|n| n.version(version)) {
        Some(v) => version_to_proto(ns, v, true),
        // Rolled off already: the number still tells the client what is in
        // force, and a newer event follows.
        None => pb::PolicyVersion {
            namespace: ns.to_string(),
            version,
            ..Default::default()
        },
    }
}

fn kill_switch(state: &SharedStateMachine, ns: &Namespace, writes_blocked: bool) -> pb::KillSwitch {
    let current = state.namespace(ns).and_then(|n| n.kill_switch.as_ref());
    match current.filter(|k| k.writes_blocked == writes_blocked) {
        Some(k) => kill_switch_to_proto(Some(k)),
        None => pb::KillSwitch {
            writes_blocked,
            ..Default::default()
        },
    }
}

/// A snapshot as events sharing its revision, `chunk` breakers each; the
/// first carries the policy and kill switch, the last sets `last_chunk`.
pub fn snapshot_to_proto(
    state: &SharedStateMachine,
    ns: &Namespace,
    snapshot: &WatchSnapshot,
    chunk: usize,
) -> Vec<pb::WatchEvent> {
    let views: Vec<pb::BreakerView> = snapshot
        .breakers
        .iter()
        .map(|v| view_to_proto(state, v))
        .collect();
    let mut chunks: Vec<Vec<pb::BreakerView>> =
        views.chunks(chunk.max(1)).map(<[_]>::to_vec).collect();
    if chunks.is_empty() {
        chunks.push(Vec::new());
    }
    let last = chunks.len() - 1;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, breakers)| {
            let first = i == 0;
            let policy = (first && snapshot.policy_version > 0)
                .then(|| policy_version(state, ns, snapshot.policy_version));
            let kill_switch = first.then(|| kill_switch(state, ns, snapshot.writes_blocked));
            // Read at send time, like event details: a disclosure newer than
            // the snapshot's revision is re-sent by its own event, which
            // replaces the entry whole, so applying both is harmless.
            let disclosures = if first {
                disclosures_in(state, ns)
            } else {
                Vec::new()
            };
            pb::WatchEvent {
                revision: snapshot.revision,
                event: Some(Event::Snapshot(pb::WatchSnapshot {
                    breakers,
                    policy,
                    kill_switch,
                    disclosures,
                    last_chunk: i == last,
                })),
            }
        })
        .collect()
}
