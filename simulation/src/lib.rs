//! Deterministic simulation of a Fusebox cluster and a fleet of agent
//! replicas under faults.
#![deny(missing_docs)]

pub mod net;
