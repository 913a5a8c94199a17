#![allow(clippy::unwrap_used)]
//! openraft's storage conformance suite, run against a fresh store in a
//! fresh temporary directory for every sub-test.

use fusebox_raft_store::{open, DirIdentity, LogStore, StateStore, TypeConfig};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::StorageError;
use tempfile::TempDir;

struct FreshStore;

impl StoreBuilder<TypeConfig, LogStore, StateStore, TempDir> for FreshStore {
    async fn build(&self) -> Result<(TempDir, LogStore, StateStore), StorageError<TypeConfig>> {
        let me = DirIdentity {
            node_id: 1,
            cluster_id: "conformance".into(),
        };
        let dir = TempDir::new().map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        let (log, state) = open(dir.path(), &me)
            .map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        Ok((dir, log, state))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_passes() {
    Suite::test_all(FreshStore).await.unwrap();
}
