//! Raft between Fusebox nodes: openraft's network over `fusebox.v1.Raft`.
//!
//! [`network`] sends (one lazily connected gRPC channel per peer, every call
//! bounded by openraft's deadline, entries as a pipeline over one stream per
//! replication session); [`service`] receives, checking the cluster id, the
//! addressee and the codec version before decoding.

mod append_stream;
pub use fusebox_api::raft_codec as codec;
pub mod network;
pub mod service;
