//! One breaker's state machine: evidence in, transitions and permits out.

use super::audit::{AuditEntry, Cause, Evidence};
use super::evidence::{Counts, Reporters, SlidingWindow};
use super::state::{BreakerState, Mode, Permit, Phase};
use crate::limits::AUDIT_ENTRIES_PER_BREAKER_MAX;
use crate::name::ReplicaId;
use crate::outcome::Verdict;
use crate::policy::{BreakerPolicy, Trip};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

/// One outcome as a breaker sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation<'a> {
    /// The replica that made the call (borrowed where the caller holds it,
    /// so counting an outcome copies no name).
    pub replica: Cow<'a, ReplicaId>,
    /// The generation the replica saw when it called; fences stale reports.
    pub generation: u64,
    /// Success, failure or ignored, already classified.
    pub verdict: Verdict,
    /// How long the call took.
    pub duration_ms: u64,
}

/// What became of one observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// It counted as evidence.
    Counted,
    /// Its generation is not the breaker's: ignored.
    Stale,
    /// The breaker is not gathering evidence now (open, forced): ignored.
    NotCounting,
    /// Its verdict carries no evidence (cancelled, invalid arguments).
    Ignored,
}

/// The answer to a probe request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeAnswer {
    /// The caller holds permit `permit_id` until `expires`; only it may call.
    Granted {
        /// The permit to return with the result.
        permit_id: u64,
        /// The generation to fence the result with.
        generation: u64,
        /// When the lease lapses.
        expires: Timestamp,
    },
    /// No permit: try again later.
    Denied {
        /// The state that refused.
        state: BreakerState,
        /// How long until asking again could succeed, if known.
        retry_after_ms: Option<u64>,
    },
    /// The breaker is not half-open; call normally (closed, disabled, shadow).
    NotNeeded {
        /// The state that allows the call.
        state: BreakerState,
    },
}

/// What became of a returned probe permit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeResult {
    /// The success counted; more are needed to close.
    Counted,
    /// The success closed the breaker.
    Closed,
    /// The failure reopened the breaker.
    Reopened,
    /// The permit returned without evidence (an ignored outcome).
    Released,
    /// Unknown permit or stale generation: ignored.
    Stale,
}

/// A breaker: generation, mode, automatic phase, evidence and audit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Breaker {
    generation: u64,
    mode: Mode,
    phase: Phase,
    consecutive_failures: u32,
    window: SlidingWindow,
    reporters: Reporters,
    next_permit_id: u64,
    would_reject: u64,
    audit: VecDeque<AuditEntry>,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            generation: 0,
            mode: Mode::Auto,
            phase: Phase::Closed,
            consecutive_failures: 0,
            window: SlidingWindow::default(),
            reporters: Reporters::default(),
            next_permit_id: 1,
            would_reject: 0,
            audit: VecDeque::new(),
        }
    }
}

/// Which kind of change a transition is, for [`Breaker::transition`].
enum Target {
    Phase(Phase),
    Mode(Mode),
}

impl Breaker {
    /// A fresh, closed breaker at generation 0.
    pub fn new() -> Self {
        Breaker::default()
    }

    /// Bumped by every state change; fences stale reports and permits.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The operator mode.
    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// The automatic phase (what the breaker would do on its own).
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The state clients and operators see.
    pub fn state(&self) -> BreakerState {
        match self.mode {
            Mode::Auto => self.phase.state(),
            Mode::ForcedOpen { .. } => BreakerState::ForcedOpen,
            Mode::Disabled { .. } => BreakerState::Disabled,
            Mode::MetricsOnly { .. } => BreakerState::MetricsOnly,
        }
    }

    /// Calls the breaker would have rejected had it been enforcing (shadow).
    pub fn would_reject(&self) -> u64 {
        self.would_reject
    }

    /// The current failure streak.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Window totals at `now` (zero under the consecutive-failures rule).
    pub fn window_counts(&self, policy: &BreakerPolicy, now: Timestamp) -> Counts {
        match &policy.trip {
            Trip::SlidingWindow(w) => self.window.totals(w.window_ms, now),
            Trip::ConsecutiveFailures { .. } => Counts::default(),
        }
    }

    /// Distinct replicas behind the current failures.
    pub fn reporters(&self) -> Vec<ReplicaId> {
        self.reporters.list()
    }

    /// The transitions, oldest first (bounded).
    pub fn audit(&self) -> impl Iterator<Item = &AuditEntry> {
        self.audit.iter()
    }

    /// Live probe permits.
    pub fn live_permits(&self) -> usize {
        match &self.phase {
            Phase::HalfOpen { permits, .. } => permits.len(),
            _ => 0,
        }
    }

    /// When the last permit still out at `now` lapses, if any is (a permit
    /// whose lease lapsed but that no command has reaped yet is not out).
    pub fn permits_out_until(&self, now: Timestamp) -> Option<Timestamp> {
        match &self.phase {
            Phase::HalfOpen { permits, .. } => permits
                .values()
                .map(|p| p.expires)
                .filter(|expires| *expires > now)
                .max(),
            _ => None,
        }
    }

    /// When the open period ends, if open.
    pub fn open_until(&self) -> Option<Timestamp> {
        match (&self.mode, &self.phase) {
            (Mode::ForcedOpen { until, .. }, _) => *until,
            (_, Phase::Open { until, .. }) => Some(*until),
            _ => None,
        }
    }

    /// Whether the breaker rejects calls it would reject (not shadow).
    pub fn enforcing(&self, policy: &BreakerPolicy) -> bool {
        !policy.shadow && !matches!(self.mode, Mode::MetricsOnly { .. })
    }

    /// The earliest time at which [`Breaker::advance`] would change something.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let forced = self.operator_until();
        let phase = match &self.phase {
            Phase::Open { until, .. } => Some(*until),
            Phase::HalfOpen { permits, .. } => permits.values().map(|p| p.expires).min(),
            Phase::Closed => None,
        };
        match (forced, phase) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Applies what time alone changes: open periods end, forced periods
    /// lift, probe leases lapse. Idempotent for a given `now`.
    pub fn advance(&mut self, now: Timestamp) {
        if self.operator_until().is_some_and(|t| now >= t) {
            let cause = match self.mode {
                Mode::ForcedOpen { .. } => Cause::ForceExpired,
                _ => Cause::OperatorExpired,
            };
            if !matches!(self.mode, Mode::MetricsOnly { .. }) {
                // Frozen while held: it restarts closed with fresh evidence.
                // Shadow ran the machine all along, and its verdict stands.
                self.clear_evidence();
                self.phase = Phase::Closed;
            }
            self.transition(now, Target::Mode(Mode::Auto), cause, None);
        }
        if let Phase::Open { until, reopens } = self.phase {
            if now >= until {
                let half_open = Phase::HalfOpen {
                    permits: BTreeMap::new(),
                    successes: 0,
                    reopens,
                };
                self.transition(now, Target::Phase(half_open), Cause::OpenElapsed, None);
            }
        }
        if let Phase::HalfOpen { permits, .. } = &mut self.phase {
            permits.retain(|_, p| p.expires > now);
        }
    }

    /// Counts one outcome as evidence, and trips if the policy says so.
    pub fn record(
        &mut self,
        policy: &BreakerPolicy,
        now: Timestamp,
        obs: &Observation<'_>,
    ) -> Recorded {
        self.advance(now);
        if obs.generation != self.generation {
            return Recorded::Stale;
        }
        if obs.verdict == Verdict::Ignored {
            return Recorded::Ignored;
        }
        match (&self.mode, &self.phase) {
            (Mode::ForcedOpen { .. }, _) => Recorded::NotCounting,
            (_, Phase::Closed) => {
                self.count(policy, now, obs);
                if matches!(self.mode, Mode::Auto | Mode::MetricsOnly { .. }) {
                    self.maybe_trip(policy, now);
                }
                Recorded::Counted
            }
            (_, Phase::Open { .. }) if !self.enforcing(policy) => {
                self.would_reject = self.would_reject.saturating_add(1);
                Recorded::Counted
            }
            (_, Phase::HalfOpen { .. }) if !self.enforcing(policy) => {
                self.shadow_probe(policy, now, obs.verdict);
                Recorded::Counted
            }
            _ => Recorded::NotCounting,
        }
    }

    fn count(&mut self, policy: &BreakerPolicy, now: Timestamp, obs: &Observation<'_>) {
        let failed = obs.verdict == Verdict::Failure;
        let slow = match &policy.trip {
            Trip::SlidingWindow(w) => w.slow_call_ms.is_some_and(|ms| obs.duration_ms >= ms),
            Trip::ConsecutiveFailures { .. } => false,
        };
        if failed || slow {
            // A slow call is evidence too: it names a reporter for `min_reporters`.
            self.reporters.note(&obs.replica, now);
        }
        if failed {
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        } else {
            self.consecutive_failures = 0;
        }
        match &policy.trip {
            Trip::ConsecutiveFailures { .. } => {
                if !failed {
                    self.reporters.clear();
                }
            }
            Trip::SlidingWindow(w) => {
                let counts = Counts {
                    calls: 1,
                    failures: u64::from(failed),
                    slow: u64::from(slow),
                };
                self.window.record(w.window_ms, now, counts);
                self.reporters
                    .expire_before(Timestamp(now.as_millis().saturating_sub(w.window_ms)));
            }
        }
    }

    fn maybe_trip(&mut self, policy: &BreakerPolicy, now: Timestamp) {
        let Some(cause) = self.trip_cause(policy, now) else {
            return;
        };
        if (self.reporters.count() as u64) < u64::from(policy.min_reporters.max(1)) {
            return;
        }
        self.open(policy, now, 0, cause);
    }

    fn trip_cause(&self, policy: &BreakerPolicy, now: Timestamp) -> Option<Cause> {
        match &policy.trip {
            Trip::ConsecutiveFailures { failures } => {
                (self.consecutive_failures >= *failures).then_some(Cause::ConsecutiveFailures)
            }
            Trip::SlidingWindow(w) => {
                let c = self.window.totals(w.window_ms, now);
                if c.calls < u64::from(w.minimum_calls) || c.calls == 0 {
                    return None;
                }
                let ratio = |n: u64| n as f64 / c.calls as f64;
                if c.failures > 0 && ratio(c.failures) >= w.failure_ratio {
                    Some(Cause::FailureRatio)
                } else if w.slow_call_ms.is_some()
                    && c.slow > 0
                    && ratio(c.slow) >= w.slow_call_ratio
                {
                    Some(Cause::SlowCallRatio)
                } else {
                    None
                }
            }
        }
    }

    fn open(&mut self, policy: &BreakerPolicy, now: Timestamp, reopens: u32, cause: Cause) {
        let until = now.plus_ms(policy.open.duration_ms(reopens));
        self.transition(
            now,
            Target::Phase(Phase::Open { until, reopens }),
            cause,
            None,
        );
        self.clear_evidence();
    }

    fn close(&mut self, now: Timestamp) {
        self.transition(
            now,
            Target::Phase(Phase::Closed),
            Cause::ProbesSucceeded,
            None,
        );
        self.clear_evidence();
    }

    fn clear_evidence(&mut self) {
        self.consecutive_failures = 0;
        self.window.clear();
        self.reporters.clear();
    }

    /// In shadow mode nobody holds permits; every call acts as a probe.
    fn shadow_probe(&mut self, policy: &BreakerPolicy, now: Timestamp, verdict: Verdict) {
        let Phase::HalfOpen {
            successes, reopens, ..
        } = &mut self.phase
        else {
            return;
        };
        let reopens = *reopens;
        if verdict == Verdict::Failure {
            self.open(policy, now, reopens.saturating_add(1), Cause::ProbeFailed);
            return;
        }
        *successes = successes.saturating_add(1);
        if *successes >= policy.probe_successes {
            self.close(now);
        }
    }

    /// Asks for a fleet-wide probe permit.
    pub fn acquire_probe(
        &mut self,
        policy: &BreakerPolicy,
        now: Timestamp,
        replica: &ReplicaId,
    ) -> ProbeAnswer {
        self.advance(now);
        let state = self.state();
        if let Mode::ForcedOpen { until, .. } = &self.mode {
            let retry_after_ms = until.map(|t| t.millis_since(now));
            return ProbeAnswer::Denied {
                state,
                retry_after_ms,
            };
        }
        if !matches!(self.mode, Mode::Auto) || !self.enforcing(policy) {
            return ProbeAnswer::NotNeeded { state };
        }
        match &mut self.phase {
            Phase::Closed => ProbeAnswer::NotNeeded { state },
            Phase::Open { until, .. } => ProbeAnswer::Denied {
                state,
                retry_after_ms: Some(until.millis_since(now)),
            },
            Phase::HalfOpen { permits, .. } => {
                if permits.len() >= policy.concurrent_probes.max(1) as usize {
                    let first_expiry = permits.values().map(|p| p.expires).min();
                    return ProbeAnswer::Denied {
                        state,
                        retry_after_ms: first_expiry.map(|t| t.millis_since(now)),
                    };
                }
                let permit_id = self.next_permit_id;
                self.next_permit_id = self.next_permit_id.saturating_add(1);
                let expires = now.plus_ms(policy.probe_lease_ms);
                let permit = Permit {
                    holder: replica.clone(),
                    expires,
                };
                permits.insert(permit_id, permit);
                assert!(permits.len() <= policy.concurrent_probes.max(1) as usize);
                ProbeAnswer::Granted {
                    permit_id,
                    generation: self.generation,
                    expires,
                }
            }
        }
    }

    /// Returns a probe permit with the probe's outcome.
    pub fn release_probe(
        &mut self,
        policy: &BreakerPolicy,
        now: Timestamp,
        permit_id: u64,
        generation: u64,
        verdict: Verdict,
    ) -> ProbeResult {
        self.advance(now);
        if generation != self.generation || !matches!(self.mode, Mode::Auto) {
            return ProbeResult::Stale;
        }
        let Phase::HalfOpen {
            permits,
            successes,
            reopens,
        } = &mut self.phase
        else {
            return ProbeResult::Stale;
        };
        if permits.remove(&permit_id).is_none() {
            return ProbeResult::Stale;
        }
        match verdict {
            Verdict::Ignored => ProbeResult::Released,
            Verdict::Failure => {
                let reopens = reopens.saturating_add(1);
                self.open(policy, now, reopens, Cause::ProbeFailed);
                ProbeResult::Reopened
            }
            Verdict::Success => {
                *successes = successes.saturating_add(1);
                if *successes >= policy.probe_successes {
                    self.close(now);
                    ProbeResult::Closed
                } else {
                    ProbeResult::Counted
                }
            }
        }
    }

    /// An operator forces the breaker open.
    pub fn force_open(
        &mut self,
        now: Timestamp,
        actor: &str,
        reason: &str,
        until: Option<Timestamp>,
    ) {
        let mode = Mode::ForcedOpen {
            reason: reason.to_owned(),
            actor: actor.to_owned(),
            until,
        };
        self.operator(now, mode, Cause::ForcedOpen, actor, reason);
    }

    /// An operator disables the breaker (always allow), until lifted or
    /// `until`.
    pub fn disable(&mut self, now: Timestamp, actor: &str, reason: &str, until: Option<Timestamp>) {
        let mode = Mode::Disabled {
            reason: reason.to_owned(),
            actor: actor.to_owned(),
            until,
        };
        self.operator(now, mode, Cause::Disabled, actor, reason);
    }

    /// An operator puts the breaker in shadow (decide and count, never
    /// reject), until lifted or `until`.
    pub fn metrics_only(
        &mut self,
        now: Timestamp,
        actor: &str,
        reason: &str,
        until: Option<Timestamp>,
    ) {
        let mode = Mode::MetricsOnly {
            reason: reason.to_owned(),
            actor: actor.to_owned(),
            until,
        };
        self.operator(now, mode, Cause::MetricsOnly, actor, reason);
    }

    /// When the operator's state lifts by itself, if it does.
    pub fn operator_until(&self) -> Option<Timestamp> {
        match &self.mode {
            Mode::Auto => None,
            Mode::ForcedOpen { until, .. }
            | Mode::Disabled { until, .. }
            | Mode::MetricsOnly { until, .. } => *until,
        }
    }

    /// An operator hands the breaker back to its evidence, closed and fresh.
    pub fn reset(&mut self, now: Timestamp, actor: &str, reason: &str) {
        self.clear_evidence();
        self.phase = Phase::Closed;
        self.operator(now, Mode::Auto, Cause::Reset, actor, reason);
    }

    fn operator(&mut self, now: Timestamp, mode: Mode, cause: Cause, actor: &str, reason: &str) {
        self.advance(now);
        if matches!(mode, Mode::ForcedOpen { .. } | Mode::Disabled { .. }) {
            // The automatic machine is frozen while an operator holds the
            // breaker; it restarts closed with fresh evidence afterwards.
            self.clear_evidence();
            self.phase = Phase::Closed;
        }
        let who = Some((actor.to_owned(), reason.to_owned()));
        self.transition(now, Target::Mode(mode), cause, who);
    }

    /// Applies a change, bumps the generation and writes the audit entry.
    fn transition(
        &mut self,
        now: Timestamp,
        target: Target,
        cause: Cause,
        who: Option<(String, String)>,
    ) {
        let from = self.state();
        let window = self.window.sum_all();
        let evidence = Evidence {
            calls: window.calls,
            failures: window.failures,
            slow_calls: window.slow,
            consecutive_failures: self.consecutive_failures,
            reporters: self.reporters.list(),
        };
        match target {
            Target::Phase(p) => self.phase = p,
            Target::Mode(m) => self.mode = m,
        }
        let before = self.generation;
        self.generation = self.generation.saturating_add(1);
        debug_assert!(self.generation > before, "generations only grow");
        let (actor, reason) = who.map_or((None, None), |(a, r)| (Some(a), Some(r)));
        if self.audit.len() >= AUDIT_ENTRIES_PER_BREAKER_MAX {
            self.audit.pop_front();
        }
        self.audit.push_back(AuditEntry {
            at: now,
            generation: self.generation,
            from,
            to: self.state(),
            cause,
            actor,
            reason,
            evidence,
        });
    }
}
