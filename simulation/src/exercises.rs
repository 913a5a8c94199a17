//! The operations runbook's exercises and the slow-tool story's one slow
//! tool out of twenty, as scripted workloads with the outcome each one
//! expects.
//!
//! Each replica plays turns of its scenario; what the turns see is counted
//! in the world, and [`judge`] compares the counts with the exercise's
//! expectation at the end of the run. An unmet expectation is a violation
//! like any broken invariant.

use crate::agents::Replica;
use crate::scenario::Scenario;
use crate::tools::{self, Behaviour, CONCURRENT_PROBES};
use crate::world::{sim_ms, World};
use fusebox_client::{
    BreakerState, ClientError, Journey, OutcomeClass, ToolFailure, ToolRef, WriteRequest,
    WriteSuccess,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// When the dependency of `sustained_dependency_failure` starts failing.
pub const OUTAGE_FROM_MS: u64 = 3_000;
/// How long it fails (the runbook's 90 s).
pub const OUTAGE_MS: u64 = 90_000;
/// When the tax tool of `one_slow_of_twenty` turns slow.
pub const SLOW_FROM_MS: u64 = 4_000;

/// The twenty tools of the slow-tool story's agent: internal services, search, a few
/// third-party servers; `tax/tax_lookup` is the one that turns slow.
pub const TWENTY: [(&str, &str); 20] = [
    ("accounts", "get_account"),
    ("accounts", "list_invoices"),
    ("accounts", "get_plan"),
    ("accounts", "get_usage"),
    ("accounts", "get_contacts"),
    ("search", "search_docs"),
    ("search", "search_tickets"),
    ("enrich", "company"),
    ("enrich", "person"),
    ("enrich", "domain"),
    ("enrich", "social"),
    ("geo", "geocode"),
    ("geo", "reverse_geocode"),
    ("geo", "timezone"),
    ("tax", "tax_lookup"),
    ("tax", "tax_rates"),
    ("crm", "get_deal"),
    ("crm", "get_notes"),
    ("crm", "get_owner"),
    ("crm", "get_stage"),
];

fn tool(server: &str, name: &str) -> Option<ToolRef> {
    ToolRef::new(server, name).ok()
}

/// Plays one turn of the replica's scenario.
pub(crate) async fn turn(replica: &mut Replica) {
    match replica.scenario {
        Scenario::Chaos => {}
        Scenario::ReadTransient503 => read_transient_503(replica).await,
        Scenario::WriteResponseLostAfterAccept => write_response_lost(replica).await,
        Scenario::SustainedDependencyFailure => sustained_failure(replica).await,
        Scenario::BudgetExhausted => budget_exhausted(replica).await,
        Scenario::OneSlowOfTwenty => one_slow_of_twenty(replica).await,
        Scenario::IncidentCost => incident_turn(replica).await,
        Scenario::IsolatedLeaderReads => {
            let key = replica.contended_key(2);
            if replica.rng.bool() {
                replica.begin_and_complete(&key).await;
            } else {
                replica.lookup(&key).await;
            }
        }
    }
}

/// `get_deployment_job` answers 503 to the first attempt of every call and
/// succeeds on the second: every call succeeds in exactly two attempts. A
/// `restart_deployment_job` that meets the same 503 is a non-idempotent
/// write: it is never retried, so the backend sees it once.
async fn read_transient_503(replica: &mut Replica) {
    transient_read(replica).await;
    transient_write(replica).await;
}

async fn transient_write(replica: &mut Replica) {
    let Some(restart) = tool("deploy", "restart_deployment_job") else {
        return;
    };
    let key = format!("transient-{}-{}", replica.name, replica.ops);
    let request = WriteRequest::new(restart, &key, "job-9", key.as_bytes());
    let journey = replica.journey();
    let (world, k) = (replica.world.clone(), key.clone());
    let written = replica
        .client
        .write(&journey, &request, |_ctx| {
            let (world, k) = (world.clone(), k.clone());
            async move {
                *world.write_runs.borrow_mut().entry(k).or_default() += 1;
                Err::<WriteSuccess, _>(ToolFailure::new(OutcomeClass::ServerError, "503"))
            }
        })
        .await;
    if written.is_ok() {
        replica
            .world
            .count("transient: a failed write reported success");
    }
}

async fn transient_read(replica: &mut Replica) {
    let Some(job) = tool("deploy", "get_deployment_job") else {
        return;
    };
    let journey = replica.journey();
    let world = replica.world.clone();
    let called = replica
        .client
        .call(&journey, &job, |ctx| {
            let (world, job) = (world.clone(), job.clone());
            async move {
                let behaviour = Behaviour::server_error_if(ctx.attempt == 1, 20);
                tools::run(&world, &job, &ctx, behaviour).await
            }
        })
        .await;
    match called {
        Ok(out) if out.attempts == 2 => replica.world.count("transient: answered on attempt 2"),
        Ok(out) => {
            replica.world.count("transient: other attempts");
            replica.world.log(
                &replica.name,
                format!("answered after {} attempts", out.attempts),
            );
        }
        Err(e) => {
            replica.world.count("transient: failed");
            replica.world.log(&replica.name, format!("failed: {e}"));
        }
    }
}

/// `restart_deployment_job` is accepted by the backend, but its response
/// never arrives: the SDK must not retry it, the agent's own retry of the
/// same intent must not run it again, and the key must be looked up.
async fn write_response_lost(replica: &mut Replica) {
    let Some(restart) = tool("deploy", "restart_deployment_job") else {
        return;
    };
    let key = format!("restart-{}-{}", replica.name, replica.ops);
    let request = WriteRequest::new(restart.clone(), &key, "job-7", key.as_bytes());
    let mut reached = false;
    for agent_try in 1..=2 {
        let journey = replica.journey();
        let (world, k) = (replica.world.clone(), key.clone());
        let written = replica
            .client
            .write(&journey, &request, |_ctx| {
                let (world, k) = (world.clone(), k.clone());
                async move {
                    // The backend accepts and performs the restart...
                    *world.write_runs.borrow_mut().entry(k).or_default() += 1;
                    // ...and the response is lost.
                    std::future::pending::<()>().await;
                    Ok::<WriteSuccess, ToolFailure>(WriteSuccess {
                        operation_id: String::new(),
                        result: Vec::new(),
                    })
                }
            })
            .await;
        let what = match &written {
            Ok(_) => "succeeded".to_string(),
            Err(e) => e.kind().to_string(),
        };
        reached |= replica.world.write_runs.borrow().contains_key(&key);
        if agent_try == 1 && !reached {
            // Refused before it was sent (the breaker opened on the
            // timeouts): nothing to look up.
            replica.world.count("lost response: refused before sending");
            replica
                .world
                .log(&replica.name, format!("restart {key}: {what}, never sent"));
            return;
        }
        replica.world.log(
            &replica.name,
            format!("restart {key}, try {agent_try}: {what}"),
        );
        if written.is_ok() {
            replica
                .world
                .count("lost response: a write reported success");
        }
    }
    match replica.client.lookup(&key).await {
        Ok(record) => {
            replica.world.count("lost response: looked up by key");
            replica.world.log(
                &replica.name,
                format!("lookup {key}: status {}", record.status),
            );
        }
        Err(e) => {
            replica.world.count("lost response: lookup failed");
            replica
                .world
                .log(&replica.name, format!("lookup {key}: {e}"));
        }
    }
}

/// `get_deployment_job` answers 503 for 90 s: the breaker opens fleet-wide,
/// one probe at a time tests it, and every refusal tells the agent about
/// when to try again.
async fn sustained_failure(replica: &mut Replica) {
    let Some(job) = tool("deploy", "get_deployment_job") else {
        return;
    };
    let journey = replica.journey();
    let world = replica.world.clone();
    let started = sim_ms();
    let failing = (OUTAGE_FROM_MS..OUTAGE_FROM_MS + OUTAGE_MS).contains(&started);
    let called = replica
        .client
        .call(&journey, &job, |ctx| {
            let (world, job) = (world.clone(), job.clone());
            async move {
                world.count("outage: backend calls");
                let behaviour = Behaviour::server_error_if(failing, 20);
                tools::run(&world, &job, &ctx, behaviour).await
            }
        })
        .await;
    if let Err(ClientError::CircuitOpen {
        retry_after_ms: None,
        ..
    }) = &called
    {
        replica.world.count("outage: rejected without a retry hint");
    }
    let name = match (&called, failing) {
        (Err(ClientError::CircuitOpen { .. }), true) => "outage: rejected by the open breaker",
        (Err(ClientError::CircuitOpen { .. }), false) => "outage: rejected after the outage",
        (Err(_), true) => "outage: failed during the outage",
        (Ok(_), true) => "outage: succeeded during the outage",
        (Ok(_), false) => "outage: succeeded outside the outage",
        (Err(_), false) => "outage: failed outside the outage",
    };
    replica.world.count(name);
    if sim_ms() > OUTAGE_FROM_MS + OUTAGE_MS + 10_000 && called.is_ok() {
        replica.world.count("outage: recovered");
    }
}

/// `get_deployment_job` is slow (5 s) and the turn's budget is 1.6 s with
/// 0.5 s kept for the answer: the call times out at its own deadline, no
/// retry is started that the budget cannot finish, the error names the
/// layer, and the tool saw the turn's correlation id.
async fn budget_exhausted(replica: &mut Replica) {
    let Some(job) = tool("deploy", "get_deployment_job") else {
        return;
    };
    let intent = format!("{}-turn-{}", replica.name, replica.ops);
    let journey = Journey::new(
        intent.clone(),
        Duration::from_millis(1_600),
        Duration::from_millis(500),
    );
    let world = replica.world.clone();
    let called = replica
        .client
        .call(&journey, &job, |ctx| {
            let (world, job, intent) = (world.clone(), job.clone(), intent.clone());
            async move {
                world.count("budget: attempts");
                if ctx.intent_id == intent {
                    world.count("budget: correlation id seen by the tool");
                }
                tools::run(&world, &job, &ctx, Behaviour::Healthy { ms: 5_000 }).await
            }
        })
        .await;
    replica.world.count("budget: turns");
    // The user quotes the intent id from the error the agent received.
    let quoted = match &called {
        Err(
            ClientError::Timeout { intent_id, .. } | ClientError::BudgetExhausted { intent_id, .. },
        ) => Some(
            intent_id == &intent
                && called
                    .as_ref()
                    .err()
                    .is_some_and(|e| e.to_string().contains(&intent)),
        ),
        _ => None,
    };
    match quoted {
        Some(true) => replica.world.count("budget: error names the intent"),
        Some(false) => replica.world.count("budget: error without the intent"),
        None => {}
    }
    match &called {
        Err(ClientError::Timeout { layer, .. }) => {
            replica.world.count("budget: timeout with its layer");
            replica.world.log(
                &replica.name,
                format!("timed out at the {} layer", layer.as_str()),
            );
        }
        Err(ClientError::BudgetExhausted { .. }) => replica.world.count("budget: exhausted"),
        // The timeouts open the breaker; a rejected call costs no budget.
        Err(ClientError::CircuitOpen { .. }) => {
            replica.world.count("budget: rejected by the breaker")
        }
        Err(e) => {
            replica.world.count("budget: other error");
            replica.world.log(&replica.name, format!("unexpected: {e}"));
        }
        Ok(_) => replica.world.count("budget: other error"),
    }
    // Wait out the slow call's tail so turns do not overlap.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// Seed 000: twenty tools, one turns slow. A turn calls six of them in a
/// row under a 5 s budget; after the tax tool's breaker opens, turns stay
/// fast and no other tool fails.
async fn one_slow_of_twenty(replica: &mut Replica) {
    let turn_started = sim_ms();
    let journey = Journey::new(
        format!("{}-turn-{}", replica.name, replica.ops),
        Duration::from_secs(5),
        Duration::from_millis(200),
    );
    for _ in 0..6 {
        let (server, name) = TWENTY[replica.rng.usize(0..TWENTY.len())];
        let Some(t) = tool(server, name) else {
            continue;
        };
        let slow = name == "tax_lookup" && sim_ms() >= SLOW_FROM_MS;
        let ms = replica.rng.u64(20..300);
        let behaviour = if slow {
            Behaviour::Healthy { ms: 40_000 }
        } else {
            Behaviour::Healthy { ms }
        };
        let world = replica.world.clone();
        let called = replica
            .client
            .call(&journey, &t, |ctx| {
                let (world, t) = (world.clone(), t.clone());
                async move { tools::run(&world, &t, &ctx, behaviour).await }
            })
            .await;
        let counter = match (&called, name == "tax_lookup") {
            (Ok(_), false) => "twenty: other tools ok",
            (Err(ClientError::BudgetExhausted { .. }), false) => {
                "twenty: other tools out of budget"
            }
            (Err(_), false) => "twenty: other tools failed",
            (Ok(_), true) => "twenty: tax ok",
            (Err(ClientError::CircuitOpen { .. }), true) => "twenty: tax rejected fast",
            (Err(_), true) => "twenty: tax failed",
        };
        replica.world.count(counter);
        if counter == "twenty: other tools failed" {
            let what = called.err().map(|e| e.to_string()).unwrap_or_default();
            replica
                .world
                .log(&replica.name, format!("{server}/{name}: {what}"));
        }
    }
    let took = sim_ms() - turn_started;
    // Once the breaker had time to open (four timeouts, then the view),
    // no turn waits on the slow tool for long.
    if turn_started >= SLOW_FROM_MS + 10_000 {
        replica
            .world
            .count("twenty: turns after the breaker opened");
        if took > 2_500 {
            replica
                .world
                .count("twenty: slow turns after the breaker opened");
            replica
                .world
                .log(&replica.name, format!("turn took {took} ms"));
        }
    }
}

/// The incident story's turn: six calls in a row drawn from the twenty
/// tools, each timed; the slow tool's calls and the others' time go into
/// the world for [`crate::incident::Figures`]. Then the agent "thinks".
async fn incident_turn(replica: &mut Replica) {
    use crate::incident::{
        answer_ms, Ending, SlowCall, Turn, SLOWEST_HEALTHY_MS, SLOW_TOOL, TURN_CALLS,
    };
    let setup = replica.world.incident;
    let onset = crate::incident::onset_ms(replica.world.seed);
    let turn_started = sim_ms();
    let journey = Journey::new(
        format!("{}-turn-{}", replica.name, replica.ops),
        Duration::from_secs(120),
        Duration::from_millis(200),
    );
    let (mut other_tools_ms, mut other_tools_failed) = (0, 0);
    for _ in 0..TURN_CALLS {
        let (server, name) = TWENTY[replica.rng.usize(0..TWENTY.len())];
        let Some(t) = tool(server, name) else {
            continue;
        };
        let slow_tool = (server, name) == SLOW_TOOL;
        let healthy_ms = if slow_tool {
            replica.rng.u64(100..SLOWEST_HEALTHY_MS)
        } else {
            replica.rng.u64(20..300)
        };
        let start_ms = sim_ms();
        let answer = if slow_tool && setup.slow {
            answer_ms(start_ms, start_ms + healthy_ms, onset)
        } else {
            start_ms + healthy_ms
        };
        let behaviour = Behaviour::Healthy {
            ms: answer - start_ms,
        };
        let world = replica.world.clone();
        // Whether the gate let the call reach the tool: a refusal can come
        // after a round trip (a probe permit denied), not only at once.
        let reached = AtomicBool::new(false);
        let called = replica
            .client
            .call(&journey, &t, |ctx| {
                let (world, t) = (world.clone(), t.clone());
                reached.store(true, Ordering::Relaxed);
                async move {
                    if setup.shared {
                        tools::run(&world, &t, &ctx, behaviour).await
                    } else {
                        tools::run_unwatched(&ctx, behaviour).await
                    }
                }
            })
            .await;
        let end_ms = sim_ms();
        if slow_tool {
            let ending = match &called {
                Ok(_) => Ending::Answered,
                Err(ClientError::Timeout { .. }) => Ending::TimedOut,
                Err(ClientError::CircuitOpen { .. }) if !reached.load(Ordering::Relaxed) => {
                    Ending::Refused
                }
                Err(ClientError::CircuitOpen {
                    state: BreakerState::Open | BreakerState::ForcedOpen,
                    ..
                }) => Ending::EndedAtOpen,
                Err(_) => Ending::Other,
            };
            replica.world.incident_calls.borrow_mut().push(SlowCall {
                start_ms,
                healthy_end_ms: start_ms + healthy_ms,
                end_ms,
                ending,
            });
        } else {
            other_tools_ms += end_ms - start_ms;
            if let Err(e) = &called {
                other_tools_failed += 1;
                replica
                    .world
                    .log(&replica.name, format!("{server}/{name}: {e}"));
            }
        }
    }
    replica.world.incident_turns.borrow_mut().push(Turn {
        start_ms: turn_started,
        other_tools_ms,
        other_tools_failed,
    });
    let think = replica.rng.u64(200..800);
    tokio::time::sleep(Duration::from_millis(think)).await;
}

/// The incident scenario's expectations: the slow tool cost something
/// only if it was slow, never less than an ideal breaker's floor, and no
/// other tool failed; in a shared fleet the breaker opened.
fn judge_incident(world: &World, expect: &impl Fn(bool, &str)) {
    let setup = world.incident;
    let figures = crate::incident::Figures::of(world, crate::incident::onset_ms(world.seed));
    world.log_at(sim_ms(), "incident", figures.to_string());
    expect(figures.turns > 0, "no turn ran after the onset");
    expect(
        figures.other_tools_failed == 0,
        "a healthy tool failed while one tool was slow",
    );
    if !setup.slow {
        expect(figures.lost_s == 0.0, "a healthy tool's calls lost time");
        return;
    }
    expect(
        figures.earliest_trip_ms.is_some(),
        "fewer calls met the slow tool than a breaker needs to open",
    );
    expect(
        figures.lost_s >= figures.floor_s,
        "the fleet lost less than an ideal breaker must (the floor is wrong)",
    );
    // One replica alone needs four timeouts of its own, which may take the
    // whole counted window; a fleet trips well within it.
    let fleet = world.replicas > 1;
    if fleet {
        expect(figures.refused > 0, "the slow tool's breaker never opened");
    }
    if fleet && setup.shared && setup.end_in_flight {
        expect(
            figures.ended_at_open > 0,
            "no call in flight was ended when the breaker opened",
        );
    }
    if !setup.end_in_flight {
        expect(
            figures.ended_at_open == 0,
            "a call was ended at the open though the policy says finish",
        );
    }
}

fn counter(world: &World, name: &str) -> u64 {
    world.counters.borrow().get(name).copied().unwrap_or(0)
}

/// Checks the scenario's expectations at the end of the run.
pub fn judge(world: &World, scenario: Scenario, end_ms: u64) {
    let expect = |ok: bool, what: &str| {
        if !ok {
            world.violate(
                end_ms,
                "exercise expectation",
                format!("{scenario}: {what}"),
            );
        }
    };
    match scenario {
        Scenario::Chaos | Scenario::IsolatedLeaderReads => {}
        Scenario::IncidentCost => judge_incident(world, &expect),
        Scenario::ReadTransient503 => {
            expect(
                counter(world, "transient: answered on attempt 2") > 0,
                "no call answered on its second attempt",
            );
            expect(
                counter(world, "transient: other attempts") + counter(world, "transient: failed")
                    == 0,
                "a call did not answer in exactly two attempts",
            );
            let runs = world.write_runs.borrow();
            expect(!runs.is_empty(), "no write met the transient 503");
            expect(
                runs.values().all(|n| *n == 1),
                "a non-idempotent write that met a 503 was retried",
            );
            expect(
                counter(world, "transient: a failed write reported success") == 0,
                "a failed write reported success",
            );
        }
        Scenario::WriteResponseLostAfterAccept => {
            let runs = world.write_runs.borrow();
            expect(!runs.is_empty(), "no restart reached the backend");
            expect(
                runs.values().all(|n| *n == 1),
                "a restart ran more than once (an automatic or repeated retry)",
            );
            expect(
                counter(world, "lost response: a write reported success") == 0,
                "a write whose response was lost reported success",
            );
            expect(
                counter(world, "lost response: looked up by key") > 0
                    && counter(world, "lost response: lookup failed") == 0,
                "the operation could not be looked up by its idempotency key",
            );
        }
        Scenario::SustainedDependencyFailure => {
            let max = world
                .probes
                .borrow()
                .get("deploy/get_deployment_job")
                .map_or(0, |g| g.max);
            expect(
                counter(world, "outage: rejected by the open breaker") > 0,
                "the breaker never opened",
            );
            expect(max >= 1, "the open breaker was never probed");
            expect(max <= CONCURRENT_PROBES, "more than one probe at a time");
            expect(
                counter(world, "outage: rejected without a retry hint") == 0,
                "a refusal did not say when to try again",
            );
            expect(
                counter(world, "outage: recovered") > 0,
                "calls did not succeed again after the outage",
            );
        }
        Scenario::BudgetExhausted => {
            let turns = counter(world, "budget: turns");
            expect(turns > 0, "no turn ran");
            expect(
                counter(world, "budget: attempts") <= turns,
                "a retry was started that the budget could not finish",
            );
            expect(
                counter(world, "budget: timeout with its layer") > 0,
                "no turn timed out",
            );
            expect(
                counter(world, "budget: other error") == 0,
                "a turn ended in neither a timeout naming its layer nor the open breaker",
            );
            expect(
                counter(world, "budget: correlation id seen by the tool")
                    == counter(world, "budget: attempts"),
                "the tool did not see the turn's correlation id",
            );
            expect(
                counter(world, "budget: error names the intent") > 0
                    && counter(world, "budget: error without the intent") == 0,
                "a timeout or budget error did not name the turn's intent id",
            );
        }
        Scenario::OneSlowOfTwenty => {
            expect(
                counter(world, "twenty: tax rejected fast") > 0,
                "the slow tool's breaker never opened",
            );
            expect(
                counter(world, "twenty: other tools failed") == 0,
                "a healthy tool failed while one tool was slow",
            );
            expect(
                counter(world, "twenty: turns after the breaker opened") > 0
                    && counter(world, "twenty: slow turns after the breaker opened") == 0,
                "turns stayed slow after the breaker opened",
            );
        }
    }
}
