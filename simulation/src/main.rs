//! `fusebox-simulation`: runs seeds of the deterministic simulation.
//!
//! ```text
//! fusebox-simulation --seeds 0..1000          # a batch, with a summary
//! fusebox-simulation --seed 42                # one seed, with its trace
//! fusebox-simulation --seed 42 --determinism  # the same seed twice, compared
//! fusebox-simulation --seed 0 --incident-cost # one slow tool's cost, each setup
//! ```
//!
//! Every seed of a batch, and each run of a determinism check, runs in a
//! fresh process: a run leaves process-wide state behind (the second run of
//! a seed in one process was seen to differ from the first; see decision
//! 0005), so only a run that starts a process is what `--seed N` replays.
//!
//! The second run of a determinism check is slowed to about the wall
//! clock's pace ([`WALL_CLOCK_DRAG`] per step): a run must not depend on
//! how fast the machine runs it, and a run that read the wall clock
//! somewhere (h2 did; decision 0005) then shows it here rather than only
//! on a loaded CI machine.

use clap::Parser;
use fusebox_server::node::InjectedBugs;
use fusebox_simulation::incident::{self, Figures, Named};
use fusebox_simulation::{run, RunOptions, RunReport, Scenario};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::ops::Range;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// Runs the deterministic simulation of a Fusebox cluster and its agents.
#[derive(Parser, Debug, Clone)]
#[command(name = "fusebox-simulation", version)]
struct Args {
    /// A range of seeds to run, `A..B` (B excluded), each in its own process.
    #[arg(long, value_parser = parse_range, conflicts_with = "seed")]
    seeds: Option<Range<u64>>,
    /// One seed to run, printing its trace.
    #[arg(long)]
    seed: Option<u64>,
    /// Run each seed twice, each in its own process, and compare the traces.
    #[arg(long)]
    determinism: bool,
    /// The scenario (`chaos` draws faults from the seed).
    #[arg(long, default_value = "chaos")]
    scenario: Scenario,
    /// Nodes in the cluster, 3 to 5.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(3..=5))]
    nodes: u64,
    /// Agent replicas.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=16))]
    replicas: u64,
    /// Inject a real bug: nodes answer linearizable reads without
    /// confirming they still lead (the checkers should catch it).
    #[arg(long)]
    inject_stale_reads: bool,
    /// Inject a real bug: nodes acknowledge log appends before their WAL
    /// sync, so a power loss takes back entries they counted toward a
    /// commit (the checkers should catch it).
    #[arg(long)]
    inject_unsynced_appends: bool,
    /// With `--seeds`: seeds run at once, each in its own process (default:
    /// the machine's cores).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
    jobs: Option<u64>,
    /// With `--seed`: print only the one-line summary (used by batches).
    #[arg(long)]
    summary_only: bool,
    /// With `--seed`: sleep this long in wall-clock time after every
    /// simulated step (the determinism check's second run uses 1 ms).
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 0)]
    drag_us: u64,
    /// With `--seed`: run the incident story in every setup, each in its
    /// own process, and print what the slow tool cost each.
    #[arg(long, conflicts_with_all = ["seeds", "determinism"])]
    incident_cost: bool,
    /// The setup of `--scenario incident_cost` (fleet, fleet-finish,
    /// fleet-at-deadline, per-replica, per-replica-at-deadline, alone,
    /// healthy); it sets the replicas.
    #[arg(long, default_value = "fleet")]
    incident_setup: Named,
    /// With `--incident-cost`: only these setups (comma-separated; all by
    /// default).
    #[arg(long, value_delimiter = ',', requires = "incident_cost")]
    incident_setups: Vec<Named>,
}

/// How long the second run of a determinism check sleeps per step (one
/// simulated millisecond), so it takes at least as much wall-clock time as
/// it simulates.
const WALL_CLOCK_DRAG: Duration = Duration::from_millis(1);

/// One run's result, as a child process reports it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Summary {
    seed: u64,
    scenario: String,
    passed: bool,
    digest: String,
    simulated_ms: u64,
    took_ms: u64,
    ledger_ops: usize,
    faults: BTreeMap<String, u64>,
    problems: Vec<String>,
    #[serde(default)]
    incident: Option<Figures>,
}

const SUMMARY_PREFIX: &str = "SUMMARY ";

impl Summary {
    fn of(report: &RunReport) -> Summary {
        let mut problems: Vec<String> = report
            .violations
            .iter()
            .map(|v| format!("at {} ms, {}: {}", v.at_ms, v.check, v.detail))
            .collect();
        if let Some(e) = &report.error {
            problems.push(format!("simulation stopped: {e}"));
        }
        Summary {
            seed: report.seed,
            scenario: report.scenario.to_string(),
            passed: report.passed(),
            digest: report.digest.clone(),
            simulated_ms: u64::try_from(report.simulated.as_millis()).unwrap_or(u64::MAX),
            took_ms: u64::try_from(report.took.as_millis()).unwrap_or(u64::MAX),
            ledger_ops: report.ledger_ops,
            faults: report
                .faults
                .iter()
                .map(|(k, n)| ((*k).to_string(), *n))
                .collect(),
            problems,
            incident: report.incident.clone(),
        }
    }
}

fn parse_range(text: &str) -> Result<Range<u64>, String> {
    let (a, b) = text
        .split_once("..")
        .ok_or_else(|| format!("{text:?} is not a range like 0..100"))?;
    let a: u64 = a.parse().map_err(|e| format!("{a:?}: {e}"))?;
    let b: u64 = b.parse().map_err(|e| format!("{b:?}: {e}"))?;
    if b <= a {
        return Err(format!("{text:?} is empty"));
    }
    Ok(a..b)
}

fn main() -> ExitCode {
    let args = Args::parse();
    // `FUSEBOX_SIM_LOG=fusebox_server=debug,openraft=info`: the nodes' and
    // the SDK's own logs on stderr, for a seed being looked into.
    if let Ok(filter) = std::env::var("FUSEBOX_SIM_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    let ok = match args.seed {
        Some(seed) if args.incident_cost => incident_cost(&args, seed),
        Some(seed) if args.determinism => determinism(&args, seed),
        Some(seed) => one(&args, seed),
        None => batch(&args, args.seeds.clone().unwrap_or(0..10)),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn options(args: &Args, seed: u64) -> RunOptions {
    let incident = args.scenario == Scenario::IncidentCost;
    RunOptions {
        seed,
        scenario: args.scenario,
        nodes: args.nodes,
        replicas: if incident {
            args.incident_setup.replicas()
        } else {
            args.replicas
        },
        bugs: InjectedBugs {
            skip_read_linearizer: args.inject_stale_reads,
        },
        unsynced_appends: args.inject_unsynced_appends,
        drag: Duration::from_micros(args.drag_us),
        incident: args.incident_setup.setup(),
    }
}

/// Runs the incident story of `seed` in every setup, each in a child
/// process, and prints the comparison; false if a run failed its checks.
fn incident_cost(args: &Args, seed: u64) -> bool {
    let mut rows = Vec::new();
    let mut ok = true;
    let setups = if args.incident_setups.is_empty() {
        Named::ALL.to_vec()
    } else {
        args.incident_setups.clone()
    };
    for named in setups {
        let run = Args {
            scenario: Scenario::IncidentCost,
            incident_setup: named,
            seeds: None,
            seed: Some(seed),
            determinism: false,
            incident_cost: false,
            summary_only: true,
            ..args.clone()
        };
        match child(&run, seed, false, Pace::Full) {
            Ok((_, summary)) => {
                if !summary.passed {
                    ok = false;
                    println!("{}:", named.label());
                    print_summary(&summary);
                }
                match summary.incident {
                    Some(figures) => rows.push((named, figures)),
                    None => ok = false,
                }
            }
            Err(e) => {
                println!("{}: {e}", named.label());
                ok = false;
            }
        }
    }
    print!("{}", incident::comparison(seed, &rows));
    ok
}

/// Runs `seed` in this process; prints its trace and report (or only the
/// summary line).
fn one(args: &Args, seed: u64) -> bool {
    let report = run(&options(args, seed));
    let summary = Summary::of(&report);
    if !args.summary_only {
        for line in &report.trace {
            println!("{line}");
        }
        print_summary(&summary);
        println!("  workload: {:?}", report.counters);
        println!(
            "  terms with a leader {}, state digests compared {}",
            report.terms, report.digest_checks
        );
    }
    match serde_json::to_string(&summary) {
        Ok(json) => println!("{SUMMARY_PREFIX}{json}"),
        Err(e) => println!("{SUMMARY_PREFIX}unencodable: {e}"),
    }
    summary.passed
}

fn print_summary(s: &Summary) {
    println!(
        "seed {} ({}): {} in {:.1} s simulated, {:.1} s real; digest {}",
        s.seed,
        s.scenario,
        if s.passed { "passed" } else { "FAILED" },
        s.simulated_ms as f64 / 1000.0,
        s.took_ms as f64 / 1000.0,
        s.digest.get(..16).unwrap_or(&s.digest)
    );
    println!(
        "  ledger operations {}, faults {:?}",
        s.ledger_ops, s.faults
    );
    for p in &s.problems {
        println!("  {p}");
    }
}

/// How a child runs a seed: at full speed, or dragged to the wall clock's
/// pace.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pace {
    Full,
    Dragged,
}

/// Runs `seed` in a child process: its trace lines and summary.
fn child(
    args: &Args,
    seed: u64,
    trace: bool,
    pace: Pace,
) -> Result<(Vec<String>, Summary), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let mut command = Command::new(exe);
    command
        .arg("--seed")
        .arg(seed.to_string())
        .arg("--scenario")
        .arg(args.scenario.name())
        .arg("--nodes")
        .arg(args.nodes.to_string())
        .arg("--replicas")
        .arg(args.replicas.to_string())
        .arg("--incident-setup")
        .arg(args.incident_setup.name());
    if args.inject_stale_reads {
        command.arg("--inject-stale-reads");
    }
    if args.inject_unsynced_appends {
        command.arg("--inject-unsynced-appends");
    }
    if !trace {
        command.arg("--summary-only");
    }
    if pace == Pace::Dragged {
        command
            .arg("--drag-us")
            .arg(WALL_CLOCK_DRAG.as_micros().to_string());
    }
    let output = command
        .output()
        .map_err(|e| format!("seed {seed}: cannot start a run: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with('['))
        .map(str::to_owned)
        .collect();
    let summary = stdout
        .lines()
        .find_map(|l| l.strip_prefix(SUMMARY_PREFIX))
        .ok_or_else(|| {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: String = stderr.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
            format!("seed {seed}: the run died ({}): {tail}", output.status)
        })?;
    let summary: Summary =
        serde_json::from_str(summary).map_err(|e| format!("seed {seed}: bad summary: {e}"))?;
    Ok((lines, summary))
}

/// Runs `seed` twice, each in a fresh process (the second dragged to the
/// wall clock's pace), and compares the traces.
fn determinism(args: &Args, seed: u64) -> bool {
    let runs = child(args, seed, true, Pace::Full)
        .and_then(|a| Ok((a, child(args, seed, true, Pace::Dragged)?)));
    let ((first_trace, first), (second_trace, second)) = match runs {
        Ok(runs) => runs,
        Err(e) => {
            println!("{e}");
            return false;
        }
    };
    for line in &first_trace {
        println!("{line}");
    }
    print_summary(&first);
    if first.digest == second.digest {
        println!(
            "determinism: two runs of seed {seed} have the same trace digest \
             (the second took {:.1} s of wall-clock time for {:.1} s simulated)",
            second.took_ms as f64 / 1000.0,
            second.simulated_ms as f64 / 1000.0
        );
        return first.passed;
    }
    println!(
        "determinism: BROKEN, seed {seed} gave digests {} and {}",
        first.digest, second.digest
    );
    match first_trace
        .iter()
        .zip(&second_trace)
        .position(|(a, b)| a != b)
    {
        Some(i) => {
            println!("  first difference at line {i}:");
            println!("    first run:  {}", first_trace[i]);
            println!("    second run: {}", second_trace[i]);
        }
        None => println!("  one trace is a prefix of the other"),
    }
    false
}

fn batch(args: &Args, seeds: Range<u64>) -> bool {
    let total = seeds.end - seeds.start;
    let started = Instant::now();
    let mut failed: Vec<Summary> = Vec::new();
    let mut died: Vec<String> = Vec::new();
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    let mut nondeterministic = Vec::new();
    let (mut simulated_ms, mut ledger_ops) = (0u64, 0usize);
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| u64::try_from(n.get()).unwrap_or(1))
    });
    // Seeds are handed out in order to `jobs` threads, each running one
    // child process at a time; results come back as they finish.
    let next = std::sync::Mutex::new(seeds.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(total) {
            let (tx, next) = (tx.clone(), &next);
            scope.spawn(move || loop {
                let seed = next
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .next();
                let Some(seed) = seed else { return };
                let first = child(args, seed, false, Pace::Full);
                let again = match &first {
                    Ok(_) if args.determinism => Some(child(args, seed, false, Pace::Dragged)),
                    _ => None,
                };
                if tx.send((seed, first, again)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        for (done, (seed, first, again)) in rx.iter().enumerate() {
            match first {
                Ok((_, summary)) => {
                    match again {
                        Some(Ok((_, again))) if again.digest == summary.digest => {}
                        Some(Ok(_)) => nondeterministic.push(seed),
                        Some(Err(e)) => died.push(e),
                        None => {}
                    }
                    simulated_ms += summary.simulated_ms;
                    ledger_ops += summary.ledger_ops;
                    for (kind, n) in &summary.faults {
                        *faults.entry(kind.clone()).or_default() += n;
                    }
                    if !summary.passed {
                        failed.push(summary);
                    }
                }
                Err(e) => died.push(e),
            }
            progress(
                done as u64 + 1,
                total,
                failed.len() + died.len(),
                started.elapsed(),
            );
        }
    });
    nondeterministic.sort_unstable();
    failed.sort_by_key(|s| s.seed);
    eprintln!();
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    println!(
        "{total} seeds ({}..{}) of {} in {:.1} min, {jobs} at once: {:.1} seeds/min, {:.0} s simulated",
        seeds.start,
        seeds.end,
        args.scenario,
        minutes,
        total as f64 / minutes.max(1e-9),
        simulated_ms as f64 / 1000.0
    );
    println!("ledger operations checked: {ledger_ops}");
    println!("faults exercised: {faults:?}");
    if args.determinism {
        println!(
            "determinism: {} of {total} seeds gave two different traces {:?}",
            nondeterministic.len(),
            nondeterministic
        );
    }
    for e in &died {
        println!("{e}");
    }
    for summary in &failed {
        print_summary(summary);
        println!(
            "  replay: cargo run -p fusebox-simulation --release -- --seed {} --scenario {}",
            summary.seed, summary.scenario
        );
    }
    let ok = failed.is_empty() && died.is_empty() && nondeterministic.is_empty();
    if ok {
        println!("every seed passed");
    }
    ok
}

fn progress(done: u64, total: u64, failed: usize, elapsed: Duration) {
    const WIDTH: u64 = 30;
    let filled = (done * WIDTH) / total.max(1);
    let bar: String = (0..WIDTH)
        .map(|i| if i < filled { '=' } else { ' ' })
        .collect();
    let rate = done as f64 / (elapsed.as_secs_f64() / 60.0).max(1e-9);
    eprint!("\r[{bar}] {done}/{total} seeds, {failed} failed, {rate:.1} seeds/min");
    let _ = std::io::stderr().flush();
}
