//! Linearizability checking of per-key histories, as the simulation's
//! clients observed them.
//!
//! A history is linearizable if each operation can be given one instant
//! between its call and its return at which it took effect, such that
//! replaying the operations in that order through a sequential [`Model`]
//! gives every answer the clients saw.
//!
//! The search is Wing & Gong's with Lowe's memoization, as Porcupine does it.
//! Call and return events are sorted by time. Walking them, at the call of an
//! operation not yet linearized the checker tries to linearize it now (the
//! model must accept its answer) and, if it can, restarts from the first
//! event. At the return of an operation not yet linearized it cannot go on
//! (that operation had to take effect already), so it undoes the last choice:
//! the model's next possible state for it, or else skipping it for a later
//! call. A configuration seen before (the same set of linearized operations
//! and the same model state) is never searched twice. (Porcupine's linked
//! list of events becomes a scan that skips linearized operations: one
//! key's history is short.)
//!
//! An operation whose client never saw an answer (`ret: None`: a timeout, a
//! lost reply) has no return event: it may take effect at any point after
//! its call, or never, and the search succeeds once every *answered*
//! operation is linearized. Taking effect without changing the state is the
//! same as never, so such a step of an unanswered operation is not tried:
//! lost reads and refused writes do not multiply the search.
//!
//! Keys are independent (P-compositionality: a history is linearizable iff
//! each key's sub-history is), so each key is searched apart, which keeps the
//! exponential worst case small. The search is bounded: a key with more than
//! [`Limits::ops_per_key_max`] operations, or whose search needs more than
//! [`Limits::steps_per_key_max`] model steps, is reported
//! [`Verdict::Unknown`], never looped on.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::hash::Hash;

/// An instant on the simulator's clock in milliseconds; only order matters.
pub type Time = u64;

/// One operation as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Operation<I, O> {
    /// Unique within a history, so reports can name the operation.
    pub id: u64,
    /// Operations on different keys are checked apart.
    pub key: String,
    /// When the client sent it: it cannot have taken effect earlier.
    pub call: Time,
    /// When the answer arrived; `None` if it never did, so the operation may
    /// have taken effect at any point after `call`, or never.
    pub ret: Option<Time>,
    /// What was asked.
    pub input: I,
    /// What was answered; `None` accepts any answer (and must be `None`
    /// without a `ret`).
    pub output: Option<O>,
}

/// A sequential specification of one key.
pub trait Model {
    /// The key's state; hashed to remember configurations already searched.
    type State: Clone + Eq + Hash;
    /// What an operation asks.
    type Input;
    /// What an operation answers.
    type Output;

    /// The state of a key nobody has touched.
    fn init(&self) -> Self::State;

    /// Every state `op`'s input can lead to from `state` while answering
    /// its output (any answer when `None`); none if that answer is
    /// impossible there. Several states make the model nondeterministic. A
    /// model that keeps time reads the op's call and return.
    fn step(
        &self,
        state: &Self::State,
        op: &Operation<Self::Input, Self::Output>,
    ) -> Vec<Self::State>;

    /// Refuses an operation that saw something the model leaves out, so the
    /// checker says so instead of giving a verdict it cannot back.
    fn covers(&self, _input: &Self::Input, _output: Option<&Self::Output>) -> Result<(), String> {
        Ok(())
    }
}

type Op<M> = Operation<<M as Model>::Input, <M as Model>::Output>;

/// Bounds on the search of one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A key with more operations than this is not searched.
    pub ops_per_key_max: usize,
    /// Model steps one key's search may take before it gives up.
    pub steps_per_key_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        let (ops_per_key_max, steps_per_key_max) = (1_000, 1_000_000);
        Limits {
            ops_per_key_max,
            steps_per_key_max,
        }
    }
}

/// Why a key's search gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exhausted {
    /// The key had this many operations, over [`Limits::ops_per_key_max`].
    TooManyOps(usize),
    /// The search took this many steps ([`Limits::steps_per_key_max`]).
    Steps(u64),
}

/// A key whose sub-history has no linearization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation<I, O> {
    /// The key.
    pub key: String,
    /// All of the key's operations in call order: the evidence.
    pub ops: Vec<Operation<I, O>>,
    /// Ids of the longest order the search could linearize: where the
    /// history stops making sense.
    pub longest_prefix: Vec<u64>,
}

/// What the checker concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict<I, O> {
    /// Every key's sub-history is linearizable.
    Linearizable,
    /// The first key (in key order) whose sub-history is not.
    Violation(Violation<I, O>),
    /// No violation found, but this key's search gave up.
    Unknown {
        /// The first key that gave up.
        key: String,
        /// Why.
        reason: Exhausted,
    },
}

/// A history the checker cannot judge.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// The history is not well formed.
    #[error("operation {id} is malformed: {reason}")]
    Malformed {
        /// The operation.
        id: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The model does not cover what an operation saw.
    #[error("operation {id} on key {key:?} is outside the model: {reason}")]
    Uncovered {
        /// The key.
        key: String,
        /// The operation.
        id: u64,
        /// What the model leaves out.
        reason: String,
    },
}

/// Checks a whole history, key by key; a violation on any key wins over a
/// key that gave up.
pub fn check<M: Model>(
    model: &M,
    history: &[Op<M>],
    limits: Limits,
) -> Result<Verdict<M::Input, M::Output>, HistoryError>
where
    M::Input: Clone,
    M::Output: Clone,
{
    validate(model, history)?;
    let mut by_key: BTreeMap<&str, Vec<&Op<M>>> = BTreeMap::new();
    for op in history {
        by_key.entry(op.key.as_str()).or_default().push(op);
    }
    let mut unknown = None;
    for (key, mut ops) in by_key {
        ops.sort_by_key(|op| (op.call, op.id));
        match search(model, &ops, limits) {
            Ok(()) => {}
            Err(Stop::Violation(longest)) => {
                let key = key.to_owned();
                let longest_prefix = longest.iter().map(|&i| ops[i].id).collect();
                let ops = ops.into_iter().cloned().collect();
                return Ok(Verdict::Violation(Violation {
                    key,
                    ops,
                    longest_prefix,
                }));
            }
            Err(Stop::Exhausted(reason)) => {
                unknown.get_or_insert((key.to_owned(), reason));
            }
        }
    }
    Ok(match unknown {
        None => Verdict::Linearizable,
        Some((key, reason)) => Verdict::Unknown { key, reason },
    })
}

fn validate<M: Model>(model: &M, history: &[Op<M>]) -> Result<(), HistoryError> {
    let mut ids = BTreeSet::new();
    for op in history {
        let malformed = |reason| Err(HistoryError::Malformed { id: op.id, reason });
        if !ids.insert(op.id) {
            return malformed("its id is used twice");
        }
        if op.ret.is_some_and(|ret| ret < op.call) {
            return malformed("it returned before it was called");
        }
        if op.ret.is_none() && op.output.is_some() {
            return malformed("it has an answer but no return time");
        }
        if let Err(reason) = model.covers(&op.input, op.output.as_ref()) {
            let (key, id) = (op.key.clone(), op.id);
            return Err(HistoryError::Uncovered { key, id, reason });
        }
    }
    Ok(())
}

/// A key's events in time order, as (operation index, is its return); at
/// equal instants calls sort first, so touching operations are concurrent.
fn events<I, O>(ops: &[&Operation<I, O>]) -> Vec<(usize, bool)> {
    let mut timed: Vec<(Time, bool, usize)> = ops
        .iter()
        .enumerate()
        .flat_map(|(i, op)| [Some((op.call, false, i)), op.ret.map(|ret| (ret, true, i))])
        .flatten()
        .collect();
    timed.sort_unstable();
    timed.into_iter().map(|(_, ret, i)| (i, ret)).collect()
}

/// Which operations are linearized: a bitset over a key's operations.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Linearized(Vec<u64>);

impl Linearized {
    fn has(&self, op: usize) -> bool {
        self.0[op / 64] & (1 << (op % 64)) != 0
    }

    fn flip(&mut self, op: usize) {
        self.0[op / 64] ^= 1 << (op % 64);
    }
}

/// An operation linearized on the current path: where its call event is,
/// the state before it, and the other states it could lead to, still to try.
struct Frame<S> {
    op: usize,
    at: usize,
    before: S,
    rest: std::vec::IntoIter<S>,
}

enum Stop {
    /// No linearization; the longest path found, as indexes into the ops.
    Violation(Vec<usize>),
    Exhausted(Exhausted),
}

/// The first of `states` not yet searched with `linearized`, remembering it.
fn fresh<S: Clone + Eq + Hash>(
    states: &mut impl Iterator<Item = S>,
    linearized: &Linearized,
    seen: &mut HashSet<(Linearized, S)>,
) -> Option<S> {
    states.find(|s| seen.insert((linearized.clone(), s.clone())))
}

/// Searches one key's operations, sorted by call.
fn search<M: Model>(model: &M, ops: &[&Op<M>], limits: Limits) -> Result<(), Stop> {
    if ops.len() > limits.ops_per_key_max {
        return Err(Stop::Exhausted(Exhausted::TooManyOps(ops.len())));
    }
    let events = events(ops);
    let mut linearized = Linearized(vec![0; ops.len().div_ceil(64)]);
    let (mut seen, mut path, mut longest) = (HashSet::new(), Vec::<Frame<_>>::new(), Vec::new());
    let (mut state, mut steps, mut at) = (model.init(), 0u64, 0);
    while let Some(&(i, is_return)) = events.get(at) {
        if linearized.has(i) {
            at += 1;
        } else if is_return {
            // Its operation had to take effect already: undo the last choice,
            // trying its next state, else skipping it for a later call.
            let mut frame = path.pop().ok_or_else(|| Stop::Violation(longest.clone()))?;
            if let Some(s) = fresh(&mut frame.rest, &linearized, &mut seen) {
                (state, at) = (s, 0);
                path.push(frame);
            } else {
                linearized.flip(frame.op);
                (state, at) = (frame.before, frame.at + 1);
            }
        } else {
            if steps == limits.steps_per_key_max {
                return Err(Stop::Exhausted(Exhausted::Steps(steps)));
            }
            steps += 1;
            let mut next = model.step(&state, ops[i]);
            if ops[i].ret.is_none() {
                // Taking effect without changing the state is the same as
                // never taking effect, which an unanswered op may do anyway.
                next.retain(|s| *s != state);
            }
            let mut next = next.into_iter();
            linearized.flip(i);
            let Some(s) = fresh(&mut next, &linearized, &mut seen) else {
                linearized.flip(i);
                at += 1;
                continue;
            };
            let before = std::mem::replace(&mut state, s);
            path.push(Frame {
                op: i,
                at,
                before,
                rest: next,
            });
            if path.len() > longest.len() {
                longest = path.iter().map(|f| f.op).collect();
            }
            at = 0;
        }
    }
    Ok(())
}

impl<I: fmt::Debug, O: fmt::Debug> fmt::Display for Violation<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        writeln!(f, "no linearization of key {key:?}, whose operations are:")?;
        for op in &self.ops {
            let ret = op.ret.map_or("never".to_owned(), |t| t.to_string());
            let (id, call, input) = (op.id, op.call, &op.input);
            let out = op.output.as_ref().map(|o| format!("{o:?}"));
            let out = out.unwrap_or_else(|| "?".to_owned());
            writeln!(f, "  #{id} [{call}..{ret}] {input:?} -> {out}")?;
        }
        write!(f, "longest linearizable order: {:?}", self.longest_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte register; `MaybeWrite` may be lost even when acknowledged (a
    /// nondeterministic step); writing 255 is outside the model.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum In {
        Write(u8),
        MaybeWrite(u8),
        Read,
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Out {
        Ack,
        Value(u8),
    }

    struct Register;

    impl Model for Register {
        type State = u8;
        type Input = In;
        type Output = Out;

        fn init(&self) -> u8 {
            0
        }

        fn step(&self, s: &u8, op: &RegOp) -> Vec<u8> {
            match (&op.input, op.output.as_ref()) {
                (In::Write(v), None | Some(Out::Ack)) => vec![*v],
                (In::MaybeWrite(v), None | Some(Out::Ack)) => vec![*s, *v],
                (In::Read, None) => vec![*s],
                (In::Read, Some(Out::Value(v))) if v == s => vec![*s],
                _ => vec![],
            }
        }

        fn covers(&self, input: &In, _: Option<&Out>) -> Result<(), String> {
            match input {
                In::Write(255) => Err("255 is reserved".to_owned()),
                _ => Ok(()),
            }
        }
    }

    type RegOp = Operation<In, Out>;

    fn op(id: u64, span: (Time, Option<Time>), input: In, output: Option<Out>) -> RegOp {
        let (key, (call, ret)) = ("x".to_owned(), span);
        Operation {
            id,
            key,
            call,
            ret,
            input,
            output,
        }
    }

    fn w(id: u64, call: Time, ret: Time, v: u8) -> RegOp {
        op(id, (call, Some(ret)), In::Write(v), Some(Out::Ack))
    }

    fn r(id: u64, call: Time, ret: Time, v: u8) -> RegOp {
        op(id, (call, Some(ret)), In::Read, Some(Out::Value(v)))
    }

    fn verdict(history: &[RegOp]) -> Verdict<In, Out> {
        check(&Register, history, Limits::default()).unwrap()
    }

    fn ok(history: &[RegOp]) -> bool {
        verdict(history) == Verdict::Linearizable
    }

    #[test]
    fn accepts_sequential_and_concurrent_histories() {
        assert!(ok(&[]));
        assert!(ok(&[w(1, 0, 10, 1), r(2, 20, 30, 1)]));
        for v in [1, 2] {
            // A read overlapping a write may see either value.
            let h = [w(1, 0, 10, 1), w(2, 40, 60, 2), r(3, 45, 50, v)];
            assert!(ok(&h));
        }
        // Touching instants count as concurrent.
        assert!(ok(&[w(1, 0, 10, 1), r(2, 10, 20, 0)]));
    }

    #[test]
    fn rejects_a_stale_read_and_describes_it() {
        let h = [r(3, 20, 30, 0), w(1, 0, 10, 1), r(2, 12, 15, 1)];
        let Verdict::Violation(v) = verdict(&h) else {
            panic!("a stale read passed");
        };
        let ids: Vec<u64> = v.ops.iter().map(|op| op.id).collect();
        assert_eq!((v.key.as_str(), ids), ("x", vec![1, 2, 3]));
        assert_eq!(v.longest_prefix, [1, 2]);
        let text = v.to_string();
        assert!(text.contains("#3 [20..30] Read -> Value(0)"), "{text}");
    }

    #[test]
    fn an_unanswered_write_may_take_effect_late_or_never() {
        let pending = op(1, (0, None), In::Write(1), None);
        for v in [0, 1] {
            let h = [pending.clone(), r(2, 10, 20, v), r(3, 500, 600, v)];
            assert!(ok(&h));
        }
        // Once seen, its effect cannot be undone.
        assert!(!ok(&[pending, r(2, 10, 20, 1), r(3, 30, 40, 0)]));
    }

    #[test]
    fn unanswered_no_ops_do_not_multiply_the_search() {
        // Forty lost reads, then a stale read: were each lost read tried at
        // each point, the search would give up long before saying no.
        let mut h: Vec<RegOp> = (1..=40)
            .map(|id| op(id, (0, None), In::Read, None))
            .collect();
        h.extend([w(41, 0, 10, 1), r(42, 20, 30, 0)]);
        assert!(matches!(verdict(&h), Verdict::Violation(_)));
    }

    #[test]
    fn explores_every_state_of_a_nondeterministic_step() {
        let maybe = op(1, (0, Some(10)), In::MaybeWrite(7), Some(Out::Ack));
        for v in [0, 7] {
            assert!(ok(&[maybe.clone(), r(2, 20, 30, v), r(3, 40, 50, v)]));
        }
        assert!(!ok(&[maybe, r(2, 20, 30, 7), r(3, 40, 50, 0)]));
    }

    #[test]
    fn checks_each_key_apart() {
        let (mut stale, mut bad) = (r(2, 20, 30, 0), r(3, 40, 50, 9));
        (stale.key, bad.key) = ("y".to_owned(), "y".to_owned());
        // On one register this read would be stale; on its own key it is not.
        assert!(ok(&[w(1, 0, 10, 1), stale.clone()]));
        let Verdict::Violation(v) = verdict(&[w(1, 0, 10, 1), stale, bad]) else {
            panic!("a read of a value never written passed");
        };
        assert_eq!((v.key.as_str(), v.ops.len()), ("y", 2));
    }

    #[test]
    fn gives_up_as_unknown_when_the_budget_runs_out() {
        // Twelve overlapping writes and a read of a value nobody wrote: the
        // search must try every subset of the writes before it can say no.
        let mut h: Vec<RegOp> = (1..=12).map(|v| w(v.into(), 0, 100, v)).collect();
        h.push(r(99, 50, 150, 99));
        assert!(matches!(verdict(&h), Verdict::Violation(_)));
        let (mut steps, mut ops) = (Limits::default(), Limits::default());
        (steps.steps_per_key_max, ops.ops_per_key_max) = (50, 5);
        for (limits, why) in [
            (steps, Exhausted::Steps(50)),
            (ops, Exhausted::TooManyOps(13)),
        ] {
            let Verdict::Unknown { key, reason } = check(&Register, &h, limits).unwrap() else {
                panic!("{why:?} did not stop the search");
            };
            assert_eq!((key.as_str(), reason), ("x", why));
        }
    }

    #[test]
    fn refuses_malformed_or_uncovered_histories() {
        let answered_late = op(1, (0, None), In::Read, Some(Out::Value(0)));
        let cases = [
            (vec![w(1, 0, 10, 1), w(1, 20, 30, 2)], "used twice"),
            (vec![w(1, 10, 5, 1)], "before it was called"),
            (vec![answered_late], "no return time"),
            (vec![w(1, 0, 10, 255)], "255 is reserved"),
        ];
        for (history, why) in cases {
            let err = check(&Register, &history, Limits::default()).unwrap_err();
            assert!(err.to_string().contains(why), "{err}");
        }
    }
}
