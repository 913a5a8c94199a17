//! The breaker engine: fleet-wide circuit breakers driven by a replicated log.
//!
//! A breaker is keyed by [`BreakerKey`]: a whole server, a tool, or a tool on
//! one backend. Its automatic machine moves CLOSED → OPEN → HALF_OPEN →
//! CLOSED (or back to OPEN) on evidence from every replica's outcome reports;
//! operators can override it with FORCED_OPEN, DISABLED or METRICS_ONLY.
//!
//! Invariants:
//! - every change bumps the generation, which only grows; reports and probe
//!   results carrying another generation are ignored;
//! - a permit is granted only while fewer than the policy's
//!   `concurrent_probes` are out (lowering the bound revokes nothing); a
//!   permit is a lease that lapses if its holder dies;
//! - with `min_reporters = n`, failures from fewer than `n` distinct replicas
//!   never open a breaker;
//! - every transition is audited with its evidence (bounded per breaker).
//!
//! Time is passed in; [`Breaker::advance`] applies what time alone changes.

mod audit;
mod engine;
mod evidence;
mod key;
mod state;
mod view;

pub use audit::{AuditEntry, Cause, Evidence};
pub use engine::{Breaker, Observation, ProbeAnswer, ProbeResult, Recorded};
pub use evidence::{Counts, Reporters, SlidingWindow, WINDOW_BUCKETS};
pub use key::BreakerKey;
pub use state::{BreakerState, Mode, Permit, Phase};
pub use view::{admit, Admission, BreakerView, RejectScope};
