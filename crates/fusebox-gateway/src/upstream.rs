//! The tool servers behind the gateway: an MCP client session to each, over
//! Streamable HTTP or to a child process on stdio.

use crate::config::{UpstreamAt, UpstreamConfig};
use crate::GatewayError;
use rmcp::model::{ServerPeerInfo, Tool};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceExt as _};
use std::sync::Arc;
use std::time::Duration;

/// How long connecting to an upstream (and its `initialize`) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long listing an upstream's tools may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(15);
/// Most tools read from one upstream (the cluster imports at most 512).
pub const TOOLS_MAX: usize = 512;

/// A live MCP client session to one upstream.
pub struct Upstream {
    /// The configured name: the breakers' server.
    pub name: String,
    service: RunningService<RoleClient, ()>,
    info: Arc<ServerPeerInfo>,
}

impl Upstream {
    /// Connects and initializes the session.
    pub async fn connect(config: &UpstreamConfig) -> Result<Upstream, GatewayError> {
        let failed = |e: String| GatewayError::Upstream {
            name: config.name.clone(),
            message: e,
        };
        let at = config.at().map_err(failed)?;
        let started = async {
            match at {
                UpstreamAt::Url(url) => {
                    let transport = StreamableHttpClientTransport::from_config(
                        StreamableHttpClientTransportConfig::with_uri(url),
                    );
                    ().serve(transport).await.map_err(|e| e.to_string())
                }
                UpstreamAt::Command { program, args } => {
                    let mut command = tokio::process::Command::new(program);
                    command.args(args);
                    let child = TokioChildProcess::new(command).map_err(|e| e.to_string())?;
                    ().serve(child).await.map_err(|e| e.to_string())
                }
            }
        };
        let service = tokio::time::timeout(CONNECT_TIMEOUT, started)
            .await
            .map_err(|_| failed(format!("no session within {CONNECT_TIMEOUT:?}")))?
            .map_err(failed)?;
        let info = service
            .peer()
            .peer_info()
            .ok_or_else(|| failed("the upstream sent no initialize result".into()))?;
        Ok(Upstream {
            name: config.name.clone(),
            service,
            info,
        })
    }

    /// The session, to call on.
    pub fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }

    /// What the upstream said of itself when the session began.
    pub fn info(&self) -> &ServerPeerInfo {
        &self.info
    }

    /// Every tool the upstream lists (at most [`TOOLS_MAX`]).
    pub async fn tools(&self) -> Result<Vec<Tool>, GatewayError> {
        let listed = tokio::time::timeout(LIST_TIMEOUT, self.peer().list_all_tools())
            .await
            .map_err(|_| self.error(format!("tools/list took over {LIST_TIMEOUT:?}")))?
            .map_err(|e| self.error(format!("tools/list: {e}")))?;
        if listed.len() > TOOLS_MAX {
            return Err(self.error(format!("lists {} tools, at most {TOOLS_MAX}", listed.len())));
        }
        Ok(listed)
    }

    fn error(&self, message: String) -> GatewayError {
        GatewayError::Upstream {
            name: self.name.clone(),
            message,
        }
    }
}
