//! The Raft log: entries as opaque bytes in segment files ([`SegmentLog`]), the vote and
//! other metadata in the log instance's `raft_meta` family.
//!
//! This layer knows nothing of openraft: `consensus::log_store` encodes entries and log ids
//! and calls in here. Appends, truncations and purges come from
//! [`super::log_writer::LogWriter`]'s thread, which syncs once per group; the vote is
//! written synced directly.

use std::sync::Arc;

use rocksdb::{IteratorMode, WriteBatch};

use super::codec::{u64_from_key, u64_key};
use super::engine::{cf, Engine, StoreError};
use super::segments::SegmentLog;

/// Names of the blobs kept in `raft_meta`.
pub mod meta {
    pub const VOTE: &[u8] = b"vote";
    pub const COMMITTED: &[u8] = b"committed";
    /// The last purged log id, as consensus encodes it.
    pub const LAST_PURGED: &[u8] = b"last_purged";
    /// Its index, big-endian, for the store's own use: a purge a crash interrupted is
    /// finished at open.
    pub const PURGED_THROUGH: &[u8] = b"purged_through";
}

/// Entries moved per step when a data dir's log is moved out of RocksDB at open.
const MOVE_CHUNK_ENTRIES: usize = 1_024;

#[derive(Clone)]
pub struct LogEngine {
    engine: Arc<Engine>,
    segments: Arc<SegmentLog>,
}

impl LogEngine {
    /// Opens the segment files, finishing an interrupted purge, and moves in the entries
    /// of a data dir that kept its log in RocksDB.
    pub fn open(engine: Arc<Engine>) -> Result<Self, StoreError> {
        let purged_through = engine
            .log_db()
            .get_cf(engine.cf(cf::RAFT_META), meta::PURGED_THROUGH)?
            .map(|bytes| {
                u64_from_key(&bytes).ok_or_else(|| {
                    StoreError::Invariant(format!("purged_through of {} bytes", bytes.len()))
                })
            })
            .transpose()?;
        let segments = SegmentLog::open(&engine.log_segments_dir(), purged_through)?;
        let log = LogEngine {
            engine,
            segments: Arc::new(segments),
        };
        log.move_entries_out_of_rocksdb()?;
        Ok(log)
    }

    /// Makes the state machine's applies durable: they bypass the WAL
    /// ([`Engine::unlogged`]), so the log entries that produced them must stay until this.
    pub fn flush_state(&self) -> Result<(), StoreError> {
        self.engine.flush_state()
    }

    /// Writes `entries` after the last one, unsynced until [`LogEngine::sync`].
    pub(super) fn append(&self, entries: &[(u64, &[u8])]) -> Result<(), StoreError> {
        self.segments.append(entries)
    }

    /// Makes every append so far durable.
    pub(super) fn sync(&self) -> Result<(), StoreError> {
        self.segments.sync()
    }

    /// Removes every entry >= `from` (a conflicting suffix), durably.
    pub(super) fn truncate(&self, from: u64) -> Result<(), StoreError> {
        self.segments.truncate(from)
    }

    /// Removes every entry <= `through`, durably, recording `last_purged` first: a crash
    /// part-way leaves the marker ahead of the files, and the next open finishes the purge
    /// ([`SegmentLog::open`]), so the log never holds entries below a hole.
    pub(super) fn purge(&self, through: u64, last_purged: &[u8]) -> Result<(), StoreError> {
        let meta = self.engine.cf(cf::RAFT_META);
        let mut batch = WriteBatch::default();
        batch.put_cf(meta, meta::LAST_PURGED, last_purged);
        batch.put_cf(meta, meta::PURGED_THROUGH, u64_key(through));
        self.engine.log_db().write_opt(batch, &Engine::synced())?;
        self.segments.purge(through)
    }

    /// Entries with `start <= index < end`, in order.
    pub fn range(&self, start: u64, end: u64) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.segments.range(start, end)
    }

    /// [`Self::range`] cut to at most `max_bytes` of records (but never below one entry).
    pub fn range_within(
        &self,
        start: u64,
        end: u64,
        max_bytes: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.segments.range_within(start, end, max_bytes)
    }

    /// The entry with the highest index, if any.
    pub fn last(&self) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        self.segments.last()
    }

    /// Segment files and their live bytes.
    pub fn footprint(&self) -> (u64, u64) {
        self.segments.footprint()
    }

    pub fn get_meta(&self, name: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .engine
            .log_db()
            .get_cf(self.engine.cf(cf::RAFT_META), name)?)
    }

    /// Synced: a vote must be on disk before it is acknowledged to a candidate.
    pub fn put_meta(&self, name: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.engine.cf(cf::RAFT_META), name, bytes);
        self.engine.log_db().write_opt(batch, &Engine::synced())?;
        Ok(())
    }

    /// Unsynced (written to RocksDB's WAL file, no fsync): survives the process dying, not
    /// always the machine. For hints whose loss is harmless, such as the committed index,
    /// which only saves re-applying entries at restart.
    pub fn put_meta_unsynced(&self, name: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.engine.cf(cf::RAFT_META), name, bytes);
        self.engine.log_db().write_opt(batch, &Engine::unsynced())?;
        Ok(())
    }

    /// A data dir written before segment files kept its entries in the `log` family: they
    /// move into segments (synced), then leave RocksDB, compacted away so that no SST keeps
    /// their bytes. Once moved, the family is empty and this reads nothing.
    ///
    /// - Restartable: a crash after the segments were synced and before RocksDB let go of
    ///   the entries leaves them in both; the next open skips those the segments hold.
    fn move_entries_out_of_rocksdb(&self) -> Result<(), StoreError> {
        let db = self.engine.log_db();
        let family = self.engine.cf(cf::LOG);
        let already_moved = self.segments.last()?.map(|(index, _)| index);
        let mut moved = 0usize;
        let mut chunk: Vec<(u64, Vec<u8>)> = Vec::with_capacity(MOVE_CHUNK_ENTRIES);
        for item in db.iterator_cf(family, IteratorMode::Start) {
            let (key, value) = item?;
            let index = u64_from_key(&key)
                .ok_or_else(|| StoreError::Invariant(format!("log key of {} bytes", key.len())))?;
            moved += 1;
            if already_moved.is_some_and(|last| index <= last) {
                continue;
            }
            chunk.push((index, value.into_vec()));
            if chunk.len() == MOVE_CHUNK_ENTRIES {
                self.append_owned(&mut chunk)?;
            }
        }
        self.append_owned(&mut chunk)?;
        if moved == 0 {
            return Ok(());
        }
        self.segments.sync()?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(family, u64_key(0), u64_key(u64::MAX));
        db.write_opt(batch, &Engine::synced())?;
        self.engine.flush(&[cf::LOG])?;
        db.compact_range_cf(family, None::<&[u8]>, None::<&[u8]>);
        tracing::info!(
            entries = moved,
            "moved the Raft log out of RocksDB into segment files"
        );
        Ok(())
    }

    /// Appends `chunk` and empties it.
    fn append_owned(&self, chunk: &mut Vec<(u64, Vec<u8>)>) -> Result<(), StoreError> {
        let entries: Vec<(u64, &[u8])> = chunk.iter().map(|(i, b)| (*i, &b[..])).collect();
        self.segments.append(&entries)?;
        chunk.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EngineOptions;

    /// Closes `db` after putting entries `indexes` into its `log` family, as a data dir
    /// from before segment files kept them.
    fn kept_in_rocksdb(db: &std::path::Path, indexes: std::ops::RangeInclusive<u64>) {
        let engine = Engine::open(db, &EngineOptions::default()).unwrap();
        let family = engine.cf(cf::LOG);
        for index in indexes {
            let entry = format!("entry {index}");
            engine
                .log_db()
                .put_cf(family, u64_key(index), entry)
                .unwrap();
        }
    }

    #[test]
    fn a_move_a_crash_interrupted_after_the_segments_were_synced_finishes_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        kept_in_rocksdb(&db, 5..=3_000);
        // The crash: segments hold 5..=1_200 (synced), RocksDB still holds everything.
        let segments = SegmentLog::open(&db.join("log-segments"), None).unwrap();
        let owned: Vec<(u64, Vec<u8>)> = (5..=1_200)
            .map(|i| (i, format!("entry {i}").into_bytes()))
            .collect();
        let entries: Vec<(u64, &[u8])> = owned.iter().map(|(i, b)| (*i, &b[..])).collect();
        segments.append(&entries).unwrap();
        segments.sync().unwrap();
        drop(segments);

        let engine = Engine::open(&db, &EngineOptions::default()).unwrap();
        let log = LogEngine::open(engine).unwrap();
        let got = log.range(0, u64::MAX).unwrap();
        assert_eq!(got.len(), 2_996);
        assert!(got
            .iter()
            .all(|(i, b)| *b == format!("entry {i}").into_bytes()));
    }

    #[test]
    fn a_log_kept_in_rocksdb_moves_into_segments_at_open_and_leaves_rocksdb() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        kept_in_rocksdb(&db, 5..=2_500);
        let engine = Engine::open(&db, &EngineOptions::default()).unwrap();
        let log = LogEngine::open(engine.clone()).unwrap();

        let entries = log.range(0, u64::MAX).unwrap();
        assert_eq!(entries.len(), 2_496);
        assert_eq!(entries[0], (5, b"entry 5".to_vec()));
        assert_eq!(log.last().unwrap(), Some((2_500, b"entry 2500".to_vec())));
        let left = engine
            .log_db()
            .iterator_cf(engine.cf(cf::LOG), IteratorMode::Start)
            .count();
        assert_eq!(left, 0, "the entries are still in RocksDB");

        // A second open finds them in the segments only, and appends go after them.
        drop(log);
        let log = LogEngine::open(engine).unwrap();
        log.append(&[(2_501, b"next".as_slice())]).unwrap();
        log.sync().unwrap();
        assert_eq!(log.range(2_499, 2_502).unwrap().len(), 3);
    }
}
