//! The simulation's CI batch, through the `fusebox-simulation` binary (each
//! run in its own process, as a batch runs them, so a failure here replays
//! with the command it prints): a bounded set of chaos seeds, a determinism
//! check, every named exercise, and proof that the checkers fail when the
//! product is wrong. A long batch is `cargo run -p fusebox-simulation
//! --release -- --seeds 0..1000` (see the README).

use std::process::{Command, Output};

/// The chaos seeds CI runs (each simulates about 27 s).
const CI_SEEDS: &str = "0..4";

fn simulation(args: &[&str]) -> (bool, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_fusebox-simulation"))
        .args(args)
        .output()
        .expect("the simulation binary runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    (status.success(), text)
}

/// The report lines of an output (not the trace), for failure messages.
fn report(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('['))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Chaos seeds that once failed, each pinned with what it found:
/// - 7035: a member cut off from its leader kept heartbeating over a frozen
///   view, so replicas' views never converged (fixed by ending watches on a
///   node out of touch with its leader).
/// - 8263: in this debug build, the leader was asked to remove itself, and
///   the retry of that removal reached it while it led outside its own
///   membership: openraft's core panicked on its debug assertion that only
///   a voting leader appends membership (issue 18, item 8; fixed by handing
///   leadership over before a leader's removal). Without the fix this seed
///   still panics here. (In release builds the same seed once found a
///   replica without the policy yet beginning a charge as read-only, whose
///   retry took the lapsed lease over; that cause is pinned by unit tests in
///   `ledger_scenarios.rs` and `as_write` in the SDK's `write.rs`.)
/// - 26843: a power cut took the leader and one follower down 9 ms after a
///   `begin` was acknowledged; the leader came back as leader of its old
///   term at once (openraft's leader restore) with a stale saved commit
///   index, and answered a linearizable lookup of that key `NotFound` before
///   it had applied the entry (fixed by `enable_leader_restore = false`: a
///   restarted leader must win a new election).
/// - 32277: a probe that stalled gave its permit back while its call ran on,
///   and another replica's probe of the tool's server was granted beside it:
///   two probe calls of one tool at once (fixed by a probe holding its
///   permit for as long as its call runs; `simulation/README.md`).
const REGRESSION_SEEDS: [&str; 4] = ["7035", "8263", "26843", "32277"];

#[test]
fn seeds_that_found_bugs_stay_fixed() {
    for seed in REGRESSION_SEEDS {
        let (ok, text) = simulation(&["--seed", seed, "--summary-only"]);
        assert!(
            ok && text.contains("\"passed\":true"),
            "seed {seed}: {}",
            report(&text)
        );
    }
}

#[test]
fn a_batch_of_chaos_seeds_keeps_every_invariant() {
    let (ok, text) = simulation(&["--seeds", CI_SEEDS]);
    assert!(ok, "{}", report(&text));
    assert!(text.contains("every seed passed"), "{}", report(&text));
    let faults = text
        .lines()
        .find(|l| l.starts_with("faults exercised:"))
        .unwrap_or_default();
    for kind in ["partition", "crash and restart", "leader isolation"] {
        assert!(faults.contains(kind), "{kind} never exercised: {faults}");
    }
}

#[test]
fn one_seed_replays_the_same_run() {
    let (ok, text) = simulation(&["--seed", "11", "--determinism"]);
    assert!(
        text.contains("have the same trace digest"),
        "{}",
        report(&text)
    );
    assert!(ok, "{}", report(&text));
}

#[test]
fn every_exercise_meets_its_expectation() {
    for scenario in [
        "read_transient_503",
        "write_response_lost_after_accept",
        "sustained_dependency_failure",
        "budget_exhausted",
        "one_slow_of_twenty",
        "isolated_leader_reads",
        // incident_cost: the comparison below runs it in every setup.
    ] {
        let (ok, text) = simulation(&["--seed", "1", "--scenario", scenario, "--summary-only"]);
        assert!(ok, "{scenario}:\n{}", report(&text));
    }
}

/// The slow-tool story in every setup: each run meets its own expectations
/// (the slow tool cost nothing when healthy and never less than the floor,
/// the breaker opened, no other tool failed), sharing breakers costs the
/// fleet less than breakers of each replica's own, and counting calls when
/// they stall costs it less than counting them at their deadlines.
#[test]
fn the_incident_cost_comparison_runs_every_setup() {
    // Five of the seven setups, to keep the debug run short: the ones this
    // test reads.
    let (ok, text) = simulation(&[
        "--seed",
        "3",
        "--incident-cost",
        "--incident-setups",
        "fleet,fleet-finish,fleet-at-deadline,per-replica,healthy",
    ]);
    assert!(ok, "{}", report(&text));
    let lost = |label: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label:?} in:\n{text}"));
        line[label.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no loss in {line:?}"))
    };
    let fleet = lost("16 replicas, Fusebox, in-flight calls ended at the open");
    let finish = lost("16 replicas, Fusebox, in-flight calls finish");
    let per_replica = lost("16 replicas, per-replica breakers only");
    assert!(
        fleet < finish && finish < per_replica,
        "ending calls at the open and sharing should each cost less: {fleet} / {finish} / {per_replica}\n{text}"
    );
    let at_deadline = lost("16 replicas, Fusebox, counted at the deadline");
    assert!(
        fleet < at_deadline,
        "counting stalled calls should cost the fleet less: {fleet} / {at_deadline}\n{text}"
    );
    assert_eq!(lost("16 replicas, Fusebox, tool never slow"), 0.0);
    assert!(text.contains("floor: "), "{text}");
}

#[test]
fn the_ledger_checker_catches_a_leader_answering_reads_unconfirmed() {
    let caught = (1..=4).find(|seed| {
        let seed = seed.to_string();
        let (ok, text) = simulation(&[
            "--seed",
            &seed,
            "--scenario",
            "isolated_leader_reads",
            "--inject-stale-reads",
            "--summary-only",
        ]);
        !ok && text.contains("ledger linearizable")
    });
    assert!(
        caught.is_some(),
        "no seed of isolated_leader_reads caught a stale leader serving ledger reads"
    );
}

#[test]
fn a_power_loss_catches_appends_acknowledged_before_their_sync() {
    // Seeds 65 and 178 each cut a majority's power; with appends
    // acknowledged before their WAL sync, an acknowledged begin vanishes.
    // Without the bug both pass. A change to the workload's policy, or to
    // when the server's tasks wake, moves every trace; these were found again
    // with `--inject-unsynced-appends` over seeds 0..400 after watch streams
    // stopped polling their caller's rights.
    // Seeds where replicas diverge instead (release: "same index") trip an
    // openraft debug assertion in a debug build, so these two are ones the
    // ledger checker catches in both.
    for seed in ["65", "178"] {
        let args = ["--seed", seed, "--summary-only"];
        let (ok, text) = simulation(&args);
        assert!(ok, "seed {seed} without the bug:\n{}", report(&text));
        let (ok, text) = simulation(&[&args[..], &["--inject-unsynced-appends"]].concat());
        let caught = text.contains("ledger linearizable") || text.contains("same index");
        assert!(
            !ok && caught,
            "seed {seed}: a power loss did not expose appends acknowledged unsynced:\n{}",
            report(&text)
        );
    }
}
