//! How openraft's messages travel inside `fusebox.v1.Raft` RPCs.
//!
//! Payloads are openraft's own types in postcard, the compact binary
//! encoding the log store already keeps them in (the store's codec pins
//! that they encode and decode; a command's bytes are its own, never
//! escaped or inflated as JSON would inflate binary-ish text). The header
//! names the cluster and both nodes, so a message that reaches the wrong
//! cluster or node is refused before it is decoded. A refusal tells the
//! sender only which check failed; who this node is stays in its log.

use crate::limits::RAFT_PAYLOAD_BYTES_MAX;
use fusebox_proto::v1::{RaftHeader, RaftMessage};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::Status;

/// The payload encoding this build speaks: 2 is postcard (1 was JSON).
pub const CODEC_VERSION: u32 = 2;

/// Who sends a message to whom, in which cluster.
#[derive(Clone, Debug)]
pub struct Route {
    /// The cluster's name; nodes of another cluster are refused.
    pub cluster_id: String,
    /// The sender.
    pub from: u64,
    /// The receiver.
    pub to: u64,
}

impl Route {
    /// The header for a message on this route.
    pub fn header(&self) -> RaftHeader {
        RaftHeader {
            cluster_id: self.cluster_id.clone(),
            term: 0,
            from_node_id: self.from,
            to_node_id: self.to,
            codec_version: CODEC_VERSION,
        }
    }
}

/// A message on `route` carrying `payload` (an encoded openraft value).
pub fn message(route: &Route, payload: Vec<u8>) -> RaftMessage {
    RaftMessage {
        header: Some(route.header()),
        payload,
    }
}

/// Encodes an openraft value as a payload (a reply, a snapshot's vote).
pub fn to_bytes<T: Serialize>(value: &T) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_allocvec(value)
}

/// How many bytes `value` takes as a payload, without encoding it.
pub fn encoded_len<T: Serialize>(value: &T) -> Result<usize, postcard::Error> {
    postcard::experimental::serialized_size(value)
}

/// Checks a received header against this node.
pub fn check_header(header: Option<&RaftHeader>, cluster_id: &str, me: u64) -> Result<(), Status> {
    let Some(h) = header else {
        return Err(Status::invalid_argument("raft message without header"));
    };
    if h.cluster_id != cluster_id {
        tracing::warn!(from = h.from_node_id, cluster = %h.cluster_id, "raft message for another cluster refused");
        return Err(Status::failed_precondition(
            "raft message refused: wrong cluster",
        ));
    }
    if h.to_node_id != me {
        tracing::warn!(
            from = h.from_node_id,
            to = h.to_node_id,
            "raft message for another node refused"
        );
        return Err(Status::failed_precondition(
            "raft message refused: wrong node",
        ));
    }
    if h.codec_version != CODEC_VERSION {
        return Err(Status::failed_precondition(format!(
            "codec version {} unknown, this node speaks {CODEC_VERSION}",
            h.codec_version
        )));
    }
    Ok(())
}

/// Decodes a payload, refusing oversized or malformed ones.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, Status> {
    if payload.len() > RAFT_PAYLOAD_BYTES_MAX {
        return Err(Status::resource_exhausted(format!(
            "raft payload is {} bytes, at most {RAFT_PAYLOAD_BYTES_MAX}",
            payload.len()
        )));
    }
    postcard::from_bytes(payload)
        .map_err(|e| Status::invalid_argument(format!("malformed raft payload: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(cluster_id: &str, to: u64) -> RaftHeader {
        let route = Route {
            cluster_id: cluster_id.into(),
            from: 7,
            to,
        };
        route.header()
    }

    #[test]
    fn a_refusal_names_the_check_and_not_who_this_node_is() {
        let wrong_cluster = check_header(Some(&header("other", 1)), "secret-cluster", 1);
        let wrong_node = check_header(Some(&header("secret-cluster", 9)), "secret-cluster", 1);
        for (status, check) in [(wrong_cluster, "wrong cluster"), (wrong_node, "wrong node")] {
            let message = status.unwrap_err().message().to_owned();
            assert!(message.contains(check), "{message}");
            assert!(!message.contains("secret-cluster"), "{message}");
            assert!(
                !message.contains("node 1") && !message.contains('1'),
                "{message}"
            );
        }
        assert!(check_header(Some(&header("secret-cluster", 1)), "secret-cluster", 1).is_ok());
    }

    #[test]
    fn payloads_round_trip_and_garbage_is_refused() {
        use fusebox_raft_store::Vote;
        let vote = Vote::new_committed(3, 2);
        let bytes = to_bytes(&vote).unwrap();
        assert_eq!(encoded_len(&vote).unwrap(), bytes.len());
        let back: Vote = decode(&bytes).unwrap();
        assert_eq!(back, vote);
        let garbage = decode::<Vote>(&[0xff; 3]);
        assert_eq!(garbage.unwrap_err().code(), tonic::Code::InvalidArgument);
    }
}
