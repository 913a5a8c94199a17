//! A `fusebox.v1.Raft` message as a peer sends it: the protobuf envelope,
//! its header checked as the node checks it, and the payload decoded as the
//! openraft message the first byte picks (each request the node serves and
//! each reply it reads from a peer, `StreamAppend`'s answers among them).
//!
//! A payload that decodes must encode to bytes that decode to a value that
//! encodes to the same bytes, and the commands an AppendEntries carries are
//! applied to a state machine, as a follower's log would apply them.

#![no_main]

use fusebox_api::raft_codec::{check_header, decode, to_bytes};
use fusebox_fuzz::{apply, check_snapshot, fresh_state};
use fusebox_proto::v1::RaftMessage;
use fusebox_raft_store::{SnapshotMeta, TypeConfig, Vote};
use libfuzzer_sys::fuzz_target;
use openraft::entry::EntryPayload;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, StreamAppendResult, TransferLeaderRequest,
    VoteRequest, VoteResponse,
};
use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;

fuzz_target!(|data: &[u8]| {
    let Some((&which, envelope)) = data.split_first() else {
        return;
    };
    let Ok(message) = RaftMessage::decode(envelope) else {
        return;
    };
    // The header is checked before the payload is decoded; a fuzzer that
    // had to forge it first would rarely reach the decoder, so a refused
    // header ends only this check.
    let _ = check_header(message.header.as_ref(), "fuzz", 1);
    let payload = &message.payload;
    match which % 8 {
        0 => {
            let Some(rpc) = round_trip::<AppendEntriesRequest<TypeConfig>>(payload) else {
                return;
            };
            let mut state = fresh_state();
            for entry in rpc.entries {
                if let EntryPayload::Normal(request) = entry.payload {
                    apply(
                        &mut state,
                        std::sync::Arc::unwrap_or_clone(request.command),
                        request.at_ms,
                    );
                }
            }
            check_snapshot(&state);
        }
        1 => drop(round_trip::<VoteRequest<TypeConfig>>(payload)),
        2 => drop(round_trip::<TransferLeaderRequest<TypeConfig>>(payload)),
        3 => drop(round_trip::<Vote>(payload)),
        4 => drop(round_trip::<SnapshotMeta>(payload)),
        5 => drop(round_trip::<AppendEntriesResponse<TypeConfig>>(payload)),
        6 => drop(round_trip::<StreamAppendResult<TypeConfig>>(payload)),
        _ => drop(round_trip::<VoteResponse<TypeConfig>>(payload)),
    }
});

/// The payload decoded, after checking that its encoding is stable.
fn round_trip<T: Serialize + DeserializeOwned>(payload: &[u8]) -> Option<T> {
    let value: T = decode(payload).ok()?;
    let bytes = to_bytes(&value).expect("a decoded message encodes");
    let again: T = decode(&bytes).expect("an encoded message decodes");
    let bytes_again = to_bytes(&again).expect("a decoded message encodes");
    assert!(
        bytes == bytes_again,
        "a message changed through its encoding"
    );
    Some(again)
}
