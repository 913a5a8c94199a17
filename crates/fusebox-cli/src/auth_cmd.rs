//! `fusebox auth`: principals, tokens and enforcement.
//!
//! A principal is a name with a role (reader, agent, operator, admin) over
//! namespaces (`*` for all). `issue` prints a token once; the cluster keeps
//! only its hash. `new-token` draws one offline, for `serve --init-auth`.
//! Every command but `whoami` and `new-token` needs an admin.

use crate::client::ClientArgs;
use crate::failure::{rpc, Failure};
use crate::out::outln;
use crate::time_text::{instant_from, now_ms, parse_duration};
use clap::{Args, Subcommand};
use fusebox_core::auth::token_text;
use fusebox_proto::v1 as pb;
use fusebox_server::api::auth::new_token;
use serde_json::json;

/// `fusebox auth ...`
#[derive(Args, Debug)]
pub struct AuthArgs {
    #[command(subcommand)]
    command: AuthCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
enum AuthCommand {
    /// Create or update a principal and print a new token for it (once).
    Issue {
        /// The principal's name.
        name: String,
        /// reader, agent, operator or admin.
        #[arg(long)]
        role: String,
        /// A namespace it may use (repeat; `*` for all; admins get all).
        #[arg(long = "namespace", short = 'n')]
        namespaces: Vec<String>,
        /// How long the token is accepted (`30d`, `12h`); default: until revoked.
        #[arg(long)]
        ttl: Option<String>,
    },
    /// Create or update a principal without a token (a client certificate
    /// naming `fusebox://user/<name>` then identifies it).
    Grant {
        /// The principal's name.
        name: String,
        /// reader, agent, operator or admin.
        #[arg(long)]
        role: String,
        /// A namespace it may use (repeat; `*` for all).
        #[arg(long = "namespace", short = 'n')]
        namespaces: Vec<String>,
    },
    /// Revoke one token by its id; every node refuses it once applied.
    Revoke {
        /// The token's id (the 16 hex digits after `fbx_`).
        token_id: String,
    },
    /// Remove a principal and revoke all its tokens.
    Remove {
        /// The principal's name.
        name: String,
    },
    /// Principals, roles, namespaces and token ids (never secrets).
    List,
    /// Require every caller to authenticate, cluster-wide.
    Enable,
    /// Stop requiring it (nodes started with --auth still require it).
    Disable,
    /// Who the cluster takes you for.
    Whoami,
    /// Print a fresh random token, without a cluster (for serve --init-auth).
    NewToken,
}

fn role_namespaces(role: &str, namespaces: Vec<String>) -> Vec<String> {
    if namespaces.is_empty() && role == "admin" {
        vec!["*".to_owned()]
    } else {
        namespaces
    }
}

/// Runs `fusebox auth`.
pub async fn run(args: AuthArgs) -> anyhow::Result<()> {
    if let AuthCommand::NewToken = args.command {
        let (id, secret) = new_token().map_err(|e| anyhow::anyhow!(e))?;
        outln!("{}", token_text(&id, &secret));
        return Ok(());
    }
    let s = args.client.session().await?;
    let meta = s.meta();
    match args.command {
        AuthCommand::Issue {
            name,
            role,
            namespaces,
            ttl,
        } => {
            let ttl_ms = match ttl {
                Some(text) => parse_duration(&text).map_err(Failure::bad_input)?,
                None => 0,
            };
            let request = pb::IssueTokenRequest {
                meta,
                namespaces: role_namespaces(&role, namespaces),
                name: name.clone(),
                role,
                ttl_ms,
            };
            let reply = rpc("auth issue", s.auth().issue_token(request)).await?;
            if s.json {
                let out = json!({"name": name, "token": reply.token, "token_id": reply.token_id,
                                 "expires_at_ms": reply.expires_at_ms});
                outln!("{out}");
            } else {
                outln!("{}", reply.token);
                let expiry = match reply.expires_at_ms {
                    0 => "never expires".to_owned(),
                    at => format!("expires {}", instant_from(at, now_ms())),
                };
                eprintln!(
                    "token {} for {name}: {expiry}; it is shown only now, the cluster keeps its \
                     hash",
                    reply.token_id
                );
            }
        }
        AuthCommand::Grant {
            name,
            role,
            namespaces,
        } => {
            let request = pb::GrantRequest {
                meta,
                namespaces: role_namespaces(&role, namespaces),
                name: name.clone(),
                role: role.clone(),
            };
            rpc("auth grant", s.auth().grant(request)).await?;
            done(s.json, &format!("{name} is now a {role}"));
        }
        AuthCommand::Revoke { token_id } => {
            let request = pb::RevokeTokenRequest {
                meta,
                token_id: token_id.clone(),
            };
            rpc("auth revoke", s.auth().revoke_token(request)).await?;
            done(s.json, &format!("token {token_id} revoked"));
        }
        AuthCommand::Remove { name } => {
            let request = pb::RemovePrincipalRequest {
                meta,
                name: name.clone(),
            };
            rpc("auth remove", s.auth().remove_principal(request)).await?;
            done(s.json, &format!("{name} removed, with its tokens"));
        }
        AuthCommand::Enable | AuthCommand::Disable => {
            let enabled = matches!(args.command, AuthCommand::Enable);
            let request = pb::SetAuthEnabledRequest { meta, enabled };
            rpc("auth enable", s.auth().set_enabled(request)).await?;
            let what = if enabled {
                "every caller must now authenticate"
            } else {
                "callers may now call without credentials (nodes started with --auth still require them)"
            };
            done(s.json, what);
        }
        AuthCommand::List => {
            let request = pb::ListPrincipalsRequest { meta };
            let reply = rpc("auth list", s.auth().list_principals(request)).await?;
            print_list(s.json, &reply);
        }
        AuthCommand::Whoami => {
            let request = pb::WhoAmIRequest { meta };
            let me = rpc("auth whoami", s.auth().who_am_i(request)).await?;
            if s.json {
                let out = json!({"name": me.name, "role": me.role, "namespaces": me.namespaces,
                                 "via": me.via, "enforced": me.enforced});
                outln!("{out}");
            } else if me.name.is_empty() {
                outln!("anonymous (the cluster does not require authentication)");
            } else {
                outln!(
                    "{} ({}) in {} by {}",
                    me.name,
                    me.role,
                    me.namespaces.join(","),
                    me.via
                );
            }
        }
        AuthCommand::NewToken => {}
    }
    Ok(())
}

fn done(json: bool, text: &str) {
    if json {
        outln!("{}", json!({"ok": true, "message": text}));
    } else {
        outln!("{text}");
    }
}

fn print_list(json: bool, reply: &pb::ListPrincipalsResponse) {
    if json {
        let principals: Vec<_> = reply
            .principals
            .iter()
            .map(|p| {
                let tokens: Vec<_> = p
                    .tokens
                    .iter()
                    .map(|t| {
                        json!({"token_id": t.token_id, "expires_at_ms": t.expires_at_ms,
                                    "issued_by": t.issued_by, "issued_at_ms": t.issued_at_ms})
                    })
                    .collect();
                json!({"name": p.name, "role": p.role, "namespaces": p.namespaces,
                       "granted_by": p.granted_by, "tokens": tokens})
            })
            .collect();
        outln!(
            "{}",
            json!({"enabled": reply.enabled, "principals": principals})
        );
        return;
    }
    let state = if reply.enabled { "on" } else { "off" };
    outln!("enforcement {state}");
    outln!("{:<24} {:<9} {:<30} TOKENS", "NAME", "ROLE", "NAMESPACES");
    for p in &reply.principals {
        let tokens: Vec<String> = p.tokens.iter().map(|t| t.token_id.clone()).collect();
        outln!(
            "{:<24} {:<9} {:<30} {}",
            p.name,
            p.role,
            p.namespaces.join(","),
            if tokens.is_empty() {
                "-".to_owned()
            } else {
                tokens.join(",")
            }
        );
    }
}
