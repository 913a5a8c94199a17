//! The idempotency ledger as a sequential model, for checking what the
//! simulation's clients saw of it over gRPC.
//!
//! The model *is* the product's rules: each key's state is the core's own
//! [`Record`] (or none), and every operation is applied with
//! [`fusebox_core::ledger::rules`] (`begin`, `complete`, `resolve`, and
//! `expire` for a lookup), exactly as [`fusebox_core::ledger::LedgerStore`]
//! applies them, after the same request validation. The model's answer is
//! then reduced to what a client observes ([`LedgerOutput`]) and compared
//! with what the client saw. A bug in the rules themselves is therefore out of
//! this checker's reach (the core's own tests cover them); what it catches is
//! the cluster answering unlike one copy of the rules would: two `started`
//! for one key, an acknowledged completion lost, a stale lookup, a lease
//! taken over or declared lapsed before it could have lapsed, or a lapsed
//! one still honoured long after.
//!
//! # Time
//!
//! Leases lapse, so the rules depend on when each operation took effect:
//! the state machine's clock, which follows the leaders' stamps and never
//! goes back. The model never knows that instant exactly, only bounds on it:
//! - an operation took effect within its call and return, on a server clock
//!   at most [`Clocks::skew_ms`] away from the clients' clock (times in the
//!   history and on the servers are both Unix milliseconds);
//! - no earlier than an operation of the same key that took effect before
//!   it (the clock never goes back).
//!
//! A key's state therefore carries the earliest instant its last change can
//! have had ([`KeyState::floor`]) and, while an attempt holds the key, the
//! span of instants its lease may lapse at ([`KeyState::lease`]). Where an
//! operation's span of instants straddles that lease, both branches are
//! tried: the lease still live (the instant before the lapse) or lapsed
//! (after it), each narrowing the spans it assumed. A lease begun within a
//! span lapses within the span moved by `lease_ms`. This over-approximates
//! (spans forget how they relate to each other), so the checker may accept
//! a history no exact timing explains, never the other way round.
//!
//! Retention is left out: records are applied with
//! [`MODEL_RETENTION_MS`], and [`check_ledger`] refuses a history whose keys
//! live long enough for the servers' retention to purge them.
//!
//! Requests the cluster definitively refused before they reached the ledger
//! (an invalid argument, the kill switch) had no effect and belong out of
//! the history; an answer lost on the way (a timeout) is an operation without
//! a return.

use super::linearizability::{self, HistoryError, Limits, Model, Operation, Time, Verdict};
use fusebox_core::ledger::{
    rules, AmbiguityCause, BeginAnswer, BeginRequest, CompleteAnswer, CompleteRequest, Record,
    ResolveAnswer, ResolveRequest, Status,
};
use fusebox_core::{CoreError, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

/// Retention handed to the rules. Records are never purged in the model,
/// so the servers' retention must be at least this ([`check_ledger`] checks
/// that no key's history is long enough to reach it).
pub const MODEL_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// The clocks a history was taken with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clocks {
    /// How far any server's clock may be from the clock the history's
    /// calls and returns were read on, either way, in milliseconds.
    pub skew_ms: u64,
}

/// A span of instants, both ends included; `hi` is [`Time::MAX`] when
/// unbounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Span {
    /// The earliest instant.
    pub lo: Time,
    /// The latest instant.
    pub hi: Time,
}

impl Span {
    /// The span, or `None` if it holds no instant.
    fn new(lo: Time, hi: Time) -> Option<Span> {
        (lo <= hi).then_some(Span { lo, hi })
    }

    /// Every instant moved `ms` later.
    fn later(self, ms: u64) -> Span {
        Span {
            lo: self.lo.saturating_add(ms),
            hi: self.hi.saturating_add(ms),
        }
    }
}

/// What a client asked the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LedgerInput {
    /// `Begin`: claim the key for an attempt.
    Begin(BeginRequest),
    /// `Complete`: report how the attempt ended.
    Complete(CompleteRequest),
    /// `Resolve`: an operator settles an ambiguous record.
    Resolve(ResolveRequest),
    /// `Lookup`: read the key's record (linearizable on the server).
    Lookup {
        /// The idempotency key.
        key: String,
    },
}

impl LedgerInput {
    /// The idempotency key the request is about.
    pub fn key(&self) -> &str {
        match self {
            LedgerInput::Begin(r) => &r.key,
            LedgerInput::Complete(r) => &r.key,
            LedgerInput::Resolve(r) => &r.key,
            LedgerInput::Lookup { key } => key,
        }
    }

    fn validate(&self) -> Result<(), CoreError> {
        match self {
            LedgerInput::Begin(r) => r.validate(),
            LedgerInput::Complete(r) => r.validate(),
            LedgerInput::Resolve(r) => r.validate(),
            LedgerInput::Lookup { .. } => Ok(()),
        }
    }
}

/// The part of a record a client compares: from a `LedgerRecord` on the
/// wire, `lease_expired` being an `ambiguity_reason` that names a lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordView {
    /// Where the write stands.
    pub status: Status,
    /// The attempt that holds or last held the key.
    pub attempt: String,
    /// The backend's operation id, when known.
    pub operation_id: Option<String>,
    /// The stored result replayed to later attempts.
    pub result: Option<Vec<u8>>,
    /// Whether it became ambiguous through a lapsed lease (outside the model).
    pub lease_expired: bool,
}

impl RecordView {
    /// What a client sees of `record`.
    pub fn of(record: &Record) -> Self {
        RecordView {
            status: record.status,
            attempt: record.attempt.clone(),
            operation_id: record.operation_id.clone(),
            result: record.result.clone(),
            lease_expired: record.ambiguity == Some(AmbiguityCause::LeaseExpired),
        }
    }
}

/// An answer as a client saw it; each request has its own answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LedgerOutput {
    /// `Begin`: the attempt owns the key.
    Started {
        /// The attempt now holding the key.
        attempt: String,
        /// It took over a lapsed lease (outside the model).
        takeover: bool,
    },
    /// `Begin`: another attempt holds the key.
    InProgress {
        /// The holder.
        holder: String,
    },
    /// `Begin`: the write already has a final answer, replayed.
    Completed(RecordView),
    /// `Begin`: the key is bound to another fingerprint.
    Mismatch,
    /// `Begin`: an earlier attempt's outcome is unknown.
    Ambiguous(RecordView),
    /// `Complete`: recorded now.
    Recorded(RecordView),
    /// `Complete`: the same completion was recorded before (a retry).
    AlreadyRecorded(RecordView),
    /// `Complete`: either of the two (gRPC answers both with the record).
    Accepted(RecordView),
    /// `Complete`: refused, the attempt does not hold the key
    /// (`FAILED_PRECONDITION`).
    Conflict,
    /// `Resolve`: applied; the record after it.
    Resolved(RecordView),
    /// `Resolve`: refused, the record is not ambiguous.
    NotAmbiguous,
    /// `Lookup`: the record.
    Found(RecordView),
    /// `Complete`, `Resolve` or `Lookup`: no record (`NOT_FOUND`).
    NotFound,
}

impl LedgerOutput {
    /// Whether this is an answer `input` can get at all.
    fn answers(&self, input: &LedgerInput) -> bool {
        use LedgerOutput as O;
        match input {
            LedgerInput::Begin(_) => matches!(
                self,
                O::Started { .. }
                    | O::InProgress { .. }
                    | O::Completed(_)
                    | O::Mismatch
                    | O::Ambiguous(_)
            ),
            LedgerInput::Complete(_) => matches!(
                self,
                O::Recorded(_) | O::AlreadyRecorded(_) | O::Accepted(_) | O::Conflict | O::NotFound
            ),
            LedgerInput::Resolve(_) => {
                matches!(self, O::Resolved(_) | O::NotAmbiguous | O::NotFound)
            }
            LedgerInput::Lookup { .. } => matches!(self, O::Found(_) | O::NotFound),
        }
    }

    /// Whether a client that saw `self` could have been given `expected`.
    fn agrees_with(&self, expected: &LedgerOutput) -> bool {
        use LedgerOutput as O;
        match (self, expected) {
            (O::Accepted(seen), O::Recorded(v) | O::AlreadyRecorded(v)) => seen == v,
            _ => self == expected,
        }
    }
}

/// One key's state: the core's record (or none), its time fields cleared
/// since the model only knows spans of instants, with those spans.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    /// The record, as the rules left it, without times.
    pub record: Option<Record>,
    /// While an attempt holds the key: when its lease may lapse.
    pub lease: Option<Span>,
    /// The earliest instant the key's last change can have taken effect at;
    /// nothing after it takes effect earlier.
    pub floor: Time,
}

impl Hash for KeyState {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Equal states hash alike; unequal ones may collide (Eq decides).
        let record = self.record.as_ref();
        record
            .map(|r| (r.status, &r.attempt, r.attempts, &r.operation_id, &r.result))
            .hash(state);
        (self.lease, self.floor).hash(state);
    }
}

/// The ledger's rules with time kept in spans, as a [`Model`].
#[derive(Clone, Copy, Debug)]
pub struct LedgerModel {
    /// The history's clocks.
    pub clocks: Clocks,
}

/// One way an operation can meet a key's lease: the instants it may take
/// effect at, and the lease narrowed to what that assumes.
struct Branch {
    when: Span,
    lease: Option<Span>,
}

impl LedgerModel {
    /// When `op` can take effect on a key whose last change was at `floor`
    /// or later: within its call and return give or take the skew, and not
    /// before `floor`.
    fn window(&self, op: &LedgerOp, floor: Time) -> Option<Span> {
        let skew = self.clocks.skew_ms;
        let lo = op.call.saturating_sub(skew).max(floor);
        let hi = op.ret.map_or(Time::MAX, |ret| ret.saturating_add(skew));
        Span::new(lo, hi)
    }

    /// The ways `op` can meet the key's lease within `window`: before it
    /// lapses, after, or both when the spans overlap.
    fn branches(state: &KeyState, window: Span) -> Vec<Branch> {
        let held = state
            .record
            .as_ref()
            .is_some_and(|r| r.status == Status::InProgress);
        let Some(lease) = state.lease.filter(|_| held) else {
            let lease = state.lease;
            return vec![Branch {
                when: window,
                lease,
            }];
        };
        let live = Span::new(window.lo, window.hi.min(lease.hi.saturating_sub(1)))
            .filter(|_| window.lo < lease.hi)
            .zip(Span::new(
                lease.lo.max(window.lo.saturating_add(1)),
                lease.hi,
            ));
        let lapsed = Span::new(window.lo.max(lease.lo), window.hi)
            .zip(Span::new(lease.lo, lease.hi.min(window.hi)));
        [live, lapsed]
            .into_iter()
            .flatten()
            .map(|(when, lease)| Branch {
                when,
                lease: Some(lease),
            })
            .collect()
    }

    /// Applies `input` to `state` taking effect within `branch`: the next
    /// state and what a client sees. The rules run at the branch's earliest
    /// instant with the lease at its earliest, which decides the same way
    /// as every instant the branch allows. An answered operation that
    /// changed nothing still narrows the lease to what its branch assumed
    /// (a begin told `in progress` at 550 means the lease runs past 550);
    /// an unanswered one may not have happened, so it narrows nothing.
    fn apply(
        state: &KeyState,
        branch: &Branch,
        input: &LedgerInput,
        answered: bool,
    ) -> (KeyState, LedgerOutput) {
        let now = Timestamp::from_millis(branch.when.lo);
        let existing = state.record.clone().map(|mut r| {
            r.lease_until = branch.lease.map(|l| Timestamp::from_millis(l.lo));
            r
        });
        let retention = MODEL_RETENTION_MS;
        let (changed, seen, new_lease) = match input {
            LedgerInput::Begin(req) => {
                let (changed, answer) = rules::begin(existing, req, now);
                let leased = changed.is_some() && matches!(answer, BeginAnswer::Started { .. });
                let new_lease = leased.then(|| branch.when.later(req.lease_ms));
                (changed, seen_begin(answer), new_lease)
            }
            LedgerInput::Complete(req) => {
                let (changed, answer) = rules::complete(existing, req, now, retention);
                (changed, seen_complete(answer), None)
            }
            LedgerInput::Resolve(req) => {
                let (changed, answer) = rules::resolve(existing, req, now, retention);
                (changed, seen_resolve(answer), None)
            }
            LedgerInput::Lookup { .. } => (None, seen_lookup(existing, now), None),
        };
        let Some(record) = changed else {
            let lease = if answered { branch.lease } else { state.lease };
            let next = KeyState {
                lease,
                ..state.clone()
            };
            return (next, seen);
        };
        let lease = match record.status {
            Status::InProgress => new_lease.or(branch.lease),
            _ => None,
        };
        let next = KeyState {
            record: Some(timeless(record)),
            lease,
            floor: state.floor.max(branch.when.lo),
        };
        (next, seen)
    }
}

/// `record` with every instant cleared: the model keeps time in spans.
fn timeless(mut record: Record) -> Record {
    record.lease_until = None;
    record.created_at = Timestamp::ZERO;
    record.updated_at = Timestamp::ZERO;
    record.completed_at = None;
    record.expires_at = None;
    if let Some(resolution) = record.resolution.as_mut() {
        resolution.at = Timestamp::ZERO;
    }
    record
}

fn seen_begin(answer: BeginAnswer) -> LedgerOutput {
    match answer {
        BeginAnswer::Started {
            attempt, takeover, ..
        } => LedgerOutput::Started { attempt, takeover },
        BeginAnswer::InProgress { attempt, .. } => LedgerOutput::InProgress { holder: attempt },
        BeginAnswer::Completed { record } => LedgerOutput::Completed(RecordView::of(&record)),
        BeginAnswer::Mismatch { .. } => LedgerOutput::Mismatch,
        BeginAnswer::Ambiguous { record } => LedgerOutput::Ambiguous(RecordView::of(&record)),
    }
}

fn seen_complete(answer: CompleteAnswer) -> LedgerOutput {
    match answer {
        CompleteAnswer::Recorded { record } => LedgerOutput::Recorded(RecordView::of(&record)),
        CompleteAnswer::AlreadyRecorded { record } => {
            LedgerOutput::AlreadyRecorded(RecordView::of(&record))
        }
        CompleteAnswer::Conflict { .. } => LedgerOutput::Conflict,
        CompleteAnswer::NotFound => LedgerOutput::NotFound,
    }
}

fn seen_resolve(answer: ResolveAnswer) -> LedgerOutput {
    match answer {
        ResolveAnswer::Resolved { record } => LedgerOutput::Resolved(RecordView::of(&record)),
        ResolveAnswer::NotAmbiguous { .. } => LedgerOutput::NotAmbiguous,
        ResolveAnswer::NotFound => LedgerOutput::NotFound,
    }
}

/// A lookup shows the record as of `now`, as the server's does.
fn seen_lookup(existing: Option<Record>, now: Timestamp) -> LedgerOutput {
    existing.map_or(LedgerOutput::NotFound, |mut record| {
        rules::expire(&mut record, now);
        LedgerOutput::Found(RecordView::of(&record))
    })
}

impl Model for LedgerModel {
    type State = KeyState;
    type Input = LedgerInput;
    type Output = LedgerOutput;

    fn init(&self) -> KeyState {
        KeyState::default()
    }

    fn step(&self, state: &KeyState, op: &LedgerOp) -> Vec<KeyState> {
        let Some(window) = self.window(op, state.floor) else {
            return Vec::new();
        };
        let mut next = Vec::new();
        for branch in LedgerModel::branches(state, window) {
            let answered = op.output.is_some();
            let (after, expected) = LedgerModel::apply(state, &branch, &op.input, answered);
            let agrees = op
                .output
                .as_ref()
                .is_none_or(|seen| seen.agrees_with(&expected));
            if agrees && !next.contains(&after) {
                next.push(after);
            }
        }
        next
    }

    fn covers(&self, input: &LedgerInput, output: Option<&LedgerOutput>) -> Result<(), String> {
        input.validate().map_err(|e| {
            format!("the request is invalid ({e}); a refused request had no effect")
        })?;
        match output {
            Some(o) if !o.answers(input) => {
                Err("the answer is not one its request can get".to_owned())
            }
            _ => Ok(()),
        }
    }
}

/// One observed ledger operation.
pub type LedgerOp = Operation<LedgerInput, LedgerOutput>;

/// An operation keyed by its request's key.
pub fn ledger_op(
    id: u64,
    call: Time,
    ret: Option<Time>,
    input: LedgerInput,
    output: Option<LedgerOutput>,
) -> LedgerOp {
    let key = input.key().to_owned();
    Operation {
        id,
        key,
        call,
        ret,
        input,
        output,
    }
}

/// Checks a ledger history taken with `clocks`, after checking the model's
/// assumption that retention purges nothing within it: no key's history,
/// give or take the skew, lasts [`MODEL_RETENTION_MS`].
pub fn check_ledger(
    history: &[LedgerOp],
    clocks: Clocks,
    limits: Limits,
) -> Result<Verdict<LedgerInput, LedgerOutput>, HistoryError> {
    let mut spans: BTreeMap<&str, (u64, Time, Time)> = BTreeMap::new();
    for op in history {
        if op.key != op.input.key() {
            let reason = "its key is not its request's key";
            return Err(HistoryError::Malformed { id: op.id, reason });
        }
        let end = op.ret.unwrap_or(op.call).max(op.call);
        let span = spans
            .entry(op.key.as_str())
            .or_insert((op.id, op.call, end));
        *span = (span.0, span.1.min(op.call), span.2.max(end));
    }
    for (key, (id, first, last)) in spans {
        let lasts = last
            .saturating_sub(first)
            .saturating_add(clocks.skew_ms.saturating_mul(2));
        if lasts >= MODEL_RETENTION_MS {
            let (key, id) = (key.to_owned(), id);
            let reason = format!("the key's history ({lasts} ms) may outlast retention");
            return Err(HistoryError::Uncovered { key, id, reason });
        }
    }
    linearizability::check(&LedgerModel { clocks }, history, limits)
}

#[cfg(test)]
mod tests {
    use super::linearizability::Exhausted;
    use super::*;
    use fusebox_core::ledger::{Completion, Decision};
    use fusebox_core::policy::EffectClass;
    use fusebox_core::ToolName;
    use LedgerOutput as O;
    use Status::{Ambiguous, InProgress, Released, Succeeded};

    const KEY: &str = "key-1";

    fn begin_req(attempt: &str, fingerprint: &str) -> BeginRequest {
        BeginRequest {
            key: KEY.to_owned(),
            fingerprint: fingerprint.to_owned(),
            intent_id: "intent-1".to_owned(),
            tool: ToolName::new("create_invoice").unwrap(),
            target: "acct-9".to_owned(),
            effect: EffectClass::NonIdempotentWrite,
            attempt: attempt.to_owned(),
            lease_ms: 600_000,
        }
    }

    /// `attempt` begins at `call`, answered `seen` at `ret`.
    fn b(id: u64, call: Time, ret: Time, attempt: &str, seen: O) -> LedgerOp {
        let input = LedgerInput::Begin(begin_req(attempt, "fp"));
        ledger_op(id, call, Some(ret), input, Some(seen))
    }

    /// `attempt` completes as `how`.
    fn c(id: u64, call: Time, ret: Time, attempt: &str, how: Completion, seen: O) -> LedgerOp {
        let (key, attempt, completion) = (KEY.to_owned(), attempt.to_owned(), how);
        let input = LedgerInput::Complete(CompleteRequest {
            key,
            attempt,
            completion,
        });
        ledger_op(id, call, Some(ret), input, Some(seen))
    }

    /// Succeeded, with `op-{attempt}` as operation id and result.
    fn done(attempt: &str) -> Completion {
        let operation_id = format!("op-{attempt}");
        let result = operation_id.clone().into_bytes();
        Completion::Succeeded {
            operation_id,
            result,
        }
    }

    fn not_run() -> Completion {
        let reason = "breaker open".to_owned();
        Completion::FailedBeforeExecution { reason }
    }

    fn unknown() -> Completion {
        let reason = "timeout".to_owned();
        Completion::Ambiguous { reason }
    }

    fn look(id: u64, call: Time, ret: Time, seen: O) -> LedgerOp {
        let key = KEY.to_owned();
        let input = LedgerInput::Lookup { key };
        ledger_op(id, call, Some(ret), input, Some(seen))
    }

    /// What a client sees of a record; a success is [`done`]'s.
    fn view(status: Status, attempt: &str) -> RecordView {
        let done = status == Succeeded;
        RecordView {
            status,
            attempt: attempt.to_owned(),
            operation_id: done.then(|| format!("op-{attempt}")),
            result: done.then(|| format!("op-{attempt}").into_bytes()),
            lease_expired: false,
        }
    }

    fn started(attempt: &str) -> O {
        let (attempt, takeover) = (attempt.to_owned(), false);
        O::Started { attempt, takeover }
    }

    fn held_by(holder: &str) -> O {
        let holder = holder.to_owned();
        O::InProgress { holder }
    }

    /// Clocks in step with the clients'.
    const EXACT: Clocks = Clocks { skew_ms: 0 };

    fn verdict(history: &[LedgerOp], clocks: Clocks) -> Verdict<LedgerInput, LedgerOutput> {
        check_ledger(history, clocks, Limits::default()).unwrap()
    }

    fn ok(history: &[LedgerOp]) -> bool {
        verdict(history, EXACT) == Verdict::Linearizable
    }

    fn violation(history: &[LedgerOp]) -> bool {
        matches!(verdict(history, EXACT), Verdict::Violation(_))
    }

    /// `a` begins, then completes successfully, acknowledged at 30.
    fn a_succeeded() -> Vec<LedgerOp> {
        let recorded = O::Recorded(view(Succeeded, "a"));
        vec![
            b(1, 0, 10, "a", started("a")),
            c(2, 20, 30, "a", done("a"), recorded),
        ]
    }

    #[test]
    fn accepts_a_legal_concurrent_history() {
        let mut h = a_succeeded();
        h.push(b(3, 5, 15, "b", held_by("a")));
        h.push(b(4, 40, 50, "c", O::Completed(view(Succeeded, "a"))));
        h.push(look(5, 25, 60, O::Found(view(Succeeded, "a"))));
        h.push(c(
            6,
            70,
            80,
            "a",
            done("a"),
            O::Accepted(view(Succeeded, "a")),
        ));
        let mut reused = b(7, 90, 95, "d", O::Mismatch);
        reused.input = LedgerInput::Begin(begin_req("d", "another-fp"));
        h.push(reused);
        assert!(ok(&h));
        // Of two overlapping begins, either may have taken effect first.
        let h = [
            b(1, 0, 10, "a", held_by("b")),
            b(2, 5, 15, "b", started("b")),
        ];
        assert!(ok(&h));
    }

    #[test]
    fn two_started_answers_without_a_release_are_a_violation() {
        let h = [
            b(1, 0, 10, "a", started("a")),
            b(2, 5, 15, "b", started("b")),
        ];
        assert!(violation(&h));
        let released = O::Recorded(view(Released, "a"));
        let h = [
            b(1, 0, 10, "a", started("a")),
            c(2, 20, 30, "a", not_run(), released),
            b(3, 40, 50, "b", started("b")),
        ];
        assert!(ok(&h));
    }

    #[test]
    fn an_acknowledged_completion_cannot_be_lost() {
        for seen in [O::NotFound, O::Found(view(InProgress, "a"))] {
            let h = [a_succeeded(), vec![look(3, 40, 50, seen.clone())]].concat();
            assert!(violation(&h), "{seen:?} passed");
        }
        let seen = O::Found(view(Succeeded, "a"));
        assert!(ok(&[a_succeeded(), vec![look(3, 40, 50, seen)]].concat()));
    }

    #[test]
    fn a_timed_out_begin_may_or_may_not_have_happened() {
        let input = LedgerInput::Begin(begin_req("a", "fp"));
        let lost = ledger_op(1, 0, None, input, None);
        for seen in [started("b"), held_by("a")] {
            assert!(ok(&[lost.clone(), b(2, 10, 20, "b", seen)]));
        }
        // Once `b` holds the key, the lost begin can no longer have won it.
        let h = [
            lost,
            b(2, 10, 20, "b", started("b")),
            b(3, 30, 40, "c", held_by("a")),
        ];
        assert!(violation(&h));
    }

    #[test]
    fn a_stale_lookup_is_a_violation() {
        let h = [
            b(1, 0, 10, "a", started("a")),
            c(2, 20, 30, "a", not_run(), O::Recorded(view(Released, "a"))),
            b(3, 40, 50, "b", started("b")),
            c(4, 60, 70, "b", done("b"), O::Recorded(view(Succeeded, "b"))),
        ];
        let during = look(5, 65, 90, O::Found(view(InProgress, "b")));
        assert!(ok(&[h.to_vec(), vec![during]].concat()));
        for old in [view(Released, "a"), view(InProgress, "b")] {
            let stale = look(5, 80, 90, O::Found(old.clone()));
            assert!(violation(&[h.to_vec(), vec![stale]].concat()), "{old:?}");
        }
    }

    #[test]
    fn an_ambiguous_write_is_never_restarted_until_resolved() {
        let mut h = vec![
            b(1, 0, 10, "a", started("a")),
            c(2, 20, 30, "a", unknown(), O::Recorded(view(Ambiguous, "a"))),
            b(3, 40, 50, "b", O::Ambiguous(view(Ambiguous, "a"))),
        ];
        let retry = b(4, 60, 70, "c", started("c"));
        assert!(violation(&[h.clone(), vec![retry]].concat()));
        let (actor, note) = ("oncall".to_owned(), "not in the backend".to_owned());
        let (key, decision) = (KEY.to_owned(), Decision::NotDone);
        let resolve = LedgerInput::Resolve(ResolveRequest {
            key,
            decision,
            actor,
            note,
        });
        let seen = O::Resolved(view(Released, "a"));
        h.push(ledger_op(4, 60, Some(70), resolve, Some(seen)));
        h.push(b(5, 80, 90, "c", started("c")));
        assert!(ok(&h));
    }

    #[test]
    fn gives_up_as_unknown_when_the_budget_runs_out() {
        // Ten overlapping begins see `a` hold the key, and a lookup among them
        // sees it done, which no order explains: the search must try every
        // subset of the begins before it can say no.
        let mut h = vec![b(1, 0, 5, "a", started("a"))];
        h.extend((2..=11).map(|i| b(i, 10, 100, &format!("b{i}"), held_by("a"))));
        h.push(look(12, 20, 100, O::Found(view(Succeeded, "a"))));
        assert!(violation(&h));
        let steps_per_key_max = 20;
        let tight = Limits {
            steps_per_key_max,
            ..Limits::default()
        };
        let Verdict::Unknown { key, reason } = check_ledger(&h, EXACT, tight).unwrap() else {
            panic!("the step budget did not stop the search");
        };
        assert_eq!((key.as_str(), reason), (KEY, Exhausted::Steps(20)));
    }

    /// `b` with a lease of `lease_ms` on a write of `effect`.
    fn leased(mut op: LedgerOp, lease_ms: u64, effect: EffectClass) -> LedgerOp {
        if let LedgerInput::Begin(req) = &mut op.input {
            req.lease_ms = lease_ms;
            req.effect = effect;
        }
        op
    }

    const ONCE: EffectClass = EffectClass::NonIdempotentWrite;
    const REPEATABLE: EffectClass = EffectClass::IdempotentWrite;

    fn took_over(attempt: &str) -> O {
        let (attempt, takeover) = (attempt.to_owned(), true);
        O::Started { attempt, takeover }
    }

    /// What a client sees of `a`'s record once its lease lapsed unanswered.
    fn lapsed() -> RecordView {
        let mut view = view(Ambiguous, "a");
        view.lease_expired = true;
        view
    }

    #[test]
    fn a_lapsed_lease_makes_a_write_ambiguous_only_once_it_can_have_lapsed() {
        // `a`'s 500 ms lease, begun within 0..10, lapses within 500..510.
        let a = leased(b(1, 0, 10, "a", started("a")), 500, ONCE);
        let after = b(2, 600, 610, "b", O::Ambiguous(lapsed()));
        assert!(ok(&[a.clone(), after]));
        let early = b(2, 100, 110, "b", O::Ambiguous(lapsed()));
        assert!(violation(&[a.clone(), early.clone()]));
        // A server clock a second ahead may have seen it lapse that early.
        let skewed = Clocks { skew_ms: 1_000 };
        assert_eq!(verdict(&[a.clone(), early], skewed), Verdict::Linearizable);
        // Honoured long after it must have lapsed.
        let late = b(2, 600, 610, "b", held_by("a"));
        assert!(violation(&[a.clone(), late]));
        // A lookup sees the lapse too, and `a`'s late answer still settles it
        // (the record keeps saying why it was ambiguous).
        let mut settled = view(Succeeded, "a");
        settled.lease_expired = true;
        let h = [
            a,
            look(2, 600, 610, O::Found(lapsed())),
            c(3, 700, 710, "a", done("a"), O::Recorded(settled.clone())),
            look(4, 800, 810, O::Found(settled)),
        ];
        assert!(ok(&h));
    }

    #[test]
    fn an_idempotent_write_is_taken_over_only_once_its_lease_can_have_lapsed() {
        let a = leased(b(1, 0, 10, "a", started("a")), 500, REPEATABLE);
        let after = leased(b(2, 600, 610, "b", took_over("b")), 500, REPEATABLE);
        assert!(ok(&[a.clone(), after.clone()]));
        let early = leased(b(2, 100, 110, "b", took_over("b")), 500, REPEATABLE);
        assert!(violation(&[a.clone(), early]));
        // Once taken over, the key is `b`'s: `a` cannot complete it, and its
        // lease runs from the takeover.
        let a_done = c(3, 700, 710, "a", done("a"), O::Conflict);
        let c_held = leased(b(4, 720, 730, "c", held_by("b")), 500, REPEATABLE);
        assert!(ok(&[a.clone(), after.clone(), a_done, c_held]));
        let c_too_late = leased(b(4, 1_200, 1_210, "c", held_by("b")), 500, REPEATABLE);
        assert!(violation(&[a.clone(), after.clone(), c_too_late]));
        // Two takeovers of one lapse are two owners at once.
        let again = leased(b(3, 620, 630, "c", took_over("c")), 500, REPEATABLE);
        assert!(violation(&[a, after, again]));
    }

    #[test]
    fn a_lease_that_may_or_may_not_have_lapsed_is_judged_both_ways_but_consistently() {
        // Begun within 0..100, a 500 ms lease lapses within 500..600.
        let a = leased(b(1, 0, 100, "a", started("a")), 500, REPEATABLE);
        for seen in [held_by("a"), took_over("b")] {
            let b_at_550 = leased(b(2, 550, 560, "b", seen.clone()), 500, REPEATABLE);
            assert!(ok(&[a.clone(), b_at_550]), "{seen:?}");
        }
        // Live at 550 means begun after 50; at 700 it must have lapsed.
        let h = [
            a.clone(),
            leased(b(2, 550, 560, "b", held_by("a")), 500, REPEATABLE),
            leased(b(3, 700, 710, "c", held_by("a")), 500, REPEATABLE),
        ];
        assert!(violation(&h));
        // Taken over by 560: `a` holds it no more.
        let h = [
            a,
            leased(b(2, 550, 560, "b", took_over("b")), 500, REPEATABLE),
            leased(b(3, 570, 580, "c", held_by("a")), 500, REPEATABLE),
        ];
        assert!(violation(&h));
    }

    #[test]
    fn an_unanswered_begin_leases_from_whenever_it_took_effect() {
        let input = LedgerInput::Begin(begin_req("a", "fp"));
        let lost = leased(ledger_op(1, 0, None, input, None), 500, REPEATABLE);
        // It may have taken effect late, so its lease may still run at 5 s.
        let h = [
            lost.clone(),
            leased(b(2, 5_000, 5_010, "b", held_by("a")), 500, REPEATABLE),
        ];
        assert!(ok(&h));
        // But one held lease cannot run both before and after a takeover.
        let h = [
            lost,
            leased(b(2, 5_000, 5_010, "b", took_over("b")), 500, REPEATABLE),
            leased(b(3, 5_100, 5_110, "c", held_by("a")), 500, REPEATABLE),
        ];
        assert!(violation(&h));
    }

    #[test]
    fn refuses_what_the_model_does_not_cover() {
        let first = b(1, 0, 10, "a", started("a"));
        let cases = [
            (b(2, 20, 30, "b", O::NotFound), "not one its request"),
            (b(2, 20, 30, "", started("")), "the request is invalid"),
            (
                look(2, MODEL_RETENTION_MS, MODEL_RETENTION_MS, O::NotFound),
                "may outlast retention",
            ),
        ];
        for (op, why) in cases {
            let err = check_ledger(&[first.clone(), op], EXACT, Limits::default()).unwrap_err();
            assert!(matches!(err, HistoryError::Uncovered { .. }), "{err}");
            assert!(err.to_string().contains(why), "{err}");
        }
        let mut elsewhere = look(2, 20, 30, O::NotFound);
        elsewhere.key = "key-2".to_owned();
        let err = check_ledger(&[elsewhere], EXACT, Limits::default()).unwrap_err();
        assert!(err.to_string().contains("not its request's key"), "{err}");
    }
}
