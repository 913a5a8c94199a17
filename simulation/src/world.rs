//! What the harness and every simulated host share: the trace, the
//! histories the checkers read, the nodes' handles and the run's phase.
//!
//! Every host of a turmoil simulation runs on the harness's thread, one at a
//! time, so the world is a plain `Rc` of `RefCell`s; what a node's clock
//! closure needs (its skew) is atomic because the node keeps it in a
//! `Send + Sync` environment.

use crate::check::ledger_model::LedgerOp;
use crate::incident::{Setup, SlowCall, Turn as IncidentTurn};
use crate::scenario::Scenario;
use crate::storage::SyncMark;
use crate::trace::Trace;
use fusebox_server::node::{InjectedBugs, RaftBackend};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

/// Simulated milliseconds since the run began (0 outside a host).
pub fn sim_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The operator is applying the policy; replicas wait.
    Setup,
    /// Replicas run their workload while faults come and go.
    Workload,
    /// Faults are healed; replicas read back what they wrote.
    Healed,
}

/// One node as the harness sees it.
pub struct NodeSlot {
    /// Its host name, `n1`…
    pub name: String,
    /// Its Raft id.
    pub id: u64,
    /// Its backend while it runs (taken when it crashes, so its storage
    /// closes).
    pub backend: RefCell<Option<RaftBackend>>,
    /// Its clock's error in ms.
    pub skew_ms: Arc<AtomicI64>,
    /// How many times it started.
    pub boots: Cell<u64>,
    /// Whether the harness crashed it and has not restarted it yet.
    pub down: Cell<bool>,
    /// How many power losses it has had.
    pub power_losses: Cell<u64>,
    /// Its data directory (set when it is registered).
    pub data_dir: RefCell<PathBuf>,
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Simulated ms when it was seen (the end of the run for final checks).
    pub at_ms: u64,
    /// Which check.
    pub check: &'static str,
    /// What was seen.
    pub detail: String,
}

/// A membership change the operator host carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MembershipTask {
    /// Remove voter `id`.
    Remove(u64),
    /// Add node `id` back as a voter.
    Add(u64),
}

/// Calls of one scripted tool in flight as probes, now and at most.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProbeGauge {
    /// In flight now.
    pub now: u32,
    /// The most at once.
    pub max: u32,
}

/// The shared state of one run.
pub struct World {
    /// The seed.
    pub seed: u64,
    /// The trace.
    pub trace: RefCell<Trace>,
    /// Every raw ledger operation, in call order.
    pub ledger_ops: RefCell<Vec<LedgerOp>>,
    /// Every key of the raw ledger workload, read back after the heal.
    pub ledger_keys: RefCell<BTreeSet<String>>,
    /// The revision every replica's view must reach once faults are healed
    /// (set by the harness after the heal).
    pub converge_target: Cell<Option<u64>>,
    /// How many times each non-idempotent write key's tool body ran.
    pub write_runs: RefCell<BTreeMap<String, u32>>,
    /// Probe calls per tool.
    pub probes: RefCell<BTreeMap<String, ProbeGauge>>,
    /// The nodes.
    pub nodes: Vec<NodeSlot>,
    /// Replicas whose workload is over.
    pub replicas_done: Cell<usize>,
    /// The phase.
    pub phase: Cell<Phase>,
    /// Membership changes waiting for the operator.
    pub membership: RefCell<VecDeque<MembershipTask>>,
    /// Broken invariants.
    pub violations: RefCell<Vec<Violation>>,
    /// Counters for the report.
    pub counters: RefCell<BTreeMap<&'static str, u64>>,
    /// The bugs the nodes are told to have.
    pub bugs: InjectedBugs,
    /// Where each node database's WAL stood at its last sync.
    pub synced: RefCell<BTreeMap<PathBuf, SyncMark>>,
    /// The run's scenario.
    pub scenario: Scenario,
    /// Agent replicas in the run.
    pub replicas: u64,
    /// The incident scenario's setup.
    pub incident: Setup,
    /// Every call of the incident scenario's slow tool.
    pub incident_calls: RefCell<Vec<SlowCall>>,
    /// Every turn of the incident scenario.
    pub incident_turns: RefCell<Vec<IncidentTurn>>,
}

impl World {
    /// A world for `seed` with nodes `n1..=nodes`.
    pub fn new(seed: u64, nodes: u64, bugs: InjectedBugs) -> World {
        let nodes = (1..=nodes)
            .map(|id| NodeSlot {
                name: format!("n{id}"),
                id,
                backend: RefCell::new(None),
                skew_ms: Arc::new(AtomicI64::new(0)),
                boots: Cell::new(0),
                down: Cell::new(false),
                power_losses: Cell::new(0),
                data_dir: RefCell::new(PathBuf::new()),
            })
            .collect();
        World {
            seed,
            trace: RefCell::new(Trace::default()),
            ledger_ops: RefCell::new(Vec::new()),
            converge_target: Cell::new(None),
            ledger_keys: RefCell::new(BTreeSet::new()),
            write_runs: RefCell::new(BTreeMap::new()),
            probes: RefCell::new(BTreeMap::new()),
            nodes,
            replicas_done: Cell::new(0),
            phase: Cell::new(Phase::Setup),
            membership: RefCell::new(VecDeque::new()),
            violations: RefCell::new(Vec::new()),
            counters: RefCell::new(BTreeMap::new()),
            bugs,
            synced: RefCell::new(BTreeMap::new()),
            scenario: Scenario::Chaos,
            replicas: 0,
            incident: Setup::default(),
            incident_calls: RefCell::new(Vec::new()),
            incident_turns: RefCell::new(Vec::new()),
        }
    }

    /// Traces `what` by `who` now (inside a host).
    pub fn log(&self, who: &str, what: impl AsRef<str>) {
        self.log_at(sim_ms(), who, what);
    }

    /// Traces `what` by `who` at `at_ms`.
    pub fn log_at(&self, at_ms: u64, who: &str, what: impl AsRef<str>) {
        self.trace.borrow_mut().push(at_ms, who, what.as_ref());
    }

    /// Records a broken invariant (and traces it).
    pub fn violate(&self, at_ms: u64, check: &'static str, detail: impl Into<String>) {
        let detail = detail.into();
        self.log_at(at_ms, "check", format!("VIOLATION {check}: {detail}"));
        self.violations.borrow_mut().push(Violation {
            at_ms,
            check,
            detail,
        });
    }

    /// Adds one to counter `name`.
    pub fn count(&self, name: &'static str) {
        *self.counters.borrow_mut().entry(name).or_default() += 1;
    }

    /// Every running node's id and backend (cheap clones), in id order.
    pub fn running(&self) -> Vec<(u64, RaftBackend)> {
        self.nodes
            .iter()
            .filter(|n| !n.down.get())
            .filter_map(|n| n.backend.borrow().as_ref().map(|b| (n.id, b.clone())))
            .collect()
    }

    /// The node slot with Raft id `id`.
    pub fn node(&self, id: u64) -> Option<&NodeSlot> {
        self.nodes.iter().find(|n| n.id == id)
    }
}
