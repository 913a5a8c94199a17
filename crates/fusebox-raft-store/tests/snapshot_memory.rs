#![allow(clippy::unwrap_used)]
//! A snapshot far larger than the memory it may take is received and
//! installed with memory for a chunk and a batch: its bytes go from the
//! stream to a file and from the file to the database, never all in RAM.
//!
//! Alone in its binary, so the process's peak resident memory (`VmHWM`) is
//! this test's.

mod support;

use fusebox_core::ledger::{CompleteRequest, Completion, LedgerStore};
use fusebox_core::machine::{Command, SnapshotWriter, StateMachine};
use fusebox_core::{Namespace, Timestamp};
use fusebox_raft_store::{open, SnapshotMeta};
use openraft::storage::RaftStateMachine;
use support::{begin, log_id};
use tempfile::TempDir;

/// Records in the snapshot, each with a 16 KiB result: about 470 MiB.
const RECORDS: usize = 30_000;
/// What receiving and installing it may add to the peak, at most: the
/// database's write buffers and one batch, not the snapshot.
const PEAK_GROWTH_MAX_BYTES: u64 = 192 * 1024 * 1024;

/// A `/proc/self/status` field in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} not in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_larger_than_its_memory_bound_installs() {
    let dir = TempDir::new().unwrap();
    let (_log, mut state) = open(dir.path(), &support::me()).unwrap();

    // One completed record as the template for all of them.
    let ns = Namespace::new("fleet-a").unwrap();
    let mut source = StateMachine::new();
    source.apply(&begin("template"), Timestamp(1_000));
    let done = Command::Complete {
        namespace: ns.clone(),
        request: CompleteRequest {
            key: "template".into(),
            attempt: "1".into(),
            completion: Completion::Succeeded {
                operation_id: "op".into(),
                result: vec![0xab; 16 * 1024],
            },
        },
    };
    source.apply(&done, Timestamp(2_000));
    let template = source.ledger().get(&ns, "template").unwrap();

    // Reset the peak: what follows is what the snapshot costs.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let baseline = status_bytes("VmHWM:");

    let mut writer =
        SnapshotWriter::to_sink(source.fleet(), state.snapshot_sink().unwrap()).unwrap();
    for i in 0..RECORDS {
        let mut record = template.clone();
        record.key = format!("key-{i:08}");
        writer.record(&ns, &record).unwrap();
    }
    let data = writer.finish().unwrap().finish(None).unwrap();
    let size = data.len();
    assert!(size > 2 * PEAK_GROWTH_MAX_BYTES, "snapshot of {size} bytes");
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(1, 10)),
        last_membership: Default::default(),
    };
    state.install_snapshot(&meta, data).await.unwrap();

    let growth = status_bytes("VmHWM:").saturating_sub(baseline);
    println!(
        "snapshot of {} MiB installed; peak resident memory grew {} MiB",
        size >> 20,
        growth >> 20
    );
    assert_eq!(state.ledger_records(), RECORDS as u64);
    assert!(
        growth < PEAK_GROWTH_MAX_BYTES,
        "installing a {size}-byte snapshot grew the peak by {growth} bytes"
    );
}
