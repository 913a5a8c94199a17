//! The one persisted snapshot: a file in `snapshots/`
//! ([`crate::snapshot_file`]) and a pointer to it in the `snapshot` column
//! family.
//!
//! The pointer (`current`) names the file and holds the snapshot's
//! metadata, length and SHA-256, and the length and SHA-256 of its head (the
//! format and the fleet, which every start reads alone to restore the fleet
//! without the records). A file is complete and fsynced, and its folder
//! synced, before a pointer names it; the old file is removed after the
//! pointer moved (a crash in between leaves it for the next open to remove).
//!
//! # Building
//!
//! A snapshot built from the live state may finish after a newer one was
//! installed (building runs concurrently with the state machine worker), so
//! a built snapshot replaces the persisted one only if it is not older; an
//! older one is returned to openraft but its file is not kept.
//!
//! # Installing
//!
//! Installing replaces the ledger in several batches (memory for one batch,
//! whatever the snapshot's size), so a crash can stop it halfway. It is
//! therefore staged first: the file gets its persisted name and a second
//! pointer, `installing`, is written with a synced write. The last ledger
//! batch (synced) moves `current` to the new file and deletes
//! `installing`. Opening a store that still has `installing` redoes the
//! install from its file before anything else ([`SnapshotSlot::pending`]).
//!
//! One mutex orders all of it: a build's compare-and-replace, an install
//! from staging to commit, and loading the current snapshot, which thus
//! never opens a file that is being replaced.
//!
//! Everything here blocks; call it from the blocking pool.

use crate::codec::{corrupt, decode, encode};
use crate::rocks::{cf, db_error, CF_SNAPSHOT};
use crate::snapshot_file::{
    HashingReader, Sha256Digest, SnapshotData, SnapshotFolder, SnapshotSink,
};
use crate::types::{Snapshot, SnapshotMeta};
use fusebox_core::limits::FLEET_BYTES_MAX;
use fusebox_core::machine::{Fleet, SnapshotReader};
use rocksdb::{WriteBatch, WriteOptions, DB};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// The pointer to the persisted snapshot.
const KEY_CURRENT: &str = "current";
/// The pointer to a snapshot whose install has not committed yet.
const KEY_INSTALLING: &str = "installing";
/// Where builds before snapshot files kept the snapshot's metadata (with
/// its bytes beside it); such a store is refused by name.
const KEY_LEGACY_META: &str = "meta";

/// What a pointer says of a persisted snapshot file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Pointer {
    meta: SnapshotMeta,
    file: String,
    len: u64,
    sha256: Sha256Digest,
    head_len: u64,
    head_sha256: Sha256Digest,
}

/// The reader an install reads records through: it hashes every byte, so
/// the install commits only bytes that match their checksum.
pub(crate) type InstallReader =
    SnapshotReader<HashingReader<io::BufReader<crate::snapshot_file::SnapshotDataReader>>>;

/// A snapshot staged for installing: its file has its persisted name and
/// the `installing` pointer names it.
pub(crate) struct Staged {
    pointer: Pointer,
    data: SnapshotData,
    /// The fleet, from the file's head.
    pub(crate) fleet: Fleet,
}

impl Staged {
    /// The snapshot's metadata.
    pub(crate) fn meta(&self) -> &SnapshotMeta {
        &self.pointer.meta
    }

    /// A reader over the whole file, positioned at its first record.
    pub(crate) fn records(&self) -> io::Result<InstallReader> {
        let source = HashingReader::new(io::BufReader::with_capacity(1 << 20, self.data.reader()));
        let (_, reader) = SnapshotReader::open(source).map_err(|e| refused(&self.pointer, e))?;
        Ok(reader)
    }

    /// Adds the commit to an install's last batch: `current` moves to this
    /// file and `installing` goes, once the bytes read match their
    /// checksum.
    pub(crate) fn commit(
        &self,
        reader: &InstallReader,
        db: &DB,
        batch: &mut WriteBatch,
    ) -> io::Result<()> {
        let source = reader.source();
        let (read, sha256) = (source.read_bytes(), source.digest());
        if read != self.pointer.len || sha256 != self.pointer.sha256 {
            return Err(corrupt(format_args!(
                "snapshot {} read {read} of {} bytes that no longer match their checksum",
                self.pointer.meta, self.pointer.len
            )));
        }
        let family = cf(db, CF_SNAPSHOT)?;
        batch.put_cf(
            family,
            KEY_CURRENT,
            encode("snapshot pointer", &self.pointer)?,
        );
        batch.delete_cf(family, KEY_INSTALLING);
        Ok(())
    }
}

fn refused(pointer: &Pointer, e: fusebox_core::CoreError) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("snapshot {} refused: {e}", pointer.meta),
    )
}

/// Reads a whole snapshot, decoding every record, and checks it against
/// its checksum, so a snapshot that would fail halfway through an install
/// is refused before the install touches anything.
fn verify(meta: &SnapshotMeta, data: &SnapshotData) -> io::Result<()> {
    let refuse = |e: fusebox_core::CoreError| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("snapshot {meta} refused: {e}"),
        )
    };
    let source = HashingReader::new(io::BufReader::with_capacity(1 << 20, data.reader()));
    let (_, mut reader) = SnapshotReader::open(source).map_err(refuse)?;
    while reader.next_record().map_err(refuse)?.is_some() {}
    let source = reader.source();
    if source.read_bytes() != data.len() || source.digest() != data.sha256() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("snapshot {meta} refused: its bytes do not match their checksum"),
        ));
    }
    Ok(())
}

/// Reads and writes the persisted snapshot.
pub(crate) struct SnapshotSlot {
    db: Arc<DB>,
    folder: SnapshotFolder,
    lock: Mutex<()>,
}

impl SnapshotSlot {
    /// Opens the slot over `db`, with its files in `dir`; refuses a store
    /// written by a build that kept snapshots inside the database.
    pub(crate) fn open(db: Arc<DB>, dir: &Path) -> io::Result<SnapshotSlot> {
        let family = cf(&db, CF_SNAPSHOT)?;
        let legacy = db
            .get_pinned_cf(family, KEY_LEGACY_META)
            .map_err(|e| db_error("read snapshot pointer", e))?
            .is_some();
        if legacy {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "this data directory keeps its snapshot inside the database, as builds before \
                 snapshot files did; this build cannot read it: start the node on an empty \
                 directory and let it catch up from the cluster",
            ));
        }
        let slot = SnapshotSlot {
            folder: SnapshotFolder::open(dir)?,
            db,
            lock: Mutex::new(()),
        };
        let keep = [slot.pointer(KEY_CURRENT)?, slot.pointer(KEY_INSTALLING)?];
        let names: Vec<&str> = keep.iter().flatten().map(|p| p.file.as_str()).collect();
        slot.folder.remove_all_but(&names)?;
        Ok(slot)
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, ()>> {
        self.lock
            .lock()
            .map_err(|_| io::Error::other("snapshot slot lock poisoned"))
    }

    fn pointer(&self, key: &str) -> io::Result<Option<Pointer>> {
        let family = cf(&self.db, CF_SNAPSHOT)?;
        let bytes = self
            .db
            .get_pinned_cf(family, key)
            .map_err(|e| db_error("read snapshot pointer", e))?;
        bytes.map(|b| decode("snapshot pointer", &b)).transpose()
    }

    fn open_file(&self, pointer: &Pointer) -> io::Result<SnapshotData> {
        self.folder
            .open_persisted(&pointer.file, pointer.len, pointer.sha256)
    }

    /// A new file to receive a snapshot into.
    pub(crate) fn incoming(&self) -> io::Result<SnapshotSink> {
        self.folder.incoming()
    }

    /// A new file to build a snapshot into.
    pub(crate) fn building(&self) -> io::Result<SnapshotSink> {
        self.folder.building()
    }

    /// The persisted snapshot, if any, its file open.
    pub(crate) fn load(&self) -> io::Result<Option<Snapshot>> {
        let _held = self.lock()?;
        let Some(pointer) = self.pointer(KEY_CURRENT)? else {
            return Ok(None);
        };
        let snapshot = self.open_file(&pointer)?;
        Ok(Some(Snapshot {
            meta: pointer.meta,
            snapshot,
        }))
    }

    /// The persisted snapshot's metadata and fleet, from its head alone
    /// (checked against the head's own checksum).
    pub(crate) fn load_fleet(&self) -> io::Result<Option<(SnapshotMeta, Fleet)>> {
        let Some(pointer) = self.pointer(KEY_CURRENT)? else {
            return Ok(None);
        };
        let data = self.open_file(&pointer)?;
        let head_len = usize::try_from(pointer.head_len)
            .ok()
            .filter(|n| *n <= FLEET_BYTES_MAX + 16 && (*n as u64) <= pointer.len)
            .ok_or_else(|| corrupt(format_args!("snapshot head of {} bytes", pointer.head_len)))?;
        let mut head = vec![0u8; head_len];
        data.read_at(0, &mut head)?;
        let mut hashing = HashingReader::new(head.as_slice());
        io::copy(&mut hashing, &mut io::sink())?;
        if hashing.digest() != pointer.head_sha256 {
            return Err(corrupt(format_args!(
                "the head of snapshot file {} does not match its checksum",
                pointer.file
            )));
        }
        let (fleet, _) = SnapshotReader::open(head.as_slice()).map_err(|e| refused(&pointer, e))?;
        Ok(Some((pointer.meta, fleet)))
    }

    /// Persists a built snapshot: finishes (fsyncs) its file and makes it
    /// the current one unless a newer one is persisted already; either way
    /// returns it, open.
    pub(crate) fn save_built(
        &self,
        meta: &SnapshotMeta,
        sink: SnapshotSink,
        head: (u64, Sha256Digest),
    ) -> io::Result<SnapshotData> {
        let data = sink.finish(None)?;
        let _held = self.lock()?;
        let current = self.pointer(KEY_CURRENT)?;
        if let Some(current) = &current {
            if current.meta.last_log_id > meta.last_log_id {
                tracing::debug!(current = %current.meta, built = %meta, "a newer snapshot is persisted, keeping it");
                return Ok(data);
            }
        }
        let pointer = Pointer {
            meta: meta.clone(),
            file: self.folder.adopt(&data)?,
            len: data.len(),
            sha256: data.sha256(),
            head_len: head.0,
            head_sha256: head.1,
        };
        let family = cf(&self.db, CF_SNAPSHOT)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(family, KEY_CURRENT, encode("snapshot pointer", &pointer)?);
        self.write_synced(batch)?;
        if let Some(old) = current {
            self.folder.remove(&old.file);
        }
        tracing::info!(snapshot = %meta, bytes = pointer.len, file = %pointer.file, "snapshot persisted");
        Ok(data)
    }

    /// Installs a snapshot: stages it (its file renamed or copied into
    /// place, `installing` written and synced), lets `install` replace the
    /// ledger (its last batch carries the commit), then removes the file
    /// the old pointer named. Holds the slot for all of it.
    pub(crate) fn install(
        &self,
        meta: &SnapshotMeta,
        data: &SnapshotData,
        install: impl FnOnce(&Staged) -> io::Result<()>,
    ) -> io::Result<Fleet> {
        verify(meta, data)?;
        let _held = self.lock()?;
        let previous = self.pointer(KEY_CURRENT)?;
        let staged = self.stage(meta, data)?;
        install(&staged)?;
        if let Some(old) = previous.filter(|p| p.file != staged.pointer.file) {
            self.folder.remove(&old.file);
        }
        Ok(staged.fleet)
    }

    fn stage(&self, meta: &SnapshotMeta, data: &SnapshotData) -> io::Result<Staged> {
        // The head: its length and checksum, and the fleet, checked.
        let mut head = HashingReader::new(data.reader());
        let fleet = SnapshotReader::open(&mut head)
            .map(|(fleet, _)| fleet)
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("snapshot {meta} refused: {e}"),
                )
            })?;
        let (head_len, head_sha256) = (head.read_bytes(), head.digest());
        let file = self.folder.adopt(data)?;
        let pointer = Pointer {
            meta: meta.clone(),
            file,
            len: data.len(),
            sha256: data.sha256(),
            head_len,
            head_sha256,
        };
        let family = cf(&self.db, CF_SNAPSHOT)?;
        let mut batch = WriteBatch::default();
        batch.put_cf(
            family,
            KEY_INSTALLING,
            encode("snapshot pointer", &pointer)?,
        );
        self.write_synced(batch)?;
        let data = self.open_file(&pointer)?;
        Ok(Staged {
            pointer,
            data,
            fleet,
        })
    }

    /// An install a crash interrupted, to be redone before the store opens:
    /// the staged snapshot, and the file of the pointer it replaces.
    pub(crate) fn pending(&self) -> io::Result<Option<(Staged, Option<String>)>> {
        let Some(pointer) = self.pointer(KEY_INSTALLING)? else {
            return Ok(None);
        };
        let data = self.open_file(&pointer)?;
        let mut head = HashingReader::new(data.reader());
        let (fleet, _) = SnapshotReader::open(&mut head).map_err(|e| refused(&pointer, e))?;
        if head.digest() != pointer.head_sha256 {
            return Err(corrupt(format_args!(
                "the head of staged snapshot file {} does not match its checksum",
                pointer.file
            )));
        }
        let previous = self
            .pointer(KEY_CURRENT)?
            .map(|p| p.file)
            .filter(|f| *f != pointer.file);
        tracing::warn!(snapshot = %pointer.meta, "finishing a snapshot install a crash interrupted");
        Ok(Some((
            Staged {
                pointer,
                data,
                fleet,
            },
            previous,
        )))
    }

    /// Removes a file no pointer names any more.
    pub(crate) fn remove_file(&self, name: &str) {
        self.folder.remove(name);
    }

    fn write_synced(&self, batch: WriteBatch) -> io::Result<()> {
        let mut options = WriteOptions::default();
        options.set_sync(true);
        self.db
            .write_opt(batch, &options)
            .map_err(|e| db_error("write snapshot pointer", e))?;
        crate::rocks::synced(&self.db);
        Ok(())
    }
}
