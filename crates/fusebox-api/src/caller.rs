//! Who a request comes from, as the guard established it.

use fusebox_core::auth::{Grant, Role};
use fusebox_core::Namespace;
use std::fmt;
use tonic::{Request, Status};

/// How a caller was recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// A bearer token.
    Token,
    /// A client certificate naming a principal.
    Certificate,
    /// A member forwarding a call it authenticated by certificate.
    Forwarded,
    /// Nothing: enforcement is off and the caller presented nothing.
    Open,
}

impl Via {
    /// The word the API and logs use.
    pub fn name(self) -> &'static str {
        match self {
            Via::Token => "token",
            Via::Certificate => "certificate",
            Via::Forwarded => "forwarded",
            Via::Open => "open",
        }
    }
}

/// An authenticated caller (or the anonymous one, when enforcement is off),
/// in every guarded request's extensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The principal's name; `None` for an anonymous caller.
    pub name: Option<String>,
    /// Its role.
    pub role: Role,
    /// Its namespaces.
    pub namespaces: Grant,
    /// How it was recognised.
    pub via: Via,
}

impl Caller {
    /// The anonymous caller of a cluster that does not enforce auth: it may
    /// do anything, and names itself in `meta.caller` and `actor` fields.
    pub fn open() -> Caller {
        Caller {
            name: None,
            role: Role::Admin,
            namespaces: Grant::All,
            via: Via::Open,
        }
    }

    /// The caller a request carries, if the guard set one.
    pub fn of<T>(request: &Request<T>) -> Option<&Caller> {
        request.extensions().get::<Caller>()
    }

    /// PERMISSION_DENIED unless the caller holds `ns`.
    pub fn require(&self, ns: &Namespace) -> Result<(), Status> {
        if self.namespaces.allows(ns) {
            return Ok(());
        }
        tracing::warn!(caller = %self, namespace = %ns, "call to a namespace not granted refused");
        Err(Status::permission_denied(format!(
            "{self} holds no grant for namespace {ns}"
        )))
    }

    /// Who acts, for audits: the authenticated name; an anonymous caller
    /// names itself with the request's `actor` field, else `meta.caller`.
    pub fn actor(&self, claimed: Result<String, Status>) -> Result<String, Status> {
        match &self.name {
            Some(name) => Ok(name.clone()),
            None => claimed,
        }
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name} ({})", self.role),
            None => f.write_str("anonymous caller"),
        }
    }
}
