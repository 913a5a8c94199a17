//! The tools registry: what each tool server's manifest says about its tools
//! (MCP hints, latency disclosure), and the latency the fleet observes.
//!
//! An import replaces one server's tool list in one namespace, as a fresh
//! `tools/list` does: each tool's raw `latencyDisclosure` block is judged by
//! [`crate::disclosure`] at the entry's time, and only a valid, fresh block
//! is stored. Observed latency is kept per tool in a [`WindowedSketch`]
//! whether or not the tool was imported, so a publisher can emit a block
//! from telemetry alone. A tool whose observed p95 runs more than 50% above
//! its stored disclosure's p95 over enough samples is flagged penalized.
//!
//! Invariants: every collection is a `BTreeMap` keyed by [`ToolId`], so
//! snapshots and digests are deterministic; tools per server, tools per
//! namespace, block bytes and observed tools are bounded by [`crate::limits`];
//! a stored disclosure always passed [`assess`] without errors and was fresh
//! when it was imported.

use super::answer::WatchEvent;
use crate::disclosure::{
    assess, emit_disclosure, DisclosureProblem, DisclosureRule, LatencyDisclosure, LatencySketch,
    McpHints, ObservedLatency, PublisherFacts, WindowedSketch, DAY_MS,
};
use crate::error::{check_len, CoreError};
use crate::limits::{
    DISCLOSURE_BLOCK_BYTES_MAX, ID_BYTES_MAX, OBSERVED_TOOLS_MAX, OBSERVED_WINDOW_BUCKETS,
    TOOLS_PER_NAMESPACE_MAX, TOOLS_PER_SERVER_MAX,
};
use crate::name::{Namespace, ServerName, ToolName};
use crate::policy::{EffectClass, PolicyDocument};
use crate::time::Timestamp;
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet};

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

/// Which manifest an import carries: one server's, in one namespace, and
/// who imports it.
pub(crate) struct ManifestOf<'a> {
    /// The namespace.
    pub namespace: &'a Namespace,
    /// The tool server the manifest describes.
    pub server: &'a ServerName,
    /// Who imports it.
    pub actor: &'a str,
}

/// Where registry changes announce themselves: the fleet's revision counter
/// and the events of the command being applied.
pub(crate) struct Announce<'a> {
    /// The fleet's last revision; each event takes the next one.
    pub revision: &'a mut u64,
    /// The events of the command being applied.
    pub events: &'a mut Vec<WatchEvent>,
}

impl Announce<'_> {
    fn tool(&mut self, id: &ToolId) {
        *self.revision += 1;
        self.events.push(WatchEvent::Tool {
            revision: *self.revision,
            namespace: id.namespace.clone(),
            server: id.server.clone(),
            tool: id.tool.clone(),
        });
    }
}

/// Every imported tool and every observed tool's latency window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolRegistry {
    tools: BTreeMap<ToolId, ToolRecord>,
    observed: BTreeMap<ToolId, WindowedSketch>,
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
fn check_import(tools: &[ToolImport], actor: &str) -> Result<(), CoreError> {
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

impl ToolRegistry {
    /// Every imported tool of a namespace, in `(server, tool)` order.
    pub fn tools_in<'a>(
        &'a self,
        ns: &'a Namespace,
    ) -> impl Iterator<Item = (&'a ToolId, &'a ToolRecord)> + 'a {
        self.tools.iter().filter(move |(id, _)| &id.namespace == ns)
    }

    /// One imported tool.
    pub fn tool(&self, id: &ToolId) -> Option<&ToolRecord> {
        self.tools.get(id)
    }

    /// Every tool of a namespace with observed latency, in order.
    pub fn observed_in<'a>(&'a self, ns: &'a Namespace) -> impl Iterator<Item = &'a ToolId> + 'a {
        self.observed.keys().filter(move |id| &id.namespace == ns)
    }

    /// A tool's observed latency over the window ending at `now` (empty if
    /// never observed or all samples have left the window).
    pub fn observed(&self, id: &ToolId, now: Timestamp) -> LatencySketch {
        self.observed
            .get(id)
            .map_or_else(LatencySketch::new, |w| w.merged(now))
    }

    /// Replaces `server`'s tools in `ns` with `tools`, judging each block at
    /// `now`; refused as a whole (nothing changes) when a bound is broken.
    pub(crate) fn import(
        &mut self,
        of: &ManifestOf<'_>,
        tools: &[ToolImport],
        document: &PolicyDocument,
        now: Timestamp,
        announce: &mut Announce<'_>,
    ) -> Result<Vec<ToolImported>, CoreError> {
        let (ns, server) = (of.namespace, of.server);
        check_import(tools, of.actor)?;
        let id_of = |tool: &ToolName| ToolId {
            namespace: ns.clone(),
            server: server.clone(),
            tool: tool.clone(),
        };
        let others = self
            .tools
            .keys()
            .filter(|id| &id.namespace == ns && &id.server != server)
            .count();
        if others + tools.len() > TOOLS_PER_NAMESPACE_MAX {
            return Err(CoreError::limit(
                "tools in namespace",
                TOOLS_PER_NAMESPACE_MAX,
            ));
        }
        let listed: BTreeSet<&ToolName> = tools.iter().map(|t| &t.tool).collect();
        let dropped: Vec<ToolId> = self
            .tools
            .keys()
            .filter(|id| &id.namespace == ns && &id.server == server && !listed.contains(&id.tool))
            .cloned()
            .collect();
        for id in &dropped {
            self.tools.remove(id);
            announce.tool(id);
        }
        let mut results = Vec::with_capacity(tools.len());
        for t in tools {
            let id = id_of(&t.tool);
            let (verdict, block) = judge_block(t.disclosure_json.as_deref(), now);
            let (effect, effect_derived) = effect_of(document, server, &t.tool, &t.hints);
            let deadline_ms = block.as_ref().and_then(|b| assess(b, now).deadline_ms());
            let mut record = ToolRecord {
                hints: t.hints,
                disclosure: block.map(StoredBlock),
                imported_at: now,
                imported_by: of.actor.to_owned(),
                penalized: false,
            };
            record.penalized = self.penalty(&id, &record, now);
            self.tools.insert(id.clone(), record);
            announce.tool(&id);
            results.push(ToolImported {
                tool: t.tool.clone(),
                verdict,
                effect,
                effect_derived,
                deadline_ms,
            });
        }
        Ok(results)
    }

    /// Records one call's latency at `now` in a window `window_ms` wide (the
    /// namespace's policy); returns false when the tool is new and
    /// [`OBSERVED_TOOLS_MAX`] tools are observed already, the window is not
    /// a valid geometry, or the sample is too late for its window. A tool
    /// whose window was kept at another width starts afresh at this one.
    pub(crate) fn observe(
        &mut self,
        id: &ToolId,
        now: Timestamp,
        duration_ms: u64,
        window_ms: u64,
    ) -> bool {
        if let Some(window) = self.observed.get_mut(id) {
            if window.window_ms() == window_ms {
                return window.record(now, duration_ms);
            }
        } else if self.observed.len() >= OBSERVED_TOOLS_MAX {
            return false;
        }
        // A validated policy only holds multiples of the bucket count.
        let Ok(mut window) = WindowedSketch::new(window_ms, OBSERVED_WINDOW_BUCKETS) else {
            return false;
        };
        let recorded = window.record(now, duration_ms);
        self.observed.insert(id.clone(), window);
        recorded
    }

    /// Whether `record` is to be penalized at `now`: it holds a disclosure
    /// that is still fresh, and the observed window breaks the penalty rule.
    fn penalty(&self, id: &ToolId, record: &ToolRecord, now: Timestamp) -> bool {
        let Some(block) = record.disclosure() else {
            return false;
        };
        if !assess(block, now).is_usable() {
            return false;
        }
        ObservedLatency::compare(block, &self.observed(id, now)).penalized
    }

    /// Re-judges the penalty of `ids` at `now`, announcing each change.
    pub(crate) fn update_penalties<'a>(
        &mut self,
        ids: impl IntoIterator<Item = &'a ToolId>,
        now: Timestamp,
        announce: &mut Announce<'_>,
    ) {
        for id in ids {
            let Some(record) = self.tools.get(id) else {
                continue;
            };
            let penalized = self.penalty(id, record, now);
            if let Some(record) = self.tools.get_mut(id) {
                if record.penalized != penalized {
                    record.penalized = penalized;
                    announce.tool(id);
                }
            }
        }
    }

    /// A `latency_disclosure` block from the fleet's observations of `id`
    /// over the window ending at `now`, for its publisher to ship.
    ///
    /// What telemetry cannot tell (idempotent, retry_safe, streaming and
    /// the descriptive fields) comes from the stored disclosure, else from
    /// the tool's effect class (an idempotent effect is retry safe). The
    /// timeout is `timeout_ms`, else the stored disclosure's, else the
    /// policy's; [`emit_disclosure`] raises it above p99 × 1.2 if needed.
    /// `measurement_window_days` is the namespace's window rounded up to
    /// whole days (the spec's unit): 1 for the default 10-minute window.
    pub fn emit(
        &self,
        id: &ToolId,
        document: &PolicyDocument,
        timeout_ms: Option<u64>,
        now: Timestamp,
    ) -> Result<LatencyDisclosure, CoreError> {
        let observed = self.observed(id, now);
        let record = self.tools.get(id);
        let stored = record.and_then(ToolRecord::disclosure);
        let facts = match stored {
            Some(b) => PublisherFacts {
                idempotent: b.idempotent,
                retry_safe: b.retry_safe,
                streaming: b.streaming,
                time_to_first_byte_ms: b.time_to_first_byte_ms,
                region: b.region.clone(),
                cold_start_ms: b.cold_start_ms,
                degradation_modes: b.degradation_modes.clone(),
                methodology_url: b.methodology_url.clone(),
            },
            None => {
                let effect = match record {
                    Some(r) => effect_of(document, &id.server, &id.tool, &r.hints).0,
                    None => document.tool_policy(&id.server, &id.tool).effect,
                };
                PublisherFacts {
                    idempotent: effect.is_idempotent(),
                    retry_safe: effect.is_idempotent(),
                    ..PublisherFacts::default()
                }
            }
        };
        let timeout_ms = timeout_ms
            .or(stored.map(|b| b.timeout_ms))
            .unwrap_or_else(|| document.tool_policy(&id.server, &id.tool).timeout_ms);
        let window_days = document.observation_window_ms().div_ceil(DAY_MS);
        emit_disclosure(&observed, window_days, now, timeout_ms, &facts)
    }

    /// The tools penalized now: time alone may clear them, as their slow
    /// samples leave the window (or their disclosure goes stale).
    pub(crate) fn penalized(&self) -> Vec<ToolId> {
        self.tools
            .iter()
            .filter(|(_, r)| r.penalized)
            .map(|(id, _)| id.clone())
            .collect()
    }
}
