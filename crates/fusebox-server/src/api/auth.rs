//! `fusebox.v1.Auth`: principals, tokens and enforcement.
//!
//! Every change is a command through the log, so every node refuses a
//! revoked token once it applies the revocation. A token's secret is drawn
//! here, on the node that proposes (the leader: a follower forwards the
//! request, and the leader draws its own), shown once in the answer and
//! replicated only as its SHA-256. The guard admits only admins to every
//! RPC but `WhoAmI` (`crate::auth::rules`).

use super::convert::auth::{
    actor_of, grant_from_proto, issue_from_proto, remove_from_proto, revoke_from_proto,
    set_enabled_from_proto,
};
use super::convert::meta;
use super::gateway::{unexpected, Gateway, Served};
use crate::auth::Caller;
use crate::backend::Backend;
use fusebox_core::auth::{token_text, AuthChange, AuthTable, TOKEN_ID_HEX, TOKEN_SECRET_HEX};
use fusebox_core::machine::{Answer, Command};
use fusebox_core::Timestamp;
use fusebox_proto::v1 as pb;
use fusebox_proto::v1::auth_client::AuthClient;
use fusebox_proto::v1::auth_server::Auth;
use fusebox_proto::v1::RequestMeta;
use tonic::{Request, Response, Status};

pub use fusebox_api::convert::auth::TOKEN_TTL_MS_MAX;

/// The Auth service over a backend.
pub struct AuthService<B> {
    gateway: Gateway<B>,
}

impl<B: Backend> AuthService<B> {
    /// A service proposing and reading through `gateway`.
    pub fn new(gateway: Gateway<B>) -> Self {
        AuthService { gateway }
    }

    /// Proposes one change; the table's version after it, or where the
    /// leader is.
    async fn change(
        &self,
        caller: &Caller,
        request_meta: Option<&RequestMeta>,
        change: AuthChange,
    ) -> Result<Served<u64>, Status> {
        meta(request_meta)?;
        let actor = actor_of(caller, request_meta);
        tracing::info!(actor = %actor, change = ?redacted(&change), "auth change");
        let command = Command::Auth { change, actor };
        Ok(match self.gateway.write(command).await? {
            Served::Here(applied) => match applied.answer {
                Answer::AuthChanged { version } => Served::Here(version),
                other => return Err(unexpected(&other)),
            },
            Served::Leader(leader) => Served::Leader(leader),
        })
    }
}

/// The change as logged: a digest is not a secret, but it is not for logs
/// either.
fn redacted(change: &AuthChange) -> AuthChange {
    match change {
        AuthChange::IssueToken {
            name,
            role,
            namespaces,
            token_id,
            expires_at,
            enable,
            ..
        } => AuthChange::IssueToken {
            name: name.clone(),
            role: *role,
            namespaces: namespaces.clone(),
            token_id: token_id.clone(),
            digest: [0; 32],
            expires_at: *expires_at,
            enable: *enable,
        },
        other => other.clone(),
    }
}

/// `hex_digits` random hex digits, from the operating system.
fn random_hex(hex_digits: usize) -> Result<String, String> {
    let mut bytes = vec![0u8; hex_digits / 2];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("the operating system's random source failed: {e}"))?;
    Ok(fusebox_core::hex::lower(&bytes))
}

/// A new token's id and secret (`token_text` joins them).
pub fn new_token() -> Result<(String, String), String> {
    Ok((random_hex(TOKEN_ID_HEX)?, random_hex(TOKEN_SECRET_HEX)?))
}

fn list(table: &AuthTable) -> pb::ListPrincipalsResponse {
    let principals = table
        .principals()
        .map(|(name, p)| pb::PrincipalInfo {
            name: name.clone(),
            role: p.role.name().to_owned(),
            namespaces: p.namespaces.names(),
            granted_by: p.granted_by.clone(),
            granted_at_ms: p.granted_at.as_millis(),
            tokens: table
                .tokens()
                .filter(|(_, t)| t.principal == *name)
                .map(|(id, t)| pb::TokenInfo {
                    token_id: id.clone(),
                    expires_at_ms: t.expires_at.map_or(0, Timestamp::as_millis),
                    issued_at_ms: t.issued_at.as_millis(),
                    issued_by: t.issued_by.clone(),
                })
                .collect(),
        })
        .collect();
    pb::ListPrincipalsResponse {
        enabled: table.enabled(),
        principals,
        version: table.version(),
    }
}

#[tonic::async_trait]
impl<B: Backend> Auth for AuthService<B> {
    async fn issue_token(
        &self,
        request: Request<pb::IssueTokenRequest>,
    ) -> Result<Response<pb::IssueTokenResponse>, Status> {
        let caller = self.gateway.caller(&request)?;
        let req = request.get_ref();
        let now = Timestamp::from_millis(self.gateway.backend().now_ms());
        let (token_id, secret) = new_token().map_err(|e| {
            tracing::error!(error = %e, "cannot draw a token");
            Status::unavailable(e)
        })?;
        let change = issue_from_proto(req, now, &token_id, &secret)?;
        let expires_at = match &change {
            AuthChange::IssueToken { expires_at, .. } => *expires_at,
            _ => None,
        };
        let version = here_or_forward!(
            self,
            request,
            self.change(&caller, req.meta.as_ref(), change).await?,
            AuthClient::issue_token
        );
        Ok(Response::new(pb::IssueTokenResponse {
            token: token_text(&token_id, &secret),
            token_id,
            expires_at_ms: expires_at.map_or(0, Timestamp::as_millis),
            version,
        }))
    }

    async fn grant(
        &self,
        request: Request<pb::GrantRequest>,
    ) -> Result<Response<pb::AuthChangeResponse>, Status> {
        let caller = self.gateway.caller(&request)?;
        let req = request.get_ref();
        let change = grant_from_proto(req)?;
        let version = here_or_forward!(
            self,
            request,
            self.change(&caller, req.meta.as_ref(), change).await?,
            AuthClient::grant
        );
        Ok(Response::new(pb::AuthChangeResponse { version }))
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::AuthChangeResponse>, Status> {
        let caller = self.gateway.caller(&request)?;
        let req = request.get_ref();
        let change = revoke_from_proto(req);
        let version = here_or_forward!(
            self,
            request,
            self.change(&caller, req.meta.as_ref(), change).await?,
            AuthClient::revoke_token
        );
        Ok(Response::new(pb::AuthChangeResponse { version }))
    }

    async fn remove_principal(
        &self,
        request: Request<pb::RemovePrincipalRequest>,
    ) -> Result<Response<pb::AuthChangeResponse>, Status> {
        let caller = self.gateway.caller(&request)?;
        let req = request.get_ref();
        let change = remove_from_proto(req);
        let version = here_or_forward!(
            self,
            request,
            self.change(&caller, req.meta.as_ref(), change).await?,
            AuthClient::remove_principal
        );
        Ok(Response::new(pb::AuthChangeResponse { version }))
    }

    async fn list_principals(
        &self,
        request: Request<pb::ListPrincipalsRequest>,
    ) -> Result<Response<pb::ListPrincipalsResponse>, Status> {
        self.gateway.caller(&request)?;
        meta(request.get_ref().meta.as_ref())?;
        let page = self.gateway.read_local(|s| list(s.auth())).await?;
        Ok(Response::new(page))
    }

    async fn set_enabled(
        &self,
        request: Request<pb::SetAuthEnabledRequest>,
    ) -> Result<Response<pb::AuthChangeResponse>, Status> {
        let caller = self.gateway.caller(&request)?;
        let req = request.get_ref();
        let change = set_enabled_from_proto(req);
        let version = here_or_forward!(
            self,
            request,
            self.change(&caller, req.meta.as_ref(), change).await?,
            AuthClient::set_enabled
        );
        Ok(Response::new(pb::AuthChangeResponse { version }))
    }

    async fn who_am_i(
        &self,
        request: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::WhoAmIResponse>, Status> {
        let caller = self.gateway.caller(&request)?;
        meta(request.get_ref().meta.as_ref())?;
        let enforced = self.gateway.read_local(|s| s.auth().enabled()).await?;
        Ok(Response::new(pb::WhoAmIResponse {
            name: caller.name.clone().unwrap_or_default(),
            role: caller.role.name().to_owned(),
            namespaces: caller.namespaces.names(),
            via: caller.via.name().to_owned(),
            enforced,
        }))
    }
}
