//! The breaker side: probers trip one breaker with failure reports and
//! probe it through half-open spells, each keeping the permits it was
//! granted; a watcher reads every node's own view of the breaker. Checked:
//! - the fleet never held more probe permits at once than the policy
//!   allows (from the permits the probers were granted);
//! - no node ever shows more live permits than allowed, or a breaker
//!   generation going back;
//! - after the heal, every node shows the same breaker at the same revision.

use crate::cluster::{self, addr};
use crate::workload::{RunClock, NS};
use anyhow::{bail, Result};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::acquire_probe_response::Result as Acquired;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::policy_client::PolicyClient;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::transport::Channel;

/// Permits the policy allows at once.
pub const CONCURRENT_PROBES: u32 = 2;
/// Each permit's lease, asked for explicitly.
const PROBE_LEASE_MS: u64 = 20_000;
/// Deadline of one breaker call.
const RPC_TIMEOUT: Duration = Duration::from_secs(2);
/// The breaker's server and tool.
const SERVER: &str = "flaky";
const TOOL: &str = "call";

/// The policy applied before the workload: trips after a few failures,
/// half-opens quickly, and allows [`CONCURRENT_PROBES`] probes at once.
pub const POLICY: &str = r#"
[defaults]
timeout_ms = 1000
effect = "read_only"

[defaults.breaker]
window_ms = 10000
minimum_calls = 6
failure_ratio = 0.5
min_reporters = 1
open_ms = 500
concurrent_probes = 2
probe_successes = 2
probe_lease_ms = 20000
"#;

/// A permit a prober was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permit {
    /// The breaker generation it belongs to.
    pub generation: u64,
    /// When it was asked for: the lease runs from a later instant.
    pub call: u64,
    /// When the grant arrived: it was held from then at the latest.
    pub granted: u64,
    /// When its release was sent; `None` if never sent.
    pub released: Option<u64>,
}

impl Permit {
    /// The span the permit was certainly held in, when its lease may have
    /// been judged by clocks up to `skew_ms` apart: from the grant's arrival
    /// to the release being sent or the earliest its lease can have ended.
    fn surely_held(&self, skew_ms: u64, end: u64) -> Option<(u64, u64)> {
        let lapse = (self.call + PROBE_LEASE_MS).saturating_sub(skew_ms);
        let until = self.released.unwrap_or(end).min(lapse);
        (until > self.granted).then_some((self.granted, until))
    }
}

/// The most permits of one generation certainly held at one instant,
/// with that generation.
pub fn most_held(permits: &[Permit], skew_ms: u64, end: u64) -> (u32, u64) {
    let mut by_generation: BTreeMap<u64, Vec<(u64, i32)>> = BTreeMap::new();
    for p in permits {
        if let Some((from, until)) = p.surely_held(skew_ms, end) {
            let edges = by_generation.entry(p.generation).or_default();
            edges.push((from, 1));
            edges.push((until, -1));
        }
    }
    let mut most = (0u32, 0u64);
    for (generation, mut edges) in by_generation {
        // A release at the instant of a grant does not overlap it.
        edges.sort_unstable();
        let mut held = 0i32;
        for (_, step) in edges {
            held += step;
            let now = u32::try_from(held).unwrap_or(0);
            if now > most.0 {
                most = (now, generation);
            }
        }
    }
    most
}

/// What the breaker side shares.
pub struct Breakers {
    clock: RunClock,
    /// Set to stop the probers and the watcher.
    pub stop: AtomicBool,
    /// Every permit granted.
    pub permits: Mutex<Vec<Permit>>,
    /// Outcome batches answered.
    pub reports: AtomicU64,
    /// Node views read by the watcher.
    pub reads: AtomicU64,
    /// What the watcher saw broken.
    pub violations: Mutex<Vec<String>>,
    channels: Vec<(usize, Channel)>,
}

fn key() -> pb::BreakerKey {
    pb::BreakerKey {
        server: SERVER.into(),
        tool: Some(TOOL.into()),
        ..Default::default()
    }
}

impl Breakers {
    /// The breaker side for nodes `slots`.
    pub fn new(clock: RunClock, slots: &[usize]) -> Result<Breakers> {
        let channels = slots
            .iter()
            .map(|s| Ok((*s, cluster::channel(&addr(*s), RPC_TIMEOUT)?)))
            .collect::<Result<_>>()?;
        Ok(Breakers {
            clock,
            stop: AtomicBool::new(false),
            permits: Mutex::new(Vec::new()),
            reports: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            violations: Mutex::new(Vec::new()),
            channels,
        })
    }

    fn violate(&self, what: String) {
        if let Ok(mut v) = self.violations.lock() {
            v.push(what);
        }
    }

    fn any(&self, rng: &mut fastrand::Rng) -> BreakersClient<Channel> {
        let i = rng.usize(0..self.channels.len());
        BreakersClient::new(self.channels[i].1.clone())
    }

    /// Applies [`POLICY`], trying each node in turn for up to a minute.
    pub async fn apply_policy(&self) -> Result<()> {
        let request = pb::ApplyPolicyRequest {
            namespace: NS.into(),
            document: POLICY.into(),
            format: pb::PolicyFormat::Toml as i32,
            actor: "nemesis".into(),
            reason: "nemesis test policy".into(),
            ..Default::default()
        };
        let mut last = String::new();
        for round in 0..60 {
            let (_, channel) = &self.channels[round % self.channels.len()];
            match PolicyClient::new(channel.clone())
                .apply(request.clone())
                .await
            {
                Ok(_) => return Ok(()),
                Err(s) => last = format!("{:?} {}", s.code(), s.message()),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        bail!("the policy was not applied within a minute: {last}")
    }

    /// One prober, as replica `name`, until stopped.
    pub async fn probe(self: Arc<Self>, name: String, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut batch_seq = 0u64;
        while !self.stop.load(Ordering::Relaxed) {
            let request = pb::GetBreakerRequest {
                namespace: NS.into(),
                key: Some(key()),
                ..Default::default()
            };
            let view = match self.any(&mut rng).get_breaker(request).await {
                Ok(r) => r.into_inner().breaker.unwrap_or_default(),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match pb::BreakerState::try_from(view.state) {
                Ok(pb::BreakerState::Closed) => {
                    batch_seq += 1;
                    self.report_failures(&mut rng, &name, batch_seq, view.generation)
                        .await;
                }
                Ok(pb::BreakerState::HalfOpen) => self.probe_once(&mut rng, &name).await,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn report_failures(&self, rng: &mut fastrand::Rng, name: &str, seq: u64, gen: u64) {
        let failure = pb::Outcome {
            server: SERVER.into(),
            tool: TOOL.into(),
            class: pb::OutcomeClass::ServerError as i32,
            duration_ms: 20,
            generation_seen: Some(gen),
            ..Default::default()
        };
        let request = pb::ReportOutcomesRequest {
            namespace: NS.into(),
            replica_id: name.into(),
            batch_seq: seq,
            outcomes: vec![failure; 6],
            ..Default::default()
        };
        if self.any(rng).report_outcomes(request).await.is_ok() {
            self.reports.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(50..200))).await;
    }

    async fn probe_once(&self, rng: &mut fastrand::Rng, name: &str) {
        let request = pb::AcquireProbeRequest {
            namespace: NS.into(),
            key: Some(key()),
            replica_id: name.into(),
            lease_ms: Some(PROBE_LEASE_MS),
            ..Default::default()
        };
        let call = self.clock.ms();
        let granted = match self.any(rng).acquire_probe(request).await {
            Ok(r) => match r.into_inner().result {
                Some(Acquired::Granted(g)) => g,
                _ => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    return;
                }
            },
            Err(_) => return,
        };
        let mut permit = Permit {
            generation: granted.generation,
            call,
            granted: self.clock.ms(),
            released: None,
        };
        // The probe call itself.
        tokio::time::sleep(Duration::from_millis(rng.u64(20..300))).await;
        let outcome = if rng.u8(0..100) < 60 {
            pb::OutcomeClass::Success
        } else {
            pb::OutcomeClass::ServerError
        };
        let release = pb::ReleaseProbeRequest {
            namespace: NS.into(),
            key: Some(key()),
            permit_id: granted.permit_id,
            generation: granted.generation,
            outcome: outcome as i32,
            duration_ms: 20,
            ..Default::default()
        };
        permit.released = Some(self.clock.ms());
        if let Ok(mut permits) = self.permits.lock() {
            permits.push(permit);
        }
        let _ = self.any(rng).release_probe(release).await;
    }

    /// Reads every node's own view of the breaker every 250 ms until
    /// stopped: live permits within the policy, generations never back.
    pub async fn watch(self: Arc<Self>) {
        let mut generations: BTreeMap<usize, u64> = BTreeMap::new();
        while !self.stop.load(Ordering::Relaxed) {
            for (slot, view, _) in self.read_all().await {
                self.reads.fetch_add(1, Ordering::Relaxed);
                if view.live_probes > CONCURRENT_PROBES {
                    let live = view.live_probes;
                    self.violate(format!("node {slot} shows {live} live probe permits"));
                }
                let seen = generations.entry(slot).or_default();
                if view.generation < *seen {
                    let (was, now) = (*seen, view.generation);
                    self.violate(format!("node {slot}: generation went from {was} to {now}"));
                }
                *seen = (*seen).max(view.generation);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Every answering node's view of the breaker and the revision it
    /// reflects.
    async fn read_all(&self) -> Vec<(usize, pb::BreakerView, u64)> {
        let reads = self.channels.iter().map(|(slot, channel)| {
            let mut client = BreakersClient::new(channel.clone());
            async move {
                let request = pb::GetBreakerRequest {
                    namespace: NS.into(),
                    key: Some(key()),
                    ..Default::default()
                };
                let r = client.get_breaker(request).await.ok()?.into_inner();
                Some((*slot, r.breaker?, r.revision))
            }
        });
        let all = futures::future::join_all(reads).await;
        all.into_iter().flatten().collect()
    }

    /// After the heal: waits up to `within` for every node to answer at one
    /// revision, and then they must show the same breaker. Returns that
    /// revision.
    pub async fn agree(&self, within: Duration) -> Result<u64> {
        let deadline = tokio::time::Instant::now() + within;
        let mut last = Vec::new();
        while tokio::time::Instant::now() < deadline {
            let views = self.read_all().await;
            let all_answered = views.len() == self.channels.len();
            let revision = views.first().map(|(_, _, r)| *r);
            if all_answered && views.iter().all(|(_, _, r)| Some(*r) == revision) {
                let first = &views[0].1;
                if let Some((slot, _, _)) = views.iter().find(|(_, v, _)| v != first) {
                    bail!(
                        "node {slot} and node {} differ on the breaker at revision {}",
                        views[0].0,
                        revision.unwrap_or(0)
                    );
                }
                return Ok(revision.unwrap_or(0));
            }
            last = views.iter().map(|(s, _, r)| (*s, *r)).collect();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the nodes never answered at one revision (node, revision): {last:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permit(generation: u64, granted: u64, released: Option<u64>) -> Permit {
        Permit {
            generation,
            call: granted.saturating_sub(5),
            granted,
            released,
        }
    }

    #[test]
    fn counts_permits_held_at_once_per_generation() {
        let permits = [
            permit(3, 100, Some(200)),
            permit(3, 150, Some(250)),
            permit(3, 200, Some(300)),
            permit(4, 160, Some(170)),
        ];
        assert_eq!(most_held(&permits, 0, 1_000), (2, 3));
        // A third permit of generation 3 while two are held is too many.
        let mut more = permits.to_vec();
        more.push(permit(3, 180, Some(190)));
        assert_eq!(most_held(&more, 0, 1_000), (3, 3));
        // A permit never released counts as held until its lease can lapse.
        let kept = [permit(5, 100, None), permit(5, 20_000, Some(20_100))];
        assert_eq!(most_held(&kept, 0, 30_000), (2, 5));
        assert_eq!(most_held(&kept, 1_000, 30_000), (1, 5));
    }
}
