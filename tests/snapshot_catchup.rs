//! A follower whose data directory is wiped rejoins a 3-node cluster and
//! catches up through an installed snapshot, because the leader's log no
//! longer holds the entries it lacks.
//!
//! The nodes snapshot every 50 entries and keep 10 behind a snapshot. While
//! one follower is down and wiped, enough ledger writes go in that the
//! leader purges its log past everything that follower had ever applied.
//! Restarted empty, the follower can only reach the leader's applied index
//! through a snapshot; the test checks that it does, that its status shows
//! the installed snapshot and a purged log, that every acknowledged key is
//! in its own applied state (read locally with Ledger.List) and that none
//! was started twice. Then plain log replication to it resumes.
//!
//! The follower rejoins in one of two ways:
//! - **in place**: restarted with its usual command line (`--peers`), still a
//!   voter the leader remembers as holding entries it no longer has;
//! - **removed and re-added**: removed from the membership while it is down,
//!   restarted with `--join` and added again under the same id, so it votes
//!   again only once it caught up (the change Raft itself considers safe for
//!   a node that lost its vote and log).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_server::node::Timing;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use support::ledger::{local_records, second_attempt_started, write_keys, FIRST_ATTEMPT};
use support::TestCluster;

/// Generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);
const SNAPSHOT_EVERY_ENTRIES: u64 = 50;
const LOG_KEPT_BEHIND_SNAPSHOT: u64 = 10;
/// Keys written while the follower is away. The server purges its log in
/// batches of 256 entries (`purge_batch_size`), so the first purge needs a
/// snapshot past entry 256 + LOG_KEPT_BEHIND_SNAPSHOT.
const AWAY_KEYS: usize = 300;

/// How the wiped follower comes back.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rejoin {
    /// Restarted with its original command line, still a member.
    InPlace,
    /// Removed while down, restarted with `--join`, added again.
    RemovedAndReAdded,
}

fn compacting_often() -> Timing {
    Timing {
        snapshot_every_entries: SNAPSHOT_EVERY_ENTRIES,
        log_kept_behind_snapshot: LOG_KEPT_BEHIND_SNAPSHOT,
        ..Timing::default()
    }
}

/// Asserts node `id` holds every key of `keys` in its own applied state,
/// begun once by its first attempt, and the same records as node `like`.
async fn assert_holds_locally(cluster: &TestCluster, id: u64, like: u64, keys: &[String]) {
    let mine = local_records(cluster, id).await.expect("list on the node");
    let theirs = local_records(cluster, like)
        .await
        .expect("list on the leader");
    for key in keys {
        let record = mine
            .get(key)
            .unwrap_or_else(|| panic!("node {id} lacks acknowledged key {key}"));
        assert_eq!(record.attempt_id, FIRST_ATTEMPT, "{key} on node {id}");
        assert_eq!(
            record.attempts, 1,
            "{key} on node {id} held by two attempts"
        );
    }
    assert_eq!(
        mine.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>(),
        "node {id} and node {like} hold different records"
    );
}

/// Brings the wiped `follower` back, the way `how` says.
async fn bring_back(cluster: &mut TestCluster, follower: u64, via: u64, how: Rejoin) {
    match how {
        Rejoin::InPlace => cluster.spawn(follower, false),
        Rejoin::RemovedAndReAdded => {
            cluster.spawn(follower, true);
            let added = cluster
                .add_member(via, follower)
                .await
                .unwrap_or_else(|e| panic!("adding node {follower} again: {e}"));
            let listed: BTreeSet<u64> = added.members.iter().map(|m| m.id).collect();
            assert_eq!(listed, BTreeSet::from([1, 2, 3]), "members after re-adding");
        }
    }
}

async fn wiped_follower_catches_up(how: Rejoin, secured: bool) {
    let began = Instant::now();
    eprintln!(
        "phase 1: form a 3-node cluster that snapshots every {SNAPSHOT_EVERY_ENTRIES} entries \
         (TLS and auth: {secured})"
    );
    let mut cluster = if secured {
        TestCluster::start_tls_with_timing(3, compacting_often())
    } else {
        TestCluster::start_with_timing(3, compacting_often())
    };
    let leader = cluster.wait_leader(&[1, 2, 3], WAIT).await;
    let mut acknowledged = write_keys(&cluster, &[1, 2, 3], "early", 20).await;
    assert_eq!(
        acknowledged.len(),
        20,
        "a healthy cluster acknowledges every write"
    );

    eprintln!("phase 2: a follower is killed and its data directory wiped ({how:?})");
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let survivors: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != follower).collect();
    cluster.wait_in_sync(&[1, 2, 3], WAIT).await;
    let had = cluster
        .status(follower)
        .await
        .expect("follower status")
        .applied_index;
    cluster.kill(follower);
    cluster.wipe(follower);
    if how == Rejoin::RemovedAndReAdded {
        cluster
            .remove_member(leader, follower)
            .await
            .unwrap_or_else(|e| panic!("removing node {follower}: {e}"));
        let voters = survivors.iter().copied().collect();
        cluster.wait_voters(&survivors, &voters, WAIT).await;
    }

    eprintln!("phase 3: writes go on until the leader purged its log past index {had}");
    let away = write_keys(&cluster, &survivors, "away", AWAY_KEYS).await;
    assert!(
        away.len() >= AWAY_KEYS - 5,
        "two of three nodes keep taking writes"
    );
    acknowledged.extend(away);
    let leader = cluster.wait_leader(&survivors, WAIT).await;
    let before = cluster
        .wait_status(leader, "log purged past the follower", WAIT, |s| {
            s.purged_index.is_some_and(|p| p > had)
        })
        .await;
    let purged = before.purged_index.unwrap();
    eprintln!(
        "leader {leader}: snapshot at {:?}, log purged up to {purged}",
        before.snapshot_index
    );

    eprintln!("phase 4: the follower comes back empty, as the same member, and catches up");
    bring_back(&mut cluster, follower, leader, how).await;
    let target = cluster
        .status(leader)
        .await
        .expect("leader status")
        .applied_index;
    cluster.wait_applied(follower, target, WAIT).await;
    for id in [1, 2, 3] {
        if let Err(why) = cluster.try_status(id).await {
            panic!("node {id} stopped answering status after the follower rejoined: {why}");
        }
    }
    let after = cluster.status(follower).await.expect("follower status");
    eprintln!(
        "follower {follower}: applied {}, snapshot at {:?}, purged up to {:?}",
        after.applied_index, after.snapshot_index, after.purged_index
    );
    // Entries 1..=purged exist nowhere but in snapshots: an empty node that
    // applied past them installed one.
    assert!(
        after.snapshot_index.is_some_and(|s| s >= purged),
        "follower has no snapshot covering the purged log: {after:?}"
    );
    assert!(
        after.purged_index.is_some_and(|p| p >= purged),
        "follower's log still starts before the leader's: {after:?}"
    );

    eprintln!("phase 5: every acknowledged key is in the follower's own state");
    assert_holds_locally(&cluster, follower, leader, &acknowledged).await;

    eprintln!("phase 6: log replication to it resumes; no key starts twice");
    acknowledged.extend(write_keys(&cluster, &[follower, leader], "after", 20).await);
    cluster
        .wait_voters(&[1, 2, 3], &BTreeSet::from([1, 2, 3]), WAIT)
        .await;
    cluster.wait_in_sync(&[1, 2, 3], WAIT).await;
    assert_holds_locally(&cluster, follower, leader, &acknowledged).await;
    for (i, key) in acknowledged.iter().enumerate() {
        let via = [1, 2, 3][i % 3];
        assert!(
            !second_attempt_started(&cluster, via, key).await,
            "key {key} answered started to a second attempt through node {via}"
        );
    }
    eprintln!("done in {:?}", began.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_follower_restarted_in_place_catches_up_through_a_snapshot() {
    wiped_follower_catches_up(Rejoin::InPlace, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_follower_removed_and_re_added_catches_up_through_a_snapshot() {
    wiped_follower_catches_up(Rejoin::RemovedAndReAdded, false).await;
}

/// The same over TLS with auth on: the snapshot streams over mutual TLS and
/// the harness acts as the admin its client certificate names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_tls_follower_removed_and_re_added_catches_up_through_a_snapshot() {
    wiped_follower_catches_up(Rejoin::RemovedAndReAdded, true).await;
}
