//! An agent with twenty simulated tools, one of which turns slow (the slow-tool
//! tax lookup). Each turn calls all twenty in sequence through the gate.
//!
//! Run it against an embedded node it starts itself:
//!
//! ```text
//! cargo run --release --example agent
//! ```
//!
//! or against a running cluster with `FUSEBOX_ENDPOINTS=127.0.0.1:7600`.
//! It prints each turn's latency: about 20 × 10 ms while healthy; the first
//! turns after the tax lookup goes slow pay its deadline (not 40 s), and
//! once four timeouts opened its breaker a turn costs about the healthy time
//! again, with `tax_lookup` answered by a one-line `circuit_open` message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fusebox_client::{Client, ClientConfig, ClientError, Journey, ToolFailure, ToolRef};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLICY: &str = r#"
[defaults]
timeout_ms = 500

[defaults.breaker]
consecutive_failures = 4
open_ms = 30000

[servers.tax-vendor.breaker]
consecutive_failures = 20

[servers.tax-vendor.tools.tax_lookup]
timeout_ms = 1000

[servers.tax-vendor.tools.tax_lookup.breaker]
consecutive_failures = 4
"#;

const TOOLS: [(&str, &str); 20] = [
    ("accounts", "get_account"),
    ("accounts", "list_invoices"),
    ("accounts", "get_plan"),
    ("accounts", "usage_summary"),
    ("search", "web_search"),
    ("search", "kb_search"),
    ("search", "doc_fetch"),
    ("crm", "contact_lookup"),
    ("crm", "notes_search"),
    ("crm", "opportunity_get"),
    ("enrich", "company_enrich"),
    ("enrich", "person_enrich"),
    ("geocoder", "geocode"),
    ("geocoder", "reverse_geocode"),
    ("tax-vendor", "tax_lookup"),
    ("tax-vendor", "tax_rates"),
    ("billing", "charge_status"),
    ("billing", "refund_status"),
    ("support", "ticket_get"),
    ("support", "ticket_search"),
];

/// One simulated tool: 10 ms normally; the tax lookup takes 40 s once slow.
async fn simulated(tool: &'static str, slow: bool) -> Result<String, ToolFailure> {
    let delay = if slow && tool == "tax_lookup" {
        Duration::from_secs(40)
    } else {
        Duration::from_millis(10)
    };
    tokio::time::sleep(delay).await;
    Ok(format!("{tool}: ok"))
}

async fn turn(client: &Client, n: u32, tools: &[ToolRef], slow: &AtomicBool) -> Duration {
    let journey = Journey::new(
        format!("turn-{n}"),
        Duration::from_secs(20),
        Duration::from_secs(3),
    );
    let started = Instant::now();
    let mut notes = Vec::new();
    for tool in tools {
        let name: &'static str = TOOLS
            .iter()
            .find(|(_, t)| *t == tool.tool())
            .map(|(_, t)| *t)
            .unwrap_or("unknown");
        let is_slow = slow.load(Ordering::Relaxed);
        match client
            .call(&journey, tool, |_ctx| simulated(name, is_slow))
            .await
        {
            Ok(_) => {}
            Err(e @ (ClientError::CircuitOpen { .. } | ClientError::Timeout { .. })) => {
                notes.push(e.model_message())
            }
            Err(e) => notes.push(format!("{} ({})", e.model_message(), e.kind())),
        }
    }
    let took = started.elapsed();
    println!("turn {n:2}: {:6} ms", took.as_millis());
    for note in notes {
        println!("          model sees: {note}");
    }
    took
}

async fn embedded_node() -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config = fusebox_server::node::NodeConfig {
        id: 1,
        listen: addr.parse().unwrap(),
        http: None,
        peers: BTreeMap::from([(1, addr.clone())]),
        data_dir: dir.path().to_path_buf(),
        cluster_id: "example".into(),
        timing: Default::default(),
        ..fusebox_server::node::NodeConfig::single_node()
    };
    let node = fusebox_server::node::start(config).await.unwrap();
    std::mem::forget(node);
    (addr, dir)
}

async fn apply_policy(addr: &str) {
    use fusebox_client::proto as pb;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let mut policy = fusebox_proto::v1::policy_client::PolicyClient::new(channel);
    let request = pb::ApplyPolicyRequest {
        namespace: "example-agents".into(),
        document: POLICY.into(),
        format: pb::PolicyFormat::Toml as i32,
        actor: "example".into(),
        reason: "slow-tool example policy".into(),
        ..Default::default()
    };
    for _ in 0..100 {
        if policy.apply(request.clone()).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not apply the policy");
}

#[tokio::main]
async fn main() {
    let (addr, _dir) = match std::env::var("FUSEBOX_ENDPOINTS") {
        Ok(endpoints) => (endpoints, None),
        Err(_) => {
            let (addr, dir) = embedded_node().await;
            (addr, Some(dir))
        }
    };
    let endpoints: Vec<String> = addr.split(',').map(str::to_owned).collect();
    apply_policy(&endpoints[0]).await;
    let client =
        Client::connect(ClientConfig::new(endpoints, "example-agents", "agent-1").unwrap())
            .unwrap();
    assert!(client.wait_fresh(Duration::from_secs(30)).await, "no view");
    let tools: Vec<ToolRef> = TOOLS
        .iter()
        .map(|(s, t)| ToolRef::new(s, t).unwrap())
        .collect();
    let slow = AtomicBool::new(false);
    let slow = Arc::new(slow);

    println!("healthy:");
    let mut before = Duration::ZERO;
    for n in 1..=3 {
        before = turn(&client, n, &tools, &slow).await;
    }
    println!("tax_lookup turns slow (40 s per call):");
    slow.store(true, Ordering::Relaxed);
    let mut after = Duration::ZERO;
    for n in 4..=10 {
        after = turn(&client, n, &tools, &slow).await;
        client.flush_reports();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let m = client.metrics();
    println!(
        "turn latency before: {} ms, after (breaker open): {} ms",
        before.as_millis(),
        after.as_millis()
    );
    println!(
        "calls {} intents {} calls/intent {:.1} timeouts {} rejects {} dropped reports {}",
        m.calls, m.intents, m.calls_per_intent, m.timeouts, m.rejects, m.outcomes_dropped
    );
    client.close().await;
}
