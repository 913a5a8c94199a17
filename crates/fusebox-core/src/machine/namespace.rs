//! Per-namespace settings: policy versions and the write kill switch.

use crate::limits::POLICY_VERSIONS_MAX;
use crate::policy::PolicyDocument;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// One stored policy version.
///
/// In binary encodings (snapshots, log entries) the document travels as its
/// canonical TOML and is decoded without re-validation, so a rule tightened
/// in a later release never makes an old snapshot unreadable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyVersion {
    /// Version number, from 1, growing by one per apply or rollback.
    pub version: u64,
    /// The validated document.
    pub document: PolicyDocument,
    /// When it was applied.
    pub applied_at: Timestamp,
    /// Who applied it.
    pub actor: String,
    /// Why it was applied, in the operator's words.
    pub reason: String,
    /// The version it restored, for a rollback.
    pub rolled_back_from: Option<u64>,
}

/// The write kill switch of a namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillSwitch {
    /// Whether write-effect tools are blocked.
    pub writes_blocked: bool,
    /// Who set it last.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// When.
    pub at: Timestamp,
}

/// Everything a namespace holds besides breakers and ledger records.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NamespaceState {
    /// Policy versions, oldest first, at most [`POLICY_VERSIONS_MAX`].
    pub policies: VecDeque<PolicyVersion>,
    /// The kill switch, once set.
    pub kill_switch: Option<KillSwitch>,
}

impl NamespaceState {
    /// The policy in force (built-in defaults before the first apply).
    pub fn policy(&self) -> Option<&PolicyVersion> {
        self.policies.back()
    }

    /// The version number in force (0 before the first apply).
    pub fn policy_version(&self) -> u64 {
        self.policy().map_or(0, |p| p.version)
    }

    /// A stored version, if it has not rolled off.
    pub fn version(&self, version: u64) -> Option<&PolicyVersion> {
        self.policies.iter().find(|p| p.version == version)
    }

    /// Stores a new version; returns its number.
    pub fn push_policy(
        &mut self,
        document: PolicyDocument,
        at: Timestamp,
        actor: &str,
        reason: &str,
        rolled_back_from: Option<u64>,
    ) -> u64 {
        let version = self.policy_version() + 1;
        if self.policies.len() >= POLICY_VERSIONS_MAX {
            self.policies.pop_front();
        }
        self.policies.push_back(PolicyVersion {
            version,
            document,
            applied_at: at,
            actor: actor.to_owned(),
            reason: reason.to_owned(),
            rolled_back_from,
        });
        version
    }

    /// Whether writes are blocked.
    pub fn writes_blocked(&self) -> bool {
        self.kill_switch.as_ref().is_some_and(|k| k.writes_blocked)
    }
}
