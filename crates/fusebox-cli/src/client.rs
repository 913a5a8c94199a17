//! Reaching a cluster from the command line.

use anyhow::Context;
use clap::Args;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// How long connecting to one endpoint may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The deadline of every request the CLI sends.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Flags every client command shares.
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// Cluster members to try, in order: `HOST:PORT,HOST:PORT`.
    #[arg(
        long,
        global = true,
        env = "FUSEBOX_ENDPOINTS",
        default_value = "127.0.0.1:7600"
    )]
    pub endpoints: String,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

impl ClientArgs {
    /// Connects to the first endpoint that answers.
    pub async fn connect(&self) -> anyhow::Result<Channel> {
        let mut last = None;
        for addr in self
            .endpoints
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            let endpoint = Endpoint::from_shared(format!("http://{addr}"))
                .with_context(|| format!("endpoint {addr:?}"))?
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(REQUEST_TIMEOUT);
            match endpoint.connect().await {
                Ok(channel) => return Ok(channel),
                Err(e) => last = Some(anyhow::anyhow!("{addr}: {e}")),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no endpoints given")))
            .context("no cluster member reachable")
    }
}

/// The exit code for an error: 2 for bad input, 1 for everything else.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let bad_input = e.chain().any(|cause| {
        cause.downcast_ref::<tonic::Status>().is_some_and(|s| {
            matches!(
                s.code(),
                tonic::Code::InvalidArgument | tonic::Code::NotFound
            )
        }) || cause.downcast_ref::<clap::Error>().is_some()
    });
    if bad_input {
        2
    } else {
        1
    }
}
