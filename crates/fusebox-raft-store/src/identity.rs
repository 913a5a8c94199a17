//! Whose data directory this is: the node id and cluster id recorded at
//! first start, checked at every start after.
//!
//! A data directory holds one node's vote and log. Started under another
//! node's id, it would vote and answer as that node with a history that is
//! not its own; started in another cluster, it would mix two clusters' logs.
//! Either breaks Raft's safety silently, so a mismatch refuses to start.
//!
//! Durability: the identity is written with a synced write the first time a
//! directory is opened, before any vote or entry can be written to it.

use crate::codec::{decode, encode};
use crate::error::StoreError;
use crate::rocks::{cf, CF_META};
use rocksdb::{WriteOptions, DB};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// The key of the identity in the meta column family.
const KEY_IDENTITY: &str = "identity";

/// The node and cluster a data directory belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirIdentity {
    /// The node's Raft id.
    pub node_id: u64,
    /// The cluster's name (`--cluster-id`).
    pub cluster_id: String,
}

impl fmt::Display for DirIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} of cluster {:?}", self.node_id, self.cluster_id)
    }
}

/// Records `me` in a directory opened for the first time, or checks that
/// the directory is `me`'s.
pub(crate) fn claim(db: &DB, dir: &Path, me: &DirIdentity) -> Result<(), StoreError> {
    let io = |source| StoreError::Identity {
        path: dir.to_path_buf(),
        source,
    };
    let meta = cf(db, CF_META).map_err(io)?;
    let stored = db
        .get_cf(meta, KEY_IDENTITY)
        .map_err(|e| io(std::io::Error::other(e.to_string())))?;
    match stored {
        Some(bytes) => {
            let found: DirIdentity = decode(KEY_IDENTITY, &bytes).map_err(io)?;
            if &found != me {
                return Err(StoreError::NotMine {
                    path: dir.to_path_buf(),
                    found,
                    me: me.clone(),
                });
            }
            Ok(())
        }
        None => {
            let bytes = encode(KEY_IDENTITY, me).map_err(io)?;
            let mut synced = WriteOptions::default();
            synced.set_sync(true);
            db.put_cf_opt(meta, KEY_IDENTITY, bytes, &synced)
                .map_err(|e| io(std::io::Error::other(e.to_string())))?;
            crate::rocks::synced(db);
            Ok(())
        }
    }
}
