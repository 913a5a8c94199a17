//! Watch snapshots and events on the wire.
//!
//! Core events say *what* changed at a revision (a breaker view, a policy
//! version number, the kill switch flag); the wire carries the whole thing
//! (the policy document, who threw the switch and why). These functions run
//! inside one read of the state, so the details come from the state as it
//! is when the event is sent; the fields that decide admission (state,
//! generation, open-until, version number, writes blocked) always come from
//! the event itself.

use crate::limits::WATCH_CHUNK_BYTES_MAX;
use crate::watch::WatchSnapshot;
use fusebox_api::convert::breakers::{key_to_proto, view_to_proto};
use fusebox_api::convert::policy::{kill_switch_to_proto, version_to_proto};
use fusebox_api::convert::tools::{disclosures_in, tool_disclosure};
use fusebox_core::machine::{SharedStateMachine, WatchEvent};
use fusebox_core::tools::ToolId;
use fusebox_core::Namespace;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::watch_event::Event;
use std::sync::Arc;

/// Events of `ns` on the wire, in the order given.
pub fn events_to_proto(
    state: &SharedStateMachine,
    ns: &Namespace,
    events: &[Arc<WatchEvent>],
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
        WatchEvent::BreakerRemoved { key, .. } => Event::BreakerRemoved(pb::BreakerRemoved {
            key: Some(key_to_proto(key)),
        }),
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

/// A snapshot as events sharing its revision: `chunk` breakers per chunk,
/// then the namespace's disclosures in chunks of at most
/// [`WATCH_CHUNK_BYTES_MAX`]; the first chunk carries the policy and kill
/// switch, the last sets `last_chunk`.
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
    let policy =
        (snapshot.policy_version > 0).then(|| policy_version(state, ns, snapshot.policy_version));
    let kill_switch = kill_switch(state, ns, snapshot.writes_blocked);
    // Read at send time, like event details: a disclosure newer than the
    // snapshot's revision is re-sent by its own event, which replaces the
    // entry whole, so applying both is harmless.
    let disclosures = disclosures_in(state, ns);
    chunk_snapshot(views, disclosures, policy, kill_switch, chunk)
        .into_iter()
        .map(|chunk| pb::WatchEvent {
            revision: snapshot.revision,
            event: Some(Event::Snapshot(chunk)),
        })
        .collect()
}

/// Cuts a snapshot into chunks: breakers `per_chunk` at a time, then the
/// disclosures by bytes, so no chunk outgrows what a client decodes (a
/// namespace's disclosures alone may reach tens of MiB).
pub fn chunk_snapshot(
    views: Vec<pb::BreakerView>,
    disclosures: Vec<pb::ToolDisclosure>,
    policy: Option<pb::PolicyVersion>,
    kill_switch: pb::KillSwitch,
    per_chunk: usize,
) -> Vec<pb::WatchSnapshot> {
    let mut chunks: Vec<pb::WatchSnapshot> = views
        .chunks(per_chunk.max(1))
        .map(|breakers| pb::WatchSnapshot {
            breakers: breakers.to_vec(),
            ..Default::default()
        })
        .collect();
    let mut bytes = 0usize;
    let mut current: Vec<pb::ToolDisclosure> = Vec::new();
    for disclosure in disclosures {
        let size = prost::Message::encoded_len(&disclosure);
        if !current.is_empty() && bytes.saturating_add(size) > WATCH_CHUNK_BYTES_MAX {
            chunks.push(pb::WatchSnapshot {
                disclosures: std::mem::take(&mut current),
                ..Default::default()
            });
            bytes = 0;
        }
        bytes = bytes.saturating_add(size);
        current.push(disclosure);
    }
    if !current.is_empty() {
        chunks.push(pb::WatchSnapshot {
            disclosures: current,
            ..Default::default()
        });
    }
    if chunks.is_empty() {
        chunks.push(pb::WatchSnapshot::default());
    }
    if let Some(first) = chunks.first_mut() {
        first.policy = policy;
        first.kill_switch = Some(kill_switch);
    }
    if let Some(last) = chunks.last_mut() {
        last.last_chunk = true;
    }
    chunks
}

#[cfg(test)]
mod chunk_tests {
    use super::*;
    use prost::Message;

    fn disclosure(i: usize) -> pb::ToolDisclosure {
        pb::ToolDisclosure {
            server: "vendor".into(),
            tool: format!("tool-{i}"),
            disclosed: Some(pb::LatencyDisclosure {
                degradation_modes: (0..32)
                    .map(|m| format!("{m}:{}", "x".repeat(1_000)))
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_namespace_of_large_disclosures_is_sent_in_chunks_a_client_can_decode() {
        // 400 tools of about 32 KiB each: 12.5 MiB of disclosures.
        let disclosures: Vec<_> = (0..400).map(disclosure).collect();
        let views = vec![pb::BreakerView::default(); 1_200];
        let policy = Some(pb::PolicyVersion {
            document: "p".repeat(256 * 1024),
            version: 3,
            ..Default::default()
        });
        let chunks = chunk_snapshot(views, disclosures, policy, pb::KillSwitch::default(), 512);
        assert!(
            chunks.len() > 3 + 12,
            "breakers by count, disclosures by bytes"
        );
        for chunk in &chunks {
            assert!(
                chunk.encoded_len() < 2 * 1024 * 1024,
                "{} bytes",
                chunk.encoded_len()
            );
        }
        assert!(chunks[0].policy.is_some() && chunks[0].kill_switch.is_some());
        assert!(chunks[1..]
            .iter()
            .all(|c| c.policy.is_none() && c.kill_switch.is_none()));
        let last: Vec<bool> = chunks.iter().map(|c| c.last_chunk).collect();
        assert_eq!(last.iter().filter(|l| **l).count(), 1);
        assert!(chunks.last().is_some_and(|c| c.last_chunk));
        let breakers: usize = chunks.iter().map(|c| c.breakers.len()).sum();
        let sent: usize = chunks.iter().map(|c| c.disclosures.len()).sum();
        assert_eq!((breakers, sent), (1_200, 400));
    }

    #[test]
    fn an_empty_namespace_is_one_chunk() {
        let chunks = chunk_snapshot(Vec::new(), Vec::new(), None, pb::KillSwitch::default(), 512);
        assert_eq!(chunks.len(), 1);
        assert!(chunks[0].last_chunk && chunks[0].kill_switch.is_some());
    }
}
