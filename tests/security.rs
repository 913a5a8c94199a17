//! A cluster of real `fusebox` processes with TLS for clients and mutual
//! TLS between members (issue 14): it refuses clients in the clear or from
//! another CA, serves Raft only on its peer listener and only to members'
//! certificates, and still forms, forwards and changes membership.
//!
//! The forged-Raft reproductions of the security review are replayed here:
//! an ordinary client, even one holding a certificate of the cluster's CA,
//! can no longer send AppendEntries, Vote or InstallSnapshot.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_proto::net::Net;
use fusebox_proto::tls::{ClientTlsFiles, TlsConnector};
use fusebox_proto::v1::begin_response::Outcome;
use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::raft_client::RaftClient;
use fusebox_proto::v1::{snapshot_chunk, RaftMessage, SnapshotBegin, SnapshotChunk, StatusRequest};
use fusebox_server::raft::codec::Route;
use std::path::Path;
use std::time::Duration;
use support::ledger::begin_request;
use support::{client_tls, dev_certs, TestCluster};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

fn endpoint(addr: &str) -> Endpoint {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
}

fn channel(addr: &str, tls: Option<&TlsConnector>) -> Channel {
    Net::Tcp.channel_tls(endpoint(addr), tls)
}

/// A connector presenting `cert` (a file in `certs`) and trusting its CA.
fn presenting(certs: &Path, cert: Option<&str>) -> TlsConnector {
    TlsConnector::load(ClientTlsFiles {
        ca: certs.join("ca.pem"),
        cert: cert.map(|c| certs.join(format!("{c}.pem"))),
        key: cert.map(|c| certs.join(format!("{c}-key.pem"))),
        server_name: None,
    })
    .unwrap()
}

async fn status_via(channel: Channel) -> Result<u64, tonic::Status> {
    let reply = ClusterClient::new(channel)
        .status(StatusRequest::default())
        .await?;
    Ok(reply.into_inner().node_id)
}

/// A Raft message as node `from` would send it to node `to`.
fn raft_message(from: u64, to: u64) -> RaftMessage {
    let route = Route {
        cluster_id: "fusebox".into(),
        from,
        to,
    };
    RaftMessage {
        header: Some(route.header()),
        payload: Vec::new(),
    }
}

/// AppendEntries, Vote and InstallSnapshot through `channel`, claiming to
/// come from node `from`; the codes they were answered with.
async fn raft_calls(channel: Channel, from: u64, to: u64) -> Vec<(&'static str, Code)> {
    let mut raft = RaftClient::new(channel);
    let code = |r: Result<_, tonic::Status>| r.map_or_else(|s| s.code(), |_| Code::Ok);
    let append = code(raft.append_entries(raft_message(from, to)).await);
    let vote = code(raft.vote(raft_message(from, to)).await);
    let begin = SnapshotChunk {
        chunk: Some(snapshot_chunk::Chunk::Begin(SnapshotBegin {
            header: raft_message(from, to).header,
            total_bytes: 0,
            ..Default::default()
        })),
    };
    let install = code(raft.install_snapshot(tokio_stream::iter(vec![begin])).await);
    vec![
        ("AppendEntries", append),
        ("Vote", vote),
        ("InstallSnapshot", install),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_refuses_clients_in_the_clear_and_from_another_ca() {
    let cluster = TestCluster::start_tls(3);
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    let certs = cluster.certs.clone().expect("a TLS cluster");
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let addr = cluster.nodes[&follower].addr.clone();

    println!("phase: a client with the CA (and no certificate of its own) is served");
    let ca_only = presenting(&certs, None);
    assert_eq!(
        status_via(channel(&addr, Some(&ca_only))).await.unwrap(),
        follower
    );

    println!("phase: a write through a follower is forwarded to the leader over TLS");
    let mut ledger = cluster.ledger(follower).await;
    let answer = ledger
        .begin(begin_request("tls-key", "attempt-1"))
        .await
        .expect("begin through a follower")
        .into_inner();
    assert!(
        matches!(answer.outcome, Some(Outcome::Started(_))),
        "{answer:?}"
    );

    println!("phase: a client in the clear is refused");
    let plain = status_via(channel(&addr, None)).await;
    assert!(plain.is_err(), "plaintext client served: {plain:?}");

    println!("phase: the CLI speaks TLS when given the CA, and says what to try when not");
    let cli = |tls: &[&std::ffi::OsStr]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_fusebox"))
            .args(["cluster", "status", "--endpoints", &addr])
            .args(tls)
            .output()
            .expect("run fusebox")
    };
    let ca_file = certs.join("ca.pem");
    let served = cli(&["--tls-ca".as_ref(), ca_file.as_os_str()]);
    assert!(
        served.status.success(),
        "{}",
        String::from_utf8_lossy(&served.stderr)
    );
    let in_clear = cli(&[]);
    assert_eq!(in_clear.status.code(), Some(4));
    let err = String::from_utf8_lossy(&in_clear.stderr);
    assert!(err.contains("--tls-ca"), "{err}");

    println!("phase: a client trusting another CA refuses the node's certificate");
    let other = tempfile::tempdir().unwrap();
    dev_certs(other.path(), 1);
    let foreign = client_tls(other.path());
    let refused = status_via(channel(&addr, Some(&foreign))).await;
    assert!(
        refused.is_err(),
        "a foreign CA's client was served: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_traffic_needs_a_members_certificate_on_the_peer_listener() {
    let cluster = TestCluster::start_tls(3);
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    let certs = cluster.certs.clone().expect("a TLS cluster");
    let target = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let posing_as = [1, 2, 3]
        .into_iter()
        .find(|id| *id != target && *id != leader)
        .unwrap();
    let peer = cluster.nodes[&target].peer_addr.clone().unwrap();
    let api = cluster.nodes[&target].addr.clone();
    let before = cluster.status(leader).await.unwrap();

    println!("phase: a client certificate of the cluster's own CA is not a member's");
    let client = presenting(&certs, Some("client"));
    for (rpc, code) in raft_calls(channel(&peer, Some(&client)), leader, target).await {
        assert_eq!(
            code,
            Code::PermissionDenied,
            "{rpc} with a client certificate"
        );
    }

    println!("phase: a member's certificate cannot speak for another member");
    let member = presenting(&certs, Some(&format!("node-{posing_as}")));
    for (rpc, code) in raft_calls(channel(&peer, Some(&member)), leader, target).await {
        assert_eq!(
            code,
            Code::PermissionDenied,
            "{rpc} from node {posing_as} posing as {leader}"
        );
    }

    println!("phase: without a certificate, or in the clear, no handshake completes");
    // The connection fails before any RPC reaches the service; which code
    // the client reports depends on when the drop is noticed (UNAVAILABLE,
    // CANCELLED or UNKNOWN mid-handshake, INTERNAL for an h2 error), so the
    // test asserts the service never answered.
    let ca_only = presenting(&certs, None);
    for tls in [Some(&ca_only), None] {
        for (rpc, code) in raft_calls(channel(&peer, tls), leader, target).await {
            let answered = matches!(
                code,
                Code::Ok
                    | Code::PermissionDenied
                    | Code::InvalidArgument
                    | Code::FailedPrecondition
                    | Code::Unimplemented
                    | Code::ResourceExhausted
                    | Code::DataLoss
            );
            assert!(
                !answered,
                "{rpc} without a certificate ({tls:?}) answered {code:?}"
            );
        }
    }

    println!("phase: the client API does not serve Raft at all");
    for (rpc, code) in raft_calls(channel(&api, Some(&member)), leader, target).await {
        assert_eq!(code, Code::Unimplemented, "{rpc} on the API listener");
    }

    println!("phase: none of it disturbed the cluster");
    let after = cluster.status(leader).await.unwrap();
    assert_eq!(after.leader_id, Some(leader));
    assert_eq!(after.term, before.term, "a refused vote raised the term");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_grows_and_shrinks_over_mutual_tls() {
    let mut cluster = TestCluster::start_tls(3);
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    let voters = |ids: &[u64]| {
        ids.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
    };

    println!("phase: node 4 joins through its peer listener and becomes a voter");
    cluster.add_joiner(4);
    cluster.add_member(leader, 4).await.expect("add node 4");
    cluster
        .wait_voters(
            &[1, 2, 3, 4],
            &voters(&[1, 2, 3, 4]),
            Duration::from_secs(30),
        )
        .await;

    println!("phase: a write through the new member lands");
    let mut ledger = cluster.ledger(4).await;
    let answer = ledger
        .begin(begin_request("joined-key", "attempt-1"))
        .await
        .expect("begin through node 4")
        .into_inner();
    assert!(
        matches!(answer.outcome, Some(Outcome::Started(_))),
        "{answer:?}"
    );

    println!("phase: node 4 leaves again");
    cluster
        .remove_member(leader, 4)
        .await
        .expect("remove node 4");
    cluster
        .wait_voters(&[1, 2, 3], &voters(&[1, 2, 3]), Duration::from_secs(30))
        .await;
}

/// `fusebox serve` on an address beyond loopback without TLS exits with
/// the reason; with `--insecure` it serves, and warns in its log.
#[test]
fn serve_refuses_to_expose_a_plaintext_node_unless_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("0.0.0.0:{}", support::free_port());
    let serve = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_fusebox"));
        cmd.args(["serve", "--listen", &listen, "--data"])
            .arg(dir.path().join("data"))
            .args(extra)
            .env("RUST_LOG", "warn");
        cmd
    };
    let refused = serve(&[]).output().expect("run fusebox serve");
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("--insecure"),
        "{err}"
    );

    let log = dir.path().join("insecure.log");
    // The node logs to its standard output.
    let mut child = serve(&["--insecure"])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn fusebox serve --insecure");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let warned = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("--insecure: serving beyond loopback without TLS") {
            break true;
        }
        if std::time::Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let still_running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        warned && still_running,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
