//! `fusebox killswitch writes on|off`: block every write-effect tool in a
//! namespace, on every replica, while reads keep working.
//!
//! The switch is a command through the log, so every node and every
//! watching replica sees it in the same order as the writes it stops; a
//! ledger `begin` for a write that reaches the log after it is refused with
//! WRITES_BLOCKED. Its state shows in `fusebox cluster status`. A namespace
//! the cluster knows nothing about is refused (a typo during an incident
//! must not look like a success) unless `--allow-unknown` is given.

use crate::client::ClientArgs;
use crate::failure::rpc;
use crate::known::ensure_namespace;
use crate::out::outln;
use crate::time_text::{instant_from, now_ms};
use clap::{Args, Subcommand, ValueEnum};
use fusebox_proto::v1 as pb;
use serde_json::json;

/// `fusebox killswitch ...`
#[derive(Args, Debug)]
pub struct KillswitchArgs {
    #[command(subcommand)]
    command: KillswitchCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum KillswitchCommand {
    /// Block (`on`) or allow again (`off`) every write-effect tool in a
    /// namespace; reads keep working either way.
    Writes {
        /// `on` blocks writes, `off` lets them through again.
        #[arg(value_enum)]
        switch: Switch,
        /// Namespace to act on.
        #[arg(long, env = "FUSEBOX_NAMESPACE")]
        ns: String,
        /// Why; shown to agents whose writes are refused, and recorded.
        #[arg(long)]
        reason: String,
        /// Act on a namespace the cluster holds nothing for.
        #[arg(long)]
        allow_unknown: bool,
    },
}

/// The switch position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Switch {
    /// Writes blocked.
    On,
    /// Writes allowed.
    Off,
}

/// Runs a kill switch command.
pub async fn run(args: KillswitchArgs) -> anyhow::Result<()> {
    let s = args.client.session().await?;
    let KillswitchCommand::Writes {
        switch,
        ns,
        reason,
        allow_unknown,
    } = args.command;
    let actor = s.actor()?;
    if !allow_unknown {
        ensure_namespace(&s, &ns).await?;
    }
    let request = pb::SetKillSwitchRequest {
        namespace: ns.clone(),
        meta: s.meta(),
        writes_blocked: switch == Switch::On,
        reason,
        actor,
    };
    let reply = rpc("killswitch", s.policy().set_kill_switch(request)).await?;
    let k = reply.kill_switch.unwrap_or_default();
    if s.json {
        let out = json!({"namespace": ns, "writes_blocked": k.writes_blocked,
                         "reason": k.reason, "actor": k.actor, "changed_at_ms": k.changed_at_ms});
        outln!("{out}");
    } else if k.writes_blocked {
        outln!(
            "writes blocked in namespace {ns} since {} by {}: {}\n\
             every write-effect tool is refused on every replica; reads keep working",
            instant_from(k.changed_at_ms, now_ms()),
            k.actor,
            k.reason
        );
    } else {
        outln!(
            "writes allowed again in namespace {ns} since {} by {}: {}",
            instant_from(k.changed_at_ms, now_ms()),
            k.actor,
            k.reason
        );
    }
    Ok(())
}
