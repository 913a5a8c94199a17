//! Fleet-wide probe permits for HALF_OPEN breakers.
//!
//! A permit is asked for synchronously (`AcquireProbe` goes through the log,
//! so the fleet never holds more than `concurrent_probes`) and returned with
//! the probe's outcome and the generation it was granted under
//! (`ReleaseProbe`); a stale generation makes the cluster ignore it. A
//! holder that dies never returns its permit; its lease lapses instead.

use crate::config::ClientConfig;
use crate::convert::{class_to_proto, key_to_proto, state_from_proto};
use crate::endpoints::Endpoints;
use crate::error::ClientError;
use fusebox_core::breaker::{BreakerKey, BreakerState};
use fusebox_core::limits::LEASE_MS_MAX;
use fusebox_core::OutcomeClass;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::acquire_probe_response::Result as ProbeResult;
use fusebox_proto::v1::breakers_client::BreakersClient;
use std::time::Duration;

/// A permit held by this replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClusterPermit {
    pub(crate) key: pb::BreakerKey,
    pub(crate) permit_id: String,
    pub(crate) generation: u64,
}

/// The cluster's answer to a permit request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ProbeAnswer {
    /// Only this replica may call now.
    Granted(ClusterPermit),
    /// The breaker admits calls after all (it closed meanwhile).
    NotNeeded { generation: u64 },
    /// No permit: every one is out, or the breaker is still open.
    Denied {
        state: BreakerState,
        retry_after_ms: u64,
        whole_server: bool,
    },
}

/// A lease in the range the cluster accepts (1 ms to `LEASE_MS_MAX`).
fn lease_ms(lease: Duration) -> u64 {
    u64::try_from(lease.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, LEASE_MS_MAX)
}

/// Asks for a permit on `key` within `deadline`, held for `lease` (the
/// probe call cannot outlive it, so the permit cannot lapse mid-call).
pub(crate) async fn acquire(
    endpoints: &Endpoints,
    config: &ClientConfig,
    key: &BreakerKey,
    deadline: Duration,
    lease: Duration,
) -> Result<ProbeAnswer, ClientError> {
    let wire_key = key_to_proto(key);
    let request = pb::AcquireProbeRequest {
        namespace: config.namespace.to_string(),
        meta: None,
        key: Some(wire_key.clone()),
        replica_id: config.replica_id.to_string(),
        lease_ms: Some(lease_ms(lease)),
    };
    let response = endpoints
        .call(
            "acquire_probe",
            deadline,
            request,
            |channel, req| async move { BreakersClient::new(channel).acquire_probe(req).await },
        )
        .await?;
    Ok(match response.result {
        Some(ProbeResult::Granted(g)) => ProbeAnswer::Granted(ClusterPermit {
            key: wire_key,
            permit_id: g.permit_id,
            generation: g.generation,
        }),
        Some(ProbeResult::NotNeeded(n)) => ProbeAnswer::NotNeeded {
            generation: n.generation,
        },
        Some(ProbeResult::Denied(d)) => ProbeAnswer::Denied {
            state: state_from_proto(d.state).unwrap_or(BreakerState::HalfOpen),
            retry_after_ms: d.retry_after_ms,
            whole_server: d.reason == pb::ProbeDenialReason::ServerOpen as i32,
        },
        None => ProbeAnswer::Denied {
            state: BreakerState::HalfOpen,
            retry_after_ms: 0,
            whole_server: false,
        },
    })
}

/// Returns a permit with the probe's outcome; answers the breaker as it is
/// after the release, for the local view.
pub(crate) async fn release(
    endpoints: &Endpoints,
    config: &ClientConfig,
    permit: ClusterPermit,
    class: OutcomeClass,
    duration_ms: u64,
) -> Result<Option<pb::BreakerView>, ClientError> {
    let request = pb::ReleaseProbeRequest {
        namespace: config.namespace.to_string(),
        meta: None,
        key: Some(permit.key),
        permit_id: permit.permit_id,
        generation: permit.generation,
        outcome: class_to_proto(class) as i32,
        duration_ms,
    };
    let response = endpoints
        .call(
            "release_probe",
            config.rpc_timeout(),
            request,
            |channel, req| async move { BreakersClient::new(channel).release_probe(req).await },
        )
        .await?;
    Ok(response.breaker)
}
