//! Unit tests of the policy model, one file per part (no IO).

mod document;
mod failover;
