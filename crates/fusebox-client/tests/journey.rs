//! A journey's total time never exceeds its budget; a timeout cancels the
//! call (its token fires) and names the layer that expired; retries are
//! bounded, backed off and get a new attempt id each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{ClientError, Journey, Layer, OutcomeClass, ToolFailure, ToolRef};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{connected, flag_set, hangs, wait_for, TestCluster};

const POLICY: &str = r#"
[defaults]
timeout_ms = 10000

[defaults.breaker]
consecutive_failures = 1000

[servers.crm.tools.account_lookup]
timeout_ms = 200

[servers.crm.tools.search_notes.retry]
max_attempts = 3
backoff_initial_ms = 20
backoff_max_ms = 80
"#;

async fn setup() -> (TestCluster, fusebox_client::Client) {
    let cluster = TestCluster::start(1).await;
    let version = cluster.operator(0).apply_policy(POLICY).await;
    let client = connected(cluster.config("journeyer", &[0])).await;
    wait_for("policy on the replica", Duration::from_secs(10), || {
        let v = client.view_status().policy_version;
        async move { (v == Some(version)).then_some(()) }
    })
    .await;
    (cluster, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_never_outlives_its_budget_and_the_timeout_names_the_layer() {
    let (cluster, client) = setup().await;
    let slow = ToolRef::new("crm", "enrich").unwrap();
    let budget = Duration::from_millis(1_500);
    let reserve = Duration::from_millis(300);

    tracing::info!("a tool allowed 10 s is cut by the journey's budget less its reserve");
    let journey = Journey::new("turn-a", budget, reserve);
    let cancelled = Arc::new(AtomicBool::new(false));
    let c = cancelled.clone();
    let err = client
        .call(&journey, &slow, |ctx| {
            assert_eq!(ctx.deadline_layer, Layer::Journey);
            hangs(c.clone(), ctx.cancel)
        })
        .await
        .unwrap_err();
    let spent = journey.elapsed();
    match &err {
        ClientError::Timeout {
            layer, elapsed_ms, ..
        } => {
            assert_eq!(*layer, Layer::Journey);
            assert!(*elapsed_ms as u128 <= (budget - reserve).as_millis() + 50);
        }
        other => panic!("expected a timeout, got {other}"),
    }
    assert!(err.to_string().contains("journey deadline"), "{err}");
    assert!(
        err.to_string().contains(journey.intent_id()),
        "the user can quote the intent id: {err}"
    );
    assert!(spent <= budget, "spent {spent:?} of a {budget:?} budget");
    assert!(journey.remaining() >= Duration::ZERO);
    flag_set(
        "the call's token to fire",
        &cancelled,
        Duration::from_secs(2),
    )
    .await;

    tracing::info!("the next call finds no budget left and is refused before it starts");
    let err = client
        .call(&journey, &slow, |_| async { Ok::<_, ToolFailure>(()) })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "budget_exhausted", "{err}");
    assert!(err.to_string().contains(journey.intent_id()), "{err}");
    assert!(journey.elapsed() <= budget);

    tracing::info!("a tight per-tool deadline inside a roomy journey names the tool layer");
    let journey = Journey::new("turn-b", Duration::from_secs(20), Duration::from_secs(2));
    let lookup = ToolRef::new("crm", "account_lookup").unwrap();
    let cancelled = Arc::new(AtomicBool::new(false));
    let c = cancelled.clone();
    let err = client
        .call(&journey, &lookup, |ctx| hangs(c.clone(), ctx.cancel))
        .await
        .unwrap_err();
    match err {
        ClientError::Timeout {
            layer, deadline_ms, ..
        } => {
            assert_eq!(layer, Layer::Tool);
            assert_eq!(deadline_ms, 200);
        }
        other => panic!("expected a tool timeout, got {other}"),
    }
    flag_set(
        "the call's token to fire",
        &cancelled,
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(client.metrics().timeouts, 2);
    client.close().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_of_slow_calls_stops_inside_the_budget() {
    let (cluster, client) = setup().await;
    let lookup = ToolRef::new("crm", "account_lookup").unwrap();
    let budget = Duration::from_millis(1_000);
    let journey = Journey::new("turn-c", budget, Duration::from_millis(150));
    let mut last = None;
    for _ in 0..50 {
        let result = client
            .call(&journey, &lookup, |ctx| async move {
                ctx.cancel.cancelled().await;
                Ok::<_, ToolFailure>(())
            })
            .await;
        match result {
            Err(e) if e.kind() == "budget_exhausted" => {
                last = Some(e);
                break;
            }
            Err(e) => assert_eq!(e.kind(), "timeout"),
            Ok(_) => panic!("the tool never answers"),
        }
        assert!(journey.elapsed() <= budget);
    }
    assert!(last.is_some(), "the loop ended on budget_exhausted");
    assert!(journey.elapsed() <= budget, "{:?}", journey.elapsed());
    client.close().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_bounded_and_each_attempt_has_its_own_id() {
    let (cluster, client) = setup().await;
    let notes = ToolRef::new("crm", "search_notes").unwrap();
    let journey = Journey::new("turn-d", Duration::from_secs(20), Duration::from_secs(1));
    let ids = Arc::new(Mutex::new(Vec::new()));

    tracing::info!("two 503s then an answer: three attempts, three ids");
    let seen = ids.clone();
    let started = Instant::now();
    let out = client
        .call(&journey, &notes, |ctx| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(ctx.tool_call_id.clone());
                if ctx.attempt < 3 {
                    Err(ToolFailure::new(OutcomeClass::ServerError, "503"))
                } else {
                    Ok("notes")
                }
            }
        })
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(out.attempts, 3);
    let ids = ids.lock().unwrap().clone();
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3);

    tracing::info!("always failing: capped at max_attempts");
    let tries = Arc::new(AtomicU32::new(0));
    let t = tries.clone();
    let err = client
        .call(&journey, &notes, |_| {
            let t = t.clone();
            async move {
                t.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(ToolFailure::new(OutcomeClass::Transport, "reset"))
            }
        })
        .await
        .unwrap_err();
    assert_eq!(tries.load(Ordering::SeqCst), 3);
    assert!(err.to_string().contains("after 3 attempts"), "{err}");

    tracing::info!("a business error and a timeout are not retried");
    let tries = Arc::new(AtomicU32::new(0));
    let t = tries.clone();
    let err = client
        .call(&journey, &notes, |_| {
            let t = t.clone();
            async move {
                t.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(ToolFailure::new(
                    OutcomeClass::BusinessError,
                    "no such account",
                ))
            }
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "tool_failed");
    assert_eq!(tries.load(Ordering::SeqCst), 1);
    assert_eq!(client.metrics().retries, 4);

    tracing::info!("cancelling the journey cancels the running call");
    let j = Arc::new(Journey::new(
        "turn-e",
        Duration::from_secs(20),
        Duration::ZERO,
    ));
    let canceller = j.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let err = client
        .call(&j, &notes, |_ctx| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, ToolFailure>(())
        })
        .await;
    assert!(matches!(err, Err(ClientError::Cancelled { .. })), "{err:?}");
    client.close().await;
    cluster.shutdown().await;
}
