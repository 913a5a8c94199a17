//! What the gRPC services need from a node: writes through the log, reads of
//! the applied state at a chosen consistency, and watch subscriptions.
//!
//! The services are generic over [`Backend`], so the API layer is written and
//! tested once. The production backend is the Raft node
//! ([`crate::node::RaftBackend`]); [`local::LocalBackend`] applies commands
//! in-process without replication, for tests of the API layer alone.

pub mod local;

use crate::watch::WatchStart;
use fusebox_core::machine::{Applied, Command, SharedStateMachine};
use fusebox_core::Namespace;
use fusebox_proto::net::Net;
use std::future::Future;
use thiserror::Error;

/// How fresh a read must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// Reflects every write acknowledged before the read began, cluster-wide
    /// (the read linearizer: read index or lease). Ledger lookups use it.
    Linearizable,
    /// This node's applied state, possibly behind the leader (listings,
    /// watch snapshots: they carry revisions, so staleness is visible).
    Local,
}

/// Why a node could not serve a request.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BackendError {
    /// This node is not the leader; the caller should ask the leader.
    #[error("not the leader (leader: {leader_id:?} at {leader_addr:?})")]
    NotLeader {
        /// The leader's id, if known.
        leader_id: Option<u64>,
        /// The leader's gRPC address, if known.
        leader_addr: Option<String>,
    },
    /// No quorum, shutting down, or a deadline passed; retrying may help.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The write may or may not have committed (the leader changed after
    /// proposing it). Ledger writes are safe to retry: `begin` and
    /// `complete` are idempotent per attempt.
    #[error("outcome unknown: {0}")]
    Indeterminate(String),
    /// The command would make a log entry larger than
    /// [`crate::limits::ENTRY_BYTES_MAX`]; it was not proposed.
    #[error("entry of {bytes} bytes, at most {max}")]
    TooLarge {
        /// The entry's encoded size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// One of this node's bounds was reached; nothing was done.
    #[error("limit {limit} reached: at most {max}")]
    LimitReached {
        /// The limit's name, as `LimitReached` details name it.
        limit: &'static str,
        /// The bound.
        max: usize,
    },
    /// The node hit a storage error and stopped.
    #[error("fatal: {0}")]
    Fatal(String),
}

/// A node as the gRPC services see it.
pub trait Backend: Clone + Send + Sync + 'static {
    /// Proposes a command (stamped with the leader's clock) and waits for it
    /// to be committed and applied; returns its answer and watch events.
    fn write(&self, command: Command)
        -> impl Future<Output = Result<Applied, BackendError>> + Send;

    /// Runs `f` on the applied state at the requested consistency.
    fn read<T, F>(
        &self,
        consistency: Consistency,
        f: F,
    ) -> impl Future<Output = Result<T, BackendError>> + Send
    where
        F: FnOnce(&SharedStateMachine) -> T + Send + 'static,
        T: Send + 'static;

    /// Subscribes to a namespace's changes from `from_revision` (exclusive),
    /// or from a fresh snapshot when `None` or when that revision is too old.
    fn watch(
        &self,
        namespace: Namespace,
        from_revision: Option<u64>,
    ) -> impl Future<Output = Result<WatchStart, BackendError>> + Send;

    /// The current leader's id and gRPC address, if known.
    fn leader(&self) -> Option<(u64, String)>;

    /// This node's wall clock in Unix ms (heartbeats, read-time views).
    fn now_ms(&self) -> u64;

    /// Whether this node is in the cluster's membership (a removed or
    /// not-yet-added node stops receiving the log, so its state freezes).
    fn is_member(&self) -> bool;

    /// Why this node cannot vouch that its state is current, if it cannot:
    /// it is not a member, or it has not heard from a leader (leading: from
    /// a quorum) within its contact bound. Watch heartbeats are sent only
    /// while it can.
    fn out_of_touch(&self) -> Option<String>;

    /// Where this node's outgoing channels connect.
    fn net(&self) -> Net;
}
