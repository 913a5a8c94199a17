//! Incident cost: what one slow tool costs a fleet, in virtual time.
//!
//! The slow-tool story (seed 000), measured: sixteen agent replicas each run
//! turns of six calls drawn from twenty tools, one after another, and at a
//! seeded moment the tax lookup stops answering in under a second and
//! answers in forty. Every call of the slow tool is recorded: when it
//! started, when a healthy tool would have answered it, and when it ended.
//! What a call *lost* is how much later than that healthy answer it ended
//! (a call refused fast by an open breaker lost nothing).
//!
//! The same workload runs in several setups ([`Setup`]): the fleet sharing
//! its breakers through Fusebox (with calls in flight ended when the
//! breaker opens, or left to finish), every replica keeping breakers of its
//! own under the same thresholds (each in a namespace of its own on the same
//! cluster, so the engine, the reports and the watch are the same code and
//! only the sharing differs), one replica alone, and the fleet with a
//! healthy tool (the baseline for the turns of the other tools). Each runs
//! with the slow tool's calls counted as timeouts once they go unanswered
//! for [`STALLED_AFTER_MS`] (`stalled_after_ms`), and the fleet and the
//! per-replica breakers also without it, counting each call at its deadline.
//!
//! The **floor** is what an ideal shared breaker with the same thresholds
//! must lose: no breaker can open before the fleet has counted
//! `consecutive_failures` timeouts, so the earliest trip is the fourth
//! moment a slow call could be counted (its deadline, or its stall when the
//! setup counts stalls); every call already waiting then (or before) loses
//! the time up to it. The ideal breaker must then also probe the tool each
//! time its open period ends, and a probe of a tool still slow loses at
//! least the time until it can be counted. [`Figures`] gives the floor two
//! ways: for the calls in flight when the tool turned slow only, and for
//! every call that started before the earliest trip and the probes after.

use crate::world::World;
use std::fmt;

/// Replicas in the story's fleet.
pub const FLEET: u64 = 16;
/// The slow tool.
pub const SLOW_TOOL: (&str, &str) = ("tax", "tax_lookup");
/// How late the slow tool answers once it turns slow (the story's 40 s).
pub const SLOW_ANSWER_MS: u64 = 40_000;
/// The slow tool's deadline (the story's 10 s).
pub const SLOW_TOOL_TIMEOUT_MS: u64 = 10_000;
/// How long a call of the slow tool goes unanswered before it counts as a
/// timeout, when the setup counts stalls: more than twice its slowest
/// healthy answer (900 ms), so no healthy call is counted.
pub const STALLED_AFTER_MS: u64 = 2_000;
/// The slow tool's slowest healthy answer.
pub const SLOWEST_HEALTHY_MS: u64 = 900;
/// Timeouts in a row that open a breaker (the story's four).
pub const TRIP_FAILURES: usize = 4;
/// How long a breaker stays open before it lets a probe through.
pub const OPEN_MS: u64 = 20_000;
/// How long after it turns slow calls are counted: long enough for every
/// replica of the per-replica fleet to trip on its own, short of a probe
/// cycle of the shared breaker's.
pub const HORIZON_MS: u64 = 60_000;
/// The earliest and latest moment (simulated ms) the tool turns slow.
pub const ONSET_MS: std::ops::Range<u64> = 6_000..12_000;
/// Calls per turn, one after another.
pub const TURN_CALLS: usize = 6;

/// The policy of an incident run: the story's deadlines and breaker, no
/// retries (a retry of a timed-out call doubles the wait in every setup
/// alike, so leaving it out keeps the comparison about the breakers), and
/// `in_flight_on_open` and `stalled_after_ms` as the setup says.
pub fn policy(setup: Setup) -> String {
    let on_open = if setup.end_in_flight { "end" } else { "finish" };
    let stalled = if setup.count_stalls {
        format!("stalled_after_ms = {STALLED_AFTER_MS}")
    } else {
        String::new()
    };
    format!(
        r#"
[defaults]
timeout_ms = 3000
effect = "read_only"
in_flight_on_open = "{on_open}"

[defaults.retry]
max_attempts = 1

[defaults.breaker]
consecutive_failures = {TRIP_FAILURES}
min_reporters = 1
open_ms = {OPEN_MS}
concurrent_probes = 1
probe_lease_ms = 15000

# The whole-server breaker is for a server that is down, not for one slow
# tool: with the tools' threshold, four timeouts of the tax lookup in a row
# would take its healthy sibling tax_rates out with it (seen in this
# scenario). A streak this long means the server is out.
[servers.tax.breaker]
consecutive_failures = 25

[servers.tax.tools.tax_lookup]
timeout_ms = {SLOW_TOOL_TIMEOUT_MS}
{stalled}

[servers.tax.tools.tax_lookup.breaker]
consecutive_failures = {TRIP_FAILURES}
"#
    )
}

/// One way of running the story.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The replicas share their breakers (one namespace), or each keeps
    /// its own (a namespace per replica).
    pub shared: bool,
    /// `in_flight_on_open = "end"`.
    pub end_in_flight: bool,
    /// The slow tool's calls count as timeouts once they stall
    /// (`stalled_after_ms`), not only at their deadline.
    pub count_stalls: bool,
    /// The tax lookup turns slow (else the run is the healthy baseline).
    pub slow: bool,
}

impl Default for Setup {
    /// The fleet sharing through Fusebox, ending calls in flight at the trip.
    fn default() -> Self {
        Setup {
            shared: true,
            end_in_flight: true,
            count_stalls: true,
            slow: true,
        }
    }
}

impl Setup {
    /// How long after it starts a call of the slow tool can first be
    /// counted against its breaker.
    pub fn counted_after_ms(self) -> u64 {
        if self.count_stalls {
            STALLED_AFTER_MS
        } else {
            SLOW_TOOL_TIMEOUT_MS
        }
    }

    /// The namespace replica `index` works in.
    pub fn namespace(self, index: u64) -> String {
        if self.shared {
            crate::tools::NS.to_owned()
        } else {
            format!("{}-r{index}", crate::tools::NS)
        }
    }

    /// Every namespace the operator applies the policy to, for `replicas`.
    pub fn namespaces(self, replicas: u64) -> Vec<String> {
        if self.shared {
            vec![self.namespace(1)]
        } else {
            (1..=replicas).map(|r| self.namespace(r)).collect()
        }
    }
}

/// The setups the comparison runs, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    /// Sixteen replicas sharing breakers through Fusebox, calls in flight
    /// ended when the breaker opens.
    Fleet,
    /// The same, calls in flight left to finish.
    FleetFinish,
    /// The fleet ending calls at the open, each call counted at its deadline.
    FleetAtDeadline,
    /// Sixteen replicas, each with breakers of its own.
    PerReplica,
    /// The same, each call counted at its deadline.
    PerReplicaAtDeadline,
    /// One replica.
    Alone,
    /// Sixteen replicas sharing breakers, the tool never slow.
    Healthy,
}

impl Named {
    /// Every setup, in the order the comparison prints them.
    pub const ALL: [Named; 7] = [
        Named::Fleet,
        Named::FleetFinish,
        Named::FleetAtDeadline,
        Named::PerReplica,
        Named::PerReplicaAtDeadline,
        Named::Alone,
        Named::Healthy,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Named::Fleet => "fleet",
            Named::FleetFinish => "fleet-finish",
            Named::FleetAtDeadline => "fleet-at-deadline",
            Named::PerReplica => "per-replica",
            Named::PerReplicaAtDeadline => "per-replica-at-deadline",
            Named::Alone => "alone",
            Named::Healthy => "healthy",
        }
    }

    /// What it is, for the table.
    pub fn label(self) -> &'static str {
        match self {
            Named::Fleet => "16 replicas, Fusebox, in-flight calls ended at the open",
            Named::FleetFinish => "16 replicas, Fusebox, in-flight calls finish",
            Named::FleetAtDeadline => "16 replicas, Fusebox, counted at the deadline",
            Named::PerReplica => "16 replicas, per-replica breakers only",
            Named::PerReplicaAtDeadline => "16 replicas, per-replica, counted at the deadline",
            Named::Alone => "1 replica alone",
            Named::Healthy => "16 replicas, Fusebox, tool never slow",
        }
    }

    /// Its setup.
    pub fn setup(self) -> Setup {
        let fleet = Setup::default();
        match self {
            Named::Fleet | Named::Alone => fleet,
            Named::FleetFinish => Setup {
                end_in_flight: false,
                ..fleet
            },
            Named::FleetAtDeadline => Setup {
                count_stalls: false,
                ..fleet
            },
            Named::PerReplica => Setup {
                shared: false,
                ..fleet
            },
            Named::PerReplicaAtDeadline => Setup {
                shared: false,
                count_stalls: false,
                ..fleet
            },
            Named::Healthy => Setup {
                slow: false,
                ..fleet
            },
        }
    }

    /// Its replicas.
    pub fn replicas(self) -> u64 {
        match self {
            Named::Alone => 1,
            _ => FLEET,
        }
    }
}

impl std::str::FromStr for Named {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Named::ALL
            .into_iter()
            .find(|n| n.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Named::ALL.iter().map(|n| n.name()).collect();
                format!("unknown incident setup {s:?}; known: {}", names.join(", "))
            })
    }
}

/// The comparison of one seed's setups, as printed: each setup's loss, the
/// floor, and the issue's goals with their ratios.
pub fn comparison(seed: u64, rows: &[(Named, Figures)]) -> String {
    use std::fmt::Write as _;
    let get = |n: Named| rows.iter().find(|(m, _)| *m == n).map(|(_, f)| f);
    let mut out = String::new();
    let onset = rows.first().map_or(0, |(_, f)| f.onset_ms);
    let _ = writeln!(
        out,
        "incident cost, seed {seed}: {}/{} answers in {} s from {:.1} s on; calls counted for {} s",
        SLOW_TOOL.0,
        SLOW_TOOL.1,
        SLOW_ANSWER_MS / 1_000,
        seconds(onset),
        HORIZON_MS / 1_000
    );
    let _ = writeln!(
        out,
        "{:<58} {:>9} {:>6} {:>9} {:>8} {:>6} {:>11}",
        "setup", "lost (s)", "calls", "timed out", "refused", "ended", "other p99"
    );
    for (named, f) in rows {
        let _ = writeln!(
            out,
            "{:<58} {:>9.1} {:>6} {:>9} {:>8} {:>6} {:>8} ms",
            named.label(),
            f.lost_s,
            f.calls,
            f.timed_out,
            f.refused,
            f.ended_at_open,
            f.other_turn_p99_ms
        );
    }
    let Some(fleet) = get(Named::Fleet) else {
        return out;
    };
    let _ = writeln!(
        out,
        "floor: {:.1} s (an ideal shared breaker, tripping at the fleet's fourth counted timeout at {:.1} s, each call counted {} s after it started, ending every call waiting then, and sending {} probes, each ended when it is counted); of it, the calls in flight at the onset: {:.1} s",
        fleet.floor_s,
        seconds(fleet.earliest_trip_ms.unwrap_or(0)),
        seconds(Named::Fleet.setup().counted_after_ms()),
        fleet.floor_probes,
        fleet.floor_in_flight_s
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::INFINITY };
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let to_floor = ratio(fleet.lost_s, fleet.floor_s);
    let _ = writeln!(
        out,
        "goal: fleet ≤ 1.2 × floor: {to_floor:.2} × ({}); against the in-flight-only floor: {:.2} ×",
        verdict(to_floor <= 1.2),
        ratio(fleet.lost_s, fleet.floor_in_flight_s)
    );
    if let Some(per) = get(Named::PerReplica) {
        let share = ratio(fleet.lost_s, per.lost_s);
        let _ = writeln!(
            out,
            "goal: fleet ≤ 1/8 of per-replica: 1/{:.1} ({}); the floor itself is 1/{:.1} of per-replica",
            1.0 / share,
            verdict(share <= 0.125),
            per.lost_s / fleet.floor_s
        );
    }
    if let (Some(fleet), Some(per)) = (
        get(Named::FleetAtDeadline),
        get(Named::PerReplicaAtDeadline),
    ) {
        let _ = writeln!(
            out,
            "counted at the deadline instead: fleet 1/{:.1} of per-replica, {:.2} × its own floor of {:.1} s",
            per.lost_s / fleet.lost_s,
            ratio(fleet.lost_s, fleet.floor_s),
            fleet.floor_s
        );
    }
    if let Some(healthy) = get(Named::Healthy) {
        let p99 = ratio(
            fleet.other_turn_p99_ms as f64,
            healthy.other_turn_p99_ms as f64,
        );
        let _ = writeln!(
            out,
            "goal: other tools' turn p99 within 5% of healthy: {} ms against {} ms, {:+.1}% ({})",
            fleet.other_turn_p99_ms,
            healthy.other_turn_p99_ms,
            (p99 - 1.0) * 100.0,
            verdict(p99 <= 1.05)
        );
    }
    out
}

/// When the tool turns slow in a run of `seed`.
pub fn onset_ms(seed: u64) -> u64 {
    fastrand::Rng::with_seed(seed ^ 0x0051_0e70).u64(ONSET_MS)
}

/// When a tool call that a healthy tool would answer at `healthy_end_ms`
/// is answered, the slow tool turning slow at `onset_ms`: a call still
/// waiting at the onset, or started after it, stalls.
pub fn answer_ms(start_ms: u64, healthy_end_ms: u64, onset_ms: u64) -> u64 {
    if healthy_end_ms <= onset_ms {
        healthy_end_ms
    } else {
        start_ms.max(onset_ms) + SLOW_ANSWER_MS
    }
}

/// How a call of the slow tool ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The tool answered.
    Answered,
    /// Its deadline passed.
    TimedOut,
    /// Refused before it reached the tool: by an open breaker, or a probe
    /// permit denied.
    Refused,
    /// Ended in flight when its breaker opened.
    EndedAtOpen,
    /// Anything else (a cluster error).
    Other,
}

/// One call of the slow tool.
#[derive(Clone, Copy, Debug)]
pub struct SlowCall {
    /// When it started (simulated ms).
    pub start_ms: u64,
    /// When a healthy tool would have answered it.
    pub healthy_end_ms: u64,
    /// When it ended.
    pub end_ms: u64,
    /// How.
    pub ending: Ending,
}

impl SlowCall {
    /// What it lost: how much later than a healthy answer it ended.
    pub fn lost_ms(&self) -> u64 {
        self.end_ms.saturating_sub(self.healthy_end_ms)
    }
}

/// One turn, as the other nineteen tools saw it.
#[derive(Clone, Copy, Debug)]
pub struct Turn {
    /// When it started.
    pub start_ms: u64,
    /// Time spent in calls of the other tools.
    pub other_tools_ms: u64,
    /// Calls of the other tools that failed or were refused.
    pub other_tools_failed: u32,
}

/// What one run of the story measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Figures {
    /// When the tool turned slow.
    pub onset_ms: u64,
    /// Seconds the fleet lost to the slow tool.
    pub lost_s: f64,
    /// The earliest moment a breaker with the story's thresholds could
    /// open: the fourth moment a slow call could be counted, at its stall
    /// or its deadline as the setup counts (none if fewer than four calls
    /// met the slow tool).
    pub earliest_trip_ms: Option<u64>,
    /// The floor as the issue words it: the calls in flight at the onset,
    /// each ended at the earliest trip.
    pub floor_in_flight_s: f64,
    /// The floor of an ideal shared breaker: every call that started before
    /// the earliest trip, each ended then, and its probes.
    pub floor_s: f64,
    /// The probes the ideal breaker sends in the counted window, each
    /// losing at least the time until it can be counted less the slowest
    /// healthy answer.
    pub floor_probes: u64,
    /// Calls of the slow tool: all, timed out, refused fast, ended at the open.
    pub calls: u64,
    /// Timed out.
    pub timed_out: u64,
    /// Refused fast by an open breaker.
    pub refused: u64,
    /// Ended in flight when the breaker opened.
    pub ended_at_open: u64,
    /// p99 over turns in the counted window of the time spent on other tools.
    pub other_turn_p99_ms: u64,
    /// Turns in the counted window.
    pub turns: u64,
    /// Calls of other tools that failed or were refused in the window.
    pub other_tools_failed: u64,
}

impl Figures {
    /// The figures of a run whose tool turned slow at `onset_ms`.
    pub fn of(world: &World, onset_ms: u64) -> Figures {
        let window = onset_ms..onset_ms + HORIZON_MS;
        let calls: Vec<SlowCall> = world
            .incident_calls
            .borrow()
            .iter()
            .filter(|c| c.start_ms < window.end && c.healthy_end_ms > onset_ms)
            .copied()
            .collect();
        let counted_after = world.incident.counted_after_ms();
        let mut counted: Vec<u64> = calls
            .iter()
            .filter(|c| c.ending != Ending::Refused)
            .map(|c| c.start_ms + counted_after)
            .collect();
        counted.sort_unstable();
        let earliest_trip_ms = counted.get(TRIP_FAILURES - 1).copied();
        let ideal_loss = |c: &SlowCall, trip: u64| {
            (c.start_ms + SLOW_TOOL_TIMEOUT_MS)
                .min(trip)
                .saturating_sub(c.healthy_end_ms)
        };
        let floor_probes = earliest_trip_ms.map_or(0, |trip| {
            ideal_probes(trip, counted_after, window.end).count() as u64
        });
        let probe_loss = counted_after.saturating_sub(SLOWEST_HEALTHY_MS);
        let floor = |in_flight_only: bool| -> u64 {
            let Some(trip) = earliest_trip_ms else {
                return 0;
            };
            let probes = if in_flight_only {
                0
            } else {
                floor_probes * probe_loss
            };
            calls
                .iter()
                .filter(|c| c.start_ms < trip && c.ending != Ending::Refused)
                .filter(|c| !in_flight_only || c.start_ms <= onset_ms)
                .map(|c| ideal_loss(c, trip))
                .sum::<u64>()
                + probes
        };
        let count = |e: Ending| calls.iter().filter(|c| c.ending == e).count() as u64;
        let turns: Vec<Turn> = world
            .incident_turns
            .borrow()
            .iter()
            .filter(|t| window.contains(&t.start_ms))
            .copied()
            .collect();
        let mut other: Vec<u64> = turns.iter().map(|t| t.other_tools_ms).collect();
        other.sort_unstable();
        let p99 = match other.len() {
            0 => 0,
            n => other[(n * 99).div_ceil(100) - 1],
        };
        Figures {
            onset_ms,
            lost_s: seconds(calls.iter().map(SlowCall::lost_ms).sum()),
            earliest_trip_ms,
            floor_in_flight_s: seconds(floor(true)),
            floor_s: seconds(floor(false)),
            floor_probes,
            calls: calls.len() as u64,
            timed_out: count(Ending::TimedOut),
            refused: count(Ending::Refused),
            ended_at_open: count(Ending::EndedAtOpen),
            other_turn_p99_ms: p99,
            turns: turns.len() as u64,
            other_tools_failed: turns.iter().map(|t| u64::from(t.other_tools_failed)).sum(),
        }
    }
}

/// When the probes of an ideal breaker that opened at `trip` start, before
/// `end`: each time its open period ends (at the earliest, so as many as
/// can fit), each failing `counted_after` ms after it starts, as the tool
/// is still slow, which opens the breaker again.
fn ideal_probes(trip: u64, counted_after: u64, end: u64) -> impl Iterator<Item = u64> {
    std::iter::successors(Some(trip + OPEN_MS), move |start| {
        Some(start + counted_after + OPEN_MS)
    })
    .take_while(move |start| *start < end)
}

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1_000.0
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lost {:.1} s over {} calls of the slow tool ({} timed out, {} refused fast, {} ended at the open); other tools' turn p99 {} ms over {} turns, {} of their calls failed",
            self.lost_s,
            self.calls,
            self.timed_out,
            self.refused,
            self.ended_at_open,
            self.other_turn_p99_ms,
            self.turns,
            self.other_tools_failed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_answered_before_the_onset_is_not_slowed_and_one_waiting_then_stalls() {
        assert_eq!(answer_ms(100, 400, 500), 400);
        assert_eq!(answer_ms(100, 600, 500), 500 + SLOW_ANSWER_MS);
        assert_eq!(answer_ms(700, 900, 500), 700 + SLOW_ANSWER_MS);
    }

    fn call(start_ms: u64, healthy: u64, end_ms: u64, ending: Ending) -> SlowCall {
        SlowCall {
            start_ms,
            healthy_end_ms: start_ms + healthy,
            end_ms,
            ending,
        }
    }

    #[test]
    fn the_floor_ends_every_call_waiting_at_the_fourth_deadline() {
        let mut world = World::new(1, 3, Default::default());
        world.incident.count_stalls = false;
        let onset = 10_000;
        let timeout = SLOW_TOOL_TIMEOUT_MS;
        world.incident_calls.borrow_mut().extend([
            // Answered before the onset: not counted.
            call(9_000, 500, 9_500, Ending::Answered),
            // In flight at the onset: deadline 19.8 s.
            call(9_800, 300, 9_800 + timeout, Ending::TimedOut),
            call(11_000, 300, 11_000 + timeout, Ending::TimedOut),
            call(12_000, 300, 12_000 + timeout, Ending::TimedOut),
            // The fourth deadline: 23 s.
            call(13_000, 300, 13_000 + timeout, Ending::TimedOut),
            // Waiting at 23 s, ended at the open at 23.5 s.
            call(20_000, 300, 23_500, Ending::EndedAtOpen),
            call(24_000, 300, 24_000, Ending::Refused),
        ]);
        let figures = Figures::of(&world, onset);
        assert_eq!(figures.earliest_trip_ms, Some(23_000));
        assert_eq!(figures.calls, 6);
        // Lost: 9.7 + 9.7 + 9.7 + 9.7 + 3.2 + 0.
        assert!((figures.lost_s - 42.0).abs() < 1e-9, "{figures}");
        // Floor: the same calls ended at 23 s, 9.7 × 4 + 2.7, and one
        // probe at 43 s (the next would start at 73 s, past the window),
        // counted at its deadline: 10 - 0.9.
        assert_eq!(figures.floor_probes, 1);
        assert!((figures.floor_s - 50.6).abs() < 1e-9, "{}", figures.floor_s);
        // As worded: the call in flight at the onset only.
        assert!((figures.floor_in_flight_s - 9.7).abs() < 1e-9);
        assert_eq!(
            (figures.timed_out, figures.refused, figures.ended_at_open),
            (4, 1, 1)
        );
    }

    #[test]
    fn counting_stalls_moves_the_floor_to_the_fourth_stall() {
        let world = World::new(1, 3, Default::default());
        assert!(world.incident.count_stalls);
        let onset = 10_000;
        let timeout = SLOW_TOOL_TIMEOUT_MS;
        world.incident_calls.borrow_mut().extend([
            call(9_800, 300, 9_800 + timeout, Ending::TimedOut),
            call(11_000, 300, 13_100, Ending::EndedAtOpen),
            call(10_500, 300, 13_100, Ending::EndedAtOpen),
            // Its stall, at 13 s, is the fourth: the earliest trip.
            call(11_000, 300, 13_100, Ending::EndedAtOpen),
            // Started before the trip, which ends it at once.
            call(12_900, 300, 13_100, Ending::EndedAtOpen),
            call(14_000, 300, 14_000, Ending::Refused),
        ]);
        let figures = Figures::of(&world, onset);
        assert_eq!(figures.earliest_trip_ms, Some(13_000));
        // Floor: each call ended at 13 s: 2.9 + 1.7 + 2.2 + 1.7 + 0 (its
        // healthy answer would have come at 13.2 s), and probes at 33 s
        // and 55 s, each counted at its stall: 2 × (2 - 0.9).
        assert_eq!(figures.floor_probes, 2);
        assert!((figures.floor_s - 10.7).abs() < 1e-9, "{}", figures.floor_s);
        assert!((figures.floor_in_flight_s - 2.9).abs() < 1e-9);
        assert!(figures.lost_s >= figures.floor_s, "{figures}");
    }

    #[test]
    fn the_policy_parses_and_says_what_the_setup_asks() {
        use fusebox_core::policy::{InFlightOnOpen, PolicyDocument, PolicyFormat};
        for end in [true, false] {
            let setup = Setup {
                end_in_flight: end,
                ..Setup::default()
            };
            let document =
                PolicyDocument::parse(&policy(setup), PolicyFormat::Toml).expect("parses");
            assert_eq!(document.validate(), Vec::new());
            let tax = document.tool_policy(
                &fusebox_core::ServerName::new(SLOW_TOOL.0).expect("name"),
                &fusebox_core::ToolName::new(SLOW_TOOL.1).expect("name"),
            );
            assert_eq!(tax.timeout_ms, SLOW_TOOL_TIMEOUT_MS);
            let expected = if end {
                InFlightOnOpen::End
            } else {
                InFlightOnOpen::Finish
            };
            assert_eq!(tax.in_flight_on_open, expected);
            assert_eq!(tax.stalled_after_ms, Some(STALLED_AFTER_MS));
        }
        let at_deadline = Setup {
            count_stalls: false,
            ..Setup::default()
        };
        let document =
            PolicyDocument::parse(&policy(at_deadline), PolicyFormat::Toml).expect("parses");
        let tax = document.tool_policy(
            &fusebox_core::ServerName::new(SLOW_TOOL.0).expect("name"),
            &fusebox_core::ToolName::new(SLOW_TOOL.1).expect("name"),
        );
        assert_eq!(tax.stalled_after_ms, None);
    }
}
