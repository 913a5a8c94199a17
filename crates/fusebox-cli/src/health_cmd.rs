//! `fusebox health`: asks a node whether it runs (`/healthz`) or is ready
//! to serve writes (`/readyz`, a leader is known), for container health
//! checks that have no curl. Exits 0 when the node says yes, 1 otherwise.

use crate::failure::Failure;
use crate::http_get;
use crate::out::outln;
use clap::Args;
use std::time::Duration;

/// Longest answer read.
const ANSWER_BYTES_MAX: usize = 64 << 10;

/// Flags of `fusebox health`.
#[derive(Args, Debug)]
pub struct HealthArgs {
    /// The node's metrics listener (`HOST:PORT`; `0.0.0.0` means this host).
    #[arg(long, env = "FUSEBOX_HTTP", default_value = "127.0.0.1:7680")]
    http: String,
    /// Ask whether the node is ready (knows a leader) instead of alive.
    #[arg(long)]
    ready: bool,
    /// How long to wait for the answer, in seconds.
    #[arg(long, default_value_t = 3)]
    timeout_seconds: u64,
}

/// Runs `fusebox health`.
pub async fn run(args: HealthArgs) -> anyhow::Result<()> {
    let path = if args.ready { "/readyz" } else { "/healthz" };
    let wait = Duration::from_secs(args.timeout_seconds.clamp(1, 60));
    let asked = format!("{}{path}", args.http);
    // Any failure is exit code 1, the one container health checks read as
    // unhealthy.
    let page = tokio::time::timeout(wait, http_get::get(&args.http, path, ANSWER_BYTES_MAX))
        .await
        .map_err(|_| Failure::refused(format!("{asked}: no answer within {wait:?}")))?
        .map_err(|e| Failure::refused(format!("{asked}: {e:#}")))?;
    let said = page.body.trim();
    if page.status != 200 {
        return Err(Failure::refused(format!("{asked}: {} {said}", page.status)).into());
    }
    outln!("{said}");
    Ok(())
}
