//! A value of the Raft store as read back from disk: the first byte picks
//! what the bytes are read as (a log entry, the vote, the committed log id,
//! a snapshot's metadata), the rest is the stored value, format byte first.
//!
//! A value that decodes must encode back and decode equal, and a log
//! entry's command is applied to a state machine, as a restart replays it.

#![no_main]

use fusebox_fuzz::{apply, check_snapshot, fresh_state};
use fusebox_raft_store::codec::{decode, encode};
use fusebox_raft_store::{Entry, LogId, SnapshotMeta, Vote};
use libfuzzer_sys::fuzz_target;
use openraft::entry::EntryPayload;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            let Some(entry) = round_trip::<Entry>(bytes) else {
                return;
            };
            if let EntryPayload::Normal(request) = entry.payload {
                let mut state = fresh_state();
                apply(
                    &mut state,
                    std::sync::Arc::unwrap_or_clone(request.command),
                    request.at_ms,
                );
                check_snapshot(&state);
            }
        }
        1 => drop(round_trip::<Vote>(bytes)),
        2 => drop(round_trip::<Option<LogId>>(bytes)),
        _ => drop(round_trip::<SnapshotMeta>(bytes)),
    }
});

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(bytes: &[u8]) -> Option<T> {
    let value: T = decode("value", bytes).ok()?;
    let written = encode("value", &value).expect("a decoded value encodes");
    let again: T = decode("value", &written).expect("an encoded value decodes");
    assert_eq!(again, value, "a stored value changed through its encoding");
    Some(value)
}
