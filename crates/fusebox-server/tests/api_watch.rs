//! The watch stream over gRPC: snapshot then changes, resuming from a
//! revision, resync when the revision is unknown, namespace filtering, and
//! a stream that falls behind still delivering every change once, in order.

#![allow(clippy::unwrap_used)]

mod api_support;

use api_support::{local, meta, within};
use fusebox_core::breaker::BreakerKey as CoreKey;
use fusebox_core::machine::{Command, OperatorAction};
use fusebox_core::Timestamp;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::watch_event::Event;
use fusebox_proto::v1::*;
use std::time::{SystemTime, UNIX_EPOCH};
use tonic::transport::Channel;
use tonic::Streaming;

const NS: &str = "fleet-w";

fn key(tool: &str) -> BreakerKey {
    BreakerKey {
        namespace: NS.into(),
        server: "crm".into(),
        tool: Some(tool.into()),
        backend: None,
    }
}

async fn watch(client: &mut BreakersClient<Channel>, from: Option<u64>) -> Streaming<WatchEvent> {
    let request = WatchRequest {
        namespace: NS.into(),
        meta: meta(),
        from_revision: from,
        replica_id: "replica-w".into(),
    };
    within(client.watch(request)).await.unwrap().into_inner()
}

/// The next event that is not a heartbeat.
async fn next(stream: &mut Streaming<WatchEvent>) -> WatchEvent {
    loop {
        let event = within(stream.message())
            .await
            .unwrap()
            .expect("stream still open");
        if !matches!(event.event, Some(Event::Heartbeat(_))) {
            return event;
        }
    }
}

async fn force_open(client: &mut BreakersClient<Channel>, ns: &str, tool: &str) -> u64 {
    let request = ForceOpenRequest {
        namespace: ns.into(),
        meta: meta(),
        key: Some(BreakerKey {
            namespace: ns.into(),
            ..key(tool)
        }),
        reason: "drill".into(),
        actor: "oncall".into(),
        ..Default::default()
    };
    within(client.force_open(request))
        .await
        .unwrap()
        .into_inner()
        .revision
}

#[tokio::test]
async fn a_watch_sends_the_snapshot_then_changes_and_resumes_from_a_revision() {
    let (_, node) = local().await;
    let mut breakers = node.breakers;
    let mut stream = watch(&mut breakers, None).await;
    let first = next(&mut stream).await;
    let Some(Event::Snapshot(snapshot)) = first.event else {
        panic!("a new stream starts with the snapshot: {first:?}");
    };
    assert!(snapshot.last_chunk && snapshot.breakers.is_empty());
    assert!(!snapshot.kill_switch.unwrap().writes_blocked);

    force_open(&mut breakers, "elsewhere", "noise").await;
    let r1 = force_open(&mut breakers, NS, "search").await;
    let change = next(&mut stream).await;
    assert_eq!(
        change.revision, r1,
        "events of other namespaces are filtered out"
    );
    let Some(Event::Breaker(view)) = change.event else {
        panic!("expected the breaker change: {change:?}");
    };
    assert_eq!(view.state, BreakerState::ForcedOpen as i32);
    drop(stream);

    let r2 = force_open(&mut breakers, NS, "update").await;
    let mut policy = node.policy;
    within(policy.set_kill_switch(SetKillSwitchRequest {
        namespace: NS.into(),
        meta: meta(),
        writes_blocked: true,
        reason: "drill".into(),
        actor: "oncall".into(),
    }))
    .await
    .unwrap();

    let mut resumed = watch(&mut breakers, Some(r1)).await;
    let missed = next(&mut resumed).await;
    assert_eq!(missed.revision, r2, "only what was missed, no snapshot");
    assert!(matches!(missed.event, Some(Event::Breaker(_))));
    let switch = next(&mut resumed).await;
    let Some(Event::KillSwitch(k)) = switch.event else {
        panic!("expected the kill switch: {switch:?}");
    };
    assert!(k.writes_blocked && k.actor == "oncall");
}

#[tokio::test]
async fn an_unknown_revision_gets_resync_required_and_a_fresh_snapshot() {
    let (_, node) = local().await;
    let mut breakers = node.breakers;
    let r1 = force_open(&mut breakers, NS, "search").await;
    let mut stream = watch(&mut breakers, Some(r1 + 1_000)).await;
    let resync = next(&mut stream).await;
    assert!(
        matches!(resync.event, Some(Event::ResyncRequired(_))),
        "{resync:?}"
    );
    let Some(Event::Snapshot(snapshot)) = next(&mut stream).await.event else {
        panic!("a snapshot follows resync_required");
    };
    assert_eq!(snapshot.breakers.len(), 1);
    assert_eq!(snapshot.breakers[0].state, BreakerState::ForcedOpen as i32);
}

#[tokio::test]
async fn a_stream_that_falls_behind_still_gets_every_change_once_in_order() {
    let (backend, node) = local().await;
    let mut breakers = node.breakers;
    let mut stream = watch(&mut breakers, None).await;
    assert!(matches!(
        next(&mut stream).await.event,
        Some(Event::Snapshot(_))
    ));

    // More changes than the broadcast and stream buffers hold together,
    // applied while the client reads nothing.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let core_key = CoreKey::parse(&format!("{NS}/crm/bulk")).unwrap();
    let changes = 6_000u64;
    for i in 0..changes {
        let action = if i % 2 == 0 {
            OperatorAction::ForceOpen { for_ms: None }
        } else {
            OperatorAction::Reset
        };
        let command = Command::Operate {
            key: core_key.clone(),
            action,
            actor: "load".into(),
            reason: "flap".into(),
        };
        backend
            .apply_at(&command, Timestamp::from_millis(now))
            .unwrap();
    }

    let mut expected = 1;
    while expected <= changes {
        let event = next(&mut stream).await;
        match event.event {
            Some(Event::Breaker(_)) => {
                assert_eq!(event.revision, expected, "no gap, no repeat");
                expected += 1;
            }
            other => panic!("unexpected event at revision {}: {other:?}", event.revision),
        }
    }
}
