//! What a replica tells the client: where the cluster is, who it is, and
//! every bound and period, each with its unit in its name.
//!
//! This is the one place for the crate's limits and timings: what a
//! replica may tune is a field of [`ClientConfig`] (its default in
//! [`ClientConfig::new`]); what it may not is a constant below. Bounds of
//! the replicated state itself (key lengths, lease lengths, batch sizes)
//! are the core's ([`fusebox_core::limits`]).

use crate::error::ClientError;
use fusebox_core::limits::BATCH_OUTCOMES_MAX;
use fusebox_core::{Namespace, ReplicaId};
use fusebox_proto::tls::ClientTlsFiles;
use std::time::Duration;

/// How late a replica judges the end of an OPEN period it learned before
/// it was cut off, in ms: its clock may run ahead of the leader's that
/// stamped the end, and releasing a tool the fleet closed off early is the
/// worse mistake.
pub(crate) const CACHED_OPEN_SKEW_MS: u64 = 2_000;

/// Most local fallback breakers kept; past it new keys are not guarded
/// locally, so a replica calling endless distinct tools holds bounded
/// memory.
pub(crate) const LOCAL_BREAKERS_MAX: usize = 4_096;
/// Most resolved tool policies cached; past it policies are resolved per
/// call (correct, just slower).
pub(crate) const TOOL_POLICIES_CACHED_MAX: usize = 4_096;
/// Most disclosures kept (cluster-fed and imported, each), and most hinted
/// effect classes and observed latencies, so the view stays bounded
/// whatever the cluster sends.
pub(crate) const DISCLOSURES_MAX: usize = 4_096;
/// Outcomes reserved up front for the report queue; a larger queue grows
/// as it fills (and keeps its room), so a large `report_buffer_outcomes_max`
/// costs nothing while reports are few.
pub(crate) const REPORT_BATCH_PREALLOCATE_OUTCOMES: usize = 64;
/// How often [`Client::wait_fresh`](crate::Client::wait_fresh) looks at the
/// view again, in milliseconds.
pub(crate) const VIEW_POLL_PERIOD_MS: u64 = 10;
/// Time [`Client::close`](crate::Client::close) gives each background task
/// beyond the RPC deadline (the last report flush), in milliseconds.
pub(crate) const CLOSE_GRACE_MS: u64 = 1_000;

/// Settings of one [`Client`](crate::Client).
///
/// The defaults suit a production fleet; tests shorten the periods. Every
/// limit a replica may tune is here, and the fixed ones are the constants
/// above, so that no queue, wait or retry in the crate is unbounded.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// gRPC addresses (`host:port`) of cluster nodes; any node answers any
    /// request, and the client moves to the next one when a node is
    /// unavailable.
    pub endpoints: Vec<String>,
    /// The fleet or tenant whose breakers, ledger and policy this replica
    /// uses.
    pub namespace: Namespace,
    /// This replica's identity: the evidence `min_reporters` counts and the
    /// holder named on probe permits.
    pub replica_id: ReplicaId,
    /// How long opening a TCP connection to one node may take.
    pub connect_timeout_ms: u64,
    /// Deadline of one call to the cluster (report, probe, ledger), capped by
    /// the journey's budget when made on behalf of a tool call.
    pub rpc_timeout_ms: u64,
    /// A view that has heard nothing from the cluster (not even a
    /// heartbeat) for this long is stale. Must exceed the server's watch
    /// heartbeat period (5 s).
    pub view_stale_after_ms: u64,
    /// A view whose watch stream has been down this long is stale even if
    /// its last event is recent: the cluster is unreachable.
    pub disconnect_grace_ms: u64,
    /// Wait between two attempts to reopen the watch stream, doubled per
    /// failure up to [`ClientConfig::watch_retry_max_ms`].
    pub watch_retry_initial_ms: u64,
    /// Cap on the wait between watch reconnection attempts.
    pub watch_retry_max_ms: u64,
    /// Outcomes the report buffer holds; when full, new outcomes are dropped
    /// and counted, never waited for.
    pub report_buffer_outcomes_max: usize,
    /// Outcomes sent in one `ReportOutcomes` call; the buffer is flushed as
    /// soon as it holds this many. At most the core's `BATCH_OUTCOMES_MAX`,
    /// which the server enforces.
    pub report_batch_outcomes_max: usize,
    /// The buffer is flushed at least this often while it holds anything.
    pub report_flush_interval_ms: u64,
    /// Margin added to a write's deadline for its ledger lease, and to a
    /// probe call's for its permit's lease, so the lease outlives the call
    /// it covers.
    pub write_lease_margin_ms: u64,
    /// Replicas in the fleet, to scale the local fallback breaker's
    /// window thresholds (`minimum_calls`) to what one replica sees, until
    /// the cluster reports the fleet's size (distinct replicas that
    /// reported in the last hour, in every watch heartbeat), which wins.
    pub fleet_replicas: u32,
    /// TLS to the cluster: the CA that signed the nodes' certificates and,
    /// for mutual TLS, this replica's certificate and key (none: plaintext,
    /// for a cluster on loopback). Reloaded when the files change.
    pub tls: Option<ClientTlsFiles>,
    /// The bearer token every call carries (`fusebox auth issue` prints
    /// one; an agent role over this namespace is what a replica needs).
    /// None: calls are anonymous, for a cluster that does not require auth.
    pub token: Option<String>,
}

impl ClientConfig {
    /// Production defaults for `endpoints`, `namespace` and `replica_id`;
    /// names are validated here so every later request is well formed.
    pub fn new(
        endpoints: Vec<String>,
        namespace: &str,
        replica_id: &str,
    ) -> Result<Self, ClientError> {
        let namespace = Namespace::new(namespace).map_err(ClientError::invalid("namespace"))?;
        let replica_id = ReplicaId::new(replica_id).map_err(ClientError::invalid("replica_id"))?;
        Ok(ClientConfig {
            endpoints,
            namespace,
            replica_id,
            connect_timeout_ms: 1_000,
            rpc_timeout_ms: 2_000,
            view_stale_after_ms: 15_000,
            disconnect_grace_ms: 2_000,
            watch_retry_initial_ms: 100,
            watch_retry_max_ms: 2_000,
            report_buffer_outcomes_max: 8_192,
            report_batch_outcomes_max: 512,
            report_flush_interval_ms: 50,
            write_lease_margin_ms: 5_000,
            fleet_replicas: 1,
            tls: None,
            token: None,
        })
    }

    /// Checks the settings hang together; every problem is named.
    pub fn validate(&self) -> Result<(), ClientError> {
        let bad = |field: &'static str, message: &str| ClientError::InvalidArgument {
            intent_id: None,
            field: field.to_owned(),
            message: message.to_owned(),
        };
        if self.endpoints.is_empty() {
            return Err(bad("endpoints", "at least one endpoint is needed"));
        }
        if self.report_buffer_outcomes_max == 0 || self.report_batch_outcomes_max == 0 {
            return Err(bad(
                "report_buffer_outcomes_max",
                "buffers must hold at least 1",
            ));
        }
        if self.report_batch_outcomes_max > BATCH_OUTCOMES_MAX {
            return Err(bad(
                "report_batch_outcomes_max",
                &format!("must not exceed the server's batch_outcomes_max ({BATCH_OUTCOMES_MAX})"),
            ));
        }
        if self.rpc_timeout_ms == 0 || self.report_flush_interval_ms == 0 {
            return Err(bad("rpc_timeout_ms", "periods must be at least 1 ms"));
        }
        if self.watch_retry_initial_ms == 0 || self.watch_retry_max_ms < self.watch_retry_initial_ms
        {
            return Err(bad(
                "watch_retry_max_ms",
                "need 0 < watch_retry_initial_ms <= watch_retry_max_ms",
            ));
        }
        Ok(())
    }

    pub(crate) fn rpc_timeout(&self) -> Duration {
        Duration::from_millis(self.rpc_timeout_ms)
    }
}
