//! Snapshots and digests of the whole state.
//!
//! A snapshot is a format byte followed by the postcard encoding of the
//! state. Every collection in the state is ordered, so the encoding, and the
//! SHA-256 digest over it, is the same on every replica that applied the
//! same commands: comparing digests compares replicas.

use super::state_machine::StateMachine;
use crate::error::CoreError;
use sha2::{Digest, Sha256};

/// The snapshot format this build writes and reads.
pub const SNAPSHOT_FORMAT: u8 = 1;

impl StateMachine {
    /// Encodes the whole state.
    pub fn snapshot(&self) -> Result<Vec<u8>, CoreError> {
        let mut bytes = vec![SNAPSHOT_FORMAT];
        let body = postcard::to_allocvec(self).map_err(|e| CoreError::Snapshot(e.to_string()))?;
        bytes.extend_from_slice(&body);
        Ok(bytes)
    }

    /// Decodes a snapshot; refuses unknown formats and corrupt bytes.
    pub fn restore(bytes: &[u8]) -> Result<StateMachine, CoreError> {
        let Some((&format, body)) = bytes.split_first() else {
            return Err(CoreError::Snapshot("empty snapshot".into()));
        };
        if format != SNAPSHOT_FORMAT {
            return Err(CoreError::Snapshot(format!(
                "format {format} unknown, this build reads {SNAPSHOT_FORMAT}"
            )));
        }
        let state: StateMachine =
            postcard::from_bytes(body).map_err(|e| CoreError::Snapshot(e.to_string()))?;
        state.check_invariants()?;
        Ok(state)
    }

    /// SHA-256 over the snapshot encoding, as lowercase hex.
    pub fn digest(&self) -> Result<String, CoreError> {
        let bytes = self.snapshot()?;
        let digest = Sha256::digest(&bytes);
        Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
    }
}
