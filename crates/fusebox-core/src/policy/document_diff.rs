//! Canonical rendering and field-by-field diffs of policy documents.
//!
//! The canonical form is TOML with unset fields left out and maps in name
//! order, so two equal documents render to the same text whatever format or
//! key order the operator wrote them in. A diff compares the documents'
//! fields by path (`servers.tax.tools.lookup.timeout_ms: 3000 -> 10000`),
//! in path order, so policy history reads the same on every replica.

use super::document::{path_key, PolicyDocument};
use std::collections::BTreeMap;

/// How a field absent from one side of a diff is shown.
const UNSET: &str = "(unset)";

impl PolicyDocument {
    /// The canonical TOML rendering (for history, diffs and `policy get`).
    pub fn to_toml(&self) -> String {
        // Every field is a string, integer, float, boolean or table, and every
        // map key a string, so rendering cannot fail; say so if it ever does.
        toml::to_string(self).unwrap_or_else(|e| format!("# policy could not be rendered: {e}\n"))
    }

    /// The fields that differ from `self` to `other`, one line each
    /// (`path: old -> new`, `(unset)` for an absent side), in path order.
    pub fn diff(&self, other: &PolicyDocument) -> Vec<String> {
        let before = flatten_document(self);
        let after = flatten_document(other);
        let mut paths: Vec<&String> = before.keys().chain(after.keys()).collect();
        paths.sort();
        paths.dedup();
        paths
            .into_iter()
            .filter_map(|path| {
                let old = before.get(path).map_or(UNSET, String::as_str);
                let new = after.get(path).map_or(UNSET, String::as_str);
                (old != new).then(|| format!("{path}: {old} -> {new}"))
            })
            .collect()
    }
}

/// Every leaf of the document by dotted path, each rendered as a TOML value;
/// an empty section is a leaf `{}`, so adding one still shows in a diff.
fn flatten_document(document: &PolicyDocument) -> BTreeMap<String, String> {
    let mut leaves = BTreeMap::new();
    match toml::Table::try_from(document) {
        Ok(table) => flatten_table("", &table, &mut leaves),
        Err(e) => {
            leaves.insert("document".to_string(), format!("unrenderable ({e})"));
        }
    }
    leaves
}

fn flatten_table(prefix: &str, table: &toml::Table, leaves: &mut BTreeMap<String, String>) {
    if table.is_empty() && !prefix.is_empty() {
        leaves.insert(prefix.to_string(), "{}".to_string());
    }
    for (key, value) in table {
        let path = if prefix.is_empty() {
            path_key(key)
        } else {
            format!("{prefix}.{}", path_key(key))
        };
        match value {
            toml::Value::Table(inner) => flatten_table(&path, inner, leaves),
            leaf => {
                leaves.insert(path, leaf.to_string());
            }
        }
    }
}
