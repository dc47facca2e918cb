//! The Raft log in RocksDB, as opaque entry bytes keyed by index.
//!
//! This layer knows nothing of openraft: `consensus::log_store` encodes entries and log ids
//! and calls in here. Every mutating call here is a synced write: it returns only after
//! RocksDB's WAL is fsynced.

use std::sync::Arc;

use rocksdb::{Direction, IteratorMode, WriteBatch};

use super::codec::{u64_from_key, u64_key};
use super::engine::{cf, Engine, StoreError};

/// Names of the blobs kept in `raft_meta`.
pub mod meta {
    pub const VOTE: &[u8] = b"vote";
    pub const COMMITTED: &[u8] = b"committed";
    pub const LAST_PURGED: &[u8] = b"last_purged";
}

#[derive(Clone)]
pub struct LogEngine {
    engine: Arc<Engine>,
}

impl LogEngine {
    pub fn new(engine: Arc<Engine>) -> Self {
        LogEngine { engine }
    }

    /// Appends entries in one synced batch.
    ///
    /// - Indexes must be consecutive and ascending (asserted): a gap would make the log
    ///   unreadable by Raft.
    pub fn append(&self, entries: &[(u64, Vec<u8>)]) -> Result<(), StoreError> {
        self.append_with(entries, &Engine::synced())
    }

    /// Appends to the memtable only (no WAL, no fsync): lost if the process dies. Exists
    /// solely for the planted bug `ack-before-fsync`.
    pub fn append_volatile(&self, entries: &[(u64, Vec<u8>)]) -> Result<(), StoreError> {
        let mut opts = Engine::unsynced();
        opts.disable_wal(true);
        self.append_with(entries, &opts)
    }

    fn append_with(
        &self,
        entries: &[(u64, Vec<u8>)],
        opts: &rocksdb::WriteOptions,
    ) -> Result<(), StoreError> {
        let log = self.engine.cf(cf::LOG);
        let mut batch = WriteBatch::default();
        for pair in entries.windows(2) {
            if pair[1].0 != pair[0].0 + 1 {
                return Err(StoreError::Invariant(format!(
                    "append of non-consecutive indexes {} then {}",
                    pair[0].0, pair[1].0
                )));
            }
        }
        for (index, bytes) in entries {
            batch.put_cf(log, u64_key(*index), bytes);
        }
        self.engine.db().write_opt(batch, opts)?;
        Ok(())
    }

    /// Entries with `start <= index < end`, in order.
    pub fn range(&self, start: u64, end: u64) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let log = self.engine.cf(cf::LOG);
        let from = u64_key(start);
        let mut out = Vec::new();
        for item in self
            .engine
            .db()
            .iterator_cf(log, IteratorMode::From(&from, Direction::Forward))
        {
            let (k, v) = item?;
            let index = index_of(&k)?;
            if index >= end {
                break;
            }
            out.push((index, v.into_vec()));
        }
        Ok(out)
    }

    /// The entry with the highest index, if any.
    pub fn last(&self) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let log = self.engine.cf(cf::LOG);
        match self.engine.db().iterator_cf(log, IteratorMode::End).next() {
            None => Ok(None),
            Some(item) => {
                let (k, v) = item?;
                Ok(Some((index_of(&k)?, v.into_vec())))
            }
        }
    }

    /// Deletes every entry with index >= `from` (conflicting suffix).
    pub fn truncate_from(&self, from: u64) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(self.engine.cf(cf::LOG), u64_key(from), u64_key(u64::MAX));
        self.engine.db().write_opt(batch, &Engine::synced())?;
        Ok(())
    }

    /// Deletes every entry with index <= `through` and records `last_purged` in the same
    /// synced batch, so a crash can never leave a purged log without its marker.
    pub fn purge_through(&self, through: u64, last_purged: &[u8]) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        let end = through
            .checked_add(1)
            .ok_or_else(|| StoreError::Invariant("purge through u64::MAX".to_string()))?;
        batch.delete_range_cf(self.engine.cf(cf::LOG), u64_key(0), u64_key(end));
        batch.put_cf(
            self.engine.cf(cf::RAFT_META),
            meta::LAST_PURGED,
            last_purged,
        );
        self.engine.db().write_opt(batch, &Engine::synced())?;
        Ok(())
    }

    pub fn get_meta(&self, name: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .engine
            .db()
            .get_cf(self.engine.cf(cf::RAFT_META), name)?)
    }

    /// Synced: a vote must be on disk before it is acknowledged to a candidate.
    pub fn put_meta(&self, name: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.engine.cf(cf::RAFT_META), name, bytes);
        self.engine.db().write_opt(batch, &Engine::synced())?;
        Ok(())
    }

    /// Unsynced (WAL, no fsync): for hints whose loss is harmless, such as the committed
    /// index, which only saves re-applying entries at restart.
    pub fn put_meta_unsynced(&self, name: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.engine.cf(cf::RAFT_META), name, bytes);
        self.engine.db().write_opt(batch, &Engine::unsynced())?;
        Ok(())
    }
}

fn index_of(key: &[u8]) -> Result<u64, StoreError> {
    u64_from_key(key)
        .ok_or_else(|| StoreError::Invariant(format!("log key of {} bytes", key.len())))
}
