//! A cluster of real `fusebox` processes with TLS for clients and mutual
//! TLS between members (issue 14): it refuses clients in the clear or from
//! another CA, serves Raft only on its peer listener and only to members'
//! certificates, and still forms, forwards and changes membership.
//!
//! The forged-Raft reproductions of the security review are replayed here:
//! an ordinary client, even one holding a certificate of the cluster's CA,
//! can no longer send AppendEntries, Vote or InstallSnapshot. So are the
//! other two: a tenant's token cannot list, complete, resolve or watch
//! another tenant's namespace, and nothing short of an admin can change the
//! membership. The harness's client certificate names the admin
//! `--init-auth` creates; tenants call with bearer tokens it issues.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_proto::net::Net;
use fusebox_proto::tls::{ClientTlsFiles, TlsConnector};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::auth_client::AuthClient;
use fusebox_proto::v1::begin_response::Outcome;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::policy_client::PolicyClient;
use fusebox_proto::v1::raft_client::RaftClient;
use fusebox_proto::v1::{snapshot_chunk, RaftMessage, SnapshotBegin, SnapshotChunk, StatusRequest};
use fusebox_server::raft::codec::Route;
use std::path::Path;
use std::time::Duration;
use support::ledger::begin_request;
use support::{client_tls, dev_certs, TestCluster};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;
use tonic::Request;

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

/// AppendEntries, StreamAppend, Vote and InstallSnapshot through
/// `channel`, claiming to come from node `from`; the codes they were
/// answered with (a stream's is its first answer's).
async fn raft_calls(channel: Channel, from: u64, to: u64) -> Vec<(&'static str, Code)> {
    let mut raft = RaftClient::new(channel);
    let code = |r: Result<_, tonic::Status>| r.map_or_else(|s| s.code(), |_| Code::Ok);
    let append = code(raft.append_entries(raft_message(from, to)).await);
    let streamed = match raft
        .stream_append(tokio_stream::iter(vec![raft_message(from, to)]))
        .await
    {
        Ok(answers) => match answers.into_inner().message().await {
            Ok(_) => Code::Ok,
            Err(refused) => refused.code(),
        },
        Err(refused) => refused.code(),
    };
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
        ("StreamAppend", streamed),
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

    println!("phase: a client with the CA and no certificate completes the handshake, and is asked who it is");
    let ca_only = presenting(&certs, None);
    let anonymous = status_via(channel(&addr, Some(&ca_only)))
        .await
        .unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");

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
    let token = cluster.admin_token.clone().expect("an auth cluster");
    let served = cli(&[
        "--tls-ca".as_ref(),
        ca_file.as_os_str(),
        "--token-file".as_ref(),
        token.as_os_str(),
    ]);
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

/// `message` carrying `token`.
fn as_token<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    let value = format!("Bearer {token}").parse().unwrap();
    request.metadata_mut().insert("authorization", value);
    request
}

/// A token for `name`, issued through node `via` by the harness's admin
/// certificate.
async fn issue(
    cluster: &TestCluster,
    via: u64,
    name: &str,
    role: &str,
    ns: &[&str],
) -> (String, String) {
    let request = pb::IssueTokenRequest {
        name: name.into(),
        role: role.into(),
        namespaces: ns.iter().map(|n| (*n).to_owned()).collect(),
        ..Default::default()
    };
    let reply = AuthClient::new(cluster.channel(via).await)
        .issue_token(request)
        .await
        .expect("the admin issues a token")
        .into_inner();
    (reply.token, reply.token_id)
}

fn code_of<T>(answer: Result<T, tonic::Status>) -> Code {
    answer.map_or_else(|s| s.code(), |_| Code::Ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_never_reads_or_changes_another_tenants_namespace() {
    let cluster = TestCluster::start_tls(3);
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    let (tenant_a, _) = issue(&cluster, follower, "tenant-a", "agent", &["tenant-a"]).await;
    let (tenant_b, _) = issue(&cluster, follower, "tenant-b", "agent", &["tenant-b"]).await;
    let (ops_b, _) = issue(&cluster, leader, "ops-b", "operator", &["tenant-b"]).await;
    let channel = cluster.channel(follower).await;
    let mut ledger = LedgerClient::new(channel.clone());

    println!("phase: tenant A begins a write in its namespace (through a follower)");
    let mut begin = begin_request("a-key", "a-attempt");
    begin.namespace = "tenant-a".into();
    let started = ledger
        .begin(as_token(begin, &tenant_a))
        .await
        .unwrap()
        .into_inner();
    assert!(
        matches!(started.outcome, Some(Outcome::Started(_))),
        "{started:?}"
    );

    println!("phase: tenant B cannot list A's keys, look one up, complete it or watch A");
    let list = pb::ListRecordsRequest {
        namespace: "tenant-a".into(),
        ..Default::default()
    };
    assert_eq!(
        code_of(ledger.list(as_token(list, &tenant_b)).await),
        Code::PermissionDenied
    );
    let lookup = pb::LookupRequest {
        namespace: "tenant-a".into(),
        key: "a-key".into(),
        ..Default::default()
    };
    assert_eq!(
        code_of(ledger.lookup(as_token(lookup.clone(), &tenant_b)).await),
        Code::PermissionDenied
    );
    let forged = pb::CompleteRequest {
        namespace: "tenant-a".into(),
        key: "a-key".into(),
        attempt_id: "a-attempt".into(),
        outcome: Some(pb::complete_request::Outcome::Succeeded(
            pb::CompleteSucceeded {
                operation_id: "forged".into(),
                result: b"forged".to_vec(),
            },
        )),
        ..Default::default()
    };
    assert_eq!(
        code_of(ledger.complete(as_token(forged, &tenant_b)).await),
        Code::PermissionDenied
    );
    let watch = pb::WatchRequest {
        namespace: "tenant-a".into(),
        ..Default::default()
    };
    let mut breakers = BreakersClient::new(channel.clone());
    assert_eq!(
        code_of(breakers.watch(as_token(watch, &tenant_b)).await),
        Code::PermissionDenied
    );

    println!(
        "phase: B's operator cannot resolve A's record, force A's breakers or block A's writes"
    );
    let resolve = pb::ResolveRequest {
        namespace: "tenant-a".into(),
        key: "a-key".into(),
        decision: pb::ResolutionDecision::NotDone as i32,
        note: "not done".into(),
        ..Default::default()
    };
    assert_eq!(
        code_of(ledger.resolve(as_token(resolve, &ops_b)).await),
        Code::PermissionDenied
    );
    let force = pb::ForceOpenRequest {
        namespace: "tenant-a".into(),
        key: Some(pb::BreakerKey {
            server: "deployments".into(),
            ..Default::default()
        }),
        reason: "takeover".into(),
        ..Default::default()
    };
    assert_eq!(
        code_of(breakers.force_open(as_token(force, &ops_b)).await),
        Code::PermissionDenied
    );
    let mut policy = PolicyClient::new(channel.clone());
    let block = |actor: &str| pb::SetKillSwitchRequest {
        namespace: "tenant-a".into(),
        writes_blocked: true,
        reason: "incident".into(),
        actor: actor.into(),
        ..Default::default()
    };
    assert_eq!(
        code_of(
            policy
                .set_kill_switch(as_token(block("ops-b"), &ops_b))
                .await
        ),
        Code::PermissionDenied
    );

    println!("phase: A's record is untouched, and A still completes it");
    let record = ledger
        .lookup(as_token(lookup, &tenant_a))
        .await
        .unwrap()
        .into_inner()
        .record
        .unwrap();
    assert_eq!(record.status(), pb::LedgerStatus::InProgress);

    println!(
        "phase: an admin's change is audited under its certificate's name, whatever it claims"
    );
    let thrown = policy
        .set_kill_switch(Request::new(block("mallory")))
        .await
        .unwrap()
        .into_inner()
        .kill_switch
        .unwrap();
    assert_eq!(thrown.actor, "admin");

    println!("phase: cluster status names only the namespaces a caller holds");
    let status = |token: String| {
        let channel = channel.clone();
        async move {
            let request = StatusRequest {
                include_kill_switches: true,
                ..Default::default()
            };
            ClusterClient::new(channel)
                .status(as_token(request, &token))
                .await
                .unwrap()
                .into_inner()
                .kill_switches
                .into_iter()
                .map(|k| k.namespace)
                .collect::<Vec<_>>()
        }
    };
    // The follower may not have applied the switch yet.
    let seen = support::wait_for(
        "the kill switch on the follower",
        Duration::from_secs(10),
        || {
            let status = status(tenant_a.clone());
            async move { Some(status.await).filter(|s| !s.is_empty()) }
        },
    )
    .await;
    assert_eq!(seen, ["tenant-a"]);
    assert!(status(tenant_b.clone()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_changes_membership_or_issues_tokens() {
    let cluster = TestCluster::start_tls(3);
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    let (operator, _) = issue(&cluster, leader, "ops-all", "operator", &["*"]).await;
    let before = cluster.status(leader).await.unwrap();
    let mut admin_rpcs = ClusterClient::new(cluster.channel(leader).await);

    println!("phase: an operator of every namespace cannot add a fake member, remove real ones or move leadership");
    let fake = pb::AddMemberRequest {
        id: 9,
        address: "127.0.0.1:9".into(),
        ..Default::default()
    };
    assert_eq!(
        code_of(admin_rpcs.add_member(as_token(fake, &operator)).await),
        Code::PermissionDenied
    );
    for id in [1, 2, 3] {
        let remove = pb::RemoveMemberRequest {
            id,
            ..Default::default()
        };
        assert_eq!(
            code_of(admin_rpcs.remove_member(as_token(remove, &operator)).await),
            Code::PermissionDenied
        );
    }
    let transfer = pb::TransferLeaderRequest {
        to: [1, 2, 3].into_iter().find(|id| *id != leader).unwrap(),
        ..Default::default()
    };
    assert_eq!(
        code_of(
            admin_rpcs
                .transfer_leader(as_token(transfer, &operator))
                .await
        ),
        Code::PermissionDenied
    );

    println!("phase: nor mint itself an admin token");
    let mut auth = AuthClient::new(cluster.channel(leader).await);
    let escalate = pb::IssueTokenRequest {
        name: "ops-all".into(),
        role: "admin".into(),
        namespaces: vec!["*".into()],
        ..Default::default()
    };
    assert_eq!(
        code_of(auth.issue_token(as_token(escalate, &operator)).await),
        Code::PermissionDenied
    );

    println!(
        "phase: a client claiming a forwarded identity without a member's certificate is refused"
    );
    let certs = cluster.certs.clone().unwrap();
    let ca_only = presenting(&certs, None);
    let mut claimed = Request::new(StatusRequest::default());
    claimed
        .metadata_mut()
        .insert("x-fusebox-caller", "admin".parse().unwrap());
    let addr = cluster.nodes[&leader].addr.clone();
    let refused = ClusterClient::new(channel(&addr, Some(&ca_only)))
        .status(claimed)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");

    println!("phase: the membership is as it was");
    let after = cluster.status(leader).await.unwrap();
    assert_eq!(support::members_of(&after), support::members_of(&before));
    assert_eq!(after.leader_id, Some(leader));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_refused_on_every_node_within_a_second() {
    let cluster = TestCluster::start_tls(3);
    let leader = cluster
        .wait_leader(&[1, 2, 3], Duration::from_secs(30))
        .await;
    let (token, token_id) = issue(&cluster, leader, "agent-r", "agent", &["agents"]).await;
    let whoami = |id: u64, token: String| {
        let cluster = &cluster;
        async move {
            AuthClient::new(cluster.channel(id).await)
                .who_am_i(as_token(pb::WhoAmIRequest::default(), &token))
                .await
        }
    };
    for id in [1, 2, 3] {
        support::wait_for("the token on every node", Duration::from_secs(10), || {
            let answer = whoami(id, token.clone());
            async move { answer.await.ok() }
        })
        .await;
    }

    println!("phase: revoked through a follower, refused everywhere within a second");
    let via = [1, 2, 3].into_iter().find(|id| *id != leader).unwrap();
    AuthClient::new(cluster.channel(via).await)
        .revoke_token(pb::RevokeTokenRequest {
            token_id,
            ..Default::default()
        })
        .await
        .expect("revoke");
    let revoked_at = std::time::Instant::now();
    for id in [1, 2, 3] {
        loop {
            match whoami(id, token.clone()).await {
                Err(status) if status.code() == Code::Unauthenticated => break,
                answer => {
                    let waited = revoked_at.elapsed();
                    assert!(
                        waited < Duration::from_secs(1),
                        "node {id} still accepts the token {waited:?} after revocation: {answer:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    println!(
        "refused on all three nodes within {:?}",
        revoked_at.elapsed()
    );
}
