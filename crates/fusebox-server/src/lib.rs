//! The Fusebox cluster node: openraft over RocksDB, serving `fusebox.v1`.
//!
//! - [`api`]: the public gRPC services (`Breakers`, `Ledger`, `Policy`,
//!   `Tools`), thin adapters between the wire and a [`backend::Backend`],
//!   with leader forwarding.
//! - [`auth`]: the guard in front of every service: each RPC's rule, who
//!   the caller is, its role and namespaces.
//! - [`backend`]: what the gRPC services need from a node (writes through the
//!   log, reads at a consistency, watch subscriptions).
//! - [`node`]: storage, Raft, the servers, the `Cluster` service and the
//!   leader's background duties.
//! - [`raft`]: openraft's network over the `fusebox.v1.Raft` service.
//! - [`watch`]: snapshot-then-changes watch streams, resumable by revision.
//! - [`metrics`]: Prometheus metrics, `/healthz` and `/readyz`.
//! - [`limits`]: every fixed bound and timing of a node, each with its unit.

#![deny(missing_docs)]

pub mod api;
pub mod auth;
pub mod backend;
pub mod limits;
pub mod metrics;
pub mod node;
pub mod raft;
pub mod watch;
