//! The SDK against a node that requires auth: with an agent token for its
//! namespace a replica watches and writes; with a token for another
//! namespace, or none, it is refused and says so instead of acting on an
//! empty view.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use fusebox_client::{Journey, ToolRef, WriteRequest, WriteSuccess};
use fusebox_proto::v1::auth_client::AuthClient;
use fusebox_proto::v1::policy_client::PolicyClient;
use fusebox_proto::v1::{ApplyPolicyRequest, IssueTokenRequest, PolicyFormat, WhoAmIRequest};
use fusebox_server::node::{self, NodeConfig, RunningNode};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::{channel_to, connected, test_config, NS};
use tonic::Request;

const POLICY: &str = r#"
[servers.jobs.tools.create_ticket]
effect = "idempotent_write"
timeout_ms = 2000
"#;

fn bearer<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    let value = format!("Bearer {token}").parse().unwrap();
    request.metadata_mut().insert("authorization", value);
    request
}

struct Secured {
    node: RunningNode,
    addr: String,
    admin: String,
    _dir: tempfile::TempDir,
}

async fn secured_node() -> Secured {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", support::free_port());
    let mut config = NodeConfig::single_node();
    config.listen = addr.parse::<SocketAddr>().unwrap();
    config.peers = [(1, addr.clone())].into();
    config.http = None;
    config.data_dir = dir.path().join("data");
    config.timing = support::fast_timing();
    config.init_auth = Some(dir.path().join("admin.token"));
    let node = node::start(config).await.unwrap();
    let admin = std::fs::read_to_string(dir.path().join("admin.token"))
        .unwrap()
        .trim()
        .to_owned();
    let started = Instant::now();
    while AuthClient::new(channel_to(&addr))
        .who_am_i(bearer(WhoAmIRequest::default(), &admin))
        .await
        .is_err()
    {
        assert!(started.elapsed() < Duration::from_secs(20), "no admin");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Secured {
        node,
        addr,
        admin,
        _dir: dir,
    }
}

async fn token(node: &Secured, name: &str, namespace: &str) -> String {
    let request = IssueTokenRequest {
        name: name.into(),
        role: "agent".into(),
        namespaces: vec![namespace.into()],
        ..Default::default()
    };
    AuthClient::new(channel_to(&node.addr))
        .issue_token(bearer(request, &node.admin))
        .await
        .unwrap()
        .into_inner()
        .token
}

fn journey() -> Journey {
    Journey::new(
        "intent-a",
        Duration::from_secs(10),
        Duration::from_millis(500),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_its_namespaces_token_watches_and_writes_and_others_are_refused() {
    let node = secured_node().await;
    let policy = ApplyPolicyRequest {
        namespace: NS.into(),
        document: POLICY.into(),
        format: PolicyFormat::Toml as i32,
        reason: "test".into(),
        ..Default::default()
    };
    PolicyClient::new(channel_to(&node.addr))
        .apply(bearer(policy, &node.admin))
        .await
        .unwrap();
    let tool = ToolRef::new("jobs", "create_ticket").unwrap();
    let request = WriteRequest::new(tool, "ticket-1", "queue-a", b"{}");

    // With a token for its namespace: a fresh view, and the write lands.
    let mut config = test_config(vec![node.addr.clone()], "replica-1");
    config.token = Some(token(&node, "fleet", NS).await);
    let client = connected(config).await;
    let written = client
        .write(&journey(), &request, |_| async {
            Ok(WriteSuccess {
                operation_id: "t-1".into(),
                result: b"ok".to_vec(),
            })
        })
        .await
        .unwrap();
    assert!(!written.replayed);
    client.close().await;

    // With another namespace's token, or none: never fresh, writes refused.
    let foreign = token(&node, "other-fleet", "other").await;
    for token in [Some(foreign), None] {
        let mut config = test_config(vec![node.addr.clone()], "replica-2");
        let anonymous = token.is_none();
        config.token = token;
        let client = fusebox_client::Client::connect(config).unwrap();
        assert!(
            !client.wait_fresh(Duration::from_secs(2)).await,
            "a refused replica must not believe its view (anonymous: {anonymous})"
        );
        let err = client
            .write(&journey(), &request, |_| async {
                panic!("a refused replica must not call the tool")
            })
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("namespace") || text.contains("authentication"),
            "{text}"
        );
        client.close().await;
    }
    node.node.shutdown().await;
}
