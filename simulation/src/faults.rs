//! Faults: a schedule drawn from the seed, applied and undone by the harness
//! between simulation steps, and healed all at once when the workload ends.

use crate::storage;
use crate::world::{MembershipTask, World};
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;

/// The furthest a node's clock is ever set off the simulation's (either
/// way); the ledger checker allows for it.
pub const CLOCK_SKEW_MS_MAX: i64 = 800;

/// One fault.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Nodes `a` and `b` cannot reach each other.
    Partition(u64, u64),
    /// Node `from`'s messages to `to` are lost; the other way works.
    OneWay(u64, u64),
    /// The current leader is cut off from every other node (clients still
    /// reach it).
    IsolateLeader,
    /// A replica cannot reach node `node`.
    ReplicaCut(u64, u64),
    /// Node `node` crashes and restarts when the fault ends.
    Crash(u64),
    /// These nodes' machines lose power at once (one node, or a majority
    /// sharing a rack): each process crashes and each disk keeps only what
    /// was synced ([`crate::storage`]); they restart when the fault ends.
    PowerLoss(Vec<u64>),
    /// Messages between `a` and `b` are lost at `rate` (turmoil's link
    /// failure rate).
    Loss(u64, u64, f64),
    /// Message latency goes up to `max_ms` everywhere (and so reorders).
    Latency(u64),
    /// Node `node`'s clock runs `ms` off.
    Skew(u64, i64),
    /// Voter `node` is removed, and added back when the fault ends.
    Membership(u64),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Partition(a, b) => write!(f, "partition n{a} <-> n{b}"),
            Fault::OneWay(a, b) => write!(f, "one-way loss n{a} -> n{b}"),
            Fault::IsolateLeader => f.write_str("isolate the leader"),
            Fault::ReplicaCut(r, n) => write!(f, "cut r{r} from n{n}"),
            Fault::Crash(n) => write!(f, "crash n{n}"),
            Fault::PowerLoss(ns) => {
                let names: Vec<String> = ns.iter().map(|n| format!("n{n}")).collect();
                write!(f, "power loss of {}", names.join(", "))
            }
            Fault::Loss(a, b, rate) => write!(f, "loss {rate:.2} on n{a} <-> n{b}"),
            Fault::Latency(ms) => write!(f, "latency up to {ms} ms"),
            Fault::Skew(n, ms) => write!(f, "clock of n{n} off by {ms} ms"),
            Fault::Membership(n) => write!(f, "remove voter n{n}"),
        }
    }
}

impl Fault {
    /// The fault's kind, for the summary.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Partition(..) => "partition",
            Fault::OneWay(..) => "one-way partition",
            Fault::IsolateLeader => "leader isolation",
            Fault::ReplicaCut(..) => "replica cut",
            Fault::Crash(..) => "crash and restart",
            Fault::PowerLoss(..) => "power loss",
            Fault::Loss(..) => "message loss",
            Fault::Latency(..) => "latency and reordering",
            Fault::Skew(..) => "clock skew",
            Fault::Membership(..) => "membership change",
        }
    }
}

/// A fault to apply at `at_ms` for `lasts_ms`.
#[derive(Clone, Debug)]
pub struct Planned {
    /// When it starts (simulated ms).
    pub at_ms: u64,
    /// How long it lasts.
    pub lasts_ms: u64,
    /// What it is.
    pub fault: Fault,
}

/// Draws a schedule of faults for a workload of `workload_ms` over `nodes`
/// nodes and `replicas` replicas; faults start between 2 s and 3 s before
/// the end of the workload and overlap freely.
pub fn schedule(
    rng: &mut fastrand::Rng,
    nodes: u64,
    replicas: u64,
    workload_ms: u64,
) -> Vec<Planned> {
    let mut plan = Vec::new();
    let mut at = 2_000 + rng.u64(0..1_000);
    let last = workload_ms.saturating_sub(3_000);
    let pair = |rng: &mut fastrand::Rng| {
        let a = rng.u64(1..=nodes);
        let b = (a + rng.u64(1..nodes)) % nodes;
        (a, if b == 0 { nodes } else { b })
    };
    while at < last {
        let fault = match rng.u8(0..9) {
            0 => {
                let (a, b) = pair(rng);
                Fault::Partition(a, b)
            }
            1 => {
                let (a, b) = pair(rng);
                Fault::OneWay(a, b)
            }
            2 => Fault::IsolateLeader,
            3 => Fault::ReplicaCut(rng.u64(1..=replicas), rng.u64(1..=nodes)),
            4 if rng.bool() => Fault::Crash(rng.u64(1..=nodes)),
            4 => {
                let mut ids: Vec<u64> = (1..=nodes).collect();
                rng.shuffle(&mut ids);
                let majority = usize::try_from(nodes / 2 + 1).unwrap_or(1);
                ids.truncate(if rng.u8(0..3) == 0 { majority } else { 1 });
                Fault::PowerLoss(ids)
            }
            5 => {
                let (a, b) = pair(rng);
                Fault::Loss(a, b, 0.05 + f64::from(rng.u8(0..20)) / 100.0)
            }
            6 => Fault::Latency(50 + rng.u64(0..250)),
            7 => {
                let skew = rng.i64(-CLOCK_SKEW_MS_MAX..=CLOCK_SKEW_MS_MAX);
                Fault::Skew(rng.u64(1..=nodes), skew)
            }
            _ => Fault::Membership(rng.u64(1..=nodes)),
        };
        let lasts_ms = 500 + rng.u64(0..4_000);
        plan.push(Planned {
            at_ms: at,
            lasts_ms,
            fault,
        });
        at += 800 + rng.u64(0..2_500);
    }
    plan
}

/// A fault in force and how to undo it.
#[derive(Debug)]
struct Active {
    until_ms: u64,
    fault: Fault,
    /// The node a leader isolation cut off.
    isolated: Option<u64>,
}

/// The faults in force.
#[derive(Debug, Default)]
pub struct Injector {
    active: Vec<Active>,
    /// Faults applied, by kind.
    pub applied: BTreeMap<&'static str, u64>,
}

fn node(id: u64) -> String {
    format!("n{id}")
}

/// Crashes node `n`, and with `power_loss` cuts its disk back to its last
/// sync.
fn crash(sim: &mut turmoil::Sim<'_>, world: &World, n: u64, power_loss: bool, now_ms: u64) {
    let Some(slot) = world.node(n) else { return };
    if slot.down.get() {
        return;
    }
    // Drop the harness's handle first, so the node's storage closes with
    // its runtime.
    slot.backend.borrow_mut().take();
    sim.crash(slot.name.as_str());
    slot.down.set(true);
    if !power_loss {
        return;
    }
    slot.power_losses.set(slot.power_losses.get() + 1);
    let dir = slot.data_dir.borrow().clone();
    match storage::lose_unsynced(world, &dir) {
        Ok(lost) => {
            let what = format!("n{n} lost {lost} unsynced WAL bytes");
            world.log_at(now_ms, "fault", what);
            if lost > 0 {
                world.count("power losses that cut the WAL");
            }
        }
        Err(e) => world.violate(now_ms, "power loss", format!("n{n}: {e}")),
    }
}

/// Restarts node `n` if the harness crashed it.
fn restart(sim: &mut turmoil::Sim<'_>, world: &World, n: u64) {
    if let Some(slot) = world.node(n) {
        if slot.down.get() {
            slot.down.set(false);
            sim.bounce(slot.name.as_str());
        }
    }
}

/// The node that believes it leads in the highest term, if any runs.
pub fn leader(world: &World) -> Option<u64> {
    world
        .running()
        .into_iter()
        .filter_map(|(id, backend)| {
            let m = backend.raft.metrics().borrow_watched().clone();
            (m.state == ServerState::Leader).then_some((m.current_term, id))
        })
        .max()
        .map(|(_, id)| id)
}

impl Injector {
    /// Applies `planned` at `now_ms`.
    pub fn apply(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        world: &World,
        planned: &Planned,
        now_ms: u64,
    ) {
        let fault = planned.fault.clone();
        let mut isolated = None;
        match &fault {
            Fault::Partition(a, b) => sim.partition(node(*a), node(*b)),
            Fault::OneWay(a, b) => sim.partition_oneway(node(*a), node(*b)),
            Fault::IsolateLeader => {
                let Some(id) = leader(world) else {
                    world.log_at(now_ms, "fault", "no leader to isolate");
                    return;
                };
                for other in world.nodes.iter().filter(|n| n.id != id) {
                    sim.partition(node(id), other.name.as_str());
                }
                isolated = Some(id);
            }
            Fault::ReplicaCut(r, n) => sim.partition(format!("r{r}"), node(*n)),
            Fault::Crash(n) => crash(sim, world, *n, false, now_ms),
            Fault::PowerLoss(ns) => {
                for n in ns {
                    crash(sim, world, *n, true, now_ms);
                }
            }
            Fault::Loss(a, b, rate) => sim.set_link_fail_rate(node(*a), node(*b), *rate),
            Fault::Latency(ms) => {
                sim.set_max_message_latency(std::time::Duration::from_millis(*ms))
            }
            Fault::Skew(n, ms) => {
                if let Some(slot) = world.node(*n) {
                    slot.skew_ms.store(*ms, Ordering::Relaxed);
                }
            }
            Fault::Membership(n) => {
                world
                    .membership
                    .borrow_mut()
                    .push_back(MembershipTask::Remove(*n));
            }
        }
        let what = match isolated {
            Some(id) => format!("{fault} (n{id})"),
            None => fault.to_string(),
        };
        world.log_at(
            now_ms,
            "fault",
            format!("{what} for {} ms", planned.lasts_ms),
        );
        *self.applied.entry(fault.kind()).or_default() += 1;
        self.active.push(Active {
            until_ms: now_ms + planned.lasts_ms,
            fault,
            isolated,
        });
    }

    /// Undoes every fault whose time is up at `now_ms` (all of them when
    /// `all`).
    pub fn expire(&mut self, sim: &mut turmoil::Sim<'_>, world: &World, now_ms: u64, all: bool) {
        let (done, kept): (Vec<Active>, Vec<Active>) = std::mem::take(&mut self.active)
            .into_iter()
            .partition(|a| all || a.until_ms <= now_ms);
        self.active = kept;
        for active in done {
            undo(sim, world, &active);
            world.log_at(now_ms, "fault", format!("healed: {}", active.fault));
        }
    }

    /// Heals everything: undoes every fault and repairs every link.
    pub fn heal_all(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        world: &World,
        now_ms: u64,
        replicas: u64,
    ) {
        self.expire(sim, world, now_ms, true);
        let hosts: Vec<String> = world
            .nodes
            .iter()
            .map(|n| n.name.clone())
            .chain((1..=replicas).map(|r| format!("r{r}")))
            .chain(["op".to_string()])
            .collect();
        for (i, a) in hosts.iter().enumerate() {
            for b in &hosts[i + 1..] {
                sim.repair(a.as_str(), b.as_str());
                sim.set_link_fail_rate(a.as_str(), b.as_str(), 0.0);
            }
        }
        world.log_at(now_ms, "fault", "every fault healed");
    }
}

fn undo(sim: &mut turmoil::Sim<'_>, world: &World, active: &Active) {
    match &active.fault {
        Fault::Partition(a, b) => sim.repair(node(*a), node(*b)),
        Fault::OneWay(a, b) => sim.repair_oneway(node(*a), node(*b)),
        Fault::IsolateLeader => {
            if let Some(id) = active.isolated {
                for other in world.nodes.iter().filter(|n| n.id != id) {
                    sim.repair(node(id), other.name.as_str());
                }
            }
        }
        Fault::ReplicaCut(r, n) => sim.repair(format!("r{r}"), node(*n)),
        Fault::Crash(n) => restart(sim, world, *n),
        Fault::PowerLoss(ns) => {
            for n in ns {
                restart(sim, world, *n);
            }
        }
        Fault::Loss(a, b, _) => sim.set_link_fail_rate(node(*a), node(*b), 0.0),
        Fault::Latency(_) => sim.set_max_message_latency(std::time::Duration::from_millis(20)),
        Fault::Skew(n, _) => {
            if let Some(slot) = world.node(*n) {
                slot.skew_ms.store(0, Ordering::Relaxed);
            }
        }
        Fault::Membership(n) => {
            world
                .membership
                .borrow_mut()
                .push_back(MembershipTask::Add(*n));
        }
    }
}
