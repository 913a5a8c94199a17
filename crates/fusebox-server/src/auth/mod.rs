//! Who may call what: the guard in front of every service, the per-RPC rule
//! table, and the caller a handler checks namespaces against.
//!
//! - [`rules`]: every RPC's minimum role, in one table; an RPC without a
//!   rule is refused.
//! - [`guard`]: recognises the caller (bearer token, member-forwarded name,
//!   client certificate) from the auth table this node last applied, and
//!   checks its role, before the request body is read.
//! - [`limits`]: per-caller bounds on request rate and open watch streams.
//! - [`Caller`] (from `fusebox_api`): what the handler gets; it checks the request's namespace
//!   against the caller's grant ([`Caller::require`]) and takes the audit's
//!   actor from it ([`Caller::actor`]).
//!
//! The table itself (principals, hashed tokens, enforcement) is replicated
//! state: `fusebox_core::auth`.

pub mod guard;
pub mod limits;
pub mod rules;

pub use fusebox_api::caller::{self, Caller, Via};
pub use guard::{
    Admitted, Guard, GuardLayer, Membership, PublishedAuth, Readmit, Recheck,
    FORWARDED_CALLER_HEADER, PIPELINE_PATH,
};
pub use limits::{CallerLimits, StreamPermit};
