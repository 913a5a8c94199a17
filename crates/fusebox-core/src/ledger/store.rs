//! Where ledger records live, and the ledger's operations over any store.
//!
//! [`LedgerStore`] is the small storage contract: fetch a record, write one
//! back with its indexes, list due deadlines, walk an index in key order.
//! Everything the ledger *does* (`begin`, `complete`, `resolve`, `tick`,
//! `lookup`, `list`) is a provided method built on it and on the pure
//! [`rules`], so the in-memory [`super::Ledger`] and the server's RocksDB
//! store answer exactly alike: the only code that differs is storage.
//!
//! A store must keep its indexes exact: after `put` or `remove`, a record is
//! listed under exactly the intent, tool, status, operation id and deadline
//! it holds.

use super::record::{Record, Status};
use super::request::{BeginRequest, CompleteRequest, RenewRequest, ResolveRequest};
use super::rules::{self, BeginAnswer, CompleteAnswer, RenewAnswer, ResolveAnswer};
use crate::error::CoreError;
use crate::limits::{LEDGER_RECORDS_PER_NAMESPACE_MAX, LIST_LIMIT_MAX, LIST_SCAN_MAX};
use crate::name::{Namespace, ToolName};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

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

/// Which index a listing walks: keys of one namespace, in key order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Index<'a> {
    /// Every key of the namespace.
    All,
    /// Keys of one intent.
    Intent(&'a str),
    /// Keys of one tool.
    Tool(&'a ToolName),
    /// Keys in one status.
    Status(Status),
    /// Keys with one backend operation id.
    Operation(&'a str),
}

/// When time alone changes or removes a record: a non-idempotent lease
/// lapsing, or a final record's retention ending. Stores index this.
pub fn deadline(record: &Record) -> Option<Timestamp> {
    match record.status {
        Status::InProgress if !record.effect.is_idempotent() => record.lease_until,
        s if s.is_purgeable() => record.expires_at,
        _ => None,
    }
}

/// Storage for ledger records and their indexes.
///
/// Reads are infallible here: a store whose medium can fail (RocksDB)
/// latches the failure, answers as if the record were absent, and refuses
/// to commit what it computed, so a disk error stops the node instead of
/// turning into an answer.
pub trait LedgerStore {
    /// The record stored for a key (time not applied).
    fn get(&self, ns: &Namespace, key: &str) -> Option<Record>;

    /// Records in a namespace.
    fn len(&self, ns: &Namespace) -> usize;

    /// Stores `record`, replacing `old` (what [`LedgerStore::get`] returned
    /// for its key), keeping every index exact.
    fn put(&mut self, ns: &Namespace, old: Option<&Record>, record: Record);

    /// Removes `old` (what [`LedgerStore::get`] returned) and its indexes.
    fn remove(&mut self, ns: &Namespace, old: &Record);

    /// Keys whose [`deadline`] is at or before `now`, earliest first, at
    /// most `max`.
    fn due(&self, now: Timestamp, max: usize) -> Vec<(Namespace, String)>;

    /// Keys of `ns` under `index` that sort after `after`, in key order, at
    /// most `budget`.
    fn scan(&self, ns: &Namespace, index: Index<'_>, after: &str, budget: usize) -> Vec<String>;

    /// Visits every record of every namespace in `(namespace, key)` order
    /// (snapshots, digests); stops at the first error `f` returns.
    fn for_each_record(
        &self,
        f: &mut dyn FnMut(&Namespace, &Record) -> Result<(), CoreError>,
    ) -> Result<(), CoreError>;

    /// The record for a key as of `now` (a lapsed lease shows as ambiguous).
    fn lookup(&self, ns: &Namespace, key: &str, now: Timestamp) -> Option<Record> {
        let mut record = self.get(ns, key)?;
        rules::expire(&mut record, now);
        Some(record)
    }

    /// `begin` on a key. A new key in a full namespace is refused.
    fn begin(
        &mut self,
        ns: &Namespace,
        req: &BeginRequest,
        now: Timestamp,
    ) -> Result<BeginAnswer, CoreError> {
        debug_assert!(req.validate().is_ok(), "validated on entry");
        let existing = self.get(ns, &req.key);
        if existing.is_none() && self.len(ns) >= LEDGER_RECORDS_PER_NAMESPACE_MAX {
            return Err(CoreError::limit(
                "ledger records in namespace",
                LEDGER_RECORDS_PER_NAMESPACE_MAX,
            ));
        }
        let (changed, answer) = rules::begin(existing.clone(), req, now);
        if let Some(record) = changed {
            put_checked(self, ns, existing.as_ref(), record);
        }
        Ok(answer)
    }

    /// `complete` on a key; `retention_ms` dates the purge of a final record.
    fn complete(
        &mut self,
        ns: &Namespace,
        req: &CompleteRequest,
        now: Timestamp,
        retention_ms: u64,
    ) -> Result<CompleteAnswer, CoreError> {
        debug_assert!(req.validate().is_ok(), "validated on entry");
        let existing = self.get(ns, &req.key);
        let (changed, answer) = rules::complete(existing.clone(), req, now, retention_ms);
        if let Some(record) = changed {
            put_checked(self, ns, existing.as_ref(), record);
        }
        Ok(answer)
    }

    /// `renew` on a key: the holder extends its live lease.
    fn renew(&mut self, ns: &Namespace, req: &RenewRequest, now: Timestamp) -> RenewAnswer {
        debug_assert!(req.validate().is_ok(), "validated on entry");
        let existing = self.get(ns, &req.key);
        let (changed, answer) = rules::renew(existing.clone(), req, now);
        if let Some(record) = changed {
            put_checked(self, ns, existing.as_ref(), record);
        }
        answer
    }

    /// `resolve` on a key.
    fn resolve(
        &mut self,
        ns: &Namespace,
        req: &ResolveRequest,
        now: Timestamp,
        retention_ms: u64,
    ) -> Result<ResolveAnswer, CoreError> {
        debug_assert!(req.validate().is_ok(), "validated on entry");
        let existing = self.get(ns, &req.key);
        let (changed, answer) = rules::resolve(existing.clone(), req, now, retention_ms);
        if let Some(record) = changed {
            put_checked(self, ns, existing.as_ref(), record);
        }
        Ok(answer)
    }

    /// Applies due deadlines (lease expiry, retention), at most `max` of
    /// them; returns how many it applied. Ambiguous and in-progress records
    /// are never purged.
    fn tick(&mut self, now: Timestamp, max: usize) -> usize {
        let due = self.due(now, max);
        for (ns, key) in &due {
            let Some(old) = self.get(ns, key) else {
                continue;
            };
            let mut record = old.clone();
            if rules::expire(&mut record, now) {
                put_checked(self, ns, Some(&old), record);
            } else if old.status.is_purgeable() && old.expires_at.is_some_and(|at| now >= at) {
                self.remove(ns, &old);
            }
        }
        due.len()
    }

    /// Lists records of a namespace by the most selective filter given.
    ///
    /// Scans at most [`LIST_SCAN_MAX`] candidates per call; a page cut short
    /// by that budget still carries a cursor, so listing always progresses.
    fn list(&self, ns: &Namespace, filter: &ListFilter, now: Timestamp) -> Page {
        let limit = filter.limit.clamp(1, LIST_LIMIT_MAX);
        let after = filter.after_key.clone().unwrap_or_default();
        let (keys, exhausted) = candidate_keys(self, ns, filter, &after);
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
}

impl<S: LedgerStore + ?Sized> LedgerStore for Box<S> {
    fn get(&self, ns: &Namespace, key: &str) -> Option<Record> {
        (**self).get(ns, key)
    }
    fn len(&self, ns: &Namespace) -> usize {
        (**self).len(ns)
    }
    fn put(&mut self, ns: &Namespace, old: Option<&Record>, record: Record) {
        (**self).put(ns, old, record);
    }
    fn remove(&mut self, ns: &Namespace, old: &Record) {
        (**self).remove(ns, old);
    }
    fn due(&self, now: Timestamp, max: usize) -> Vec<(Namespace, String)> {
        (**self).due(now, max)
    }
    fn scan(&self, ns: &Namespace, index: Index<'_>, after: &str, budget: usize) -> Vec<String> {
        (**self).scan(ns, index, after, budget)
    }
    fn for_each_record(
        &self,
        f: &mut dyn FnMut(&Namespace, &Record) -> Result<(), CoreError>,
    ) -> Result<(), CoreError> {
        (**self).for_each_record(f)
    }
}

/// Stores a record the rules changed, asserting that its status moved
/// along an allowed edge ([`Status::may_become`]; a new key starts held).
fn put_checked<S: LedgerStore + ?Sized>(
    store: &mut S,
    ns: &Namespace,
    old: Option<&Record>,
    record: Record,
) {
    debug_assert!(
        old.map_or(record.status == Status::InProgress, |o| o
            .status
            .may_become(record.status)),
        "ledger status moved from {:?} to {:?}",
        old.map(|o| o.status),
        record.status
    );
    store.put(ns, old, record);
}

/// A ledger behind a pointer, so one state machine type serves every store.
pub type BoxedLedger = Box<dyn LedgerStore + Send>;

/// Keys after `after`, in key order, from the narrowest index; and whether
/// the index was exhausted within the scan budget.
fn candidate_keys<S: LedgerStore + ?Sized>(
    store: &S,
    ns: &Namespace,
    f: &ListFilter,
    after: &str,
) -> (Vec<String>, bool) {
    let budget = LIST_SCAN_MAX + 1;
    let mut keys = if let Some(op) = &f.operation_id {
        store.scan(ns, Index::Operation(op), after, budget)
    } else if let Some(intent) = &f.intent_id {
        store.scan(ns, Index::Intent(intent), after, budget)
    } else if let Some(tool) = &f.tool {
        store.scan(ns, Index::Tool(tool), after, budget)
    } else if let Some(status) = f.status {
        let mut keys = store.scan(ns, Index::Status(status), after, budget);
        if status == Status::Ambiguous {
            // A lapsed non-idempotent lease is ambiguous before the next
            // tick rewrites it; list it as such.
            keys.extend(store.scan(ns, Index::Status(Status::InProgress), after, budget));
            keys.sort();
            keys.truncate(budget);
        }
        keys
    } else {
        store.scan(ns, Index::All, after, budget)
    };
    let exhausted = keys.len() <= LIST_SCAN_MAX;
    keys.truncate(LIST_SCAN_MAX);
    (keys, exhausted)
}

fn matches(r: &Record, f: &ListFilter) -> bool {
    f.intent_id.as_ref().is_none_or(|i| &r.intent_id == i)
        && f.tool.as_ref().is_none_or(|t| &r.tool == t)
        && f.status.is_none_or(|s| r.status == s)
        && f.operation_id
            .as_ref()
            .is_none_or(|o| r.operation_id.as_ref() == Some(o))
}
