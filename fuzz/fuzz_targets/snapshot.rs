//! A state snapshot as a node reads it from its disk or from a peer
//! (`InstallSnapshot`): the core's snapshot encoding.
//!
//! Reading answers, whatever the bytes. A snapshot that restores must
//! snapshot again to the same bytes, and the restored state must keep
//! applying commands without a panic.

#![no_main]

use fusebox_core::ledger::BoxedLedger;
use fusebox_core::machine::{Command, SnapshotReader, StateMachine};
use fusebox_fuzz::{apply, check_snapshot, START_MS};
use libfuzzer_sys::fuzz_target;

/// Records read one at a time, at most (the reader must end by itself).
const RECORDS_MAX: usize = 100_000;

fuzz_target!(|data: &[u8]| {
    if let Ok((_fleet, mut reader)) = SnapshotReader::open(data) {
        for _ in 0..RECORDS_MAX {
            match reader.next_record() {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
    let Ok(restored) = StateMachine::restore(data) else {
        return;
    };
    let bytes = restored.snapshot().expect("a restored state snapshots");
    let again = StateMachine::restore(&bytes).expect("a state's own snapshot restores");
    assert!(
        again.snapshot().expect("snapshots") == bytes,
        "a snapshot changed through restore"
    );
    let mut state = restored.map_ledger(|ledger| Box::new(ledger) as BoxedLedger);
    let later = START_MS.max(state.now().as_millis()) + 60_000;
    apply(&mut state, Command::Tick, later);
    check_snapshot(&state);
});
