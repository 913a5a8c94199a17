//! How long a single node holding many ledger records takes to come back
//! after `kill -9`, and how much memory it holds once it serves again.
//!
//! ```sh
//! cargo bench --workspace --bench restart -- --records 1000000
//! ```
//!
//! It starts a real `fusebox serve` on a loopback port with a fresh data
//! directory, writes `--records` idempotency keys through the public Ledger
//! API (`--clients` concurrent callers), kills the process with SIGKILL,
//! starts it again on the same directory, and reports:
//! - load throughput (records per second acknowledged),
//! - restart time: from spawning the process to the first linearizable
//!   lookup answered (the last key written),
//! - that every record is back (a full paginated listing, counted),
//! - the restarted process's resident memory (VmRSS) and peak (VmHWM).
//!
//! `FUSEBOX_BENCH_LOG` sets the nodes' `RUST_LOG` (default `warn`) and shows
//! their logs, to see where a restart's time goes.
//!
//! Figures go to stdout; nothing is asserted about speed (machines are
//! shared and noisy), but a missing record fails the run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::{begin_response::Outcome, BeginRequest, Effect, ListRecordsRequest};
use fusebox_proto::v1::{LookupRequest, RequestMeta};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

const NS: &str = "bench";

struct Args {
    records: u64,
    clients: u64,
}

fn args() -> Args {
    let mut out = Args {
        records: 100_000,
        clients: 64,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().and_then(|v| v.parse().ok()).expect("a number");
        match a.as_str() {
            "--records" => out.records = value(),
            "--clients" => out.clients = value().max(1),
            _ => {} // cargo bench passes `--bench`; ignore the rest
        }
    }
    out
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn spawn(addr: &str, data: &Path) -> Child {
    let log = std::env::var("FUSEBOX_BENCH_LOG").ok();
    Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(["serve", "--id", "1", "--listen", addr])
        .args(["--peers", &format!("1={addr}"), "--data"])
        .arg(data)
        .env("RUST_LOG", log.as_deref().unwrap_or("warn"))
        .stdout(if log.is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn fusebox")
}

fn key(i: u64) -> String {
    format!("rec-{i:09}")
}

fn begin(i: u64) -> BeginRequest {
    BeginRequest {
        namespace: NS.into(),
        key: key(i),
        fingerprint: format!("fp-{i}").into_bytes(),
        intent_id: format!("intent-{}", i / 4),
        server: "payments".into(),
        tool: "charge_card".into(),
        target: format!("acct-{}", i % 1000),
        effect: Effect::IdempotentWrite as i32,
        attempt_id: "attempt-1".into(),
        lease_ms: 600_000,
        ..Default::default()
    }
}

async fn connect(addr: &str) -> LedgerClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(30))
        .connect_lazy();
    LedgerClient::new(channel)
}

/// Waits until a linearizable lookup of `last` answers; returns when.
async fn wait_serving(addr: &str, last: &str) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut client = connect(addr).await;
    loop {
        let lookup = LookupRequest {
            namespace: NS.into(),
            key: last.into(),
            meta: Some(RequestMeta::default()),
        };
        match client.lookup(lookup).await {
            Ok(_) => return Instant::now(),
            Err(s) if s.code() == tonic::Code::NotFound => return Instant::now(),
            Err(_) => {}
        }
        assert!(Instant::now() < deadline, "the node never served again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn load(addr: &str, records: u64, clients: u64) {
    let mut tasks = Vec::new();
    for c in 0..clients {
        let addr = addr.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut client = connect(&addr).await;
            let mut i = c;
            while i < records {
                let answer = client.begin(begin(i)).await;
                match answer.map(|r| r.into_inner().outcome) {
                    Ok(Some(Outcome::Started(_))) => i += clients,
                    Ok(other) => panic!("record {i}: unexpected answer {other:?}"),
                    // Overloaded, rate-limited or electing: the same attempt again.
                    Err(s)
                        if matches!(
                            s.code(),
                            tonic::Code::Unavailable
                                | tonic::Code::DeadlineExceeded
                                | tonic::Code::ResourceExhausted
                        ) =>
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(s) => panic!("record {i}: {s}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

async fn count_all(addr: &str) -> u64 {
    let mut client = connect(addr).await;
    let (mut token, mut count) = (String::new(), 0u64);
    loop {
        let page = client
            .list(ListRecordsRequest {
                namespace: NS.into(),
                page_token: token,
                limit: 1000,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        count += page.records.len() as u64;
        if page.next_page_token.is_empty() {
            return count;
        }
        token = page.next_page_token;
    }
}

/// A `/proc/PID/status` field in KiB.
fn proc_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn du_mib(dir: &Path) -> f64 {
    fn walk(p: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(p) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => walk(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    }
    walk(dir) as f64 / (1024.0 * 1024.0)
}

#[tokio::main]
async fn main() {
    let Args { records, clients } = args();
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("node-1");
    let addr = format!("127.0.0.1:{}", free_port());
    println!(
        "restart benchmark: {records} records, {clients} clients, data in {}",
        data.display()
    );

    let mut node = spawn(&addr, &data);
    wait_serving(&addr, "nothing-yet").await;
    let started = Instant::now();
    load(&addr, records, clients).await;
    let load_s = started.elapsed().as_secs_f64();
    println!(
        "load:    {records} records acknowledged in {load_s:.1} s ({:.0} records/s)",
        records as f64 / load_s
    );
    let (rss_loaded, hwm_loaded) = (proc_kib(node.id(), "VmRSS:"), proc_kib(node.id(), "VmHWM:"));

    node.kill().expect("kill -9");
    node.wait().expect("reap");
    println!("killed:  SIGKILL; data directory {:.0} MiB", du_mib(&data));

    let spawned = Instant::now();
    let mut node = spawn(&addr, &data);
    let serving = wait_serving(&addr, &key(records.saturating_sub(1))).await;
    let restart_s = serving.duration_since(spawned).as_secs_f64();
    println!("restart: serving linearizable lookups {restart_s:.2} s after spawn");
    let hwm_restarted = proc_kib(node.id(), "VmHWM:");

    let counted = Instant::now();
    let found = count_all(&addr).await;
    println!(
        "verify:  {found} of {records} records listed in {:.1} s",
        counted.elapsed().as_secs_f64()
    );
    let (rss, hwm) = (proc_kib(node.id(), "VmRSS:"), proc_kib(node.id(), "VmHWM:"));
    let mib =
        |k: Option<u64>| k.map_or("?".to_owned(), |k| format!("{:.0} MiB", k as f64 / 1024.0));
    println!(
        "memory:  loading: RSS {} at the end, peak {}",
        mib(rss_loaded),
        mib(hwm_loaded)
    );
    println!(
        "memory:  restart: peak {} until serving; after a full listing RSS {} (peak {})",
        mib(hwm_restarted),
        mib(rss),
        mib(hwm)
    );
    node.kill().ok();
    node.wait().ok();
    assert_eq!(found, records, "records lost across the restart");
}
