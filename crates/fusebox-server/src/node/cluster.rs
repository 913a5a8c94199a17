//! `fusebox.v1.Cluster`: status and membership changes.
//!
//! Membership changes run on the leader; a follower forwards them there
//! itself (once: a forwarded request is never forwarded again).

use super::backend::RaftBackend;
use crate::backend::Backend;
use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::cluster_server::Cluster;
use fusebox_proto::v1::{
    AddMemberRequest, AddMemberResponse, KillSwitchSummary, Member, MemberRole,
    RemoveMemberRequest, RemoveMemberResponse, StatusRequest, StatusResponse,
    TransferLeaderRequest, TransferLeaderResponse,
};
use fusebox_raft_store::TypeConfig;
use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, RaftMetrics};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tonic::{Request, Response, Status};

/// Header marking a request a node already forwarded to the leader.
pub const FORWARDED_HEADER: &str = "x-fusebox-forwarded";
/// Deadline of a membership change, forwarded or not.
pub const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long Status waits for the Raft core to show it still runs; a core
/// too busy to answer in time counts as running.
const CORE_ALIVE_TIMEOUT: Duration = Duration::from_secs(1);

/// Serves cluster status and membership.
#[derive(Clone)]
pub struct ClusterService {
    /// The node.
    pub backend: RaftBackend,
    /// This node's id.
    pub me: u64,
    /// This cluster's name.
    pub cluster_id: String,
}

fn members(m: &RaftMetrics<TypeConfig>) -> Vec<Member> {
    let membership = m.membership_config.membership();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let matched: BTreeMap<u64, u64> = m
        .replication
        .as_ref()
        .map(|r| {
            r.iter()
                .map(|(id, l)| (*id, l.as_ref().map_or(0, |l| l.index)))
                .collect()
        })
        .unwrap_or_default();
    membership
        .nodes()
        .map(|(id, node)| {
            let role = if m.current_leader == Some(*id) {
                MemberRole::Leader
            } else if voters.contains(id) {
                MemberRole::Follower
            } else {
                MemberRole::Learner
            };
            let applied = (*id == m.id).then(|| m.last_applied.map_or(0, |l| l.index));
            Member {
                id: *id,
                address: node.addr.clone(),
                role: role as i32,
                matched_index: matched.get(id).copied(),
                applied_index: applied,
                reachable: *id == m.id || matched.contains_key(id) || m.current_leader == Some(*id),
            }
        })
        .collect()
}

fn write_status(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> Status {
    match e {
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
            Status::failed_precondition(c.to_string())
        }
        other => Status::unavailable(other.to_string()),
    }
}

impl ClusterService {
    /// The leader's Cluster client, unless this request was already forwarded.
    async fn leader_client<T>(
        &self,
        request: &Request<T>,
    ) -> Result<Option<ClusterClient<tonic::transport::Channel>>, Status> {
        if self.backend.raft.is_leader() {
            return Ok(None);
        }
        let Some((id, addr)) = self.backend.leader() else {
            return Err(Status::unavailable("no leader known; try again shortly"));
        };
        if request.metadata().contains_key(FORWARDED_HEADER) {
            return Err(Status::unavailable(format!(
                "not the leader; node {id} at {addr} is"
            )));
        }
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Status::internal(e.to_string()))?
            .connect_timeout(Duration::from_secs(2));
        Ok(Some(ClusterClient::new(
            self.backend.env.net.channel(endpoint),
        )))
    }

    fn forwarded<T>(message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(MEMBERSHIP_TIMEOUT);
        request.metadata_mut().insert(
            FORWARDED_HEADER,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        request
    }

    fn metrics(&self) -> RaftMetrics<TypeConfig> {
        self.backend.raft.metrics().borrow_watched().clone()
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let with_switches = request.get_ref().include_kill_switches;
        // Metrics keep their last value after the Raft core stopped (a
        // panic, a storage error): ask the core, so a stopped node never
        // reports the role it had.
        let alive = self.backend.raft.with_raft_state(|_| ());
        if let Ok(Err(fatal)) = tokio::time::timeout(CORE_ALIVE_TIMEOUT, alive).await {
            return Err(Status::unavailable(format!(
                "raft stopped on this node: {fatal}"
            )));
        }
        let m = self.metrics();
        let kill_switches = if with_switches {
            self.backend.state.with_state(|s| {
                s.namespaces()
                    .filter_map(|(ns, n)| {
                        n.kill_switch
                            .as_ref()
                            .filter(|k| k.writes_blocked)
                            .map(|k| (ns, k))
                    })
                    .map(|(ns, k)| KillSwitchSummary {
                        namespace: ns.to_string(),
                        reason: k.reason.clone(),
                        actor: k.actor.clone(),
                        since_ms: k.at.as_millis(),
                    })
                    .collect()
            })
        } else {
            Vec::new()
        };
        Ok(Response::new(StatusResponse {
            cluster_id: self.cluster_id.clone(),
            node_id: self.me,
            leader_id: m.current_leader,
            term: m.current_term,
            commit_index: m.local_committed.map_or(0, |l| l.index),
            applied_index: m.last_applied.map_or(0, |l| l.index),
            members: members(&m),
            kill_switches,
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
        }))
    }

    async fn add_member(
        &self,
        request: Request<AddMemberRequest>,
    ) -> Result<Response<AddMemberResponse>, Status> {
        if let Some(mut leader) = self.leader_client(&request).await? {
            return leader
                .add_member(Self::forwarded(request.into_inner()))
                .await;
        }
        let req = request.into_inner();
        if req.id == 0 || req.address.is_empty() || req.address.len() > 256 {
            return Err(Status::invalid_argument(
                "id must be >= 1 and address HOST:PORT",
            ));
        }
        let raft = &self.backend.raft;
        let added = tokio::time::timeout(
            MEMBERSHIP_TIMEOUT,
            raft.add_learner(req.id, BasicNode::new(req.address.clone()), true),
        )
        .await
        .map_err(|_| Status::deadline_exceeded("the new member did not catch up in time"))?
        .map_err(write_status)?;
        let mut log_index = added.log_id.index;
        if !req.learner_only {
            let change = ChangeMembers::AddVoterIds(BTreeSet::from([req.id]));
            let promoted =
                tokio::time::timeout(MEMBERSHIP_TIMEOUT, raft.change_membership(change, false))
                    .await
                    .map_err(|_| {
                        Status::deadline_exceeded("membership change not committed in time")
                    })?
                    .map_err(write_status)?;
            log_index = promoted.log_id.index;
        }
        tracing::info!(member = req.id, address = %req.address, "member added");
        Ok(Response::new(AddMemberResponse {
            members: members(&self.metrics()),
            log_index,
        }))
    }

    async fn remove_member(
        &self,
        request: Request<RemoveMemberRequest>,
    ) -> Result<Response<RemoveMemberResponse>, Status> {
        if let Some(mut leader) = self.leader_client(&request).await? {
            return leader
                .remove_member(Self::forwarded(request.into_inner()))
                .await;
        }
        let id = request.into_inner().id;
        let raft = &self.backend.raft;
        let m = self.metrics();
        let membership = m.membership_config.membership();
        let change = if membership.voter_ids().any(|v| v == id) {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else if membership.get_node(&id).is_some() {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        } else {
            return Err(Status::not_found(format!("node {id} is not a member")));
        };
        let changed =
            tokio::time::timeout(MEMBERSHIP_TIMEOUT, raft.change_membership(change, false))
                .await
                .map_err(|_| Status::deadline_exceeded("membership change not committed in time"))?
                .map_err(write_status)?;
        tracing::info!(member = id, "member removed");
        Ok(Response::new(RemoveMemberResponse {
            members: members(&self.metrics()),
            log_index: changed.log_id.index,
        }))
    }

    async fn transfer_leader(
        &self,
        request: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderResponse>, Status> {
        if let Some(mut leader) = self.leader_client(&request).await? {
            return leader
                .transfer_leader(Self::forwarded(request.into_inner()))
                .await;
        }
        let to = request.into_inner().to;
        let raft = &self.backend.raft;
        let m = self.metrics();
        if !m
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == to)
        {
            return Err(Status::failed_precondition(format!(
                "node {to} is not a voter; only a voter can lead"
            )));
        }
        if m.current_leader == Some(to) {
            return Ok(Response::new(TransferLeaderResponse {
                leader_id: to,
                term: m.current_term,
            }));
        }
        raft.trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| Status::unavailable(format!("raft stopped: {e}")))?;
        let led = raft
            .wait(Some(MEMBERSHIP_TIMEOUT))
            .metrics(|m| m.current_leader == Some(to), "new leader")
            .await
            .map_err(|e| Status::deadline_exceeded(format!("node {to} did not take over: {e}")))?;
        tracing::info!(to, term = led.current_term, "leadership transferred");
        Ok(Response::new(TransferLeaderResponse {
            leader_id: to,
            term: led.current_term,
        }))
    }
}
