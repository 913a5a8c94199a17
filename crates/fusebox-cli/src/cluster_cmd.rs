//! `fusebox cluster status|add-member|remove-member`.

use crate::client::ClientArgs;
use crate::failure::rpc;
use crate::out::outln;
use crate::time_text::{instant_from, now_ms};
use clap::{Args, Subcommand};
use fusebox_proto::v1::{
    AddMemberRequest, Member, MemberRole, RemoveMemberRequest, StatusRequest, StatusResponse,
    TransferLeaderRequest,
};
use serde_json::json;

/// `fusebox cluster ...`
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Members, leader, term, commit and applied index, per node.
    Status,
    /// Add a node (as a learner first, then a voter unless --learner-only).
    AddMember {
        /// The new node's id.
        #[arg(long)]
        id: u64,
        /// The new node's gRPC API address.
        #[arg(long)]
        address: String,
        /// Its peer listener's address (Raft traffic), if it has one.
        #[arg(long)]
        peer_address: Option<String>,
        /// Keep it a learner (it replicates but does not vote).
        #[arg(long)]
        learner_only: bool,
    },
    /// Remove a node from the cluster.
    RemoveMember {
        /// The node's id.
        #[arg(long)]
        id: u64,
    },
    /// Hand leadership to another voter (before maintenance on the leader).
    TransferLeader {
        /// The voter that should lead.
        #[arg(long)]
        to: u64,
    },
}

fn role(r: i32) -> &'static str {
    match MemberRole::try_from(r) {
        Ok(MemberRole::Leader) => "leader",
        Ok(MemberRole::Follower) => "follower",
        Ok(MemberRole::Candidate) => "candidate",
        Ok(MemberRole::Learner) => "learner",
        _ => "unknown",
    }
}

fn members_json(members: &[Member]) -> serde_json::Value {
    members
        .iter()
        .map(|m| {
            json!({"id": m.id, "address": m.address, "role": role(m.role),
                   "matched_index": m.matched_index, "applied_index": m.applied_index})
        })
        .collect()
}

fn print_members(members: &[Member]) {
    outln!(
        "{:<6} {:<24} {:<10} {:>10} {:>10}",
        "ID",
        "ADDRESS",
        "ROLE",
        "MATCHED",
        "APPLIED"
    );
    for m in members {
        let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        outln!(
            "{:<6} {:<24} {:<10} {:>10} {:>10}",
            m.id,
            m.address,
            role(m.role),
            opt(m.matched_index),
            opt(m.applied_index)
        );
    }
}

fn print_status(s: &StatusResponse, json: bool) {
    if json {
        let switches: Vec<_> = s
            .kill_switches
            .iter()
            .map(|k| json!({"namespace": k.namespace, "reason": k.reason, "actor": k.actor, "since_ms": k.since_ms}))
            .collect();
        let out = json!({"cluster_id": s.cluster_id, "node_id": s.node_id, "leader_id": s.leader_id,
            "term": s.term, "commit_index": s.commit_index, "applied_index": s.applied_index,
            "members": members_json(&s.members), "kill_switches": switches});
        outln!("{out}");
        return;
    }
    let leader = s
        .leader_id
        .map_or_else(|| "none".to_string(), |l| l.to_string());
    outln!(
        "cluster {}  answered by node {}  leader {}  term {}  commit {}  applied {}",
        s.cluster_id,
        s.node_id,
        leader,
        s.term,
        s.commit_index,
        s.applied_index
    );
    print_members(&s.members);
    if s.kill_switches.is_empty() {
        outln!("write kill switch: off in every namespace");
    }
    for k in &s.kill_switches {
        outln!(
            "write kill switch: ON in namespace {} since {} by {}: {}",
            k.namespace,
            instant_from(k.since_ms, now_ms()),
            k.actor,
            k.reason
        );
    }
}

/// Runs a cluster command.
pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let session = args.client.session_here().await?;
    let mut client = session.cluster();
    let json = session.json;
    match args.command {
        ClusterCommand::Status => {
            let request = StatusRequest {
                include_kill_switches: true,
                ..Default::default()
            };
            let status = rpc("cluster status", client.status(request)).await?;
            print_status(&status, json);
        }
        ClusterCommand::AddMember {
            id,
            address,
            peer_address,
            learner_only,
        } => {
            let request = AddMemberRequest {
                id,
                address,
                learner_only,
                peer_address: peer_address.unwrap_or_default(),
                ..Default::default()
            };
            let added = rpc("cluster add-member", client.add_member(request)).await?;
            if json {
                outln!(
                    "{}",
                    json!({"log_index": added.log_index, "members": members_json(&added.members)})
                );
            } else {
                outln!("node {id} added at log index {}", added.log_index);
                print_members(&added.members);
            }
        }
        ClusterCommand::RemoveMember { id } => {
            let request = RemoveMemberRequest {
                id,
                ..Default::default()
            };
            let removed = rpc("cluster remove-member", client.remove_member(request)).await?;
            if json {
                outln!(
                    "{}",
                    json!({"log_index": removed.log_index, "members": members_json(&removed.members)})
                );
            } else {
                outln!("node {id} removed at log index {}", removed.log_index);
                print_members(&removed.members);
            }
        }
        ClusterCommand::TransferLeader { to } => {
            let request = TransferLeaderRequest {
                to,
                ..Default::default()
            };
            let led = rpc("cluster transfer-leader", client.transfer_leader(request)).await?;
            if json {
                outln!("{}", json!({"leader_id": led.leader_id, "term": led.term}));
            } else {
                outln!("node {} leads in term {}", led.leader_id, led.term);
            }
        }
    }
    Ok(())
}
