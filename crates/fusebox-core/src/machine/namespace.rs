//! Per-namespace settings: policy versions and the write kill switch.

use super::state_machine::DEFAULT_POLICY;
use crate::breaker::BreakerKey;
use crate::keyed::Hashing;
use crate::limits::POLICY_VERSIONS_MAX;
use crate::name::{Namespace, ServerName, ToolName};
use crate::policy::{BreakerPolicy, PolicyDocument, Scope};
use crate::time::Timestamp;
use crate::tools::ToolId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::Arc;

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
    /// Tools resolved under this version so far (derived, never encoded):
    /// a new version starts with none.
    #[serde(skip)]
    pub(crate) resolved: ResolvedTools,
}

/// What one tool resolves to under one policy version: its two breakers'
/// policies, and the keys and id its outcomes count on.
#[derive(Debug)]
pub(crate) struct ToolResolution {
    pub(crate) id: ToolId,
    pub(crate) server_key: BreakerKey,
    pub(crate) server_breaker: BreakerPolicy,
    /// The tool's key under `Scope::Tool` (a backend-scoped tool's key
    /// depends on each call's backend).
    pub(crate) tool_key: BreakerKey,
    pub(crate) scope: Scope,
    pub(crate) tool_breaker: BreakerPolicy,
}

impl ToolResolution {
    /// Resolves `server`/`tool` of `ns` under `document`.
    pub(crate) fn resolve(
        document: &PolicyDocument,
        ns: &Namespace,
        server: &ServerName,
        tool: &ToolName,
    ) -> ToolResolution {
        let policy = document.tool_policy(server, tool);
        ToolResolution {
            id: ToolId {
                namespace: ns.clone(),
                server: server.clone(),
                tool: tool.clone(),
            },
            server_key: BreakerKey::server(ns.clone(), server.clone()),
            server_breaker: document.server_breaker(server),
            tool_key: BreakerKey::tool(ns.clone(), server.clone(), tool.clone()),
            scope: policy.scope,
            tool_breaker: policy.breaker,
        }
    }
}

/// The tools resolved under one policy version, at most
/// [`RESOLVED_TOOLS_MAX`]; past it, tools are resolved on every use. It is
/// state derived from the version, so copies start empty and it never
/// makes two states differ. Hashed: it is only looked up, never walked.
#[derive(Default)]
pub(crate) struct ResolvedTools {
    /// By server, then tool, so a lookup borrows the names.
    by_server: HashMap<ServerName, HashMap<ToolName, Arc<ToolResolution>, Hashing>, Hashing>,
    count: usize,
}

/// Tools one policy version keeps resolved.
const RESOLVED_TOOLS_MAX: usize = 4_096;

impl ResolvedTools {
    /// `server`/`tool` under `document`, resolved once.
    pub(crate) fn get(
        &mut self,
        document: &PolicyDocument,
        ns: &Namespace,
        server: &ServerName,
        tool: &ToolName,
    ) -> Arc<ToolResolution> {
        if let Some(found) = self.find(server, tool) {
            return found.clone();
        }
        let resolved = Arc::new(ToolResolution::resolve(document, ns, server, tool));
        if self.count < RESOLVED_TOOLS_MAX {
            self.keep(server, tool, resolved.clone());
        }
        resolved
    }

    fn find(&self, server: &ServerName, tool: &ToolName) -> Option<&Arc<ToolResolution>> {
        self.by_server.get(server).and_then(|tools| tools.get(tool))
    }

    fn keep(&mut self, server: &ServerName, tool: &ToolName, resolved: Arc<ToolResolution>) {
        self.by_server
            .entry(server.clone())
            .or_default()
            .insert(tool.clone(), resolved);
        self.count += 1;
    }
}

/// Tools resolved under the built-in defaults, in namespaces that have no
/// policy, at most [`RESOLVED_TOOLS_MAX`] in all; past it, tools are
/// resolved on every use. The defaults never change, so a resolution
/// stays true for as long as its namespace has no policy (and is used only
/// then); like [`ResolvedTools`], copies start empty and it never makes two
/// states differ.
#[derive(Default)]
pub(crate) struct DefaultResolved {
    by_namespace: HashMap<Namespace, ResolvedTools, Hashing>,
    count: usize,
}

impl DefaultResolved {
    /// `server`/`tool` of `ns` under the built-in defaults, resolved once.
    pub(crate) fn get(
        &mut self,
        ns: &Namespace,
        server: &ServerName,
        tool: &ToolName,
    ) -> Arc<ToolResolution> {
        let kept = self.by_namespace.get(ns);
        if let Some(found) = kept.and_then(|tools| tools.find(server, tool)) {
            return found.clone();
        }
        let resolved = Arc::new(ToolResolution::resolve(&DEFAULT_POLICY, ns, server, tool));
        if self.count < RESOLVED_TOOLS_MAX {
            // Looked up before `entry`, which would copy the name every time.
            if !self.by_namespace.contains_key(ns) {
                self.by_namespace
                    .insert(ns.clone(), ResolvedTools::default());
            }
            if let Some(tools) = self.by_namespace.get_mut(ns) {
                tools.keep(server, tool, resolved.clone());
                self.count += 1;
            }
        }
        resolved
    }

    /// Lets `ns`'s tools go (it has a policy now, or is gone), so the room
    /// they took serves namespaces still on the defaults.
    pub(crate) fn forget(&mut self, ns: &Namespace) {
        if let Some(tools) = self.by_namespace.remove(ns) {
            self.count = self.count.saturating_sub(tools.count);
        }
    }
}

/// State derived from the replicated state, kept only to save work: a copy
/// starts empty (as a restored snapshot does), two of them always compare
/// equal, and `Debug` shows how many tools they hold.
macro_rules! derived_state {
    ($($ty:ident),*) => {$(
        impl Clone for $ty {
            fn clone(&self) -> Self {
                $ty::default()
            }
        }

        impl PartialEq for $ty {
            fn eq(&self, _: &Self) -> bool {
                true
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($ty), self.count)
            }
        }
    )*};
}

derived_state!(ResolvedTools, DefaultResolved);

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
        // Only the version in force is resolved against; the one it
        // replaces lets its tools go.
        if let Some(previous) = self.policies.back_mut() {
            previous.resolved = ResolvedTools::default();
        }
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
            resolved: ResolvedTools::default(),
        });
        version
    }

    /// Whether writes are blocked.
    pub fn writes_blocked(&self) -> bool {
        self.kill_switch.as_ref().is_some_and(|k| k.writes_blocked)
    }
}
