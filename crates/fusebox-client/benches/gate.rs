//! The two operations on every tool call's path: the cached admission
//! decision and recording an outcome, apart and together (a protected
//! call). They run against a client fed by a real in-process node, so the
//! view is the one the watch stream built.
//!
//! Beside them, in the same run, the same work done by `failsafe`, an
//! in-process breaker crate: `is_call_permitted`, `on_success`, and both.
//! It guards one process with no fleet view, no policy lookup and nothing
//! reported, so it is the floor a gate could hope to reach.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{criterion_group, criterion_main, Criterion};
use fusebox_client::{Client, ClientConfig, OutcomeClass, ToolRef};
use fusebox_server::node::{self, NodeConfig};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

struct Fixture {
    _runtime: tokio::runtime::Runtime,
    client: Client,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config = NodeConfig {
        id: 1,
        listen: addr.parse().unwrap(),
        http: None,
        peers: BTreeMap::from([(1, addr.clone())]),
        data_dir: dir.path().to_path_buf(),
        cluster_id: "bench".into(),
        timing: Default::default(),
        ..NodeConfig::single_node()
    };
    let client = runtime.block_on(async {
        let node = node::start(config).await.unwrap();
        std::mem::forget(node);
        let client =
            Client::connect(ClientConfig::new(vec![addr], "bench", "r1").unwrap()).unwrap();
        assert!(client.wait_fresh(Duration::from_secs(30)).await);
        client
    });
    Fixture {
        _runtime: runtime,
        client,
        _dir: dir,
    }
}

fn gate(c: &mut Criterion) {
    let f = fixture();
    let tool = ToolRef::new("tax-vendor", "tax_lookup").unwrap();
    let decision = f.client.admit(&tool);
    assert!(decision.allows() && !decision.degraded);
    let elapsed = Duration::from_millis(12);
    let mut group = c.benchmark_group("gate");
    group.bench_function("fusebox/admit", |b| {
        b.iter(|| black_box(f.client.admit(black_box(&tool))))
    });
    group.bench_function("fusebox/record_outcome", |b| {
        b.iter(|| {
            f.client
                .report(black_box(&tool), &decision, OutcomeClass::Success, elapsed)
        })
    });
    group.bench_function("fusebox/admit_and_record", |b| {
        b.iter(|| {
            let decision = f.client.admit(black_box(&tool));
            f.client
                .report(&tool, &decision, OutcomeClass::Success, elapsed);
            black_box(decision.allows())
        })
    });
    let breaker = failsafe::Config::new().build();
    group.bench_function("failsafe/is_call_permitted", |b| {
        b.iter(|| black_box(black_box(&breaker).is_call_permitted()))
    });
    group.bench_function("failsafe/on_success", |b| {
        b.iter(|| black_box(&breaker).on_success())
    });
    group.bench_function("failsafe/permitted_and_on_success", |b| {
        b.iter(|| {
            let permitted = black_box(&breaker).is_call_permitted();
            breaker.on_success();
            black_box(permitted)
        })
    });
    group.finish();
    // The comparison is fair only if failsafe's breaker stayed closed and
    // counting throughout, as Fusebox's did.
    assert!(breaker.is_call_permitted(), "failsafe's breaker opened");
    let m = f.client.metrics();
    eprintln!(
        "outcomes recorded {} dropped (buffer full) {} sent {}",
        m.outcomes_recorded, m.outcomes_dropped, m.outcomes_sent
    );
}

criterion_group!(benches, gate);
criterion_main!(benches);
