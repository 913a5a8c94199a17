//! Scenarios: how the scripted tools behave over a run, and which faults the
//! harness injects. `Chaos` draws everything from the seed; the named ones
//! replay the runbook's exercises.

use crate::faults::{Fault, Planned};
use crate::tools::Behaviour;
use fusebox_client::{OutcomeClass, ToolRef};
use std::fmt;
use std::str::FromStr;

/// A run's script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Random faults from the seed; `search/lookup` fails outright between
    /// 8 s and 14 s, and every tool misbehaves now and then.
    Chaos,
    /// Runbook: a read answers 503 once, then succeeds.
    ReadTransient503,
    /// Runbook: a write is accepted but its response is lost.
    WriteResponseLostAfterAccept,
    /// Runbook: a read's backend answers 503 for 90 s.
    SustainedDependencyFailure,
    /// Runbook: a slow read meets a turn's budget.
    BudgetExhausted,
    /// Seed 000: one slow tool out of twenty.
    OneSlowOfTwenty,
    /// The leader is cut off from its peers (not from clients) twice while
    /// replicas write and read two contended keys: what a stale leader would
    /// answer, if it answered reads, is what the ledger checker looks for.
    IsolatedLeaderReads,
    /// Seed 000's story measured: sixteen replicas, twenty tools, the tax
    /// lookup turns slow at a seeded moment; what the fleet loses to it
    /// ([`crate::incident`]).
    IncidentCost,
}

impl Scenario {
    /// Every scenario, in order.
    pub const ALL: [Scenario; 8] = [
        Scenario::Chaos,
        Scenario::ReadTransient503,
        Scenario::WriteResponseLostAfterAccept,
        Scenario::SustainedDependencyFailure,
        Scenario::BudgetExhausted,
        Scenario::OneSlowOfTwenty,
        Scenario::IsolatedLeaderReads,
        Scenario::IncidentCost,
    ];

    /// The scenario's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Chaos => "chaos",
            Scenario::ReadTransient503 => "read_transient_503",
            Scenario::WriteResponseLostAfterAccept => "write_response_lost_after_accept",
            Scenario::SustainedDependencyFailure => "sustained_dependency_failure",
            Scenario::BudgetExhausted => "budget_exhausted",
            Scenario::OneSlowOfTwenty => "one_slow_of_twenty",
            Scenario::IsolatedLeaderReads => "isolated_leader_reads",
            Scenario::IncidentCost => "incident_cost",
        }
    }

    /// Whether the harness injects random faults.
    pub fn faults(self) -> bool {
        matches!(self, Scenario::Chaos)
    }

    /// The scenario's own faults, when it does not draw them from the seed.
    pub fn fixed_faults(self) -> Vec<Planned> {
        match self {
            Scenario::IsolatedLeaderReads => vec![
                Planned {
                    at_ms: 4_000,
                    lasts_ms: 4_000,
                    fault: Fault::IsolateLeader,
                },
                Planned {
                    at_ms: 10_000,
                    lasts_ms: 3_000,
                    fault: Fault::IsolateLeader,
                },
            ],
            _ => Vec::new(),
        }
    }

    /// How long replicas run their workload (simulated ms).
    pub fn workload_ms(self) -> u64 {
        match self {
            Scenario::Chaos => 25_000,
            Scenario::ReadTransient503 | Scenario::BudgetExhausted => 8_000,
            Scenario::WriteResponseLostAfterAccept => 10_000,
            Scenario::SustainedDependencyFailure => {
                crate::exercises::OUTAGE_FROM_MS + crate::exercises::OUTAGE_MS + 15_000
            }
            Scenario::OneSlowOfTwenty => 30_000,
            Scenario::IsolatedLeaderReads => 15_000,
            Scenario::IncidentCost => crate::incident::ONSET_MS.end + crate::incident::HORIZON_MS,
        }
    }

    /// Checks the scenario's own expectations at the end of a run.
    pub fn judge(self, world: &crate::world::World, end_ms: u64) {
        crate::exercises::judge(world, self, end_ms);
    }

    /// How `tool` behaves for a call starting at `at_ms`.
    pub fn behaviour(self, tool: &ToolRef, at_ms: u64, rng: &mut fastrand::Rng) -> Behaviour {
        let roll = rng.u8(0..100);
        let ms = rng.u64(20..80);
        match (self, tool.tool()) {
            (Scenario::Chaos, "lookup") if (8_000..14_000).contains(&at_ms) => Behaviour::Fails {
                ms: 20,
                class: OutcomeClass::ServerError,
            },
            (Scenario::Chaos, "lookup") => match roll {
                0..=89 => Behaviour::Healthy { ms },
                90..=94 => Behaviour::Fails {
                    ms,
                    class: OutcomeClass::ServerError,
                },
                95..=97 => Behaviour::IsError { ms },
                _ => Behaviour::Hangs,
            },
            (Scenario::Chaos, "charge") => match roll {
                0..=94 => Behaviour::Healthy { ms: ms + 20 },
                _ => Behaviour::Hangs,
            },
            (Scenario::Chaos, _) => match roll {
                0..=89 => Behaviour::Healthy { ms },
                _ => Behaviour::Fails {
                    ms,
                    class: OutcomeClass::Transport,
                },
            },
            _ => Behaviour::Healthy { ms },
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Scenario::ALL.iter().map(|sc| sc.name()).collect();
                format!("unknown scenario {s:?}; known: {}", names.join(", "))
            })
    }
}
