//! Property tests of the state machine's invariants over random command
//! sequences.
//!
//! The scenario tests show the engines doing the right thing in the cases we
//! thought of. These drive [`StateMachine::apply`] with random sequences of
//! every command (outcome batches with fresh and stale generations, probe
//! grants and releases, operator actions, ledger begin/complete/resolve,
//! policies and rollbacks, the kill switch, ticks) over a small universe (2
//! namespaces, 2 servers, 3 tools, 4 replicas, 5 keys, 3 attempts per key),
//! with time jumping forward by up to 40 s and sometimes lagging behind (a new
//! leader's clock), and check after every command what must hold whatever
//! happens:
//!
//! 1. **probes**: live permits never exceed the policy's `concurrent_probes`
//!    (the policy pool raises it to 3, so a bound above one is exercised);
//! 2. **fencing**: generations only grow; watch events carry strictly
//!    increasing revisions, and every generation change is announced;
//! 3. **at most one started**: a key answers `started` to a second attempt
//!    only after an explicit release (or a retention purge), or by taking
//!    over an idempotent write whose lease lapsed, never a non-idempotent one;
//! 4. **ambiguity is sticky**: an ambiguous record leaves that state only by
//!    an operator's resolve or its holder's late definitive answer; a record
//!    becomes free only by an explicit release; ambiguous and in-progress
//!    records are never dropped;
//! 5. **snapshots**: restore gives an equal state with the same digest, and
//!    the run goes on from the restored copy;
//! 6. **determinism**: replaying the commands on a fresh machine gives the
//!    same answers, events and digest; replaying them as a restart does
//!    behind a ledger that already holds their changes gives the same events
//!    and fleet;
//! 7. **refusals**: a rejected command changes nothing but the clock; a tick
//!    repeated at the same time fires nothing;
//! 8. **the clock** never goes back, never passes an entry's stamp, moves at
//!    most one step per entry and follows stamps at a normal pace exactly;
//! 9. **resent reports**: a numbered batch applied again changes nothing.
//!
//! Each checker is a plain function returning `Result<(), String>`; the
//! `checker_catches_*` tests feed them deliberately broken histories to show
//! they can fail (a checker that never fails proves nothing), and
//! `the_generator_reaches_the_interesting_states` shows the random sequences
//! reach half-open breakers with several permits out, takeovers, lapsed
//! leases, releases and purges, so that passing means something.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use fusebox_core::breaker::{BreakerKey, BreakerState, Phase, ProbeAnswer, ProbeResult};
use fusebox_core::ledger::{
    BeginAnswer, BeginRequest, CompleteAnswer, CompleteRequest, Completion, Decision, Ledger,
    LedgerStore, Record, RenewRequest, ResolveAnswer, ResolveRequest, Status,
};
use fusebox_core::limits::{CLOCK_CATCH_UP_RATE, CLOCK_STEP_MS_MAX, LEASE_MS_MAX};
use fusebox_core::machine::{
    Answer, Applied, Command, Fleet, OperatorAction, OutcomeReport, StateMachine, WatchEvent,
};
use fusebox_core::policy::{EffectClass, PolicyDocument, PolicyFormat, Scope};
use fusebox_core::{
    BackendName, Namespace, OutcomeClass, ReplicaId, ServerName, Timestamp, ToolName,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------
// The universe
// ---------------------------------------------------------------------------

const NAMESPACES: [&str; 2] = ["ns-a", "ns-b"];
const SERVERS: [&str; 2] = ["srv-0", "srv-1"];
const TOOLS: [&str; 3] = ["t0", "t1", "t2"];
const REPLICAS: usize = 4;
const KEYS: usize = 5;
const ATTEMPTS: usize = 3;
const STEPS_MAX: usize = 150;
const CASES: u32 = 64;

/// Classes a tool breaker counts as failures; the generator leans on them so
/// that breakers actually open.
const FAILURES: [OutcomeClass; 5] = [
    OutcomeClass::Timeout,
    OutcomeClass::Transport,
    OutcomeClass::ServerError,
    OutcomeClass::ToolError,
    OutcomeClass::Unparsable,
];

/// Raises `concurrent_probes` to 3 and makes breakers trip and recover fast.
const POLICY_FAST: &str = "\
[defaults.breaker]
concurrent_probes = 3
consecutive_failures = 2
open_ms = 1000
";

/// Backoff, quorum, 429s as failures, a window trip on one server, shadow and
/// backend scope on one tool, and a one-minute ledger retention (so purges
/// happen within a run). Still three probes: the main pool never lowers the
/// bound (see `probe_bound_survives_a_policy_that_lowers_it`).
const POLICY_RICH: &str = "\
[defaults.breaker]
concurrent_probes = 3
consecutive_failures = 3
open_ms = 5000
open_backoff_multiplier = 2
open_ms_max = 60000
probe_successes = 2
probe_lease_ms = 3000
min_reporters = 2
rate_limited_is_failure = true

[ledger]
retention_ms = 60000

[servers.srv-1.breaker]
window_ms = 30000
minimum_calls = 4
failure_ratio = 0.5
slow_call_ms = 2000
slow_call_ratio = 0.7

[servers.srv-0.tools.t1]
scope = \"tool_and_backend\"

[servers.srv-1.tools.t2]
shadow = true
";

/// Lowers `concurrent_probes` back to one (only in the shrinking pool).
const POLICY_ONE_PROBE: &str = "\
[defaults.breaker]
concurrent_probes = 1
consecutive_failures = 2
open_ms = 1000
";

fn ns(i: usize) -> Namespace {
    Namespace::new(NAMESPACES[i]).unwrap()
}

fn server(i: usize) -> ServerName {
    ServerName::new(SERVERS[i]).unwrap()
}

fn tool(i: usize) -> ToolName {
    ToolName::new(TOOLS[i]).unwrap()
}

fn replica(i: usize) -> ReplicaId {
    ReplicaId::new(format!("replica-{i}")).unwrap()
}

fn backend() -> BackendName {
    BackendName::new("backend-1").unwrap()
}

fn idem_key(i: usize) -> String {
    format!("key-{i}")
}

fn attempt_id(key: usize, n: usize) -> String {
    format!("key-{key}/attempt-{n}")
}

fn parse_policy(text: &str) -> PolicyDocument {
    PolicyDocument::parse(text, PolicyFormat::Toml).unwrap()
}

/// A document that validation refuses (ratio above one, two trip kinds).
fn invalid_policy() -> PolicyDocument {
    let mut document = parse_policy(POLICY_FAST);
    document.defaults.breaker.failure_ratio = Some(1.5);
    document
}

/// The main pool: `concurrent_probes` only ever rises (1 by default, then 3).
fn main_pool() -> Vec<PolicyDocument> {
    vec![
        parse_policy(POLICY_FAST),
        parse_policy(POLICY_RICH),
        invalid_policy(),
    ]
}

/// A pool whose policies also lower `concurrent_probes` from 3 to 1.
fn shrinking_pool() -> Vec<PolicyDocument> {
    vec![parse_policy(POLICY_FAST), parse_policy(POLICY_ONE_PROBE)]
}

// ---------------------------------------------------------------------------
// Abstract operations, turned into commands against the state at run time
// (so reports can carry the current generation and releases a granted permit)
// ---------------------------------------------------------------------------

/// Which generation a report or release carries.
#[derive(Clone, Copy, Debug)]
enum GenRef {
    Current,
    Stale,
    Raw(u64),
}

/// A breaker in the universe; a backend without a tool is an invalid key.
#[derive(Clone, Copy, Debug)]
struct Target {
    server: usize,
    tool: Option<usize>,
    backend: bool,
}

#[derive(Clone, Debug)]
struct OutcomeOp {
    server: usize,
    tool: usize,
    backend: bool,
    class: OutcomeClass,
    duration_ms: u64,
    server_gen: GenRef,
    tool_gen: GenRef,
}

/// A permit out now (as its holder would return it), one of the last three
/// granted in the run (perhaps lapsed or returned), or a made-up one.
#[derive(Clone, Copy, Debug)]
enum PermitRef {
    Live(usize),
    Granted(usize),
    Random { permit_id: u64, generation: GenRef },
}

/// The attempt that holds the key now, or a fixed one of the key's attempts.
#[derive(Clone, Copy, Debug)]
enum AttemptRef {
    Holder,
    Fixed(usize),
}

#[derive(Clone, Debug)]
enum Op {
    Report {
        ns: usize,
        replica: usize,
        outcomes: Vec<OutcomeOp>,
    },
    Acquire {
        ns: usize,
        target: Target,
        hot: bool,
        replica: usize,
    },
    Release {
        ns: usize,
        target: Target,
        permit: PermitRef,
        class: OutcomeClass,
    },
    Operate {
        ns: usize,
        target: Target,
        action: OperatorAction,
        actor_ok: bool,
    },
    Begin {
        ns: usize,
        key: usize,
        attempt: usize,
        flip_effect: bool,
        other_fingerprint: bool,
        lease_ms: u64,
    },
    Complete {
        ns: usize,
        key: usize,
        attempt: AttemptRef,
        completion: Completion,
    },
    Resolve {
        ns: usize,
        key: usize,
        decision: Decision,
        note_ok: bool,
    },
    Renew {
        ns: usize,
        key: usize,
        attempt: AttemptRef,
        lease_ms: u64,
    },
    ApplyPolicy {
        ns: usize,
        document: usize,
    },
    Rollback {
        ns: usize,
        version: u64,
    },
    KillSwitch {
        ns: usize,
        blocked: bool,
    },
    DeleteNamespace {
        ns: usize,
    },
    Tick,
}

#[derive(Clone, Debug)]
struct Step {
    op: Op,
    advance_ms: u64,
    lag_ms: u64,
    checkpoint: bool,
}

// ---------------------------------------------------------------------------
// Strategies: skewed towards ns-a/srv-0/t0 so that one breaker sees enough
// evidence to open, half-open and close within a run
// ---------------------------------------------------------------------------

fn skewed(n: usize) -> impl Strategy<Value = usize> {
    prop_oneof![3 => Just(0usize), 1 => 0..n]
}

fn class() -> impl Strategy<Value = OutcomeClass> {
    prop_oneof![
        3 => prop::sample::select(FAILURES.to_vec()),
        2 => prop::sample::select(OutcomeClass::ALL.to_vec()),
    ]
}

/// Probes mostly succeed, so that half-open breakers also close.
fn probe_class() -> impl Strategy<Value = OutcomeClass> {
    prop_oneof![
        3 => Just(OutcomeClass::Success),
        1 => prop::sample::select(FAILURES.to_vec()),
        1 => prop::sample::select(OutcomeClass::ALL.to_vec()),
    ]
}

fn gen_ref() -> impl Strategy<Value = GenRef> {
    prop_oneof![
        8 => Just(GenRef::Current),
        1 => Just(GenRef::Stale),
        1 => (0u64..6).prop_map(GenRef::Raw),
    ]
}

fn target() -> impl Strategy<Value = Target> {
    let tool = prop::option::weighted(0.7, skewed(TOOLS.len()));
    (skewed(SERVERS.len()), tool, prop::bool::weighted(0.1)).prop_map(|(server, tool, backend)| {
        Target {
            server,
            tool,
            backend,
        }
    })
}

fn outcome_op() -> impl Strategy<Value = OutcomeOp> {
    let fields = (
        skewed(SERVERS.len()),
        skewed(TOOLS.len()),
        prop::bool::weighted(0.3),
        class(),
        0u64..5_000,
        gen_ref(),
        gen_ref(),
    );
    fields.prop_map(
        |(server, tool, backend, class, duration_ms, server_gen, tool_gen)| OutcomeOp {
            server,
            tool,
            backend,
            class,
            duration_ms,
            server_gen,
            tool_gen,
        },
    )
}

fn permit_ref() -> impl Strategy<Value = PermitRef> {
    prop_oneof![
        3 => any::<usize>().prop_map(PermitRef::Live),
        2 => any::<usize>().prop_map(PermitRef::Granted),
        1 => (0u64..5, gen_ref())
            .prop_map(|(permit_id, generation)| PermitRef::Random { permit_id, generation }),
    ]
}

fn action() -> impl Strategy<Value = OperatorAction> {
    // `for_ms = 0` is refused: it exercises invariant 7.
    let for_ms = || prop_oneof![1 => Just(0u64), 5 => 1u64..60_000];
    let maybe = || prop_oneof![1 => Just(None), 1 => for_ms().prop_map(Some)];
    prop_oneof![
        1 => Just(OperatorAction::ForceOpen { for_ms: None }),
        2 => for_ms().prop_map(|ms| OperatorAction::ForceOpen { for_ms: Some(ms) }),
        3 => Just(OperatorAction::Reset),
        1 => maybe().prop_map(|for_ms| OperatorAction::Disable { for_ms }),
        1 => maybe().prop_map(|for_ms| OperatorAction::MetricsOnly { for_ms }),
    ]
}

fn breaker_op() -> impl Strategy<Value = Op> {
    let outcomes = prop::collection::vec(outcome_op(), 1..5);
    prop_oneof![
        6 => (skewed(2), 0..REPLICAS, outcomes)
            .prop_map(|(ns, replica, outcomes)| Op::Report { ns, replica, outcomes }),
        4 => (skewed(2), target(), any::<bool>(), 0..REPLICAS)
            .prop_map(|(ns, target, hot, replica)| Op::Acquire { ns, target, hot, replica }),
        4 => (skewed(2), target(), permit_ref(), probe_class()).prop_map(
            |(ns, target, permit, class)| Op::Release { ns, target, permit, class }
        ),
        2 => (skewed(2), target(), action(), prop::bool::weighted(0.95)).prop_map(
            |(ns, target, action, actor_ok)| Op::Operate { ns, target, action, actor_ok }
        ),
    ]
}

fn completion() -> impl Strategy<Value = Completion> {
    prop_oneof![
        (0u8..3).prop_map(|n| Completion::Succeeded {
            operation_id: format!("op-{n}"),
            result: vec![n],
        }),
        Just(Completion::FailedBeforeExecution {
            reason: "connection refused".into()
        }),
        Just(Completion::Failed {
            reason: "job not restartable".into()
        }),
        Just(Completion::Ambiguous {
            reason: "timed out after sending".into()
        }),
    ]
}

fn decision() -> impl Strategy<Value = Decision> {
    prop_oneof![
        (0u8..3).prop_map(|n| Decision::Done {
            operation_id: format!("op-{n}")
        }),
        Just(Decision::NotDone),
        Just(Decision::Abandoned),
    ]
}

fn begin_op() -> impl Strategy<Value = Op> {
    // Leases of 0 ms and over the maximum are refused (invariant 7).
    let lease = prop_oneof![1 => Just(0u64), 1 => Just(LEASE_MS_MAX + 1), 18 => 1_000u64..60_000];
    let flags = (prop::bool::weighted(0.1), prop::bool::weighted(0.1));
    (skewed(2), 0..KEYS, 0..ATTEMPTS, flags, lease).prop_map(
        |(ns, key, attempt, (flip_effect, other_fingerprint), lease_ms)| Op::Begin {
            ns,
            key,
            attempt,
            flip_effect,
            other_fingerprint,
            lease_ms,
        },
    )
}

fn ledger_op() -> impl Strategy<Value = Op> {
    let attempt =
        prop_oneof![1 => Just(AttemptRef::Holder), 1 => (0..ATTEMPTS).prop_map(AttemptRef::Fixed)];
    prop_oneof![
        5 => begin_op(),
        4 => (skewed(2), 0..KEYS, attempt.clone(), completion()).prop_map(
            |(ns, key, attempt, completion)| Op::Complete { ns, key, attempt, completion }
        ),
        2 => (skewed(2), 0..KEYS, decision(), prop::bool::weighted(0.95)).prop_map(
            |(ns, key, decision, note_ok)| Op::Resolve { ns, key, decision, note_ok }
        ),
        2 => (skewed(2), 0..KEYS, attempt, 1_000u64..60_000).prop_map(
            |(ns, key, attempt, lease_ms)| Op::Renew { ns, key, attempt, lease_ms }
        ),
    ]
}

fn admin_op(documents: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (skewed(2), 0..documents)
            .prop_map(|(ns, document)| Op::ApplyPolicy { ns, document }),
        1 => (skewed(2), 0u64..5).prop_map(|(ns, version)| Op::Rollback { ns, version }),
        1 => (skewed(2), any::<bool>()).prop_map(|(ns, blocked)| Op::KillSwitch { ns, blocked }),
        1 => skewed(2).prop_map(|ns| Op::DeleteNamespace { ns }),
        3 => Just(Op::Tick),
    ]
}

fn step(documents: usize) -> impl Strategy<Value = Step> {
    let op = prop_oneof![16 => breaker_op(), 11 => ledger_op(), 6 => admin_op(documents)];
    // Now and then a stamp jumps hours or days ahead (a leader's clock
    // stepped, a forged entry): the clock must pace it.
    let advance = prop_oneof![
        10 => Just(0u64),
        40 => 0u64..5_000,
        30 => 0u64..40_000,
        1 => 3_600_000u64..400 * 86_400_000,
    ];
    let lag = prop_oneof![9 => Just(0u64), 1 => 0u64..5_000];
    (op, advance, lag, prop::bool::weighted(0.05)).prop_map(
        |(op, advance_ms, lag_ms, checkpoint)| Step {
            op,
            advance_ms,
            lag_ms,
            checkpoint,
        },
    )
}

/// Replicas racing for permits on a sick breaker, then returning them, all
/// within a second: probe leases are short next to the 40 s jumps of time,
/// and without rounds like this half-open breakers would rarely close.
fn probe_round() -> impl Strategy<Value = Vec<Step>> {
    let probes = prop::collection::vec((probe_class(), 0u64..300), 1..5);
    (skewed(2), target(), probes).prop_map(|(ns, target, probes)| {
        let quick = |op, advance_ms| Step {
            op,
            advance_ms,
            lag_ms: 0,
            checkpoint: false,
        };
        let acquires = probes.iter().enumerate().map(|(replica, (_, ms))| {
            let hot = true;
            quick(
                Op::Acquire {
                    ns,
                    target,
                    hot,
                    replica,
                },
                *ms,
            )
        });
        let releases = probes.iter().map(|(class, ms)| {
            let permit = PermitRef::Live(0);
            quick(
                Op::Release {
                    ns,
                    target,
                    permit,
                    class: *class,
                },
                *ms,
            )
        });
        acquires
            .collect::<Vec<_>>()
            .into_iter()
            .chain(releases)
            .collect()
    })
}

fn steps(documents: usize) -> impl Strategy<Value = Vec<Step>> {
    let cluster = prop_oneof![12 => step(documents).prop_map(|s| vec![s]), 1 => probe_round()];
    prop::collection::vec(cluster, 1..STEPS_MAX).prop_map(|clusters| {
        let mut steps: Vec<Step> = clusters.into_iter().flatten().collect();
        steps.truncate(STEPS_MAX);
        steps
    })
}

// ---------------------------------------------------------------------------
// Checkers: plain functions over observations, each shown to fail below
// ---------------------------------------------------------------------------

/// One breaker's live permits against the bound in force.
#[derive(Clone, Debug)]
struct ProbeCount {
    key: BreakerKey,
    live: usize,
    /// Live permits before the command (a lowered bound revokes nothing).
    before: usize,
    bound: u32,
}

/// Invariant 1: a command never takes a breaker's live permits above its
/// `concurrent_probes`. Lowering the bound revokes nothing (the holders are
/// mid-call); it stops new grants until the count falls below it.
fn check_probe_bound(counts: &[ProbeCount]) -> Result<(), String> {
    for c in counts {
        if c.live > c.bound as usize && c.live > c.before {
            return Err(format!(
                "{}: {} live probe permits, concurrent_probes = {}",
                c.key, c.live, c.bound
            ));
        }
    }
    Ok(())
}

/// Invariant 2a: no breaker disappears and no generation goes down.
fn check_generations(
    before: &BTreeMap<BreakerKey, u64>,
    after: &BTreeMap<BreakerKey, u64>,
    events: &[WatchEvent],
) -> Result<(), String> {
    for (key, old) in before {
        let removed = events
            .iter()
            .any(|e| matches!(e, WatchEvent::BreakerRemoved { key: k, .. } if k == key));
        match after.get(key) {
            Some(new) if new >= old && !removed => {}
            Some(new) => return Err(format!("{key}: generation went from {old} to {new}")),
            // A breaker leaves only with its namespace, and watchers are told.
            None if removed => {}
            None => return Err(format!("{key}: breaker at generation {old} disappeared")),
        }
    }
    Ok(())
}

/// What watchers have been told so far.
#[derive(Clone, Debug, Default)]
struct WatchState {
    revision: u64,
    announced: BTreeMap<BreakerKey, u64>,
}

/// Invariant 2b: revisions strictly increase over the whole run, and each
/// breaker event announces a generation above the last one announced.
fn check_watch_events(state: &mut WatchState, events: &[WatchEvent]) -> Result<(), String> {
    for event in events {
        let revision = event.revision();
        if revision <= state.revision {
            return Err(format!(
                "revision {revision} after revision {}",
                state.revision
            ));
        }
        state.revision = revision;
        if let WatchEvent::BreakerRemoved { key, .. } = event {
            // Made again later, it starts over from generation 0.
            state.announced.remove(key);
        }
        if let WatchEvent::Breaker { view, .. } = event {
            let last = state.announced.insert(view.key.clone(), view.generation);
            if last.is_some_and(|g| g >= view.generation) {
                return Err(format!(
                    "{}: announced generation {} after {}",
                    view.key,
                    view.generation,
                    last.unwrap_or_default()
                ));
            }
        }
    }
    Ok(())
}

/// Invariant 2c: a breaker whose generation changed was announced at it.
fn check_changes_announced(
    before: &BTreeMap<BreakerKey, u64>,
    after: &BTreeMap<BreakerKey, u64>,
    events: &[WatchEvent],
) -> Result<(), String> {
    for (key, generation) in after {
        if before.get(key).copied().unwrap_or(0) == *generation {
            continue;
        }
        let announced = events.iter().rev().find_map(|e| match e {
            WatchEvent::Breaker { view, .. } if &view.key == key => Some(view.generation),
            _ => None,
        });
        if announced != Some(*generation) {
            return Err(format!(
                "{key}: generation {generation} but watchers were told {announced:?}"
            ));
        }
    }
    Ok(())
}

/// What the ledger answered that matters for "at most one started".
#[derive(Clone, Debug, PartialEq)]
enum LedgerEvent {
    /// `begin` answered started; effect and lease as the record holds them.
    Started {
        ns: String,
        key: String,
        attempt: String,
        takeover: bool,
        effect: EffectClass,
        at: u64,
        lease_until: Option<u64>,
    },
    /// A recorded failure before execution, or a resolved "not done".
    Released { ns: String, key: String },
    /// Retention removed a final or released record.
    Purged { ns: String, key: String },
}

/// Who holds a key, as far as the history shows.
struct Holder {
    attempt: String,
    lease_until: Option<u64>,
}

/// Invariant 3: between two `started` answers to different attempts of one
/// key there is a release or purge, or the second takes over an idempotent
/// write whose lease lapsed; a non-idempotent write is never taken over.
fn check_at_most_one_started(history: &[LedgerEvent]) -> Result<(), String> {
    let mut holders: BTreeMap<(&str, &str), Holder> = BTreeMap::new();
    for (i, event) in history.iter().enumerate() {
        match event {
            LedgerEvent::Released { ns, key } | LedgerEvent::Purged { ns, key } => {
                holders.remove(&(ns.as_str(), key.as_str()));
            }
            LedgerEvent::Started {
                ns,
                key,
                attempt,
                takeover,
                effect,
                at,
                lease_until,
            } => {
                let id = (ns.as_str(), key.as_str());
                check_started(holders.get(&id), attempt, *takeover, *effect, *at)
                    .map_err(|e| format!("history event {i}, {ns}/{key}: {e}"))?;
                let holder = Holder {
                    attempt: attempt.clone(),
                    lease_until: *lease_until,
                };
                holders.insert(id, holder);
            }
        }
    }
    Ok(())
}

fn check_started(
    holder: Option<&Holder>,
    attempt: &str,
    takeover: bool,
    effect: EffectClass,
    at: u64,
) -> Result<(), String> {
    if takeover {
        if effect != EffectClass::IdempotentWrite {
            return Err(format!("{attempt} took over a {} record", effect.as_str()));
        }
        let Some(holder) = holder else {
            return Err(format!("{attempt} took over a key nobody held"));
        };
        if holder.lease_until.is_some_and(|until| at < until) {
            return Err(format!(
                "{attempt} took over {}'s live lease at {at}",
                holder.attempt
            ));
        }
        return Ok(());
    }
    match holder {
        Some(h) if h.attempt != attempt => Err(format!(
            "started {attempt} while {} held the key, with no release between",
            h.attempt
        )),
        _ => Ok(()),
    }
}

/// Whether `command` answered by `answer` is an explicit release of `key`.
fn is_release(ns: &Namespace, key: &str, command: &Command, answer: &Answer) -> bool {
    match (command, answer) {
        (
            Command::Complete { namespace, request },
            Answer::Complete(CompleteAnswer::Recorded { .. }),
        ) => {
            namespace == ns
                && request.key == key
                && matches!(request.completion, Completion::FailedBeforeExecution { .. })
        }
        (
            Command::Resolve { namespace, request },
            Answer::Resolve(ResolveAnswer::Resolved { .. }),
        ) => namespace == ns && request.key == key && request.decision == Decision::NotDone,
        _ => false,
    }
}

/// Whether `command` may take `before` out of AMBIGUOUS: an operator's
/// resolve, or the holder's late definitive (succeeded or failed) answer.
fn may_settle_ambiguity(
    ns: &Namespace,
    before: &Record,
    command: &Command,
    answer: &Answer,
) -> bool {
    match (command, answer) {
        (
            Command::Resolve { namespace, request },
            Answer::Resolve(ResolveAnswer::Resolved { .. }),
        ) => namespace == ns && request.key == before.key,
        (
            Command::Complete { namespace, request },
            Answer::Complete(CompleteAnswer::Recorded { .. }),
        ) => {
            namespace == ns
                && request.key == before.key
                && request.attempt == before.attempt
                && matches!(
                    request.completion,
                    Completion::Succeeded { .. } | Completion::Failed { .. }
                )
        }
        _ => false,
    }
}

/// Invariant 4: one key's record (as `lookup` shows it) before and after a
/// command. Ambiguous stays ambiguous unless settled; free (released) only by
/// an explicit release; a record is dropped only by a tick's purge of a
/// final or released record past retention; a non-idempotent lease that
/// lapsed shows as ambiguous, never as in progress.
fn check_record_transition(
    ns: &Namespace,
    before: Option<&Record>,
    after: Option<&Record>,
    (command, answer): (&Command, &Answer),
    now: Timestamp,
) -> Result<(), String> {
    if let Some(r) = after {
        let lapsed = r.lease_until.is_none_or(|until| until <= now);
        if r.effect == EffectClass::NonIdempotentWrite && r.status == Status::InProgress && lapsed {
            return Err(format!(
                "{ns}/{}: lapsed non-idempotent lease still in progress",
                r.key
            ));
        }
    }
    let Some(before) = before else {
        return match after {
            Some(r) if r.status != Status::InProgress => {
                Err(format!("{ns}/{}: new record is {:?}", r.key, r.status))
            }
            _ => Ok(()),
        };
    };
    let Some(after) = after else {
        let expired = before.expires_at.is_some_and(|at| at <= now);
        if matches!(command, Command::Tick) && before.status.is_purgeable() && expired {
            return Ok(());
        }
        return Err(format!(
            "{ns}/{}: {:?} record dropped",
            before.key, before.status
        ));
    };
    let (from, to) = (before.status, after.status);
    let settled = from == Status::Ambiguous && to != Status::Ambiguous;
    if settled && !may_settle_ambiguity(ns, before, command, answer) {
        return Err(format!(
            "{ns}/{}: left ambiguous for {to:?} unsettled",
            before.key
        ));
    }
    if to == Status::Released
        && from != Status::Released
        && !is_release(ns, &before.key, command, answer)
    {
        return Err(format!(
            "{ns}/{}: {from:?} became released without a release",
            before.key
        ));
    }
    Ok(())
}

/// Invariant 5: snapshot and restore give an equal state and digest; the
/// restored copy is returned so the run goes on from it.
fn check_snapshot_round_trip(sm: &StateMachine) -> Result<StateMachine, String> {
    let bytes = sm.snapshot().map_err(|e| format!("snapshot: {e}"))?;
    let restored = StateMachine::restore(&bytes).map_err(|e| format!("restore: {e}"))?;
    let (a, b) = (digest(sm)?, digest(&restored)?);
    if a != b {
        return Err(format!("digest {a} became {b} through a snapshot"));
    }
    if restored != *sm {
        return Err("restored state differs from the original (indexes?)".into());
    }
    Ok(restored)
}

fn digest(sm: &StateMachine) -> Result<String, String> {
    sm.digest().map_err(|e| format!("digest: {e}"))
}

/// Invariant 6: the same commands on a fresh machine give the same answers,
/// events and digest.
fn check_replay(
    trace: &[(Command, Timestamp)],
    applied: &[Applied],
    want: &str,
) -> Result<(), String> {
    let mut sm = StateMachine::new();
    for (i, ((command, at), first)) in trace.iter().zip(applied).enumerate() {
        let again = sm.apply(command, *at);
        if again != *first {
            return Err(format!(
                "step {i}: replay gave {again:?}, first run {first:?}"
            ));
        }
    }
    let got = digest(&sm)?;
    if got != want {
        return Err(format!("replay digest {got}, first run {want}"));
    }
    Ok(())
}

/// Invariant 6b: the same commands replayed as a restart replays them behind
/// a ledger that already holds their changes ([`StateMachine::replay`], on a
/// fresh machine whose ledger stays empty) give the same events and, at the
/// end, the same fleet: the fleet depends on what the ledger answers only
/// through commands that say so ([`Command::fleet_reads_ledger`]), and
/// those are never replayed: the store saves the fleet with them, so a
/// replay resumes from the fleet as it was right after one (`saved`, by
/// step). An empty ledger stands for one that moved on; what only binds
/// with thousands of records (a tick's timer budget) is beyond these
/// sequences and tested in `machine/tests/replay.rs`.
fn check_replay_behind_ledger(
    trace: &[(Command, Timestamp)],
    applied: &[Applied],
    saved: &BTreeMap<usize, Fleet>,
    want: &StateMachine,
) -> Result<(), String> {
    let mut sm = StateMachine::new();
    for (i, ((command, at), first)) in trace.iter().zip(applied).enumerate() {
        if command.fleet_reads_ledger() {
            let fleet = saved
                .get(&i)
                .ok_or_else(|| format!("step {i}: no fleet saved with {command:?}"))?;
            sm = StateMachine::from_parts(fleet.clone(), Ledger::default());
            continue;
        }
        let events = sm.replay(command, *at);
        if events != first.events {
            return Err(format!(
                "step {i}: replay behind the ledger announced {events:?}, first run {:?}",
                first.events
            ));
        }
    }
    if sm.fleet() != want.fleet() {
        return Err(format!(
            "the fleet replayed behind the ledger differs: {:?}, first run {:?}",
            sm.fleet(),
            want.fleet()
        ));
    }
    Ok(())
}

/// Invariant 7: a refused command changes nothing but the clock. `before`
/// gets the same clock through a command that changes nothing else
/// (completing an absent key), then must equal `after`.
fn check_rejected_left_state(
    mut before: StateMachine,
    after: &StateMachine,
    at: Timestamp,
) -> Result<(), String> {
    let noop = Command::Complete {
        namespace: ns(0),
        request: CompleteRequest {
            key: "absent-key".into(),
            attempt: "nobody".into(),
            completion: Completion::Failed {
                reason: String::new(),
            },
        },
    };
    let answer = before.apply(&noop, at).answer;
    if answer != Answer::Complete(CompleteAnswer::NotFound) {
        return Err(format!("the clock-only command answered {answer:?}"));
    }
    if before != *after || digest(&before)? != digest(after)? {
        return Err("a rejected command changed the state".into());
    }
    Ok(())
}

/// Invariant 7b: a tick repeated at the same time fires no timer and changes
/// nothing (the deadline indexes hold exactly what is due).
fn check_tick_idempotent(sm: &StateMachine, at: Timestamp) -> Result<(), String> {
    let mut again = sm.clone();
    let applied = again.apply(&Command::Tick, at);
    let quiet = applied.answer == Answer::Ticked { timers: 0 } && applied.events.is_empty();
    if !quiet || again != *sm {
        return Err(format!("a second tick at {at} did {applied:?}"));
    }
    Ok(())
}

/// Invariant 9: a numbered report batch resent (its answer was lost)
/// changes nothing and announces nothing.
fn check_resend_changes_nothing(
    sm: &StateMachine,
    command: &Command,
    at: Timestamp,
) -> Result<(), String> {
    let Command::ReportOutcomes { batch_seq, .. } = command else {
        return Ok(());
    };
    if *batch_seq == 0 {
        return Ok(());
    }
    let mut again = sm.clone();
    let applied = again.apply(command, at);
    if again != *sm || !applied.events.is_empty() {
        return Err(format!(
            "batch {batch_seq} resent changed the state: {applied:?}"
        ));
    }
    Ok(())
}

/// Invariant 8: the state clock never goes back, never passes the entry's
/// stamp, moves at most one step per entry, and follows a stamp that moved
/// at a normal pace exactly (`clock.rs`).
fn check_clock(
    before: Timestamp,
    last_stamp: Option<Timestamp>,
    stamp: Timestamp,
    after: Timestamp,
) -> Result<(), String> {
    let moved = after.millis_since(before);
    let wrong = if after < before {
        Some("went back")
    } else if after > before.max(stamp) {
        Some("passed the stamp")
    } else if before != Timestamp::ZERO && moved > CLOCK_STEP_MS_MAX {
        Some("moved more than one step")
    } else {
        let ahead = stamp.millis_since(before);
        let paced = last_stamp.is_none_or(|last| {
            ahead <= CLOCK_STEP_MS_MAX
                && ahead <= stamp.millis_since(last).saturating_mul(CLOCK_CATCH_UP_RATE)
        });
        (paced && after != before.max(stamp)).then_some("held back a stamp at a normal pace")
    };
    match wrong {
        Some(what) => Err(format!(
            "the clock {what}: {before} -> {after} for an entry stamped {stamp}"
        )),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// The run: turn operations into commands, apply, check
// ---------------------------------------------------------------------------

/// How often the interesting things happened (for the coverage test).
#[derive(Clone, Debug, Default)]
struct Stats {
    grants: usize,
    max_live: usize,
    closed_by_probes: usize,
    takeovers: usize,
    lapsed: usize,
    releases: usize,
    purges: usize,
    rejected: usize,
    restores: usize,
    clock_jumps: usize,
    deleted_namespaces: usize,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.grants += o.grants;
        self.max_live = self.max_live.max(o.max_live);
        self.closed_by_probes += o.closed_by_probes;
        self.takeovers += o.takeovers;
        self.lapsed += o.lapsed;
        self.releases += o.releases;
        self.purges += o.purges;
        self.rejected += o.rejected;
        self.restores += o.restores;
        self.clock_jumps += o.clock_jumps;
        self.deleted_namespaces += o.deleted_namespaces;
    }
}

struct Run<'a> {
    sm: StateMachine,
    pool: &'a [PolicyDocument],
    clock: u64,
    grants: Vec<(BreakerKey, u64, u64)>,
    generations: BTreeMap<BreakerKey, u64>,
    live: BTreeMap<BreakerKey, usize>,
    watch: WatchState,
    records: BTreeMap<(usize, usize), Option<Record>>,
    history: Vec<LedgerEvent>,
    trace: Vec<(Command, Timestamp)>,
    applied: Vec<Applied>,
    /// The fleet right after each step whose command reads the ledger into
    /// the fleet, as a store saves it.
    saved: BTreeMap<usize, Fleet>,
    stats: Stats,
}

impl<'a> Run<'a> {
    fn new(pool: &'a [PolicyDocument]) -> Self {
        Run {
            sm: StateMachine::new(),
            pool,
            clock: 1_000_000,
            grants: Vec::new(),
            generations: BTreeMap::new(),
            live: BTreeMap::new(),
            watch: WatchState::default(),
            records: BTreeMap::new(),
            history: Vec::new(),
            trace: Vec::new(),
            applied: Vec::new(),
            saved: BTreeMap::new(),
            stats: Stats::default(),
        }
    }

    /// Every permit out in a namespace, with its breaker and generation.
    fn live_permits(&self, n: usize) -> Vec<(BreakerKey, u64, u64)> {
        let namespace = ns(n);
        let mut out = Vec::new();
        for (key, breaker) in self.sm.breakers_in(&namespace) {
            if let Phase::HalfOpen { permits, .. } = breaker.phase() {
                let ids = permits
                    .keys()
                    .map(|id| (key.clone(), *id, breaker.generation()));
                out.extend(ids);
            }
        }
        out
    }

    fn release(&self, n: usize, target: Target, permit: PermitRef, class: OutcomeClass) -> Command {
        let live = self.live_permits(n);
        let (key, permit_id, generation) = match permit {
            PermitRef::Live(i) if !live.is_empty() => live[i % live.len()].clone(),
            PermitRef::Granted(i) if !self.grants.is_empty() => {
                let recent = self.grants.len().min(3);
                self.grants[self.grants.len() - 1 - i % recent].clone()
            }
            PermitRef::Live(_) | PermitRef::Granted(_) => (breaker_key(n, target), 1, 0),
            PermitRef::Random {
                permit_id,
                generation: seen,
            } => {
                let key = breaker_key(n, target);
                let seen = generation(&self.sm, &key, seen);
                (key, permit_id, seen)
            }
        };
        Command::ReleaseProbe {
            key,
            permit_id,
            generation,
            outcome: class,
        }
    }

    /// A hot acquire goes to a breaker that is open or half-open, if any,
    /// so that several replicas ask for permits on the same breaker.
    fn acquire_key(&self, n: usize, target: Target, hot: bool) -> BreakerKey {
        let sick = |(k, _): &(&BreakerKey, _)| {
            let state = self.sm.view(k).state;
            matches!(state, BreakerState::Open | BreakerState::HalfOpen)
        };
        let namespace = ns(n);
        let hot_key = hot
            .then(|| {
                self.sm
                    .breakers_in(&namespace)
                    .filter(sick)
                    .map(|(k, _)| k.clone())
                    .last()
            })
            .flatten();
        hot_key.unwrap_or_else(|| breaker_key(n, target))
    }

    fn breaker_command(&self, op: &Op) -> Option<Command> {
        Some(match op {
            Op::Report {
                ns: n,
                replica: r,
                outcomes,
            } => Command::ReportOutcomes {
                namespace: ns(*n),
                replica: replica(*r),
                // Growing per replica, as the SDK numbers its batches.
                batch_seq: self.trace.len() as u64 + 1,
                outcomes: outcomes
                    .iter()
                    .map(|o| outcome_report(&self.sm, *n, o))
                    .collect(),
            },
            Op::Acquire {
                ns: n,
                target,
                hot,
                replica: r,
            } => Command::AcquireProbe {
                key: self.acquire_key(*n, *target, *hot),
                replica: replica(*r),
                // One replica asks for its call's deadline as its lease.
                lease_ms: (*r == 3).then_some(25_000),
            },
            Op::Release {
                ns: n,
                target,
                permit,
                class,
            } => self.release(*n, *target, *permit, *class),
            Op::Operate {
                ns: n,
                target,
                action,
                actor_ok,
            } => Command::Operate {
                key: breaker_key(*n, *target),
                action: action.clone(),
                actor: if *actor_ok { "alice" } else { "" }.into(),
                reason: "exercise".into(),
            },
            _ => return None,
        })
    }

    fn ledger_command(&self, op: &Op) -> Option<Command> {
        Some(match op {
            Op::Begin {
                ns: n,
                key,
                attempt,
                flip_effect,
                other_fingerprint,
                lease_ms,
            } => Command::Begin {
                namespace: ns(*n),
                request: begin_request(*key, *attempt, *flip_effect, *other_fingerprint, *lease_ms),
            },
            Op::Complete {
                ns: n,
                key,
                attempt,
                completion,
            } => Command::Complete {
                namespace: ns(*n),
                request: CompleteRequest {
                    key: idem_key(*key),
                    attempt: self.attempt(*n, *key, *attempt),
                    completion: completion.clone(),
                },
            },
            Op::Resolve {
                ns: n,
                key,
                decision,
                note_ok,
            } => Command::Resolve {
                namespace: ns(*n),
                request: ResolveRequest {
                    key: idem_key(*key),
                    decision: decision.clone(),
                    actor: "alice".into(),
                    note: if *note_ok { "checked the backend" } else { "" }.into(),
                },
            },
            Op::Renew {
                ns: n,
                key,
                attempt,
                lease_ms,
            } => Command::Renew {
                namespace: ns(*n),
                request: RenewRequest {
                    key: idem_key(*key),
                    attempt: self.attempt(*n, *key, *attempt),
                    lease_ms: *lease_ms,
                },
            },
            _ => return None,
        })
    }

    fn attempt(&self, n: usize, key: usize, r: AttemptRef) -> String {
        let holder = self.sm.ledger().get(&ns(n), &idem_key(key));
        match (r, holder) {
            (AttemptRef::Holder, Some(record)) => record.attempt.clone(),
            (AttemptRef::Holder, None) => attempt_id(key, 0),
            (AttemptRef::Fixed(a), _) => attempt_id(key, a),
        }
    }

    fn admin_command(&self, op: &Op) -> Command {
        match op {
            Op::ApplyPolicy { ns: n, document } => Command::ApplyPolicy {
                namespace: ns(*n),
                document: Box::new(self.pool[*document].clone()),
                actor: "alice".into(),
                reason: "tune".into(),
            },
            Op::Rollback { ns: n, version } => Command::RollbackPolicy {
                namespace: ns(*n),
                version: *version,
                actor: "alice".into(),
                reason: "roll back".into(),
            },
            Op::KillSwitch { ns: n, blocked } => Command::SetKillSwitch {
                namespace: ns(*n),
                writes_blocked: *blocked,
                actor: "alice".into(),
                reason: "exercise".into(),
            },
            Op::DeleteNamespace { ns: n } => Command::DeleteNamespace {
                namespace: ns(*n),
                actor: "alice".into(),
                reason: "exercise".into(),
            },
            _ => Command::Tick,
        }
    }

    fn command(&self, op: &Op) -> Command {
        self.breaker_command(op)
            .or_else(|| self.ledger_command(op))
            .unwrap_or_else(|| self.admin_command(op))
    }

    fn step(&mut self, step: &Step) -> Result<(), String> {
        self.clock += step.advance_ms;
        let at = Timestamp(self.clock.saturating_sub(step.lag_ms));
        let command = self.command(&step.op);
        let before = self.sm.clone();
        let applied = self.sm.apply(&command, at);
        let last_stamp = self.trace.last().map(|(_, at)| *at);
        check_clock(before.now(), last_stamp, at, self.sm.now())?;
        if self.sm.clock().clamps() > before.clock().clamps() {
            self.stats.clock_jumps += 1;
        }
        if matches!(applied.answer, Answer::NamespaceDeleted(_)) {
            self.stats.deleted_namespaces += 1;
        }
        if matches!(applied.answer, Answer::Rejected(_)) {
            self.stats.rejected += 1;
            check_rejected_left_state(before, &self.sm, at)?;
        }
        self.check_breakers(&applied)?;
        self.check_ledger(&command, &applied.answer)?;
        self.note_probe(&command, &applied.answer);
        check_resend_changes_nothing(&self.sm, &command, at)?;
        if matches!(command, Command::Tick) {
            check_tick_idempotent(&self.sm, at)?;
        }
        if step.checkpoint {
            self.sm = check_snapshot_round_trip(&self.sm)?;
            self.stats.restores += 1;
        }
        if command.fleet_reads_ledger() {
            self.saved.insert(self.trace.len(), self.sm.fleet().clone());
        }
        self.trace.push((command, at));
        self.applied.push(applied);
        Ok(())
    }

    fn check_breakers(&mut self, applied: &Applied) -> Result<(), String> {
        let mut counts = Vec::new();
        let mut generations = BTreeMap::new();
        for n in 0..NAMESPACES.len() {
            for (key, breaker) in self.sm.breakers_in(&ns(n)) {
                let bound = self.sm.breaker_policy(key).concurrent_probes;
                let live = breaker.live_permits();
                let before = self.live.insert(key.clone(), live).unwrap_or(0);
                counts.push(ProbeCount {
                    key: key.clone(),
                    live,
                    before,
                    bound,
                });
                generations.insert(key.clone(), self.sm.view(key).generation);
                self.stats.max_live = self.stats.max_live.max(live);
            }
        }
        check_probe_bound(&counts)?;
        check_generations(&self.generations, &generations, &applied.events)?;
        self.live.retain(|key, _| generations.contains_key(key));
        check_watch_events(&mut self.watch, &applied.events)?;
        check_changes_announced(&self.generations, &generations, &applied.events)?;
        if self.watch.revision != self.sm.revision() {
            return Err(format!(
                "machine at revision {}, last event {}",
                self.sm.revision(),
                self.watch.revision
            ));
        }
        self.generations = generations;
        Ok(())
    }

    fn check_ledger(&mut self, command: &Command, answer: &Answer) -> Result<(), String> {
        let now = self.sm.now();
        for n in 0..NAMESPACES.len() {
            for k in 0..KEYS {
                let after = self.sm.ledger().lookup(&ns(n), &idem_key(k), now);
                let before = self.records.remove(&(n, k)).flatten();
                check_record_transition(
                    &ns(n),
                    before.as_ref(),
                    after.as_ref(),
                    (command, answer),
                    now,
                )?;
                if before.is_some() && after.is_none() {
                    self.stats.purges += 1;
                    self.history.push(LedgerEvent::Purged {
                        ns: ns(n).to_string(),
                        key: idem_key(k),
                    });
                }
                let lapsed = |r: &Record| r.status == Status::Ambiguous && r.lease_until.is_none();
                if after.as_ref().is_some_and(lapsed) && !before.as_ref().is_some_and(lapsed) {
                    self.stats.lapsed += 1;
                }
                self.records.insert((n, k), after);
            }
        }
        self.note_ledger(command, answer);
        check_at_most_one_started(&self.history)
    }

    /// Appends what `check_at_most_one_started` needs to the history.
    fn note_ledger(&mut self, command: &Command, answer: &Answer) {
        let event = match (command, answer) {
            (
                Command::Begin { namespace, request },
                Answer::Begin(BeginAnswer::Started {
                    attempt, takeover, ..
                }),
            ) => {
                let record = self.sm.ledger().get(namespace, &request.key);
                self.stats.takeovers += usize::from(*takeover);
                LedgerEvent::Started {
                    ns: namespace.to_string(),
                    key: request.key.clone(),
                    attempt: attempt.clone(),
                    takeover: *takeover,
                    effect: record.as_ref().map_or(request.effect, |r| r.effect),
                    at: self.sm.now().as_millis(),
                    lease_until: record.and_then(|r| r.lease_until).map(Timestamp::as_millis),
                }
            }
            (Command::Complete { namespace, request }, _)
                if is_release(namespace, &request.key, command, answer) =>
            {
                released(namespace, &request.key)
            }
            (Command::Resolve { namespace, request }, _)
                if is_release(namespace, &request.key, command, answer) =>
            {
                released(namespace, &request.key)
            }
            _ => return,
        };
        self.stats.releases += usize::from(matches!(event, LedgerEvent::Released { .. }));
        self.history.push(event);
    }

    /// Remembers granted permits (for later releases) and probe closings.
    fn note_probe(&mut self, command: &Command, answer: &Answer) {
        match (command, answer) {
            (
                Command::AcquireProbe { key, .. },
                Answer::Probe(ProbeAnswer::Granted {
                    permit_id,
                    generation,
                    ..
                }),
            ) => {
                self.stats.grants += 1;
                self.grants.push((key.clone(), *permit_id, *generation));
            }
            (Command::ReleaseProbe { key, .. }, Answer::ProbeReleased(_)) => {
                let closed = self.sm.view(key).state == BreakerState::Closed;
                let result = matches!(answer, Answer::ProbeReleased(ProbeResult::Closed));
                self.stats.closed_by_probes += usize::from(closed && result);
            }
            _ => {}
        }
    }
}

fn generation(sm: &StateMachine, key: &BreakerKey, r: GenRef) -> u64 {
    let current = sm.view(key).generation;
    match r {
        GenRef::Current => current,
        GenRef::Stale => current.saturating_sub(1),
        GenRef::Raw(g) => g,
    }
}

/// An outcome carrying the generations of the breakers it will reach (the
/// tool's key depends on the scope in force).
fn outcome_report(sm: &StateMachine, n: usize, o: &OutcomeOp) -> OutcomeReport {
    let (server, tool) = (server(o.server), tool(o.tool));
    let backend = o.backend.then(backend);
    let scope = sm.policy_document(&ns(n)).tool_policy(&server, &tool).scope;
    let mut tool_key = BreakerKey::tool(ns(n), server.clone(), tool.clone());
    if scope == Scope::ToolAndBackend {
        tool_key = tool_key.with_backend(backend.clone());
    }
    let server_key = BreakerKey::server(ns(n), server.clone());
    OutcomeReport {
        server_generation: generation(sm, &server_key, o.server_gen),
        tool_generation: generation(sm, &tool_key, o.tool_gen),
        server,
        tool,
        backend,
        class: o.class,
        duration_ms: o.duration_ms,
    }
}

fn released(namespace: &Namespace, key: &str) -> LedgerEvent {
    LedgerEvent::Released {
        ns: namespace.to_string(),
        key: key.to_owned(),
    }
}

fn breaker_key(n: usize, t: Target) -> BreakerKey {
    let mut key = BreakerKey::server(ns(n), server(t.server));
    key.tool = t.tool.map(tool);
    if t.backend {
        key.backend = Some(backend());
    }
    key
}

/// Even keys are non-idempotent writes, odd ones idempotent; `flip` swaps
/// it. The fingerprint names the effect, so the same key begun with the other
/// effect is a mismatch, as the same key sent with another body would be.
fn begin_request(
    key: usize,
    attempt: usize,
    flip: bool,
    other_fp: bool,
    lease_ms: u64,
) -> BeginRequest {
    let effect = if key.is_multiple_of(2) != flip {
        EffectClass::NonIdempotentWrite
    } else {
        EffectClass::IdempotentWrite
    };
    BeginRequest {
        key: idem_key(key),
        fingerprint: format!("fp-{}-{}", u8::from(other_fp), effect.as_str()),
        intent_id: format!("intent-{key}"),
        tool: tool(key % TOOLS.len()),
        target: format!("job-{key}"),
        effect,
        attempt: attempt_id(key, attempt),
        lease_ms,
    }
}

/// Runs one case: every step checked, snapshots at checkpoints and at the
/// end, then the whole trace replayed on a fresh machine.
fn run_case(pool: &[PolicyDocument], steps: &[Step]) -> Result<Stats, String> {
    let mut run = Run::new(pool);
    for (i, step) in steps.iter().enumerate() {
        run.step(step)
            .map_err(|e| format!("step {i} {:?} at {}: {e}", step.op, run.clock))?;
    }
    let end = check_snapshot_round_trip(&run.sm)?;
    check_replay(&run.trace, &run.applied, &digest(&end)?)?;
    check_replay_behind_ledger(&run.trace, &run.applied, &run.saved, &run.sm)?;
    Ok(run.stats)
}

// ---------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Invariants 1 to 7 after every command of a random sequence.
    #[test]
    fn invariants_hold_over_random_command_sequences(steps in steps(main_pool().len())) {
        run_case(&main_pool(), &steps).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    // A known failure: no regression file is written for it.
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Invariant 1 with policies that lower `concurrent_probes` again; see
    /// `probe_bound_survives_a_policy_that_lowers_it` for the minimal case.
    #[test]
    fn probe_bound_holds_when_policies_lower_it(steps in steps(shrinking_pool().len())) {
        run_case(&shrinking_pool(), &steps).map_err(TestCaseError::fail)?;
    }
}

/// Without this, the properties above could pass by never reaching the
/// states they are about.
#[test]
fn the_generator_reaches_the_interesting_states() {
    let pool = main_pool();
    let strategy = steps(pool.len());
    let mut runner = TestRunner::deterministic();
    let mut total = Stats::default();
    for _ in 0..32 {
        let steps = strategy.new_tree(&mut runner).unwrap().current();
        total.add(&run_case(&pool, &steps).unwrap());
    }
    eprintln!("coverage over 32 cases: {total:?}");
    assert!(total.grants >= 10, "{total:?}");
    assert!(
        total.max_live >= 2,
        "never more than one permit out: {total:?}"
    );
    assert!(total.closed_by_probes > 0, "{total:?}");
    assert!(total.takeovers > 0, "{total:?}");
    assert!(total.lapsed > 0, "{total:?}");
    assert!(total.releases > 0, "{total:?}");
    assert!(total.purges > 0, "{total:?}");
    assert!(total.rejected > 0, "{total:?}");
    assert!(total.restores > 0, "{total:?}");
    assert!(total.clock_jumps > 0, "{total:?}");
    assert!(total.deleted_namespaces > 0, "{total:?}");
}

// ---------------------------------------------------------------------------
// A deliberately broken history must make each checker fail
// ---------------------------------------------------------------------------

fn probe_key() -> BreakerKey {
    BreakerKey::tool(ns(0), server(0), tool(0))
}

fn timeout_on_t0(sm: &StateMachine) -> OutcomeReport {
    let op = OutcomeOp {
        server: 0,
        tool: 0,
        backend: false,
        class: OutcomeClass::Timeout,
        duration_ms: 3_000,
        server_gen: GenRef::Current,
        tool_gen: GenRef::Current,
    };
    outcome_report(sm, 0, &op)
}

/// ns-a under `POLICY_FAST`, with srv-0 and srv-0/t0 tripped by two
/// timeouts at 0 ms; returns the events, in order.
fn tripped_machine() -> (StateMachine, Vec<WatchEvent>) {
    let mut sm = StateMachine::new();
    let policy = Command::ApplyPolicy {
        namespace: ns(0),
        document: Box::new(parse_policy(POLICY_FAST)),
        actor: "alice".into(),
        reason: "tune".into(),
    };
    let mut events = sm.apply(&policy, Timestamp(0)).events;
    for _ in 0..2 {
        let report = Command::ReportOutcomes {
            namespace: ns(0),
            replica: replica(0),
            batch_seq: 0,
            outcomes: vec![timeout_on_t0(&sm)],
        };
        events.extend(sm.apply(&report, Timestamp(0)).events);
    }
    (sm, events)
}

#[test]
fn checker_catches_more_live_permits_than_the_bound() {
    let at_bound = ProbeCount {
        key: probe_key(),
        live: 3,
        before: 2,
        bound: 3,
    };
    assert_eq!(check_probe_bound(std::slice::from_ref(&at_bound)), Ok(()));
    let over = ProbeCount {
        live: 4,
        ..at_bound
    };
    let err = check_probe_bound(&[over]).unwrap_err();
    assert!(err.contains("4 live probe permits"), "{err}");
}

#[test]
fn checker_catches_a_clock_that_jumps_lags_or_goes_back() {
    let (t, ms) = (Timestamp(1_000_000), |n: u64| Timestamp(1_000_000 + n));
    assert_eq!(check_clock(t, Some(t), ms(1_000), ms(1_000)), Ok(()));
    // A stamp a day ahead moves the clock one step, not a day.
    let day = ms(86_400_000);
    assert_eq!(check_clock(t, Some(t), day, ms(CLOCK_STEP_MS_MAX)), Ok(()));
    let err = check_clock(t, Some(t), day, day).unwrap_err();
    assert!(err.contains("more than one step"), "{err}");
    let err = check_clock(t, Some(t), ms(1_000), ms(500)).unwrap_err();
    assert!(err.contains("held back"), "{err}");
    let err = check_clock(t, Some(t), ms(1_000), ms(2_000)).unwrap_err();
    assert!(err.contains("passed the stamp"), "{err}");
    let err = check_clock(t, Some(t), Timestamp(5), Timestamp(5)).unwrap_err();
    assert!(err.contains("went back"), "{err}");
}

#[test]
fn checker_catches_a_resent_batch_counted_twice() {
    let (sm, _) = tripped_machine();
    let outcomes = vec![timeout_on_t0(&sm)];
    let command = |batch_seq| Command::ReportOutcomes {
        namespace: ns(0),
        replica: replica(1),
        batch_seq,
        outcomes: outcomes.clone(),
    };
    let mut counted = sm.clone();
    counted.apply(&command(7), Timestamp(5_000));
    assert_eq!(
        check_resend_changes_nothing(&counted, &command(7), Timestamp(5_000)),
        Ok(())
    );
    // An unnumbered batch is counted every time, which the checker skips;
    // a state where the mark is missing shows as a changed state.
    let forgetful = sm.clone();
    let err = check_resend_changes_nothing(&forgetful, &command(7), Timestamp(5_000)).unwrap_err();
    assert!(err.contains("changed the state"), "{err}");
}

#[test]
fn checker_catches_a_generation_going_back() {
    let before = BTreeMap::from([(probe_key(), 3)]);
    let grown = BTreeMap::from([(probe_key(), 4)]);
    assert_eq!(check_generations(&before, &grown, &[]), Ok(()));
    let shrunk = BTreeMap::from([(probe_key(), 2)]);
    let err = check_generations(&before, &shrunk, &[]).unwrap_err();
    assert!(err.contains("from 3 to 2"), "{err}");
    assert!(check_generations(&before, &BTreeMap::new(), &[]).is_err());
    // Gone with its namespace, and announced: allowed.
    let removed = [WatchEvent::BreakerRemoved {
        revision: 9,
        key: probe_key(),
    }];
    assert_eq!(
        check_generations(&before, &BTreeMap::new(), &removed),
        Ok(())
    );
}

#[test]
fn checker_catches_revisions_out_of_order_and_unannounced_changes() {
    let (sm, events) = tripped_machine();
    let revisions: Vec<u64> = events.iter().map(WatchEvent::revision).collect();
    assert_eq!(
        revisions,
        vec![1, 2, 3],
        "policy, then server and tool trips"
    );
    assert_eq!(
        check_watch_events(&mut WatchState::default(), &events),
        Ok(())
    );
    let swapped = vec![events[0].clone(), events[2].clone(), events[1].clone()];
    assert!(check_watch_events(&mut WatchState::default(), &swapped).is_err());
    let repeated = vec![events[1].clone(), events[1].clone()];
    assert!(check_watch_events(&mut WatchState::default(), &repeated).is_err());
    let after = BTreeMap::from([(probe_key(), sm.view(&probe_key()).generation)]);
    assert_eq!(
        check_changes_announced(&BTreeMap::new(), &after, &events),
        Ok(())
    );
    let err = check_changes_announced(&BTreeMap::new(), &after, &events[..2]).unwrap_err();
    assert!(err.contains("watchers were told None"), "{err}");
}

fn ledger_step(op: Op) -> Step {
    Step {
        op,
        advance_ms: 1_000,
        lag_ms: 0,
        checkpoint: false,
    }
}

fn begin_op_for(key: usize, attempt: usize) -> Op {
    let (flip_effect, other_fingerprint, lease_ms) = (false, false, 10_000);
    let ns = 0;
    Op::Begin {
        ns,
        key,
        attempt,
        flip_effect,
        other_fingerprint,
        lease_ms,
    }
}

/// The real history of: attempt 0 starts key 0 (a non-idempotent write),
/// fails before execution, attempt 1 starts it.
fn released_and_restarted() -> Vec<LedgerEvent> {
    let pool = main_pool();
    let mut run = Run::new(&pool);
    let completion = Completion::FailedBeforeExecution {
        reason: "refused".into(),
    };
    let attempt = AttemptRef::Fixed(0);
    let complete = Op::Complete {
        ns: 0,
        key: 0,
        attempt,
        completion,
    };
    for op in [begin_op_for(0, 0), complete, begin_op_for(0, 1)] {
        run.step(&ledger_step(op)).unwrap();
    }
    run.history
}

#[test]
fn checker_catches_a_second_started_without_release() {
    let history = released_and_restarted();
    assert_eq!(history.len(), 3, "{history:?}");
    assert_eq!(check_at_most_one_started(&history), Ok(()));
    let unreleased = vec![history[0].clone(), history[2].clone()];
    let err = check_at_most_one_started(&unreleased).unwrap_err();
    assert!(err.contains("with no release between"), "{err}");
}

#[test]
fn checker_catches_a_takeover_that_is_not_allowed() {
    let history = released_and_restarted();
    let LedgerEvent::Started { lease_until, .. } = history[0].clone() else {
        panic!("expected started first, got {history:?}");
    };
    let lease_until = lease_until.unwrap();
    let takeover = |effect, at| match history[2].clone() {
        LedgerEvent::Started {
            ns,
            key,
            attempt,
            lease_until,
            ..
        } => {
            let takeover = true;
            LedgerEvent::Started {
                ns,
                key,
                attempt,
                takeover,
                effect,
                at,
                lease_until,
            }
        }
        other => panic!("expected started, got {other:?}"),
    };
    let lapsed = takeover(EffectClass::IdempotentWrite, lease_until);
    assert_eq!(
        check_at_most_one_started(&[history[0].clone(), lapsed]),
        Ok(())
    );
    let live = takeover(EffectClass::IdempotentWrite, lease_until - 1);
    let err = check_at_most_one_started(&[history[0].clone(), live]).unwrap_err();
    assert!(err.contains("live lease"), "{err}");
    let non_idempotent = takeover(EffectClass::NonIdempotentWrite, lease_until);
    let err = check_at_most_one_started(&[history[0].clone(), non_idempotent]).unwrap_err();
    assert!(
        err.contains("took over a non_idempotent_write record"),
        "{err}"
    );
}

#[test]
fn checker_catches_an_ambiguous_write_freed_or_dropped() {
    let mut sm = StateMachine::new();
    let begin = Command::Begin {
        namespace: ns(0),
        request: begin_request(0, 0, false, false, 1_000),
    };
    sm.apply(&begin, Timestamp(0));
    let ambiguous = sm
        .ledger()
        .lookup(&ns(0), &idem_key(0), Timestamp(2_000))
        .unwrap();
    assert_eq!(ambiguous.status, Status::Ambiguous, "the lease lapsed");
    let mut freed = ambiguous.clone();
    freed.status = Status::Released;
    let tick = (&Command::Tick, &Answer::Ticked { timers: 1 });
    let now = Timestamp(2_000);
    let same = check_record_transition(&ns(0), Some(&ambiguous), Some(&ambiguous), tick, now);
    assert_eq!(same, Ok(()));
    let err = check_record_transition(&ns(0), Some(&ambiguous), Some(&freed), tick, now);
    assert!(err.unwrap_err().contains("left ambiguous"));
    let err = check_record_transition(&ns(0), Some(&ambiguous), None, tick, now);
    assert!(err.unwrap_err().contains("dropped"));
}

#[test]
fn checker_catches_a_replay_behind_the_ledger_that_changed_another_fleet() {
    let begin = Command::Begin {
        namespace: ns(1),
        request: begin_request(1, 0, false, false, 1_000),
    };
    let trace = vec![(begin, Timestamp(1_000))];
    let applied = vec![Applied {
        answer: Answer::Rejected(fusebox_core::CoreError::invalid("key", "made up")),
        events: Vec::new(),
        revision: 0,
    }];
    // The begin creates its namespace when replayed; a first run that never
    // did is caught.
    let none = BTreeMap::new();
    let err = check_replay_behind_ledger(&trace, &applied, &none, &StateMachine::new());
    assert!(err.unwrap_err().contains("fleet"));
    let mut first = StateMachine::new();
    let applied = vec![first.apply(&trace[0].0, trace[0].1)];
    assert_eq!(
        check_replay_behind_ledger(&trace, &applied, &none, &first),
        Ok(())
    );
    // A deletion is never replayed: without the fleet saved with it, the
    // check refuses the trace.
    let delete = Command::DeleteNamespace {
        namespace: ns(1),
        actor: "op".into(),
        reason: "a test".into(),
    };
    let mut with_delete = trace.clone();
    with_delete.push((delete, Timestamp(2_000)));
    let mut applied = applied;
    applied.push(first.apply(&with_delete[1].0, with_delete[1].1));
    let err = check_replay_behind_ledger(&with_delete, &applied, &none, &first);
    assert!(err.unwrap_err().contains("no fleet saved"));
}

#[test]
fn checker_catches_a_refusal_that_changed_state_and_a_diverging_replay() {
    let (sm, _) = tripped_machine();
    let at = Timestamp(5_000);
    let mut same = sm.clone();
    same.apply(&Command::Tick, Timestamp(0));
    assert_eq!(
        check_rejected_left_state(sm.clone(), &same, Timestamp(0)),
        Ok(())
    );
    let mut changed = sm.clone();
    changed.apply(&Command::Tick, at);
    assert!(check_rejected_left_state(sm.clone(), &changed, at).is_err());
    let trace = vec![(Command::Tick, at)];
    let applied = vec![Applied {
        answer: Answer::Ticked { timers: 7 },
        events: Vec::new(),
        revision: 0,
    }];
    let err = check_replay(&trace, &applied, &digest(&StateMachine::new()).unwrap());
    assert!(err.unwrap_err().contains("step 0"));
}

/// Found by `probe_bound_holds_when_policies_lower_it`: a policy that lowers
/// `concurrent_probes` leaves the permits already out (their holders are
/// mid-call), but no new permit is granted until the count is below the
/// new bound.
#[test]
fn probe_bound_survives_a_policy_that_lowers_it() {
    let (mut sm, _) = tripped_machine();
    for r in 0..2 {
        let acquire = Command::AcquireProbe {
            key: probe_key(),
            replica: replica(r),
            lease_ms: None,
        };
        let answer = sm.apply(&acquire, Timestamp(1_000)).answer;
        assert!(
            matches!(answer, Answer::Probe(ProbeAnswer::Granted { .. })),
            "{answer:?}"
        );
    }
    let lower = Command::ApplyPolicy {
        namespace: ns(0),
        document: Box::new(parse_policy(POLICY_ONE_PROBE)),
        actor: "alice".into(),
        reason: "tune".into(),
    };
    sm.apply(&lower, Timestamp(1_000));
    assert_eq!(
        sm.breaker(&probe_key()).unwrap().live_permits(),
        2,
        "nothing revoked"
    );
    let third = Command::AcquireProbe {
        key: probe_key(),
        replica: replica(3),
        lease_ms: None,
    };
    let answer = sm.apply(&third, Timestamp(1_001)).answer;
    assert!(
        matches!(answer, Answer::Probe(ProbeAnswer::Denied { .. })),
        "no grant while over the lowered bound: {answer:?}"
    );
}
