//! What the fuzz targets share: a state machine to apply whatever decoded
//! and passed the node's checks, and the properties every applied command
//! must keep.
//!
//! A panic is a finding: these helpers assert instead of returning errors.

use fusebox_core::ledger::{BoxedLedger, Ledger, LedgerStore};
use fusebox_core::machine::{Command, SharedStateMachine, StateMachine};
use fusebox_core::Timestamp;
use fusebox_raft_store::{codec, Request};

/// The time the first command is applied at (Unix ms); later ones are later.
pub const START_MS: u64 = 1_700_000_000_000;

/// An empty state machine with an in-memory ledger.
pub fn fresh_state() -> SharedStateMachine {
    StateMachine::<Ledger>::new().map_ledger(|ledger| Box::new(ledger) as BoxedLedger)
}

/// Applies `command` at `at_ms` as every replica would: first through the
/// log's encoding (it must come back equal), then the state machine, which
/// must answer rather than panic whatever the command holds.
pub fn apply(state: &mut SharedStateMachine, command: Command, at_ms: u64) {
    let request = Request::new(at_ms, command);
    let bytes = codec::encode("entry", &request).expect("every command encodes");
    let decoded: Request = codec::decode("entry", &bytes).expect("an encoded command decodes");
    assert_eq!(
        decoded, request,
        "a command changed through the log's encoding"
    );
    let _ = state.apply(&request.command, Timestamp::from_millis(at_ms));
}

/// The state's snapshot restores to a state whose snapshot is the same bytes
/// (so a follower installing it holds what the leader held).
pub fn check_snapshot<L: LedgerStore>(state: &StateMachine<L>) {
    let bytes = state.snapshot().expect("a state snapshots");
    let restored = StateMachine::restore(&bytes).expect("a state's own snapshot restores");
    let again = restored.snapshot().expect("a restored state snapshots");
    assert!(again == bytes, "a snapshot changed through restore");
}
