//! The faults, applied one at a time from a seeded schedule: each kind
//! once per round, in an order shuffled per round, held a few seconds, then
//! healed, with a quiet spell before the next. Clock offsets stay on
//! through the faults that follow them (leaders then change under skew)
//! until the next skew or the final heal.

use crate::cluster::{Cluster, Run};
use anyhow::Result;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The largest clock offset given a node, either way.
pub const CLOCK_OFFSET_MS_MAX: i64 = 2_000;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// A majority and a minority that cannot reach each other.
    Halves,
    /// Two sides that cannot reach each other, and one node that reaches both.
    Bridge,
    /// One node stops hearing from some others, who still hear it.
    OneWay,
    /// The leader alone on its side.
    IsolateLeader,
    /// Every node drops a share of what it receives.
    Loss,
    /// Every node's relay holds bytes for a while, each way.
    Delay,
    /// The leader is killed (SIGKILL) and restarted later.
    KillLeader,
    /// The leader is frozen (SIGSTOP) and resumed later.
    PauseLeader,
    /// Every node's clock is offset, some ahead, some behind.
    ClockSkew,
    /// A voter is removed under loss and delay, then added back.
    Membership,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Fault::Halves => "partition-halves",
            Fault::Bridge => "partition-bridge",
            Fault::OneWay => "partition-one-way",
            Fault::IsolateLeader => "isolate-leader",
            Fault::Loss => "packet-loss",
            Fault::Delay => "delay",
            Fault::KillLeader => "kill-leader",
            Fault::PauseLeader => "pause-leader",
            Fault::ClockSkew => "clock-skew",
            Fault::Membership => "membership-change",
        };
        f.write_str(name)
    }
}

/// Every kind of fault.
pub const ALL: [Fault; 10] = [
    Fault::Halves,
    Fault::Bridge,
    Fault::OneWay,
    Fault::IsolateLeader,
    Fault::Loss,
    Fault::Delay,
    Fault::KillLeader,
    Fault::PauseLeader,
    Fault::ClockSkew,
    Fault::Membership,
];

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(name: &str) -> Result<Fault, String> {
        ALL.into_iter()
            .find(|f| f.to_string() == name)
            .ok_or_else(|| {
                let names: Vec<String> = ALL.iter().map(Fault::to_string).collect();
                format!("no fault {name:?}; the faults are {}", names.join(", "))
            })
    }
}

/// The schedule's state and what it did.
pub struct Nemesis {
    rng: fastrand::Rng,
    kinds: Vec<Fault>,
    round: Vec<Fault>,
    /// Faults applied, by kind.
    pub applied: BTreeMap<Fault, u64>,
    /// Membership changes that went through.
    pub membership_changes: u64,
}

fn set(slots: &[usize]) -> String {
    let names: Vec<String> = slots.iter().map(|s| format!("n{s}")).collect();
    format!("{{{}}}", names.join(","))
}

impl Nemesis {
    /// A schedule of `kinds` (every kind when empty) drawn from `seed`.
    pub fn new(seed: u64, kinds: &[Fault]) -> Nemesis {
        let kinds = if kinds.is_empty() {
            ALL.to_vec()
        } else {
            kinds.to_vec()
        };
        Nemesis {
            rng: fastrand::Rng::with_seed(seed),
            kinds,
            round: Vec::new(),
            applied: BTreeMap::new(),
            membership_changes: 0,
        }
    }

    /// How long to hold the next fault.
    pub fn hold(&mut self) -> Duration {
        Duration::from_millis(self.rng.u64(4_000..8_000))
    }

    /// How long to stay quiet after a heal.
    pub fn quiet(&mut self) -> Duration {
        Duration::from_millis(self.rng.u64(2_000..4_000))
    }

    /// The next fault kind: every kind once per round.
    pub fn next_fault(&mut self) -> Fault {
        if self.round.is_empty() {
            self.round = self.kinds.clone();
            self.rng.shuffle(&mut self.round);
        }
        self.round.pop().unwrap_or(Fault::Loss)
    }

    /// Applies `fault`; says what it did.
    pub async fn apply(&mut self, cluster: &mut Cluster, fault: Fault) -> Result<String> {
        *self.applied.entry(fault).or_default() += 1;
        let mut slots = cluster.slots();
        self.rng.shuffle(&mut slots);
        let leader = cluster.leader().await;
        let what = match fault {
            Fault::Halves => {
                let (small, big) = slots.split_at(slots.len() / 2);
                cluster.lab().partition(small, big)?;
                format!("{} | {}", set(small), set(big))
            }
            Fault::Bridge => {
                let (middle, rest) = slots.split_at(1);
                let (left, right) = rest.split_at(rest.len() / 2);
                cluster.lab().partition(left, right)?;
                format!(
                    "{} | {} | {}, {} sees both",
                    set(left),
                    set(middle),
                    set(right),
                    set(middle)
                )
            }
            Fault::OneWay => {
                let (deaf, rest) = slots.split_at(1);
                let from = &rest[..rest.len().div_ceil(2)];
                cluster.lab().deafen(deaf[0], from)?;
                format!("{} stops hearing {}", set(deaf), set(from))
            }
            Fault::IsolateLeader => {
                let alone = leader.unwrap_or(slots[0]);
                let rest: Vec<usize> = slots.iter().copied().filter(|s| *s != alone).collect();
                cluster.lab().partition(&[alone], &rest)?;
                format!("leader n{alone} | {}", set(&rest))
            }
            Fault::Loss => {
                let percent = self.rng.u8(5..30);
                cluster.lab().lose(percent)?;
                format!("{percent}% of packets dropped at every node")
            }
            Fault::Delay => {
                let ms = self.rng.u64(20..250);
                for slot in cluster.slots() {
                    cluster.set_delay(slot, ms)?;
                }
                format!("{ms} ms each way at every node")
            }
            Fault::KillLeader => match leader {
                Some(slot) => {
                    cluster.kill(slot)?;
                    format!("kill -9 n{slot}")
                }
                None => "no leader to kill".to_owned(),
            },
            Fault::PauseLeader => match leader {
                Some(slot) => {
                    cluster.pause(slot)?;
                    format!("SIGSTOP n{slot}")
                }
                None => "no leader to pause".to_owned(),
            },
            Fault::ClockSkew => {
                let mut offsets = Vec::new();
                for slot in cluster.slots() {
                    let ms = self.rng.i64(-CLOCK_OFFSET_MS_MAX..=CLOCK_OFFSET_MS_MAX);
                    cluster.set_clock(slot, ms)?;
                    offsets.push(format!("n{slot} {ms:+} ms"));
                }
                offsets.join(", ")
            }
            Fault::Membership => {
                cluster.lab().lose(5)?;
                for slot in cluster.slots() {
                    cluster.set_delay(slot, 30)?;
                }
                let id = slots[0];
                let is_leader = if leader == Some(id) {
                    " (the leader)"
                } else {
                    ""
                };
                match cluster.remove_member(id).await {
                    Ok(()) => {
                        self.membership_changes += 1;
                        format!("5% loss, 30 ms delay; removed n{id}{is_leader}")
                    }
                    Err(e) => {
                        format!("5% loss, 30 ms delay; removing n{id}{is_leader} failed: {e}")
                    }
                }
            }
        };
        Ok(what)
    }

    /// Removes the network faults and brings every process back; adds back
    /// any slot the leader does not count as a voter (a removal may have
    /// gone through even when its answer was lost). Clock offsets stay.
    /// Says what it did.
    pub async fn heal(&mut self, cluster: &mut Cluster) -> Result<String> {
        cluster.lab().heal()?;
        let mut did = Vec::new();
        for slot in cluster.slots() {
            cluster.set_delay(slot, 0)?;
            match cluster.run_of(slot) {
                Run::Paused => did.push(format!("SIGCONT n{slot}")),
                Run::Down => did.push(format!("restart n{slot}")),
                Run::Up => {}
            }
        }
        cluster.revive_all()?;
        if let Some(missing) = self.missing_voters(cluster).await {
            for id in missing {
                match cluster.add_member(id).await {
                    Ok(()) => {
                        self.membership_changes += 1;
                        did.push(format!("added n{id} back"));
                    }
                    Err(e) => did.push(format!("adding n{id} back failed: {e}")),
                }
            }
        }
        Ok(if did.is_empty() {
            "network healed".to_owned()
        } else {
            format!("network healed; {}", did.join(", "))
        })
    }

    /// The slots the leader does not count as voters, once a leader
    /// answers (within 10 s).
    async fn missing_voters(&self, cluster: &Cluster) -> Option<Vec<usize>> {
        for _ in 0..20 {
            if let Some(leader) = cluster.leader().await {
                let voters = cluster.voters(leader).await?;
                let slots = cluster.slots();
                return Some(slots.into_iter().filter(|s| !voters.contains(s)).collect());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        None
    }

    /// The final heal: also every clock back to true time, and every slot
    /// a voter again, retried for up to a minute.
    pub async fn heal_all(&mut self, cluster: &mut Cluster) -> Result<String> {
        for slot in cluster.slots() {
            cluster.set_clock(slot, 0)?;
        }
        let mut said = self.heal(cluster).await?;
        for _ in 0..12 {
            if self.missing_voters(cluster).await == Some(Vec::new()) {
                return Ok(format!("{said}; clocks true"));
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            said = self.heal(cluster).await?;
        }
        anyhow::bail!("not every node is a voter again a minute after the heal: {said}")
    }
}
