//! The RocksDB instance: column families and every option that matters, set explicitly.

use std::path::Path;
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Options,
    WriteOptions, DB,
};

/// Column families. The Raft log and the state machine share one RocksDB instance and so
/// one WAL: a synced log append also makes every earlier (unsynced) state-machine write
/// durable, which is what lets applies skip their own fsync (see [`StateTxn::commit`]).
///
/// [`StateTxn::commit`]: super::state::StateTxn::commit
pub mod cf {
    /// Raft log entries by big-endian index.
    pub const LOG: &str = "log";
    /// Vote, committed log id, last purged log id.
    pub const RAFT_META: &str = "raft_meta";
    /// Current slot record per key.
    pub const SLOTS: &str = "slots";
    /// `key 0x00 version_be` → history event.
    pub const HISTORY: &str = "history";
    /// Tombstones by id, kept forever.
    pub const TOMBSTONES: &str = "tombstones";
    /// `anchor 0x00 key` → empty: the recall index.
    pub const ANCHORS: &str = "anchors";
    /// `request_id` → dedup record.
    pub const DEDUP: &str = "dedup";
    /// `decided_at_ms_be request_id` → empty: dedup expiry order.
    pub const DEDUP_BY_TIME: &str = "dedup_by_time";
    /// `revision_be seq_be` → watch event: the change feed.
    pub const FEED: &str = "feed";
    /// last applied log id, membership, apply clock, snapshot-install marker.
    pub const SM_META: &str = "sm_meta";

    pub const ALL: [&str; 10] = [
        LOG,
        RAFT_META,
        SLOTS,
        HISTORY,
        TOMBSTONES,
        ANCHORS,
        DEDUP,
        DEDUP_BY_TIME,
        FEED,
        SM_META,
    ];

    /// The families that make up the state machine (what a snapshot carries).
    pub const STATE: [&str; 8] = [
        SLOTS,
        HISTORY,
        TOMBSTONES,
        ANCHORS,
        DEDUP,
        DEDUP_BY_TIME,
        FEED,
        SM_META,
    ];
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    #[error("corrupt record in {cf}: {source}")]
    Codec {
        cf: &'static str,
        source: super::codec::CodecError,
    },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("invariant violated: {0}")]
    Invariant(String),
}

/// Tunables passed explicitly from the node config (no reliance on RocksDB defaults).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub block_cache_bytes: usize,
    pub write_buffer_bytes: usize,
    pub background_jobs: i32,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            block_cache_bytes: 64 << 20,
            write_buffer_bytes: 16 << 20,
            background_jobs: 2,
        }
    }
}

pub struct Engine {
    db: DB,
}

impl Engine {
    pub fn open(dir: &Path, opts: &EngineOptions) -> Result<Arc<Engine>, StoreError> {
        let cache = Cache::new_lru_cache(opts.block_cache_bytes);
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(opts.background_jobs);
        // WAL bytes of a forgotten value must be gone once the memtable is flushed:
        // recycled WAL files would keep old bytes on disk, archived ones too.
        db_opts.set_recycle_log_file_num(0);
        db_opts.set_wal_ttl_seconds(0);
        db_opts.set_manual_wal_flush(false);
        db_opts.set_max_total_wal_size(256 << 20);
        db_opts.set_keep_log_file_num(4);
        db_opts.set_bytes_per_sync(1 << 20);
        let families = cf::ALL
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(*name, family_options(name, &cache, opts)));
        let db = DB::open_cf_descriptors(&db_opts, dir, families)?;
        Ok(Arc::new(Engine { db }))
    }

    pub fn db(&self) -> &DB {
        &self.db
    }

    pub fn cf(&self, name: &'static str) -> &ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("every column family is created at open")
    }

    /// Raft durability: the write returns only after the WAL is fsynced.
    pub fn synced() -> WriteOptions {
        let mut w = WriteOptions::default();
        w.set_sync(true);
        w.disable_wal(false);
        w
    }

    /// State-machine writes: in the WAL, not fsynced on their own (made durable by the next
    /// synced write, and re-applied from the log after a crash).
    pub fn unsynced() -> WriteOptions {
        let mut w = WriteOptions::default();
        w.set_sync(false);
        w.disable_wal(false);
        w
    }

    /// Bulk loads that make themselves durable with [`Engine::flush`] (snapshot install):
    /// no WAL, so the bytes are not written twice.
    pub fn bulk() -> WriteOptions {
        let mut w = WriteOptions::default();
        w.set_sync(false);
        w.disable_wal(true);
        w
    }

    /// Flushes the memtables of `families` to SST files and waits for it.
    pub fn flush(&self, families: &[&'static str]) -> Result<(), StoreError> {
        let handles: Vec<&ColumnFamily> = families.iter().map(|n| self.cf(n)).collect();
        let mut flush = rocksdb::FlushOptions::default();
        flush.set_wait(true);
        self.db.flush_cfs_opt(&handles, &flush)?;
        Ok(())
    }

    /// Flushes every memtable and compacts every family down to the bottom level, so that
    /// deleted and overwritten bytes leave the SST files and obsolete WAL files are dropped.
    pub fn compact_all(&self) -> Result<(), StoreError> {
        self.flush(&cf::ALL)?;
        let handles: Vec<&ColumnFamily> = cf::ALL.iter().map(|n| self.cf(n)).collect();
        let mut compact = rocksdb::CompactOptions::default();
        compact.set_exclusive_manual_compaction(true);
        compact.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        for handle in &handles {
            self.db
                .compact_range_cf_opt(*handle, None::<&[u8]>, None::<&[u8]>, &compact);
        }
        self.db.flush_wal(true)?;
        Ok(())
    }
}

/// Families read by point lookups on every mutation: the key's slot and the request's
/// dedup record (a fresh `request_id` always misses), plus tombstones by id.
const POINT_LOOKUP_FAMILIES: [&str; 3] = [cf::SLOTS, cf::DEDUP, cf::TOMBSTONES];

/// Memtable bloom filter size, as a fraction of the write buffer.
const MEMTABLE_BLOOM_RATIO: f64 = 0.05;

fn family_options(name: &str, cache: &Cache, opts: &EngineOptions) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_bloom_filter(10.0, false);
    let mut o = Options::default();
    o.set_block_based_table_factory(&table);
    o.set_write_buffer_size(opts.write_buffer_bytes);
    o.set_compression_type(DBCompressionType::Lz4);
    if POINT_LOOKUP_FAMILIES.contains(&name) {
        // A get that misses the memtable (most do) skips the skiplist search; memtable
        // skiplist searches were ~7% of a write-heavy node's CPU in the profile before.
        o.set_memtable_whole_key_filtering(true);
        o.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
    }
    o
}
