//! Writes through the ledger: a lost response is never sent twice and is
//! left ambiguous for an operator; an idempotent write is replayed; the
//! kill switch blocks writes while reads go on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::proto::{LedgerStatus, ResolutionDecision};
use fusebox_client::{
    derive_key, ClientError, Journey, OutcomeClass, Started, ToolFailure, ToolRef, WriteRequest,
    WriteSuccess,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{connected, wait_for, TestCluster};

const POLICY: &str = r#"
[servers.jobs.tools.restart_job]
effect = "non_idempotent_write"
timeout_ms = 300

[servers.jobs.tools.create_ticket]
effect = "idempotent_write"
timeout_ms = 2000

[servers.jobs.tools.create_ticket.retry]
max_attempts = 3
backoff_initial_ms = 10
backoff_max_ms = 50

[servers.jobs.tools.get_job]
effect = "read_only"
"#;

async fn setup() -> (TestCluster, fusebox_client::Client) {
    let cluster = TestCluster::start(1).await;
    let version = cluster.operator(0).apply_policy(POLICY).await;
    let client = connected(cluster.config("writer", &[0])).await;
    wait_for("policy on the replica", Duration::from_secs(10), || {
        let v = client.view_status().policy_version;
        async move { (v == Some(version)).then_some(()) }
    })
    .await;
    (cluster, client)
}

fn journey() -> Journey {
    Journey::new(
        "intent-7",
        Duration::from_secs(30),
        Duration::from_millis(500),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_response_is_never_sent_twice_and_is_resolved_by_an_operator() {
    let (cluster, client) = setup().await;
    let tool = ToolRef::new("jobs", "restart_job").unwrap();
    let key = derive_key("intent-7", "job-42", "prod", "approval-1");
    let request = WriteRequest::new(tool, key.clone(), "job-42", b"{\"job\":42}");
    let backend_operations = Arc::new(AtomicU32::new(0));

    tracing::info!("the backend performs the restart, but the answer never comes back");
    let j = journey();
    let ops = backend_operations.clone();
    let err = client
        .write(&j, &request, |ctx| {
            let ops = ops.clone();
            let expected = key.clone();
            async move {
                assert_eq!(ctx.idempotency_key, Some(expected));
                ops.fetch_add(1, Ordering::SeqCst);
                ctx.cancel.cancelled().await;
                Err(ToolFailure::new(OutcomeClass::Cancelled, "cancelled"))
            }
        })
        .await
        .unwrap_err();
    match &err {
        ClientError::AmbiguousOutcome { key: k, reason, .. } => {
            assert_eq!(k, &key);
            assert!(reason.contains("timed out"), "{reason}");
        }
        other => panic!("expected ambiguous_outcome, got {other}"),
    }
    assert!(err.to_string().contains("do not retry"));

    tracing::info!("a second attempt under the same key is refused before the tool");
    for _ in 0..2 {
        let ops = backend_operations.clone();
        let err = client
            .write(&j, &request, |_| {
                let ops = ops.clone();
                async move {
                    ops.fetch_add(1, Ordering::SeqCst);
                    Ok(WriteSuccess {
                        operation_id: "dup".into(),
                        result: vec![],
                    })
                }
            })
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "ambiguous_outcome");
    }
    assert_eq!(backend_operations.load(Ordering::SeqCst), 1, "sent once");

    tracing::info!("the operator looks the key up and resolves it");
    let record = client.lookup(&key).await.unwrap();
    assert_eq!(record.status, LedgerStatus::Ambiguous as i32);
    assert_eq!(record.intent_id, "intent-7");
    let resolved = client
        .resolve(
            &key,
            ResolutionDecision::Done,
            Some("op-981".into()),
            "oncall",
            "job 42 shows a restart at 10:02",
        )
        .await
        .unwrap();
    assert_eq!(resolved.status, LedgerStatus::Succeeded as i32);

    tracing::info!("after resolution the key replays; the tool is still not called");
    let out = client
        .write(&j, &request, |_| async {
            panic!("a resolved key must not run again")
        })
        .await
        .unwrap();
    assert!(out.replayed);
    assert_eq!(out.operation_id.as_deref(), Some("op-981"));
    assert_eq!(backend_operations.load(Ordering::SeqCst), 1);
    assert_eq!(client.metrics().writes_ambiguous, 1);
    client.close().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_idempotent_write_is_never_retried_even_on_a_retryable_class() {
    let (cluster, client) = setup().await;
    let tool = ToolRef::new("jobs", "restart_job").unwrap();
    let request = WriteRequest::new(tool, "restart-job-7", "job-7", b"{}");
    let sent = Arc::new(AtomicU32::new(0));
    let s = sent.clone();
    let err = client
        .write(&journey(), &request, |_| {
            let s = s.clone();
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                Err(ToolFailure::new(
                    OutcomeClass::Transport,
                    "connection reset after send",
                ))
            }
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "ambiguous_outcome");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    assert_eq!(client.metrics().retries, 0);
    let record = client.lookup("restart-job-7").await.unwrap();
    assert_eq!(record.status, LedgerStatus::Ambiguous as i32);
    client.close().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_write_is_replayed_from_the_ledger() {
    let (cluster, client) = setup().await;
    let tool = ToolRef::new("jobs", "create_ticket").unwrap();
    let request = WriteRequest::new(tool.clone(), "ticket-for-intent-7", "queue-a", b"{\"t\":1}");
    let created = Arc::new(AtomicU32::new(0));

    tracing::info!("a 429 before anything happened is retried under the same key");
    let c = created.clone();
    let out = client
        .write(&journey(), &request, |ctx| {
            let c = c.clone();
            async move {
                if ctx.attempt == 1 {
                    return Err(ToolFailure::new(OutcomeClass::RateLimited, "429"));
                }
                c.fetch_add(1, Ordering::SeqCst);
                Ok(WriteSuccess {
                    operation_id: "ticket-1001".into(),
                    result: b"{\"ticket\":1001}".to_vec(),
                })
            }
        })
        .await
        .unwrap();
    assert!(!out.replayed);
    assert_eq!(out.attempts, 2);

    tracing::info!("the same intent again: replayed, the backend untouched");
    let again = client
        .write(&journey(), &request, |_| async {
            panic!("a completed key must be replayed, not run")
        })
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.result, b"{\"ticket\":1001}".to_vec());
    assert_eq!(again.operation_id.as_deref(), Some("ticket-1001"));
    assert_eq!(created.load(Ordering::SeqCst), 1);
    assert_eq!(client.metrics().writes_replayed, 1);

    tracing::info!("the same key with other arguments is a mismatch");
    let other = WriteRequest::new(tool, "ticket-for-intent-7", "queue-a", b"{\"t\":2}");
    let err = client
        .write(&journey(), &other, |_| async { panic!("never") })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "mismatch");
    assert_eq!(err.intent_id(), Some("intent-7"), "{err}");
    client.close().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_still_running_keeps_its_record_until_it_ends() {
    let (cluster, client) = setup().await;
    let mut config = cluster.config("writer-2", &[0]);
    config.write_lease_margin_ms = 100;
    let tight = connected(config).await;
    let tool = ToolRef::new("jobs", "restart_job").unwrap();
    let request = WriteRequest::new(tool.clone(), "restart-job-9", "job-9", b"{}");
    let started = Arc::new(AtomicU32::new(0));

    tracing::info!("the attempt starts the work; following it outlasts the attempt's 300 ms deadline and the first lease");
    let (s, follower, long) = (started.clone(), &client, journey());
    let write = tight.write_following(
        &long,
        &request,
        |_ctx| {
            let s = s.clone();
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                Ok(Started::Running("run-9".to_owned()))
            }
        },
        |run: String| async move {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            Ok(WriteSuccess {
                operation_id: run,
                result: b"restarted".to_vec(),
            })
        },
    );
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(900)).await;
        follower
            .write(&journey(), &request, |_| async { panic!("never") })
            .await
            .unwrap_err()
    };
    let (out, other) = tokio::join!(write, meanwhile);
    let out = out.unwrap();
    assert_eq!(other.kind(), "in_progress", "{other}");
    assert_eq!(out.result, b"restarted".to_vec());
    assert_eq!(out.operation_id.as_deref(), Some("run-9"));
    let record = client.lookup("restart-job-9").await.unwrap();
    assert_eq!(record.status, LedgerStatus::Succeeded as i32);
    let again = client
        .write(&journey(), &request, |_| async { panic!("never") })
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(started.load(Ordering::SeqCst), 1);

    tracing::info!("work whose end was not seen leaves the write ambiguous");
    let lost = WriteRequest::new(tool, "restart-job-10", "job-10", b"{}");
    let err = tight
        .write_following(
            &journey(),
            &lost,
            |_ctx| async { Ok(Started::Running(())) },
            |()| async {
                Err::<WriteSuccess, _>(ToolFailure::new(
                    OutcomeClass::Timeout,
                    "the poll got no answer",
                ))
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "ambiguous_outcome", "{err}");
    let record = client.lookup("restart-job-10").await.unwrap();
    assert_eq!(record.status, LedgerStatus::Ambiguous as i32);
    tight.close().await;
    client.close().await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_blocks_writes_and_reads_go_on() {
    let (cluster, client) = setup().await;
    cluster.operator(0).kill_switch(true, "deploy freeze").await;
    wait_for(
        "the kill switch in the view",
        Duration::from_secs(10),
        || {
            let blocked = client.view_status().writes_blocked;
            async move { blocked.then_some(()) }
        },
    )
    .await;
    let tool = ToolRef::new("jobs", "create_ticket").unwrap();
    let request = WriteRequest::new(tool, "blocked-1", "queue-a", b"{}");
    let err = client
        .write(&journey(), &request, |_| async {
            panic!("blocked writes never run")
        })
        .await
        .unwrap_err();
    match &err {
        ClientError::WritesBlocked { reason, .. } => assert_eq!(reason, "deploy freeze"),
        other => panic!("expected writes_blocked, got {other}"),
    }
    assert!(err.to_string().ends_with("(intent intent-7)"), "{err}");
    let read = ToolRef::new("jobs", "get_job").unwrap();
    let out = client
        .call(&journey(), &read, |_| async {
            Ok::<_, ToolFailure>("running")
        })
        .await
        .unwrap();
    assert_eq!(out.value, "running");
    assert_eq!(client.metrics().writes_blocked, 1);
    client.close().await;
    cluster.shutdown().await;
}
