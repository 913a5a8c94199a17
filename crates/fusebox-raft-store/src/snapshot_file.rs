//! Snapshot bytes as files in the data directory's `snapshots/` folder, so a
//! snapshot of any size is built, sent, received and installed with memory
//! for one chunk or one record, never the whole snapshot.
//!
//! - A snapshot being built is written to `building-N.part`, one being
//!   received to `incoming-N.part`; both are fsynced before anything names
//!   them, and an unfinished one is removed (when dropped, or at the next
//!   open).
//! - The persisted snapshot is `snapshot-N`, named by the pointer in the
//!   `snapshot` column family ([`crate::snapshot_slot`]). A file becomes it
//!   by a rename followed by an fsync of the folder.
//! - [`SnapshotData`] holds the file open: a snapshot handed to openraft
//!   stays readable after a newer one replaces it on disk (an unlinked file
//!   lives until its last handle closes).
//!
//! Every file's SHA-256 is computed as it is written and travels with it:
//! the receiver of a sent snapshot checks it, and installing one checks it
//! before the install commits. At rest, the head (format and fleet, read
//! alone at every start) has a checksum of its own in the pointer.
//!
//! Everything here blocks; call it from the blocking pool.

use sha2::{Digest, Sha256};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The folder, inside the data directory, that holds snapshot files.
const FOLDER: &str = "snapshots";
/// The persisted snapshot's name prefix; the rest is a number.
const PERSISTED_PREFIX: &str = "snapshot-";
/// Unfinished files end in this.
const PART_SUFFIX: &str = ".part";
/// Bytes buffered between a snapshot writer and its file.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// A SHA-256 digest.
pub type Sha256Digest = [u8; 32];

/// A snapshot's bytes, as openraft moves them between the state machine,
/// the builder and the network: an open file of known length and SHA-256.
/// Reading it blocks on disk: call its readers from the blocking pool.
#[derive(Clone)]
pub struct SnapshotData(Arc<OpenFile>);

struct OpenFile {
    file: File,
    path: PathBuf,
    len: u64,
    sha256: Sha256Digest,
    /// Removed from disk when the last handle drops (a received snapshot
    /// that was never installed), unless installing renamed it first.
    temporary: bool,
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        if self.temporary {
            // Gone already if installing adopted it; nothing to say then.
            let _ = fs::remove_file(&self.path);
        }
    }
}

impl SnapshotData {
    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.0.len
    }

    /// Whether it holds no bytes (never true of a valid snapshot).
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// The SHA-256 of its bytes, as computed when they were written.
    pub fn sha256(&self) -> Sha256Digest {
        self.0.sha256
    }

    /// Reads up to `buf.len()` bytes at `offset`; fewer only at the end.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let want = usize::try_from(self.0.len.saturating_sub(offset))
            .unwrap_or(usize::MAX)
            .min(buf.len());
        self.0.file.read_exact_at(&mut buf[..want], offset)?;
        Ok(want)
    }

    /// A reader over all of it, from the start.
    pub fn reader(&self) -> SnapshotDataReader {
        SnapshotDataReader {
            data: self.clone(),
            offset: 0,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0.path
    }

    pub(crate) fn is_temporary(&self) -> bool {
        self.0.temporary
    }
}

impl fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SnapshotData({} bytes at {})",
            self.0.len,
            self.0.path.display()
        )
    }
}

/// Reads a [`SnapshotData`] front to back (unbuffered: wrap it).
pub struct SnapshotDataReader {
    data: SnapshotData,
    offset: u64,
}

impl Read for SnapshotDataReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.data.read_at(self.offset, buf)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// A writer that hashes what passes through it and counts it.
pub(crate) struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W> Hashing<W> {
    pub(crate) fn new(inner: W) -> Hashing<W> {
        Hashing {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    /// The digest of what was written so far.
    pub(crate) fn digest(&self) -> Sha256Digest {
        self.hasher.clone().finalize().into()
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that hashes and counts what passes through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    read: u64,
}

impl<R> HashingReader<R> {
    pub(crate) fn new(inner: R) -> HashingReader<R> {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            read: 0,
        }
    }

    /// The digest of what was read so far.
    pub(crate) fn digest(&self) -> Sha256Digest {
        self.hasher.clone().finalize().into()
    }

    /// Bytes read so far.
    pub(crate) fn read_bytes(&self) -> u64 {
        self.read
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

/// The `snapshots/` folder and the numbering of its files.
pub(crate) struct SnapshotFolder {
    path: PathBuf,
    next: AtomicU64,
}

impl SnapshotFolder {
    /// Opens (creating) the folder in `dir`, removes unfinished files left
    /// by an earlier run, and numbers new files after every existing one.
    pub(crate) fn open(dir: &Path) -> io::Result<SnapshotFolder> {
        let path = dir.join(FOLDER);
        fs::create_dir_all(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("create {}: {e}", path.display())))?;
        let mut next = 0u64;
        for entry in fs::read_dir(&path)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(PART_SUFFIX) {
                fs::remove_file(path.join(name))?;
                tracing::info!(file = name, "unfinished snapshot file removed");
                continue;
            }
            if let Some(n) = name
                .strip_prefix(PERSISTED_PREFIX)
                .and_then(|n| n.parse::<u64>().ok())
            {
                next = next.max(n + 1);
            }
        }
        Ok(SnapshotFolder {
            path,
            next: AtomicU64::new(next),
        })
    }

    fn number(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Where a persisted snapshot file of this name lives.
    pub(crate) fn persisted(&self, name: &str) -> io::Result<PathBuf> {
        let valid = name
            .strip_prefix(PERSISTED_PREFIX)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !valid {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("snapshot file name {name:?} is not one this store writes"),
            ));
        }
        Ok(self.path.join(name))
    }

    /// A new file for a snapshot being built.
    pub(crate) fn building(&self) -> io::Result<SnapshotSink> {
        self.part("building")
    }

    /// A new file for a snapshot being received.
    pub(crate) fn incoming(&self) -> io::Result<SnapshotSink> {
        self.part("incoming")
    }

    fn part(&self, what: &str) -> io::Result<SnapshotSink> {
        let path = self
            .path
            .join(format!("{what}-{}{PART_SUFFIX}", self.number()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("create {}: {e}", path.display())))?;
        Ok(SnapshotSink {
            out: Some(Hashing::new(BufWriter::with_capacity(
                WRITE_BUFFER_BYTES,
                file,
            ))),
            path,
        })
    }

    /// Gives a finished file its persisted name: renamed when it is an
    /// unfinished file of this folder, copied otherwise (a snapshot built by
    /// another store, in tests). Returns the new name; the folder is synced.
    pub(crate) fn adopt(&self, data: &SnapshotData) -> io::Result<String> {
        let name = format!("{PERSISTED_PREFIX}{}", self.number());
        let target = self.path.join(&name);
        let ours = data.is_temporary() && data.path().parent() == Some(self.path.as_path());
        if ours {
            fs::rename(data.path(), &target)?;
        } else {
            let mut out = File::create(&target)?;
            io::copy(&mut data.reader(), &mut out)?;
            out.sync_all()?;
        }
        self.sync()?;
        Ok(name)
    }

    /// Opens a persisted snapshot file, checking its length.
    pub(crate) fn open_persisted(
        &self,
        name: &str,
        len: u64,
        sha256: Sha256Digest,
    ) -> io::Result<SnapshotData> {
        let path = self.persisted(name)?;
        let file = File::open(&path).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("persisted snapshot file {}: {e}", path.display()),
            )
        })?;
        let on_disk = file.metadata()?.len();
        if on_disk != len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "persisted snapshot file {} holds {on_disk} bytes, {len} were written",
                    path.display()
                ),
            ));
        }
        Ok(SnapshotData(Arc::new(OpenFile {
            file,
            path,
            len,
            sha256,
            temporary: false,
        })))
    }

    /// Removes a persisted file no pointer names any more; a failure is
    /// only logged (the file is removed at a later start at the latest).
    pub(crate) fn remove(&self, name: &str) {
        let Ok(path) = self.persisted(name) else {
            return;
        };
        if let Err(e) = fs::remove_file(&path) {
            tracing::warn!(file = %path.display(), error = %e, "old snapshot file not removed");
        }
    }

    /// Removes persisted files other than `keep` (left by a crash between
    /// a pointer's change and the old file's removal).
    pub(crate) fn remove_all_but(&self, keep: &[&str]) -> io::Result<()> {
        for entry in fs::read_dir(&self.path)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(PERSISTED_PREFIX) && !keep.contains(&name) {
                self.remove(name);
            }
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()
    }
}

/// An unfinished snapshot file being written: bytes go in, are hashed as
/// they pass, and [`SnapshotSink::finish`] syncs it and opens it for
/// reading. Dropped unfinished, the file is removed.
pub struct SnapshotSink {
    out: Option<Hashing<BufWriter<File>>>,
    path: PathBuf,
}

impl SnapshotSink {
    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.out.as_ref().map_or(0, |o| o.written)
    }

    /// The SHA-256 of the bytes written so far.
    pub(crate) fn digest(&self) -> Sha256Digest {
        self.out.as_ref().map_or([0; 32], Hashing::digest)
    }

    /// Flushes and fsyncs the file and opens it for reading. With
    /// `expected`, the bytes must hash to it (a received snapshot) or the
    /// file is removed and an `InvalidData` error returned.
    pub fn finish(mut self, expected: Option<&[u8]>) -> io::Result<SnapshotData> {
        let Some(out) = self.out.take() else {
            return Err(io::Error::other("snapshot file already finished"));
        };
        let (len, sha256) = (out.written, out.digest());
        if expected.is_some_and(|e| e != sha256.as_slice()) {
            let _ = fs::remove_file(&self.path);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("snapshot of {len} bytes does not match its checksum"),
            ));
        }
        let finished = out
            .inner
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|file| {
                file.sync_all()?;
                Ok(file)
            });
        let file = match finished {
            Ok(file) => file,
            Err(e) => {
                let _ = fs::remove_file(&self.path);
                return Err(e);
            }
        };
        Ok(SnapshotData(Arc::new(OpenFile {
            file,
            path: std::mem::take(&mut self.path),
            len,
            sha256,
            temporary: true,
        })))
    }
}

impl Write for SnapshotSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.out {
            Some(out) => out.write(buf),
            None => Err(io::Error::other("snapshot file already finished")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.out {
            Some(out) => out.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for SnapshotSink {
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = fs::remove_file(&self.path);
        }
    }
}
