//! Failover groups: which tools may stand in for one another when a
//! breaker refuses.
//!
//! The runbook's rule is that while a circuit is open the agent must not
//! bypass it through an equivalent tool: the same backend behind another
//! name is down too, and calling it hammers what the breaker protects. A
//! group declares the exception: tools that really are independent (another
//! provider, other infrastructure), with the author's reason. Without one,
//! the SDK routes among equivalent tools by latency only while the first
//! one asked for is admitted; once it is refused, it routes to none.
//!
//! ```toml
//! [[failover]]
//! tools = ["geocoder/geocode", "maps-vendor/lookup"]
//! why = "two vendors on separate infrastructure"
//! ```

use crate::limits::REASON_BYTES_MAX;
use crate::name::{ServerName, ToolName};
use serde::{Deserialize, Serialize};

/// Most failover groups one policy may hold.
pub const FAILOVER_GROUPS_MAX: usize = 64;
/// Most tools in one failover group.
pub const FAILOVER_GROUP_TOOLS_MAX: usize = 16;

/// Tools that may stand in for one another when a breaker refuses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverGroup {
    /// The tools, as `server/tool`.
    pub tools: Vec<String>,
    /// Why they are independent (another provider, other infrastructure).
    #[serde(default)]
    pub why: String,
}

/// `server/tool` split into its names, if both are valid.
pub fn parse_tool(text: &str) -> Option<(ServerName, ToolName)> {
    let (server, tool) = text.split_once('/')?;
    Some((ServerName::new(server).ok()?, ToolName::new(tool).ok()?))
}

impl FailoverGroup {
    /// Whether `server/tool` is in the group.
    pub fn contains(&self, server: &ServerName, tool: &ToolName) -> bool {
        self.tools
            .iter()
            .filter_map(|t| parse_tool(t))
            .any(|(s, t)| s == *server && t == *tool)
    }
}

/// Every broken rule of a document's groups, as `(field, rule)`.
pub(crate) fn problems(groups: &[FailoverGroup]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if groups.len() > FAILOVER_GROUPS_MAX {
        out.push((
            "failover".to_owned(),
            format!(
                "holds {} groups, at most {FAILOVER_GROUPS_MAX} allowed",
                groups.len()
            ),
        ));
        return out;
    }
    let mut seen: Vec<(ServerName, ToolName, usize)> = Vec::new();
    for (i, group) in groups.iter().enumerate() {
        let path = format!("failover[{i}]");
        let n = group.tools.len();
        if !(2..=FAILOVER_GROUP_TOOLS_MAX).contains(&n) {
            out.push((
                format!("{path}.tools"),
                format!("lists {n} tools, a group needs 2 to {FAILOVER_GROUP_TOOLS_MAX}"),
            ));
        }
        if group.why.trim().is_empty() || group.why.len() > REASON_BYTES_MAX {
            out.push((
                format!("{path}.why"),
                format!(
                    "must say, in 1 to {REASON_BYTES_MAX} bytes, why these tools are independent \
                     (another provider, not another name for the same backend)"
                ),
            ));
        }
        for text in group.tools.iter().take(FAILOVER_GROUP_TOOLS_MAX) {
            let Some((server, tool)) = parse_tool(text) else {
                out.push((
                    format!("{path}.tools"),
                    format!("{text:?} is not `server/tool` with valid names"),
                ));
                continue;
            };
            if let Some((_, _, j)) = seen.iter().find(|(s, t, _)| *s == server && *t == tool) {
                let rule = if *j == i {
                    format!("{text} is listed twice")
                } else {
                    format!("{text} is already in failover[{j}]; a tool belongs to one group")
                };
                out.push((format!("{path}.tools"), rule));
                continue;
            }
            seen.push((server, tool, i));
        }
    }
    out
}

impl super::PolicyDocument {
    /// The failover group `server/tool` belongs to, if any.
    pub fn failover_group(&self, server: &ServerName, tool: &ToolName) -> Option<&FailoverGroup> {
        self.failover.iter().find(|g| g.contains(server, tool))
    }
}
