//! Policy versions and the kill switch between wire and core.
//!
//! The core stores a version's parsed document, not the operator's text, so
//! a version goes out as its canonical TOML (format TOML) with the SHA-256
//! of that text: two versions with equal documents have equal digests
//! whatever format or key order they were written in.

use crate::status;
use fusebox_core::machine::{KillSwitch, PolicyVersion};
use fusebox_core::policy::{PolicyDocument, PolicyFormat};
use fusebox_core::Namespace;
use fusebox_proto::v1 as pb;
use sha2::{Digest, Sha256};
use tonic::Status;

/// Lowercase hex SHA-256 of a document's text.
pub fn digest(text: &str) -> String {
    fusebox_core::hex::lower(&Sha256::digest(text.as_bytes()))
}

/// A document format from the wire; the server refuses to guess.
pub fn format_from_proto(value: i32) -> Result<PolicyFormat, Status> {
    match pb::PolicyFormat::try_from(value) {
        Ok(pb::PolicyFormat::Toml) => Ok(PolicyFormat::Toml),
        Ok(pb::PolicyFormat::Yaml) => Ok(PolicyFormat::Yaml),
        Ok(pb::PolicyFormat::Unspecified) | Err(_) => Err(status::invalid_argument(
            "format",
            "enum",
            "must be POLICY_FORMAT_TOML or POLICY_FORMAT_YAML",
        )),
    }
}

/// A stored version on the wire, with or without its document text.
pub fn version_to_proto(
    ns: &Namespace,
    v: &PolicyVersion,
    with_document: bool,
) -> pb::PolicyVersion {
    let text = v.document.to_toml();
    pb::PolicyVersion {
        namespace: ns.to_string(),
        version: v.version,
        digest: digest(&text),
        document: if with_document { text } else { String::new() },
        format: pb::PolicyFormat::Toml as i32,
        actor: v.actor.clone(),
        reason: v.reason.clone(),
        applied_at_ms: v.applied_at.as_millis(),
        rollback_of: v.rolled_back_from,
    }
}

/// What a dry run would store: the next version, not yet applied.
pub fn draft_to_proto(
    ns: &Namespace,
    version: u64,
    document: &PolicyDocument,
    actor: &str,
    reason: &str,
) -> pb::PolicyVersion {
    let text = document.to_toml();
    pb::PolicyVersion {
        namespace: ns.to_string(),
        version,
        digest: digest(&text),
        document: text,
        format: pb::PolicyFormat::Toml as i32,
        actor: actor.to_owned(),
        reason: reason.to_owned(),
        applied_at_ms: 0,
        rollback_of: None,
    }
}

/// The kill switch on the wire; never thrown reads as off at time 0.
pub fn kill_switch_to_proto(switch: Option<&KillSwitch>) -> pb::KillSwitch {
    switch.map_or_else(pb::KillSwitch::default, |k| pb::KillSwitch {
        writes_blocked: k.writes_blocked,
        reason: k.reason.clone(),
        actor: k.actor.clone(),
        changed_at_ms: k.at.as_millis(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_documents_have_equal_digests_across_formats() {
        let toml = PolicyDocument::parse("[defaults]\ntimeout_ms = 3000\n", PolicyFormat::Toml);
        let yaml = PolicyDocument::parse("defaults:\n  timeout_ms: 3000\n", PolicyFormat::Yaml);
        let (Ok(toml), Ok(yaml)) = (toml, yaml) else {
            panic!("both documents are valid");
        };
        let ns = Namespace::new("fleet").unwrap_or_else(|_| unreachable!());
        let a = draft_to_proto(&ns, 1, &toml, "a", "");
        let b = draft_to_proto(&ns, 1, &yaml, "a", "");
        assert_eq!(a.digest, b.digest);
        assert_eq!(a.digest.len(), 64);
    }

    #[test]
    fn digests_are_sha256_hex() {
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn unspecified_format_is_refused() {
        assert!(format_from_proto(0).is_err());
        assert_eq!(format_from_proto(2).ok(), Some(PolicyFormat::Yaml));
    }
}
