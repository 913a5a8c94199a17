//! The one error type of the core.
//!
//! Every variant is *deterministic*: the same input yields the same error on
//! every replica, so an error is an answer to return to the caller, never a
//! reason to stop a node. (IO errors live in the server crate.)

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use thiserror::Error;

/// Why the core refused an input.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum CoreError {
    /// A field is empty, too long or holds characters it may not.
    #[error("invalid {field}: {reason}")]
    InvalidField {
        /// The field's name as the API spells it.
        field: Cow<'static, str>,
        /// The rule it broke.
        reason: String,
    },
    /// A bounded collection is full.
    #[error("limit reached: at most {max} {what}")]
    LimitReached {
        /// What is counted, in plural ("breakers in namespace").
        what: Cow<'static, str>,
        /// The bound.
        max: usize,
    },
    /// A value is larger than its bound allows (a stored result, say).
    #[error("limit {limit} reached: {actual} given, at most {max}")]
    TooLarge {
        /// The bound's name as the API spells it (`stored_result_bytes_max`).
        limit: Cow<'static, str>,
        /// The bound.
        max: u64,
        /// What was given.
        actual: u64,
    },
    /// A policy document failed validation; every problem is listed.
    #[error("policy rejected: {}", crate::policy::render_problems(.0))]
    InvalidPolicy(Vec<crate::policy::PolicyProblem>),
    /// The named thing does not exist.
    #[error("{what} not found: {name}")]
    NotFound {
        /// What was looked up ("namespace", "policy version").
        what: Cow<'static, str>,
        /// The name or id given.
        name: String,
    },
    /// The namespace's write kill switch is thrown: no write may begin.
    #[error("writes are blocked in namespace {namespace} by {actor}: {reason}")]
    WritesBlocked {
        /// The namespace.
        namespace: String,
        /// Who threw the switch.
        actor: String,
        /// Why.
        reason: String,
        /// When it was thrown, in Unix ms.
        since_ms: u64,
    },
    /// A snapshot could not be encoded or decoded.
    #[error("snapshot: {0}")]
    Snapshot(String),
    /// The thing cannot go while something still depends on it.
    #[error("{what} {name} is in use: {reason}")]
    InUse {
        /// What was to change ("namespace").
        what: Cow<'static, str>,
        /// Its name.
        name: String,
        /// What still holds it, and what to do first.
        reason: String,
    },
}

impl CoreError {
    /// Shorthand for [`CoreError::InvalidField`].
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        CoreError::InvalidField {
            field: Cow::Borrowed(field),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`CoreError::LimitReached`].
    pub fn limit(what: &'static str, max: usize) -> Self {
        CoreError::LimitReached {
            what: Cow::Borrowed(what),
            max,
        }
    }

    /// Shorthand for [`CoreError::TooLarge`].
    pub fn too_large(limit: &'static str, max: usize, actual: usize) -> Self {
        CoreError::TooLarge {
            limit: Cow::Borrowed(limit),
            max: u64::try_from(max).unwrap_or(u64::MAX),
            actual: u64::try_from(actual).unwrap_or(u64::MAX),
        }
    }

    /// Shorthand for [`CoreError::NotFound`].
    pub fn not_found(what: &'static str, name: impl Into<String>) -> Self {
        CoreError::NotFound {
            what: Cow::Borrowed(what),
            name: name.into(),
        }
    }
}

/// Checks that `value` is non-empty and at most `max` bytes.
pub fn check_len(field: &'static str, value: &str, max: usize) -> Result<(), CoreError> {
    if value.is_empty() {
        return Err(CoreError::invalid(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(CoreError::invalid(
            field,
            format!("is {} bytes, at most {max} allowed", value.len()),
        ));
    }
    Ok(())
}

/// Checks that `value` is at most `max` bytes (empty allowed).
pub fn check_max_len(field: &'static str, value: &str, max: usize) -> Result<(), CoreError> {
    if value.len() > max {
        return Err(CoreError::invalid(
            field,
            format!("is {} bytes, at most {max} allowed", value.len()),
        ));
    }
    Ok(())
}
