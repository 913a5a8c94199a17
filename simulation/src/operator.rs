//! The operator as a simulated client: applies the run's policy before the
//! workload starts, then carries out the membership changes the fault
//! schedule asks for (through the Cluster API, as `fusebox cluster` does).

use crate::nodes::{self, channel};
use crate::scenario::Scenario;
use crate::tools::{NS, POLICY};
use crate::world::{MembershipTask, Phase, World};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::policy_client::PolicyClient;
use std::rc::Rc;
use std::time::Duration;

/// Deadline of one operator call.
const RPC_TIMEOUT: Duration = Duration::from_secs(3);
/// Tries of one membership change before it is given up (and traced).
const TRIES_MAX: u32 = 20;

/// Registers the operator host `op`; it finishes once the replicas have
/// finished their workload and no membership change is waiting.
pub fn register(sim: &mut turmoil::Sim<'_>, world: &Rc<World>) {
    let world = world.clone();
    sim.client("op", async move {
        let nodes = world.nodes.len() as u64;
        let mut turn = 0u64;
        let mut next = || {
            turn += 1;
            nodes::addr(turn % nodes + 1)
        };
        let (document, namespaces) = match world.scenario {
            Scenario::IncidentCost => (
                crate::incident::policy(world.incident),
                world.incident.namespaces(world.replicas),
            ),
            _ => (POLICY.to_owned(), vec![NS.to_owned()]),
        };
        for namespace in namespaces {
            let request = pb::ApplyPolicyRequest {
                namespace,
                document: document.clone(),
                format: pb::PolicyFormat::Toml as i32,
                actor: "sim-operator".into(),
                reason: "simulation policy".into(),
                ..Default::default()
            };
            loop {
                let mut policy = PolicyClient::new(channel(&next(), RPC_TIMEOUT));
                match policy.apply(request.clone()).await {
                    Ok(_) => break,
                    Err(s) => world.log(
                        "op",
                        format!("policy not applied yet: {:?} {}", s.code(), s.message()),
                    ),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        world.log("op", "policy applied");
        world.phase.set(Phase::Workload);
        while world.phase.get() != Phase::Healed || !world.membership.borrow().is_empty() {
            let task = world.membership.borrow_mut().pop_front();
            match task {
                Some(task) => change(&world, task, &mut next).await,
                None => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        Ok(())
    });
}

async fn change(world: &World, task: MembershipTask, next: &mut impl FnMut() -> String) {
    for _ in 0..TRIES_MAX {
        let mut cluster = ClusterClient::new(channel(&next(), RPC_TIMEOUT));
        let done = match task {
            MembershipTask::Remove(id) => cluster
                .remove_member(pb::RemoveMemberRequest {
                    id,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
            MembershipTask::Add(id) => cluster
                .add_member(pb::AddMemberRequest {
                    id,
                    address: nodes::addr(id),
                    learner_only: false,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
        };
        match done {
            Ok(()) => {
                world.log("op", format!("membership {task:?} done"));
                world.count("membership changes");
                return;
            }
            Err(s) => world.log("op", format!("membership {task:?}: {:?}", s.code())),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    world.log("op", format!("membership {task:?} given up"));
}
