//! The policy model: what a namespace's operators decide about their tools.
//!
//! A namespace holds one [`PolicyDocument`] (TOML or YAML) with defaults and
//! per-server and per-tool overrides. The engines never read the document
//! directly: they ask it to *resolve* the effective [`ToolPolicy`] for one
//! tool or [`BreakerPolicy`] for one server, so override precedence lives in
//! one place (tool over server over defaults over built-in defaults).
//!
//! Every value the engines receive has been validated: a document that breaks
//! a rule is refused as a whole with every [`PolicyProblem`] listed, and the
//! version in force stays in force.

mod classify;
mod document;
mod document_diff;
mod document_resolve;
mod failover;
mod nesting;
mod resolved;
mod validate;

#[cfg(test)]
mod tests;

pub use classify::{Classification, ClassifyOverrides, Verdict};
pub use document::{
    BreakerOverrides, LatencySettings, LedgerSettings, PolicyDocument, PolicyFormat,
    RetryOverrides, ServerOverrides, ToolOverrides,
};
pub use failover::{parse_tool, FailoverGroup, FAILOVER_GROUPS_MAX, FAILOVER_GROUP_TOOLS_MAX};
pub use resolved::{
    BreakerPolicy, EffectClass, InFlightOnOpen, OnPartition, OpenBackoff, RetryPolicy, Scope,
    ToolPolicy, Trip, WindowPolicy,
};

use serde::{Deserialize, Serialize};

/// One broken rule in a policy document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyProblem {
    /// The field's path in the document (`servers.tax.tools.lookup.timeout_ms`).
    pub field: String,
    /// The rule it broke, in words an operator can act on.
    pub rule: String,
}

impl std::fmt::Display for PolicyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

/// Renders problems one per line (`field: rule`).
pub fn render_problems(problems: &[PolicyProblem]) -> String {
    problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}
