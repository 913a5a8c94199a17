//! `fusebox`: serve a node, and talk to a cluster.
//!
//! `fusebox serve` with no flags runs an embedded single-node cluster on
//! `127.0.0.1:7600` with its data in `./fusebox-data`. Client commands take
//! `--endpoints` (or `FUSEBOX_ENDPOINTS`) and print tables, or JSON with
//! `--json`. Exit codes: 0 success, 1 the cluster refused or failed, 2 bad
//! usage or input.

mod client;
mod cluster_cmd;
mod serve;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Fleet-wide circuit breakers and an idempotency ledger for AI agents' tools.
#[derive(Parser)]
#[command(name = "fusebox", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (with no flags: a single-node cluster on 127.0.0.1:7600).
    Serve(serve::ServeArgs),
    /// Cluster status and membership.
    Cluster(cluster_cmd::ClusterArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Cluster(args) => cluster_cmd::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(client::exit_code(&e))
        }
    }
}
