//! `fusebox-nemesis`: a Jepsen-style test of real `fusebox serve`
//! processes on a real network.
//!
//! `run` starts five nodes, each in its own Linux network namespace behind
//! a delaying relay ([`lab`], [`relay`], [`cluster`]), runs ledger clients
//! and breaker probers against them ([`workload`], [`breakers`]) while the
//! [`nemesis`] partitions, drops, delays, kills, freezes, skews clocks and
//! changes the membership, heals, and then checks:
//! - the ledger histories, read back from their files, are linearizable
//!   (the simulation's own checker);
//! - the fleet never held more probe permits than allowed, no node showed
//!   more, or a breaker generation going back, and every node agrees on
//!   the breaker after the heal;
//! - no node exited by itself, and every node is a voter again.
//!
//! It is an integration test of its own (`harness = false`): `cargo test`
//! runs it with no arguments, which is two runs: 45 s with the leader cut
//! off again and again and a real bug injected into every node (reads
//! served without confirming leadership), which the checks must catch, and
//! then the bounded run (150 s of faults, `FUSEBOX_NEMESIS_DURATION` to
//! change it). Called with a subcommand it
//! does that instead: `run --duration 2h` for a long run, `check DIR` to
//! re-check the histories a run left, and `relay`, the relay a run starts in
//! each namespace (this binary again). Needs root (network namespaces,
//! iptables); `FUSEBOX_SKIP_NEMESIS=1` skips it.

// Built as a test target, so the modules' `#[test]`s are compiled here too,
// where no harness runs them (`nemesis_parts` does).
#![cfg_attr(test, allow(dead_code, unused_imports))]

mod breakers;
mod cluster;
mod history;
mod lab;
mod nemesis;
mod relay;
mod workload;

use anyhow::{bail, Context, Result};
use breakers::{Breakers, CONCURRENT_PROBES};
use clap::{Parser, Subcommand};
use cluster::Cluster;
use history::HistoryWriter;
use nemesis::{Nemesis, CLOCK_OFFSET_MS_MAX};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use workload::{Ledger, RunClock};

#[derive(Parser)]
#[command(
    name = "fusebox-nemesis",
    about = "Real fusebox processes under real network faults"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the test (as root).
    Run(RunArgs),
    /// Checks the ledger histories in DIR for linearizability.
    Check {
        /// A run's `history` directory.
        dir: PathBuf,
    },
    /// What `cargo test` runs: these runs in turn.
    #[command(skip)]
    Test(Vec<RunArgs>),
    /// The delaying relay a run puts in front of each node (internal).
    #[command(hide = true)]
    Relay {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        delay_file: PathBuf,
        #[arg(long)]
        parent: Option<u32>,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// How long to apply faults, e.g. `150s`, `2h`.
    #[arg(long, default_value = "150s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// The `fusebox` binary to serve with.
    #[arg(long, default_value = env!("CARGO_BIN_EXE_fusebox"))]
    fusebox: PathBuf,
    /// Where histories, node data and logs go; a fresh directory under the
    /// system's temporary one when unset, removed if the run passes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seeds the fault schedule and the workload; random when unset.
    #[arg(long)]
    seed: Option<u64>,
    /// Ledger clients.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=64))]
    clients: u64,
    /// Nodes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(3..=9))]
    nodes: u64,
    /// Only these faults (comma-separated names, as the run prints them).
    #[arg(long, value_delimiter = ',')]
    faults: Vec<nemesis::Fault>,
    /// Start every node with this bug (`serve --fault-inject-bug`, e.g.
    /// `skip-read-linearizer`), to show the checks catch it.
    #[arg(long)]
    inject_bug: Option<String>,
    /// Pass only if the checks find a violation (with `--inject-bug`).
    #[arg(long)]
    expect_violation: bool,
}

/// How long `cargo test`'s run with an injected bug applies its faults.
const BUG_RUN: Duration = Duration::from_secs(45);
/// Longest a cluster may take to elect its first leader.
const FIRST_LEADER_WITHIN: Duration = Duration::from_secs(60);
/// Longest the nodes may take to agree after the heal.
const AGREE_WITHIN: Duration = Duration::from_secs(60);

/// What `cargo test` means: a short run with a bug injected that must be
/// caught, then the bounded run; or nothing when a test filter leaves this
/// test out or only a list is asked for.
fn as_test(args: &[String]) -> Option<Command> {
    if args.iter().any(|a| a == "--list") {
        println!("nemesis: test");
        return None;
    }
    // libtest flags that take a value.
    const VALUED: [&str; 6] = [
        "--test-threads",
        "--format",
        "--color",
        "--skip",
        "--logfile",
        "-Z",
    ];
    let mut filters = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if VALUED.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            filters.push(arg.as_str());
        }
    }
    if !filters.is_empty() && !filters.iter().any(|f| "nemesis".contains(f)) {
        println!("nemesis: filtered out");
        return None;
    }
    if std::env::var("FUSEBOX_SKIP_NEMESIS").is_ok_and(|v| v == "1") {
        println!("nemesis: SKIPPED (FUSEBOX_SKIP_NEMESIS=1)");
        return None;
    }
    let duration = std::env::var("FUSEBOX_NEMESIS_DURATION")
        .ok()
        .and_then(|d| humantime::parse_duration(&d).ok())
        .unwrap_or(Duration::from_secs(150));
    let seed = std::env::var("FUSEBOX_NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let run = |duration, faults, inject_bug: Option<&str>, seed| RunArgs {
        duration,
        fusebox: PathBuf::from(env!("CARGO_BIN_EXE_fusebox")),
        out: None,
        seed,
        clients: 6,
        nodes: 5,
        faults,
        expect_violation: inject_bug.is_some(),
        inject_bug: inject_bug.map(str::to_owned),
    };
    Some(Command::Test(vec![
        // First, that the checks catch a real bug on this network: nodes
        // that serve reads without confirming they still lead, with the
        // leader cut off over and over.
        run(
            BUG_RUN,
            vec![nemesis::Fault::IsolateLeader],
            Some("skip-read-linearizer"),
            seed,
        ),
        run(duration, Vec::new(), None, seed),
    ]))
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match args.first().map(String::as_str) {
        Some("run" | "check" | "relay" | "help" | "--help" | "-h") => Cli::parse().command,
        _ => match as_test(&args) {
            Some(command) => command,
            None => return std::process::ExitCode::SUCCESS,
        },
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fusebox-nemesis: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match command {
            Command::Run(args) => run(args).await,
            Command::Test(runs) => {
                for args in runs {
                    run(args).await?;
                    println!();
                }
                Ok(())
            }
            Command::Check { dir } => check(&dir),
            Command::Relay {
                listen,
                to,
                delay_file,
                parent,
            } => {
                let spec = relay::RelaySpec {
                    listen,
                    to,
                    delay_file,
                    parent,
                };
                relay::serve(spec).await
            }
        }
    });
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fusebox-nemesis: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn check(dir: &Path) -> Result<()> {
    let judged = history::check_dir(dir)?;
    println!(
        "ledger: {} operations ({} answered) on {} keys",
        judged.ops, judged.answered, judged.keys
    );
    if let Some(undecided) = &judged.undecided {
        println!("ledger: the search gave up on {undecided}");
    }
    match judged.problem {
        Some(problem) => bail!("{problem}"),
        None => {
            println!("ledger: linearizable");
            Ok(())
        }
    }
}

/// Prints a line stamped with the run's clock.
fn say(clock: &RunClock, what: impl std::fmt::Display) {
    let ms = clock.elapsed_ms();
    println!("[{:>4}.{}s] {what}", ms / 1000, (ms % 1000) / 100);
}

async fn run(args: RunArgs) -> Result<()> {
    if !is_root() {
        bail!("the nemesis test needs root (network namespaces, iptables); FUSEBOX_SKIP_NEMESIS=1 skips it");
    }
    let out = match &args.out {
        Some(out) => out.clone(),
        None => std::env::temp_dir().join(format!("fusebox-nemesis-{}", std::process::id())),
    };
    std::fs::create_dir_all(&out)?;
    let out = std::fs::canonicalize(&out)?;
    let outcome = run_in(&args, &out).await;
    if outcome.is_ok() && args.out.is_none() {
        let _ = std::fs::remove_dir_all(&out);
    }
    outcome
}

/// Whether this process runs as root.
fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

async fn run_in(args: &RunArgs, out: &Path) -> Result<()> {
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    let slots = usize::try_from(args.nodes)?;
    let fusebox = std::fs::canonicalize(&args.fusebox)
        .with_context(|| format!("finding {}", args.fusebox.display()))?;
    let history_dir = out.join("history");
    println!(
        "nemesis: {slots} nodes, faults for {}, {} ledger clients, seed {seed}, out {}{}",
        humantime::format_duration(args.duration),
        args.clients,
        out.display(),
        args.inject_bug
            .as_ref()
            .map_or_else(String::new, |b| format!(", bug injected: {b}"))
    );
    let lab = lab::Lab::create(slots)?;
    let bug = args.inject_bug.clone();
    let mut cluster = Cluster::start(lab, fusebox, out.to_path_buf(), bug)?;
    let clock = RunClock::start();
    wait_leader(&cluster).await?;
    say(&clock, "a leader is elected");

    let ledger = Arc::new(Ledger::new(clock, &cluster.slots())?);
    let breakers = Arc::new(Breakers::new(clock, &cluster.slots())?);
    breakers.apply_policy().await?;
    say(&clock, "policy applied; workload starts");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.clients {
        let name = format!("c{i}");
        let history = HistoryWriter::create(&history_dir, &name, i)?;
        let client = workload::Client::new(name, ledger.clone(), history, seed ^ i);
        tasks.spawn(client.run());
    }
    let mut side = tokio::task::JoinSet::new();
    for i in 0..2u64 {
        side.spawn(
            breakers
                .clone()
                .probe(format!("prober-{i}"), seed.rotate_left(7) ^ i),
        );
    }
    side.spawn(breakers.clone().watch());

    let mut nemesis = Nemesis::new(seed, &args.faults);
    let mut violations = Vec::new();
    let end = tokio::time::Instant::now() + args.duration;
    while tokio::time::Instant::now() < end {
        let quiet = nemesis.quiet();
        tokio::time::sleep(quiet).await;
        let fault = nemesis.next_fault();
        let what = nemesis.apply(&mut cluster, fault).await?;
        say(&clock, format!("{fault}: {what}"));
        let hold = nemesis.hold();
        tokio::time::sleep(hold).await;
        violations.extend(crashed(&mut cluster));
        let healed = nemesis.heal(&mut cluster).await?;
        say(
            &clock,
            format!("{healed} ({} ledger operations so far)", ledger.recorded()),
        );
    }
    let healed = nemesis.heal_all(&mut cluster).await;
    say(
        &clock,
        format!(
            "final heal: {}",
            healed
                .as_ref()
                .map_or_else(|e| e.to_string(), String::clone)
        ),
    );
    if let Err(e) = healed {
        violations.push(e.to_string());
    }
    violations.extend(crashed(&mut cluster));

    // Stop the workload, then read back every key after the heal.
    ledger.stop.store(true, Ordering::Relaxed);
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    wait_leader(&cluster).await?;
    let keys = ledger.keys_since(0);
    let reader_no = args.clients;
    let history = HistoryWriter::create(&history_dir, "final-reads", reader_no)?;
    let mut reader = workload::Client::new("final".into(), ledger.clone(), history, seed);
    for key in &keys {
        reader.lookup(key).await?;
    }
    reader.flush()?;
    say(&clock, format!("read back {} keys", keys.len()));

    breakers.stop.store(true, Ordering::Relaxed);
    while side.join_next().await.is_some() {}
    let revision = match breakers.agree(AGREE_WITHIN).await {
        Ok(revision) => Some(revision),
        Err(e) => {
            violations.push(format!("breakers: {e}"));
            None
        }
    };
    if let Ok(v) = breakers.violations.lock() {
        violations.extend(v.iter().cloned());
    }
    let permits = breakers
        .permits
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    let skew_ms = u64::try_from(2 * CLOCK_OFFSET_MS_MAX).unwrap_or(0) + 500;
    let (most, generation) = breakers::most_held(&permits, skew_ms, clock.ms());
    if most > CONCURRENT_PROBES {
        violations.push(format!(
            "the fleet held {most} probe permits of generation {generation} at once (allowed {CONCURRENT_PROBES})"
        ));
    }

    let judged = history::check_dir(&history_dir)?;
    if let Some(problem) = &judged.problem {
        violations.push(format!("ledger: {problem}"));
    }

    println!();
    println!("== nemesis summary (seed {seed}) ==");
    println!("faults for {}", humantime::format_duration(args.duration));
    let faults: Vec<String> = nemesis
        .applied
        .iter()
        .map(|(f, n)| format!("{f} {n}"))
        .collect();
    println!(
        "faults applied: {} ({})",
        nemesis.applied.values().sum::<u64>(),
        faults.join(", ")
    );
    println!("membership changes made: {}", nemesis.membership_changes);
    println!(
        "ledger: {} operations checked ({} answered, {} without an answer; {} begin, {} complete, {} resolve, {} lookup) on {} keys; {} calls left out (refused or failed reads)",
        judged.ops,
        judged.answered,
        judged.ops - judged.answered,
        ledger.begins.load(Ordering::Relaxed),
        ledger.completes.load(Ordering::Relaxed),
        ledger.resolves.load(Ordering::Relaxed),
        ledger.lookups.load(Ordering::Relaxed),
        judged.keys,
        ledger.left_out.load(Ordering::Relaxed),
    );
    for (cause, n) in ledger.top_causes(5) {
        println!("ledger: {n} writes unanswered: {cause}");
    }
    if let Some(undecided) = &judged.undecided {
        println!("ledger: the search gave up on {undecided}");
    }
    println!(
        "breakers: {} failure batches, {} probe permits granted, at most {most} held at once (allowed {CONCURRENT_PROBES}), {} node views read, nodes agree at revision {}",
        breakers.reports.load(Ordering::Relaxed),
        permits.len(),
        breakers.reads.load(Ordering::Relaxed),
        revision.map_or_else(|| "-".to_owned(), |r| r.to_string()),
    );
    println!("violations: {}", violations.len());
    for v in &violations {
        println!("  - {v}");
    }
    match (violations.is_empty(), args.expect_violation) {
        (true, false) => Ok(()),
        (false, false) => bail!(
            "{} violations (histories and logs in {})",
            violations.len(),
            out.display()
        ),
        (false, true) => {
            println!("a violation was expected (--expect-violation), and found");
            Ok(())
        }
        (true, true) => bail!("a violation was expected (--expect-violation), and none was found"),
    }
}

/// Nodes whose process ended without being killed by the test.
fn crashed(cluster: &mut Cluster) -> Vec<String> {
    let mut found = Vec::new();
    for slot in cluster.slots() {
        if let Some(status) = cluster.exited(slot) {
            found.push(format!(
                "node {slot} exited by itself ({status}); see logs/node-{slot}.log"
            ));
            // Bring it back so the run can go on and be judged.
            let _ = cluster.kill(slot);
        }
    }
    found
}

async fn wait_leader(cluster: &Cluster) -> Result<()> {
    let deadline = tokio::time::Instant::now() + FIRST_LEADER_WITHIN;
    while tokio::time::Instant::now() < deadline {
        if cluster.leader().await.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("no leader within {FIRST_LEADER_WITHIN:?}")
}
