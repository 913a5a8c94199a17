#![allow(clippy::unwrap_used)]
//! The stores under a real single-node Raft: writes answer with the core's
//! result, and a restart resumes from the snapshot plus the committed log.

mod support;

use fusebox_raft_store::{
    open, LogStore, Node, RaftRuntime, Snapshot, SnapshotData, StateStore, StoreError, TypeConfig,
    Vote,
};
use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{Config, OptionalSend, Raft};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::{digest, kill_switch};
use tempfile::TempDir;

const TIMEOUT: Option<Duration> = Some(Duration::from_secs(10));

/// A network with no peers: a single node never calls it.
struct NoPeers;

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;
    async fn new_client(&mut self, _target: u64, _node: &Node) -> NoPeers {
        NoPeers
    }
}

fn unreachable() -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::from_string("single-node test has no peers"))
}

impl RaftNetworkV2<TypeConfig> for NoPeers {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(unreachable())
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        Err(StreamingError::Unreachable(Unreachable::from_string(
            "no peers",
        )))
    }
}

async fn start(dir: &Path) -> (Raft<TypeConfig, StateStore>, StateStore) {
    let (log, state) = open_when_released(dir).await;
    let config = Arc::new(Config::default().validate().unwrap());
    // Raft's randomness is seeded; it must be started inside a seed scope.
    let raft = RaftRuntime::scope(1, Raft::new(1, config, NoPeers, log, state.clone()))
        .await
        .unwrap();
    (raft, state)
}

/// Opens the stores, waiting (up to 10 s) while a Raft shut down in this
/// process still holds the database: `Raft::shutdown` returns once its core
/// stops, and its other tasks drop their store handles a moment later.
async fn open_when_released(dir: &Path) -> (LogStore, StateStore) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match open(dir, &support::me()) {
            Ok(stores) => return stores,
            Err(StoreError::Open { source, .. })
                if source.to_string().contains("lock")
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("opening the stores: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_answer_and_a_restart_resumes_from_snapshot_and_log() {
    let dir = TempDir::new().unwrap();
    let (raft, state) = start(dir.path()).await;
    raft.initialize(BTreeMap::from([(1, Node::shared("127.0.0.1:1"))]))
        .await
        .unwrap();
    raft.wait(TIMEOUT)
        .current_leader(1, "leader elected")
        .await
        .unwrap();

    tracing::info!("--- write, snapshot, write again");
    let write = |blocked| fusebox_raft_store::Request::new(1_700_000_000_000, kill_switch(blocked));
    let answered = raft.client_write(write(true)).await.unwrap();
    let applied = answered.data.applied.unwrap();
    assert_eq!(applied.events.len(), 1);
    raft.trigger().snapshot().await.unwrap();
    let snapshot_index = answered.log_id.index;
    raft.wait(TIMEOUT)
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= snapshot_index),
            "snapshot built",
        )
        .await
        .unwrap();
    let last = raft.client_write(write(false)).await.unwrap().log_id;
    let digest_before = digest(&state);

    tracing::info!("--- restart: the snapshot is restored and the committed tail re-applied");
    raft.shutdown().await.unwrap();
    drop((raft, state));
    let (raft, state) = start(dir.path()).await;
    raft.wait(TIMEOUT)
        .applied_index_at_least(Some(last.index), "log re-applied after restart")
        .await
        .unwrap();
    assert!(state.last_applied().unwrap().index >= last.index);
    assert_eq!(digest(&state), digest_before);
    raft.shutdown().await.unwrap();
}
