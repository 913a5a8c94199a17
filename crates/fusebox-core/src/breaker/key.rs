//! Which breaker an outcome, probe or operator command is about.

use crate::error::CoreError;
use crate::name::{BackendName, Namespace, ServerName, ToolName};
use crate::policy::Scope;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Identifies one breaker: a server's, a tool's, or a tool's on one backend.
///
/// Ordering puts a server's breaker right before its tools' breakers, so a
/// range scan lists a server with everything under it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BreakerKey {
    /// The fleet or tenant the breaker belongs to.
    pub namespace: Namespace,
    /// The tool server.
    pub server: ServerName,
    /// The tool; `None` for the server's own breaker.
    pub tool: Option<ToolName>,
    /// The backend narrowing a tool breaker under `scope = tool_and_backend`.
    pub backend: Option<BackendName>,
}

impl BreakerKey {
    /// The breaker of a whole server.
    pub fn server(namespace: Namespace, server: ServerName) -> Self {
        BreakerKey {
            namespace,
            server,
            tool: None,
            backend: None,
        }
    }

    /// The breaker of one tool.
    pub fn tool(namespace: Namespace, server: ServerName, tool: ToolName) -> Self {
        BreakerKey {
            namespace,
            server,
            tool: Some(tool),
            backend: None,
        }
    }

    /// This tool breaker narrowed to one backend.
    pub fn with_backend(mut self, backend: Option<BackendName>) -> Self {
        self.backend = backend;
        self
    }

    /// The breaker that judges a call of `tool` on `server`: the tool's own,
    /// narrowed to `backend` when the tool's policy scopes it
    /// `tool_and_backend`. The state machine, the server and the SDK all
    /// derive an outcome's breaker here, so they can never disagree.
    pub fn for_call(
        namespace: &Namespace,
        server: &ServerName,
        tool: &ToolName,
        backend: Option<&BackendName>,
        scope: Scope,
    ) -> Self {
        let key = BreakerKey::tool(namespace.clone(), server.clone(), tool.clone());
        match scope {
            Scope::ToolAndBackend => key.with_backend(backend.cloned()),
            Scope::Tool => key,
        }
    }

    /// Checks the key's shape: a backend narrows a tool, never a server.
    pub fn check(&self) -> Result<(), CoreError> {
        if self.backend.is_some() && self.tool.is_none() {
            return Err(CoreError::invalid("backend", "a backend needs a tool"));
        }
        Ok(())
    }

    /// Whether this is a server's own breaker.
    pub fn is_server(&self) -> bool {
        self.tool.is_none()
    }

    /// The breaker of the server this key belongs to.
    pub fn server_key(&self) -> BreakerKey {
        BreakerKey::server(self.namespace.clone(), self.server.clone())
    }

    /// Parses `NS/SERVER[/TOOL[/BACKEND]]`, the operators' notation.
    pub fn parse(text: &str) -> Result<Self, CoreError> {
        let parts: Vec<&str> = text.split('/').collect();
        if !(2..=4).contains(&parts.len()) {
            return Err(CoreError::invalid(
                "breaker",
                format!("expected NS/SERVER[/TOOL[/BACKEND]], got {text:?}"),
            ));
        }
        let mut key = BreakerKey::server(Namespace::new(parts[0])?, ServerName::new(parts[1])?);
        if let Some(tool) = parts.get(2) {
            key.tool = Some(ToolName::new(*tool)?);
        }
        if let Some(backend) = parts.get(3) {
            key.backend = Some(BackendName::new(*backend)?);
        }
        Ok(key)
    }
}

impl fmt::Display for BreakerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.server)?;
        if let Some(tool) = &self.tool {
            write!(f, "/{tool}")?;
        }
        if let Some(backend) = &self.backend {
            write!(f, "/{backend}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for text in ["ns/srv", "ns/srv/tool", "ns/srv/tool/backend-1"] {
            assert_eq!(BreakerKey::parse(text).unwrap().to_string(), text);
        }
        assert!(BreakerKey::parse("ns").is_err());
        assert!(BreakerKey::parse("a/b/c/d/e").is_err());
        assert!(BreakerKey::parse("ns//tool").is_err());
    }

    #[test]
    fn a_server_sorts_before_its_tools() {
        let server = BreakerKey::parse("ns/srv").unwrap();
        let tool = BreakerKey::parse("ns/srv/a").unwrap();
        assert!(server < tool);
        assert_eq!(tool.server_key(), server);
    }
}
