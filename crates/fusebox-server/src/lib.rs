//! The Fusebox cluster node: openraft over RocksDB, serving `fusebox.v1`.
//!
//! - [`backend`]: what the gRPC services need from a node (writes through the
//!   log, reads at a consistency, watch subscriptions).
//! - [`node`]: storage, Raft, the servers and the leader's background duties.
//! - [`raft`]: openraft's network over the `fusebox.v1.Raft` service.
//! - [`watch`]: snapshot-then-changes watch streams, resumable by revision.
//! - [`metrics`]: Prometheus metrics, `/healthz` and `/readyz`.

#![deny(missing_docs)]

pub mod api;
pub mod backend;
pub mod metrics;
pub mod node;
pub mod raft;
pub mod watch;
