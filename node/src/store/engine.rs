//! The RocksDB instance: column families and every option that matters, set explicitly.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType, Options,
    ReadOptions, WriteOptions, DB,
};

use super::blob_gc::{self, BlobGc, BlobSpace};
use super::slot_cache::{SlotCache, SlotCacheStats};

/// What RocksDB holds in memory, both instances together (RocksDB's own estimates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineMemory {
    /// Every memtable, active and immutable, flushed or not.
    pub memtables: u64,
    /// Index and filter blocks of open SST files held outside the block cache.
    pub table_readers: u64,
    /// The shared block cache's usage.
    pub block_cache: u64,
}

/// Column families, in two RocksDB instances (see [`Engine`]).
pub mod cf {
    /// Raft log entries by big-endian index, as data dirs kept them before segment files
    /// (`store/segments.rs`): moved into segments at open, so always empty after it.
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

    /// The families of the log instance; every other family is the state machine's.
    pub const LOG_INSTANCE: [&str; 2] = [LOG, RAFT_META];

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
    #[error(
        "{0} holds a single-instance RocksDB from an older cairn (one WAL for log and state); \
         this version keeps log/ and state/ apart and cannot read it: start the node on an \
         empty data dir and let it catch up from the cluster"
    )]
    OldLayout(std::path::PathBuf),
}

/// The families whose large records go to blob files ([`set_blob_files`]): each key's
/// current slot, which lives until the key is written again and would otherwise be
/// rewritten by every compaction it passes through.
///
/// Not the Raft log: its entries die young (purged after the next snapshot), mostly before
/// a compaction reaches them, and blob files there cost more than they saved. 64 KiB
/// values at 16 writers, three interleaved 8 s runs each (git e48fa53 with blob files added):
/// inline 308 / 314 / 312 ops/s (p99 111-139 ms), blob files for slots 434 / 434 / 421
/// (p99 77-83 ms), for slots and log 372 / 393 / 359 (p99 79-84 ms).
pub const BLOB_FAMILIES: [&str; 1] = [cf::SLOTS];

/// Tunables passed explicitly from the node config (no reliance on RocksDB defaults).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub block_cache_bytes: usize,
    pub write_buffer_bytes: usize,
    pub background_jobs: i32,
    /// The [`SlotCache`] in front of the `slots` family; 0 disables it.
    pub slot_cache_bytes: usize,
    /// Records of [`BLOB_FAMILIES`] at least this big keep their bytes in blob files
    /// beside the LSM tree (RocksDB's integrated BlobDB); 0 keeps every value inline.
    pub blob_min_bytes: u64,
    /// The least blob garbage that turns its collection on ([`blob_gc`]).
    pub blob_gc_from_bytes: u64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            block_cache_bytes: 32 << 20,
            write_buffer_bytes: 8 << 20,
            background_jobs: 2,
            slot_cache_bytes: 64 << 20,
            blob_min_bytes: cairn_config::node::BLOB_MIN_BYTES_DEFAULT,
            blob_gc_from_bytes: blob_gc::COLLECT_FROM_BYTES,
        }
    }
}

/// Two RocksDB instances under one directory, sharing one block cache.
///
/// - `log/`: the Raft log and its metadata. Every write goes through the WAL; appends,
///   votes, truncations and purges are fsynced ([`Engine::synced`]).
/// - `state/`: the state machine. Applies bypass the WAL ([`Engine::unlogged`]) because
///   the Raft log already holds every entry being applied; they become durable when the
///   memtables are flushed, all families at once (`atomic_flush`), so a crash leaves the
///   state of one applied index, which openraft brings forward from the log at restart.
///
/// Why two instances and not one: RocksDB has one write queue per instance. Sharing it,
/// an apply waited behind the log writer's fsync (and the fsync behind the apply's
/// memtable inserts), and a WAL-less apply could not even join the log's write group, so
/// skipping the WAL in one instance measured slower end to end (A/B at 64 writers:
/// 8.1k–9.7k vs 8.9k–10.4k ops/s with the shared WAL). Apart, neither waits for the other.
pub struct Engine {
    /// The directory both instances (and the log's segment files) live under.
    dir: PathBuf,
    log: DB,
    state: DB,
    /// Here, not in [`super::StateEngine`] (which is cloned freely), so that one open
    /// database has exactly one cache.
    slot_cache: SlotCache,
    /// The block cache both instances share, kept to report its usage.
    block_cache: Cache,
    /// A lower bound on the time of every key in `dedup_by_time` (0: not known). An apply
    /// whose expiry cutoff is not above it has nothing to expire and opens no iterator:
    /// opening one per entry was ~3% of the leader's CPU at 16 writers (git `c3bc1ae`).
    /// Kept by [`StateTxn::commit`](super::StateTxn), reset by a snapshot install.
    dedup_floor_ms: AtomicU64,
    /// Whether compactions collect blob garbage now ([`blob_gc`]).
    blob_gc: BlobGc,
}

impl Engine {
    pub fn open(dir: &Path, opts: &EngineOptions) -> Result<Arc<Engine>, StoreError> {
        if dir.join("CURRENT").exists() {
            return Err(StoreError::OldLayout(dir.to_path_buf()));
        }
        std::fs::create_dir_all(dir)?;
        // HyperClockCache, not LRU: every apply and every read does point lookups through
        // the block cache, and the LRU cache's sharded mutex and list updates were ~4% of a
        // follower's samples under writes. Interleaved 6 s points (git bdfe08d, 2026-11-30):
        // 64 writers 10.5k / 11.4k / 11.5k vs 9.9k / 10.8k / 11.3k ops/s with LRU; bounded
        // reads ahead in 3 of 4 pairs (53.1k / 55.5k / 52.7k vs 50.1k / 50.5k / 48.7k); 256
        // writers even. 0 = let it size its table itself (RocksDB's recommended setting).
        let cache = Cache::new_hyper_clock_cache(opts.block_cache_bytes, 0);
        let log = open_instance(&dir.join("log"), &cf::LOG_INSTANCE, false, &cache, opts)?;
        let state = open_instance(&dir.join("state"), &cf::STATE, true, &cache, opts)?;
        Ok(Arc::new(Engine {
            dir: dir.to_path_buf(),
            log,
            state,
            slot_cache: SlotCache::new(opts.slot_cache_bytes),
            block_cache: cache,
            dedup_floor_ms: AtomicU64::new(0),
            blob_gc: BlobGc::new(opts.blob_gc_from_bytes),
        }))
    }

    /// Where the Raft log's segment files live ([`super::segments`]).
    pub(super) fn log_segments_dir(&self) -> PathBuf {
        self.dir.join("log-segments")
    }

    /// The instance holding the Raft log's metadata.
    pub(super) fn log_db(&self) -> &DB {
        &self.log
    }

    /// The instance holding the state machine.
    pub(super) fn state_db(&self) -> &DB {
        &self.state
    }

    pub(super) fn slot_cache(&self) -> &SlotCache {
        &self.slot_cache
    }

    pub(super) fn dedup_floor_ms(&self) -> u64 {
        self.dedup_floor_ms.load(Ordering::Acquire)
    }

    pub(super) fn set_dedup_floor_ms(&self, ms: u64) {
        self.dedup_floor_ms.store(ms, Ordering::Release);
    }

    pub fn slot_cache_stats(&self) -> SlotCacheStats {
        self.slot_cache.stats()
    }

    /// RocksDB's memory by kind, for the node's memory gauges.
    pub fn memory(&self) -> Result<EngineMemory, StoreError> {
        let stats = rocksdb::perf::get_memory_usage_stats(
            Some(&[&self.log, &self.state]),
            Some(&[&self.block_cache]),
        )?;
        Ok(EngineMemory {
            memtables: stats.mem_table_total,
            table_readers: stats.mem_table_readers_total,
            block_cache: stats.cache_total,
        })
    }

    /// Entries in the state machine's active memtables: applies that are not durable yet,
    /// which a crash now would make the node re-apply from the log.
    pub fn unflushed_state_records(&self) -> Result<u64, StoreError> {
        let mut total = 0;
        for name in cf::STATE {
            total += self
                .state
                .property_int_value_cf(self.cf(name), "rocksdb.num-entries-active-mem-table")?
                .unwrap_or(0);
        }
        Ok(total)
    }

    fn instance_of(&self, family: &str) -> &DB {
        if cf::LOG_INSTANCE.contains(&family) {
            &self.log
        } else {
            &self.state
        }
    }

    pub fn cf(&self, name: &'static str) -> &ColumnFamily {
        self.instance_of(name)
            .cf_handle(name)
            .expect("every column family is created at open")
    }

    /// Options of a scan over a whole family (snapshot build, digest): its blocks are read
    /// once, so they do not enter the block cache and evict the blocks reads keep using.
    /// Measured at 1M keys: a leader that built snapshots held a full 31 MiB block cache
    /// after the next bulk load, its followers 0–6 MiB (`cairn_rocksdb_block_cache_bytes`).
    pub fn full_scan() -> ReadOptions {
        let mut r = ReadOptions::default();
        r.fill_cache(false);
        r
    }

    /// Raft durability: the write returns only after the WAL is fsynced.
    pub fn synced() -> WriteOptions {
        let mut w = WriteOptions::default();
        w.set_sync(true);
        w.disable_wal(false);
        w
    }

    /// Small Raft metadata hints (the committed index): in the log instance's WAL, not
    /// fsynced on their own (made durable by the next synced append; losing one only costs
    /// re-applying entries at restart).
    pub fn unsynced() -> WriteOptions {
        let mut w = WriteOptions::default();
        w.set_sync(false);
        w.disable_wal(false);
        w
    }

    /// Every state-machine write but the snapshot-install marker: applies, and snapshot
    /// installs (which flush before they remove their marker). No WAL, because the Raft
    /// log already holds every entry being applied. They are durable once flushed
    /// ([`Engine::flush_state`], or RocksDB's own atomic flushes); until then a crash loses
    /// them and openraft re-applies the entries from the log (`last_applied` to the
    /// committed index) before the node serves.
    ///
    /// Measured by `examples/apply_bench` (100k keys, 32 upserts per entry, three
    /// interleaved runs each): 15.8–16.2 → 12.7–13.7 µs per 256-byte upsert; and the fsync
    /// of each log append no longer carries ~4× its bytes in state records.
    pub fn unlogged() -> WriteOptions {
        let mut w = WriteOptions::default();
        w.set_sync(false);
        w.disable_wal(true);
        w
    }

    /// Flushes the memtables of `families` to SST files and waits for it.
    pub fn flush(&self, families: &[&'static str]) -> Result<(), StoreError> {
        let mut flush = rocksdb::FlushOptions::default();
        flush.set_wait(true);
        for db in [&self.log, &self.state] {
            let handles: Vec<&ColumnFamily> = families
                .iter()
                .filter_map(|name| db.cf_handle(name))
                .collect();
            if !handles.is_empty() {
                db.flush_cfs_opt(&handles, &flush)?;
            }
        }
        Ok(())
    }

    /// Makes every state-machine write so far durable: they bypass the WAL
    /// ([`Engine::unlogged`]), so this must run before the log entries that produced them
    /// are purged, and is worth running at a clean stop (nothing left to re-apply).
    pub fn flush_state(&self) -> Result<(), StoreError> {
        self.flush(&cf::STATE)
    }

    /// The blob files' bytes and the garbage in them, over the [`BLOB_FAMILIES`].
    pub fn blob_space(&self) -> Result<BlobSpace, StoreError> {
        let mut space = BlobSpace::default();
        for name in BLOB_FAMILIES {
            let db = self.instance_of(name);
            let read = |property: &str| -> Result<u64, StoreError> {
                Ok(db
                    .property_int_value_cf(self.cf(name), property)?
                    .unwrap_or(0))
            };
            space.file_bytes += read("rocksdb.live-blob-file-size")?;
            space.garbage_bytes += read("rocksdb.live-blob-file-garbage-size")?;
        }
        Ok(space)
    }

    /// Looks at the blob garbage and turns its collection in compactions on or off
    /// ([`blob_gc`]; every [`blob_gc::STEER_INTERVAL`]). Returns whether it is on.
    pub fn steer_blob_gc(&self) -> Result<bool, StoreError> {
        let space = self.blob_space()?;
        self.blob_gc
            .steer(space, |cutoff| self.set_blob_gc_cutoff(cutoff))
    }

    /// Whether compactions collect blob garbage now ([`Engine::steer_blob_gc`]).
    pub fn blob_gc_collecting(&self) -> bool {
        self.blob_gc.collecting()
    }

    fn set_blob_gc_cutoff(&self, cutoff: f64) -> Result<(), StoreError> {
        let cutoff = cutoff.to_string();
        for name in BLOB_FAMILIES {
            self.instance_of(name).set_options_cf(
                self.cf(name),
                &[(blob_gc::AGE_CUTOFF_OPTION, cutoff.as_str())],
            )?;
        }
        Ok(())
    }

    /// Flushes every memtable and compacts every family down to the bottom level, so that
    /// deleted and overwritten bytes leave the SST files and obsolete WAL files are dropped.
    ///
    /// - Blob files too: during this compaction every live blob moves to a new blob file
    ///   ([`BlobGc::force_all`]), so each old blob file, with the garbage in it (a forgotten
    ///   value, an overwritten one), is left unreferenced and deleted.
    pub fn compact_all(&self) -> Result<(), StoreError> {
        self.flush(&cf::ALL)?;
        let mut compact = rocksdb::CompactOptions::default();
        compact.set_exclusive_manual_compaction(true);
        compact.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        self.blob_gc.force_all(
            |cutoff| self.set_blob_gc_cutoff(cutoff),
            || {
                for name in cf::ALL {
                    self.instance_of(name).compact_range_cf_opt(
                        self.cf(name),
                        None::<&[u8]>,
                        None::<&[u8]>,
                        &compact,
                    );
                }
                Ok(())
            },
        )?;
        self.log.flush_wal(true)?;
        self.state.flush_wal(true)?;
        Ok(())
    }
}

/// Opens one instance with `families`, every option set explicitly.
fn open_instance(
    dir: &Path,
    families: &[&str],
    atomic_flush: bool,
    cache: &Cache,
    opts: &EngineOptions,
) -> Result<DB, StoreError> {
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
    // The state instance's writes bypass the WAL: a flush must write every family's
    // memtable in one step, or a crash could keep a family's half of an apply (a slot)
    // without the rest (its history event, the applied index), and the re-apply from the
    // log at restart would apply it twice.
    db_opts.set_atomic_flush(atomic_flush);
    let descriptors = families
        .iter()
        .map(|name| ColumnFamilyDescriptor::new(*name, family_options(name, cache, opts)));
    Ok(DB::open_cf_descriptors(&db_opts, dir, descriptors)?)
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
    if BLOB_FAMILIES.contains(&name) && opts.blob_min_bytes > 0 {
        set_blob_files(&mut o, opts.blob_min_bytes);
    }
    if POINT_LOOKUP_FAMILIES.contains(&name) {
        // A get that misses the memtable (most do) skips the skiplist search; memtable
        // skiplist searches were ~7% of a write-heavy node's CPU in the profile before.
        o.set_memtable_whole_key_filtering(true);
        o.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
    }
    o
}

/// Integrated blob files: a record of at least `min_bytes` is written to a blob file when
/// its memtable is flushed, and compactions move only its small reference, so a large
/// value's slot is written once instead of at every level it is compacted through.
fn set_blob_files(o: &mut Options, min_bytes: u64) {
    o.set_enable_blob_files(true);
    o.set_min_blob_size(min_bytes);
    o.set_blob_compression_type(DBCompressionType::Lz4);
    o.set_enable_blob_gc(true);
    o.set_blob_gc_age_cutoff(BlobGc::OPEN_CUTOFF);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_instance_db_dir_from_an_older_cairn_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("CURRENT"), "MANIFEST-000005\n").unwrap();
        let Err(err) = Engine::open(dir.path(), &EngineOptions::default()) else {
            panic!("an old single-instance layout was opened");
        };
        assert!(
            matches!(&err, StoreError::OldLayout(d) if d == dir.path()),
            "{err}"
        );
        assert!(err.to_string().contains("older cairn"), "{err}");
        assert!(!dir.path().join("log").exists(), "created log/ anyway");
        assert!(!dir.path().join("state").exists(), "created state/ anyway");
    }

    /// librocksdb-sys compiles RocksDB with `-msse4.2 -mpclmul`, and so with its hardware
    /// CRC32C, only when Rust's target has these features (`.cargo/config.toml`); a build
    /// that lost them (the file removed, or `RUSTFLAGS` set, which replaces it) fails here.
    #[test]
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::assertions_on_constants)] // the constant is what this build was given
    fn rocksdb_is_compiled_for_the_hardware_crc32c() {
        assert!(
            cfg!(target_feature = "sse4.2") && cfg!(target_feature = "pclmulqdq"),
            "built without +sse4.2,+pclmulqdq: RocksDB checksums every WAL record, block \
             and blob with its table-driven CRC32C"
        );
    }

    #[test]
    fn each_family_lives_in_its_instance() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), &EngineOptions::default()).unwrap();
        for name in cf::ALL {
            let in_log = engine.log_db().cf_handle(name).is_some();
            let in_state = engine.state_db().cf_handle(name).is_some();
            assert_eq!(in_log, cf::LOG_INSTANCE.contains(&name), "{name}");
            assert_eq!(in_state, cf::STATE.contains(&name), "{name}");
        }
    }

    /// Small blob files with mostly garbage in them: round `r` writes keys `r..KEYS` of
    /// `slots` and flushes, so each round's blob file keeps one live value (none is deleted
    /// whole) and the last keeps the rest.
    fn engine_with_blob_garbage(dir: &Path) -> Arc<Engine> {
        const KEYS: usize = 100;
        const ROUNDS: usize = 8;
        let opts = EngineOptions {
            blob_min_bytes: 1024,
            blob_gc_from_bytes: 1 << 20,
            ..EngineOptions::default()
        };
        let engine = Engine::open(dir, &opts).unwrap();
        let mut rng = rand::thread_rng();
        for round in 0..ROUNDS {
            for key in round..KEYS {
                // Random bytes: LZ4 leaves them 4 KiB in the blob file.
                let value: Vec<u8> = (0..4096).map(|_| rand::Rng::gen(&mut rng)).collect();
                let slots = engine.cf(cf::SLOTS);
                engine
                    .state_db()
                    .put_cf(slots, format!("k{key:03}"), value)
                    .unwrap();
            }
            engine.flush(&[cf::SLOTS]).unwrap();
        }
        engine
    }

    fn compact_slots(engine: &Engine) {
        let mut compact = rocksdb::CompactOptions::default();
        compact.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        let slots = engine.cf(cf::SLOTS);
        engine
            .state_db()
            .compact_range_cf_opt(slots, None::<&[u8]>, None::<&[u8]>, &compact);
    }

    /// Compactions move no blob until the steering sees enough garbage (blob_gc); then they
    /// collect it until the steering turns collection off again. With RocksDB's fixed age
    /// cutoff the first compaction would already have moved the oldest files' blobs.
    #[test]
    fn blob_garbage_is_collected_only_while_steered_on() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine_with_blob_garbage(dir.path());
        let written = engine.blob_space().unwrap();
        compact_slots(&engine);
        let before = engine.blob_space().unwrap();
        assert_eq!(
            before.file_bytes, written.file_bytes,
            "a compaction while not collecting moved blobs"
        );
        assert!(
            before.garbage_bytes * 2 > before.file_bytes,
            "the fixture leaves most of the blob bytes garbage: {before:?}"
        );

        assert!(
            engine.steer_blob_gc().unwrap(),
            "{before:?} did not turn collection on"
        );
        let mut space = before;
        for _ in 0..20 {
            compact_slots(&engine);
            let now = engine.blob_space().unwrap();
            assert!(
                now.garbage_bytes < space.garbage_bytes,
                "{now:?} after {space:?}"
            );
            space = now;
            if !engine.steer_blob_gc().unwrap() {
                break;
            }
        }
        assert!(
            !engine.blob_gc_collecting(),
            "still collecting at {space:?}"
        );
        assert!(space.garbage_bytes * 4 < space.file_bytes, "{space:?}");
        compact_slots(&engine);
        assert_eq!(
            engine.blob_space().unwrap(),
            space,
            "moved blobs after turning off"
        );
    }

    /// `compact_all` (`/cluster/compact`) moves every live blob whatever the steering says,
    /// and leaves the steering's cutoff behind it: here, not collecting.
    #[test]
    fn compact_all_collects_every_blob_and_restores_the_steering() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine_with_blob_garbage(dir.path());
        engine.compact_all().unwrap();
        assert_eq!(engine.blob_space().unwrap().garbage_bytes, 0);
        assert!(!engine.blob_gc_collecting());

        let slots = engine.cf(cf::SLOTS);
        engine
            .state_db()
            .put_cf(slots, "k000", vec![7; 4096])
            .unwrap();
        engine.flush(&[cf::SLOTS]).unwrap();
        compact_slots(&engine);
        assert!(
            engine.blob_space().unwrap().garbage_bytes > 0,
            "an ordinary compaction after compact_all still moved every blob"
        );
    }
}
