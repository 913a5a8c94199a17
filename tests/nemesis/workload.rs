//! The ledger clients: each begins, completes, resolves and looks up keys
//! of a small set that changes every [`KEY_EPOCH_MS`], through a node
//! picked at random for each call, and writes every operation it invoked
//! to its history file (see [`crate::history`]).
//!
//! A request the cluster refused before it reached the ledger is left out;
//! a call that got no answer is recorded without a return; a failed read is
//! left out (it changed nothing). The model's request is the one the server
//! sees: the sent protobuf through the server's own conversion.

use crate::cluster::{self, addr};
use crate::history::HistoryWriter;
use anyhow::Result;
use fusebox_api::convert::ledger::{begin_from_proto, complete_from_proto};
use fusebox_core::ledger::{Decision, ResolveRequest};
use fusebox_core::limits::LEASE_MS_MAX;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_simulation::check::ledger_model::{LedgerInput, LedgerOutput};
use fusebox_simulation::check::wire::{self, Seen};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tonic::transport::Channel;

/// The namespace the test works in.
pub const NS: &str = "nemesis";
/// Keys contended for at once.
const KEYS_AT_ONCE: u64 = 4;
/// How long one set of keys is in use.
pub const KEY_EPOCH_MS: u64 = 2_000;
/// Deadline of one ledger call.
const RPC_TIMEOUT: Duration = Duration::from_secs(2);
/// The leases a begin asks for: half short enough to lapse while a slow
/// attempt runs, so the checker judges takeovers and lapsed-lease ambiguity
/// on a real network too; half the longest the ledger allows.
const LEASES_MS: [u64; 4] = [300, 1_000, LEASE_MS_MAX, LEASE_MS_MAX];
/// How long an attempt runs between begin and complete: one time in eight,
/// longer than most short leases.
const RUN_MS: std::ops::Range<u64> = 5..60;
/// The slow attempts' run.
const SLOW_RUN_MS: std::ops::Range<u64> = 200..2_000;

/// The effect class of the write behind a key: one key in two is idempotent
/// (a lapsed lease is taken over), the other not (it becomes ambiguous).
/// Decided by the key, so every attempt at it agrees.
fn effect_of(key: &str) -> pb::Effect {
    if key.bytes().last().is_some_and(|b| b % 2 == 0) {
        pb::Effect::IdempotentWrite
    } else {
        pb::Effect::NonIdempotentWrite
    }
}

/// The one clock of every history: Unix milliseconds, the nodes' time base
/// (their clocks are this machine's, offset by at most
/// [`crate::nemesis::CLOCK_OFFSET_MS_MAX`]), counted from a monotonic start
/// so that it never goes back during a run.
#[derive(Clone, Copy, Debug)]
pub struct RunClock {
    start: Instant,
    unix_at_start_ms: u64,
}

impl RunClock {
    /// Starts counting now.
    pub fn start() -> RunClock {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        RunClock {
            start: Instant::now(),
            unix_at_start_ms: u64::try_from(unix.as_millis()).unwrap_or(0),
        }
    }

    /// Milliseconds since the run began.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Now, in Unix milliseconds.
    pub fn ms(&self) -> u64 {
        self.unix_at_start_ms.saturating_add(self.elapsed_ms())
    }
}

/// What the ledger clients share.
pub struct Ledger {
    /// The run's clock.
    pub clock: RunClock,
    /// Set to stop the clients.
    pub stop: AtomicBool,
    /// Every key used, with its first call.
    pub keys: Mutex<BTreeMap<String, u64>>,
    /// Operations recorded, by request.
    pub begins: AtomicU64,
    /// `Complete`s recorded.
    pub completes: AtomicU64,
    /// `Resolve`s recorded.
    pub resolves: AtomicU64,
    /// `Lookup`s recorded.
    pub lookups: AtomicU64,
    /// Recorded without an answer.
    pub unknown: AtomicU64,
    /// Left out: refused before the ledger, or a read that failed.
    pub left_out: AtomicU64,
    /// Why writes went unanswered: the status code and the start of its
    /// message (digits dropped, so one cause counts once), with a count.
    pub unanswered_causes: Mutex<BTreeMap<String, u64>>,
    channels: Vec<Channel>,
}

impl Ledger {
    /// Clients' shared state for a cluster of `slots` nodes.
    pub fn new(clock: RunClock, slots: &[usize]) -> Result<Ledger> {
        let channels = slots
            .iter()
            .map(|s| cluster::channel(&addr(*s), RPC_TIMEOUT))
            .collect::<Result<_>>()?;
        Ok(Ledger {
            clock,
            stop: AtomicBool::new(false),
            keys: Mutex::new(BTreeMap::new()),
            begins: AtomicU64::new(0),
            completes: AtomicU64::new(0),
            resolves: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
            unknown: AtomicU64::new(0),
            left_out: AtomicU64::new(0),
            unanswered_causes: Mutex::new(BTreeMap::new()),
            channels,
        })
    }

    /// Operations recorded so far.
    pub fn recorded(&self) -> u64 {
        [&self.begins, &self.completes, &self.resolves, &self.lookups]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Counts `answer`'s failure as a cause of a write left unanswered.
    fn note_cause<T>(&self, answer: &Result<T, tonic::Status>, seen: &Seen) {
        let (Err(status), Seen::NoAnswer) = (answer, seen) else {
            return;
        };
        let message: String = status
            .message()
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .take(70)
            .collect();
        let cause = format!("{:?}: {message}", status.code());
        if let Ok(mut causes) = self.unanswered_causes.lock() {
            *causes.entry(cause).or_default() += 1;
        }
    }

    /// The most frequent causes of unanswered writes, most frequent first.
    pub fn top_causes(&self, n: usize) -> Vec<(String, u64)> {
        let causes = self
            .unanswered_causes
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        let mut causes: Vec<_> = causes.into_iter().collect();
        causes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        causes.truncate(n);
        causes
    }

    fn note_key(&self, key: &str, call: u64) {
        if let Ok(mut keys) = self.keys.lock() {
            keys.entry(key.to_owned()).or_insert(call);
        }
    }

    /// Keys first used at or after `since_ms`.
    pub fn keys_since(&self, since_ms: u64) -> Vec<String> {
        let keys = self.keys.lock().map(|k| k.clone()).unwrap_or_default();
        keys.into_iter()
            .filter(|(_, first)| *first >= since_ms)
            .map(|(key, _)| key)
            .collect()
    }
}

/// One client: its history, its generator and its count of operations.
pub struct Client {
    name: String,
    shared: Arc<Ledger>,
    history: HistoryWriter,
    rng: fastrand::Rng,
    n: u64,
    /// Writes left unanswered since the last answer: the client backs off
    /// ([`BACKOFF_MS`]), as a real one would, rather than pile maybe-applied
    /// writes on a key (each one multiplies the checker's search).
    unanswered: u32,
}

/// A client's pause after a write left unanswered, doubled per further one
/// up to 3 times (1.2 s at most).
const BACKOFF_MS: std::ops::Range<u64> = 50..150;

impl Client {
    /// Client `name`, writing to `history`.
    pub fn new(name: String, shared: Arc<Ledger>, history: HistoryWriter, seed: u64) -> Client {
        Client {
            name,
            shared,
            history,
            rng: fastrand::Rng::with_seed(seed),
            n: 0,
            unanswered: 0,
        }
    }

    fn ledger(&mut self) -> LedgerClient<Channel> {
        let i = self.rng.usize(0..self.shared.channels.len());
        LedgerClient::new(self.shared.channels[i].clone())
    }

    /// Records an operation invoked at `call` that `seen` settled;
    /// returns its output.
    fn record(
        &mut self,
        input: LedgerInput,
        call: u64,
        seen: Seen,
    ) -> Result<Option<LedgerOutput>> {
        let counter = match &input {
            LedgerInput::Begin(_) => &self.shared.begins,
            LedgerInput::Complete(_) => &self.shared.completes,
            LedgerInput::Resolve(_) => &self.shared.resolves,
            LedgerInput::Lookup { .. } => &self.shared.lookups,
        };
        if seen == Seen::NoEffect {
            self.shared.left_out.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        counter.fetch_add(1, Ordering::Relaxed);
        let output = seen.output();
        let ret = output.as_ref().map(|_| self.shared.clock.ms());
        if ret.is_none() {
            self.shared.unknown.fetch_add(1, Ordering::Relaxed);
            self.unanswered = self.unanswered.saturating_add(1);
        } else {
            self.unanswered = 0;
        }
        self.history.record(input, call, ret, output.clone())?;
        Ok(output)
    }

    /// Runs until the shared stop flag is set; writes out its history.
    pub async fn run(mut self) -> Result<()> {
        while !self.shared.stop.load(Ordering::Relaxed) {
            let now = self.shared.clock.ms();
            let key = format!("e{}-k{}", now / KEY_EPOCH_MS, self.rng.u64(0..KEYS_AT_ONCE));
            match self.rng.u8(0..100) {
                0..70 => self.begin_and_complete(&key).await?,
                70..90 => self.lookup(&key).await?,
                _ => {
                    // Read back a key of an earlier set.
                    let since = now.saturating_sub(60_000);
                    let old = self.shared.keys_since(since);
                    if let Some(key) = self.rng.choice(old.iter()) {
                        self.lookup(key).await?;
                    }
                }
            }
            let pause = match self.unanswered {
                0 => self.rng.u64(0..20),
                n => self.rng.u64(BACKOFF_MS) << (n - 1).min(3),
            };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        self.history.flush()
    }

    async fn begin_and_complete(&mut self, key: &str) -> Result<()> {
        self.n += 1;
        let attempt = format!("{}-a{}", self.name, self.n);
        let request = pb::BeginRequest {
            namespace: NS.into(),
            key: key.into(),
            fingerprint: key.as_bytes().to_vec(),
            intent_id: format!("{}-i{}", self.name, self.n),
            server: "billing".into(),
            tool: "charge".into(),
            target: "account-1".into(),
            effect: effect_of(key) as i32,
            attempt_id: attempt.clone(),
            lease_ms: LEASES_MS[self.rng.usize(0..LEASES_MS.len())],
            ..Default::default()
        };
        let (_, model) = begin_from_proto(&request)?;
        let call = self.shared.clock.ms();
        self.shared.note_key(key, call);
        let answer = self.ledger().begin(request).await.map(|r| r.into_inner());
        let seen = wire::begun(answer.clone());
        self.shared.note_cause(&answer, &seen);
        let output = self.record(LedgerInput::Begin(model), call, seen)?;
        match output {
            Some(LedgerOutput::Started {
                attempt: holder, ..
            }) if holder == attempt => {
                // "Execute" the write, then say how it ended.
                let run = if self.rng.u8(0..8) == 0 {
                    SLOW_RUN_MS
                } else {
                    RUN_MS
                };
                tokio::time::sleep(Duration::from_millis(self.rng.u64(run))).await;
                self.complete(key, &attempt).await
            }
            Some(LedgerOutput::Ambiguous(_)) if self.rng.bool() => self.resolve(key).await,
            _ => Ok(()),
        }
    }

    async fn complete(&mut self, key: &str, attempt: &str) -> Result<()> {
        use pb::complete_request::Outcome;
        let reason = "told by the nemesis test".to_owned();
        let outcome = match self.rng.u8(0..100) {
            0..75 => Outcome::Succeeded(pb::CompleteSucceeded {
                operation_id: format!("op-{attempt}"),
                result: format!("{attempt}-done").into_bytes(),
            }),
            75..90 => Outcome::FailedBeforeExecution(pb::CompleteFailedBeforeExecution { reason }),
            _ => Outcome::Ambiguous(pb::CompleteAmbiguous { reason }),
        };
        let request = pb::CompleteRequest {
            namespace: NS.into(),
            key: key.into(),
            attempt_id: attempt.into(),
            outcome: Some(outcome),
            ..Default::default()
        };
        let (_, model) = complete_from_proto(&request)?;
        let call = self.shared.clock.ms();
        let answer = self
            .ledger()
            .complete(request)
            .await
            .map(|r| r.into_inner());
        let seen = wire::completed(answer.clone());
        self.shared.note_cause(&answer, &seen);
        self.record(LedgerInput::Complete(model), call, seen)?;
        Ok(())
    }

    async fn resolve(&mut self, key: &str) -> Result<()> {
        let done = self.rng.bool();
        let operation_id = format!("resolved-{}-{}", self.name, self.n);
        let (actor, note) = (
            "nemesis-operator".to_owned(),
            "settled by the test".to_owned(),
        );
        let request = pb::ResolveRequest {
            namespace: NS.into(),
            key: key.into(),
            decision: if done {
                pb::ResolutionDecision::Done
            } else {
                pb::ResolutionDecision::NotDone
            } as i32,
            operation_id: done.then(|| operation_id.clone()),
            actor: actor.clone(),
            note: note.clone(),
            ..Default::default()
        };
        let decision = if done {
            Decision::Done { operation_id }
        } else {
            Decision::NotDone
        };
        let model = ResolveRequest {
            key: key.into(),
            decision,
            actor,
            note,
        };
        let call = self.shared.clock.ms();
        let answer = self.ledger().resolve(request).await.map(|r| r.into_inner());
        let seen = wire::resolved(answer.clone());
        self.shared.note_cause(&answer, &seen);
        self.record(LedgerInput::Resolve(model), call, seen)?;
        Ok(())
    }

    /// A linearizable read of `key`.
    pub async fn lookup(&mut self, key: &str) -> Result<()> {
        let request = pb::LookupRequest {
            namespace: NS.into(),
            key: key.into(),
            ..Default::default()
        };
        let call = self.shared.clock.ms();
        let answer = self.ledger().lookup(request).await.map(|r| r.into_inner());
        let input = LedgerInput::Lookup { key: key.into() };
        self.record(input, call, wire::looked_up(answer))?;
        Ok(())
    }

    /// Writes out what is buffered.
    pub fn flush(&self) -> Result<()> {
        self.history.flush()
    }
}
