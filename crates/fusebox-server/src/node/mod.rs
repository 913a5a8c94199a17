//! One Fusebox node: storage, Raft, services and background duties.

pub mod backend;
pub mod cluster;
pub mod coalescer;
pub mod contact;
pub mod env;
pub mod incoming;
pub mod init_auth;
pub mod observer;
pub mod start;

pub use backend::RaftBackend;
pub use env::{Clock, InjectedBugs, NodeEnv};
pub use fusebox_api::config::{self, NodeConfig, Timing};
pub use start::{start, start_in, RunningNode, StartError};
