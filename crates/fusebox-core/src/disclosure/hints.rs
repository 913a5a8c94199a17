//! MCP tool hints, and the effect class they imply when policy is silent.

use serde::{Deserialize, Serialize};

use crate::policy::EffectClass;

/// The behaviour hints an MCP server puts in a tool's `annotations`
/// (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`),
/// each `None` when the manifest leaves it out.
///
/// Hints are the publisher's claims, not guarantees: the namespace's policy
/// overrides them, and they only decide a tool's effect class where the
/// policy says nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpHints {
    /// `readOnlyHint`: the tool does not modify its environment.
    pub read_only: Option<bool>,
    /// `destructiveHint`: a modifying tool may destroy data (not merely add).
    pub destructive: Option<bool>,
    /// `idempotentHint`: repeating a call with the same arguments has no
    /// further effect.
    pub idempotent: Option<bool>,
    /// `openWorldHint`: the tool reaches entities outside a closed domain.
    pub open_world: Option<bool>,
}

impl McpHints {
    /// The effect class the hints imply, read with the MCP defaults for an
    /// absent hint (`readOnlyHint` false, `idempotentHint` false):
    ///
    /// - `readOnlyHint: true` → [`EffectClass::ReadOnly`];
    /// - else `idempotentHint: true` → [`EffectClass::IdempotentWrite`];
    /// - else → [`EffectClass::NonIdempotentWrite`].
    ///
    /// A tool that says nothing is thus a write that is never retried
    /// automatically: the runbook's safe reading of an unknown effect.
    /// `destructiveHint` and `openWorldHint` do not change the class (a
    /// destructive write is still a write; retries depend on idempotency).
    pub fn effect(&self) -> EffectClass {
        match (self.read_only, self.idempotent) {
            (Some(true), _) => EffectClass::ReadOnly,
            (_, Some(true)) => EffectClass::IdempotentWrite,
            _ => EffectClass::NonIdempotentWrite,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(read_only: Option<bool>, idempotent: Option<bool>) -> McpHints {
        McpHints {
            read_only,
            idempotent,
            destructive: Some(true),
            open_world: Some(true),
        }
    }

    #[test]
    fn effect_follows_read_only_then_idempotent_then_the_safe_default() {
        let table = [
            (Some(true), None, EffectClass::ReadOnly),
            (Some(true), Some(false), EffectClass::ReadOnly),
            (Some(false), Some(true), EffectClass::IdempotentWrite),
            (None, Some(true), EffectClass::IdempotentWrite),
            (Some(false), Some(false), EffectClass::NonIdempotentWrite),
            (None, None, EffectClass::NonIdempotentWrite),
        ];
        for (read_only, idempotent, expected) in table {
            assert_eq!(
                hints(read_only, idempotent).effect(),
                expected,
                "readOnly {read_only:?} idempotent {idempotent:?}"
            );
        }
        assert_eq!(
            McpHints::default().effect(),
            EffectClass::NonIdempotentWrite
        );
    }
}
