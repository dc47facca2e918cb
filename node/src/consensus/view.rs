//! [`StateView`]: the API layer's one handle on this node's storage.
//!
//! The arrows are `api → consensus → store`: the API never holds a store handle. What it
//! reads of the store (the applied state, the change feed, the log's positions, the
//! store's statistics) goes through the methods below, each a thin delegation.
//!
//! **Consistency.** Every state read here (slot, history, tombstone, list, anchor scans,
//! feed) reads the state this node has *applied*, as of the call, with no barrier of its
//! own: whether serving the locally applied state is allowed for a request (linearizable,
//! bounded, any, `min_revision`) is decided before the call by the read gate
//! ([`super::reads::ReadGate`]). The reads go to RocksDB, never to the apply path's slot
//! cache, and an apply is one atomic write batch, so a read never sees half an entry and
//! a later call never sees older state than an earlier one; two calls are not one
//! snapshot (an apply may land between them).

use std::sync::Arc;

use cairn_memory::{HistoryEvent, Slot, Tombstone, WatchEvent};

use cairn_access::AccessState;

use super::access::AccessCell;
use super::log_store::LogStore;
use super::types::StorageError;
use crate::store::{Engine, StateEngine, StoreError};

pub use crate::store::blob_gc::BlobSpace;
pub use crate::store::slot_cache::SlotCacheStats;
pub use crate::store::state::FeedPosition;
pub use crate::store::EngineMemory;

/// Why a [`StateView`] call failed. Displays exactly as the underlying error does.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// Reading or compacting the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading the Raft log's metadata failed (boxed: openraft's error is large, and
    /// every read's `Result` would carry its size).
    #[error(transparent)]
    Log(Box<StorageError>),
    /// The blocking compaction task panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

impl From<StorageError> for ViewError {
    fn from(e: StorageError) -> Self {
        ViewError::Log(Box::new(e))
    }
}

type Result<T> = std::result::Result<T, ViewError>;

/// The queries the API layer runs against this node's storage: the applied state's reads,
/// the change feed, the log's committed and purged positions, the store's statistics, and
/// one maintenance call, [`StateView::compact_files`].
///
/// Compaction (`POST /cluster/compact`) is snapshot, purge, then a RocksDB compaction. The
/// snapshot and the purge are Raft operations: the handler triggers them through openraft
/// (`Raft::trigger`) and waits on its metrics, as for any other Raft call, so that the
/// snapshot and the log stay in openraft's hands. Only the last step needs the engine; it
/// rewrites files without changing what any read returns, so it lives here as one method
/// rather than giving the API layer an engine handle for it.
pub struct StateView {
    state: StateEngine,
    log: LogStore,
    engine: Arc<Engine>,
    access: AccessCell,
}

impl StateView {
    /// `state` and `log` must be the handles the state machine and Raft use, over
    /// `engine`, and `access` the state machine's own cell.
    pub fn new(state: StateEngine, log: LogStore, engine: Arc<Engine>, access: AccessCell) -> Self {
        StateView {
            state,
            log,
            engine,
            access,
        }
    }

    /// The applied principals and grants (SPEC §8), as of the call. Like every read here,
    /// the node's applied state: a linearizable request reads it after its barrier.
    pub fn access(&self) -> Arc<AccessState> {
        self.access.load()
    }

    /// The slot of `key` in the applied state (`None`: never written). For read, probe
    /// and recall. Local applied state; the read gate decides if that may be served.
    #[inline]
    pub fn slot(&self, key: &str) -> Result<Option<Slot>> {
        Ok(self.state.slot(key)?)
    }

    /// The key's history in the applied state, oldest first, at most `limit` events.
    /// Local applied state; the read gate decides if that may be served.
    #[inline]
    pub fn history(&self, key: &str, limit: usize) -> Result<Vec<HistoryEvent>> {
        Ok(self.state.history(key, limit)?)
    }

    /// The tombstone with this (lowercase hex) id in the applied state. Local applied
    /// state; the read gate decides if that may be served.
    #[inline]
    pub fn tombstone(&self, id: &str) -> Result<Option<Tombstone>> {
        Ok(self.state.tombstone(id)?)
    }

    /// At most `limit` slots whose key starts with `prefix` and sorts after `after`, in key
    /// order, read in one pass (for list). Local applied state; the read gate decides if
    /// that may be served.
    #[inline]
    pub fn slots_after(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Slot>> {
        Ok(self.state.slots_after(prefix, after, limit)?)
    }

    /// At most `limit` keys carrying exactly `anchor` (for recall). Local applied state,
    /// not one snapshot with the slots read after it; the read gate decides if that may
    /// be served.
    #[inline]
    pub fn keys_for_anchor(&self, anchor: &str, limit: usize) -> Result<Vec<String>> {
        Ok(self.state.keys_for_anchor(anchor, limit)?)
    }

    /// At most `limit` `(anchor, key)` pairs for anchors starting with `anchor_prefix` (for
    /// recall). Local applied state, as [`StateView::keys_for_anchor`].
    #[inline]
    pub fn keys_under_anchor_prefix(
        &self,
        anchor_prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, String)>> {
        Ok(self.state.keys_under_anchor_prefix(anchor_prefix, limit)?)
    }

    /// At most `limit` change-feed events at or after `from`, in order, with their
    /// positions (for watch). The locally applied feed, like a `consistency=any` read: no
    /// gate runs for watch.
    #[inline]
    pub fn feed_page(
        &self,
        from: FeedPosition,
        limit: usize,
    ) -> Result<Vec<(FeedPosition, WatchEvent)>> {
        Ok(self.state.feed_page(from, limit)?)
    }

    /// The highest committed index this node has saved (a hint, not fsynced; it may lag
    /// the leader's). Reported in `served`, status and metrics. An atomic load.
    #[inline]
    pub fn committed_index(&self) -> u64 {
        self.log.committed_index()
    }

    /// The highest index purged from this node's log (0 if none), as recorded in the log's
    /// metadata on disk: probe's and compact's `log_purged_through`.
    #[inline]
    pub fn log_purged_through(&self) -> Result<u64> {
        Ok(self.log.purged_through()?)
    }

    /// The log's segment files: how many, and their live bytes.
    #[inline]
    pub fn log_footprint(&self) -> (u64, u64) {
        self.log.footprint()
    }

    /// Append-entries payloads cut short by `raft.max_payload_bytes` (this node as leader).
    #[inline]
    pub fn log_payloads_cut(&self) -> u64 {
        self.log.payloads_cut()
    }

    /// State-machine records not yet flushed (a crash now re-applies them from the log).
    #[inline]
    pub fn unflushed_state_records(&self) -> Result<u64> {
        Ok(self.engine.unflushed_state_records()?)
    }

    /// RocksDB's memory by kind (memtables, table readers, block cache).
    #[inline]
    pub fn engine_memory(&self) -> Result<EngineMemory> {
        Ok(self.engine.memory()?)
    }

    /// The blob files' bytes and garbage, and whether compactions collect it now.
    pub fn blob_gc(&self) -> Result<(BlobSpace, bool)> {
        Ok((self.engine.blob_space()?, self.engine.blob_gc_collecting()))
    }

    /// The apply path's slot-cache counters.
    #[inline]
    pub fn slot_cache_stats(&self) -> SlotCacheStats {
        self.engine.slot_cache_stats()
    }

    /// Flushes and compacts every RocksDB family and drops obsolete WAL files, on a
    /// blocking thread: after a snapshot and a purge, the last step of `/cluster/compact`
    /// (see the type's doc). Changes no read's answer.
    pub async fn compact_files(&self) -> Result<()> {
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || engine.compact_all()).await??;
        Ok(())
    }
}
