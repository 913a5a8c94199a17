//! Ledger traffic for cluster tests: begins with unique keys through chosen
//! nodes, a background writer that keeps doing so while the cluster changes,
//! and reads of a node's own applied records.
//!
//! A key counts as *acknowledged* only when some node answered `started` to
//! its one attempt (`attempt-1`). A call that failed or timed out is retried
//! with the same attempt, which the ledger answers `started` again if the
//! first try was applied; any other answer to a fresh key's own attempt is a
//! bug and is recorded as an anomaly.

use super::{channel_to, TestCluster};
use fusebox_proto::v1::begin_response::Outcome;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::{BeginRequest, Effect, LedgerRecord, ListRecordsRequest};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// The namespace every test key lives in.
pub const NS: &str = "agents";
/// The attempt id the writers use.
pub const FIRST_ATTEMPT: &str = "attempt-1";
/// Deadline of one Begin call.
pub const BEGIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries of one key (each through the next node) before it is given up as
/// unknown.
pub const BEGIN_TRIES: usize = 8;

/// A non-idempotent write under `key` by `attempt`, with a long lease.
pub fn begin_request(key: &str, attempt: &str) -> BeginRequest {
    BeginRequest {
        namespace: NS.into(),
        key: key.into(),
        fingerprint: b"fp".to_vec(),
        intent_id: format!("intent-{key}"),
        server: "deployments".into(),
        tool: "restart_deployment_job".into(),
        target: "job-42".into(),
        effect: Effect::NonIdempotentWrite as i32,
        attempt_id: attempt.into(),
        lease_ms: 600_000,
        ..Default::default()
    }
}

/// What became of one key's Begin.
#[derive(Clone, Debug, PartialEq)]
pub enum Fate {
    /// Some node answered `started`: the key must exist from now on.
    Acknowledged,
    /// Every try failed; the key may or may not exist.
    Unknown,
    /// A fresh key's own attempt got another answer (a bug).
    Anomaly(String),
}

/// One Begin of `key` by `attempt`, tried through `targets` in turn
/// (starting at `first`) until a node answers.
pub async fn begin_through(targets: &[Channel], first: usize, key: &str, attempt: &str) -> Fate {
    for try_no in 0..BEGIN_TRIES {
        let mut client = LedgerClient::new(targets[(first + try_no) % targets.len()].clone());
        let call = client.begin(begin_request(key, attempt));
        match tokio::time::timeout(BEGIN_TIMEOUT, call).await {
            Ok(Ok(reply)) => {
                return match reply.into_inner().outcome {
                    Some(Outcome::Started(_)) => Fate::Acknowledged,
                    other => Fate::Anomaly(format!("{key}: {other:?}")),
                };
            }
            Ok(Err(status)) if status.code() == tonic::Code::InvalidArgument => {
                return Fate::Anomaly(format!("{key}: {status}"));
            }
            _ => tokio::time::sleep(Duration::from_millis(150)).await,
        }
    }
    Fate::Unknown
}

/// Begins `count` fresh keys `{prefix}-{i}` through the listed nodes in
/// turn; returns the acknowledged ones and panics on an anomaly.
pub async fn write_keys(
    cluster: &TestCluster,
    via: &[u64],
    prefix: &str,
    count: usize,
) -> Vec<String> {
    let mut targets = Vec::new();
    for id in via {
        targets.push(cluster.channel(*id).await);
    }
    let mut acknowledged = Vec::new();
    for i in 0..count {
        let key = format!("{prefix}-{i}");
        match begin_through(&targets, i, &key, FIRST_ATTEMPT).await {
            Fate::Acknowledged => acknowledged.push(key),
            Fate::Unknown => {}
            Fate::Anomaly(what) => panic!("fresh key answered wrongly: {what}"),
        }
    }
    acknowledged
}

/// Whether a second attempt on `key` through node `via` was (wrongly)
/// answered `started`. Retries while the node cannot answer.
pub async fn second_attempt_started(cluster: &TestCluster, via: u64, key: &str) -> bool {
    let mut client = cluster.ledger(via).await;
    for _ in 0..BEGIN_TRIES {
        let call = client.begin(begin_request(key, "attempt-2"));
        if let Ok(Ok(reply)) = tokio::time::timeout(BEGIN_TIMEOUT, call).await {
            return matches!(reply.into_inner().outcome, Some(Outcome::Started(_)));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("node {via} never answered a second begin of {key}");
}

/// Every record node `id` holds in its own applied state (Ledger.List is
/// served locally, never forwarded), by key.
pub async fn local_records(
    cluster: &TestCluster,
    id: u64,
) -> Result<BTreeMap<String, LedgerRecord>, tonic::Status> {
    let mut client = cluster.ledger(id).await;
    let mut records = BTreeMap::new();
    let mut page_token = String::new();
    loop {
        let request = ListRecordsRequest {
            namespace: NS.into(),
            page_token: page_token.clone(),
            limit: 1_000,
            ..Default::default()
        };
        let page = client.list(request).await?.into_inner();
        for record in page.records {
            records.insert(record.key.clone(), record);
        }
        if page.next_page_token.is_empty() {
            return Ok(records);
        }
        page_token = page.next_page_token;
    }
}

/// What a [`Writer`] saw, key by key.
#[derive(Debug, Default)]
pub struct WriterLog {
    /// Every key tried, in order, with its fate.
    pub keys: Vec<(String, Fate)>,
}

impl WriterLog {
    /// The acknowledged keys.
    pub fn acknowledged(&self) -> Vec<String> {
        self.keys
            .iter()
            .filter(|(_, f)| *f == Fate::Acknowledged)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The anomalies, as messages.
    pub fn anomalies(&self) -> Vec<String> {
        self.keys
            .iter()
            .filter_map(|(_, f)| match f {
                Fate::Anomaly(what) => Some(what.clone()),
                _ => None,
            })
            .collect()
    }
}

/// A background task that begins fresh keys one after another, each through
/// the next of the current target nodes, until stopped.
pub struct Writer {
    targets: Arc<Mutex<Vec<(u64, String)>>>,
    log: Arc<Mutex<WriterLog>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Writer {
    /// Starts writing `{prefix}-{n}` keys through `targets` (id, address).
    pub fn start(prefix: &str, targets: Vec<(u64, String)>) -> Writer {
        let targets = Arc::new(Mutex::new(targets));
        let log = Arc::new(Mutex::new(WriterLog::default()));
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(write_until_stopped(
            prefix.to_owned(),
            targets.clone(),
            log.clone(),
            stop_rx,
        ));
        Writer {
            targets,
            log,
            stop,
            task,
        }
    }

    /// Routes later writes through these nodes only.
    pub fn route_through(&self, targets: Vec<(u64, String)>) {
        assert!(
            !targets.is_empty(),
            "a writer needs a node to write through"
        );
        *self.targets.lock().unwrap() = targets;
    }

    /// How many keys were acknowledged so far.
    pub fn acknowledged_so_far(&self) -> usize {
        self.log.lock().unwrap().acknowledged().len()
    }

    /// Waits until `more` keys beyond those acknowledged now are
    /// acknowledged (the cluster keeps taking writes), or panics.
    pub async fn wait_progress(&self, more: usize, within: Duration) {
        let goal = self.acknowledged_so_far() + more;
        super::wait_for(
            &format!("writer acknowledging {more} more keys"),
            within,
            || async { (self.acknowledged_so_far() >= goal).then_some(()) },
        )
        .await;
    }

    /// Stops after the key in flight; returns what was written.
    pub async fn stop(self) -> WriterLog {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("writer stops")
            .expect("writer task");
        Arc::try_unwrap(self.log)
            .expect("writer log unshared")
            .into_inner()
            .unwrap()
    }
}

async fn write_until_stopped(
    prefix: String,
    targets: Arc<Mutex<Vec<(u64, String)>>>,
    log: Arc<Mutex<WriterLog>>,
    stop: watch::Receiver<bool>,
) {
    let mut channels: BTreeMap<String, Channel> = BTreeMap::new();
    for n in 0usize.. {
        if *stop.borrow() {
            return;
        }
        let addrs: Vec<String> = targets
            .lock()
            .unwrap()
            .iter()
            .map(|(_, a)| a.clone())
            .collect();
        let route: Vec<Channel> = addrs
            .iter()
            .map(|a| {
                channels
                    .entry(a.clone())
                    .or_insert_with(|| channel_to(a))
                    .clone()
            })
            .collect();
        let key = format!("{prefix}-{n}");
        let fate = begin_through(&route, n, &key, FIRST_ATTEMPT).await;
        log.lock().unwrap().keys.push((key, fate));
    }
}
