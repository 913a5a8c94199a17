//! Deriving a stable idempotency key from what identifies an intent.
//!
//! The operations runbook derives the key of an approved write from its
//! intent id, target, environment and approval id, without embedding secrets.
//! Components are length-prefixed before hashing, so `("ab", "c")` and
//! `("a", "bc")` give different keys.

use sha2::{Digest, Sha256};

/// Prefix that versions the derivation.
pub const DERIVED_KEY_PREFIX: &str = "fbx1-";

/// A stable key: the same components always give the same key.
pub fn derive_key(intent_id: &str, target: &str, environment: &str, approval_id: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [intent_id, target, environment, approval_id] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    format!("{DERIVED_KEY_PREFIX}{}", crate::hex::lower(&digest[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_are_stable_and_unambiguous() {
        let a = derive_key("intent-1", "job-42", "prod", "appr-7");
        assert_eq!(a, derive_key("intent-1", "job-42", "prod", "appr-7"));
        assert_eq!(a.len(), DERIVED_KEY_PREFIX.len() + 32);
        assert_ne!(a, derive_key("intent-1", "job-42", "staging", "appr-7"));
        assert_ne!(derive_key("ab", "c", "", ""), derive_key("a", "bc", "", ""));
    }
}
