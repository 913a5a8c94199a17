//! One Fusebox node: storage, Raft, services and background duties.

pub mod backend;
pub mod cluster;
pub mod coalescer;
pub mod config;
pub mod observer;
pub mod start;

pub use backend::RaftBackend;
pub use config::{NodeConfig, Timing};
pub use start::{start, RunningNode, StartError};
