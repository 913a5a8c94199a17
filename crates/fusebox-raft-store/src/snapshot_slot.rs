//! The one persisted snapshot, in the `snapshot` column family.
//!
//! Three keys, `meta` (the encoded [`SnapshotMeta`]), `data` (the core's
//! snapshot bytes, as is) and `head` (the leading part of `data` that holds
//! the fleet, so a restart reads the fleet without the ledger records), are
//! always written together in one `WriteBatch` with `sync = true`, then
//! flushed: they are replaced atomically and are on disk before the call
//! returns. RocksDB's block checksums guard the bytes at rest; the core's
//! `SnapshotReader` refuses anything it did not write.
//!
//! A snapshot built from the live state may finish after a newer snapshot was
//! installed (building runs concurrently with the state machine worker), so a
//! built snapshot is saved only if it is not older than the one on disk
//! ([`Save::IfNotOlder`]); an installed one always replaces it
//! ([`Save::Always`]). A mutex orders the compare and the write.
//!
//! Everything here blocks; call it from the blocking pool.

use crate::codec::{corrupt, decode, encode};
use crate::rocks::{cf, db_error, CF_SNAPSHOT};
use crate::types::{Snapshot, SnapshotData, SnapshotMeta};
use fusebox_core::machine::snapshot_head;
use rocksdb::{FlushOptions, WriteBatch, WriteOptions, DB};
use std::io;
use std::sync::{Arc, Mutex};

const KEY_META: &str = "meta";
const KEY_DATA: &str = "data";
const KEY_HEAD: &str = "head";

/// The persisted bytes, if they still belong to `expected`: a newer
/// snapshot may have replaced them since the handle was made.
fn read_data(db: &DB, expected: &SnapshotMeta) -> io::Result<Vec<u8>> {
    let family = cf(db, CF_SNAPSHOT)?;
    let snapshot = db.snapshot();
    let meta = snapshot
        .get_cf(family, KEY_META)
        .map_err(|e| db_error("read snapshot meta", e))?
        .map(|b| decode::<SnapshotMeta>("snapshot meta", &b))
        .transpose()?;
    if meta.as_ref() != Some(expected) {
        return Err(io::Error::other(format!(
            "snapshot {expected} was replaced by a newer one; ask for the current snapshot again"
        )));
    }
    snapshot
        .get_cf(family, KEY_DATA)
        .map_err(|e| db_error("read snapshot data", e))?
        .ok_or_else(|| corrupt(format_args!("snapshot {expected} has metadata but no data")))
}

/// When a snapshot may replace the persisted one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Save {
    /// Always: an installed snapshot replaces the state wholesale.
    Always,
    /// Only if it covers at least as much of the log as the persisted one.
    IfNotOlder,
}

/// Reads and writes the persisted snapshot.
pub(crate) struct SnapshotSlot {
    db: Arc<DB>,
    writing: Mutex<()>,
}

impl SnapshotSlot {
    pub(crate) fn new(db: Arc<DB>) -> SnapshotSlot {
        SnapshotSlot {
            db,
            writing: Mutex::new(()),
        }
    }

    /// The persisted snapshot, if any: its metadata now, its bytes read
    /// when the handle is loaded (see [`SnapshotData`]).
    pub(crate) fn load(&self) -> io::Result<Option<Snapshot>> {
        let Some(meta) = self.load_meta()? else {
            return Ok(None);
        };
        let (db, expected) = (self.db.clone(), meta.clone());
        let snapshot = SnapshotData::stored(move || read_data(&db, &expected));
        Ok(Some(Snapshot { meta, snapshot }))
    }

    /// The persisted snapshot's metadata and head (format and fleet), if any.
    pub(crate) fn load_head(&self) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
        let Some(meta) = self.load_meta()? else {
            return Ok(None);
        };
        let family = cf(&self.db, CF_SNAPSHOT)?;
        let head = self
            .db
            .get_cf(family, KEY_HEAD)
            .map_err(|e| db_error("read snapshot head", e))?
            .ok_or_else(|| corrupt(format_args!("snapshot {meta} has metadata but no head")))?;
        Ok(Some((meta, head)))
    }

    fn load_meta(&self) -> io::Result<Option<SnapshotMeta>> {
        let family = cf(&self.db, CF_SNAPSHOT)?;
        let bytes = self
            .db
            .get_pinned_cf(family, KEY_META)
            .map_err(|e| db_error("read snapshot meta", e))?;
        bytes.map(|b| decode("snapshot meta", &b)).transpose()
    }

    /// Persists a snapshot durably; returns whether it was written.
    pub(crate) fn save(&self, meta: &SnapshotMeta, data: &[u8], when: Save) -> io::Result<bool> {
        let _writing = self
            .writing
            .lock()
            .map_err(|_| io::Error::other("snapshot writer lock poisoned"))?;
        if when == Save::IfNotOlder {
            if let Some(current) = self.load_meta()? {
                if current.last_log_id > meta.last_log_id {
                    tracing::debug!(%current, built = %meta, "a newer snapshot is persisted, keeping it");
                    return Ok(false);
                }
            }
        }
        let family = cf(&self.db, CF_SNAPSHOT)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(family, KEY_META, encode("snapshot meta", meta)?);
        let (head, _) = snapshot_head(data)
            .map_err(|e| corrupt(format_args!("snapshot of {} bytes: {e}", data.len())))?;
        batch.put_cf(family, KEY_HEAD, head);
        batch.put_cf(family, KEY_DATA, data);
        let mut options = WriteOptions::default();
        options.set_sync(true);
        self.db
            .write_opt(batch, &options)
            .map_err(|e| db_error("write snapshot", e))?;
        // Flushed now, so a restart's WAL replay does not load the bytes
        // back into a memtable.
        let mut flush = FlushOptions::default();
        flush.set_wait(true);
        self.db
            .flush_cf_opt(family, &flush)
            .map_err(|e| db_error("flush snapshot", e))?;
        tracing::info!(snapshot = %meta, bytes = data.len(), "snapshot persisted");
        Ok(true)
    }
}
