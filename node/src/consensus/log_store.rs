//! `RaftLogStorage` for openraft over the store's [`LogEngine`] (segment files).
//!
//! To ensure correctness (openraft's storage contract, kept here):
//! - `append` returns once the entries are staged (readable) and calls its callback only
//!   after the group write holding them is fsynced ([`LogWriter`]), so an entry
//!   acknowledged to the leader survives a crash while the core never waits on the disk.
//! - `save_vote` returns only after the vote is fsynced: a node never votes twice in a term.
//! - `truncate` and `purge` go through the same writer queue, so they reach the disk in
//!   order with the appends around them, and return once durable: a conflicting suffix is
//!   gone before any new entry is appended after it; `purge` records the last purged log id
//!   in the same synced batch as the deletion.
//! - `save_committed` is a hint (not fsynced): the committed index is never trusted beyond
//!   the entries that are durably in the log.
//! - Reads of recent entries come from [`RecentEntries`], the decoded suffix of the log
//!   kept by the same `append`, `truncate` and `purge` calls that change the log (so it
//!   never holds an entry the log does not); any other read returns what the writer holds
//!   (staged tail, then disk), a decoded copy standing in for the bytes only when its log
//!   id equals the id in them.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{RaftLogId, RaftLogReader};

use super::entry_codec;
use super::types::{Entry, LogId, StorageError, StorageIOError, TypeConfig, Vote};
use crate::planted::{self, Bug};
use crate::store::codec;
use crate::store::log::meta;
use crate::store::{LogEngine, LogWriter, StoreError};

#[derive(Clone)]
pub struct LogStore {
    engine: LogEngine,
    writer: Arc<LogWriter>,
    /// Most bytes of entries one replication read returns (`raft.max_payload_bytes`).
    payload_bytes_max: u64,
    /// Replication reads that `payload_bytes_max` cut short (`/metrics`).
    payloads_cut: Arc<AtomicU64>,
    /// Encoded bytes of every entry appended since this process opened the log.
    appended_bytes: Arc<AtomicU64>,
    /// Last committed index saved by openraft (for status and `served`).
    committed: Arc<AtomicU64>,
    recent: Arc<Mutex<RecentEntries>>,
}

/// Decoded copies of the most recently appended entries.
///
/// Why: every entry is read back soon after its append, on the leader once per follower
/// (replication) and once to apply, on a follower once to apply. Decoding an entry of
/// many commands allocates every string of every command again; a profile at 256 writers
/// put those decodes at ~7% of a follower's CPU. A range held here whole is not read from
/// RocksDB at all: the iterator each disk read opens was ~5% of the leader's CPU at 16
/// writers (git `c3bc1ae`). A clone here is a reference count (`Request::commands` is
/// shared).
///
/// Bounded by [`RECENT_ENTRIES_MAX`] entries and [`RECENT_BYTES_MAX`] encoded bytes; the
/// lowest indexes leave first. Truncation and purge drop what they remove from the log.
#[derive(Default)]
struct RecentEntries {
    /// index → (entry, its encoded size).
    entries: BTreeMap<u64, (Entry, usize)>,
    bytes: usize,
}

/// Enough for the entries in flight between append, replication and apply.
const RECENT_ENTRIES_MAX: usize = 512;
const RECENT_BYTES_MAX: usize = 8 << 20;

impl RecentEntries {
    fn insert(&mut self, entry: Entry, size: usize) {
        let index = entry.get_log_id().index;
        if let Some((_, old)) = self.entries.insert(index, (entry, size)) {
            self.bytes -= old;
        }
        self.bytes += size;
        while self.entries.len() > RECENT_ENTRIES_MAX || self.bytes > RECENT_BYTES_MAX {
            let (_, (_, size)) = self
                .entries
                .pop_first()
                .expect("over a bound means non-empty");
            self.bytes -= size;
        }
    }

    /// Drops the entries at `from` and above.
    fn truncate(&mut self, from: u64) {
        let removed = self.entries.split_off(&from);
        self.bytes -= removed.values().map(|(_, size)| size).sum::<usize>();
    }

    /// Drops the entries at `through` and below.
    fn purge(&mut self, through: u64) {
        let kept = self.entries.split_off(&through.saturating_add(1));
        let removed = std::mem::replace(&mut self.entries, kept);
        self.bytes -= removed.values().map(|(_, size)| size).sum::<usize>();
    }

    /// The entries `start..end` cut to the longest run from `start` of at most `max_bytes`
    /// (never less than one entry), if every one of that run is here.
    fn range(&self, start: u64, end: u64, max_bytes: u64) -> Option<Vec<Entry>> {
        if start > end {
            return None;
        }
        let mut held = Vec::new();
        let mut taken = 0;
        for (&index, (entry, size)) in self.entries.range(start..end) {
            if index != start + held.len() as u64 {
                return None;
            }
            if !held.is_empty() && taken + size > max_bytes as usize {
                return Some(held);
            }
            taken += size;
            held.push(entry.clone());
        }
        // A full budget ends the run even where the cache's run ends too.
        let whole =
            start + held.len() as u64 == end || (!held.is_empty() && taken >= max_bytes as usize);
        whole.then_some(held)
    }

    /// The decoded entry stored as `bytes`, if it is here under the same log id.
    fn get(&self, index: u64, bytes: &[u8]) -> Option<Entry> {
        let (entry, _) = self.entries.get(&index)?;
        // An encoded entry starts with its log id (bincode, fields in order), and a log
        // id names one entry (Raft's log matching), so equal ids mean equal entries.
        let id = entry_codec::log_id(bytes).ok()?;
        (entry.log_id == id).then(|| entry.clone())
    }
}

impl LogStore {
    /// Opens the log over `engine` and starts its writer thread. A replication read
    /// returns at most `payload_bytes_max` bytes of entries (at least one entry).
    pub fn new(engine: LogEngine, payload_bytes_max: u64) -> Result<Self, StorageError> {
        assert!(payload_bytes_max > 0, "a payload must hold an entry");
        let writer = LogWriter::start(engine.clone()).map_err(write_err)?;
        let store = LogStore {
            writer: Arc::new(writer),
            engine,
            payload_bytes_max,
            payloads_cut: Arc::default(),
            appended_bytes: Arc::default(),
            committed: Arc::new(AtomicU64::new(0)),
            recent: Arc::default(),
        };
        let committed = store
            .read_meta::<Option<LogId>>(meta::COMMITTED, StorageIOError::read_logs)?
            .flatten();
        store
            .committed
            .store(committed.map(|id| id.index).unwrap_or(0), Ordering::Relaxed);
        Ok(store)
    }

    fn recent(&self) -> MutexGuard<'_, RecentEntries> {
        // Only a cache: after a panic elsewhere its content is still consistent.
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn committed_index(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    /// Highest index purged from this node's log (0 if none): what `probe` reports as
    /// `log_purged_through`.
    pub fn purged_through(&self) -> Result<u64, StorageError> {
        Ok(self.last_purged()?.map(|id| id.index).unwrap_or(0))
    }

    /// How many replication reads `raft.max_payload_bytes` has cut short.
    pub fn payloads_cut(&self) -> u64 {
        self.payloads_cut.load(Ordering::Relaxed)
    }

    /// Encoded bytes of every entry appended since this process opened the log
    /// (`consensus::snapshot_trigger`).
    pub fn appended_bytes(&self) -> u64 {
        self.appended_bytes.load(Ordering::Relaxed)
    }

    /// The log's segment files: how many, and their live bytes.
    pub fn footprint(&self) -> (u64, u64) {
        self.engine.footprint()
    }

    fn last_purged(&self) -> Result<Option<LogId>, StorageError> {
        self.read_meta(meta::LAST_PURGED, StorageIOError::read_logs)
    }

    fn read_meta<T: serde::de::DeserializeOwned>(
        &self,
        name: &[u8],
        err: fn(openraft::AnyError) -> StorageIOError,
    ) -> Result<Option<T>, StorageError> {
        let bytes = self
            .engine
            .get_meta(name)
            .map_err(|e| err(openraft::AnyError::new(&e)))?;
        bytes
            .map(|b| codec::decode(&b).map_err(|e| err(openraft::AnyError::new(&e)).into()))
            .transpose()
    }

    fn write_meta<T: serde::Serialize>(
        &self,
        name: &[u8],
        value: &T,
        err: fn(openraft::AnyError) -> StorageIOError,
    ) -> Result<(), StorageError> {
        let bytes = codec::encode(value);
        self.engine
            .put_meta(name, &bytes)
            .map_err(|e| err(openraft::AnyError::new(&e)).into())
    }
}

fn read_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_logs(openraft::AnyError::new(&e)).into()
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_logs(openraft::AnyError::new(&e)).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        };
        self.entries_within(start, end, u64::MAX)
    }

    /// What replication sends in one AppendEntries: at most `payload_bytes_max` bytes.
    ///
    /// Why: openraft 0.9 bounds a payload only by `max_payload_entries` and gives the RPC
    /// `heartbeat_interval` (100 ms) to finish. With 64 KiB values an entry holds ~2 MiB,
    /// so a follower a few hundred entries behind was sent hundreds of MiB at once: every
    /// try timed out and was sent again whole, and commits stalled for seconds (p99 of
    /// 64 KiB writes at 64 clients 1,969 ms in the full run of git `cfbe449`).
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        let entries = self.entries_within(start, end, self.payload_bytes_max)?;
        if (entries.len() as u64) < end.saturating_sub(start) {
            self.payloads_cut.fetch_add(1, Ordering::Relaxed);
        }
        Ok(entries)
    }
}

impl LogStore {
    /// The longest run of entries from `start` (below `end`) of at most `max_bytes`
    /// encoded bytes, and at least the entry at `start`.
    fn entries_within(
        &self,
        start: u64,
        end: u64,
        max_bytes: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        if let Some(entries) = self.recent().range(start, end, max_bytes) {
            return Ok(entries);
        }
        let raw = self
            .writer
            .range_within(start, end, max_bytes)
            .map_err(read_err)?;
        let mut entries = Vec::with_capacity(raw.len());
        for (index, bytes) in raw {
            let recent = self.recent().get(index, &bytes);
            let entry: Entry = match recent {
                Some(entry) => entry,
                None => entry_codec::decode(&bytes).map_err(read_err)?,
            };
            // Read-side assertion: the entry is stored under its own index.
            if entry.get_log_id().index != index {
                return Err(StorageIOError::read_log_at_index(
                    index,
                    openraft::AnyError::error(format!(
                        "entry under index {index} claims {}",
                        entry.log_id
                    )),
                )
                .into());
            }
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id = self.last_purged()?;
        let last_log_id = match self.writer.last().map_err(read_err)? {
            Some((_, bytes)) => Some(entry_codec::log_id(&bytes).map_err(read_err)?),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let this = self.clone();
        let vote = *vote;
        blocking(move || this.write_meta(meta::VOTE, &vote, StorageIOError::write_vote)).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.read_meta(meta::VOTE, StorageIOError::read_vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.committed
            .fetch_max(committed.map(|id| id.index).unwrap_or(0), Ordering::Relaxed);
        // Not fsynced: it is called on every commit, on the critical path of every write,
        // and losing it only means re-applying a few more entries at restart (openraft
        // re-derives the committed index from the leader). Written to RocksDB's WAL file,
        // it survives the process dying; `read_committed` never lets it run ahead of the
        // log it is read beside.
        let bytes = codec::encode(&committed);
        self.engine
            .put_meta_unsynced(meta::COMMITTED, &bytes)
            .map_err(|e| StorageIOError::write_logs(openraft::AnyError::new(&e)).into())
    }

    /// The saved hint, but never beyond the log's last entry: the hint and the log are
    /// separate files, and a machine crash can keep the hint while losing appends that
    /// were never acknowledged. Every entry up to that last one is then committed: the
    /// hint was learned while this log matched the leader's up to it (Raft's log
    /// matching), and what survived is a prefix of that.
    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let hint = self
            .read_meta::<Option<LogId>>(meta::COMMITTED, StorageIOError::read_logs)?
            .flatten();
        let last = self.get_log_state().await?.last_log_id;
        Ok(match (hint, last) {
            (Some(hint), Some(last)) if hint.index > last.index => Some(last),
            (Some(_), None) => None,
            (hint, _) => hint,
        })
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        // Encoded before taking the lock: readers wait on it.
        let entries: Vec<(Entry, Vec<u8>)> = entries
            .into_iter()
            .map(|e| {
                let bytes = entry_codec::encode(&e);
                (e, bytes)
            })
            .collect();
        let bytes: usize = entries.iter().map(|(_, bytes)| bytes.len()).sum();
        self.appended_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        let encoded: Vec<(u64, Vec<u8>)> = {
            let mut recent = self.recent();
            entries
                .into_iter()
                .map(|(e, bytes)| {
                    let index = e.get_log_id().index;
                    recent.insert(e, bytes.len());
                    (index, bytes)
                })
                .collect()
        };
        if planted::active(Bug::AckBeforeFsync) {
            self.writer.append_volatile(encoded);
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        // The callback is the durability acknowledgement: the writer fires it after the
        // fsync of the group that holds these entries.
        let done = Box::new(move |result: Result<(), Arc<StoreError>>| {
            callback.log_io_completed(result.map_err(|e| std::io::Error::other(e.to_string())));
        });
        self.writer.append(encoded, done).map_err(write_err)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::info!(from = log_id.index, "truncating conflicting log suffix");
        self.recent().truncate(log_id.index);
        let (done, durable) = durable_signal();
        self.writer
            .truncate(log_id.index, done)
            .map_err(write_err)?;
        durable.await
    }

    /// - An entry leaves the log only once its effects are durable in the state machine,
    ///   whose applies bypass RocksDB's WAL (the log is their WAL): the state is flushed
    ///   first. openraft purges only behind a snapshot, whose build flushed already, so
    ///   this flush is small.
    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(through = log_id.index, "purging log");
        let engine = self.engine.clone();
        blocking(move || engine.flush_state().map_err(write_err)).await?;
        self.recent().purge(log_id.index);
        let (done, durable) = durable_signal();
        self.writer
            .purge(log_id.index, codec::encode(&log_id), done)
            .map_err(write_err)?;
        durable.await
    }
}

/// A writer callback and the future that resolves when it is called.
fn durable_signal() -> (
    crate::store::log_writer::Done,
    impl std::future::Future<Output = Result<(), StorageError>>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let done = Box::new(move |result: Result<(), Arc<StoreError>>| {
        let _ = tx.send(result);
    });
    let durable = async move {
        match rx.await {
            Ok(result) => result.map_err(|e| write_err(std::io::Error::other(e.to_string()))),
            Err(_) => Err(write_err(StoreError::Invariant(
                "the log writer dropped a job".into(),
            ))),
        }
    };
    (done, durable)
}

/// Runs a synced RocksDB write off the async workers: an fsync takes milliseconds.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        StorageError::from(StorageIOError::write_logs(openraft::AnyError::error(
            format!("storage task: {e}"),
        )))
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn insert(recent: &mut RecentEntries, e: Entry) -> Vec<u8> {
        let bytes = entry_codec::encode(&e);
        recent.insert(e, bytes.len());
        bytes
    }

    #[test]
    fn a_copy_is_used_only_for_the_same_log_id() {
        let mut recent = RecentEntries::default();
        let bytes = insert(&mut recent, entry(2, 7));
        assert_eq!(
            recent.get(7, &bytes).map(|e| e.log_id),
            Some(entry(2, 7).log_id)
        );
        // Same index written by another leader (the copy is stale): decode instead.
        let other = entry_codec::encode(&entry(3, 7));
        assert!(recent.get(7, &other).is_none());
        assert!(recent.get(8, &bytes).is_none(), "nothing cached at 8");
        assert!(
            recent.get(7, b"").is_none(),
            "undecodable bytes never match"
        );
    }

    #[test]
    fn a_range_is_served_only_when_every_entry_of_it_is_held() {
        let mut recent = RecentEntries::default();
        for i in 5..=9 {
            insert(&mut recent, entry(1, i));
        }
        let indexes =
            |r: Option<Vec<Entry>>| r.map(|v| v.iter().map(|e| e.log_id.index).collect::<Vec<_>>());
        assert_eq!(indexes(recent.range(6, 9, u64::MAX)), Some(vec![6, 7, 8]));
        assert_eq!(
            indexes(recent.range(5, 10, u64::MAX)),
            Some(vec![5, 6, 7, 8, 9])
        );
        assert_eq!(indexes(recent.range(7, 7, u64::MAX)), Some(vec![]));
        assert!(recent.range(4, 8, u64::MAX).is_none(), "4 is only on disk");
        assert!(recent.range(8, 11, u64::MAX).is_none(), "nothing at 10 yet");
        assert!(
            recent.range(5, u64::MAX, u64::MAX).is_none(),
            "an open end goes to the log"
        );
        assert!(recent.range(9, 5, u64::MAX).is_none());
        recent.truncate(7);
        assert!(recent.range(6, 8, u64::MAX).is_none(), "7 was truncated");
    }

    #[test]
    fn a_byte_budget_cuts_a_range_after_whole_entries_and_never_below_one() {
        let mut recent = RecentEntries::default();
        for i in 1..=4 {
            recent.insert(entry(1, i), 100);
        }
        let indexes =
            |r: Option<Vec<Entry>>| r.map(|v| v.iter().map(|e| e.log_id.index).collect::<Vec<_>>());
        assert_eq!(indexes(recent.range(1, 5, 250)), Some(vec![1, 2]));
        assert_eq!(indexes(recent.range(1, 5, 300)), Some(vec![1, 2, 3]));
        assert_eq!(
            indexes(recent.range(2, 5, 10)),
            Some(vec![2]),
            "one entry at least"
        );
        assert_eq!(
            indexes(recent.range(3, 9, 200)),
            Some(vec![3, 4]),
            "the budget ends the run before the entries the cache lacks"
        );
        assert!(recent.range(3, 9, 250).is_none(), "5 is only on disk");
    }

    #[test]
    fn truncate_and_purge_drop_what_they_remove_from_the_log() {
        let mut recent = RecentEntries::default();
        let bytes: Vec<Vec<u8>> = (1..=10).map(|i| insert(&mut recent, entry(1, i))).collect();
        recent.truncate(8);
        recent.purge(3);
        let kept: Vec<u64> = recent.entries.keys().copied().collect();
        assert_eq!(kept, vec![4, 5, 6, 7]);
        let kept_bytes: usize = bytes[3..7].iter().map(Vec::len).sum();
        assert_eq!(recent.bytes, kept_bytes);
        recent.purge(100);
        assert_eq!((recent.entries.len(), recent.bytes), (0, 0));
    }

    #[test]
    fn stays_bounded_dropping_the_lowest_indexes() {
        let mut recent = RecentEntries::default();
        let extra = 10;
        for i in 1..=(RECENT_ENTRIES_MAX as u64 + extra) {
            insert(&mut recent, entry(1, i));
        }
        assert_eq!(recent.entries.len(), RECENT_ENTRIES_MAX);
        assert_eq!(recent.entries.keys().next(), Some(&(extra + 1)));
        // One entry over the byte budget alone evicts everything, itself included.
        let mut big = RecentEntries::default();
        insert(&mut big, entry(1, 1));
        big.insert(entry(1, 2), RECENT_BYTES_MAX + 1);
        assert_eq!((big.entries.len(), big.bytes), (0, 0));
    }

    #[tokio::test]
    async fn purge_makes_every_earlier_apply_durable_before_the_log_loses_entries() {
        use crate::store::{Engine, EngineOptions, StateEngine};
        use openraft::storage::RaftLogStorage;

        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(&dir.path().join("db"), &EngineOptions::default()).unwrap();
        let mut log = LogStore::new(LogEngine::open(engine.clone()).unwrap(), u64::MAX).unwrap();
        let state = StateEngine::new(engine.clone());
        let mut txn = state.txn();
        txn.put_meta(b"probe", b"applied");
        txn.commit().unwrap();
        assert!(
            engine.unflushed_state_records().unwrap() > 0,
            "the apply sits in a memtable"
        );

        log.purge(entry(1, 2).log_id).await.unwrap();

        assert_eq!(
            engine.unflushed_state_records().unwrap(),
            0,
            "purged before the apply was flushed"
        );
        assert_eq!(log.purged_through().unwrap(), 2);
    }
}
