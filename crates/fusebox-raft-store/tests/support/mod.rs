//! Builders shared by the store's integration tests.
#![allow(dead_code)]

use fusebox_core::machine::Command;
use fusebox_core::Namespace;
use fusebox_raft_store::{Entry, LogId, LogStore, Request, StateStore, TypeConfig};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage, RaftStateMachine};
use openraft::type_config::TypeConfigExt;
use openraft::Membership;
use std::collections::BTreeSet;

/// A log id written by node 1.
pub fn log_id(term: u64, index: u64) -> LogId {
    openraft::testing::log_id::<TypeConfig>(term, 1, index)
}

/// A command that changes the state and emits a watch event.
pub fn kill_switch(writes_blocked: bool) -> Command {
    Command::SetKillSwitch {
        namespace: Namespace::new("fleet-a").unwrap(),
        writes_blocked,
        actor: "ops".into(),
        reason: "fault exercise".into(),
    }
}

/// A command that writes one ledger record (with a result of
/// `result_bytes` once completed, if asked).
pub fn begin(key: &str) -> Command {
    Command::Begin {
        namespace: Namespace::new("fleet-a").unwrap(),
        request: fusebox_core::ledger::BeginRequest {
            key: key.into(),
            fingerprint: "fp".into(),
            intent_id: format!("intent-{key}"),
            tool: fusebox_core::ToolName::new("restart_job").unwrap(),
            target: "job-1".into(),
            effect: fusebox_core::policy::EffectClass::IdempotentWrite,
            attempt: "1".into(),
            lease_ms: 60_000,
        },
    }
}

pub fn normal(term: u64, index: u64, command: Command) -> Entry {
    Entry::new_normal(
        log_id(term, index),
        Request::new(1_700_000_000_000 + index, command),
    )
}

pub fn blank(term: u64, index: u64) -> Entry {
    Entry::new_blank(log_id(term, index))
}

pub fn membership(term: u64, index: u64, voters: &[u64]) -> Entry {
    let voters: BTreeSet<u64> = voters.iter().copied().collect();
    let nodes = voters.clone();
    Entry::new_membership(
        log_id(term, index),
        Membership::new_with_defaults(vec![voters], nodes),
    )
}

/// Appends and waits until the store reports the entries durable.
pub async fn append(log: &mut LogStore, entries: Vec<Entry>) {
    let (tx, rx) = TypeConfig::oneshot();
    log.append(entries, IOFlushed::signal(tx)).await.unwrap();
    rx.await.unwrap().unwrap();
}

/// Applies entries with no client waiting.
pub async fn apply(state: &mut StateStore, entries: Vec<Entry>) -> std::io::Result<()> {
    let items = entries.into_iter().map(|entry| Ok((entry, None)));
    state.apply(futures::stream::iter(items)).await
}

/// The digest of a store's in-memory state.
pub fn digest(state: &StateStore) -> String {
    state.with_state(|sm| sm.digest().unwrap())
}

/// The identity every test store is opened as.
pub fn me() -> fusebox_raft_store::DirIdentity {
    fusebox_raft_store::DirIdentity {
        node_id: 1,
        cluster_id: "test".into(),
    }
}
