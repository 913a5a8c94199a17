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
//! for one key, an acknowledged completion lost, a stale lookup.
//!
//! **Assumption: leases never lapse during a run.** The rules are applied at
//! one fixed instant, [`MODEL_NOW`], so no lease ever expires and retention
//! never purges. That holds when every lease is longer than its key's
//! sub-history and the namespace's retention longer than the run;
//! [`check_ledger`] verifies the leases (`lease_ms` must exceed the span of
//! its key's operations). If
//! the cluster still shows an expiry (a takeover, a lease-expired ambiguity,
//! say through a leader's skewed clock) the history is refused as
//! [`HistoryError::Uncovered`] rather than judged by rules that leave expiry
//! out.
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

/// The one instant at which every rule is applied: nothing ever lapses.
pub const MODEL_NOW: Timestamp = Timestamp::ZERO;

/// Retention handed to the rules; nothing is purged, since the model never
/// ticks, so it only dates records.
pub const MODEL_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

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

    /// Why the model cannot judge this answer to `input`, if it cannot.
    fn uncovered(&self, input: &LedgerInput) -> Option<&'static str> {
        use LedgerOutput as O;
        match self {
            _ if !self.answers(input) => Some("the answer is not one its request can get"),
            O::Started { takeover: true, .. } => Some("a begin took over a lapsed lease"),
            O::Completed(v)
            | O::Ambiguous(v)
            | O::Recorded(v)
            | O::AlreadyRecorded(v)
            | O::Accepted(v)
            | O::Resolved(v)
            | O::Found(v) => v.lease_expired.then_some("a record shows a lapsed lease"),
            _ => None,
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

/// One key's state: the core's record, or none. Hashed by the fields that
/// tell records of one key apart in a run at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyState(pub Option<Record>);

impl Hash for KeyState {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Equal records hash alike; unequal ones may collide (Eq decides).
        self.0
            .as_ref()
            .map(|r| (r.status, &r.attempt, r.attempts, &r.operation_id, &r.result))
            .hash(state);
    }
}

/// The ledger's rules at [`MODEL_NOW`], as a [`Model`].
#[derive(Clone, Copy, Debug, Default)]
pub struct LedgerModel;

impl LedgerModel {
    /// Applies `input` to `state`: the next state and what a client sees.
    pub fn apply(state: &KeyState, input: &LedgerInput) -> (KeyState, LedgerOutput) {
        let (existing, now, retention) = (state.0.clone(), MODEL_NOW, MODEL_RETENTION_MS);
        let (changed, seen) = match input {
            LedgerInput::Begin(req) => {
                let (changed, answer) = rules::begin(existing, req, now);
                (changed, seen_begin(answer))
            }
            LedgerInput::Complete(req) => {
                let (changed, answer) = rules::complete(existing, req, now, retention);
                (changed, seen_complete(answer))
            }
            LedgerInput::Resolve(req) => {
                let (changed, answer) = rules::resolve(existing, req, now, retention);
                (changed, seen_resolve(answer))
            }
            LedgerInput::Lookup { .. } => (None, seen_lookup(existing)),
        };
        let next = changed.map_or_else(|| state.clone(), |r| KeyState(Some(r)));
        (next, seen)
    }
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

/// A lookup shows the record as of now, as the server's does.
fn seen_lookup(existing: Option<Record>) -> LedgerOutput {
    existing.map_or(LedgerOutput::NotFound, |mut record| {
        rules::expire(&mut record, MODEL_NOW);
        LedgerOutput::Found(RecordView::of(&record))
    })
}

impl Model for LedgerModel {
    type State = KeyState;
    type Input = LedgerInput;
    type Output = LedgerOutput;

    fn init(&self) -> KeyState {
        KeyState(None)
    }

    fn step(
        &self,
        state: &KeyState,
        input: &LedgerInput,
        output: Option<&LedgerOutput>,
    ) -> Vec<KeyState> {
        let (next, expected) = LedgerModel::apply(state, input);
        match output {
            Some(seen) if !seen.agrees_with(&expected) => Vec::new(),
            _ => vec![next],
        }
    }

    fn covers(&self, input: &LedgerInput, output: Option<&LedgerOutput>) -> Result<(), String> {
        input.validate().map_err(|e| {
            format!("the request is invalid ({e}); a refused request had no effect")
        })?;
        match output.and_then(|o| o.uncovered(input)) {
            Some(reason) => Err(reason.to_owned()),
            None => Ok(()),
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

/// Checks a ledger history, after checking the model's assumption that no
/// lease can lapse within it: every `lease_ms` exceeds the span of its key's
/// sub-history (from the key's first call to its last event), so no lease
/// taken on a key can lapse before anything observed of that key.
pub fn check_ledger(
    history: &[LedgerOp],
    limits: Limits,
) -> Result<Verdict<LedgerInput, LedgerOutput>, HistoryError> {
    let mut spans: BTreeMap<&str, (Time, Time)> = BTreeMap::new();
    for op in history {
        if op.key != op.input.key() {
            let reason = "its key is not its request's key";
            return Err(HistoryError::Malformed { id: op.id, reason });
        }
        let end = op.ret.unwrap_or(op.call).max(op.call);
        let span = spans.entry(op.key.as_str()).or_insert((op.call, end));
        *span = (span.0.min(op.call), span.1.max(end));
    }
    for op in history {
        if let LedgerInput::Begin(req) = &op.input {
            let (first, last) = spans.get(op.key.as_str()).copied().unwrap_or_default();
            let span_ms = last.saturating_sub(first);
            if req.lease_ms <= span_ms {
                let (key, id, lease_ms) = (op.key.clone(), op.id, req.lease_ms);
                let reason = format!(
                    "lease_ms {lease_ms} may lapse within the key's history ({span_ms} ms)"
                );
                return Err(HistoryError::Uncovered { key, id, reason });
            }
        }
    }
    linearizability::check(&LedgerModel, history, limits)
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

    fn ok(history: &[LedgerOp]) -> bool {
        check_ledger(history, Limits::default()).unwrap() == Verdict::Linearizable
    }

    fn violation(history: &[LedgerOp]) -> bool {
        let verdict = check_ledger(history, Limits::default()).unwrap();
        matches!(verdict, Verdict::Violation(_))
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
        let Verdict::Unknown { key, reason } = check_ledger(&h, tight).unwrap() else {
            panic!("the step budget did not stop the search");
        };
        assert_eq!((key.as_str(), reason), (KEY, Exhausted::Steps(20)));
    }

    #[test]
    fn a_lease_only_has_to_outlast_its_own_keys_history() {
        let mut short = b(1, 0, 10, "a", started("a"));
        if let LedgerInput::Begin(req) = &mut short.input {
            req.lease_ms = 500;
        }
        let mut later = look(2, 5_000, 5_010, O::NotFound);
        later.key = "key-2".to_owned();
        later.input = LedgerInput::Lookup {
            key: "key-2".to_owned(),
        };
        assert!(ok(&[short.clone(), later]));
        let too_late = look(2, 5_000, 5_010, O::Found(view(InProgress, "a")));
        let err = check_ledger(&[short, too_late], Limits::default()).unwrap_err();
        assert!(matches!(err, HistoryError::Uncovered { .. }), "{err}");
    }

    #[test]
    fn refuses_what_the_model_does_not_cover() {
        let (attempt, takeover) = ("b".to_owned(), true);
        let takeover = O::Started { attempt, takeover };
        let mut expired = view(Ambiguous, "a");
        expired.lease_expired = true;
        let mut short = b(1, 0, 10, "a", started("a"));
        if let LedgerInput::Begin(req) = &mut short.input {
            req.lease_ms = 500;
        }
        let cases = [
            (b(2, 20, 30, "b", takeover), "took over a lapsed lease"),
            (look(2, 20, 30, O::Found(expired)), "shows a lapsed lease"),
            (
                b(2, 20, 999, "b", started("b")),
                "may lapse within the key's",
            ),
            (b(2, 20, 30, "b", O::NotFound), "not one its request"),
            (b(2, 20, 30, "", started("")), "the request is invalid"),
        ];
        for (op, why) in cases {
            let err = check_ledger(&[short.clone(), op], Limits::default()).unwrap_err();
            assert!(matches!(err, HistoryError::Uncovered { .. }), "{err}");
            assert!(err.to_string().contains(why), "{err}");
        }
        let mut elsewhere = look(2, 20, 30, O::NotFound);
        elsewhere.key = "key-2".to_owned();
        let err = check_ledger(&[elsewhere], Limits::default()).unwrap_err();
        assert!(err.to_string().contains("not its request's key"), "{err}");
    }
}
