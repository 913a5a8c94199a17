//! The idempotency ledger: one intent, at most one backend effect.
//!
//! A write tool calls `begin` with its key before the call and `complete`
//! after it. `begin` answers exactly one of started, in progress, completed
//! (replay), mismatch or ambiguous. The rules live in [`rules`] as pure
//! functions of one record; [`LedgerStore`] is where records and their
//! indexes live (in memory: [`Ledger`]; the server keeps them in RocksDB),
//! and carries the operations, so every store answers alike.
//!
//! Invariants:
//! - a key answers `started` to a second attempt only after an explicit
//!   release (failed before execution, an operator's "not done") or, for an
//!   idempotent write only, after the holder's lease lapsed;
//! - a non-idempotent write whose lease lapses becomes AMBIGUOUS, never free;
//! - ambiguous and in-progress records are never purged by retention; final
//!   and released records are, after the namespace's retention period.

mod key;
mod memory;
mod record;
mod request;
pub mod rules;
mod store;

pub use key::{derive_key, DERIVED_KEY_PREFIX};
pub use memory::Ledger;
pub use record::{AmbiguityCause, Decision, Record, Resolution, Status};
pub use request::{
    check_lease, BeginRequest, CompleteRequest, Completion, RenewRequest, ResolveRequest,
};
pub use rules::{BeginAnswer, CompleteAnswer, RenewAnswer, ResolveAnswer};
pub use store::{deadline, BoxedLedger, Index, LedgerStore, ListFilter, Page};
