//! Builds a snapshot of the live state without stopping it.
//!
//! openraft runs the builder in its own task, concurrently with `apply`.
//! Under the state lock the builder copies only what is small and takes a
//! point-in-time view of what is large: the fleet (breakers, policies), the
//! last applied log id and membership, and a RocksDB snapshot of the ledger.
//! The lock is then released, and the ledger's records are streamed from
//! that view into a snapshot file and persisted, all on the blocking pool,
//! while entries keep being applied. A built snapshot older than the one
//! already persisted (an install overtook it) is returned but not saved.
//!
//! The builder works on the state the store shares ([`crate::live`]), not on
//! the [`StateStore`](crate::StateStore) itself: the store hands builders
//! out, and this module does not depend on it.

use crate::live::Shared;
use crate::rocks::blocking;
use crate::types::{Snapshot, SnapshotData, SnapshotMeta, TypeConfig};
use fusebox_core::machine::SnapshotWriter;
use openraft::RaftSnapshotBuilder;
use std::io;
use std::sync::Arc;

/// openraft's handle for building one snapshot of a
/// [`StateStore`](crate::StateStore).
pub struct StateSnapshotBuilder {
    shared: Arc<Shared>,
}

impl StateSnapshotBuilder {
    /// A builder over the state a store shares.
    pub(crate) fn new(shared: Arc<Shared>) -> StateSnapshotBuilder {
        StateSnapshotBuilder { shared }
    }
}

/// Encodes the state as of one applied entry into a new file and persists
/// it; blocks.
fn build(shared: &Shared) -> io::Result<(SnapshotMeta, SnapshotData)> {
    let db = shared.db.clone();
    let (meta, fleet, view) = {
        let live = shared.lock()?;
        // The view must hold the ledger as of the last applied entry.
        shared.ledger.write_unwritten()?;
        let meta = SnapshotMeta {
            last_log_id: live.last_applied,
            last_membership: live.last_membership.clone(),
        };
        (meta, live.sm.fleet().clone(), db.snapshot())
    };
    let encode_error =
        |e: fusebox_core::CoreError| io::Error::other(format!("encode snapshot: {e}"));
    let mut writer =
        SnapshotWriter::to_sink(&fleet, shared.snapshots.building()?).map_err(encode_error)?;
    drop(fleet);
    let head = (writer.head_len(), writer.sink().digest());
    shared
        .ledger
        .write_snapshot_records(&db, &view, &mut writer)?;
    drop(view);
    let sink = writer.finish().map_err(encode_error)?;
    let data = shared.snapshots.save_built(&meta, sink, head)?;
    Ok((meta, data))
}

impl RaftSnapshotBuilder<TypeConfig> for StateSnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let shared = self.shared.clone();
        let (meta, snapshot) = blocking(move || build(&shared)).await?;
        tracing::info!(snapshot = %meta, bytes = snapshot.len(), "snapshot built");
        Ok(Snapshot { meta, snapshot })
    }
}
