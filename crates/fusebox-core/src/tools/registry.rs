//! The registry proper: imported manifests and observed latency windows.

use super::{effect_of, judge_block, StoredBlock, ToolId, ToolImport, ToolImported, ToolRecord};
use crate::disclosure::{
    assess, emit_disclosure, LatencyDisclosure, LatencySketch, ObservedLatency, PublisherFacts,
    WindowedSketch, DAY_MS,
};
use crate::error::CoreError;
use crate::keyed::KeyedMap;
use crate::limits::{OBSERVED_TOOLS_MAX, OBSERVED_WINDOW_BUCKETS, TOOLS_PER_NAMESPACE_MAX};
use crate::name::{Namespace, ServerName, ToolName};
use crate::policy::PolicyDocument;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

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

/// Every imported tool and every observed tool's latency window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolRegistry {
    tools: KeyedMap<ToolId, ToolRecord>,
    observed: KeyedMap<ToolId, WindowedSketch>,
}

impl ToolRegistry {
    /// Every imported tool of a namespace, in `(server, tool)` order.
    pub fn tools_in<'a>(
        &'a self,
        ns: &'a Namespace,
    ) -> impl Iterator<Item = (&'a ToolId, &'a ToolRecord)> + 'a {
        self.tools.iter().filter(move |(id, _)| &id.namespace == ns)
    }

    /// Forgets a namespace's tools and their observed latency; returns the
    /// imported tools that went, in order.
    pub(crate) fn remove_namespace(&mut self, ns: &Namespace) -> Vec<ToolId> {
        let gone: Vec<ToolId> = self.tools_in(ns).map(|(id, _)| id.clone()).collect();
        for id in &gone {
            self.tools.remove(id);
        }
        self.observed.retain(|id, _| &id.namespace != ns);
        gone
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
        announce: &mut impl FnMut(&ToolId),
    ) -> Result<Vec<ToolImported>, CoreError> {
        let (ns, server) = (of.namespace, of.server);
        debug_assert!(
            super::check_import(tools, of.actor).is_ok(),
            "validated on entry"
        );
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
            announce(id);
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
            announce(&id);
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
        announce: &mut impl FnMut(&ToolId),
    ) {
        for id in ids {
            let Some(record) = self.tools.get(id) else {
                continue;
            };
            let penalized = self.penalty(id, record, now);
            if let Some(record) = self.tools.get_mut(id) {
                if record.penalized != penalized {
                    record.penalized = penalized;
                    announce(id);
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
    /// `measurement_window_days` is the namespace's window in days (the
    /// spec's unit); a window that is not whole days (the default is 10
    /// minutes) is refused rather than rounded up into a false claim.
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
        // The spec states the window in whole days; rounding a shorter
        // window up would claim a day of evidence the fleet does not have.
        // The window the samples were kept in (a policy change starts a new
        // one only at the next sample).
        let window_ms = self
            .observed
            .get(id)
            .map_or_else(|| document.observation_window_ms(), |w| w.window_ms());
        if !window_ms.is_multiple_of(DAY_MS) {
            return Err(CoreError::invalid(
                "measurement_window",
                format!(
                    "the fleet observes latency over a {window_ms} ms window, and a disclosure \
                     states its window in whole days (the spec recommends 7 or 30); set \
                     [latency] window_ms = {DAY_MS} (one day, the widest) to emit one"
                ),
            ));
        }
        emit_disclosure(&observed, window_ms / DAY_MS, now, timeout_ms, &facts)
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
