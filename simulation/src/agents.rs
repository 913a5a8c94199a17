//! Agent replicas as simulated clients: each uses the real SDK against the
//! scripted tools (reads through `call`, writes through `write`) and, beside
//! it, drives the ledger API directly so every `begin`, `complete` and
//! `lookup` it sees goes into the history the linearizability checker reads.

use crate::check::ledger_model::{ledger_op, LedgerInput, LedgerOutput};
use crate::check::wire::{self, Seen};
use crate::net::{sim_clock_ms, SimNet};
use crate::nodes::{self, channel};
use crate::scenario::Scenario;
use crate::tools::{self, NS};
use crate::world::{sim_ms, Phase, World};
use fusebox_client::{
    Client, ClientConfig, ClientEnv, ClientError, Journey, ToolRef, WriteRequest, WriteSuccess,
};
use fusebox_core::ledger::{BeginRequest, CompleteRequest, Completion};
use fusebox_core::policy::EffectClass;
use fusebox_core::ToolName;
use fusebox_proto::net::Net;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::ledger_client::LedgerClient;
use std::error::Error;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;

/// Keys replicas contend for at once in the raw ledger workload; a new set
/// every [`LEDGER_KEY_EPOCH_MS`], so keys keep changing state (a key that
/// completed stays completed, and a stale read of it would go unseen).
pub const LEDGER_KEYS: u64 = 3;
/// How long one set of contended keys is in use.
pub const LEDGER_KEY_EPOCH_MS: u64 = 2_000;
/// How long after the heal target is set a replica's view may take to reach
/// it: a connection that lost data silently during a partition (turmoil's
/// TCP, like a half-open connection, does not retransmit) is dropped by
/// HTTP/2 keepalive within 10 s, or the watch gives up on a stream silent
/// for `view_stale_after_ms` (15 s); then it reconnects (backoff at most
/// 2 s) and resumes.
pub const CONVERGE_BOUND_MS: u64 = 20_000;
/// Deadline of one raw ledger call.
const LEDGER_RPC_TIMEOUT: Duration = Duration::from_secs(2);
/// The leases a raw `begin` asks for: half of them short enough to lapse
/// while the attempt runs (see [`LEDGER_SLOW_RUN_MS`]), so the checker
/// judges takeovers and lapsed-lease ambiguity too, half as long as a run.
const LEDGER_LEASE_MS: [u64; 4] = [250, 800, 600_000, 600_000];
/// How long an attempt "runs" between its `begin` and its `complete`:
/// usually briefly, one time in eight past most short leases.
const LEDGER_RUN_MS: std::ops::Range<u64> = 5..60;
/// The slow attempts' run.
const LEDGER_SLOW_RUN_MS: std::ops::Range<u64> = 200..1_500;

/// The effect class of the write behind a raw ledger key: one key in two is
/// idempotent (a lapsed lease is taken over), the other not (it becomes
/// ambiguous). Decided by the key, so every attempt at a key agrees.
fn ledger_effect(key: &str) -> (EffectClass, pb::Effect) {
    if key.bytes().last().is_some_and(|b| b % 2 == 0) {
        (EffectClass::IdempotentWrite, pb::Effect::IdempotentWrite)
    } else {
        (
            EffectClass::NonIdempotentWrite,
            pb::Effect::NonIdempotentWrite,
        )
    }
}

/// Now on the clients' clock in Unix ms, the servers' time base: ledger
/// histories are taken on it so the checker can compare their times with
/// leases (the servers' clocks are off it by at most
/// [`crate::faults::CLOCK_SKEW_MS_MAX`]).
fn client_ms() -> u64 {
    sim_clock_ms(0)
}

/// The tools of a run.
pub struct Tools {
    /// A read (`read_only`).
    pub lookup: ToolRef,
    /// A non-idempotent write.
    pub charge: ToolRef,
    /// An idempotent write.
    pub upsert: ToolRef,
}

impl Tools {
    fn new() -> Result<Tools, Box<dyn Error>> {
        Ok(Tools {
            lookup: ToolRef::new("search", "lookup")?,
            charge: ToolRef::new("billing", "charge")?,
            upsert: ToolRef::new("crm", "upsert")?,
        })
    }
}

/// Everything one replica needs.
pub(crate) struct Replica {
    pub(crate) name: String,
    pub(crate) world: Rc<World>,
    pub(crate) scenario: Scenario,
    pub(crate) client: Client,
    pub(crate) tools: Tools,
    ledgers: Vec<LedgerClient<Channel>>,
    pub(crate) rng: fastrand::Rng,
    pub(crate) ops: u64,
    /// A charge intent that ended in an error, retried with its key (the
    /// SDK and the ledger must keep the tool from running twice), and the
    /// tries it had.
    pending_charge: Option<(String, u32)>,
}

/// Registers replica `index` (`r1`…) as a client host of `sim`.
pub fn register(
    sim: &mut turmoil::Sim<'_>,
    world: &Rc<World>,
    scenario: Scenario,
    index: u64,
    replicas: u64,
    workload_ms: u64,
) {
    let name = format!("r{index}");
    let world = world.clone();
    let host = name.clone();
    sim.client(host.as_str(), async move {
        let nodes = world.nodes.len() as u64;
        let seed = world.seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut rng = fastrand::Rng::with_seed(seed);
        // Each replica knows every node, starting from a different one.
        let first = rng.u64(1..=nodes);
        let endpoints = (0..nodes)
            .map(|i| nodes::addr((first - 1 + i) % nodes + 1))
            .collect();
        let namespace = match scenario {
            Scenario::IncidentCost => world.incident.namespace(index),
            _ => NS.to_owned(),
        };
        let mut config = ClientConfig::new(endpoints, &namespace, &name)?;
        config.fleet_replicas = u32::try_from(replicas).unwrap_or(1);
        let env = ClientEnv {
            net: Net::Custom(Arc::new(SimNet)),
            clock: Arc::new(|| sim_clock_ms(0)),
        };
        let client = Client::connect_in(config, env)?;
        let ledgers = (1..=nodes)
            .map(|id| LedgerClient::new(channel(&nodes::addr(id), LEDGER_RPC_TIMEOUT)))
            .collect();
        let mut replica = Replica {
            name,
            world: world.clone(),
            scenario,
            client,
            tools: Tools::new()?,
            ledgers,
            rng,
            ops: 0,
            pending_charge: None,
        };
        while world.phase.get() == Phase::Setup {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        replica.world.log(&replica.name, "workload starts");
        while sim_ms() < workload_ms {
            replica.ops += 1;
            if scenario == Scenario::Chaos {
                replica.step().await;
            } else {
                crate::exercises::turn(&mut replica).await;
            }
            let pause = replica.rng.u64(10..120);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        replica.world.log(&replica.name, "workload done");
        world.replicas_done.set(world.replicas_done.get() + 1);
        while world.phase.get() != Phase::Healed {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Read back every contended key once the faults are gone: every
        // acknowledged completion must still be there.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let keys: Vec<String> = world.ledger_keys.borrow().iter().cloned().collect();
        for key in keys {
            replica.lookup(&key).await;
        }
        replica.world.log(&replica.name, "read back done");
        replica.converge().await;
        replica.client.close().await;
        Ok(())
    });
}

impl Replica {
    /// Waits for the view to reach the revision the cluster held after the
    /// heal; a violation if it does not within [`CONVERGE_BOUND_MS`].
    async fn converge(&self) {
        // A view of a namespace of its own sees only that namespace's
        // revisions, which need not reach the cluster's.
        if self.scenario == Scenario::IncidentCost && !self.world.incident.shared {
            return;
        }
        let target = loop {
            if let Some(target) = self.world.converge_target.get() {
                break target;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let from = sim_ms();
        loop {
            let revision = self.client.view_status().revision.unwrap_or(0);
            if revision >= target {
                let waited = sim_ms() - from;
                self.world.log(
                    &self.name,
                    format!("view at revision {revision} (target {target}) after {waited} ms"),
                );
                return;
            }
            if sim_ms() - from > CONVERGE_BOUND_MS {
                self.world.violate(
                    sim_ms(),
                    "replica views converge",
                    format!(
                        "{} stuck at revision {revision}, the cluster had {target} \
                         {CONVERGE_BOUND_MS} ms earlier",
                        self.name
                    ),
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn step(&mut self) {
        match self.rng.u8(0..10) {
            0..=3 => self.read().await,
            4 => self.charge().await,
            5 => self.upsert().await,
            6..=8 => {
                let key = self.contended_key(LEDGER_KEYS);
                self.begin_and_complete(&key).await;
            }
            _ => {
                let key = self.contended_key(LEDGER_KEYS);
                self.lookup(&key).await;
            }
        }
    }

    /// One of the `keys` contended keys of the current epoch.
    pub(crate) fn contended_key(&mut self, keys: u64) -> String {
        let key = format!(
            "lk{}-{}",
            sim_ms() / LEDGER_KEY_EPOCH_MS,
            self.rng.u64(0..keys)
        );
        self.world.ledger_keys.borrow_mut().insert(key.clone());
        key
    }

    pub(crate) fn journey(&self) -> Journey {
        Journey::new(
            format!("{}-turn-{}", self.name, self.ops),
            Duration::from_secs(5),
            Duration::from_millis(100),
        )
    }

    async fn read(&mut self) {
        let behaviour = self
            .scenario
            .behaviour(&self.tools.lookup, sim_ms(), &mut self.rng);
        let (world, tool) = (self.world.clone(), self.tools.lookup.clone());
        let journey = self.journey();
        let called = self
            .client
            .call(&journey, &self.tools.lookup, |ctx| {
                let (world, tool) = (world.clone(), tool.clone());
                async move { tools::run(&world, &tool, &ctx, behaviour).await }
            })
            .await;
        let what = match &called {
            Ok(out) if out.probe => "lookup ok (probe)".to_string(),
            Ok(out) => format!("lookup ok after {} attempt(s)", out.attempts),
            Err(e) => format!("lookup failed: {}", short(e)),
        };
        self.world.count(if called.is_ok() {
            "reads ok"
        } else {
            "reads failed"
        });
        self.world.log(&self.name, what);
    }

    async fn charge(&mut self) {
        let (key, tries) = match self.pending_charge.take() {
            Some((key, tries)) => (key, tries + 1),
            None => (format!("ch-{}-{}", self.name, self.ops), 1),
        };
        let tool = self.tools.charge.clone();
        if self.write(&tool, &key).await.is_err() && tries < 3 {
            self.pending_charge = Some((key, tries));
        }
    }

    async fn upsert(&mut self) {
        let key = format!("up-{}", self.rng.u64(0..4));
        let tool = self.tools.upsert.clone();
        let _ = self.write(&tool, &key).await;
    }

    async fn write(&mut self, tool: &ToolRef, key: &str) -> Result<(), ClientError> {
        let behaviour = self.scenario.behaviour(tool, sim_ms(), &mut self.rng);
        let request = WriteRequest::new(tool.clone(), key, "account-1", key.as_bytes());
        let journey = self.journey();
        let (world, t, k) = (self.world.clone(), tool.clone(), key.to_owned());
        let written = self
            .client
            .write(&journey, &request, |ctx| {
                let (world, t, k) = (world.clone(), t.clone(), k.clone());
                async move {
                    *world.write_runs.borrow_mut().entry(k.clone()).or_default() += 1;
                    tools::run(&world, &t, &ctx, behaviour).await?;
                    Ok(WriteSuccess {
                        operation_id: format!("op-{k}"),
                        result: k.into_bytes(),
                    })
                }
            })
            .await;
        let what = match &written {
            Ok(out) if out.replayed => format!("{} {key}: replayed", tool.tool()),
            Ok(_) => format!("{} {key}: written", tool.tool()),
            Err(e) => format!("{} {key}: {}", tool.tool(), short(e)),
        };
        self.world.log(&self.name, what);
        written.map(|_| ())
    }

    fn ledger(&mut self) -> LedgerClient<Channel> {
        let i = self.rng.usize(0..self.ledgers.len());
        self.ledgers[i].clone()
    }

    fn record(&self, input: LedgerInput, call_ms: u64, output: Option<LedgerOutput>) {
        let return_ms = output.as_ref().map(|_| client_ms());
        self.world
            .log(&self.name, format!("ledger {input:?} -> {output:?}"));
        let mut ops = self.world.ledger_ops.borrow_mut();
        let id = ops.len() as u64;
        ops.push(ledger_op(id, call_ms, return_ms, input, output));
    }

    pub(crate) async fn begin_and_complete(&mut self, key: &str) {
        let attempt = format!("{}-a{}", self.name, self.ops);
        let (effect, wire_effect) = ledger_effect(key);
        let lease_ms = LEDGER_LEASE_MS[self.rng.usize(0..LEDGER_LEASE_MS.len())];
        let intent = format!("{}-intent-{}", self.name, self.ops);
        let request = pb::BeginRequest {
            namespace: NS.into(),
            key: key.into(),
            fingerprint: key.as_bytes().to_vec(),
            intent_id: intent.clone(),
            server: "billing".into(),
            tool: "charge".into(),
            target: "account-1".into(),
            effect: wire_effect as i32,
            attempt_id: attempt.clone(),
            lease_ms,
            ..Default::default()
        };
        let Ok(tool) = ToolName::new("charge") else {
            return;
        };
        // The model's request: the same fields as the core sees them (the
        // fingerprint only has to be the same for the same key).
        let input = LedgerInput::Begin(BeginRequest {
            key: key.into(),
            fingerprint: format!("fp-{key}"),
            intent_id: intent,
            tool,
            target: "account-1".into(),
            effect,
            attempt: attempt.clone(),
            lease_ms,
        });
        let call_ms = client_ms();
        let seen = wire::begun(self.ledger().begin(request).await.map(|r| r.into_inner()));
        if seen == Seen::NoEffect {
            return;
        }
        let output = seen.output();
        let started =
            matches!(&output, Some(LedgerOutput::Started { attempt: a, .. }) if *a == attempt);
        self.record(input, call_ms, output);
        if !started {
            return;
        }
        // "Execute" the write, then record its result.
        let run = match self.rng.u8(0..8) {
            0 => LEDGER_SLOW_RUN_MS,
            _ => LEDGER_RUN_MS,
        };
        tokio::time::sleep(Duration::from_millis(self.rng.u64(run))).await;
        let result = format!("{attempt}-done").into_bytes();
        let request = pb::CompleteRequest {
            namespace: NS.into(),
            key: key.into(),
            attempt_id: attempt.clone(),
            outcome: Some(pb::complete_request::Outcome::Succeeded(
                pb::CompleteSucceeded {
                    operation_id: attempt.clone(),
                    result: result.clone(),
                },
            )),
            ..Default::default()
        };
        let input = LedgerInput::Complete(CompleteRequest {
            key: key.into(),
            attempt: attempt.clone(),
            completion: Completion::Succeeded {
                operation_id: attempt,
                result,
            },
        });
        let call_ms = client_ms();
        let seen = wire::completed(
            self.ledger()
                .complete(request)
                .await
                .map(|r| r.into_inner()),
        );
        if seen == Seen::NoEffect {
            return;
        }
        let output = seen.output();
        self.record(input, call_ms, output);
    }

    pub(crate) async fn lookup(&mut self, key: &str) {
        let request = pb::LookupRequest {
            namespace: NS.into(),
            key: key.into(),
            ..Default::default()
        };
        let call_ms = client_ms();
        let Seen::Answer(output) =
            wire::looked_up(self.ledger().lookup(request).await.map(|r| r.into_inner()))
        else {
            return;
        };
        let input = LedgerInput::Lookup { key: key.into() };
        self.record(input, call_ms, Some(output));
    }
}

fn short(e: &ClientError) -> String {
    let text = e.to_string();
    text.chars().take(120).collect()
}
