//! Invariant checkers. [`Watcher`] runs between simulation steps on what
//! the nodes hold; [`ledger`] judges the replicas' ledger histories at the
//! end of a run.

pub mod ledger;
pub mod ledger_model;
pub mod linearizability;
pub mod wire;

use crate::tools::{CONCURRENT_PROBES, NS};
use crate::world::World;
use fusebox_core::breaker::BreakerKey;
use fusebox_core::Namespace;
use fusebox_raft_store::Vote;
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// Raft and state checks over the nodes, run between steps.
#[derive(Debug, Default)]
pub struct Watcher {
    /// The leader seen under each vote (term, candidate).
    leaders: BTreeMap<(u64, u64), u64>,
    /// Each node's last vote.
    votes: BTreeMap<u64, Vote>,
    /// The state digest seen at each applied index.
    digests: BTreeMap<u64, (u64, String)>,
    /// The highest generation each node showed for each breaker.
    generations: BTreeMap<(u64, u64, BreakerKey), u64>,
    /// Digest comparisons made.
    pub digest_checks: u64,
}

impl Watcher {
    /// Raft's election invariants as openraft keeps them. openraft's
    /// leader ids are "advanced": a vote is (term, candidate), ordered
    /// lexicographically, so two nodes may each lead in one term under
    /// different votes (n2 then n3 in term 1), which the classic "one
    /// leader per term" would wrongly call a violation. What must hold is
    /// that one vote has at most one leader (two nodes leading under the
    /// same committed vote), and that a node's vote never goes back, not
    /// even across a crash (votes are synced before they are answered).
    pub fn check_leaders(&mut self, world: &World, now_ms: u64) {
        for (id, backend) in world.running() {
            let m = backend.raft.metrics().borrow_watched().clone();
            if let Some(last) = self.votes.get(&id) {
                if m.vote.partial_cmp(last) == Some(Ordering::Less) {
                    world.violate(
                        now_ms,
                        "votes only grow",
                        format!("n{id}'s vote went from {last} to {}", m.vote),
                    );
                }
            }
            self.votes.insert(id, m.vote);
            if m.state != ServerState::Leader {
                continue;
            }
            let leader_of = (m.vote.leader_id.term, m.vote.leader_id.node_id);
            match self.leaders.get(&leader_of) {
                Some(&other) if other != id => world.violate(
                    now_ms,
                    "one leader per vote",
                    format!("n{other} and n{id} both lead under vote {leader_of:?}"),
                ),
                Some(_) => {}
                None => {
                    world.log_at(
                        now_ms,
                        "raft",
                        format!("n{id} leads term {}", m.current_term),
                    );
                    self.leaders.insert(leader_of, id);
                }
            }
        }
    }

    /// Nodes at the same applied index hold the same state; breaker
    /// generations never go back on any node between power losses; no node
    /// counts more live probe permits than the policy allows.
    ///
    /// A power loss may take back what a node had applied: the commit
    /// index is not synced on its own (nor is etcd's), so the node restarts
    /// from an earlier one and re-applies the rest once a leader tells it
    /// the commit index again. Generations are therefore compared within
    /// one power-loss era of a node (its count of power losses so far).
    pub fn check_state(&mut self, world: &World, now_ms: u64) {
        let Ok(ns) = Namespace::new(NS) else {
            return;
        };
        for (id, backend) in world.running() {
            let era = world.node(id).map_or(0, |n| n.power_losses.get());
            let Some(applied) = backend.state.last_applied() else {
                continue;
            };
            let (digest, breakers) = backend.state.with_state(|s| {
                let breakers: Vec<_> = s
                    .breakers_in(&ns)
                    .map(|(key, _)| (key.clone(), s.view(key)))
                    .collect();
                (s.digest(), breakers)
            });
            let digest = match digest {
                Ok(d) => d,
                Err(e) => {
                    world.violate(now_ms, "state digest", format!("n{id}: {e}"));
                    continue;
                }
            };
            self.digest_checks += 1;
            match self.digests.get(&applied.index) {
                Some((other, seen)) if *seen != digest => world.violate(
                    now_ms,
                    "same index, same state",
                    format!(
                        "n{id} and n{other} differ at applied index {}",
                        applied.index
                    ),
                ),
                Some(_) => {}
                None => {
                    self.digests.insert(applied.index, (id, digest));
                }
            }
            for (key, view) in breakers {
                let seen = self.generations.entry((id, era, key.clone())).or_default();
                if view.generation < *seen {
                    world.violate(
                        now_ms,
                        "generations only grow",
                        format!(
                            "n{id}: {key:?} went from generation {seen} to {}",
                            view.generation
                        ),
                    );
                }
                *seen = (*seen).max(view.generation);
                if view.live_probes > CONCURRENT_PROBES {
                    world.violate(
                        now_ms,
                        "probe permits",
                        format!("n{id}: {key:?} has {} live probe permits", view.live_probes),
                    );
                }
            }
        }
    }

    /// The highest revision any running node has applied.
    pub fn cluster_revision(world: &World) -> Option<u64> {
        world
            .running()
            .iter()
            .map(|(_, b)| b.state.with_state(|s| s.revision()))
            .max()
    }

    /// Distinct votes (term, leader) that had a leader.
    pub fn terms(&self) -> usize {
        self.leaders.len()
    }
}
