//! Power loss: what a crash of the whole machine, not only of the process,
//! leaves of a node's RocksDB.
//!
//! A process crash loses nothing written: the operating system still holds
//! it. A power loss loses whatever was not yet synced. RocksDB's write-ahead
//! log promises that what it recovers is a prefix of the writes made, and
//! that it holds every write made before the last sync (an append's
//! `flush_wal(true)`, or a write with `sync = true`). Fusebox acknowledges
//! nothing before such a sync, so a power loss must cost it nothing
//! acknowledged.
//!
//! The simulation finds out by cutting the log back to the last sync:
//! - [`witness`] hears of every WAL sync a node makes (the store tells it,
//!   see [`fusebox_raft_store::witness_syncs`]) and records how long the
//!   newest WAL file was then;
//! - [`lose_unsynced`], once the node's process is gone, truncates that
//!   file back to the recorded length, or empties a newer WAL file that no
//!   sync has covered at all.
//!
//! Older WAL files, SST files and the MANIFEST are left alone: RocksDB syncs
//! those itself before it relies on them, and leaving more than a real power
//! loss might is the safe side (the check can miss a loss, never invent
//! one). The cut is at a record boundary, as a sync leaves it; a torn last
//! record is RocksDB's own concern (`TolerateCorruptedTailRecords`).

use crate::world::World;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// A WAL file and how long it was at its last sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncMark {
    /// The WAL file.
    pub wal: PathBuf,
    /// Its length when the sync returned.
    pub len: u64,
}

/// The newest WAL file in a RocksDB folder (`NNNNNN.log`, the highest
/// number), if any.
pub fn newest_wal(db: &Path) -> io::Result<Option<PathBuf>> {
    let mut newest: Option<(u64, PathBuf)> = None;
    for entry in fs::read_dir(db)? {
        let path = entry?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(number) = number {
            if newest.as_ref().is_none_or(|(best, _)| number > *best) {
                newest = Some((number, path));
            }
        }
    }
    Ok(newest.map(|(_, path)| path))
}

/// Records, for every WAL sync made on this thread, where the synced log
/// ends, in `world`.
pub fn witness(world: &Rc<World>) {
    let world = Rc::downgrade(world);
    fusebox_raft_store::witness_syncs(move |db| {
        let Some(world) = world.upgrade() else { return };
        let mark = newest_wal(db).ok().flatten().and_then(|wal| {
            let len = fs::metadata(&wal).ok()?.len();
            Some(SyncMark { wal, len })
        });
        match mark {
            Some(mark) => world.synced.borrow_mut().insert(db.to_path_buf(), mark),
            None => world.synced.borrow_mut().remove(db),
        };
    });
}

/// Cuts every database under `dir` back to its last sync recorded in
/// `world`; returns how many bytes of WAL were lost. Call it only once the
/// node's process is gone.
pub fn lose_unsynced(world: &World, dir: &Path) -> io::Result<u64> {
    let marks: Vec<(PathBuf, Option<SyncMark>)> = {
        let synced = world.synced.borrow();
        let mut dbs: Vec<PathBuf> = synced
            .keys()
            .filter(|db| db.starts_with(dir))
            .cloned()
            .collect();
        if dbs.is_empty() && dir.is_dir() {
            dbs.push(dir.to_path_buf());
        }
        dbs.into_iter()
            .map(|db| {
                let mark = synced.get(&db).cloned();
                (db, mark)
            })
            .collect()
    };
    let mut lost = 0;
    for (db, mark) in marks {
        let Some(wal) = newest_wal(&db)? else {
            continue;
        };
        let keep = match &mark {
            Some(mark) if mark.wal == wal => mark.len,
            // A WAL opened after the last sync: nothing in it was synced.
            _ => 0,
        };
        let len = fs::metadata(&wal)?.len();
        if len > keep {
            fs::OpenOptions::new()
                .write(true)
                .open(&wal)?
                .set_len(keep)?;
            lost += len - keep;
        }
    }
    Ok(lost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_newest_wal_by_number_not_by_name() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["000009.log", "000010.log", "LOG", "LOG.old.1", "000011.sst"] {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        let newest = newest_wal(dir.path()).unwrap().unwrap();
        assert_eq!(newest.file_name().unwrap(), "000010.log");
    }

    #[test]
    fn cuts_the_newest_wal_back_to_its_last_sync() {
        let world = World::new(1, 1, Default::default());
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        fs::create_dir(&db).unwrap();
        let (old, new) = (db.join("000004.log"), db.join("000005.log"));
        fs::write(&old, [1u8; 100]).unwrap();
        fs::write(&new, [2u8; 50]).unwrap();
        let mark = SyncMark {
            wal: new.clone(),
            len: 20,
        };
        world.synced.borrow_mut().insert(db.clone(), mark);
        assert_eq!(lose_unsynced(&world, dir.path()).unwrap(), 30);
        assert_eq!(fs::metadata(&new).unwrap().len(), 20);
        assert_eq!(fs::metadata(&old).unwrap().len(), 100);
        // A WAL no sync has covered loses everything.
        let newer = db.join("000006.log");
        fs::write(&newer, [3u8; 40]).unwrap();
        assert_eq!(lose_unsynced(&world, dir.path()).unwrap(), 40);
        assert_eq!(fs::metadata(&newer).unwrap().len(), 0);
        assert_eq!(fs::metadata(&new).unwrap().len(), 20);
    }
}
