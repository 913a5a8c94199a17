//! The Fusebox agent SDK: the gate every tool call of an agent replica
//! passes through.
//!
//! An agent replica embeds one [`Client`]. It keeps a local copy of the
//! namespace (breaker states, the policy in force, the write kill switch,
//! latency disclosures) fed by the cluster's watch stream, so the admission
//! decision for a CLOSED or OPEN breaker is a read of local memory with no
//! network call ([`Client::admit`]). Around that decision it runs the tool
//! call itself ([`Client::call`] for reads, [`Client::write`] for writes
//! through the idempotency ledger) with a deadline, cancellation, bounded
//! retries and an error a model can plan around ([`ClientError`]).
//!
//! How a call goes:
//! 1. the [`Journey`] (one agent turn) must still have budget once its
//!    reserve for the final answer is set aside, or the call fails with
//!    `budget_exhausted` before anything is sent;
//! 2. the local view decides: allow, reject (`circuit_open`), or, in
//!    HALF_OPEN, ask the cluster for one of the fleet-wide probe permits;
//!    when the view is older than its bound the breaker's `on_partition`
//!    rule decides instead (a local breaker scaled to one replica, or fail
//!    closed) and the decision is marked degraded;
//! 3. the tool runs under a deadline (the policy's `timeout_ms`, or p99 × 1.2
//!    from a fresh latency disclosure), capped by the journey's budget less
//!    its reserve; when it expires the call's future is dropped and the
//!    [`CancellationToken`](tokio_util::sync::CancellationToken) handed to
//!    the call fires, and the error names the layer that expired;
//! 4. the outcome goes into a bounded buffer flushed to the cluster in
//!    batches; a full buffer drops and counts, it never blocks a call;
//! 5. a retryable failure of a read-only or retry-safe tool is retried with
//!    exponential backoff and jitter, a new attempt id each time, while the
//!    journey has budget; a non-idempotent write never is.
//!
//! Invariants this crate keeps:
//! - **No unbounded wait.** Every network call has a deadline; every queue
//!   and buffer has a bound, each named with its unit in `config.rs`: a
//!   field of [`ClientConfig`] when a replica may tune it, a constant
//!   beside it when not.
//! - **Inner before outer.** A tool's deadline never reaches past the
//!   journey's budget less its reserve, so the agent always has time left to
//!   answer.
//! - **One intent, one effect.** A write runs only on a ledger `started`
//!   answer; a write whose request may have left without an answer is
//!   recorded ambiguous and never sent again by this crate.
//! - **Degraded is said.** Every decision made without a fresh view carries
//!   `degraded = true`.
//!
//! The deciding logic (admission from a breaker view, breaker engines for the
//! local fallback, policy resolution, disclosure rules) is
//! [`fusebox_core`]'s; this crate adapts it to the network and the clock.

#![deny(missing_docs)]

mod call;
mod client;
mod config;
mod convert;
mod decision;
mod endpoints;
mod env;
mod error;
mod journey;
mod local_breakers;
mod metrics;
pub mod pipeline;
mod probe;
mod reporter;
mod retry;
mod tool;
mod view;
mod watch;
mod write;

pub use client::Client;
pub use config::ClientConfig;
pub use decision::{Decision, Evidence};
pub use env::{ClientEnv, Clock};
pub use error::{ClientError, Forced, Layer};
pub use journey::Journey;
pub use metrics::MetricsSnapshot;
pub use retry::backoff_ms;
pub use tool::{CallContext, CallOutput, Started, ToolFailure, ToolRef};
pub use view::ViewStatus;
pub use write::{WriteOutput, WriteRequest, WriteSuccess};

pub use fusebox_core::breaker::{Admission, BreakerState, RejectScope};
pub use fusebox_core::ledger::derive_key;
pub use fusebox_core::policy::{Classification, EffectClass, OnPartition, Verdict};
pub use fusebox_core::OutcomeClass;
pub use fusebox_proto::tls::ClientTlsFiles;
pub use fusebox_proto::v1 as proto;
pub use tokio_util::sync::CancellationToken;
