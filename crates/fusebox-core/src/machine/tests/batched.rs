//! A report of many outcomes counts exactly as its outcomes would, sent one
//! by one: the SDK batches them and the leader coalesces batches, and
//! neither may change what a breaker or a latency window ends up holding.

use crate::machine::*;
use crate::name::{BackendName, Namespace, ReplicaId, ServerName, ToolName};
use crate::outcome::OutcomeClass;
use crate::time::Timestamp;

const POLICY: &str = r#"
[servers.tax.breaker]
consecutive_failures = 5
[servers.tax.tools.lookup]
scope = "tool_and_backend"
[servers.tax.tools.lookup.breaker]
consecutive_failures = 3
[servers.pay.breaker]
consecutive_failures = 4
"#;

/// A machine with `POLICY` in namespace `fleet`.
fn machine(at: Timestamp) -> StateMachine {
    let mut sm = StateMachine::new();
    super::apply_policy(&mut sm, "fleet", POLICY, at);
    sm
}

/// Outcomes over two servers, three tools (one scoped by backend) and
/// every class, at generations 0 and 1, from a fixed pseudo-random walk.
fn mixed_outcomes(n: usize) -> Vec<OutcomeReport> {
    let calls = [
        ("tax", "lookup", Some("eu")),
        ("tax", "lookup", Some("us")),
        ("tax", "lookup", None),
        ("tax", "file", None),
        ("pay", "charge", None),
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |m: usize| {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (x >> 33) as usize % m
    };
    (0..n)
        .map(|_| {
            let (server, tool, backend) = calls[next(calls.len())];
            // Failures outweigh the rest, so breakers trip partway through.
            let class = match next(3) {
                0 => OutcomeClass::ALL[next(OutcomeClass::ALL.len())],
                _ => OutcomeClass::ServerError,
            };
            OutcomeReport {
                server: ServerName::new(server).unwrap(),
                tool: ToolName::new(tool).unwrap(),
                backend: backend.map(|b| BackendName::new(b).unwrap()),
                class,
                duration_ms: 1 + next(900) as u64,
                server_generation: (next(4) == 0) as u64,
                tool_generation: (next(4) == 0) as u64,
            }
        })
        .collect()
}

fn report(seq: u64, outcomes: Vec<OutcomeReport>) -> Command {
    Command::ReportOutcomes {
        namespace: Namespace::new("fleet").unwrap(),
        replica: ReplicaId::new("r1").unwrap(),
        batch_seq: seq,
        outcomes,
    }
}

/// Sums what each answer counted.
fn tally(sm: &mut StateMachine, commands: &[Command], at: Timestamp) -> [u32; 4] {
    let mut sum = [0; 4];
    for command in commands {
        let Answer::Reported(s) = sm.apply(command, at).answer else {
            panic!("a report is answered with its summary");
        };
        for (total, n) in sum
            .iter_mut()
            .zip([s.counted, s.stale, s.ignored, s.dropped_limit])
        {
            *total += n;
        }
    }
    sum
}

#[test]
fn a_report_counts_as_its_outcomes_would_one_by_one() {
    let at = Timestamp::from_millis(10_000);
    let outcomes = mixed_outcomes(400);
    let mut whole = machine(at);
    let mut each = machine(at);
    let whole_sum = tally(&mut whole, &[report(1, outcomes.clone())], at);
    let singles: Vec<Command> = (1..)
        .zip(&outcomes)
        .map(|(seq, o)| report(seq, vec![o.clone()]))
        .collect();
    let each_sum = tally(&mut each, &singles, at);
    assert_eq!(whole_sum, each_sum, "[counted, stale, ignored, dropped]");
    assert_eq!(whole_sum.iter().sum::<u32>(), 800, "two updates an outcome");
    assert!(whole_sum[0] > 0 && whole_sum[1] > 0, "{whole_sum:?}");
    // Breakers tripped partway (their generation grew), and end alike.
    let tripped = whole
        .fleet
        .breakers
        .iter()
        .filter(|(_, b)| b.generation() > 0);
    assert!(tripped.count() >= 2);
    assert_eq!(whole.fleet.breakers, each.fleet.breakers);
    assert_eq!(whole.fleet.breaker_deadlines, each.fleet.breaker_deadlines);
    assert_eq!(whole.fleet.tools, each.fleet.tools);
}
