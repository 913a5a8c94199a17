//! The task that keeps the local view fed by `Breakers.Watch`.
//!
//! It opens the stream on one node, applies every event, and when the
//! stream ends, errs or stays silent past the staleness bound it marks the
//! view disconnected and reopens it on the next node, resuming from the last
//! revision applied. Reconnection waits grow from `watch_retry_initial_ms`
//! to `watch_retry_max_ms` with jitter, so a fleet does not reconnect in
//! lockstep when a node comes back.

use crate::config::ClientConfig;
use crate::endpoints::Endpoints;
use crate::metrics::{bump, Metrics};
use crate::view::LocalView;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::breakers_client::BreakersClient;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;

/// Everything the watch task needs, shared with the client.
pub(crate) struct WatchTask {
    pub(crate) config: ClientConfig,
    pub(crate) endpoints: Arc<Endpoints>,
    pub(crate) view: Arc<LocalView>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) stop: CancellationToken,
}

/// Why one stream ended.
enum Ended {
    Stopped,
    Broken,
}

impl WatchTask {
    /// Runs until `stop` fires.
    pub(crate) async fn run(self) {
        let mut offset = 0;
        let mut wait_ms = self.config.watch_retry_initial_ms;
        loop {
            let (index, address, channel) = self.endpoints.pick(offset);
            match self.open(channel).await {
                Some(stream) => {
                    tracing::debug!(node = address, "watch stream open");
                    self.endpoints.prefer(index);
                    offset = 0;
                    wait_ms = self.config.watch_retry_initial_ms;
                    if let Ended::Stopped = self.follow(stream).await {
                        return;
                    }
                }
                None => offset += 1,
            }
            self.view.set_connected(false);
            bump(&self.metrics.watch_reconnects);
            let jittered = wait_ms / 2 + fastrand::u64(0..=wait_ms / 2);
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(jittered)) => {}
            }
            wait_ms = (wait_ms * 2).min(self.config.watch_retry_max_ms);
        }
    }

    /// Opens a stream from the view's revision, within the RPC deadline.
    async fn open(&self, channel: tonic::transport::Channel) -> Option<Streaming<pb::WatchEvent>> {
        let request = pb::WatchRequest {
            namespace: self.config.namespace.to_string(),
            meta: Some(pb::RequestMeta {
                caller: format!("fusebox-client/{}", self.config.replica_id),
                ..Default::default()
            }),
            from_revision: self.view.revision(),
            replica_id: self.config.replica_id.to_string(),
        };
        let mut client = BreakersClient::new(channel);
        let request = self.endpoints.request(request);
        let opened = tokio::time::timeout(self.config.rpc_timeout(), client.watch(request)).await;
        match opened {
            Ok(Ok(response)) => Some(response.into_inner()),
            Ok(Err(status))
                if matches!(
                    status.code(),
                    tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
                ) =>
            {
                // Retrying will not help until an operator acts: say so loudly.
                tracing::warn!(code = ?status.code(), error = %status.message(), "watch refused: check this replica's token and its grant");
                None
            }
            Ok(Err(status)) => {
                tracing::debug!(code = ?status.code(), error = %status.message(), "watch refused");
                None
            }
            Err(_) => None,
        }
    }

    /// Applies events until the stream ends; every wait is bounded by the
    /// staleness bound (a silent stream is a dead one).
    async fn follow(&self, mut stream: Streaming<pb::WatchEvent>) -> Ended {
        let silence = Duration::from_millis(self.config.view_stale_after_ms);
        loop {
            let next = tokio::select! {
                () = self.stop.cancelled() => return Ended::Stopped,
                next = tokio::time::timeout(silence, stream.message()) => next,
            };
            match next {
                Ok(Ok(Some(event))) => {
                    self.view.apply(event);
                    self.view.set_connected(true);
                    bump(&self.metrics.watch_events);
                }
                Ok(Ok(None)) => return Ended::Broken,
                Ok(Err(status)) => {
                    tracing::debug!(code = ?status.code(), error = %status.message(), "watch stream broke");
                    return Ended::Broken;
                }
                Err(_) => {
                    tracing::info!(
                        silence_ms = self.config.view_stale_after_ms,
                        "watch stream silent, reconnecting"
                    );
                    return Ended::Broken;
                }
            }
        }
    }
}
