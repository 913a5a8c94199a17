#![allow(clippy::unwrap_used)]
//! What survives a reopen of the database, and what a corrupt disk does:
//! an error, never a panic.

mod support;

use fusebox_core::machine::{SharedStateMachine, WatchEvent};
use fusebox_raft_store::{
    open, ApplyObserver, DirIdentity, SnapshotData, StateStore, StoreError, Vote,
};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{RaftLogReader, RaftSnapshotBuilder};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{append, apply, begin, blank, digest, kill_switch, log_id, membership, normal};
use tempfile::TempDir;

/// Overwrites one value behind the store's back, as a bad disk would.
fn scribble(dir: &Path, family: &str, key: &[u8], value: &[u8]) {
    let db = rocksdb::DB::open_cf(
        &rocksdb::Options::default(),
        dir,
        ["logs", "meta", "snapshot", "ledger", "ledger_index"],
    )
    .unwrap();
    db.put_cf(db.cf_handle(family).unwrap(), key, value)
        .unwrap();
}

/// Builds and persists a snapshot of the store's state.
async fn build(state: &mut StateStore) -> fusebox_raft_store::Snapshot {
    state
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap()
}

/// A store in `dir` with one applied entry and a snapshot of it.
async fn with_a_snapshot(dir: &Path) -> (fusebox_raft_store::LogStore, StateStore) {
    let (log, mut state) = open(dir, &support::me()).unwrap();
    apply(&mut state, vec![normal(1, 1, kill_switch(true))])
        .await
        .unwrap();
    build(&mut state).await;
    (log, state)
}

/// Bytes received as a snapshot would be, into the store's own folder.
fn received(state: &StateStore, bytes: &[u8]) -> SnapshotData {
    let mut sink = state.snapshot_sink().unwrap();
    sink.write_all(bytes).unwrap();
    sink.finish(None).unwrap()
}

/// All of a snapshot's bytes.
fn bytes_of(data: &SnapshotData) -> Vec<u8> {
    let mut bytes = Vec::new();
    data.reader().read_to_end(&mut bytes).unwrap();
    bytes
}

/// The files in a store's snapshot folder, sorted.
fn snapshot_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("snapshots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn log_vote_and_committed_survive_reopen() {
    let dir = TempDir::new().unwrap();
    let entries = vec![
        membership(1, 1, &[1]),
        blank(2, 2),
        normal(2, 3, kill_switch(true)),
    ];
    {
        let (mut log, mut state) = open(dir.path(), &support::me()).unwrap();
        log.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        append(&mut log, entries.clone()).await;
        // As openraft does: the committed id, then the apply of what it
        // commits, which writes it. A newer id replaces one not written yet.
        log.save_committed(Some(log_id(2, 2))).await.unwrap();
        log.save_committed(Some(log_id(2, 3))).await.unwrap();
        apply(&mut state, entries.clone()).await.unwrap();
    }

    let (mut log, _state) = open(dir.path(), &support::me()).unwrap();
    let mut reader = log.get_log_reader().await;
    assert_eq!(
        reader.read_vote().await.unwrap(),
        Some(Vote::new_committed(2, 1))
    );
    assert_eq!(reader.try_get_log_entries(1..4).await.unwrap(), entries);
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(2, 3)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 3)));
    assert_eq!(state.last_purged_log_id, None);
}

#[tokio::test]
async fn a_committed_id_is_written_by_the_apply_that_follows_it() {
    let dir = TempDir::new().unwrap();
    let entries = vec![membership(1, 1, &[1]), blank(1, 2), blank(1, 3)];
    {
        let (mut log, mut state) = open(dir.path(), &support::me()).unwrap();
        append(&mut log, entries.clone()).await;
        log.save_committed(Some(log_id(1, 2))).await.unwrap();
        apply(&mut state, entries[..2].to_vec()).await.unwrap();
        // A crash between the core's commit and its apply: the newer id
        // was only noted, so the one written before it is what survives.
        log.save_committed(Some(log_id(1, 3))).await.unwrap();
    }
    let (mut log, _state) = open(dir.path(), &support::me()).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 2)));
}

#[tokio::test]
async fn truncate_and_purge_survive_reopen() {
    let dir = TempDir::new().unwrap();
    {
        let (mut log, _state) = open(dir.path(), &support::me()).unwrap();
        append(&mut log, (1..=6).map(|i| blank(1, i)).collect()).await;
        log.purge(log_id(1, 2)).await.unwrap();
        log.truncate_after(Some(log_id(1, 4))).await.unwrap();
        append(&mut log, vec![blank(2, 5)]).await;
    }

    let (mut log, _state) = open(dir.path(), &support::me()).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 2)));
    assert_eq!(state.last_log_id, Some(log_id(2, 5)));
    let mut reader = log.get_log_reader().await;
    let kept = reader.try_get_log_entries(..).await.unwrap();
    assert_eq!(kept, vec![blank(1, 3), blank(1, 4), blank(2, 5)]);
}

#[tokio::test]
async fn built_snapshot_is_what_reopen_restores() {
    let dir = TempDir::new().unwrap();
    let (built, digest_at_build) = {
        let (_log, mut state) = open(dir.path(), &support::me()).unwrap();
        let entries = vec![
            membership(1, 1, &[1, 2, 3]),
            normal(1, 2, kill_switch(true)),
            normal(1, 3, kill_switch(false)),
            normal(1, 4, kill_switch(true)),
        ];
        apply(&mut state, entries).await.unwrap();
        let digest_at_build = digest(&state);
        let built = build(&mut state).await;
        // Applied after the snapshot: in memory only, the log is its record.
        apply(&mut state, vec![normal(1, 5, kill_switch(false))])
            .await
            .unwrap();
        assert_ne!(digest(&state), digest_at_build);
        (built, digest_at_build)
    };
    assert_eq!(built.meta.last_log_id, Some(log_id(1, 4)));

    let (_log, mut state) = open(dir.path(), &support::me()).unwrap();
    let (applied, membership) = state.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 4)));
    assert_eq!(membership, built.meta.last_membership);
    assert_eq!(state.last_applied(), Some(log_id(1, 4)));
    assert_eq!(digest(&state), digest_at_build);
    let current = state.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, built.meta);
    assert_eq!(bytes_of(&current.snapshot), bytes_of(&built.snapshot));
    assert_eq!(current.snapshot.sha256(), built.snapshot.sha256());
    assert_eq!(snapshot_files(dir.path()).len(), 1, "one persisted file");
}

#[tokio::test]
async fn corrupt_log_values_are_errors_and_reads_stay_in_range() {
    let dir = TempDir::new().unwrap();
    {
        let (mut log, _state) = open(dir.path(), &support::me()).unwrap();
        log.save_vote(&Vote::new(1, 1)).await.unwrap();
        append(&mut log, (1..=5).map(|i| blank(1, i)).collect()).await;
    }
    scribble(dir.path(), "logs", &4u64.to_be_bytes(), b"\x02garbage");
    scribble(
        dir.path(),
        "logs",
        &5u64.to_be_bytes(),
        b"\x07unknown format",
    );
    scribble(dir.path(), "meta", b"vote", b"");

    let (mut log, _state) = open(dir.path(), &support::me()).unwrap();
    let mut reader = log.get_log_reader().await;
    // Only the requested keys are read: 1..4 never touches the bad entries.
    assert_eq!(reader.try_get_log_entries(1..4).await.unwrap().len(), 3);
    let err = reader.try_get_log_entries(3..5).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains("log entry 4"), "{err}");
    let err = log.get_log_state().await.unwrap_err();
    assert!(err.to_string().contains("format 7 unknown"), "{err}");
    let err = reader.read_vote().await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
}

/// Entries handed over together are applied in one trip to the blocking
/// pool; one that fails stops there, after the entries before it, and a
/// failed read from the log stops it too.
#[tokio::test]
async fn an_apply_stops_at_the_entry_that_fails() {
    let dir = TempDir::new().unwrap();
    {
        let (_log, mut state) = open(dir.path(), &support::me()).unwrap();
        apply(&mut state, vec![normal(1, 1, begin("a"))])
            .await
            .unwrap();
        // A snapshot writes the ledger's unwritten changes.
        build(&mut state).await;
    }
    // The record of "a" no longer decodes: beginning "a" again reads it.
    scribble(dir.path(), "ledger", b"fleet-a\0\0a\0\0", b"garbage");
    let (_log, mut state) = open(dir.path(), &support::me()).unwrap();
    let err = apply(
        &mut state,
        vec![
            normal(1, 2, begin("b")),
            normal(1, 3, begin("a")),
            normal(1, 4, begin("c")),
        ],
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("ledger"), "{err}");
    assert_eq!(state.last_applied(), Some(log_id(1, 2)));
    assert_eq!(state.ledger_records(), 2, "a and b, not c");

    let dir = TempDir::new().unwrap();
    let (_log, mut state) = open(dir.path(), &support::me()).unwrap();
    let items = vec![
        Ok((normal(1, 1, begin("a")), None)),
        Err(io::Error::other("log read failed")),
        Ok((normal(1, 2, begin("b")), None)),
    ];
    let err = state.apply(futures::stream::iter(items)).await.unwrap_err();
    assert_eq!(err.to_string(), "log read failed");
    assert_eq!(state.last_applied(), Some(log_id(1, 1)));
    assert_eq!(state.ledger_records(), 1);
}

#[tokio::test]
async fn corrupt_snapshot_stops_the_open() {
    let dir = TempDir::new().unwrap();
    drop(with_a_snapshot(dir.path()).await);
    // A bit flipped inside the fleet, in the file's head.
    let files = snapshot_files(dir.path());
    let mut bytes = std::fs::read(&files[0]).unwrap();
    bytes[12] ^= 0x01;
    std::fs::write(&files[0], bytes).unwrap();

    match open(dir.path(), &support::me()) {
        Err(StoreError::Snapshot(e)) => assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}"),
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("a corrupt snapshot was accepted"),
    }
}

#[tokio::test]
async fn a_data_directory_refuses_another_node_or_cluster() {
    let dir = TempDir::new().unwrap();
    {
        let (mut log, _state) = open(dir.path(), &support::me()).unwrap();
        append(&mut log, vec![blank(1, 1)]).await;
    }
    let others = [
        DirIdentity {
            node_id: 2,
            ..support::me()
        },
        DirIdentity {
            cluster_id: "other".into(),
            ..support::me()
        },
    ];
    for other in &others {
        match open(dir.path(), other) {
            Err(StoreError::NotMine { found, me, .. }) => {
                assert_eq!((&found, &me), (&support::me(), other));
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("{other} opened the directory of {}", support::me()),
        }
    }
    let err = open(dir.path(), &others[1]).err().unwrap().to_string();
    assert!(
        err.contains("belongs to node 1 of cluster \"test\""),
        "{err}"
    );
    // The rightful owner still opens it, with its log intact.
    let (mut log, _state) = open(dir.path(), &support::me()).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 1)));
}

/// The newest write-ahead log file of a closed store.
fn newest_wal(dir: &Path) -> std::path::PathBuf {
    let mut wals: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    wals.sort();
    wals.pop().expect("a write-ahead log file")
}

/// Garbles `len` bytes in the middle of the newest write-ahead log file.
fn garble_wal(dir: &Path, len: usize) {
    let wal = newest_wal(dir);
    let mut bytes = std::fs::read(&wal).unwrap();
    assert!(bytes.len() > 4 * len, "wal of {} bytes", bytes.len());
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle..middle + len] {
        *b ^= 0x5a;
    }
    std::fs::write(wal, bytes).unwrap();
}

/// Writes 200 entries, each synced on its own, and closes the store.
async fn two_hundred_synced_entries(dir: &Path) {
    let (mut log, _state) = open(dir, &support::me()).unwrap();
    for i in 1..=200 {
        append(&mut log, vec![normal(1, i, kill_switch(i % 2 == 0))]).await;
    }
}

#[tokio::test]
async fn a_torn_wal_tail_opens_with_every_entry_before_it() {
    let dir = TempDir::new().unwrap();
    two_hundred_synced_entries(dir.path()).await;
    // A crash mid-write leaves the last record cut short.
    let wal = newest_wal(dir.path());
    let len = std::fs::metadata(&wal).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
    file.set_len(len - 7).unwrap();
    let (mut log, _state) = open(dir.path(), &support::me()).unwrap();
    let last = log.get_log_state().await.unwrap().last_log_id.unwrap();
    assert!(
        last.index >= 199,
        "a torn tail cost more than its record: {last:?}"
    );
}

#[tokio::test]
async fn a_wal_damaged_before_its_tail_refuses_to_open() {
    let dir = TempDir::new().unwrap();
    two_hundred_synced_entries(dir.path()).await;
    garble_wal(dir.path(), 16);
    match open(dir.path(), &support::me()) {
        Err(StoreError::Open { source, .. }) => {
            assert_eq!(source.kind(), rocksdb::ErrorKind::Corruption, "{source}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok((mut log, _)) => {
            let last = log.get_log_state().await.unwrap().last_log_id;
            panic!("a damaged log opened silently, ending at {last:?} of 200 synced entries");
        }
    }
    let message = open(dir.path(), &support::me()).err().unwrap().to_string();
    assert!(message.contains("remove-member"), "{message}");
}

#[tokio::test]
async fn garbage_snapshot_is_refused_and_changes_nothing() {
    let dir = TempDir::new().unwrap();
    let (_log, mut state) = open(dir.path(), &support::me()).unwrap();
    apply(&mut state, vec![normal(1, 1, kill_switch(true))])
        .await
        .unwrap();
    let before = (state.applied_state().await.unwrap(), digest(&state));
    let meta = fusebox_raft_store::SnapshotMeta {
        last_log_id: Some(log_id(3, 30)),
        last_membership: Default::default(),
    };

    for garbage in [
        vec![],
        vec![1, 0xff, 0xff, 0xff, 0xff],
        b"{\"json\": true}".to_vec(),
    ] {
        let err = state
            .install_snapshot(&meta, received(&state, &garbage))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }
    assert_eq!(
        (state.applied_state().await.unwrap(), digest(&state)),
        before
    );
    assert!(state.get_current_snapshot().await.unwrap().is_none());
    assert!(
        snapshot_files(dir.path()).is_empty(),
        "refused files are removed"
    );
}

#[derive(Default)]
struct Recorder {
    revisions: Mutex<Vec<u64>>,
    installs: Mutex<Vec<u64>>,
}

impl ApplyObserver for Recorder {
    fn applied(&self, state: &SharedStateMachine, events: &[WatchEvent], _took: Duration) {
        let mut revisions = self.revisions.lock().unwrap();
        revisions.extend(events.iter().map(WatchEvent::revision));
        assert_eq!(revisions.last().copied(), Some(state.revision()));
    }

    fn installed(&self, state: &SharedStateMachine) {
        self.installs.lock().unwrap().push(state.revision());
    }
}

#[tokio::test]
async fn installed_snapshot_carries_the_state_and_tells_the_observer() {
    let (leader_dir, follower_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (_leader_log, mut leader) = open(leader_dir.path(), &support::me()).unwrap();
    let (_follower_log, mut follower) = open(follower_dir.path(), &support::me()).unwrap();
    let leader_events = Arc::new(Recorder::default());
    let follower_events = Arc::new(Recorder::default());
    leader.set_observer(leader_events.clone());
    follower.set_observer(follower_events.clone());

    let entries = vec![
        membership(1, 1, &[1, 2]),
        normal(1, 2, kill_switch(true)),
        normal(1, 3, kill_switch(false)),
    ];
    apply(&mut leader, entries).await.unwrap();
    assert_eq!(*leader_events.revisions.lock().unwrap(), vec![1, 2]);
    let snapshot = build(&mut leader).await;

    follower
        .install_snapshot(&snapshot.meta, snapshot.snapshot.clone())
        .await
        .unwrap();
    assert_eq!(*follower_events.installs.lock().unwrap(), vec![2]);
    assert_eq!(digest(&follower), digest(&leader));
    assert_eq!(
        follower.applied_state().await.unwrap(),
        leader.applied_state().await.unwrap()
    );
    let current = follower.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, snapshot.meta);
}

#[tokio::test]
async fn clones_share_one_state() {
    let dir = TempDir::new().unwrap();
    let (_log, state) = open(dir.path(), &support::me()).unwrap();
    let mut for_raft: StateStore = state.clone();
    apply(&mut for_raft, vec![normal(1, 1, kill_switch(true))])
        .await
        .unwrap();
    assert_eq!(state.last_applied(), Some(log_id(1, 1)));
    assert_eq!(state.with_state(SharedStateMachine::revision), 1);
}

/// Entries 2..=n+1 writing ledger records `k2`.., after a membership entry.
fn ledger_entries(from: u64, to: u64) -> Vec<fusebox_raft_store::Entry> {
    (from..=to)
        .map(|i| normal(1, i, begin(&format!("k{i}"))))
        .collect()
}

#[tokio::test]
async fn a_snapshot_cut_short_is_refused_before_the_ledger_is_touched() {
    let (leader_dir, follower_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let (_leader_log, mut leader) = open(leader_dir.path(), &support::me()).unwrap();
    let (_follower_log, mut follower) = open(follower_dir.path(), &support::me()).unwrap();
    let mut entries = vec![membership(1, 1, &[1, 2])];
    entries.extend(ledger_entries(2, 40));
    apply(&mut leader, entries).await.unwrap();
    apply(
        &mut follower,
        vec![membership(1, 1, &[1, 2]), normal(1, 2, begin("mine"))],
    )
    .await
    .unwrap();
    let before = (follower.applied_state().await.unwrap(), digest(&follower));
    let snapshot = build(&mut leader).await;
    let whole = bytes_of(&snapshot.snapshot);

    // Cut inside the last record: the head and most records read fine.
    let cut = received(&follower, &whole[..whole.len() - 20]);
    let err = follower
        .install_snapshot(&snapshot.meta, cut)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert_eq!(
        (follower.applied_state().await.unwrap(), digest(&follower)),
        before,
        "nothing changed"
    );
    assert_eq!(follower.ledger_records(), 1);

    // Whole, it installs, and reopening keeps it.
    follower
        .install_snapshot(&snapshot.meta, received(&follower, &whole))
        .await
        .unwrap();
    assert_eq!(digest(&follower), digest(&leader));
    assert_eq!(follower.ledger_records(), 39);
    drop((_follower_log, follower));
    let (_log, reopened) = open(follower_dir.path(), &support::me()).unwrap();
    assert_eq!(digest(&reopened), digest(&leader));
    assert_eq!(snapshot_files(follower_dir.path()).len(), 1);
}

#[tokio::test]
async fn an_install_cut_by_a_crash_is_finished_at_the_next_open() {
    let dir = TempDir::new().unwrap();
    let digest_at_build = {
        let (_log, mut state) = open(dir.path(), &support::me()).unwrap();
        let mut entries = vec![membership(1, 1, &[1])];
        entries.extend(ledger_entries(2, 30));
        apply(&mut state, entries).await.unwrap();
        let digest_at_build = digest(&state);
        build(&mut state).await;
        apply(&mut state, ledger_entries(31, 35)).await.unwrap();
        digest_at_build
    };
    // What a crash halfway through installing that snapshot leaves: the
    // install staged (its pointer written), the ledger half replaced.
    {
        let db = rocksdb::DB::open_cf(
            &rocksdb::Options::default(),
            dir.path(),
            ["logs", "meta", "snapshot", "ledger", "ledger_index"],
        )
        .unwrap();
        let snapshot = db.cf_handle("snapshot").unwrap();
        let current = db.get_cf(snapshot, "current").unwrap().unwrap();
        db.put_cf(snapshot, "installing", current).unwrap();
        let ledger = db.cf_handle("ledger").unwrap();
        let keys: Vec<Box<[u8]>> = db
            .iterator_cf(ledger, rocksdb::IteratorMode::Start)
            .map(|item| item.unwrap().0)
            .collect();
        // Entries 31 to 35 were applied after the snapshot wrote the
        // ledger, and the crash lost them before they were written.
        assert_eq!(keys.len(), 29);
        for key in keys.iter().step_by(2) {
            db.delete_cf(ledger, key).unwrap();
        }
    }

    let (_log, mut state) = open(dir.path(), &support::me()).unwrap();
    assert_eq!(digest(&state), digest_at_build, "the install was redone");
    assert_eq!(state.ledger_records(), 29);
    assert_eq!(state.applied_state().await.unwrap().0, Some(log_id(1, 30)));
    assert!(state.get_current_snapshot().await.unwrap().is_some());
    drop((_log, state));
    // Finished for good: the pointer is gone, a second open is plain.
    let (_log, state) = open(dir.path(), &support::me()).unwrap();
    assert_eq!(digest(&state), digest_at_build);
}

#[tokio::test]
async fn a_store_with_its_snapshot_inside_the_database_is_refused_by_name() {
    let dir = TempDir::new().unwrap();
    drop(open(dir.path(), &support::me()).unwrap());
    scribble(dir.path(), "snapshot", b"meta", b"\x04old");
    match open(dir.path(), &support::me()) {
        Err(StoreError::Snapshot(e)) => {
            assert!(e.to_string().contains("empty directory"), "{e}")
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("an old layout was opened"),
    }
}

#[tokio::test]
async fn leftover_files_are_removed_at_open() {
    let dir = TempDir::new().unwrap();
    {
        let (_log, state) = with_a_snapshot(dir.path()).await;
        // A receive a crash interrupted, and a file no pointer names.
        std::mem::forget(state.snapshot_sink().unwrap());
    }
    std::fs::write(dir.path().join("snapshots/snapshot-999"), b"stale").unwrap();
    assert_eq!(snapshot_files(dir.path()).len(), 3);
    let (_log, state) = open(dir.path(), &support::me()).unwrap();
    assert_eq!(snapshot_files(dir.path()).len(), 1);
    assert!(state.last_applied().is_some());
}
