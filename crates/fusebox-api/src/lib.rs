//! What a Fusebox node takes from outside before anything reaches its
//! storage, in a crate that builds without RocksDB, so that the fuzz
//! targets (`fuzz/`) exercise the node's own code:
//!
//! - [`convert`]: every `fusebox.v1` request field checked at the boundary
//!   and turned into core values, and core values rendered as messages;
//! - [`status`]: failures as gRPC statuses, each with a
//!   [`FuseboxErrorDetail`](fusebox_proto::v1::FuseboxErrorDetail);
//! - [`Caller`]: who a request comes from, as the node's guard established it;
//! - [`NodeConfig`]: one node's settings, from flags or its TOML file;
//! - [`manifest`]: a saved MCP `tools/list` read into the tools an import
//!   manifest carries (`fusebox tools import`);
//! - [`raft_codec`]: openraft's messages inside `fusebox.v1.Raft` RPCs;
//! - [`limits`]: the bounds the request checks apply.
//!
//! The node (`fusebox-server`) re-exports each where it used to live.

#![deny(missing_docs)]

pub mod caller;
pub mod config;
pub mod convert;
pub mod limits;
pub mod manifest;
pub mod raft_codec;
pub mod status;

pub use caller::{Caller, Via};
pub use config::{CallerLimits, NodeConfig, Timing};
