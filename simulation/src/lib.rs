//! Deterministic simulation of a Fusebox cluster and a fleet of agent
//! replicas under faults.
//!
//! A run puts the real server ([`fusebox_server`], over RocksDB) and the
//! real SDK ([`fusebox_client`]) on turmoil's simulated network and clock.
//! Everything random (message latency and loss, host order, election
//! timeouts, the workload, the fault schedule, the scripted tools) is drawn
//! from one seed, so a seed replays exactly; [`run::run`] returns the
//! run's trace, its digest and every invariant it saw broken.
//!
//! - [`nodes`], [`agents`], [`operator`]: the hosts.
//! - [`tools`], [`scenario`]: what the remote tools do, and when.
//! - [`faults`]: partitions, one-way loss, leader isolation, crashes,
//!   message loss, latency, clock skew and membership changes.
//! - [`check`]: the invariants.
//! - [`incident`]: what one slow tool costs a fleet, in each setup.
#![deny(missing_docs)]

pub mod agents;
pub mod check;
pub mod exercises;
pub mod faults;
pub mod incident;
pub mod net;
pub mod nodes;
pub mod operator;
pub mod run;
pub mod scenario;
pub mod storage;
pub mod tools;
pub mod trace;
pub mod world;

pub use run::{run, RunOptions, RunReport};
pub use scenario::Scenario;
