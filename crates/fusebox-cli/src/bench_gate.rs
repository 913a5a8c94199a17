//! `fusebox bench gate`: what the agent SDK's gate costs a tool call, in
//! this process, against any cluster.
//!
//! The SDK connects to the cluster as a replica (`--replica`) and waits for
//! a fresh view; then each of `--threads` threads makes protected calls
//! back to back for `--seconds` after a `--warmup-seconds` that is not
//! counted: the cached admission decision, then recording a successful
//! outcome, with no tool behind them. The run prints calls per second and
//! the time one call costs the gate: the mean, and p50, p99 and max over
//! blocks of 1,000 calls (one call is too short to time on its own).
//!
//! The recorded outcomes go to the cluster as the SDK sends them; at this
//! rate most are dropped at the full report buffer, which is what the SDK
//! does when calls outrun the cluster (counted, never waited for).

use crate::bench_cmd::{progress, SECONDS_MAX};
use crate::client::ClientArgs;
use crate::failure::{ExitKind, Failure};
use crate::out::outln;
use clap::Args;
use fusebox_client::{Client, OutcomeClass, ToolRef};
use serde_json::json;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Most threads one run may start.
const THREADS_MAX: usize = 256;
/// Calls timed together.
const BLOCK_CALLS: u64 = 1_000;
/// Blocks whose time is kept per thread; later ones are counted only.
const BLOCKS_KEPT_MAX: usize = 1 << 20;
/// How long the view may take to become fresh.
const FRESH_WITHIN: Duration = Duration::from_secs(30);

/// Flags of `fusebox bench gate`.
#[derive(Args, Debug, Clone)]
pub(crate) struct GateBench {
    /// Threads making calls at once.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Seconds measured.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Seconds run first and not counted.
    #[arg(long, default_value_t = 1)]
    warmup_seconds: u64,
    /// The namespace the SDK watches.
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// The replica id the SDK reports as.
    #[arg(long, default_value = "bench-gate")]
    replica: String,
    /// The tool called, as `SERVER/TOOL`.
    #[arg(long, default_value = "bench-gate/lookup")]
    tool: String,
}

/// What one thread measured.
#[derive(Default)]
struct Tally {
    calls: u64,
    /// ns per call of each timed block.
    blocks: Vec<f64>,
}

fn check(bench: &GateBench) -> Result<ToolRef, Failure> {
    if bench.threads == 0 || bench.threads > THREADS_MAX {
        let message = format!("--threads must be 1 to {THREADS_MAX}");
        return Err(Failure::bad_input(message));
    }
    if bench.seconds == 0 || bench.seconds > SECONDS_MAX || bench.warmup_seconds > SECONDS_MAX {
        let message =
            format!("--seconds must be 1 to {SECONDS_MAX}, --warmup-seconds at most that");
        return Err(Failure::bad_input(message));
    }
    let Some((server, tool)) = bench.tool.split_once('/') else {
        return Err(Failure::bad_input("--tool must be SERVER/TOOL"));
    };
    ToolRef::new(server, tool).map_err(|e| Failure::bad_input(format!("--tool: {e}")))
}

/// Runs `fusebox bench gate`.
pub(crate) async fn run(args: &ClientArgs, bench: GateBench) -> anyhow::Result<()> {
    let tool = check(&bench)?;
    let config = args.sdk_config(&bench.namespace, &bench.replica)?;
    let client = Client::connect(config).map_err(|e| Failure::bad_input(e.to_string()))?;
    if !client.wait_fresh(FRESH_WITHIN).await {
        let message =
            format!("the SDK's view of the cluster was not fresh within {FRESH_WITHIN:?}");
        return Err(Failure::new(ExitKind::Unavailable, message).into());
    }
    let started = Instant::now();
    let measured_from = started + Duration::from_secs(bench.warmup_seconds);
    let until = measured_from + Duration::from_secs(bench.seconds);
    let done = Arc::new(AtomicU64::new(0));
    let json = args.json;
    let progress = (!json).then(|| tokio::spawn(progress("calls", done.clone(), started, until)));
    let threads: Vec<_> = (0..bench.threads)
        .map(|_| {
            let (client, tool, done) = (client.clone(), tool.clone(), done.clone());
            let (from, until) = (measured_from.into_std(), until.into_std());
            std::thread::spawn(move || calls(&client, &tool, from, until, &done))
        })
        .collect();
    let joined = tokio::task::spawn_blocking(move || {
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_default())
            .collect::<Vec<Tally>>()
    })
    .await?;
    if let Some(progress) = progress {
        progress.abort();
        eprintln!();
    }
    let mut tally = Tally::default();
    for one in joined {
        tally.calls += one.calls;
        tally.blocks.extend(one.blocks);
    }
    let metrics = client.metrics();
    client.close().await;
    report(json, &bench, tally, metrics);
    Ok(())
}

/// One thread's calls: blocks of [`BLOCK_CALLS`] until `until`, counting
/// those that end after `from`.
fn calls(
    client: &Client,
    tool: &ToolRef,
    from: std::time::Instant,
    until: std::time::Instant,
    done: &AtomicU64,
) -> Tally {
    let mut tally = Tally::default();
    let elapsed = Duration::from_millis(12);
    loop {
        let began = std::time::Instant::now();
        if began >= until {
            return tally;
        }
        for _ in 0..BLOCK_CALLS {
            let decision = client.admit(black_box(tool));
            client.report(tool, &decision, OutcomeClass::Success, elapsed);
            black_box(decision.allows());
        }
        let ended = std::time::Instant::now();
        if ended >= from && ended <= until {
            tally.calls += BLOCK_CALLS;
            done.fetch_add(BLOCK_CALLS, Ordering::Relaxed);
            if tally.blocks.len() < BLOCKS_KEPT_MAX {
                let ns = (ended - began).as_nanos() as f64 / BLOCK_CALLS as f64;
                tally.blocks.push(ns);
            }
        }
    }
}

fn report(
    json: bool,
    bench: &GateBench,
    mut tally: Tally,
    metrics: fusebox_client::MetricsSnapshot,
) {
    tally.blocks.sort_unstable_by(f64::total_cmp);
    let at = |p: usize| {
        let n = tally.blocks.len();
        if n == 0 {
            0.0
        } else {
            tally.blocks[(n - 1) * p / 100]
        }
    };
    let (p50, p99, max) = (at(50), at(99), at(100));
    let calls_per_second = tally.calls as f64 / bench.seconds as f64;
    let mean = if tally.blocks.is_empty() {
        0.0
    } else {
        tally.blocks.iter().sum::<f64>() / tally.blocks.len() as f64
    };
    if json {
        outln!(
            "{}",
            json!({
                "bench": "gate",
                "threads": bench.threads,
                "seconds": bench.seconds,
                "calls": tally.calls,
                "calls_per_second": calls_per_second,
                "ns_per_call": {"mean": mean, "p50": p50, "p99": p99, "max": max},
                "outcomes": {
                    "recorded": metrics.outcomes_recorded,
                    "sent": metrics.outcomes_sent,
                    "dropped_buffer_full": metrics.outcomes_dropped,
                },
            })
        );
        return;
    }
    outln!(
        "the SDK's gate (admit, then record a success), {} thread(s), {} s",
        bench.threads,
        bench.seconds
    );
    outln!(
        "  {} calls, {calls_per_second:.0} calls/s; per call (blocks of {BLOCK_CALLS}): mean {mean:.0} ns, p50 {p50:.0} ns, p99 {p99:.0} ns, max {max:.0} ns",
        tally.calls
    );
    outln!(
        "  outcomes: {} recorded, {} sent to the cluster, {} dropped at the full report buffer",
        metrics.outcomes_recorded,
        metrics.outcomes_sent,
        metrics.outcomes_dropped
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(threads: usize, tool: &str) -> GateBench {
        GateBench {
            threads,
            seconds: 1,
            warmup_seconds: 0,
            namespace: "bench".into(),
            replica: "r".into(),
            tool: tool.into(),
        }
    }

    #[test]
    fn the_tool_and_the_threads_are_checked() {
        assert!(check(&bench(1, "crm/find")).is_ok());
        assert!(check(&bench(0, "crm/find")).is_err());
        assert!(check(&bench(THREADS_MAX + 1, "crm/find")).is_err());
        assert!(check(&bench(1, "crm")).is_err());
        assert!(check(&bench(1, "crm/")).is_err());
    }
}
