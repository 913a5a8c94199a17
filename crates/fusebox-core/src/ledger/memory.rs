//! The in-memory ledger: records by (namespace, key) with every index in
//! ordered sets. It is the reference [`LedgerStore`]: the server's RocksDB
//! store is tested against it, and core tests run the state machine on it.

use super::record::{Record, Status};
use super::store::{deadline, Index, LedgerStore};
use crate::error::CoreError;
use crate::name::{Namespace, ToolName};
use crate::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

type Id = (Namespace, String);

/// All records of all namespaces, with their indexes, in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    records: BTreeMap<Id, Record>,
    per_namespace: BTreeMap<Namespace, usize>,
    by_intent: BTreeSet<(Namespace, String, String)>,
    by_tool: BTreeSet<(Namespace, ToolName, String)>,
    by_status: BTreeSet<(Namespace, Status, String)>,
    by_operation: BTreeSet<(Namespace, String, String)>,
    deadlines: BTreeSet<(Timestamp, Namespace, String)>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger::default()
    }

    /// Records in all namespaces.
    pub fn total(&self) -> usize {
        self.records.len()
    }

    /// Whether no namespace holds a record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
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
}

impl LedgerStore for Ledger {
    fn get(&self, ns: &Namespace, key: &str) -> Option<Record> {
        self.records.get(&(ns.clone(), key.to_owned())).cloned()
    }

    fn len(&self, ns: &Namespace) -> usize {
        self.per_namespace.get(ns).copied().unwrap_or(0)
    }

    fn put(&mut self, ns: &Namespace, _old: Option<&Record>, record: Record) {
        let id = (ns.clone(), record.key.clone());
        if let Some(stored) = self.records.remove(&id) {
            self.unindex(ns, &stored);
        } else {
            *self.per_namespace.entry(ns.clone()).or_insert(0) += 1;
        }
        self.index(ns, &record);
        self.records.insert(id, record);
    }

    fn remove(&mut self, ns: &Namespace, old: &Record) {
        let Some(stored) = self.records.remove(&(ns.clone(), old.key.clone())) else {
            return;
        };
        self.unindex(ns, &stored);
        if let Some(n) = self.per_namespace.get_mut(ns) {
            *n -= 1;
            if *n == 0 {
                self.per_namespace.remove(ns);
            }
        }
    }

    fn due(&self, now: Timestamp, max: usize) -> Vec<(Namespace, String)> {
        self.deadlines
            .iter()
            .take_while(|(at, _, _)| *at <= now)
            .take(max)
            .map(|(_, ns, key)| (ns.clone(), key.clone()))
            .collect()
    }

    fn scan(&self, ns: &Namespace, index: Index<'_>, after: &str, budget: usize) -> Vec<String> {
        match index {
            Index::All => {
                let lo = (ns.clone(), after.to_owned());
                self.records
                    .range(lo..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|((_, k), _)| k.clone())
                    .filter(|k| k.as_str() > after)
                    .take(budget)
                    .collect()
            }
            Index::Intent(intent) => scan(&self.by_intent, ns, &intent.to_owned(), after, budget),
            Index::Tool(tool) => scan(&self.by_tool, ns, tool, after, budget),
            Index::Status(status) => scan(&self.by_status, ns, &status, after, budget),
            Index::Operation(op) => scan(&self.by_operation, ns, &op.to_owned(), after, budget),
        }
    }

    fn for_each_record(
        &self,
        f: &mut dyn FnMut(&Namespace, &Record) -> Result<(), CoreError>,
    ) -> Result<(), CoreError> {
        self.records.iter().try_for_each(|((ns, _), r)| f(ns, r))
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
