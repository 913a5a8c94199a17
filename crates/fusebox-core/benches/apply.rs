//! What applying outcome reports costs the state machine, on every node,
//! for every entry: the shape `fusebox bench outcomes` sends (batches of 100
//! outcomes over 64 tools), one replica's report and sixteen coalesced into
//! one entry, under a policy and in a namespace that has none (the
//! built-in defaults). The figures are per report; divide by 100 for an
//! outcome.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fusebox_core::machine::{Answer, Command, OutcomeReport, Report, StateMachine};
use fusebox_core::name::{Namespace, ReplicaId, ServerName, ToolName};
use fusebox_core::outcome::OutcomeClass;
use fusebox_core::policy::{PolicyDocument, PolicyFormat};
use fusebox_core::time::Timestamp;

const OUTCOMES: usize = 100;
const TOOLS: usize = 64;

fn outcomes(seq: u64) -> Vec<OutcomeReport> {
    (0..OUTCOMES)
        .map(|i| {
            let n = (seq as usize * OUTCOMES + i) % TOOLS;
            OutcomeReport {
                server: ServerName::new(format!("server-{}", n % 8))
                    .unwrap_or_else(|_| unreachable!()),
                tool: ToolName::new(format!("tool-{n}")).unwrap_or_else(|_| unreachable!()),
                backend: None,
                // One in twenty fails, spread so no breaker trips.
                class: if i % 20 == 7 {
                    OutcomeClass::ServerError
                } else {
                    OutcomeClass::Success
                },
                duration_ms: 20 + (i as u64 % 50),
                server_generation: 0,
                tool_generation: 0,
            }
        })
        .collect()
}

fn report_in(namespace: &str, replica: u64, seq: u64) -> Report {
    Report {
        namespace: Namespace::new(namespace).unwrap_or_else(|_| unreachable!()),
        replica: ReplicaId::new(format!("replica-{replica}")).unwrap_or_else(|_| unreachable!()),
        batch_seq: seq,
        outcomes: outcomes(seq),
    }
}

/// A fleet's policy: defaults, a server override, two tool overrides.
const POLICY: &str = r#"
[defaults]
timeout_ms = 3000

[defaults.breaker]
consecutive_failures = 50

[servers.server-3]
timeout_ms = 10000

[servers.server-3.tools.tool-3]
effect = "idempotent_write"

[servers.server-5.tools.tool-13.breaker]
consecutive_failures = 5
"#;

fn apply(c: &mut Criterion) {
    let mut group = c.benchmark_group("apply");
    let mut sm = StateMachine::new();
    let document = PolicyDocument::parse(POLICY, PolicyFormat::Toml)
        .unwrap_or_else(|e| panic!("the bench's policy: {e}"));
    let applied = sm.apply(
        &Command::ApplyPolicy {
            namespace: Namespace::new("bench").unwrap_or_else(|_| unreachable!()),
            document: Box::new(document),
            actor: "bench".into(),
            reason: "bench".into(),
        },
        Timestamp::from_millis(1_000),
    );
    assert!(
        !matches!(applied.answer, Answer::Rejected(_)),
        "{:?}",
        applied.answer
    );
    let (mut seq, mut now) = (0u64, 1_000_000u64);
    group.throughput(Throughput::Elements(OUTCOMES as u64));
    group.bench_function("one report of 100 outcomes over 64 tools", |b| {
        b.iter_batched(
            || {
                seq += 1;
                let r = report_in("bench", 1, seq);
                Command::ReportOutcomes {
                    namespace: r.namespace,
                    replica: r.replica,
                    batch_seq: r.batch_seq,
                    outcomes: r.outcomes,
                }
            },
            |command| {
                now += 1;
                sm.apply(&command, Timestamp::from_millis(now))
            },
            BatchSize::SmallInput,
        );
    });
    group.throughput(Throughput::Elements(16 * OUTCOMES as u64));
    let batches = [
        ("16 reports of 100 outcomes in one entry", "bench"),
        (
            "16 reports of 100 outcomes in one entry, no policy",
            "defaults",
        ),
    ];
    for (name, namespace) in batches {
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    seq += 1;
                    Command::ReportBatch {
                        reports: (1..=16).map(|r| report_in(namespace, r, seq)).collect(),
                    }
                },
                |command| {
                    now += 1;
                    sm.apply(&command, Timestamp::from_millis(now))
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, apply);
criterion_main!(benches);
