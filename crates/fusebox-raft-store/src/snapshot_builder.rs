//! Builds a snapshot of the live state.
//!
//! openraft runs the builder in its own task, concurrently with `apply`.
//! The builder takes a point-in-time copy under the state lock (the core's
//! snapshot encoding, with the last applied log id and membership read under
//! the same lock), then persists it durably, all on the blocking pool. The
//! lock is held only while encoding.

use crate::rocks::blocking;
use crate::snapshot_slot::Save;
use crate::state_store::StateStore;
use crate::types::{snapshot_data, Snapshot, SnapshotData, SnapshotMeta, TypeConfig};
use openraft::RaftSnapshotBuilder;
use std::io;

/// openraft's handle for building one snapshot of a [`StateStore`].
pub struct StateSnapshotBuilder {
    store: StateStore,
}

impl StateSnapshotBuilder {
    pub(crate) fn new(store: StateStore) -> StateSnapshotBuilder {
        StateSnapshotBuilder { store }
    }
}

/// Copies the state and what it covers, consistently, under the lock.
fn capture(store: &StateStore) -> io::Result<(SnapshotMeta, Vec<u8>)> {
    let live = store.lock()?;
    let data = live
        .sm
        .snapshot()
        .map_err(|e| io::Error::other(format!("encode state machine snapshot: {e}")))?;
    let meta = SnapshotMeta {
        last_log_id: live.last_applied,
        last_membership: live.last_membership.clone(),
    };
    Ok((meta, data))
}

impl RaftSnapshotBuilder<TypeConfig> for StateSnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let store = self.store.clone();
        let (meta, data) = blocking(move || {
            let (meta, data) = capture(&store)?;
            store.snapshots().save(&meta, &data, Save::IfNotOlder)?;
            Ok((meta, data))
        })
        .await?;
        Ok(Snapshot {
            meta,
            snapshot: snapshot_data(data),
        })
    }
}
