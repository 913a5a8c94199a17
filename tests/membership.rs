//! Membership under load: a 3-node cluster grows to 5 and shrinks back to 3
//! while a writer keeps beginning fresh ledger keys through varying nodes.
//!
//! Nodes 4 and 5 start with `--join` and are added with Cluster.AddMember;
//! then the leader itself (which hands leadership over first) and one more
//! original member are removed with Cluster.RemoveMember, so the two newcomers end up as a majority of the
//! final three. After every step each member's status must list exactly the
//! voters asked for. At the end every acknowledged key must be in every
//! remaining member's own applied state, begun once by its first attempt,
//! and a second attempt must never be answered `started`. Finally the
//! removed nodes and one remaining member are killed: writes must still
//! succeed, which they could not if the removed nodes still counted toward
//! the quorum (2 of 5 alive).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_proto::v1::{MemberRole, RemoveMemberResponse};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use support::ledger::{
    local_records, second_attempt_started, write_keys, Writer, WriterLog, FIRST_ATTEMPT,
};
use support::{voters_of, TestCluster};

/// Generous for a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(30);
/// Keys the writer must get acknowledged between two membership steps, to
/// show the cluster takes writes throughout.
const PROGRESS_KEYS: usize = 15;

fn set(ids: &[u64]) -> BTreeSet<u64> {
    ids.iter().copied().collect()
}

fn route(cluster: &TestCluster, ids: &[u64]) -> Vec<(u64, String)> {
    ids.iter()
        .map(|id| (*id, cluster.nodes[id].addr.clone()))
        .collect()
}

/// Adds `id` through `via` and checks the answer lists it as a voter.
async fn add(cluster: &TestCluster, via: u64, id: u64, voters: &[u64]) {
    let added = cluster
        .add_member(via, id)
        .await
        .unwrap_or_else(|e| panic!("adding node {id} through {via}: {e}"));
    let listed: BTreeSet<u64> = added.members.iter().map(|m| m.id).collect();
    assert_eq!(listed, set(voters), "members after adding {id}");
    cluster.wait_voters(voters, &set(voters), WAIT).await;
}

/// Cluster.RemoveMember of `id` through `via`, which must succeed at once.
async fn removal(cluster: &TestCluster, via: u64, id: u64) -> RemoveMemberResponse {
    cluster
        .remove_member(via, id)
        .await
        .unwrap_or_else(|e| panic!("removing node {id} through {via}: {e}"))
}

/// Removes `id` through `via` and checks every remaining member agrees.
async fn remove(cluster: &TestCluster, via: u64, id: u64, voters: &[u64]) {
    let removed = removal(cluster, via, id).await;
    assert!(
        removed.members.iter().all(|m| m.id != id),
        "node {id} still listed after its removal: {:?}",
        removed.members
    );
    cluster.wait_voters(voters, &set(voters), WAIT).await;
}

/// Removes the leader `id` through `via`: it must hand leadership over
/// first, so the answer comes from a new leader that lists itself as
/// leading. (A leader that removed itself answered from outside the
/// membership it listed, and no member was the leader.)
async fn remove_leader(cluster: &TestCluster, via: u64, id: u64, voters: &[u64]) {
    let removed = removal(cluster, via, id).await;
    let leading: Vec<u64> = removed
        .members
        .iter()
        .filter(|m| m.role == MemberRole::Leader as i32)
        .map(|m| m.id)
        .collect();
    assert!(
        leading.len() == 1 && leading[0] != id,
        "the leader {id} must hand over before its removal, got leaders {leading:?} in {:?}",
        removed.members
    );
    cluster.wait_voters(voters, &set(voters), WAIT).await;
}

/// Every acknowledged key is in node `id`'s own state, held by its first
/// attempt only.
async fn assert_holds_locally(cluster: &TestCluster, id: u64, keys: &[String]) {
    let records = local_records(cluster, id).await.expect("list on the node");
    for key in keys {
        let record = records
            .get(key)
            .unwrap_or_else(|| panic!("node {id} lacks acknowledged key {key}"));
        assert_eq!(record.attempt_id, FIRST_ATTEMPT, "{key} on node {id}");
        assert_eq!(
            record.attempts, 1,
            "{key} on node {id} held by two attempts"
        );
    }
}

fn report(log: &WriterLog) -> Vec<String> {
    let anomalies = log.anomalies();
    assert!(
        anomalies.is_empty(),
        "fresh keys answered wrongly: {anomalies:?}"
    );
    let acknowledged = log.acknowledged();
    eprintln!(
        "writer: {} keys tried, {} acknowledged",
        log.keys.len(),
        acknowledged.len()
    );
    acknowledged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_to_five_and_shrink_to_three_under_load() {
    let began = Instant::now();
    eprintln!("phase 1: form a 3-node cluster and start writing through every node");
    let mut cluster = TestCluster::start(3);
    let leader = cluster.wait_leader(&[1, 2, 3], WAIT).await;
    cluster
        .wait_voters(&[1, 2, 3], &set(&[1, 2, 3]), WAIT)
        .await;
    let writer = Writer::start("load", route(&cluster, &[1, 2, 3]));
    writer.wait_progress(PROGRESS_KEYS, WAIT).await;

    eprintln!("phase 2: grow to 5; nodes 4 and 5 join and are added through a follower");
    cluster.add_joiner(4);
    cluster.add_joiner(5);
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    add(&cluster, follower, 4, &[1, 2, 3, 4]).await;
    writer.route_through(route(&cluster, &[1, 2, 3, 4]));
    writer.wait_progress(PROGRESS_KEYS, WAIT).await;
    add(&cluster, leader, 5, &[1, 2, 3, 4, 5]).await;
    writer.route_through(route(&cluster, &[1, 2, 3, 4, 5]));
    writer.wait_progress(PROGRESS_KEYS, WAIT).await;

    eprintln!("phase 3: shrink to 3, removing the leader {leader} first");
    let mut remaining: Vec<u64> = (1..=5).filter(|id| *id != leader).collect();
    writer.route_through(route(&cluster, &remaining));
    remove_leader(&cluster, 4, leader, &remaining).await;
    writer.wait_progress(PROGRESS_KEYS, WAIT).await;
    let second = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader && remaining.contains(id))
        .unwrap();
    remaining.retain(|id| *id != second);
    writer.route_through(route(&cluster, &remaining));
    let via = remaining[0];
    remove(&cluster, via, second, &remaining).await;
    writer.wait_progress(PROGRESS_KEYS, WAIT).await;

    eprintln!("phase 4: stop writing; every acknowledged key is on every remaining member");
    let acknowledged = report(&writer.stop().await);
    cluster.wait_in_sync(&remaining, WAIT).await;
    for id in &remaining {
        assert_holds_locally(&cluster, *id, &acknowledged).await;
    }
    for (i, key) in acknowledged.iter().enumerate() {
        let via = remaining[i % remaining.len()];
        assert!(
            !second_attempt_started(&cluster, via, key).await,
            "key {key} answered started to a second attempt through node {via}"
        );
    }

    eprintln!("phase 5: removed nodes no longer count toward the quorum");
    cluster.kill(leader);
    cluster.kill(second);
    let down = remaining[0];
    cluster.kill(down);
    let alive: Vec<u64> = remaining.iter().copied().filter(|id| *id != down).collect();
    let new_leader = cluster.wait_leader(&alive, WAIT).await;
    let status = cluster.status(new_leader).await.expect("leader status");
    assert_eq!(
        voters_of(&status),
        set(&remaining),
        "membership after the kills"
    );
    let late = write_keys(&cluster, &alive, "two-of-three", 10).await;
    assert_eq!(late.len(), 10, "two of three voters keep taking writes");
    cluster.wait_in_sync(&alive, WAIT).await;
    for id in &alive {
        assert_holds_locally(&cluster, *id, &late).await;
    }
    eprintln!("done in {:?}", began.elapsed());
}
