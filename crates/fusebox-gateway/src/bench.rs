//! `fusebox bench gateway`: the latency the gateway adds to a tool call.
//!
//! The same tool on the same upstream is called two ways: directly at the
//! upstream's Streamable HTTP endpoint, and through the gateway's endpoint
//! for that upstream. For each number of concurrent agents, the two paths
//! take turns (`rounds` times each, so drift on a shared machine falls on
//! both), every agent with its own MCP session calling back to back (with
//! the gateway's own HTTP client, which keeps connections). The added
//! latency is the gateway path's percentile minus the direct path's.

use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::ClientServiceExt as _;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::RoleClient;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most concurrent agents one run may start.
pub const AGENTS_MAX: usize = 1024;
/// Latency samples kept per agent and phase; later calls are counted only.
const SAMPLES_MAX: usize = 1 << 18;
/// How long one call may take before it counts as an error.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long making one session may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// What to measure.
#[derive(Clone, Debug)]
pub struct GatewayBench {
    /// The upstream's own endpoint.
    pub direct: String,
    /// The gateway's endpoint for the same upstream.
    pub via: String,
    /// The tool called.
    pub tool: String,
    /// Its arguments.
    pub arguments: JsonObject,
    /// Numbers of concurrent agents, each measured in turn.
    pub agents: Vec<usize>,
    /// Measured time per path and agent count, split over the rounds.
    pub seconds: f64,
    /// Turns each path takes per agent count.
    pub rounds: u32,
    /// Time run before each measured turn and not counted.
    pub warmup_seconds: f64,
}

/// One path's figures at one agent count.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PathFigures {
    /// Calls answered.
    pub calls: u64,
    /// Calls that failed or timed out.
    pub errors: u64,
    /// Answered calls per second.
    pub calls_per_second: f64,
    /// Latency percentiles, in ms.
    pub p50_ms: f64,
    /// 99th percentile, in ms.
    pub p99_ms: f64,
    /// Slowest call, in ms.
    pub max_ms: f64,
}

/// One agent count's figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Figures {
    /// Concurrent agents.
    pub agents: usize,
    /// Straight to the upstream.
    pub direct: PathFigures,
    /// Through the gateway.
    pub via: PathFigures,
    /// `via.p50_ms - direct.p50_ms`.
    pub added_p50_ms: f64,
    /// `via.p99_ms - direct.p99_ms`.
    pub added_p99_ms: f64,
}

/// Samples and counts gathered over a path's turns.
#[derive(Default)]
struct Gathered {
    samples_us: Vec<u64>,
    calls: u64,
    errors: u64,
    measured: Duration,
}

impl Gathered {
    fn figures(mut self) -> PathFigures {
        self.samples_us.sort_unstable();
        let at = |q: f64| -> f64 {
            if self.samples_us.is_empty() {
                return 0.0;
            }
            let i = ((self.samples_us.len() as f64 - 1.0) * q).round() as usize;
            self.samples_us[i] as f64 / 1000.0
        };
        let seconds = self.measured.as_secs_f64().max(1e-9);
        PathFigures {
            calls: self.calls,
            errors: self.errors,
            calls_per_second: self.calls as f64 / seconds,
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

/// One agent's session. Its HTTP client keeps connections, as agents' MCP
/// clients do (the MCP Python SDK's httpx, for one), and it speaks the
/// protocol the gateway speaks upstream, on both paths: the two differ by
/// the gateway alone.
async fn session(url: &str) -> Result<RunningService<RoleClient, ()>, String> {
    let transport = StreamableHttpClientTransport::with_client(
        crate::upstream::http_client()?,
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    tokio::time::timeout(
        CONNECT_TIMEOUT,
        ().serve_with_lifecycle(transport, crate::upstream::lifecycle()),
    )
    .await
    .map_err(|_| format!("{url}: no session within {CONNECT_TIMEOUT:?}"))?
    .map_err(|e| format!("{url}: {e}"))
}

/// One agent's calls until `until`; samples only after `measure_from`.
async fn agent(
    service: Arc<RunningService<RoleClient, ()>>,
    params: CallToolRequestParams,
    measure_from: Instant,
    until: Instant,
) -> Gathered {
    let mut got = Gathered::default();
    loop {
        let started = Instant::now();
        if started >= until {
            return got;
        }
        let answer = tokio::time::timeout(CALL_TIMEOUT, service.call_tool(params.clone())).await;
        let took = started.elapsed();
        if started < measure_from {
            continue;
        }
        match answer {
            Ok(Ok(result)) if result.is_error != Some(true) => {
                got.calls += 1;
                if got.samples_us.len() < SAMPLES_MAX {
                    got.samples_us
                        .push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
                }
            }
            _ => got.errors += 1,
        }
    }
}

/// One turn of one path: `sessions` call for `warmup` then `measured`.
async fn turn(
    sessions: &[Arc<RunningService<RoleClient, ()>>],
    params: &CallToolRequestParams,
    warmup: Duration,
    measured: Duration,
    into: &mut Gathered,
) {
    let measure_from = Instant::now() + warmup;
    let until = measure_from + measured;
    let agents: Vec<_> = sessions
        .iter()
        .map(|s| tokio::spawn(agent(s.clone(), params.clone(), measure_from, until)))
        .collect();
    for handle in agents {
        if let Ok(got) = handle.await {
            into.samples_us.extend(got.samples_us);
            into.calls += got.calls;
            into.errors += got.errors;
        }
    }
    into.measured += measured;
}

/// Runs the benchmark; `progress` is told each turn as it starts.
pub async fn run(
    bench: &GatewayBench,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Figures>, String> {
    // HTTPS endpoints use rustls with ring (decision 0007).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut params = CallToolRequestParams::new(bench.tool.clone());
    params.arguments = Some(bench.arguments.clone());
    let rounds = bench.rounds.max(1);
    let per_turn = Duration::from_secs_f64(bench.seconds / f64::from(rounds));
    let warmup = Duration::from_secs_f64(bench.warmup_seconds);
    let mut all = Vec::new();
    for &agents in &bench.agents {
        let mut direct_sessions = Vec::with_capacity(agents);
        let mut via_sessions = Vec::with_capacity(agents);
        for _ in 0..agents {
            direct_sessions.push(Arc::new(session(&bench.direct).await?));
            via_sessions.push(Arc::new(session(&bench.via).await?));
        }
        let (mut direct, mut via) = (Gathered::default(), Gathered::default());
        for round in 1..=rounds {
            progress(&format!("{agents} agents, round {round}/{rounds}: direct"));
            turn(&direct_sessions, &params, warmup, per_turn, &mut direct).await;
            progress(&format!(
                "{agents} agents, round {round}/{rounds}: through the gateway"
            ));
            turn(&via_sessions, &params, warmup, per_turn, &mut via).await;
        }
        for s in direct_sessions.into_iter().chain(via_sessions) {
            if let Ok(s) = Arc::try_unwrap(s) {
                let _ = s.cancel().await;
            }
        }
        let (direct, via) = (direct.figures(), via.figures());
        if direct.calls == 0 || via.calls == 0 {
            return Err(format!(
                "{agents} agents: no call answered ({} direct, {} through the gateway, {} and {} errors)",
                direct.calls, via.calls, direct.errors, via.errors
            ));
        }
        all.push(Figures {
            agents,
            added_p50_ms: via.p50_ms - direct.p50_ms,
            added_p99_ms: via.p99_ms - direct.p99_ms,
            direct,
            via,
        });
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_sorted_samples() {
        let gathered = Gathered {
            samples_us: (1..=100).rev().map(|ms| ms * 1000).collect(),
            calls: 100,
            errors: 2,
            measured: Duration::from_secs(2),
        };
        let f = gathered.figures();
        assert_eq!((f.p50_ms, f.p99_ms, f.max_ms), (51.0, 99.0, 100.0));
        assert_eq!(f.calls_per_second, 50.0);
        assert_eq!(f.errors, 2);
    }
}
