//! Scripted tools: what each remote tool does when a replica calls it, as a
//! function of the scenario, the simulated time and the replica's seeded
//! generator. Healthy, slow, flaky, "200 with `isError`" and hanging tools
//! are all here; a probe call is counted fleet-wide while it runs.

use crate::world::World;
use fusebox_client::{CallContext, OutcomeClass, ToolFailure, ToolRef};
use std::rc::Rc;
use std::time::Duration;

/// The namespace every replica works in.
pub const NS: &str = "sim";

/// How a tool behaves for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers after `ms`.
    Healthy {
        /// Latency.
        ms: u64,
    },
    /// Fails with `class` after `ms` (a 503 is `ServerError`).
    Fails {
        /// Latency.
        ms: u64,
        /// How it fails.
        class: OutcomeClass,
    },
    /// Answers HTTP 200 with MCP `isError: true` after `ms`.
    IsError {
        /// Latency.
        ms: u64,
    },
    /// Never answers; only the caller's deadline ends the call.
    Hangs,
}

impl Behaviour {
    /// A 503 after `ms` while `failing`, else an answer after `ms`.
    pub fn server_error_if(failing: bool, ms: u64) -> Behaviour {
        if failing {
            Behaviour::Fails {
                ms,
                class: OutcomeClass::ServerError,
            }
        } else {
            Behaviour::Healthy { ms }
        }
    }
}

/// The policy every run applies before its workload: short deadlines and
/// open periods so breakers trip and recover within a run.
pub const POLICY: &str = r#"
[defaults]
timeout_ms = 1000
effect = "read_only"

[defaults.breaker]
window_ms = 10000
minimum_calls = 6
failure_ratio = 0.5
min_reporters = 1
open_ms = 1500
concurrent_probes = 1
probe_lease_ms = 3000

[servers.search.breaker]
consecutive_failures = 3

# The runbook's deployment server trips on a sustained failure rate over
# enough calls, not on a transient 503 that every replica meets once at the
# same moment (their failures and retried successes reach the cluster in
# clumps, so a small window could see 60% failures out of a true 50%).
[servers.deploy.breaker]
minimum_calls = 40
failure_ratio = 0.75

[defaults.retry]
max_attempts = 2
backoff_initial_ms = 20
backoff_max_ms = 100

# Calls still unanswered just short of their deadline count as timeouts
# then (`stalled_after_ms`), so the runs cover stalled reads and writes.
[servers.search.tools.lookup]
effect = "read_only"
stalled_after_ms = 900

[servers.billing.tools.charge]
effect = "non_idempotent_write"

[servers.billing.tools.charge.retry]
max_attempts = 1

[servers.crm.tools.upsert]
effect = "idempotent_write"
stalled_after_ms = 900

[servers.deploy.tools.restart_deployment_job]
effect = "non_idempotent_write"

[servers.deploy.tools.restart_deployment_job.retry]
max_attempts = 1
"#;

/// Probe permits a tool may hold fleet-wide, as [`POLICY`] says.
pub const CONCURRENT_PROBES: u32 = 1;

/// Runs one call of `tool` behaving as `behaviour`, counting it as a probe
/// while it runs if the SDK says it is one.
pub async fn run(
    world: &Rc<World>,
    tool: &ToolRef,
    ctx: &CallContext,
    behaviour: Behaviour,
) -> Result<(), ToolFailure> {
    let _probe = ctx.probe.then(|| ProbeCall::enter(world, tool));
    run_unwatched(ctx, behaviour).await
}

/// [`run`] without counting probes: for runs whose replicas do not share
/// their breakers, so each may hold a probe permit of its own.
pub async fn run_unwatched(ctx: &CallContext, behaviour: Behaviour) -> Result<(), ToolFailure> {
    let work = async {
        match behaviour {
            Behaviour::Healthy { ms } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(())
            }
            Behaviour::Fails { ms, class } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Err(ToolFailure::new(class, "scripted failure"))
            }
            Behaviour::IsError { ms } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Err(ToolFailure::new(OutcomeClass::ToolError, "isError: true"))
            }
            Behaviour::Hangs => {
                std::future::pending::<()>().await;
                Ok(())
            }
        }
    };
    tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => Err(ToolFailure::new(OutcomeClass::Cancelled, "cancelled")),
        done = work => done,
    }
}

/// A probe call in flight; leaving it (however the call ends) counts it out.
struct ProbeCall {
    world: Rc<World>,
    name: String,
}

impl ProbeCall {
    fn enter(world: &Rc<World>, tool: &ToolRef) -> ProbeCall {
        let name = format!("{}/{}", tool.server(), tool.tool());
        let now = {
            let mut probes = world.probes.borrow_mut();
            let gauge = probes.entry(name.clone()).or_default();
            gauge.now += 1;
            gauge.max = gauge.max.max(gauge.now);
            gauge.now
        };
        world.count("probe calls");
        if now > CONCURRENT_PROBES {
            world.violate(
                crate::world::sim_ms(),
                "probe permits",
                format!("{now} probe calls of {name} at once, at most {CONCURRENT_PROBES}"),
            );
        }
        ProbeCall {
            world: world.clone(),
            name,
        }
    }
}

impl Drop for ProbeCall {
    fn drop(&mut self) {
        if let Some(gauge) = self.world.probes.borrow_mut().get_mut(&self.name) {
            gauge.now = gauge.now.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_core::policy::{PolicyDocument, PolicyFormat};

    #[test]
    fn the_policy_is_valid_and_allows_one_probe() {
        let document = PolicyDocument::parse(POLICY, PolicyFormat::Toml).expect("parses");
        assert_eq!(document.validate(), Vec::new());
        let lookup = document.tool_policy(
            &fusebox_core::ServerName::new("search").expect("name"),
            &fusebox_core::ToolName::new("lookup").expect("name"),
        );
        assert_eq!(lookup.breaker.concurrent_probes, CONCURRENT_PROBES);
    }
}
