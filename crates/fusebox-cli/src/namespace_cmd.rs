//! `fusebox namespace list|delete`: see which namespaces take the cluster's
//! places (`NAMESPACES_MAX`), and delete one no longer wanted.
//!
//! A namespace is created on first use, so a typo or a test run takes a
//! place for good until an admin deletes it. Deleting is refused while the
//! namespace holds live state (ledger records, a breaker that is not
//! closed, a thrown kill switch) and the refusal says which; what goes with
//! it is its policy versions, closed breakers and imported tools.

use crate::client::ClientArgs;
use crate::failure::rpc;
use crate::out::outln;
use crate::table::Table;
use clap::{Args, Subcommand};
use fusebox_proto::v1 as pb;
use serde_json::json;

/// `fusebox namespace ...`
#[derive(Args, Debug)]
pub struct NamespaceArgs {
    #[command(subcommand)]
    command: NamespaceCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum NamespaceCommand {
    /// The namespaces you hold, with what each holds, and how many of the
    /// cluster's places are taken.
    List,
    /// Delete a namespace with no live state, freeing its place.
    Delete {
        /// The namespace to delete.
        ns: String,
        /// Why, for the audit log.
        #[arg(long)]
        reason: String,
    },
}

/// Runs a namespace command.
pub async fn run(args: NamespaceArgs) -> anyhow::Result<()> {
    let s = args.client.session().await?;
    match args.command {
        NamespaceCommand::List => {
            let request = pb::ListNamespacesRequest {
                namespace: String::new(),
                meta: s.meta(),
            };
            let reply = rpc("namespace list", s.policy().list_namespaces(request)).await?;
            if s.json {
                let namespaces: Vec<_> = reply
                    .namespaces
                    .iter()
                    .map(|n| {
                        json!({"namespace": n.namespace, "ledger_records": n.ledger_records,
                               "breakers": n.breakers, "breakers_not_closed": n.breakers_not_closed,
                               "tools": n.tools, "policy_version": n.policy_version,
                               "writes_blocked": n.writes_blocked})
                    })
                    .collect();
                let out = json!({"namespaces": namespaces,
                                 "cluster_namespaces": reply.cluster_namespaces,
                                 "cluster_namespaces_max": reply.cluster_namespaces_max});
                outln!("{out}");
                return Ok(());
            }
            let mut table = Table::new(&[
                "NAMESPACE",
                "RECORDS",
                "BREAKERS",
                "NOT CLOSED",
                "TOOLS",
                "POLICY",
                "WRITES",
            ]);
            for n in &reply.namespaces {
                table.row(vec![
                    n.namespace.clone(),
                    n.ledger_records.to_string(),
                    n.breakers.to_string(),
                    n.breakers_not_closed.to_string(),
                    n.tools.to_string(),
                    match n.policy_version {
                        0 => "defaults".into(),
                        v => format!("v{v}"),
                    },
                    if n.writes_blocked {
                        "blocked"
                    } else {
                        "allowed"
                    }
                    .into(),
                ]);
            }
            table.print();
            outln!(
                "{} of {} namespace places taken in the cluster",
                reply.cluster_namespaces,
                reply.cluster_namespaces_max
            );
        }
        NamespaceCommand::Delete { ns, reason } => {
            let request = pb::DeleteNamespaceRequest {
                namespace: ns.clone(),
                meta: s.meta(),
                reason,
                actor: s.actor()?,
            };
            let reply = rpc("namespace delete", s.policy().delete_namespace(request)).await?;
            if s.json {
                let out = json!({"namespace": ns, "deleted": true, "breakers": reply.breakers,
                                 "tools": reply.tools, "policy_versions": reply.policy_versions});
                outln!("{out}");
            } else {
                outln!(
                    "namespace {ns} deleted: {} closed breaker(s), {} tool(s) and {} policy \
                     version(s) went with it; its place is free",
                    reply.breakers,
                    reply.tools,
                    reply.policy_versions
                );
            }
        }
    }
    Ok(())
}
