//! The Raft log in RocksDB, as opaque entry bytes keyed by index.
//!
//! This layer knows nothing of openraft: `consensus::log_store` encodes entries and log ids
//! and calls in here. Appends, truncations and purges are *staged* into a `WriteBatch` that
//! [`super::log_writer::LogWriter`] writes synced, many at a time; the vote is written
//! synced directly.

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

    /// Appends to the memtable only (no WAL, no fsync): lost if the process dies. Exists
    /// solely for the planted bug `ack-before-fsync`.
    pub fn append_volatile(&self, entries: &[(u64, Vec<u8>)]) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        self.stage_append(&mut batch, entries.iter().map(|(i, b)| (*i, &b[..])))?;
        let mut opts = Engine::unsynced();
        opts.disable_wal(true);
        self.engine.log_db().write_opt(batch, &opts)?;
        Ok(())
    }

    /// Makes the state machine's applies durable: they bypass the WAL
    /// ([`Engine::unlogged`]), so the log entries that produced them must stay until this.
    pub fn flush_state(&self) -> Result<(), StoreError> {
        self.engine.flush_state()
    }

    /// Adds the puts of `entries` to `batch`.
    ///
    /// - Indexes must be consecutive and ascending (checked): a gap would make the log
    ///   unreadable by Raft.
    pub(super) fn stage_append<'a>(
        &self,
        batch: &mut WriteBatch,
        entries: impl Iterator<Item = (u64, &'a [u8])>,
    ) -> Result<(), StoreError> {
        let log = self.engine.cf(cf::LOG);
        let mut previous: Option<u64> = None;
        for (index, bytes) in entries {
            if let Some(p) = previous.filter(|p| index != p + 1) {
                return Err(StoreError::Invariant(format!(
                    "append of non-consecutive indexes {p} then {index}"
                )));
            }
            previous = Some(index);
            batch.put_cf(log, u64_key(index), bytes);
        }
        Ok(())
    }

    /// Adds the deletion of every entry with index >= `from` (a conflicting suffix).
    pub(super) fn stage_truncate(&self, batch: &mut WriteBatch, from: u64) {
        batch.delete_range_cf(self.engine.cf(cf::LOG), u64_key(from), u64_key(u64::MAX));
    }

    /// Adds the deletion of every entry with index <= `through` and the `last_purged`
    /// marker, in the same batch, so a crash never leaves a purged log without its marker.
    pub(super) fn stage_purge(
        &self,
        batch: &mut WriteBatch,
        through: u64,
        last_purged: &[u8],
    ) -> Result<(), StoreError> {
        let end = through
            .checked_add(1)
            .ok_or_else(|| StoreError::Invariant("purge through u64::MAX".to_string()))?;
        batch.delete_range_cf(self.engine.cf(cf::LOG), u64_key(0), u64_key(end));
        batch.put_cf(
            self.engine.cf(cf::RAFT_META),
            meta::LAST_PURGED,
            last_purged,
        );
        Ok(())
    }

    /// Writes `batch` and returns once RocksDB's WAL is fsynced.
    pub(super) fn write_synced(&self, batch: WriteBatch) -> Result<(), StoreError> {
        self.engine.log_db().write_opt(batch, &Engine::synced())?;
        Ok(())
    }

    /// Entries with `start <= index < end`, in order.
    pub fn range(&self, start: u64, end: u64) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let log = self.engine.cf(cf::LOG);
        let from = u64_key(start);
        let mut out = Vec::new();
        for item in self
            .engine
            .log_db()
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
        match self
            .engine
            .log_db()
            .iterator_cf(log, IteratorMode::End)
            .next()
        {
            None => Ok(None),
            Some(item) => {
                let (k, v) = item?;
                Ok(Some((index_of(&k)?, v.into_vec())))
            }
        }
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

    /// Unsynced (WAL, no fsync): for hints whose loss is harmless, such as the committed
    /// index, which only saves re-applying entries at restart.
    pub fn put_meta_unsynced(&self, name: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.engine.cf(cf::RAFT_META), name, bytes);
        self.engine.log_db().write_opt(batch, &Engine::unsynced())?;
        Ok(())
    }
}

fn index_of(key: &[u8]) -> Result<u64, StoreError> {
    u64_from_key(key)
        .ok_or_else(|| StoreError::Invariant(format!("log key of {} bytes", key.len())))
}
