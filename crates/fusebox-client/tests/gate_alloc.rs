//! The gate's hot path allocates nothing: once a tool is resolved and the
//! report queue has grown to its working size, admitting a call from a
//! fresh view and recording its outcome make no heap allocation on the
//! calling thread. That holds for successes, business errors and failures
//! within a streak; the first failure after a success allocates once, to
//! remember that this replica saw it (the breaker's reporters).
//!
//! `allocation-counter` counts the allocations of the thread that makes the
//! calls (the test's own: `#[tokio::test]` runs its body there and spawned
//! tasks on the runtime's workers).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{OutcomeClass, ToolRef};
use std::time::Duration;
use support::{connected, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitting_and_recording_allocate_nothing() {
    let cluster = TestCluster::start(1).await;
    let client = connected(cluster.config("r1", &[0])).await;
    let tool = ToolRef::new("tax-vendor", "tax_lookup").unwrap();
    let elapsed = Duration::from_millis(12);

    // Warm up: the tool is resolved once, and outcomes are recorded faster
    // than the flusher sends them until the queue is full once, so it has
    // grown to its bound and never grows again.
    let mut warmup = 0u64;
    while client.metrics().outcomes_dropped == 0 {
        let decision = client.admit(&tool);
        client.report(&tool, &decision, OutcomeClass::Success, elapsed);
        warmup += 1;
        assert!(warmup < 10_000_000, "the report queue never filled");
    }

    let classes = [
        OutcomeClass::Success,
        OutcomeClass::BusinessError,
        OutcomeClass::Success,
    ];
    let mut refused = 0;
    let counted = allocation_counter::measure(|| {
        for i in 0..20_000 {
            let decision = client.admit(&tool);
            if !decision.allows() || decision.degraded {
                refused += 1;
            }
            client.report(&tool, &decision, classes[i % classes.len()], elapsed);
        }
    });
    assert_eq!(refused, 0, "every call was admitted from a fresh view");
    assert_eq!(
        counted.count_total, 0,
        "20,000 admissions and outcome records allocated: {counted:?}"
    );
    // The counter does see this thread's allocations.
    let one = allocation_counter::measure(|| {
        std::hint::black_box(String::from("an allocation"));
    });
    assert_eq!(one.count_total, 1);
    client.close().await;
    cluster.shutdown().await;
}
