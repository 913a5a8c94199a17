//! Reaching a cluster from the command line, and who is acting.
//!
//! Every client command shares [`ClientArgs`]: the endpoints to try, the
//! output format, and the operator's identity. Until authentication lands
//! the identity is what the operator says it is (`--actor`, `FUSEBOX_ACTOR`,
//! else the login name in `USER`); the cluster records it with every change
//! in the audit.

use crate::failure::{ExitKind, Failure};
use crate::limits::{
    CONNECT_TIMEOUT_MS, ENDPOINTS_MAX, LEADER_LOOKUP_TIMEOUT_MS, REQUEST_TIMEOUT_MS,
};
use clap::Args;
use fusebox_client::pipeline::LedgerPipeline;
use fusebox_core::limits::ID_BYTES_MAX;
use fusebox_proto::bearer::Bearer;
use fusebox_proto::net::Net;
use fusebox_proto::tls::{ClientTlsFiles, TlsConnector};
use fusebox_proto::v1::auth_client::AuthClient;
use fusebox_proto::v1::breakers_client::BreakersClient;
use fusebox_proto::v1::cluster_client::ClusterClient;
use fusebox_proto::v1::ledger_client::LedgerClient;
use fusebox_proto::v1::policy_client::PolicyClient;
use fusebox_proto::v1::tools_client::ToolsClient;
use fusebox_proto::v1::{RequestMeta, StatusRequest};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tonic::codegen::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// What the CLI calls itself in `RequestMeta.caller`.
pub const CALLER: &str = "fusebox-cli";

/// Flags every client command shares.
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// Cluster members to try, in order: `HOST:PORT,HOST:PORT`.
    #[arg(
        long,
        global = true,
        env = "FUSEBOX_ENDPOINTS",
        default_value = "127.0.0.1:7600"
    )]
    pub endpoints: String,
    /// Print JSON instead of tables (errors too, on stderr).
    #[arg(long, global = true)]
    pub json: bool,
    /// Who is acting, recorded with every change (default: $USER).
    #[arg(long, global = true, env = "FUSEBOX_ACTOR")]
    pub actor: Option<String>,
    /// Speak TLS, trusting this CA for the nodes' certificates (PEM).
    #[arg(long, global = true, env = "FUSEBOX_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate to present (PEM), with --tls-key.
    #[arg(long, global = true, env = "FUSEBOX_TLS_CERT", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, global = true, env = "FUSEBOX_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name the nodes' certificates must carry, if not the host dialed.
    #[arg(
        long,
        global = true,
        env = "FUSEBOX_TLS_SERVER_NAME",
        requires = "tls_ca"
    )]
    pub tls_server_name: Option<String>,
    /// The bearer token to call with (`fusebox auth issue` printed it).
    #[arg(long, global = true, env = "FUSEBOX_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the bearer token (instead of --token).
    #[arg(
        long,
        global = true,
        env = "FUSEBOX_TOKEN_FILE",
        conflicts_with = "token"
    )]
    pub token_file: Option<PathBuf>,
}

impl ClientArgs {
    /// The TLS to speak, if a CA was given.
    fn tls(&self) -> anyhow::Result<Option<TlsConnector>> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        let files = ClientTlsFiles {
            ca: ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            server_name: self.tls_server_name.clone(),
        };
        let tls = TlsConnector::load(files).map_err(|e| Failure::bad_input(format!("TLS: {e}")))?;
        Ok(Some(tls))
    }

    /// The endpoints given, in order (at most [`ENDPOINTS_MAX`]).
    pub fn endpoint_list(&self) -> Vec<String> {
        self.endpoints
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .take(ENDPOINTS_MAX)
            .map(str::to_owned)
            .collect()
    }

    /// One session per endpoint, each dialing its node at its first call
    /// and again after a broken connection, never moving to the leader:
    /// for load that must keep going while nodes come and go.
    pub fn lazy_sessions(&self) -> anyhow::Result<Vec<Session>> {
        let tls = self.tls()?;
        let bearer = self.bearer()?;
        let addrs = self.endpoint_list();
        if addrs.is_empty() {
            return Err(Failure::bad_input("no endpoints given (--endpoints HOST:PORT)").into());
        }
        addrs
            .iter()
            .map(|addr| {
                let endpoint = Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| Failure::bad_input(format!("endpoint {addr:?}: {e}")))?;
                let channel = Net::Tcp.channel_tls(with_timeouts(endpoint), tls.as_ref());
                Ok(self.bundle(channel, bearer.clone()))
            })
            .collect()
    }

    /// Connects to the first endpoint that answers.
    pub async fn connect(&self) -> anyhow::Result<Channel> {
        let tls = self.tls()?;
        let mut last = None;
        for addr in &self.endpoint_list() {
            let endpoint = Endpoint::from_shared(format!("http://{addr}"))
                .map_err(|e| Failure::bad_input(format!("endpoint {addr:?}: {e}")))?;
            match Net::Tcp
                .connect_tls(with_timeouts(endpoint), tls.as_ref())
                .await
            {
                Ok(channel) => return Ok(channel),
                Err(e) => last = Some(format!("{addr}: {:#}", anyhow::Error::new(e))),
            }
        }
        let Some(last) = last else {
            return Err(Failure::bad_input("no endpoints given (--endpoints HOST:PORT)").into());
        };
        let message = format!("no cluster member reachable (last tried {last})");
        Err(Failure::new(ExitKind::Unavailable, message).into())
    }

    /// Connects, moves to the leader when the endpoint knows it, and
    /// bundles what a command needs to talk to the cluster.
    ///
    /// Writes are served by the leader anyway (a follower forwards them),
    /// and reads there reflect every change the operator just made, so a
    /// `resolve` followed by a `list` never shows the old state. When the
    /// leader is unknown or unreachable the endpoint itself serves, and its
    /// reads may lag.
    pub async fn session(&self) -> anyhow::Result<Session> {
        let here = self.connect().await?;
        let bearer = self.bearer()?;
        let channel = match leader_channel(&here, &bearer, self.tls()?.as_ref()).await {
            Some(leader) => leader,
            None => here,
        };
        Ok(self.bundle(channel, bearer))
    }

    /// Like [`ClientArgs::session`] but stays on the endpoint that answered,
    /// for commands that report what that node sees.
    pub async fn session_here(&self) -> anyhow::Result<Session> {
        let bearer = self.bearer()?;
        Ok(self.bundle(self.connect().await?, bearer))
    }

    /// The token every call carries, from --token or --token-file.
    /// The agent SDK's configuration for this cluster, as these flags
    /// reach it (endpoints, TLS files, token).
    pub fn sdk_config(
        &self,
        namespace: &str,
        replica: &str,
    ) -> anyhow::Result<fusebox_client::ClientConfig> {
        let mut config =
            fusebox_client::ClientConfig::new(self.endpoint_list(), namespace, replica)
                .map_err(|e| Failure::bad_input(e.to_string()))?;
        config.tls = self.tls_ca.as_ref().map(|ca| ClientTlsFiles {
            ca: ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            server_name: self.tls_server_name.clone(),
        });
        config.token = match (&self.token, &self.token_file) {
            (Some(token), _) => Some(token.trim().to_owned()),
            (None, Some(file)) => Some(
                std::fs::read_to_string(file)
                    .map_err(|e| {
                        Failure::bad_input(format!("reading --token-file {}: {e}", file.display()))
                    })?
                    .trim()
                    .to_owned(),
            ),
            (None, None) => None,
        };
        Ok(config)
    }

    fn bearer(&self) -> anyhow::Result<Bearer> {
        let token = match (&self.token, &self.token_file) {
            (Some(token), _) => token.clone(),
            (None, Some(file)) => std::fs::read_to_string(file).map_err(|e| {
                Failure::bad_input(format!("reading --token-file {}: {e}", file.display()))
            })?,
            (None, None) => return Ok(Bearer::none()),
        };
        Ok(Bearer::token(&token).map_err(|e| Failure::bad_input(format!("--token: {e}")))?)
    }

    fn bundle(&self, channel: Channel, bearer: Bearer) -> Session {
        Session {
            pipeline: Arc::new(LedgerPipeline::over(channel.clone(), bearer.clone())),
            channel: InterceptedService::new(channel, bearer),
            json: self.json,
            actor: self.actor.clone(),
        }
    }
}

/// The name of the OS account this process runs as, from `/etc/passwd`
/// (Unix only; `None` when it cannot be told).
fn os_account() -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // `/proc/self` belongs to the process's user.
        let uid = std::fs::metadata("/proc/self").ok()?.uid();
        account_named(&std::fs::read_to_string("/etc/passwd").ok()?, uid)
    }
    #[cfg(not(unix))]
    None
}

/// The account with `uid` in a passwd file's text.
fn account_named(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == uid && !name.is_empty()).then(|| name.to_owned())
    })
}

/// A channel to the leader, when `here` names one other than itself and it
/// answers.
async fn leader_channel(
    here: &Channel,
    bearer: &Bearer,
    tls: Option<&TlsConnector>,
) -> Option<Channel> {
    let mut request = tonic::Request::new(StatusRequest::default());
    request.set_timeout(Duration::from_millis(LEADER_LOOKUP_TIMEOUT_MS));
    let status = ClusterClient::with_interceptor(here.clone(), bearer.clone())
        .status(request)
        .await
        .ok()?
        .into_inner();
    let leader = status.leader_id.filter(|l| *l != status.node_id)?;
    let member = status.members.iter().find(|m| m.id == leader)?;
    let endpoint = Endpoint::from_shared(format!("http://{}", member.address)).ok()?;
    Net::Tcp
        .connect_tls(with_timeouts(endpoint), tls)
        .await
        .ok()
}

/// An endpoint with the CLI's connect timeout and request deadline.
fn with_timeouts(endpoint: Endpoint) -> Endpoint {
    endpoint
        .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
        .timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
}

/// A connection to the cluster with the caller's settings.
/// A channel whose every call carries the caller's token.
pub type AuthedChannel = InterceptedService<Channel, Bearer>;

pub struct Session {
    channel: AuthedChannel,
    /// Ledger calls on one stream over the same connection.
    pipeline: Arc<LedgerPipeline>,
    /// Print JSON instead of tables.
    pub json: bool,
    actor: Option<String>,
}

impl Session {
    /// The operator acting: `--actor`, `FUSEBOX_ACTOR`, else `USER`, else
    /// `LOGNAME`, else the OS account this process runs as (containers
    /// often set neither variable).
    pub fn actor(&self) -> anyhow::Result<String> {
        let named = |a: String| Some(a.trim().to_owned()).filter(|a| !a.is_empty());
        let actor = self
            .actor
            .clone()
            .and_then(named)
            .or_else(|| std::env::var("USER").ok().and_then(named))
            .or_else(|| std::env::var("LOGNAME").ok().and_then(named))
            .or_else(os_account);
        let Some(actor) = actor else {
            let message = "no operator identity: pass --actor NAME or set FUSEBOX_ACTOR";
            return Err(Failure::bad_input(message).into());
        };
        if actor.len() > ID_BYTES_MAX {
            let message = format!("--actor is {} bytes, at most {ID_BYTES_MAX}", actor.len());
            return Err(Failure::bad_input(message).into());
        }
        Ok(actor)
    }

    /// The metadata every request carries.
    pub fn meta(&self) -> Option<RequestMeta> {
        Some(RequestMeta {
            caller: CALLER.to_owned(),
            ..Default::default()
        })
    }

    /// A Breakers client.
    pub fn breakers(&self) -> BreakersClient<AuthedChannel> {
        BreakersClient::new(self.channel.clone())
    }

    /// A Ledger client.
    pub fn ledger(&self) -> LedgerClient<AuthedChannel> {
        LedgerClient::new(self.channel.clone())
    }

    /// The connection's ledger pipeline (`Ledger.Pipeline`), opened on
    /// first use.
    pub fn ledger_pipeline(&self) -> Arc<LedgerPipeline> {
        Arc::clone(&self.pipeline)
    }

    /// A Policy client.
    pub fn policy(&self) -> PolicyClient<AuthedChannel> {
        PolicyClient::new(self.channel.clone())
    }

    /// A Tools client.
    pub fn tools(&self) -> ToolsClient<AuthedChannel> {
        ToolsClient::new(self.channel.clone())
    }

    /// A Cluster client.
    pub fn cluster(&self) -> ClusterClient<AuthedChannel> {
        ClusterClient::new(self.channel.clone())
    }

    /// An Auth client.
    pub fn auth(&self) -> AuthClient<AuthedChannel> {
        AuthClient::new(self.channel.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_is_found_by_uid_in_a_passwd_file() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nops:x:1000:1000::/home/ops:/bin/sh\n";
        assert_eq!(account_named(passwd, 1000).as_deref(), Some("ops"));
        assert_eq!(account_named(passwd, 0).as_deref(), Some("root"));
        assert_eq!(account_named(passwd, 7), None);
        assert_eq!(account_named("garbage\n::\n", 0), None);
    }
}
