//! One simulated run: the cluster, the operator and the replicas as hosts of
//! one turmoil simulation seeded from the run's seed, the fault schedule
//! applied between steps, the checkers run throughout and at the end.

use crate::check::{self, Watcher};
use crate::faults::{self, Injector};
use crate::incident::{Figures, Setup};
use crate::scenario::Scenario;
use crate::world::{Phase, Violation, World};
use crate::{agents, nodes, operator};
use fusebox_server::node::InjectedBugs;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant, UNIX_EPOCH};

/// The simulation's wall-clock start: 2026-11-30T00:00:00Z, the same for
/// every run so traces compare.
const EPOCH_SECS: u64 = 1_795_996_800;
/// Steps between "one leader per term" checks.
const LEADER_CHECK_STEPS: u64 = 5;
/// Steps between state checks (digests, generations, probe permits).
const STATE_CHECK_STEPS: u64 = 500;
/// How long after the heal the target revision for convergence is taken.
const CONVERGE_AFTER_HEAL_MS: u64 = 1_500;
/// The longest a run may simulate before it is cut off as stuck.
const SIMULATION_LIMIT: Duration = Duration::from_secs(240);

/// What to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The seed everything is drawn from.
    pub seed: u64,
    /// The script.
    pub scenario: Scenario,
    /// Nodes (3 or 5).
    pub nodes: u64,
    /// Agent replicas.
    pub replicas: u64,
    /// Bugs the nodes are told to have (none by default).
    pub bugs: InjectedBugs,
    /// Inject a storage bug: appends acknowledged before their WAL sync
    /// ([`fusebox_raft_store::inject_unsynced_appends`]).
    pub unsynced_appends: bool,
    /// Wall-clock time slept after every step (none by default): a run
    /// must give the same trace at any pace.
    pub drag: Duration,
    /// How the incident scenario runs (ignored by the others).
    pub incident: Setup,
}

impl RunOptions {
    /// Three nodes and four replicas running `scenario` from `seed`.
    pub fn new(seed: u64, scenario: Scenario) -> Self {
        RunOptions {
            seed,
            scenario,
            nodes: 3,
            replicas: 4,
            bugs: InjectedBugs::default(),
            unsynced_appends: false,
            drag: Duration::ZERO,
            incident: Setup::default(),
        }
    }
}

/// What a run found.
#[derive(Debug)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// The scenario.
    pub scenario: Scenario,
    /// SHA-256 over the trace: equal for two runs of one seed.
    pub digest: String,
    /// The trace's lines.
    pub trace: Vec<String>,
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// The simulation stopped with an error (a host failed, time ran out).
    pub error: Option<String>,
    /// Faults applied, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Workload counters.
    pub counters: BTreeMap<&'static str, u64>,
    /// Raw ledger operations checked.
    pub ledger_ops: usize,
    /// Terms that had a leader.
    pub terms: usize,
    /// State digests compared.
    pub digest_checks: u64,
    /// Simulated time.
    pub simulated: Duration,
    /// Real time the run took.
    pub took: Duration,
    /// What the slow tool cost (the incident scenario only).
    pub incident: Option<Figures>,
}

impl RunReport {
    /// Whether every invariant held and the simulation finished.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.error.is_none()
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Where a run keeps its nodes' RocksDB files: `FUSEBOX_SIM_DATA` if set,
/// else memory-backed `/dev/shm` where there is one, else the temporary
/// directory. A simulated crash drops a node inside this process, so what
/// RocksDB wrote is kept either way, and what a real fsync costs (most of
/// a seed's wall-clock time on a disk) buys the simulation nothing.
fn scratch_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("FUSEBOX_SIM_DATA") {
        return dir.into();
    }
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// Runs one seed to the end.
pub fn run(options: &RunOptions) -> RunReport {
    let started = Instant::now();
    let seed = options.seed;
    // The SDK's jitter and attempt ids come from fastrand's thread-local
    // generator; every host runs on this thread.
    fastrand::seed(seed);
    fusebox_raft_store::run_inline();
    fusebox_raft_store::skip_preallocation();
    if options.unsynced_appends {
        fusebox_raft_store::inject_unsynced_appends();
    }
    // Odd seeds save the fleet every few dozen entries, so their restarts
    // resume from saved fleets; even ones keep the production spacing and
    // replay long stretches behind the ledger.
    if seed % 2 == 1 {
        fusebox_raft_store::save_fleet_every(16 + seed % 64);
    }
    let mut world = World::new(seed, options.nodes, options.bugs);
    world.scenario = options.scenario;
    world.replicas = options.replicas;
    world.incident = options.incident;
    let world = Rc::new(world);
    crate::storage::witness(&world);
    let data = match tempfile::Builder::new()
        .prefix("fusebox-sim-")
        .tempdir_in(scratch_dir())
    {
        Ok(dir) => dir,
        Err(e) => return failed(options, &world, format!("no data directory: {e}"), started),
    };
    let workload_ms = options.scenario.workload_ms();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_secs(EPOCH_SECS))
        .simulation_duration(SIMULATION_LIMIT)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(20))
        .tcp_capacity(4_096)
        .enable_random_order()
        .build();
    nodes::register(&mut sim, &world, data.path());
    operator::register(&mut sim, &world);
    for r in 1..=options.replicas {
        agents::register(
            &mut sim,
            &world,
            options.scenario,
            r,
            options.replicas,
            workload_ms,
        );
    }
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_fa17);
    let plan = if options.scenario.faults() {
        faults::schedule(&mut rng, options.nodes, options.replicas, workload_ms)
    } else {
        options.scenario.fixed_faults()
    };
    let mut injector = Injector::default();
    let mut watcher = Watcher::default();
    let (mut next, mut steps, mut healed_at) = (0, 0u64, None);
    let mut error = None;
    loop {
        let done = match sim.step() {
            Ok(done) => done,
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        };
        steps += 1;
        if !options.drag.is_zero() {
            std::thread::sleep(options.drag);
        }
        let now = ms(sim.elapsed());
        if world.phase.get() == Phase::Workload {
            while next < plan.len() && plan[next].at_ms <= now {
                injector.apply(&mut sim, &world, &plan[next], now);
                next += 1;
            }
            injector.expire(&mut sim, &world, now, false);
            if world.replicas_done.get() as u64 == options.replicas {
                injector.heal_all(&mut sim, &world, now, options.replicas);
                world.phase.set(Phase::Healed);
                healed_at = Some(now);
            }
        }
        if steps % LEADER_CHECK_STEPS == 0 {
            watcher.check_leaders(&world, now);
        }
        if steps % STATE_CHECK_STEPS == 0 {
            watcher.check_state(&world, now);
        }
        if let Some(at) = healed_at {
            if world.converge_target.get().is_none() && now >= at + CONVERGE_AFTER_HEAL_MS {
                let target = Watcher::cluster_revision(&world);
                world.log_at(
                    now,
                    "check",
                    format!("replicas must reach revision {target:?}"),
                );
                world.converge_target.set(Some(target.unwrap_or(0)));
            }
        }
        if done {
            break;
        }
    }
    let end = ms(sim.elapsed());
    watcher.check_state(&world, end);
    check::ledger::judge(&world, end);
    options.scenario.judge(&world, end);
    if let Some(e) = &error {
        world.log_at(end, "sim", format!("stopped: {e}"));
    }
    // Close every node's storage before the data directory goes.
    for slot in &world.nodes {
        slot.backend.borrow_mut().take();
    }
    drop(sim);
    let (digest, trace) = {
        let trace = world.trace.borrow();
        (trace.digest(), trace.lines().to_vec())
    };
    let violations = world.violations.borrow().clone();
    let counters = world.counters.borrow().clone();
    let ledger_ops = world.ledger_ops.borrow().len();
    let incident = (options.scenario == Scenario::IncidentCost)
        .then(|| Figures::of(&world, crate::incident::onset_ms(seed)));
    RunReport {
        seed,
        scenario: options.scenario,
        digest,
        trace,
        violations,
        error,
        faults: injector.applied.clone(),
        counters,
        ledger_ops,
        terms: watcher.terms(),
        digest_checks: watcher.digest_checks,
        simulated: Duration::from_millis(end),
        took: started.elapsed(),
        incident,
    }
}

fn failed(options: &RunOptions, world: &World, error: String, started: Instant) -> RunReport {
    RunReport {
        seed: options.seed,
        scenario: options.scenario,
        digest: world.trace.borrow().digest(),
        trace: Vec::new(),
        violations: Vec::new(),
        error: Some(error),
        faults: BTreeMap::new(),
        counters: BTreeMap::new(),
        ledger_ops: 0,
        terms: 0,
        digest_checks: 0,
        simulated: Duration::ZERO,
        took: started.elapsed(),
        incident: None,
    }
}
