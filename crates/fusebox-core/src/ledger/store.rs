//! The in-memory ledger: records by (namespace, key), secondary indexes and
//! the deadline index that drives lease expiry and retention.
//!
//! It is the reference store the state machine uses and the model the
//! server's RocksDB store must answer exactly like. Indexes are rebuilt from
//! the records on restore, so a snapshot holds records only.

use super::record::{Record, Status};
use super::request::{BeginRequest, CompleteRequest, ResolveRequest};
use super::rules::{self, BeginAnswer, CompleteAnswer, ResolveAnswer};
use crate::error::CoreError;
use crate::limits::{LEDGER_RECORDS_PER_NAMESPACE_MAX, LIST_LIMIT_MAX};

/// Most candidates one list call examines.
pub const LIST_SCAN_MAX: usize = 10 * LIST_LIMIT_MAX;
use crate::name::{Namespace, ToolName};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

type Id = (Namespace, String);

/// Filters for listing records; all given filters must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListFilter {
    /// Only records of this intent.
    pub intent_id: Option<String>,
    /// Only records of this tool.
    pub tool: Option<ToolName>,
    /// Only records in this status.
    pub status: Option<Status>,
    /// Only records with this backend operation id.
    pub operation_id: Option<String>,
    /// Resume after this key (the previous page's cursor).
    pub after_key: Option<String>,
    /// Page size (capped at [`LIST_LIMIT_MAX`]).
    pub limit: usize,
}

/// One page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The records, ordered by key.
    pub records: Vec<Record>,
    /// The cursor for the next page, if there may be more.
    pub next_after_key: Option<String>,
}

/// All records of all namespaces, with their indexes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<(Namespace, Record)>", into = "Vec<(Namespace, Record)>")]
pub struct Ledger {
    records: BTreeMap<Id, Record>,
    per_namespace: BTreeMap<Namespace, usize>,
    by_intent: BTreeSet<(Namespace, String, String)>,
    by_tool: BTreeSet<(Namespace, ToolName, String)>,
    by_status: BTreeSet<(Namespace, Status, String)>,
    by_operation: BTreeSet<(Namespace, String, String)>,
    deadlines: BTreeSet<(Timestamp, Namespace, String)>,
}

impl From<Vec<(Namespace, Record)>> for Ledger {
    fn from(records: Vec<(Namespace, Record)>) -> Self {
        let mut ledger = Ledger::default();
        for (ns, record) in records {
            ledger.put(&ns, record);
        }
        ledger
    }
}

impl From<Ledger> for Vec<(Namespace, Record)> {
    fn from(ledger: Ledger) -> Self {
        ledger
            .records
            .into_iter()
            .map(|((ns, _), r)| (ns, r))
            .collect()
    }
}

/// When time alone changes or removes a record.
fn deadline(record: &Record) -> Option<Timestamp> {
    match record.status {
        Status::InProgress if !record.effect.is_idempotent() => record.lease_until,
        s if s.is_purgeable() => record.expires_at,
        _ => None,
    }
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger::default()
    }

    /// Records in a namespace.
    pub fn len(&self, ns: &Namespace) -> usize {
        self.per_namespace.get(ns).copied().unwrap_or(0)
    }

    /// Records in all namespaces.
    pub fn total(&self) -> usize {
        self.records.len()
    }

    /// Whether no namespace holds a record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The record for a key, as stored (time not applied).
    pub fn get(&self, ns: &Namespace, key: &str) -> Option<&Record> {
        self.records.get(&(ns.clone(), key.to_owned()))
    }

    /// The record for a key as of `now` (a lapsed lease shows as ambiguous).
    pub fn lookup(&self, ns: &Namespace, key: &str, now: Timestamp) -> Option<Record> {
        let mut record = self.get(ns, key)?.clone();
        rules::expire(&mut record, now);
        Some(record)
    }

    fn unindex(&mut self, ns: &Namespace, r: &Record) {
        let key = r.key.clone();
        self.by_intent
            .remove(&(ns.clone(), r.intent_id.clone(), key.clone()));
        self.by_tool
            .remove(&(ns.clone(), r.tool.clone(), key.clone()));
        self.by_status.remove(&(ns.clone(), r.status, key.clone()));
        if let Some(op) = &r.operation_id {
            self.by_operation
                .remove(&(ns.clone(), op.clone(), key.clone()));
        }
        if let Some(at) = deadline(r) {
            self.deadlines.remove(&(at, ns.clone(), key));
        }
    }

    fn index(&mut self, ns: &Namespace, r: &Record) {
        let key = r.key.clone();
        self.by_intent
            .insert((ns.clone(), r.intent_id.clone(), key.clone()));
        self.by_tool
            .insert((ns.clone(), r.tool.clone(), key.clone()));
        self.by_status.insert((ns.clone(), r.status, key.clone()));
        if let Some(op) = &r.operation_id {
            self.by_operation
                .insert((ns.clone(), op.clone(), key.clone()));
        }
        if let Some(at) = deadline(r) {
            self.deadlines.insert((at, ns.clone(), key));
        }
    }

    /// Stores a record, keeping every index exact.
    fn put(&mut self, ns: &Namespace, record: Record) {
        let id = (ns.clone(), record.key.clone());
        if let Some(old) = self.records.remove(&id) {
            self.unindex(ns, &old);
        } else {
            *self.per_namespace.entry(ns.clone()).or_insert(0) += 1;
        }
        self.index(ns, &record);
        self.records.insert(id, record);
    }

    fn remove(&mut self, ns: &Namespace, key: &str) {
        if let Some(old) = self.records.remove(&(ns.clone(), key.to_owned())) {
            self.unindex(ns, &old);
            if let Some(n) = self.per_namespace.get_mut(ns) {
                *n -= 1;
                if *n == 0 {
                    self.per_namespace.remove(ns);
                }
            }
        }
    }

    /// `begin` on a key. A new key in a full namespace is refused.
    pub fn begin(
        &mut self,
        ns: &Namespace,
        req: &BeginRequest,
        now: Timestamp,
    ) -> Result<BeginAnswer, CoreError> {
        req.validate()?;
        let existing = self.get(ns, &req.key).cloned();
        if existing.is_none() && self.len(ns) >= LEDGER_RECORDS_PER_NAMESPACE_MAX {
            return Err(CoreError::limit(
                "ledger records in namespace",
                LEDGER_RECORDS_PER_NAMESPACE_MAX,
            ));
        }
        let (changed, answer) = rules::begin(existing, req, now);
        if let Some(record) = changed {
            self.put(ns, record);
        }
        Ok(answer)
    }

    /// `complete` on a key; `retention_ms` dates the purge of a final record.
    pub fn complete(
        &mut self,
        ns: &Namespace,
        req: &CompleteRequest,
        now: Timestamp,
        retention_ms: u64,
    ) -> Result<CompleteAnswer, CoreError> {
        req.validate()?;
        let existing = self.get(ns, &req.key).cloned();
        let (changed, answer) = rules::complete(existing, req, now, retention_ms);
        if let Some(record) = changed {
            self.put(ns, record);
        }
        Ok(answer)
    }

    /// `resolve` on a key.
    pub fn resolve(
        &mut self,
        ns: &Namespace,
        req: &ResolveRequest,
        now: Timestamp,
        retention_ms: u64,
    ) -> Result<ResolveAnswer, CoreError> {
        req.validate()?;
        let existing = self.get(ns, &req.key).cloned();
        let (changed, answer) = rules::resolve(existing, req, now, retention_ms);
        if let Some(record) = changed {
            self.put(ns, record);
        }
        Ok(answer)
    }

    /// Applies due deadlines (lease expiry, retention), at most `max` of
    /// them; returns how many it applied. Ambiguous and in-progress records
    /// are never purged.
    pub fn tick(&mut self, now: Timestamp, max: usize) -> usize {
        let due: Vec<(Timestamp, Namespace, String)> = self
            .deadlines
            .iter()
            .take_while(|(at, _, _)| *at <= now)
            .take(max)
            .cloned()
            .collect();
        for (_, ns, key) in &due {
            let Some(mut record) = self.get(ns, key).cloned() else {
                continue;
            };
            if rules::expire(&mut record, now) {
                self.put(ns, record);
            } else if record.status.is_purgeable() && record.expires_at.is_some_and(|at| now >= at)
            {
                self.remove(ns, key);
            }
        }
        due.len()
    }

    /// Lists records of a namespace by the most selective filter given.
    ///
    /// Scans at most [`LIST_SCAN_MAX`] candidates per call; a page cut short
    /// by that budget still carries a cursor, so listing always progresses.
    pub fn list(&self, ns: &Namespace, filter: &ListFilter, now: Timestamp) -> Page {
        let limit = filter.limit.clamp(1, LIST_LIMIT_MAX);
        let after = filter.after_key.clone().unwrap_or_default();
        let (keys, exhausted) = self.candidate_keys(ns, filter, &after);
        let mut records = Vec::new();
        for key in &keys {
            if records.len() == limit {
                let cursor = records.last().map(|r: &Record| r.key.clone());
                return Page {
                    records,
                    next_after_key: cursor,
                };
            }
            let Some(record) = self.lookup(ns, key, now) else {
                continue;
            };
            if matches(&record, filter) {
                records.push(record);
            }
        }
        let next_after_key = if exhausted {
            None
        } else {
            keys.last().cloned()
        };
        Page {
            records,
            next_after_key,
        }
    }

    /// Keys after `after`, in key order, from the narrowest index; and
    /// whether the index was exhausted within the scan budget.
    fn candidate_keys(&self, ns: &Namespace, f: &ListFilter, after: &str) -> (Vec<String>, bool) {
        let budget = LIST_SCAN_MAX + 1;
        let mut keys: Vec<String> = if let Some(op) = &f.operation_id {
            scan(&self.by_operation, ns, op, after, budget)
        } else if let Some(intent) = &f.intent_id {
            scan(&self.by_intent, ns, intent, after, budget)
        } else if let Some(tool) = &f.tool {
            scan(&self.by_tool, ns, tool, after, budget)
        } else if let Some(status) = f.status {
            let mut keys = scan(&self.by_status, ns, &status, after, budget);
            if status == Status::Ambiguous {
                // A lapsed non-idempotent lease is ambiguous before the next
                // tick rewrites it; list it as such.
                keys.extend(scan(
                    &self.by_status,
                    ns,
                    &Status::InProgress,
                    after,
                    budget,
                ));
                keys.sort();
                keys.truncate(budget);
            }
            keys
        } else {
            let lo = (ns.clone(), after.to_owned());
            let it = self.records.range(lo..);
            it.take_while(|((n, _), _)| n == ns)
                .map(|((_, k), _)| k.clone())
                .filter(|k| k.as_str() > after)
                .take(budget)
                .collect()
        };
        let exhausted = keys.len() <= LIST_SCAN_MAX;
        keys.truncate(LIST_SCAN_MAX);
        (keys, exhausted)
    }
}

/// Keys under `(ns, value)` in an index, after `after`, at most `budget`.
fn scan<V: Ord + Clone>(
    index: &BTreeSet<(Namespace, V, String)>,
    ns: &Namespace,
    value: &V,
    after: &str,
    budget: usize,
) -> Vec<String> {
    let lo = (ns.clone(), value.clone(), after.to_owned());
    index
        .range(lo..)
        .take_while(|(n, v, _)| n == ns && v == value)
        .map(|t| t.2.clone())
        .filter(|k| k.as_str() > after)
        .take(budget)
        .collect()
}

fn matches(r: &Record, f: &ListFilter) -> bool {
    f.intent_id.as_ref().is_none_or(|i| &r.intent_id == i)
        && f.tool.as_ref().is_none_or(|t| &r.tool == t)
        && f.status.is_none_or(|s| r.status == s)
        && f.operation_id
            .as_ref()
            .is_none_or(|o| r.operation_id.as_ref() == Some(o))
}
