//! The gateway's configuration file (TOML).
//!
//! ```toml
//! listen = "127.0.0.1:7700"          # where agents connect (and /metrics)
//! namespace = "payments"             # the cluster namespace of these tools
//! replica_id = "agent-7"             # this gateway, as one replica of the fleet
//! cluster = ["127.0.0.1:7601", "127.0.0.1:7602", "127.0.0.1:7603"]
//! budget_ms = 60000                  # the most one tools/call may take, retries included
//! tool_prefix = "on_collision"       # the aggregated endpoint: "on_collision" or "always"
//! tool_prefix_separator = "__"       # tax-vendor__lookup
//!
//! [[upstream]]
//! name = "tax-vendor"                # served at /servers/tax-vendor/mcp
//! url = "http://127.0.0.1:9000/mcp"  # Streamable HTTP
//!
//! [[upstream]]
//! name = "files"
//! command = ["python3", "files_server.py"]   # or a stdio command
//! ```
//!
//! Breakers, timeouts, retries and effect classes are not here: they are the
//! namespace's policy in the cluster, so an operator's `policy apply` reaches
//! every gateway.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::Path;

/// Largest configuration file read.
const CONFIG_BYTES_MAX: u64 = 1 << 20;
/// Most upstreams one gateway serves.
pub const UPSTREAMS_MAX: usize = 64;
/// Longest budget for one call.
const BUDGET_MS_MAX: u64 = 3_600_000;
/// Longest tool name prefix separator.
const SEPARATOR_BYTES_MAX: usize = 8;

/// When the aggregated endpoint prefixes a tool's name with its server's.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ToolPrefix {
    /// Only the names two upstreams share (each gets its server's prefix).
    #[default]
    OnCollision,
    /// Every name.
    Always,
}

/// What the gateway serves, and for whom.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Where agents connect (Streamable HTTP) and `/metrics` is served.
    /// Required unless the gateway serves one agent on stdio.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// The cluster namespace these tools are governed in.
    pub namespace: String,
    /// This gateway's replica id in the fleet (default: the host name).
    #[serde(default)]
    pub replica_id: Option<String>,
    /// Cluster members to reach, `HOST:PORT`.
    pub cluster: Vec<String>,
    /// A bearer token for the cluster, read from this file.
    #[serde(default)]
    pub token_file: Option<std::path::PathBuf>,
    /// The most one `tools/call` may take, retries included, in ms.
    #[serde(default = "default_budget_ms")]
    pub budget_ms: u64,
    /// When the aggregated endpoint (`/mcp`) prefixes tool names.
    #[serde(default)]
    pub tool_prefix: ToolPrefix,
    /// What joins a server's name and a tool's in a prefixed name.
    #[serde(default = "default_separator")]
    pub tool_prefix_separator: String,
    /// The tool servers behind the gateway.
    #[serde(rename = "upstream")]
    pub upstreams: Vec<UpstreamConfig>,
}

fn default_budget_ms() -> u64 {
    60_000
}

fn default_separator() -> String {
    "__".to_owned()
}

/// One tool server behind the gateway.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Its name: the breaker's server and the path `/servers/NAME/mcp`.
    pub name: String,
    /// A Streamable HTTP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// Or a command speaking MCP on stdio: the program, then its arguments.
    #[serde(default)]
    pub command: Option<Vec<String>>,
}

/// Where an upstream is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamAt {
    /// Streamable HTTP.
    Url(String),
    /// A child process on stdio.
    Command {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
}

impl UpstreamConfig {
    /// Where it is reached; exactly one of `url` and `command`.
    pub fn at(&self) -> Result<UpstreamAt, String> {
        match (&self.url, &self.command) {
            (Some(url), None) => {
                if url.starts_with("http://") || url.starts_with("https://") {
                    Ok(UpstreamAt::Url(url.clone()))
                } else {
                    Err(format!(
                        "upstream {}: url must be http:// or https://",
                        self.name
                    ))
                }
            }
            (None, Some(command)) => match command.split_first() {
                Some((program, args)) if !program.is_empty() => Ok(UpstreamAt::Command {
                    program: program.clone(),
                    args: args.to_vec(),
                }),
                _ => Err(format!(
                    "upstream {}: command must name a program",
                    self.name
                )),
            },
            _ => Err(format!(
                "upstream {}: give exactly one of url and command",
                self.name
            )),
        }
    }
}

impl GatewayConfig {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<GatewayConfig, String> {
        let shown = path.display();
        let size = std::fs::metadata(path)
            .map_err(|e| format!("reading {shown}: {e}"))?
            .len();
        if size > CONFIG_BYTES_MAX {
            return Err(format!(
                "{shown} is {size} bytes, at most {CONFIG_BYTES_MAX}"
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {shown}: {e}"))?;
        let config: GatewayConfig =
            toml::from_str(&text).map_err(|e| format!("parsing {shown}: {e}"))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the settings hang together; every problem is named.
    pub fn validate(&self) -> Result<(), String> {
        if self.cluster.is_empty() {
            return Err("cluster: name at least one member (HOST:PORT)".into());
        }
        if self.upstreams.is_empty() || self.upstreams.len() > UPSTREAMS_MAX {
            return Err(format!("give 1 to {UPSTREAMS_MAX} [[upstream]] tables"));
        }
        if self.budget_ms == 0 || self.budget_ms > BUDGET_MS_MAX {
            return Err(format!("budget_ms must be 1 to {BUDGET_MS_MAX}"));
        }
        let separator = &self.tool_prefix_separator;
        let separator_ok = !separator.is_empty()
            && separator.len() <= SEPARATOR_BYTES_MAX
            && separator
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !separator_ok {
            return Err(format!(
                "tool_prefix_separator {separator:?}: 1 to {SEPARATOR_BYTES_MAX} of A-Z a-z 0-9 - _ ."
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for upstream in &self.upstreams {
            let name = &upstream.name;
            let well_formed = !name.is_empty()
                && name.len() <= 128
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !well_formed {
                return Err(format!(
                    "upstream name {name:?}: 1 to 128 of A-Z a-z 0-9 - _ ."
                ));
            }
            if !names.insert(name.as_str()) {
                return Err(format!("upstream {name} is named twice"));
            }
            upstream.at()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<GatewayConfig, String> {
        let config: GatewayConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.validate().map(|()| config)
    }

    const GOOD: &str = r#"
        listen = "127.0.0.1:7700"
        namespace = "payments"
        cluster = ["127.0.0.1:7601"]
        [[upstream]]
        name = "tax-vendor"
        url = "http://127.0.0.1:9000/mcp"
        [[upstream]]
        name = "files"
        command = ["python3", "files.py", "--root", "/srv"]
    "#;

    #[test]
    fn upstreams_are_urls_or_commands() {
        let config = parse(GOOD).unwrap();
        assert_eq!(config.budget_ms, 60_000);
        assert_eq!(config.tool_prefix, ToolPrefix::OnCollision);
        assert_eq!(config.tool_prefix_separator, "__");
        let always = parse(&GOOD.replace(
            "namespace = \"payments\"",
            "namespace = \"payments\"\ntool_prefix = \"always\"",
        ))
        .unwrap();
        assert_eq!(always.tool_prefix, ToolPrefix::Always);
        assert_eq!(
            config.upstreams[0].at(),
            Ok(UpstreamAt::Url("http://127.0.0.1:9000/mcp".into()))
        );
        assert_eq!(
            config.upstreams[1].at(),
            Ok(UpstreamAt::Command {
                program: "python3".into(),
                args: vec!["files.py".into(), "--root".into(), "/srv".into()]
            })
        );
    }

    #[test]
    fn every_problem_is_named() {
        let both = GOOD.replace("command = [", "url = \"http://x\"\ncommand = [");
        assert!(parse(&both).unwrap_err().contains("exactly one"));
        let twice = GOOD.replace("\"files\"", "\"tax-vendor\"");
        assert!(parse(&twice).unwrap_err().contains("named twice"));
        let path = GOOD.replace("\"files\"", "\"../etc\"");
        assert!(parse(&path).unwrap_err().contains("upstream name"));
        let unknown = format!("{GOOD}\nretries = 3\n");
        assert!(parse(&unknown).is_err());
        let ftp = GOOD.replace("http://127.0.0.1:9000/mcp", "ftp://x");
        assert!(parse(&ftp).unwrap_err().contains("http"));
        let slash = format!("tool_prefix_separator = \"/\"\n{GOOD}");
        assert!(parse(&slash).unwrap_err().contains("tool_prefix_separator"));
    }
}
