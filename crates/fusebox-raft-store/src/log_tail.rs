//! The log's latest entries, kept in memory as appended, so that reading
//! them back costs no decoding.
//!
//! Every entry is read back soon after it is appended: on the leader once
//! to apply it and once per follower to replicate it, on a follower once
//! to apply it. From RocksDB each read decodes the entry anew (a batch of
//! reports holds thousands of names); from here it is a copy of a pointer
//! ([`crate::Request`] shares its command).
//!
//! The tail holds a contiguous run of indexes ending at the log's last
//! entry, bounded by [`LOG_TAIL_ENTRIES_MAX`] and [`LOG_TAIL_BYTES_MAX`]
//! (encoded bytes); the oldest go first. A read is served from it only when
//! it holds the whole range asked for; anything else is read from RocksDB.
//! It never holds an entry the database does not, and never another version
//! of one: an append that rewrites indexes drops them here first, writes
//! the batch, then adds it; a truncation or a purge drops entries here
//! before the database does.
//!
//! It holds what a read from the database would give back: an entry whose
//! command is one of the batches that carry the load (whose types all
//! derive their encoding, so decoding gives back an equal value) is kept as
//! appended; any other is kept as decoded from the bytes written. A policy
//! document, for one, is encoded as its TOML text, and every node must
//! apply what the others decode, never the leader's own copy.

use crate::limits::{LOG_TAIL_BYTES_MAX, LOG_TAIL_ENTRIES_MAX};
use crate::types::Entry;
use fusebox_core::machine::Command;
use openraft::entry::RaftEntry;
use openraft::EntryPayload;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The tail; shared by the log store and its readers.
#[derive(Default)]
pub(crate) struct LogTail {
    inner: Mutex<Tail>,
}

/// Entries of consecutive indexes, oldest first, with their encoded sizes.
#[derive(Default)]
pub(crate) struct Tail {
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl LogTail {
    /// Locks the tail, to read or change it.
    pub(crate) fn change(&self) -> MutexGuard<'_, Tail> {
        // Nothing panics while holding it; a poisoned tail is still a run
        // of consecutive entries the database holds.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Entries `[start, end)`, if the tail holds every one of them.
    pub(crate) fn get(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let tail = self.change();
        let first = tail.entries.front()?.0.index();
        let last = tail.entries.back()?.0.index();
        if start < first || end == 0 || end - 1 > last || start >= end {
            return None;
        }
        let from = usize::try_from(start - first).ok()?;
        let count = usize::try_from(end - start).ok()?;
        Some(
            tail.entries
                .range(from..from + count)
                .map(|(entry, _)| entry.clone())
                .collect(),
        )
    }
}

/// Whether `entry` decodes to a value equal to itself, so the tail may keep
/// it as appended: blank and membership entries, and the commands that
/// carry the load (reports, ledger calls, ticks), built only of types whose
/// encoding is derived. Any other is kept as decoded.
pub(crate) fn kept_as_appended(entry: &Entry) -> bool {
    match &entry.payload {
        EntryPayload::Normal(request) => matches!(
            *request.command,
            Command::ReportBatch { .. }
                | Command::ReportOutcomes { .. }
                | Command::LedgerBatch { .. }
                | Command::Begin { .. }
                | Command::Complete { .. }
                | Command::Tick
        ),
        EntryPayload::Blank | EntryPayload::Membership(_) => true,
    }
}

impl Tail {
    /// Adds entries just written to the database (`sizes`: their encoded
    /// bytes). Entries that do not follow the tail's last replace the
    /// entries from their first index on (or the whole tail, if they leave
    /// a gap).
    pub(crate) fn appended(&mut self, entries: &[Entry], sizes: &[usize]) {
        let Some(first) = entries.first() else {
            return;
        };
        let next = self.entries.back().map(|(e, _)| e.index() + 1);
        if next != Some(first.index()) {
            self.truncate_from(first.index());
            if self.entries.back().map(|(e, _)| e.index() + 1) != Some(first.index()) {
                self.clear();
            }
        }
        for (entry, &size) in entries.iter().zip(sizes) {
            self.entries.push_back((entry.clone(), size));
            self.bytes = self.bytes.saturating_add(size);
        }
        while self.entries.len() > LOG_TAIL_ENTRIES_MAX || self.bytes > LOG_TAIL_BYTES_MAX {
            self.pop_oldest();
        }
    }

    /// Drops entries from index `start` on (a truncation).
    pub(crate) fn truncate_from(&mut self, start: u64) {
        while self.entries.back().is_some_and(|(e, _)| e.index() >= start) {
            if let Some((_, size)) = self.entries.pop_back() {
                self.bytes = self.bytes.saturating_sub(size);
            }
        }
    }

    /// Drops entries up to index `upto` (a purge).
    pub(crate) fn purge_upto(&mut self, upto: u64) {
        while self.entries.front().is_some_and(|(e, _)| e.index() <= upto) {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((_, size)) = self.entries.pop_front() {
            self.bytes = self.bytes.saturating_sub(size);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Request;
    use fusebox_core::machine::Command;
    use openraft::EntryPayload;

    /// Entry `index`, written in `term` (its stamp tells them apart).
    fn entry(term: u64, index: u64) -> Entry {
        let id = openraft::testing::log_id::<crate::TypeConfig>(term, 1, index);
        Entry::new_normal(id, Request::new(term, Command::Tick))
    }

    fn append(tail: &LogTail, term: u64, indexes: std::ops::Range<u64>, size: usize) {
        let entries: Vec<Entry> = indexes.map(|i| entry(term, i)).collect();
        let sizes = vec![size; entries.len()];
        tail.change().appended(&entries, &sizes);
    }

    fn indexes(entries: Option<Vec<Entry>>) -> Option<Vec<(u64, u64)>> {
        entries.map(|es| {
            es.iter()
                .map(|e| match &e.payload {
                    EntryPayload::Normal(r) => (r.at_ms, e.index()),
                    _ => (0, e.index()),
                })
                .collect()
        })
    }

    #[test]
    fn serves_only_ranges_it_holds_whole() {
        let tail = LogTail::default();
        assert!(tail.get(1, 2).is_none(), "empty");
        append(&tail, 1, 5..10, 10);
        assert_eq!(indexes(tail.get(5, 7)), Some(vec![(1, 5), (1, 6)]));
        assert_eq!(indexes(tail.get(9, 10)), Some(vec![(1, 9)]));
        assert!(tail.get(4, 6).is_none(), "starts before the tail");
        assert!(tail.get(8, 11).is_none(), "ends after the tail");
        assert!(tail.get(7, 7).is_none(), "empty range");
        assert!(tail.get(0, 0).is_none());
    }

    #[test]
    fn a_truncation_and_a_rewrite_replace_entries() {
        let tail = LogTail::default();
        append(&tail, 1, 1..6, 10);
        tail.change().truncate_from(4);
        assert!(tail.get(3, 5).is_none(), "entry 4 went");
        append(&tail, 2, 4..6, 10);
        assert_eq!(
            indexes(tail.get(3, 6)),
            Some(vec![(1, 3), (2, 4), (2, 5)])
        );
        // A rewrite without a truncation first replaces the entries too.
        append(&tail, 3, 5..7, 10);
        assert_eq!(
            indexes(tail.get(4, 7)),
            Some(vec![(2, 4), (3, 5), (3, 6)])
        );
        // A gap empties the tail: it only holds consecutive entries.
        append(&tail, 3, 9..10, 10);
        assert!(tail.get(6, 7).is_none());
        assert_eq!(indexes(tail.get(9, 10)), Some(vec![(3, 9)]));
    }

    #[test]
    fn purges_and_bounds_drop_the_oldest() {
        let tail = LogTail::default();
        append(&tail, 1, 1..11, 10);
        tail.change().purge_upto(3);
        assert!(tail.get(3, 4).is_none());
        assert!(tail.get(4, 11).is_some());
        append(&tail, 1, 11..12, LOG_TAIL_BYTES_MAX - 50);
        assert!(tail.get(5, 6).is_none(), "bytes bound: the oldest went");
        assert!(tail.get(6, 12).is_some(), "what fits stays");
        append(&tail, 1, 12..13, LOG_TAIL_BYTES_MAX + 1);
        assert!(tail.get(12, 13).is_none(), "an entry past the bound alone");
        let many = LOG_TAIL_ENTRIES_MAX as u64 + 5;
        append(&tail, 1, 13..13 + many, 1);
        assert!(tail.get(17, 18).is_none(), "entries bound");
        assert!(tail.get(18, 13 + many).is_some());
    }
}
