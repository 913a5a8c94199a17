//! `fusebox`: serve a node, and steer a cluster.
//!
//! `fusebox serve` with no flags runs an embedded single-node cluster on
//! `127.0.0.1:7600` with its data in `./fusebox-data`. The client commands
//! (`cluster`, `breakers`, `ledger`, `policy`, `killswitch`, `tools`) take
//! `--endpoints` (or `FUSEBOX_ENDPOINTS`) and print tables, or one line of
//! JSON with `--json`. Commands that change something record who acted
//! (`--actor`, `FUSEBOX_ACTOR`, else `USER`) in the cluster's audit.
//!
//! Exit codes are part of the interface (see [`failure`]): 0 success, 1 the
//! cluster refused or failed, 2 bad usage or input, 3 not found, 4 cluster
//! unreachable or unavailable.

mod auth_cmd;
mod bench_cmd;
mod bench_etcd;
mod bench_gate;
mod bench_outcomes;
mod bench_propagation;
mod bench_soak;
mod breakers_change;
mod breakers_cmd;
mod breakers_read;
mod breakers_view;
mod certs_cmd;
mod client;
mod cluster_cmd;
mod failure;
mod fault_clock;
mod gateway_cmd;
mod health_cmd;
mod http_get;
mod killswitch_cmd;
mod known;
mod ledger_cmd;
mod limits;
mod manifest;
mod namespace_cmd;
mod out;
mod policy_cmd;
mod serve;
mod table;
mod time_text;
mod tools_cmd;

use clap::{Parser, Subcommand};
use failure::{error_json, exit_kind, ExitKind, EXIT_CODES_HELP};
use std::process::ExitCode;

/// The binary's allocator, for every subcommand: under load, glibc's
/// malloc and free took about a fifth of a node's samples (decision 0014).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Fleet-wide circuit breakers and an idempotency ledger for AI agents' tools.
#[derive(Parser)]
#[command(name = "fusebox", version, about, after_help = EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (with no flags: a single-node cluster on 127.0.0.1:7600).
    Serve(serve::ServeArgs),
    /// Cluster status (members, leader, write kill switches) and membership.
    #[command(after_help = EXIT_CODES_HELP)]
    Cluster(cluster_cmd::ClusterArgs),
    /// See and steer breakers: list, show, open, close, reset, disable,
    /// shadow, history.
    #[command(after_help = EXIT_CODES_HELP)]
    Breakers(breakers_cmd::BreakersArgs),
    /// Look operations up by idempotency key and resolve ambiguous ones.
    #[command(after_help = EXIT_CODES_HELP)]
    Ledger(ledger_cmd::LedgerArgs),
    /// Versioned policy per namespace: apply, show, history, diff, rollback.
    #[command(after_help = EXIT_CODES_HELP)]
    Policy(policy_cmd::PolicyArgs),
    /// Block every write-effect tool in a namespace while reads keep working.
    #[command(after_help = EXIT_CODES_HELP)]
    Killswitch(killswitch_cmd::KillswitchArgs),
    /// Namespaces: list what each holds, delete one no longer wanted.
    #[command(after_help = EXIT_CODES_HELP)]
    Namespace(namespace_cmd::NamespaceArgs),
    /// Tool manifests and latency: import, latency, disclosure.
    #[command(after_help = EXIT_CODES_HELP)]
    Tools(tools_cmd::ToolsArgs),
    /// Development certificates for a TLS cluster.
    Certs(certs_cmd::CertsArgs),
    /// Who may call: principals, roles, namespaces and tokens.
    #[command(after_help = EXIT_CODES_HELP)]
    Auth(auth_cmd::AuthArgs),
    /// Measure a cluster: ledger pairs per second, latency, server cost.
    #[command(after_help = EXIT_CODES_HELP)]
    Bench(bench_cmd::BenchArgs),
    /// An MCP proxy that sends every tools/call through the gate (one
    /// gateway = one replica of the fleet).
    Gateway(gateway_cmd::GatewayArgs),
    /// Whether a node runs (or with --ready, knows a leader): exit 0 or 1,
    /// for container health checks.
    Health(health_cmd::HealthArgs),
}

/// Whether the command asked for JSON (errors are then JSON too).
fn wants_json(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| a.as_str() != "--")
        .any(|a| a == "--json")
}

fn main() -> ExitCode {
    let json = wants_json(&std::env::args().collect::<Vec<_>>());
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            // Not the cluster's doing, but 1 is the general failure code.
            return ExitCode::from(ExitKind::Refused.code());
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Cluster(args) => cluster_cmd::run(args).await,
            Command::Breakers(args) => breakers_cmd::run(args).await,
            Command::Ledger(args) => ledger_cmd::run(args).await,
            Command::Policy(args) => policy_cmd::run(args).await,
            Command::Killswitch(args) => killswitch_cmd::run(args).await,
            Command::Namespace(args) => namespace_cmd::run(args).await,
            Command::Tools(args) => tools_cmd::run(args).await,
            Command::Certs(args) => certs_cmd::run(args).await,
            Command::Auth(args) => auth_cmd::run(args).await,
            Command::Bench(args) => bench_cmd::run(args).await,
            Command::Health(args) => health_cmd::run(args).await,
            Command::Gateway(args) => gateway_cmd::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if json {
                eprintln!("{}", error_json(&e));
            } else {
                eprintln!("error: {e:#}");
            }
            ExitCode::from(exit_kind(&e).code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn json_is_spotted_before_a_double_dash_only() {
        let args = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(wants_json(&args(&[
            "fusebox", "breakers", "list", "--json"
        ])));
        assert!(!wants_json(&args(&[
            "fusebox", "ledger", "lookup", "--", "--json"
        ])));
    }

    #[test]
    fn every_client_command_documents_the_exit_codes() {
        let mut cli = Cli::command();
        for name in [
            "cluster",
            "breakers",
            "ledger",
            "policy",
            "killswitch",
            "tools",
        ] {
            let sub = cli.find_subcommand_mut(name).expect(name);
            let help = sub.render_help().to_string();
            assert!(help.contains("3  not found"), "{name}: {help}");
        }
    }
}
