//! The tools registry: what each tool server's manifest says about its tools
//! (MCP hints, latency disclosure), and the latency the fleet observes.
//!
//! An import replaces one server's tool list in one namespace, as a fresh
//! `tools/list` does: each tool's raw `latencyDisclosure` block is judged by
//! [`crate::disclosure`] at the entry's time, and only a valid, fresh block
//! is stored. Observed latency is kept per tool in a
//! [`WindowedSketch`](crate::disclosure::WindowedSketch)
//! whether or not the tool was imported, so a publisher can emit a block
//! from telemetry alone. A tool whose observed p95 runs more than 50% above
//! its stored disclosure's p95 over enough samples is flagged penalized.
//!
//! The registry knows nothing of the state machine around it: each change
//! it makes is handed to the caller's `announce` callback, in order, and the
//! state machine turns it into a watch event with the next revision.
//!
//! Invariants: every collection is a `BTreeMap` keyed by [`ToolId`], so
//! snapshots and digests are deterministic; tools per server, tools per
//! namespace, block bytes and observed tools are bounded by [`crate::limits`];
//! a stored disclosure always passed [`assess`] without errors and was fresh
//! when it was imported.

mod registry;

pub(crate) use registry::ManifestOf;
pub use registry::ToolRegistry;

use crate::disclosure::{assess, DisclosureProblem, DisclosureRule, LatencyDisclosure, McpHints};
use crate::error::{check_len, CoreError};
use crate::limits::{DISCLOSURE_BLOCK_BYTES_MAX, ID_BYTES_MAX, TOOLS_PER_SERVER_MAX};
use crate::name::{Namespace, ServerName, ToolName};
use crate::policy::{EffectClass, PolicyDocument};
use crate::time::Timestamp;
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeSet;

/// One tool, fleet-wide: the registry's and the sketches' key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ToolId {
    /// The namespace (fleet or tenant).
    pub namespace: Namespace,
    /// The tool server.
    pub server: ServerName,
    /// The tool.
    pub tool: ToolName,
}

/// One tool of an imported manifest, as the import command carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolImport {
    /// The tool's name in the manifest.
    pub tool: ToolName,
    /// The manifest's MCP hints.
    pub hints: McpHints,
    /// The raw `annotations.latencyDisclosure` JSON, untrusted; `None` when
    /// the manifest has none. At most [`DISCLOSURE_BLOCK_BYTES_MAX`] bytes.
    pub disclosure_json: Option<String>,
}

/// The verdict on one imported tool's disclosure block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum DisclosureVerdict {
    /// Valid and fresh: stored, and replicas use it.
    Accepted {
        /// Broken SHOULDs worth showing (p99 not binding, no timeout headroom).
        warnings: Vec<DisclosureProblem>,
    },
    /// Breaks a MUST (or cannot be read): not stored.
    Invalid {
        /// Every broken rule, errors first as the block orders them.
        problems: Vec<DisclosureProblem>,
    },
    /// Well formed but older than the freshness ceiling: treated as missing.
    Stale {
        /// The staleness warning and any other warnings.
        problems: Vec<DisclosureProblem>,
    },
    /// The manifest discloses nothing for this tool.
    Missing,
}

/// What the import made of one tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolImported {
    /// The tool.
    pub tool: ToolName,
    /// Its disclosure's verdict.
    pub verdict: DisclosureVerdict,
    /// The effect class in force: the policy's, or derived from the hints.
    pub effect: EffectClass,
    /// The policy says nothing about the tool's effect, so it was derived
    /// from its MCP hints.
    pub effect_derived: bool,
    /// The per-call deadline the disclosure sets (p99 × 1.2), if any.
    pub deadline_ms: Option<u64>,
}

/// A stored disclosure block. In compact encodings (postcard snapshots,
/// log entries), which cannot skip absent optional fields, it travels as
/// its JSON text; in JSON it is the block itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBlock(pub LatencyDisclosure);

impl Serialize for StoredBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return self.0.serialize(serializer);
        }
        let text = serde_json::to_string(&self.0).map_err(S::Error::custom)?;
        serializer.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for StoredBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            return LatencyDisclosure::deserialize(deserializer).map(StoredBlock);
        }
        let text = String::deserialize(deserializer)?;
        serde_json::from_str(&text)
            .map(StoredBlock)
            .map_err(D::Error::custom)
    }
}

/// One imported tool as the registry keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolRecord {
    /// The manifest's MCP hints, kept to derive the effect class whenever
    /// the policy changes.
    pub hints: McpHints,
    /// The accepted disclosure; `None` when the block was missing, invalid
    /// or stale at import.
    pub disclosure: Option<StoredBlock>,
    /// The entry time of the import that stored this record.
    pub imported_at: Timestamp,
    /// Who imported it, for the audit.
    pub imported_by: String,
    /// Observed p95 runs more than 50% above the disclosed p95 over at least
    /// [`crate::disclosure::PENALTY_SAMPLES_MIN`] calls in the window.
    pub penalized: bool,
}

impl ToolRecord {
    /// The disclosure, if one is stored.
    pub fn disclosure(&self) -> Option<&LatencyDisclosure> {
        self.disclosure.as_ref().map(|b| &b.0)
    }
}

/// The effect class in force for a tool and whether it was derived from its
/// hints (the policy declares none).
pub fn effect_of(
    document: &PolicyDocument,
    server: &ServerName,
    tool: &ToolName,
    hints: &McpHints,
) -> (EffectClass, bool) {
    match document.declared_effect(server, tool) {
        Some(effect) => (effect, false),
        None => (hints.effect(), true),
    }
}

/// Judges one raw block at `now`: the verdict, and the block when it is to
/// be stored.
pub fn judge_block(
    raw: Option<&str>,
    now: Timestamp,
) -> (DisclosureVerdict, Option<LatencyDisclosure>) {
    let Some(text) = raw else {
        return (DisclosureVerdict::Missing, None);
    };
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(e) => {
            let message = format!("latencyDisclosure is not JSON: {e}");
            let problem = DisclosureProblem::new(DisclosureRule::FieldType, "", message);
            let problems = vec![problem];
            return (DisclosureVerdict::Invalid { problems }, None);
        }
    };
    if value.is_null() {
        return (DisclosureVerdict::Missing, None);
    }
    let block = match LatencyDisclosure::from_json(&value) {
        Ok(block) => block,
        Err(problems) => return (DisclosureVerdict::Invalid { problems }, None),
    };
    let assessment = assess(&block, now);
    if !assessment.is_valid {
        let problems = assessment.problems;
        return (DisclosureVerdict::Invalid { problems }, None);
    }
    if !assessment.is_fresh {
        let problems = assessment.problems;
        return (DisclosureVerdict::Stale { problems }, None);
    }
    let warnings = assessment.problems;
    (DisclosureVerdict::Accepted { warnings }, Some(block))
}

/// Checks an import's shape before anything is judged or stored.
pub(crate) fn check_import(tools: &[ToolImport], actor: &str) -> Result<(), CoreError> {
    check_len("actor", actor, ID_BYTES_MAX)?;
    if tools.len() > TOOLS_PER_SERVER_MAX {
        return Err(CoreError::invalid(
            "tools",
            format!(
                "{} tools for one server, at most {TOOLS_PER_SERVER_MAX}",
                tools.len()
            ),
        ));
    }
    let mut seen = BTreeSet::new();
    for t in tools {
        if !seen.insert(&t.tool) {
            return Err(CoreError::invalid(
                "tools",
                format!("tool {} is listed twice", t.tool),
            ));
        }
        let bytes = t.disclosure_json.as_ref().map_or(0, String::len);
        if bytes > DISCLOSURE_BLOCK_BYTES_MAX {
            return Err(CoreError::invalid(
                "latency_disclosure",
                format!(
                    "block of tool {} is {bytes} bytes, at most {DISCLOSURE_BLOCK_BYTES_MAX}",
                    t.tool
                ),
            ));
        }
    }
    Ok(())
}
