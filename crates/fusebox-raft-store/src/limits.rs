//! The store's own bounds, in one place, each with its unit in its name.
//!
//! The store has one queue of its own, two batch sizes and no timers: every
//! other bound on what it holds or reads comes from its callers (ledger scan
//! budgets and record counts from [`fusebox_core::limits`], message sizes
//! from the server's transport), and openraft sets the pace of appends,
//! snapshots and purges. A snapshot has no size bound short of the disk: it
//! is streamed between files and the database ([`crate::snapshot_file`]).

/// Append completions waiting for the flusher's next WAL fsync, at most; a
/// full queue makes the next append wait (on the storage thread), which
/// slows openraft down rather than growing memory. One fsync completes the
/// callback that woke the flusher and up to this many more.
pub(crate) const FLUSH_QUEUE_CALLBACKS_MAX: usize = 1024;

/// Appends and applies waiting for the storage thread, at most; past it
/// the next one waits for room (see [`crate::storage_thread`]). openraft
/// hands out one of each at a time.
pub(crate) const STORAGE_QUEUE_JOBS_MAX: usize = 16;

/// Committed entries applied in one trip to the storage thread, at most:
/// as many as openraft has ready, so a burst costs one hand-off instead of
/// one per entry, while the first entry's answer waits for at most this
/// many applies.
pub(crate) const APPLY_CHUNK_ENTRIES_MAX: usize = 64;

/// Bytes of ledger writes per batch when a snapshot is installed, at most
/// (one record past it): memory for one batch, however large the snapshot.
pub(crate) const INSTALL_BATCH_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Applied entries between two fleet checkpoints, at least (see
/// [`crate::state_store`]): a restart replays at most about this many
/// entries behind the last one.
pub(crate) const FLEET_CHECKPOINT_ENTRIES: u64 = 8_192;

/// For a large fleet, applied entries between two checkpoints grow with it:
/// at least one entry per this many bytes of the last checkpoint, so saving
/// the fleet costs at most this many bytes written per applied entry.
pub(crate) const FLEET_CHECKPOINT_BYTES_PER_ENTRY: u64 = 128;

/// Entries the log keeps in memory as appended, at most ([`crate::log_tail`]):
/// enough for every read back of the entries appended within the last
/// second or so under load (replication, applying).
pub(crate) const LOG_TAIL_ENTRIES_MAX: usize = 4_096;

/// Encoded bytes of the entries the log keeps in memory, at most (in
/// memory they take a few times this).
pub(crate) const LOG_TAIL_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Bytes of write-ahead log files kept, at most, before RocksDB flushes the
/// column families that hold the oldest one. The log's, the metadata's and
/// the snapshot's tables are 64 MiB (RocksDB's default) and fill slowly, so
/// under RocksDB's own cap (by its documentation four times every table's
/// room together: about 2 GiB with these tables, computed, not observed)
/// WAL files stayed for minutes: after 60 s of `fusebox bench
/// ledger` at 64 clients a node kept 556 MiB of them (154 files, 88% of its
/// data directory) and took 1.72 s to be ready after a SIGKILL. With this
/// cap (past it RocksDB's log shows the log's and the metadata's tables
/// flushed): 33 MiB of WAL, a 114 MiB directory and 0.22 s, with no change
/// in keys/s (bench/README.md, "The write-ahead log bounded").
pub(crate) const WAL_BYTES_MAX: u64 = 128 * 1024 * 1024;

/// Bytes of the ledger's and its index's memtables, each, before they are
/// flushed (RocksDB's default is 64 MiB). Every ledger call inserts a few
/// keys into them on every node, while its entry is applied. Inserted in
/// no order, each insert searched a skip list mostly outside the CPU's
/// caches, which is why this was 4 MiB (those inserts were 18% of a
/// follower's CPU in a profile at 64 clients). The ledger's changes are
/// now written in batches with their keys in order, and each insert
/// starts from where the one before it ended, so a larger table costs
/// little more per insert and is flushed, then merged, less often. In
/// paired 45-second `fusebox bench ledger` runs at 64 clients, index keys
/// sorted: 4 MiB 11,779 and 12,098 keys/s (0.121 and 0.119 ms CPU per
/// key) against 16 MiB 12,557 and 12,884 (0.110, 0.107); in a second
/// pairing 16, 32 and 64 MiB made 14,452 / 12,603, 14,375 / 13,017 and
/// 13,567 / 12,608 keys/s (bench/README.md, "Sorted batches").
pub(crate) const LEDGER_MEMTABLE_BYTES: usize = 16 * 1024 * 1024;

/// Flushed ledger (or index) tables that wait in level 0 before they are
/// merged down together (RocksDB's default is 4). Keys arrive in no order,
/// so each merge rewrites every table below that it overlaps: merging
/// twice as many at once halves how often that is rewritten.
pub(crate) const LEDGER_L0_COMPACTION_TRIGGER: i32 = 8;

/// Bytes the ledger's (and its index's) level that level 0 merges into
/// may hold (RocksDB's default is 256 MiB). RocksDB sizes levels from the
/// bottom up: level 0 merges straight into the bottom level until that
/// holds this much, rewriting all of it at every merge, so the longer a
/// node ran, the more each merge cost (in a 120-second `fusebox bench
/// ledger` run at 64 clients, the last merges rewrote 4.4 million index
/// entries each). With 16 MiB, RocksDB adds levels above the bottom one
/// early, so a merge no longer rewrites the whole ledger: in a 90-second
/// run, compaction read 24.7 million entries per node instead of 72.7.
pub(crate) const LEDGER_LEVEL_BASE_BYTES: u64 = 16 * 1024 * 1024;

/// Bytes of each ledger table file compaction writes (RocksDB's default is
/// 64 MiB): small files let a merge into a level rewrite only the files it
/// overlaps, a fraction of a [`LEDGER_LEVEL_BASE_BYTES`] level.
pub(crate) const LEDGER_TABLE_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Bloom filter bits per record key, on disk and in the memtable: a `begin`
/// on a fresh key reads a record that is not there, and the filter answers
/// most such reads without a search.
pub(crate) const LEDGER_BLOOM_BITS_PER_KEY: f64 = 10.0;

/// Records kept decoded after they are written, at most
/// ([`crate::ledger_store`]): a `complete` whose `begin` was written a
/// few milliseconds before (most meet before either is written, see
/// [`UNWRITTEN_RECORDS_MAX`]) finds the record here instead of searching
/// RocksDB's memtables and decoding it again. At 10,000 ledger calls per
/// second this covers the last half second or more.
pub(crate) const RECENT_RECORDS_MAX: usize = 8_192;

/// Bytes of the records kept by [`RECENT_RECORDS_MAX`], at most (by their
/// strings' and result's lengths): a record with a large result is not
/// kept at all if it alone would take more than a sixteenth of this.
pub(crate) const RECENT_RECORDS_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Records changed by applied entries and not yet written to RocksDB, at
/// most ([`crate::ledger_store`]); past it their changes are handed to the
/// ledger's writer thread as one batch (so memory holds at most twice
/// this: one batch being written, the next filling). A `begin` and its
/// `complete` a few milliseconds later usually meet here, so the record is
/// written once, in its final state, and the in-progress status and lease
/// deadline it held in between never reach the disk. A crash loses these
/// changes, and the log replays them. At 10,000 keys a second this fills
/// in about 50 ms, ten times a pair's median. Larger writes less often;
/// when batches were written on the storage thread it stalled the applies
/// longer each time: at 64 clients, 256 / 512 / 1,024 / 4,096 records gave
/// pairs a p99 of 15.8-17.2 / 18.9 / 22.1-22.5 / 41.3-43.7 ms, and 512 as
/// many keys per second as the larger ones (bench/README.md).
pub(crate) const UNWRITTEN_RECORDS_MAX: usize = 512;

/// Bytes of the records held by [`UNWRITTEN_RECORDS_MAX`] (as the disk holds
/// them and as they are now, by their strings' and result's lengths), at
/// most.
pub(crate) const UNWRITTEN_BYTES_MAX: usize = 2 * 1024 * 1024;
