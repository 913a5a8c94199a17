//! Builds a snapshot of the live state without stopping it.
//!
//! openraft runs the builder in its own task, concurrently with `apply`.
//! Under the state lock the builder copies only what is small and takes a
//! point-in-time view of what is large: the fleet (breakers, policies), the
//! last applied log id and membership, and a RocksDB snapshot of the ledger.
//! The lock is then released, and the ledger's records are streamed from
//! that view into the encoding and persisted, all on the blocking pool,
//! while entries keep being applied.

use crate::rocks::blocking;
use crate::snapshot_slot::Save;
use crate::state_store::StateStore;
use crate::types::{snapshot_data, Snapshot, SnapshotMeta, TypeConfig};
use fusebox_core::machine::SnapshotWriter;
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

/// Encodes the state as of one applied entry; blocks.
fn build(store: &StateStore) -> io::Result<(SnapshotMeta, Vec<u8>)> {
    let db = store.db().clone();
    let (meta, fleet, view) = {
        let live = store.lock()?;
        let meta = SnapshotMeta {
            last_log_id: live.last_applied,
            last_membership: live.last_membership.clone(),
        };
        (meta, live.sm.fleet().clone(), db.snapshot())
    };
    let encode_error =
        |e: fusebox_core::CoreError| io::Error::other(format!("encode snapshot: {e}"));
    let mut writer = SnapshotWriter::new(&fleet).map_err(encode_error)?;
    store
        .ledger()
        .write_snapshot_records(&db, &view, &mut writer)?;
    Ok((meta, writer.finish()))
}

impl RaftSnapshotBuilder<TypeConfig> for StateSnapshotBuilder {
    type SnapshotData = crate::types::SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let store = self.store.clone();
        let (meta, data) = blocking(move || {
            let (meta, data) = build(&store)?;
            store.snapshots().save(&meta, &data, Save::IfNotOlder)?;
            Ok((meta, data))
        })
        .await?;
        tracing::info!(snapshot = %meta, bytes = data.len(), "snapshot built");
        Ok(Snapshot {
            meta,
            snapshot: snapshot_data(data),
        })
    }
}
