//! The one RocksDB instance both stores share, and how we call it.
//!
//! One database holds every column family, so one write-ahead log orders
//! every write: a vote, an append, a truncation and a snapshot reach disk in
//! the order they were made, and one fsync of the WAL covers all writes made
//! before it.
//!
//! WAL recovery is `TolerateCorruptedTailRecords`, chosen on purpose: a
//! torn last record after a crash is normal (it was never acknowledged,
//! since appends and votes are acknowledged only once synced), but damage
//! anywhere before it means synced, acknowledged data is gone. RocksDB's
//! default (`PointInTime`) would then stop replaying at the damage and open
//! a shorter log without a word; with this mode the open fails, and the node
//! refuses to start and says how to recover (see [`crate::StoreError`]).
//!
//! RocksDB calls block (disk reads, fsync), so they run on tokio's blocking
//! pool through [`blocking`] (appends and applies on the store's storage
//! thread, [`crate::storage_thread`]), never on a runtime worker thread.

use crate::error::StoreError;
use crate::limits::{
    LEDGER_BLOOM_BITS_PER_KEY, LEDGER_L0_COMPACTION_TRIGGER, LEDGER_LEVEL_BASE_BYTES,
    LEDGER_MEMTABLE_BYTES, LEDGER_TABLE_FILE_BYTES, WAL_BYTES_MAX,
};
use rocksdb::{
    BlockBasedOptions, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, DBRecoveryMode,
    Options, DB,
};
use std::cell::{Cell, RefCell};
use std::io;
use std::path::Path;
use std::rc::Rc;

/// Log entries: key = index (8 bytes, big-endian), value = the encoded entry.
pub(crate) const CF_LOGS: &str = "logs";
/// Log metadata: the vote, the committed log id, the last purged log id.
pub(crate) const CF_META: &str = "meta";
/// The latest persisted snapshot: its metadata and its bytes, under two keys
/// written in one batch.
pub(crate) const CF_SNAPSHOT: &str = "snapshot";

/// Ledger records by (namespace, key); see [`crate::ledger_store`].
pub(crate) const CF_LEDGER: &str = "ledger";
/// The ledger's secondary indexes, deadlines and per-namespace counts.
pub(crate) const CF_LEDGER_INDEX: &str = "ledger_index";

/// The ledger memtable's bloom filter, as a share of the memtable's size
/// (RocksDB caps it at a quarter): 0.8 bits per byte of table, so more
/// bits per record than the filter on disk has for any record and key of
/// over 13 bytes, which every ledger record is.
const MEMTABLE_BLOOM_RATIO: f64 = 0.1;

/// Every column family the store needs; all are created on first open.
const COLUMN_FAMILIES: [&str; 5] = [CF_LOGS, CF_META, CF_SNAPSHOT, CF_LEDGER, CF_LEDGER_INDEX];

/// Opens (creating if missing) the database with all column families.
pub(crate) fn open_db(dir: &Path) -> Result<DB, StoreError> {
    std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    options.set_compression_type(DBCompressionType::Lz4);
    options.set_wal_recovery_mode(DBRecoveryMode::TolerateCorruptedTailRecords);
    options.set_paranoid_checks(true);
    options.set_max_total_wal_size(WAL_BYTES_MAX);
    if !preallocates() {
        // rust-rocksdb has no setter for it; the string keeps every option
        // set above.
        options = options
            .get_options_from_string("allow_fallocate=false")
            .map_err(|source| StoreError::Open {
                path: dir.to_path_buf(),
                source,
            })?;
    }
    let families = COLUMN_FAMILIES.map(|name| {
        let mut cf_options = Options::default();
        cf_options.set_compression_type(DBCompressionType::Lz4);
        if name == CF_LEDGER || name == CF_LEDGER_INDEX {
            cf_options.set_write_buffer_size(LEDGER_MEMTABLE_BYTES);
            cf_options.set_level_zero_file_num_compaction_trigger(LEDGER_L0_COMPACTION_TRIGGER);
            cf_options.set_max_bytes_for_level_base(LEDGER_LEVEL_BASE_BYTES);
            cf_options.set_target_file_size_base(LEDGER_TABLE_FILE_BYTES);
        }
        if name == CF_LEDGER {
            let mut table = BlockBasedOptions::default();
            table.set_bloom_filter(LEDGER_BLOOM_BITS_PER_KEY, false);
            cf_options.set_block_based_table_factory(&table);
            cf_options.set_memtable_whole_key_filtering(true);
            cf_options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
        }
        ColumnFamilyDescriptor::new(name, cf_options)
    });
    DB::open_cf_descriptors(&options, dir, families).map_err(|source| StoreError::Open {
        path: dir.to_path_buf(),
        source,
    })
}

/// A column family's handle; [`open_db`] creates them all, so a missing
/// one means the database was opened some other way.
pub(crate) fn cf<'a>(db: &'a DB, name: &str) -> io::Result<&'a ColumnFamily> {
    db.cf_handle(name)
        .ok_or_else(|| io::Error::other(format!("column family `{name}` missing")))
}

/// Wraps a RocksDB error with what we were doing.
pub(crate) fn db_error(doing: &str, e: rocksdb::Error) -> io::Error {
    io::Error::other(format!("rocksdb {doing}: {e}"))
}

/// What [`witness_syncs`] is told: the folder of a database whose WAL was
/// just synced.
type SyncWitness = Rc<dyn Fn(&Path)>;

thread_local! {
    /// Set on a thread that runs blocking work inline (see [`run_inline`]).
    static INLINE: Cell<bool> = const { Cell::new(false) };
    /// Told of every WAL sync made on this thread (see [`witness_syncs`]).
    static SYNC_WITNESS: RefCell<Option<SyncWitness>> = const { RefCell::new(None) };
    /// Set by [`inject_unsynced_appends`].
    static UNSYNCED_APPENDS: Cell<bool> = const { Cell::new(false) };
    /// Set by [`save_fleet_every`].
    static FLEET_CHECKPOINT_ENTRIES: Cell<Option<u64>> = const { Cell::new(None) };
    /// Cleared by [`skip_preallocation`].
    static PREALLOCATE: Cell<bool> = const { Cell::new(true) };
}

/// Makes the databases this thread opens from now on write their files
/// without reserving space ahead (RocksDB's `allow_fallocate = false`).
///
/// For the deterministic simulation, whose files live in memory
/// (`/dev/shm`): there RocksDB's reservation of each new WAL, table and
/// MANIFEST file, and its truncation at close, allocate and free pages that
/// are never written (13% of a profile's samples). On a disk RocksDB
/// reserves space to make appends cheaper, so nodes keep it.
pub fn skip_preallocation() {
    PREALLOCATE.with(|p| p.set(false));
}

/// Whether databases opened on this thread reserve file space ahead.
fn preallocates() -> bool {
    PREALLOCATE.with(Cell::get)
}

/// Saves the fleet every `entries` applied entries (at least one) on this
/// thread, instead of every
/// [`FLEET_CHECKPOINT_ENTRIES`](crate::limits::FLEET_CHECKPOINT_ENTRIES) or
/// more.
///
/// For the deterministic simulation: its runs apply a few thousand entries,
/// and restarts, crashes and power cuts must meet saved fleets too.
pub fn save_fleet_every(entries: u64) {
    FLEET_CHECKPOINT_ENTRIES.with(|n| n.set(Some(entries.max(1))));
}

/// The spacing [`save_fleet_every`] set on this thread, if any.
pub(crate) fn fleet_checkpoint_spacing() -> Option<u64> {
    FLEET_CHECKPOINT_ENTRIES.with(Cell::get)
}

/// Injects a real bug on this thread (inline mode only): an append is
/// acknowledged to Raft as durable without its WAL sync. A process crash
/// loses nothing by it; a power loss loses log entries this node counted
/// toward a commit. It exists so the simulation can show that its power
/// loss and its checkers catch such a bug.
pub fn inject_unsynced_appends() {
    UNSYNCED_APPENDS.with(|bug| bug.set(true));
}

/// Whether [`inject_unsynced_appends`] was called on this thread.
pub(crate) fn unsynced_appends() -> bool {
    UNSYNCED_APPENDS.with(Cell::get)
}

/// Tells `witness` the database folder after every WAL sync this thread
/// makes: an append's sync, and every write made with `sync = true` (a
/// vote, a truncation, a snapshot pointer, a snapshot's ledger, the
/// identity).
///
/// For the deterministic simulation only, on a thread marked by
/// [`run_inline`] (where every sync is made on that thread): it learns how
/// much of each WAL is on disk, so a simulated power loss can cut away what
/// was written after the last sync, as a real one may.
pub fn witness_syncs(witness: impl Fn(&Path) + 'static) {
    SYNC_WITNESS.with(|w| *w.borrow_mut() = Some(Rc::new(witness)));
}

/// Tells this thread's witness, if any, that `db`'s WAL was just synced.
pub(crate) fn synced(db: &DB) {
    if let Some(witness) = SYNC_WITNESS.with(|w| w.borrow().clone()) {
        witness(db.path());
    }
}

/// Makes [`blocking`] run its work inline on this thread from now on.
///
/// For the deterministic simulation only: every simulated host runs on one
/// thread, and work on tokio's blocking pool would finish in real time, in
/// an order no seed decides. Inline work takes no simulated time.
pub fn run_inline() {
    INLINE.with(|inline| inline.set(true));
}

/// Whether this thread runs blocking work inline.
pub(crate) fn is_inline() -> bool {
    INLINE.with(Cell::get)
}

/// Runs blocking storage work on tokio's blocking thread pool (inline on a
/// thread marked by [`run_inline`]).
///
/// Not `TypeConfig::spawn_blocking`: openraft's default spawns a new OS
/// thread per call.
pub async fn blocking<T, F>(f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    if is_inline() {
        return f();
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("storage task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options RocksDB opened `dir` with, as it wrote them down there
    /// (its newest `OPTIONS-*` file).
    fn options_written(dir: &Path) -> String {
        let newest = std::fs::read_dir(dir)
            .expect("list the data directory")
            .filter_map(|entry| entry.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|name| name.starts_with("OPTIONS-"))
            .max_by_key(|name| name["OPTIONS-".len()..].parse::<u64>().unwrap_or(0))
            .expect("an OPTIONS file");
        std::fs::read_to_string(dir.join(newest)).expect("read the OPTIONS file")
    }

    #[test]
    fn a_database_caps_its_write_ahead_log_and_reserves_file_space() {
        let dir = tempfile::TempDir::new().expect("temp dir");
        drop(open_db(dir.path()).expect("open"));
        let written = options_written(dir.path());
        let cap = format!("max_total_wal_size={WAL_BYTES_MAX}\n");
        assert!(written.contains(&cap), "no `{}` in:\n{written}", cap.trim());
        assert!(written.contains("allow_fallocate=true\n"), "{written}");
    }

    #[test]
    fn a_thread_may_open_without_reserving_file_space() {
        let dir = tempfile::TempDir::new().expect("temp dir");
        std::thread::spawn({
            let dir = dir.path().to_path_buf();
            move || {
                skip_preallocation();
                drop(open_db(&dir).expect("open"));
            }
        })
        .join()
        .expect("the opening thread");
        let written = options_written(dir.path());
        assert!(written.contains("allow_fallocate=false\n"), "{written}");
        // The options set before it are kept.
        let cap = format!("max_total_wal_size={WAL_BYTES_MAX}\n");
        assert!(written.contains(&cap), "no `{}` in:\n{written}", cap.trim());
        assert!(
            written.contains("wal_recovery_mode=kTolerateCorruptedTailRecords\n"),
            "{written}"
        );
    }
}
