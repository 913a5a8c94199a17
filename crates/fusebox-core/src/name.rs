//! Validated names: namespaces, servers, tools, backends and replicas.
//!
//! A name is 1..=[`NAME_BYTES_MAX`] bytes of printable ASCII without spaces or
//! `/` (operators address breakers as `NS/SERVER/TOOL`). Validation happens
//! once, at construction, so the engines can trust every name they hold.

use crate::error::CoreError;
use crate::limits::NAME_BYTES_MAX;
use serde::{Deserialize, Serialize};
use std::fmt;

fn validate(field: &'static str, value: &str) -> Result<(), CoreError> {
    crate::error::check_len(field, value, NAME_BYTES_MAX)?;
    // Bytes first (every name on every decoded entry passes here); a byte
    // past ASCII is not graphic, so any other character stops it too.
    if value.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Ok(());
    }
    if let Some(bad) = value.chars().find(|c| !c.is_ascii_graphic() || *c == '/') {
        return Err(CoreError::invalid(
            field,
            format!("character {bad:?} not allowed (printable ASCII without spaces or '/')"),
        ));
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
        #[serde(try_from = "String")]
        pub struct $ty(String);

        /// As its text, borrowed (`into = "String"` would copy it first).
        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl $ty {
            /// Validates and wraps a name.
            pub fn new(value: impl Into<String>) -> Result<Self, CoreError> {
                let value = value.into();
                validate($field, &value)?;
                Ok($ty(value))
            }

            /// The name as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $ty {
            type Error = CoreError;
            fn try_from(value: String) -> Result<Self, CoreError> {
                $ty::new(value)
            }
        }

        impl From<$ty> for String {
            fn from(value: $ty) -> String {
                value.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

name_type!(
    /// One fleet or tenant; every breaker, record and policy lives in one.
    Namespace,
    "namespace"
);
name_type!(
    /// A tool server (an MCP server, an HTTP API host).
    ServerName,
    "server"
);
name_type!(
    /// One tool exposed by a server.
    ToolName,
    "tool"
);
name_type!(
    /// A backend or target that narrows a tool breaker (`scope = tool_and_backend`).
    BackendName,
    "backend"
);
name_type!(
    /// One agent replica; distinct replicas are the evidence `min_reporters` counts.
    ReplicaId,
    "replica"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_plain_identifiers() {
        assert!(ToolName::new("tax_lookup").is_ok());
        assert!(ServerName::new("billing-api.prod:443").is_ok());
    }

    #[test]
    fn names_refuse_empty_slash_space_and_long() {
        assert!(ToolName::new("").is_err());
        assert!(ToolName::new("a/b").is_err());
        assert!(ToolName::new("a b").is_err());
        assert!(ToolName::new("x".repeat(NAME_BYTES_MAX + 1)).is_err());
        assert!(ToolName::new("x".repeat(NAME_BYTES_MAX)).is_ok());
    }

    #[test]
    fn names_validate_when_deserialized() {
        let bad: Result<ToolName, _> = serde_json::from_str("\"a/b\"");
        assert!(bad.is_err());
    }
}
