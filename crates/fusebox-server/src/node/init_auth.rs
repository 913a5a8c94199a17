//! `serve --init-auth FILE`: the first admin token.
//!
//! The file holds a token (`fbx_<id>_<secret>`); a missing file is created
//! with a fresh one, readable by its owner only. While the cluster has no
//! admin, whichever node given the file leads issues the token as principal
//! [`INIT_ADMIN`] and switches enforcement on, in one entry. Once any
//! admin exists the file is not used again (an operator who later switched
//! enforcement off is not overruled), so restarting with the flag, or
//! giving it to every initial member, is harmless. A node given the file
//! requires auth itself from its first request (`NodeConfig::auth_required`).

use super::backend::RaftBackend;
use crate::api::auth::new_token;
use crate::auth::PublishedAuth;
use crate::backend::{Backend, BackendError};
use crate::limits::INIT_AUTH_RETRY_MS;
use fusebox_core::auth::{token_text, AuthChange, Grant, PresentedToken, Role};
use fusebox_core::machine::{Answer, Command};
use openraft::async_runtime::WatchReceiver;
use std::io::Write;
use std::path::Path;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The principal `--init-auth` creates.
pub const INIT_ADMIN: &str = "admin";

/// The first admin token's id and digest, read from `file` or written to it.
pub fn load_or_create(file: &Path) -> Result<(String, [u8; 32]), String> {
    let shown = file.display();
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let (id, secret) = new_token()?;
            let text = token_text(&id, &secret);
            write_private(file, &text).map_err(|e| format!("writing {shown}: {e}"))?;
            tracing::info!(file = %shown, "wrote a new admin token for --init-auth");
            text
        }
        Err(e) => return Err(format!("reading {shown}: {e}")),
    };
    let token = PresentedToken::parse(text.trim())
        .ok_or_else(|| format!("{shown} does not hold a Fusebox token (fbx_<id>_<secret>)"))?;
    Ok((token.id.to_owned(), token.digest()))
}

fn write_private(file: &Path, text: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut out = options.open(file)?;
    out.write_all(text.as_bytes())?;
    out.write_all(b"\n")?;
    out.sync_all()
}

/// Issues the token and switches enforcement on once this node leads,
/// unless an admin exists; stops when done or when `stop` turns true.
pub fn spawn(
    backend: RaftBackend,
    table: PublishedAuth,
    (token_id, digest): (String, [u8; 32]),
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let pause = Duration::from_millis(INIT_AUTH_RETRY_MS);
        loop {
            if table.current().has_admin() {
                return;
            }
            let leads = {
                let metrics = backend.raft.metrics();
                let m = metrics.borrow_watched();
                m.current_leader == Some(m.id)
            };
            if leads {
                let change = AuthChange::IssueToken {
                    name: INIT_ADMIN.to_owned(),
                    role: Role::Admin,
                    namespaces: Grant::All,
                    token_id: token_id.clone(),
                    digest,
                    expires_at: None,
                    enable: true,
                };
                match propose(&backend, change).await {
                    Ok(()) => {
                        tracing::info!(
                            principal = INIT_ADMIN,
                            "issued the first admin token; auth is enforced"
                        );
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "--init-auth could not apply yet; retrying")
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    })
}

async fn propose(backend: &RaftBackend, change: AuthChange) -> Result<(), String> {
    let command = Command::Auth {
        change,
        actor: "init-auth".to_owned(),
    };
    match backend.write(command).await {
        Ok(applied) => match applied.answer {
            Answer::Rejected(e) => Err(e.to_string()),
            _ => Ok(()),
        },
        Err(BackendError::NotLeader { .. }) => Err("lost leadership".into()),
        Err(e) => Err(e.to_string()),
    }
}
