//! Fusebox's core: the pure, deterministic logic of a fleet-wide circuit
//! breaker and idempotency ledger.
//!
//! This crate is the part of Fusebox that decides. It holds the breaker
//! engine ([`breaker`]), the idempotency ledger ([`ledger`]), the policy model
//! ([`policy`]), latency disclosure ([`disclosure`]), the tools registry
//! ([`tools`]) and the replicated state machine that ties them together
//! ([`machine`]). It does no IO: no tokio, no tonic, no RocksDB, no clock. The server crate feeds it Raft entries; the
//! client crate uses its admission rules against a cached view.
//!
//! Invariants this crate keeps, and tests:
//! - **Determinism.** The same commands with the same entry timestamps give
//!   the same state and the same answers on every replica. Time is a value on
//!   the entry ([`Timestamp`]); collections are walked in key order
//!   (`BTreeMap`, or a `KeyedMap` whose hash index is only looked up),
//!   never in hash order.
//! - **Fencing.** Every breaker change bumps its generation; generations only
//!   grow, and reports or probe results carrying a stale generation are
//!   ignored.
//! - **Probes.** A probe permit is granted only while fewer than the policy's
//!   `concurrent_probes` are out, fleet-wide. Lowering the bound revokes
//!   nothing (holders are mid-call); it stops grants until the count is below.
//!   A server's permit and its tools' permits exclude each other (a server's
//!   probe is a call on one of its tools), so no tool sees two probes at once.
//! - **At most one started.** A ledger key answers `started` to a second
//!   attempt only after an explicit release (a failure before execution, an
//!   operator's "not done") or, for idempotent writes only, a lease expiry. A
//!   non-idempotent write whose lease expires becomes ambiguous, never free.
//! - **Bounds.** Every size is limited by a constant in [`limits`]; inputs
//!   over a limit are refused with a [`CoreError`] before they touch state.

#![deny(missing_docs)]

pub mod auth;
pub mod breaker;
pub mod disclosure;
pub mod error;
pub mod hex;
mod keyed;
pub mod ledger;
pub mod limits;
pub mod machine;
pub mod name;
pub mod outcome;
pub mod policy;
pub mod time;
pub mod tools;

pub use error::CoreError;
pub use name::{BackendName, Namespace, ReplicaId, ServerName, ToolName};
pub use outcome::{OutcomeClass, Verdict};
pub use time::Timestamp;
