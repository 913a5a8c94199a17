//! The access rule of every RPC a node serves, in one table.
//!
//! The guard ([`super::guard`]) looks a call's path up here before anything
//! else; a path with no rule is refused, so an RPC added later is closed
//! until someone writes its rule (and the table-driven test in
//! `tests/auth.rs` fails until then).

use fusebox_core::auth::Role;

/// Who may call an RPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Anyone, authenticated or not (health checks).
    Public,
    /// Members only: the Raft transport, which checks the sender's member
    /// certificate itself (`raft::service`), never a caller's token.
    Peer,
    /// Principals holding at least this role; `namespaced` RPCs also need a
    /// grant for the request's namespace, checked by the handler.
    Role {
        /// The weakest role allowed.
        min: Role,
        /// Whether the request names a namespace the caller must hold.
        namespaced: bool,
    },
}

const fn ns(min: Role) -> Rule {
    Rule::Role {
        min,
        namespaced: true,
    }
}

const fn cluster(min: Role) -> Rule {
    Rule::Role {
        min,
        namespaced: false,
    }
}

/// Every RPC path and its rule.
pub const RULES: &[(&str, Rule)] = &[
    // Breakers.
    ("/fusebox.v1.Breakers/Watch", ns(Role::Agent)),
    ("/fusebox.v1.Breakers/ReportOutcomes", ns(Role::Agent)),
    ("/fusebox.v1.Breakers/AcquireProbe", ns(Role::Agent)),
    ("/fusebox.v1.Breakers/ReleaseProbe", ns(Role::Agent)),
    ("/fusebox.v1.Breakers/GetBreaker", ns(Role::Reader)),
    ("/fusebox.v1.Breakers/ListBreakers", ns(Role::Reader)),
    ("/fusebox.v1.Breakers/BreakerHistory", ns(Role::Reader)),
    ("/fusebox.v1.Breakers/ForceOpen", ns(Role::Operator)),
    ("/fusebox.v1.Breakers/Reset", ns(Role::Operator)),
    ("/fusebox.v1.Breakers/Disable", ns(Role::Operator)),
    ("/fusebox.v1.Breakers/SetMetricsOnly", ns(Role::Operator)),
    // Ledger.
    ("/fusebox.v1.Ledger/Begin", ns(Role::Agent)),
    ("/fusebox.v1.Ledger/Complete", ns(Role::Agent)),
    ("/fusebox.v1.Ledger/Renew", ns(Role::Agent)),
    // Carries Begin and Complete calls, each admitted again by its own
    // rule, namespace included, when it arrives.
    ("/fusebox.v1.Ledger/Pipeline", cluster(Role::Agent)),
    ("/fusebox.v1.Ledger/Lookup", ns(Role::Reader)),
    ("/fusebox.v1.Ledger/List", ns(Role::Reader)),
    ("/fusebox.v1.Ledger/Resolve", ns(Role::Operator)),
    // Policy and the kill switch.
    ("/fusebox.v1.Policy/Get", ns(Role::Reader)),
    ("/fusebox.v1.Policy/History", ns(Role::Reader)),
    ("/fusebox.v1.Policy/GetKillSwitch", ns(Role::Reader)),
    ("/fusebox.v1.Policy/Apply", ns(Role::Operator)),
    ("/fusebox.v1.Policy/Rollback", ns(Role::Operator)),
    ("/fusebox.v1.Policy/SetKillSwitch", ns(Role::Operator)),
    // Listed per grant by the handler; deleting frees a cluster-wide place.
    ("/fusebox.v1.Policy/ListNamespaces", cluster(Role::Reader)),
    ("/fusebox.v1.Policy/DeleteNamespace", ns(Role::Admin)),
    // Tools.
    ("/fusebox.v1.Tools/List", ns(Role::Reader)),
    ("/fusebox.v1.Tools/Get", ns(Role::Reader)),
    ("/fusebox.v1.Tools/EmitDisclosure", ns(Role::Agent)),
    ("/fusebox.v1.Tools/Import", ns(Role::Operator)),
    // Cluster: status for anyone known (namespaces filtered to the grant).
    ("/fusebox.v1.Cluster/Status", cluster(Role::Reader)),
    ("/fusebox.v1.Cluster/AddMember", cluster(Role::Admin)),
    ("/fusebox.v1.Cluster/RemoveMember", cluster(Role::Admin)),
    ("/fusebox.v1.Cluster/TransferLeader", cluster(Role::Admin)),
    // Auth.
    ("/fusebox.v1.Auth/WhoAmI", cluster(Role::Reader)),
    ("/fusebox.v1.Auth/IssueToken", cluster(Role::Admin)),
    ("/fusebox.v1.Auth/Grant", cluster(Role::Admin)),
    ("/fusebox.v1.Auth/RevokeToken", cluster(Role::Admin)),
    ("/fusebox.v1.Auth/RemovePrincipal", cluster(Role::Admin)),
    ("/fusebox.v1.Auth/ListPrincipals", cluster(Role::Admin)),
    ("/fusebox.v1.Auth/SetEnabled", cluster(Role::Admin)),
    // Raft: members only, by certificate.
    ("/fusebox.v1.Raft/AppendEntries", Rule::Peer),
    ("/fusebox.v1.Raft/StreamAppend", Rule::Peer),
    ("/fusebox.v1.Raft/Vote", Rule::Peer),
    ("/fusebox.v1.Raft/InstallSnapshot", Rule::Peer),
    ("/fusebox.v1.Raft/TransferLeader", Rule::Peer),
    // Health: `Check` only, which is what probes call (Kubernetes,
    // grpc_health_probe). `Watch` would be an open stream anyone may hold
    // with no credentials, so it has no rule and is refused.
    ("/grpc.health.v1.Health/Check", Rule::Public),
];

/// The rule for a call's path, if it has one.
pub fn rule_for(path: &str) -> Option<Rule> {
    RULES
        .iter()
        .find(|(rpc, _)| *rpc == path)
        .map(|(_, rule)| *rule)
}
