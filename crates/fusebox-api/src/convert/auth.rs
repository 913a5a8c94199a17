//! `fusebox.v1.Auth` requests into auth-table changes. Drawing a token's
//! secret and reading the clock are the node's (`fusebox_server::api::auth`);
//! everything a caller sends is checked here.

use super::bounded;
use crate::caller::Caller;
use crate::status;
use fusebox_core::auth::{secret_digest, AuthChange, Grant, Role};
use fusebox_core::limits::ID_BYTES_MAX;
use fusebox_core::{CoreError, Timestamp};
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::RequestMeta;
use tonic::Status;

/// The longest a token may live, in ms (ten years; 0 means no expiry).
pub const TOKEN_TTL_MS_MAX: u64 = 10 * 365 * 24 * 3600 * 1000;

/// Who changes auth: the authenticated name; on a cluster not enforcing
/// auth, `meta.caller`, else "anonymous".
pub fn actor_of(caller: &Caller, request_meta: Option<&RequestMeta>) -> String {
    caller
        .name
        .clone()
        .or_else(|| {
            request_meta
                .map(|m| m.caller.clone())
                .filter(|c| !c.is_empty())
        })
        .unwrap_or_else(|| "anonymous".to_owned())
}

/// `IssueToken`: a token for `token_id` whose secret is `secret` (drawn by
/// the node), expiring `ttl_ms` after `now` (0: until revoked).
pub fn issue_from_proto(
    req: &pb::IssueTokenRequest,
    now: Timestamp,
    token_id: &str,
    secret: &str,
) -> Result<AuthChange, Status> {
    let (role, namespaces) = (role_of(&req.role)?, grant_of(&req.namespaces)?);
    if req.ttl_ms > TOKEN_TTL_MS_MAX {
        return Err(status::invalid_field(
            "ttl_ms",
            &format!("at most {TOKEN_TTL_MS_MAX} (0: until revoked)"),
        ));
    }
    let change = AuthChange::IssueToken {
        name: req.name.clone(),
        role,
        namespaces,
        token_id: token_id.to_owned(),
        digest: secret_digest(secret),
        expires_at: (req.ttl_ms > 0).then(|| now.plus_ms(req.ttl_ms)),
        enable: false,
    };
    change.validate().map_err(|e| core(&e))?;
    Ok(change)
}

/// `Grant`: a principal's role and namespaces.
pub fn grant_from_proto(req: &pb::GrantRequest) -> Result<AuthChange, Status> {
    Ok(AuthChange::Grant {
        name: req.name.clone(),
        role: role_of(&req.role)?,
        namespaces: grant_of(&req.namespaces)?,
    })
}

/// `RevokeToken`.
pub fn revoke_from_proto(req: &pb::RevokeTokenRequest) -> AuthChange {
    AuthChange::RevokeToken {
        token_id: req.token_id.clone(),
    }
}

/// `RemovePrincipal`.
pub fn remove_from_proto(req: &pb::RemovePrincipalRequest) -> AuthChange {
    AuthChange::Remove {
        name: req.name.clone(),
    }
}

/// `SetEnabled`.
pub fn set_enabled_from_proto(req: &pb::SetAuthEnabledRequest) -> AuthChange {
    AuthChange::SetEnabled {
        enabled: req.enabled,
    }
}

fn core(e: &CoreError) -> Status {
    status::from_core(e)
}

fn role_of(text: &str) -> Result<Role, Status> {
    Role::parse(text).map_err(|e| core(&e))
}

fn grant_of(names: &[String]) -> Result<Grant, Status> {
    for name in names {
        bounded("namespaces", name, ID_BYTES_MAX)?;
    }
    Grant::parse(names.iter().map(String::as_str)).map_err(|e| core(&e))
}
