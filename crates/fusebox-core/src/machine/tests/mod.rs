//! Unit tests of the state machine, one file per command family (no IO).

mod probes;
mod tools;
