//! How openraft's messages travel inside `fusebox.v1.Raft` RPCs.
//!
//! Payloads are openraft's own types encoded as JSON (openraft derives serde
//! for them; JSON tolerates every serde attribute they use). The header names
//! the cluster and both nodes, so a message that reaches the wrong cluster or
//! node is refused before it is decoded.

use crate::limits::RAFT_PAYLOAD_BYTES_MAX;
use fusebox_proto::v1::{RaftHeader, RaftMessage};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::Status;

/// The payload encoding this build speaks.
pub const CODEC_VERSION: u32 = 1;

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

/// Encodes an openraft value into a message.
pub fn encode<T: Serialize>(route: &Route, value: &T) -> Result<RaftMessage, serde_json::Error> {
    Ok(RaftMessage {
        header: Some(route.header()),
        payload: serde_json::to_vec(value)?,
    })
}

/// Checks a received header against this node.
pub fn check_header(header: Option<&RaftHeader>, cluster_id: &str, me: u64) -> Result<(), Status> {
    let Some(h) = header else {
        return Err(Status::invalid_argument("raft message without header"));
    };
    if h.cluster_id != cluster_id {
        return Err(Status::failed_precondition(format!(
            "message for cluster {:?}, this node belongs to {cluster_id:?}",
            h.cluster_id
        )));
    }
    if h.to_node_id != me {
        return Err(Status::failed_precondition(format!(
            "message for node {}, this is node {me}",
            h.to_node_id
        )));
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
    serde_json::from_slice(payload)
        .map_err(|e| Status::invalid_argument(format!("malformed raft payload: {e}")))
}
