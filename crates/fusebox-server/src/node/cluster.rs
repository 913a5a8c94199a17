//! `fusebox.v1.Cluster`: status and membership changes.
//!
//! Membership changes and leader transfers run on the leader; a node that
//! does not lead hands them there through the node's one
//! [`Forwarder`] (once: a forwarded request is never forwarded again), with
//! [`MEMBERSHIP_CHANGE_TIMEOUT_MS`] as the hop's deadline when the caller
//! set none.
//!
//! A leader never removes itself. Asked to, it hands leadership to the
//! most caught-up other voter and forwards the removal there. A leader
//! that removed itself would lead, outside its own membership, until that
//! change committed, and any membership change it took in that window
//! (a retry of the same removal, the next add) broke openraft's rule that
//! only a voting leader appends membership: a debug build's core panicked
//! on it (chaos seeds 110 and 8263, issue 18). For the same reason a
//! leader that is not a voter of its own membership takes no change.

use super::backend::RaftBackend;
use crate::api::Forwarder;
use crate::auth::Caller;
use crate::backend::Backend;
use crate::limits::{
    MEMBERSHIP_CHANGE_TIMEOUT_MS, MEMBER_ADDRESS_BYTES_MAX, RAFT_ALIVE_TIMEOUT_MS,
};
use fusebox_core::auth::Role;
use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::cluster_server::Cluster;
use fusebox_proto::v1::{
    AddMemberRequest, AddMemberResponse, KillSwitchSummary, Member, MemberRole,
    RemoveMemberRequest, RemoveMemberResponse, StatusRequest, StatusResponse,
    TransferLeaderRequest, TransferLeaderResponse,
};
use fusebox_raft_store::{Member as RaftMember, TypeConfig};
use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, RaftMetrics, ServerState};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

/// How many times a leader that gave way asks the new leader to take its
/// removal.
const HAND_ON_TRIES: u32 = 10;
/// The pause between two of those tries.
const HAND_ON_PAUSE: Duration = Duration::from_millis(100);

/// [`MEMBERSHIP_CHANGE_TIMEOUT_MS`] as a `Duration`.
const MEMBERSHIP_CHANGE_TIMEOUT: Duration = Duration::from_millis(MEMBERSHIP_CHANGE_TIMEOUT_MS);

/// Serves cluster status and membership.
#[derive(Clone)]
pub struct ClusterService {
    /// The node.
    pub backend: RaftBackend,
    /// This node's id.
    pub me: u64,
    /// This cluster's name.
    pub cluster_id: String,
    /// Hands requests to the leader; shared with the public services.
    pub forwarder: Arc<Forwarder>,
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
                peer_address: node.peer_addr.clone(),
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

/// Membership and leadership are an admin's: the guard's rule says so, and
/// the service checks again rather than trust that the guard is in front.
fn admin_only<T>(request: &Request<T>) -> Result<(), Status> {
    match Caller::of(request) {
        Some(caller) if caller.role == Role::Admin => Ok(()),
        Some(caller) => Err(Status::permission_denied(format!(
            "{caller} may not change the membership: it needs the admin role"
        ))),
        None => Err(Status::internal("request not admitted by the guard")),
    }
}

impl ClusterService {
    /// Sends `request` to the leader with `call` (the same RPC on a
    /// `ClusterClient` over the given channel), once.
    async fn to_leader<Req, Resp, F, Fut>(
        &self,
        request: Request<Req>,
        call: F,
    ) -> Result<Response<Resp>, Status>
    where
        F: FnOnce(Channel, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let (leader_id, leader_addr) = self.backend.leader().unzip();
        self.forwarder
            .forward_with_default_deadline(
                request,
                leader_id,
                leader_addr,
                MEMBERSHIP_CHANGE_TIMEOUT,
                call,
            )
            .await
    }

    fn metrics(&self) -> RaftMetrics<TypeConfig> {
        self.backend.raft.metrics().borrow_watched().clone()
    }

    /// Refuses a membership change on a leader outside its own voters (one
    /// whose own removal is being committed): the next leader takes it.
    fn voting_leader(&self) -> Result<RaftMetrics<TypeConfig>, Status> {
        let m = self.metrics();
        if m.state == ServerState::Leader {
            return Ok(m);
        }
        Err(Status::unavailable(format!(
            "node {} is leaving the cluster and takes no membership change; retry, \
             the next leader will",
            self.me
        )))
    }

    /// Passes a removal on to the leader this node just gave way to. The
    /// new leader can still refuse it as not leading for a moment after this
    /// node saw it take over (seen in tests as "has to forward request to:
    /// None"); it is asked again while it answers UNAVAILABLE, at most
    /// [`HAND_ON_TRIES`] times within [`MEMBERSHIP_CHANGE_TIMEOUT`]. A
    /// refused try changed nothing, so asking again is safe; a try whose
    /// hop timed out may have removed the node, and the next try then
    /// answers NOT_FOUND ("not a member"), which says so.
    async fn pass_removal_on(
        &self,
        request: Request<RemoveMemberRequest>,
    ) -> Result<Response<RemoveMemberResponse>, Status> {
        let began = tokio::time::Instant::now();
        let (metadata, extensions, message) = request.into_parts();
        let mut tries = 0;
        loop {
            tries += 1;
            let request =
                Request::from_parts(metadata.clone(), extensions.clone(), message.clone());
            let answer = self
                .to_leader(request, |channel, request| async move {
                    ClusterClient::new(channel).remove_member(request).await
                })
                .await;
            match answer {
                Err(status)
                    if status.code() == tonic::Code::Unavailable
                        && tries < HAND_ON_TRIES
                        && began.elapsed() < MEMBERSHIP_CHANGE_TIMEOUT =>
                {
                    tracing::info!(tries, error = %status.message(), "the new leader refused the removal; asking again");
                    tokio::time::sleep(HAND_ON_PAUSE).await;
                }
                answer => return answer,
            }
        }
    }

    /// Makes `to` the leader and waits until this node sees it lead.
    async fn hand_over(&self, to: u64) -> Result<RaftMetrics<TypeConfig>, Status> {
        let raft = &self.backend.raft;
        raft.trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| Status::unavailable(format!("raft stopped: {e}")))?;
        let led = raft
            .wait(Some(MEMBERSHIP_CHANGE_TIMEOUT))
            .metrics(|m| m.current_leader == Some(to), "new leader")
            .await
            .map_err(|e| Status::deadline_exceeded(format!("node {to} did not take over: {e}")))?;
        tracing::info!(to, term = led.current_term, "leadership transferred");
        Ok(led)
    }
}

/// The voter other than `me` that has matched the most of the log: the one
/// a leader that is asked to leave hands over to.
fn successor(m: &RaftMetrics<TypeConfig>, me: u64) -> Option<u64> {
    let matched = m.replication.as_ref()?;
    m.membership_config
        .membership()
        .voter_ids()
        .filter(|id| *id != me)
        .filter_map(|id| {
            let index = matched.get(&id)?.as_ref().map_or(0, |l| l.index);
            Some((index, std::cmp::Reverse(id)))
        })
        .max()
        .map(|(_, std::cmp::Reverse(id))| id)
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let with_switches = request.get_ref().include_kill_switches;
        // Kill switches name namespaces: only those the caller holds.
        let caller = Caller::of(&request)
            .cloned()
            .ok_or_else(|| Status::internal("request not admitted by the guard"))?;
        // Metrics keep their last value after the Raft core stopped (a
        // panic, a storage error): ask the core, so a stopped node never
        // reports the role it had.
        let alive = self.backend.raft.with_raft_state(|_| ());
        let within = Duration::from_millis(RAFT_ALIVE_TIMEOUT_MS);
        if let Ok(Err(fatal)) = tokio::time::timeout(within, alive).await {
            return Err(Status::unavailable(format!(
                "raft stopped on this node: {fatal}"
            )));
        }
        let m = self.metrics();
        let kill_switches = if with_switches {
            self.backend.state.with_state(|s| {
                s.namespaces()
                    .filter(|(ns, _)| caller.namespaces.allows(ns))
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
        admin_only(&request)?;
        if !self.backend.raft.is_leader() {
            return self
                .to_leader(request, |channel, request| async move {
                    ClusterClient::new(channel).add_member(request).await
                })
                .await;
        }
        let req = request.into_inner();
        let too_long = |a: &str| a.len() > MEMBER_ADDRESS_BYTES_MAX;
        if req.id == 0
            || req.address.is_empty()
            || too_long(&req.address)
            || too_long(&req.peer_address)
        {
            return Err(Status::invalid_argument(
                "id must be >= 1 and address HOST:PORT",
            ));
        }
        let member = if req.peer_address.is_empty() {
            RaftMember::parse(&req.address)
        } else {
            RaftMember::parse(&format!("{}@{}", req.address, req.peer_address))
        }
        .map_err(Status::invalid_argument)?;
        self.voting_leader()?;
        let raft = &self.backend.raft;
        let added = tokio::time::timeout(
            MEMBERSHIP_CHANGE_TIMEOUT,
            raft.add_learner(req.id, member, true),
        )
        .await
        .map_err(|_| Status::deadline_exceeded("the new member did not catch up in time"))?
        .map_err(write_status)?;
        let mut log_index = added.log_id.index;
        if !req.learner_only {
            let change = ChangeMembers::AddVoterIds(BTreeSet::from([req.id]));
            let promoted = tokio::time::timeout(
                MEMBERSHIP_CHANGE_TIMEOUT,
                raft.change_membership(change, false),
            )
            .await
            .map_err(|_| Status::deadline_exceeded("membership change not committed in time"))?
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
        admin_only(&request)?;
        if !self.backend.raft.is_leader() {
            return self
                .to_leader(request, |channel, request| async move {
                    ClusterClient::new(channel).remove_member(request).await
                })
                .await;
        }
        let id = request.get_ref().id;
        let m = self.voting_leader()?;
        if id == self.me {
            let Some(to) = successor(&m, id) else {
                return Err(Status::failed_precondition(format!(
                    "node {id} is the only voter; add another before removing it"
                )));
            };
            self.hand_over(to).await?;
            return self.pass_removal_on(Forwarder::hand_on(request)?).await;
        }
        let raft = &self.backend.raft;
        let membership = m.membership_config.membership();
        let change = if membership.voter_ids().any(|v| v == id) {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else if membership.get_node(&id).is_some() {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        } else {
            return Err(Status::not_found(format!("node {id} is not a member")));
        };
        let changed = tokio::time::timeout(
            MEMBERSHIP_CHANGE_TIMEOUT,
            raft.change_membership(change, false),
        )
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
        admin_only(&request)?;
        if !self.backend.raft.is_leader() {
            return self
                .to_leader(request, |channel, request| async move {
                    ClusterClient::new(channel).transfer_leader(request).await
                })
                .await;
        }
        let to = request.into_inner().to;
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
        let led = self.hand_over(to).await?;
        Ok(Response::new(TransferLeaderResponse {
            leader_id: to,
            term: led.current_term,
        }))
    }
}
