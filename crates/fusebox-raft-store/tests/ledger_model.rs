#![allow(clippy::unwrap_used)]
//! The RocksDB ledger against the in-memory model: the same commands give
//! the same state (byte-identical snapshots), the same lookups and the same
//! listings, also across a crash, a reopen and openraft's replay of the log
//! after the last snapshot, and across a snapshot installed on another node.

mod support;

use fusebox_core::ledger::{
    BeginRequest, CompleteRequest, Completion, Decision, LedgerStore, ListFilter, ResolveRequest,
    Status,
};
use fusebox_core::machine::{Command, StateMachine};
use fusebox_core::policy::EffectClass;
use fusebox_core::{Namespace, Timestamp, ToolName};
use fusebox_raft_store::{open, Entry, StateStore};
use openraft::storage::RaftStateMachine;
use openraft::RaftSnapshotBuilder;
use support::{apply, digest, log_id, normal};
use tempfile::TempDir;

/// A small deterministic generator (no dependency, reproducible).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

const NAMESPACES: [&str; 2] = ["fleet-a", "fleet-b"];
/// Keys with a NUL and shared prefixes exercise the on-disk key encoding.
const KEYS: [&str; 7] = ["a", "ab", "a\0b", "b", "key-1", "key-10", "key-2"];
const TOOLS: [&str; 2] = ["charge", "refund"];

fn command(rng: &mut Lcg) -> Command {
    let namespace = Namespace::new(NAMESPACES[rng.next(2) as usize]).unwrap();
    let key = KEYS[rng.next(KEYS.len() as u64) as usize].to_owned();
    let attempt = format!("att-{}", rng.next(3));
    match rng.next(10) {
        0..=3 => Command::Begin {
            namespace,
            request: BeginRequest {
                key,
                fingerprint: format!("fp-{}", rng.next(2)),
                intent_id: format!("intent-{}", rng.next(3)),
                tool: ToolName::new(TOOLS[rng.next(2) as usize]).unwrap(),
                target: "acct-1".into(),
                effect: if rng.next(2) == 0 {
                    EffectClass::IdempotentWrite
                } else {
                    EffectClass::NonIdempotentWrite
                },
                attempt,
                lease_ms: 1 + rng.next(3_000),
            },
        },
        4..=6 => Command::Complete {
            namespace,
            request: CompleteRequest {
                key,
                attempt,
                completion: match rng.next(4) {
                    0 => Completion::Succeeded {
                        operation_id: format!("op-{}", rng.next(3)),
                        result: vec![1, 2, 3],
                    },
                    1 => Completion::FailedBeforeExecution {
                        reason: "refused".into(),
                    },
                    2 => Completion::Failed {
                        reason: "declined".into(),
                    },
                    _ => Completion::Ambiguous {
                        reason: "timeout".into(),
                    },
                },
            },
        },
        7 => Command::Resolve {
            namespace,
            request: ResolveRequest {
                key,
                decision: match rng.next(3) {
                    0 => Decision::NotDone,
                    1 => Decision::Abandoned,
                    _ => Decision::Done {
                        operation_id: "op-found".into(),
                    },
                },
                actor: "ops".into(),
                note: "checked the backend".into(),
            },
        },
        _ => Command::Tick,
    }
}

/// `count` entries from index `first`, a second of clock apart per 3
/// entries so leases lapse and retention ends within the run.
fn entries(rng: &mut Lcg, first: u64, count: u64) -> Vec<Entry> {
    (first..first + count)
        .map(|i| {
            let mut e = normal(1, i, command(rng));
            if let openraft::EntryPayload::Normal(r) = &mut e.payload {
                r.at_ms = 1_700_000_000_000 + i * 333;
            }
            e
        })
        .collect()
}

fn model_apply(model: &mut StateMachine, entries: &[Entry]) {
    for e in entries {
        if let openraft::EntryPayload::Normal(r) = &e.payload {
            model.apply(&r.command, r.at());
        }
    }
}

fn filters() -> Vec<ListFilter> {
    let page = |f: ListFilter| ListFilter { limit: 3, ..f };
    vec![
        page(ListFilter::default()),
        page(ListFilter {
            status: Some(Status::Ambiguous),
            ..ListFilter::default()
        }),
        page(ListFilter {
            status: Some(Status::Succeeded),
            ..ListFilter::default()
        }),
        page(ListFilter {
            intent_id: Some("intent-1".into()),
            ..ListFilter::default()
        }),
        page(ListFilter {
            tool: Some(ToolName::new("refund").unwrap()),
            ..ListFilter::default()
        }),
        page(ListFilter {
            operation_id: Some("op-1".into()),
            ..ListFilter::default()
        }),
    ]
}

/// Every page of every filter and every lookup agree with the model.
fn assert_reads_agree(store: &StateStore, model: &StateMachine) {
    store.with_state(|sm| {
        let now = model.now().max(Timestamp::from_millis(1_700_000_100_000));
        for ns in NAMESPACES.map(|n| Namespace::new(n).unwrap()) {
            assert_eq!(
                sm.ledger().len(&ns),
                model.ledger().len(&ns),
                "count in {ns}"
            );
            for key in KEYS {
                assert_eq!(
                    sm.ledger().lookup(&ns, key, now),
                    model.ledger().lookup(&ns, key, now),
                    "{ns}/{key:?}"
                );
            }
            for mut filter in filters() {
                loop {
                    let got = sm.ledger().list(&ns, &filter, now);
                    let want = model.ledger().list(&ns, &filter, now);
                    assert_eq!(got, want, "{ns} {filter:?}");
                    match want.next_after_key {
                        Some(after) => filter.after_key = Some(after),
                        None => break,
                    }
                }
            }
        }
    });
}

#[tokio::test]
async fn the_rocksdb_ledger_answers_like_the_model() {
    let dir = TempDir::new().unwrap();
    let (_log, mut store) = open(dir.path(), &support::me()).unwrap();
    let mut model = StateMachine::new();
    let mut rng = Lcg(7);
    let mut next = 1;
    let mut touched = 0;
    for _ in 0..60 {
        let batch = entries(&mut rng, next, 10);
        next += 10;
        model_apply(&mut model, &batch);
        apply(&mut store, batch).await.unwrap();
        assert_eq!(
            digest(&store),
            model.digest().unwrap(),
            "after entry {}",
            next - 1
        );
        touched = touched.max(model.ledger().total());
    }
    assert_reads_agree(&store, &model);
    assert!(touched >= 8, "the run reached only {touched} records");
}

#[tokio::test]
async fn a_crash_after_a_snapshot_replays_to_the_same_state() {
    let dir = TempDir::new().unwrap();
    let mut model = StateMachine::new();
    let mut rng = Lcg(11);
    let before = entries(&mut rng, 1, 200);
    let after = entries(&mut rng, 201, 200);
    model_apply(&mut model, &before);
    model_apply(&mut model, &after);
    {
        let (_log, mut store) = open(dir.path(), &support::me()).unwrap();
        apply(&mut store, before).await.unwrap();
        let built = store
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(built.meta.last_log_id, Some(log_id(1, 200)));
        apply(&mut store, after.clone()).await.unwrap();
        assert_eq!(digest(&store), model.digest().unwrap());
    }

    // The fleet comes back from the snapshot, the ledger from the disk as
    // of entry 400; openraft then replays 201..=400.
    let (_log, mut store) = open(dir.path(), &support::me()).unwrap();
    let (applied, _) = store.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 200)));
    apply(&mut store, after).await.unwrap();
    assert_eq!(digest(&store), model.digest().unwrap());
    assert_reads_agree(&store, &model);
}

#[tokio::test]
async fn a_snapshot_installs_the_ledger_on_another_node() {
    let (leader_dir, follower_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (_l, mut leader) = open(leader_dir.path(), &support::me()).unwrap();
    let (_f, mut follower) = open(follower_dir.path(), &support::me()).unwrap();
    let mut rng = Lcg(23);
    // The follower holds records the snapshot does not: all must go.
    apply(&mut follower, entries(&mut Lcg(99), 1, 50))
        .await
        .unwrap();
    let mut model = StateMachine::new();
    let batch = entries(&mut rng, 1, 300);
    model_apply(&mut model, &batch);
    apply(&mut leader, batch).await.unwrap();
    let snapshot = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();

    follower
        .install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    assert_eq!(digest(&follower), model.digest().unwrap());
    assert_reads_agree(&follower, &model);

    // It keeps applying from there like the leader, and survives a reopen.
    let more = entries(&mut rng, 301, 100);
    model_apply(&mut model, &more);
    apply(&mut follower, more).await.unwrap();
    assert_eq!(digest(&follower), model.digest().unwrap());
    drop((_f, follower));
    let (_f, follower) = open(follower_dir.path(), &support::me()).unwrap();
    assert_reads_agree(&follower, &model);
}

/// A namespace deleted while empty and then used again: replayed after a
/// restart against the ledger on disk (which holds the later record), the
/// deletion would be refused and this node's fleet would keep the old
/// namespace. The store saves the fleet with the deletion instead, and a
/// restart resumes after it.
#[tokio::test]
async fn a_restart_resumes_after_a_namespace_deletion_instead_of_deciding_it_again() {
    let dir = TempDir::new().unwrap();
    let batch = vec![
        normal(1, 1, support::kill_switch(false)),
        normal(
            1,
            2,
            Command::DeleteNamespace {
                namespace: Namespace::new("fleet-a").unwrap(),
                actor: "ops".into(),
                reason: "a test run's leftovers".into(),
            },
        ),
        normal(1, 3, support::begin("after-the-deletion")),
    ];
    let mut model = StateMachine::new();
    model_apply(&mut model, &batch);
    {
        let (_log, mut store) = open(dir.path(), &support::me()).unwrap();
        apply(&mut store, batch.clone()).await.unwrap();
        assert_eq!(digest(&store), model.digest().unwrap());
    }
    // As openraft does on start: the committed entries after the applied
    // one, again.
    let (_log, mut store) = open(dir.path(), &support::me()).unwrap();
    let (applied, _) = store.applied_state().await.unwrap();
    let resumed = applied.map_or(0, |id| usize::try_from(id.index).unwrap());
    apply(&mut store, batch[resumed..].to_vec()).await.unwrap();
    assert_eq!(
        digest(&store),
        model.digest().unwrap(),
        "the fleet diverged"
    );
    assert_eq!(resumed, 2, "resumes after the deletion");
    assert_reads_agree(&store, &model);
}

/// Between snapshots the fleet is saved every few thousand entries, so a
/// restart replays only the entries after the last save.
#[tokio::test]
async fn a_restart_replays_only_the_entries_after_the_last_saved_fleet() {
    let dir = TempDir::new().unwrap();
    let mut rng = Lcg(23);
    let all = entries(&mut rng, 1, 9_000);
    let mut model = StateMachine::new();
    model_apply(&mut model, &all);
    {
        let (_log, mut store) = open(dir.path(), &support::me()).unwrap();
        apply(&mut store, all.clone()).await.unwrap();
    }
    let (_log, mut store) = open(dir.path(), &support::me()).unwrap();
    let (applied, _) = store.applied_state().await.unwrap();
    let resumed = applied.expect("a saved fleet").index;
    assert!(
        (8_192..9_000).contains(&resumed),
        "resumed after entry {resumed}"
    );
    let rest = usize::try_from(resumed).unwrap();
    apply(&mut store, all[rest..].to_vec()).await.unwrap();
    assert_eq!(digest(&store), model.digest().unwrap());
    assert_reads_agree(&store, &model);
}
