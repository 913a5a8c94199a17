//! The nemesis test's parts on their own, without root: the relay's delay,
//! history files and their check, and the probe-permit count. (The nemesis
//! test itself has its own `main`, where `#[test]`s would not run.)

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

mod breakers;
mod cluster;
mod history;
mod lab;
mod nemesis;
mod relay;
mod workload;
