//! A 3-node cluster of real `fusebox` processes: it forms, takes ledger
//! writes through any node, survives `kill -9` of its leader without losing
//! an acknowledged write, and the killed node catches up when it returns.
//! No key ever answers `started` to two attempts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_proto::v1::begin_response::Outcome;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::{
    LookupRequest, Outcome as Reported, OutcomeClass, ReportOutcomesRequest,
    ReportOutcomesResponse, TransferLeaderRequest, WatchRequest,
};
use std::time::Duration;
use support::ledger::begin_request;
use support::TestCluster;

const NS: &str = "agents";

/// Begins `key` through node `via`, retrying the same attempt while the
/// cluster elects; returns whether the answer was `started`.
async fn begin_acknowledged(cluster: &TestCluster, via: u64, key: &str) -> bool {
    for _ in 0..50 {
        let mut client = cluster.ledger(via).await;
        let call = client.begin(begin_request(key, "attempt-1"));
        if let Ok(Ok(reply)) = tokio::time::timeout(Duration::from_secs(5), call).await {
            return matches!(reply.into_inner().outcome, Some(Outcome::Started(_)));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

async fn write_keys(cluster: &TestCluster, nodes: &[u64], prefix: &str, n: usize) -> Vec<String> {
    let mut acknowledged = Vec::new();
    for i in 0..n {
        let key = format!("{prefix}-{i}");
        let via = nodes[i % nodes.len()];
        if begin_acknowledged(cluster, via, &key).await {
            acknowledged.push(key);
        }
    }
    acknowledged
}

async fn assert_all_present_and_never_restarted(cluster: &TestCluster, via: u64, keys: &[String]) {
    let mut client = cluster.ledger(via).await;
    for key in keys {
        let lookup = LookupRequest {
            namespace: NS.into(),
            key: key.clone(),
            ..Default::default()
        };
        let record = client
            .lookup(lookup)
            .await
            .expect("lookup")
            .into_inner()
            .record;
        assert!(record.is_some(), "acknowledged key {key} lost");
        let again = client
            .begin(begin_request(key, "attempt-2"))
            .await
            .expect("begin")
            .into_inner();
        assert!(
            !matches!(again.outcome, Some(Outcome::Started(_))),
            "key {key} answered started to a second attempt"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_survive_the_leader_being_killed() {
    survive_the_leader_being_killed(TestCluster::start(3)).await;
}

/// The same with TLS for clients and mutual TLS between members, each on a
/// peer listener of its own: forwarding, replication, election and
/// catch-up all go through the certificates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_tls_nodes_survive_the_leader_being_killed() {
    survive_the_leader_being_killed(TestCluster::start_tls(3)).await;
}

async fn survive_the_leader_being_killed(mut cluster: TestCluster) {
    // Phase 1: form a cluster of three processes.
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;

    // Phase 2: ledger writes through every node (followers forward).
    let mut acknowledged = write_keys(&cluster, &[1, 2, 3], "before", 30).await;
    assert_eq!(
        acknowledged.len(),
        30,
        "every write through a healthy cluster is acknowledged"
    );

    // Phase 3: kill -9 the leader; the survivors elect a new one.
    cluster.kill(leader);
    let survivors: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    let new_leader = cluster
        .wait_leader(&survivors, Duration::from_secs(30))
        .await;
    assert_ne!(new_leader, leader);

    // Phase 4: writes continue through the survivors.
    acknowledged.extend(write_keys(&cluster, &survivors, "during", 20).await);
    assert!(
        acknowledged.len() >= 45,
        "writes continue without the old leader"
    );

    // Phase 5: the killed node returns and catches up.
    cluster.spawn(leader, false);
    let status = cluster.status(new_leader).await.expect("leader status");
    cluster
        .wait_applied(leader, status.applied_index, Duration::from_secs(30))
        .await;

    // Phase 6: nothing acknowledged is lost, on any node; nothing restarted.
    for id in [1, 2, 3] {
        assert_all_present_and_never_restarted(&cluster, id, &acknowledged).await;
    }
}

/// `fusebox cluster transfer-leader`, sent to a follower, hands leadership
/// to the voter asked for; every node then agrees, and writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_to_the_voter_asked_for() {
    let cluster = TestCluster::start(3);
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    let (via, to) = (followers[0], followers[1]);

    println!("phase: ask node {via} to hand leadership from {leader} to {to}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args([
            "cluster",
            "transfer-leader",
            "--to",
            &to.to_string(),
            "--json",
        ])
        .args(["--endpoints", &cluster.nodes[&via].addr])
        .output()
        .expect("run fusebox");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(answer["leader_id"], to, "{answer}");

    println!("phase: every node agrees, and a write through the old leader lands");
    let agreed = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    assert_eq!(agreed, to);
    assert!(begin_acknowledged(&cluster, leader, "after-transfer").await);

    println!("phase: a node that is not a voter is refused");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(["cluster", "transfer-leader", "--to", "9"])
        .args(["--endpoints", &cluster.nodes[&via].addr])
        .output()
        .expect("run fusebox");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a voter"), "{err}");
}

/// A node cut off from its leader, though still a member, stops vouching
/// for its state (issue 18): its watch streams end with UNAVAILABLE and it
/// refuses new ones, so replicas move to a node that is in touch instead of
/// trusting heartbeats over a frozen view. Once it hears from a leader
/// again, it serves watches again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_its_leader_stops_vouching_for_its_watches() {
    let cluster = TestCluster::start(3);
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    let cut_off = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != cut_off).collect();
    let watch = || async {
        let request = WatchRequest {
            namespace: NS.into(),
            ..Default::default()
        };
        BreakersClient::new(cluster.channel(cut_off).await)
            .watch(request)
            .await
    };

    println!("phase: node {cut_off} serves a watch while in touch");
    let mut stream = watch().await.expect("watch").into_inner();
    let first = stream.message().await.expect("an event");
    assert!(first.is_some());

    println!("phase: the other nodes freeze; node {cut_off} hears from no leader");
    for id in &others {
        cluster.pause(*id);
    }
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    })
    .await
    .expect("the stream ends within 30 s");
    let status = ended.expect("the stream ends with a status");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("heard from a leader"),
        "{status:?}"
    );
    let refused = watch().await.expect_err("a new watch is refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    println!("phase: the others return; node {cut_off} serves watches again");
    for id in &others {
        cluster.resume(*id);
    }
    let mut served = false;
    for _ in 0..100 {
        if watch().await.is_ok() {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(served, "node {cut_off} never served a watch again");
}

/// A report batch resent after a lost answer is not counted twice (issue
/// 18): the replica's last counted batch number is replicated state, so the
/// resend is recognised through a forwarding follower and by a new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_report_batch_is_counted_once_through_any_node_and_leader() {
    let cluster = TestCluster::start(3);
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    let batch = |batch_seq: u64| ReportOutcomesRequest {
        namespace: NS.into(),
        replica_id: "replica-1".into(),
        batch_seq,
        outcomes: (0..3)
            .map(|_| Reported {
                server: "billing".into(),
                tool: "charge".into(),
                // Successes: they never trip the breaker, so nothing is
                // fenced off as stale and the counts below are exact.
                class: OutcomeClass::Success as i32,
                duration_ms: 100,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let report = |via: u64, batch_seq: u64| {
        let cluster = &cluster;
        async move {
            let mut client = BreakersClient::new(cluster.channel(via).await);
            let mut last = None;
            for _ in 0..50 {
                match client.report_outcomes(batch(batch_seq)).await {
                    Ok(r) => return r.into_inner(),
                    Err(e) => last = Some(e),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            panic!("report through node {via} never answered: {last:?}");
        }
    };
    let counted = |r: &ReportOutcomesResponse| (r.accepted, r.ignored);

    println!("phase: batch 7 through the leader counts");
    assert_eq!(counted(&report(leader, 7).await), (3, 0));
    println!("phase: batch 7 again through a follower is a resend");
    assert_eq!(counted(&report(followers[0], 7).await), (0, 3));

    println!("phase: leadership moves; the new leader knows batch 7 too");
    let to = followers[1];
    let mut admin = ClusterClient::new(cluster.channel(followers[0]).await);
    admin
        .transfer_leader(TransferLeaderRequest {
            to,
            ..Default::default()
        })
        .await
        .expect("transfer leadership");
    assert_eq!(
        cluster
            .wait_leader(&[1, 2, 3], Duration::from_secs(30))
            .await,
        to
    );
    assert_eq!(counted(&report(to, 7).await), (0, 3));
    assert_eq!(
        counted(&report(leader, 6).await),
        (0, 3),
        "an older batch is a resend too"
    );
    println!("phase: the next batch counts");
    assert_eq!(counted(&report(leader, 8).await), (3, 0));
}
