//! The `Breakers.Watch` stream: snapshot, backlog, then live events.
//!
//! One task per stream ("pump") turns a [`WatchStart`] into wire events and
//! pushes them into a bounded channel ([`WATCH_BUFFER_EVENTS`]) that tonic
//! drains to the client. Order on the stream: `resync_required` when the
//! client's revision was too old, the snapshot (in chunks of
//! [`WATCH_SNAPSHOT_CHUNK_BREAKERS`]), the missed events, then live events
//! of the namespace. Revisions never go back: an event at or below the last
//! one sent is skipped.
//!
//! A slow client fills the channel, the pump waits, and its broadcast
//! receiver lags; the pump then resubscribes from the last revision it sent
//! and sends either the missed events or `resync_required` and a fresh
//! snapshot. A quiet namespace gets a heartbeat every [`WATCH_HEARTBEAT_MS`].
//! The pump ends when the client goes away (the channel closes), the node
//! stops publishing, or the caller may no longer watch ([`Recheck::revoked`]).
//! An idle stream wakes for its heartbeat, for changes to the auth table,
//! and, if its token expires, every few seconds (`WATCH_RECHECK_MS`).

use super::convert::{watch::events_to_proto, watch::snapshot_to_proto};
use super::gateway::Gateway;
use super::status;
use crate::auth::{Recheck, StreamPermit};
use crate::backend::Backend;
use crate::limits::{WATCH_BUFFER_EVENTS, WATCH_HEARTBEAT_MS, WATCH_SNAPSHOT_CHUNK_BREAKERS};
use crate::watch::{WatchBatch, WatchSnapshot, WatchStart};
use fusebox_core::machine::WatchEvent;
use fusebox_core::Namespace;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::watch_event::Event;
use std::future::pending;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::mpsc;
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status};

/// What the client receives.
pub type WatchEvents = ReceiverStream<Result<pb::WatchEvent, Status>>;

/// The stream is over: the client left, or an error was sent to it.
struct Stopped;

/// Why the pump woke up. It lives on the stack for one turn of the loop,
/// so the event is not boxed (an allocation per event for nothing).
#[allow(clippy::large_enum_variant)]
enum Wake {
    ClientGone,
    Event(Result<WatchBatch, RecvError>),
    Quiet,
    Revoked(Status),
}

/// The refusal of a node outside the membership: watch another node.
fn out_of_touch(why: &str) -> Status {
    Status::unavailable(format!(
        "{why}; its state may be behind the cluster's, watch another node"
    ))
}

/// Subscribes and starts the pump; fails before the stream exists when the
/// node cannot subscribe.
pub async fn start<B: Backend>(
    gateway: Gateway<B>,
    namespace: Namespace,
    from_revision: Option<u64>,
    (slot, recheck): (Option<StreamPermit>, Option<Recheck>),
) -> Result<WatchEvents, Status> {
    // A node that cannot vouch for its state refuses to start a stream, so
    // the replica tries another node instead of this one's frozen view.
    if let Some(why) = gateway.backend().out_of_touch() {
        return Err(out_of_touch(&why));
    }
    let start = gateway
        .backend()
        .watch(namespace.clone(), from_revision)
        .await
        .map_err(|e| status::from_backend(&e))?;
    let (tx, rx) = mpsc::channel(WATCH_BUFFER_EVENTS);
    let pump = Pump {
        gateway,
        namespace,
        tx,
        last_sent: from_revision.unwrap_or(0),
        _slot: slot,
    };
    tokio::spawn(pump.run(start, recheck));
    Ok(ReceiverStream::new(rx))
}

struct Pump<B> {
    gateway: Gateway<B>,
    namespace: Namespace,
    tx: mpsc::Sender<Result<pb::WatchEvent, Status>>,
    last_sent: u64,
    /// The caller's stream slot, freed when the pump ends.
    _slot: Option<StreamPermit>,
}

impl<B: Backend> Pump<B> {
    /// Pumps until the stream ends; `recheck` proves the caller again
    /// while it lasts (a revoked token or a narrowed grant ends it).
    async fn run(mut self, start: WatchStart, recheck: Option<Recheck>) {
        tracing::debug!(namespace = %self.namespace, from = self.last_sent, "watch stream started");
        let Ok(mut events) = self.begin(start).await else {
            return;
        };
        let period = Duration::from_millis(WATCH_HEARTBEAT_MS);
        let mut heartbeat = interval_at(Instant::now() + period, period);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let namespace = self.namespace.clone();
        let mut revoked = pin!(async move {
            match recheck {
                Some(recheck) => recheck.revoked(namespace).await,
                None => pending().await,
            }
        });
        loop {
            let wake = tokio::select! {
                () = self.tx.closed() => Wake::ClientGone,
                received = events.recv() => Wake::Event(received),
                _ = heartbeat.tick() => Wake::Quiet,
                status = &mut revoked => Wake::Revoked(status),
            };
            let step = match wake {
                Wake::ClientGone => Err(Stopped),
                Wake::Event(received) => self.on_event(received, &mut events).await,
                Wake::Quiet => self.heartbeat().await,
                Wake::Revoked(status) => self.fail(status).await,
            };
            match step {
                Ok(true) => heartbeat.reset(),
                Ok(false) => {}
                Err(Stopped) => break,
            }
        }
        tracing::debug!(namespace = %self.namespace, last = self.last_sent, "watch stream ended");
    }

    /// Handles one broadcast result; `Ok(true)` when something was sent.
    async fn on_event(
        &mut self,
        received: Result<WatchBatch, RecvError>,
        events: &mut broadcast::Receiver<WatchBatch>,
    ) -> Result<bool, Stopped> {
        match received {
            Ok(batch) => {
                let fresh: Vec<Arc<WatchEvent>> = batch
                    .iter()
                    .filter(|e| e.revision() > self.last_sent)
                    .cloned()
                    .collect();
                if fresh.is_empty() {
                    return Ok(false);
                }
                self.send_events(fresh).await?;
                Ok(true)
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::info!(namespace = %self.namespace, missed, last = self.last_sent, "watch stream lagged, resubscribing");
                let start = self.resubscribe().await?;
                *events = self.begin(start).await?;
                Ok(true)
            }
            Err(RecvError::Closed) => {
                let status = Status::new(
                    Code::Unavailable,
                    "node stopped publishing changes; watch again from the last revision",
                );
                self.fail(status).await
            }
        }
    }

    async fn resubscribe(&mut self) -> Result<WatchStart, Stopped> {
        let watched = self
            .gateway
            .backend()
            .watch(self.namespace.clone(), Some(self.last_sent))
            .await;
        match watched {
            Ok(start) => Ok(start),
            Err(e) => self.fail(status::from_backend(&e)).await,
        }
    }

    /// Sends what a subscription starts with; returns its live receiver.
    async fn begin(
        &mut self,
        start: WatchStart,
    ) -> Result<broadcast::Receiver<WatchBatch>, Stopped> {
        let WatchStart {
            snapshot,
            resync_required,
            backlog,
            events,
            ..
        } = start;
        if let Some(snapshot) = snapshot {
            self.send_snapshot(snapshot, resync_required).await?;
        }
        let backlog: Vec<Arc<WatchEvent>> = backlog
            .into_iter()
            .filter(|e| e.revision() > self.last_sent)
            .collect();
        if !backlog.is_empty() {
            self.send_events(backlog).await?;
        }
        Ok(events)
    }

    async fn send_snapshot(
        &mut self,
        snapshot: WatchSnapshot,
        resync_required: bool,
    ) -> Result<(), Stopped> {
        let revision = snapshot.revision;
        if resync_required {
            let resync = pb::WatchEvent {
                revision,
                event: Some(Event::ResyncRequired(pb::ResyncRequired {
                    oldest_revision: revision,
                })),
            };
            self.send(resync).await?;
        }
        let ns = self.namespace.clone();
        let chunks = self
            .gateway
            .read_local(move |state| {
                snapshot_to_proto(state, &ns, &snapshot, WATCH_SNAPSHOT_CHUNK_BREAKERS)
            })
            .await;
        let chunks = match chunks {
            Ok(chunks) => chunks,
            Err(status) => return self.fail(status).await,
        };
        for chunk in chunks {
            self.send(chunk).await?;
        }
        self.last_sent = revision;
        Ok(())
    }

    async fn send_events(&mut self, events: Vec<Arc<WatchEvent>>) -> Result<(), Stopped> {
        let ns = self.namespace.clone();
        let converted = self
            .gateway
            .read_local(move |state| events_to_proto(state, &ns, &events))
            .await;
        let converted = match converted {
            Ok(converted) => converted,
            Err(status) => return self.fail(status).await,
        };
        for event in converted {
            let revision = event.revision;
            self.send(event).await?;
            self.last_sent = self.last_sent.max(revision);
        }
        Ok(())
    }

    async fn heartbeat(&mut self) -> Result<bool, Stopped> {
        // A node removed from the cluster, or cut off from its leader, no
        // longer receives the log; its heartbeats would keep a frozen view
        // looking fresh.
        if let Some(why) = self.gateway.backend().out_of_touch() {
            return self.fail(out_of_touch(&why)).await;
        }
        let ns = self.namespace.clone();
        let fleet_replicas = match self
            .gateway
            .read_local(move |state| state.fleet_replicas(&ns))
            .await
        {
            Ok(n) => n,
            Err(status) => return self.fail(status).await,
        };
        let beat = pb::WatchEvent {
            revision: self.last_sent,
            event: Some(Event::Heartbeat(pb::WatchHeartbeat {
                at_ms: self.gateway.backend().now_ms(),
                fleet_replicas,
            })),
        };
        self.send(beat).await?;
        Ok(false)
    }

    async fn send(&self, event: pb::WatchEvent) -> Result<(), Stopped> {
        self.tx.send(Ok(event)).await.map_err(|_| Stopped)
    }

    /// Ends the stream with `status` (the client learns why).
    async fn fail<T>(&self, status: Status) -> Result<T, Stopped> {
        tracing::warn!(namespace = %self.namespace, error = %status.message(), "watch stream failed");
        let _ = self.tx.send(Err(status)).await;
        Err(Stopped)
    }
}
