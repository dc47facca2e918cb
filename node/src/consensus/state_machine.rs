//! `RaftStateMachine` for openraft over the store's [`StateEngine`].
//!
//! To ensure correctness:
//! - All entries of one `apply` call are committed in ONE write batch together with
//!   `last_applied`, the membership and the apply clock: data and applied index never
//!   disagree after a crash.
//! - Applying depends only on the entries and the state: time is the leader's stamp (made
//!   monotonic by the apply clock), retention is stamped in the entry, identities come from
//!   log indexes.
//! - A snapshot's header is read from the same RocksDB snapshot as its data.
//! - Access (SPEC §8): an entry's access change applies first; every command is then
//!   checked against the grants at its own log position ([`StatePermit`]), so a grant
//!   revoked while a command was in flight refuses it identically on every replica. The
//!   shared [`AccessCell`] is replaced only after the batch that changed it committed, and
//!   reloaded at open and after a snapshot install.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_access::{AccessState, StatePermit};
use cairn_memory::{execute, Command, Ctx, Op, SlotSource};
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder};
use tokio::sync::watch;

use super::access::AccessCell;
use super::types::{
    LogId, Response, Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
    TypeConfig,
};
use crate::planted::{self, Bug};
use crate::store::snapshot::{self, SnapshotHeader};
use crate::store::state::meta;
use crate::store::{codec, SnapshotDir, StateEngine, StateTxn, StoreError};

/// Change-feed events older than this many revisions are dropped (bounds the feed).
pub const FEED_WINDOW_REVISIONS: u64 = 1_000_000;
/// The feed is trimmed once every this many entries (one range deletion, not one per entry).
const FEED_TRIM_EVERY: u64 = 4096;

/// The revision from which a state machine that applied `applied_index` still holds every
/// change-feed event: the floor of its last trim (0 before any). Events below it may be
/// gone; none at or above it is. The same on every replica, since trims happen at fixed
/// indices, and snapshots carry the feed.
pub fn feed_retained_from(applied_index: u64) -> u64 {
    let last_trim = applied_index - applied_index % FEED_TRIM_EVERY;
    last_trim.saturating_sub(FEED_WINDOW_REVISIONS)
}
/// Dedup records expired per entry at most (bounds apply time).
const DEDUP_EXPIRE_PER_ENTRY_MAX: usize = 256;

pub struct StateMachine {
    state: StateEngine,
    snapshots: SnapshotDir,
    /// The `.partial` file a snapshot is being received into.
    receiving: Option<PathBuf>,
    /// Applied index, published after each commit (wakes watchers and `min_revision` waits).
    applied_tx: Arc<watch::Sender<u64>>,
    /// Applied principals and grants, published after each commit that changed them.
    access: AccessCell,
}

fn sm_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_state_machine(openraft::AnyError::new(&e)).into()
}

fn snap_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_snapshot(None, openraft::AnyError::new(&e)).into()
}

impl StateMachine {
    /// Opens the state machine, finishing any snapshot install a crash interrupted.
    pub fn open(state: StateEngine, snapshots: SnapshotDir) -> Result<StateMachine, StoreError> {
        snapshot::resume(&state)?;
        let sm = StateMachine {
            state,
            snapshots,
            receiving: None,
            applied_tx: Arc::new(watch::channel(0).0),
            access: AccessCell::default(),
        };
        sm.reload_access()?;
        let applied = sm
            .read_applied()
            .map_err(|e| StoreError::Invariant(e.to_string()))?;
        sm.applied_tx
            .send_replace(applied.0.map(|id| id.index).unwrap_or(0));
        Ok(sm)
    }

    pub fn applied_watch(&self) -> Arc<watch::Sender<u64>> {
        self.applied_tx.clone()
    }

    pub fn access(&self) -> AccessCell {
        self.access.clone()
    }

    /// Publishes the stored access record (at open, and after a snapshot replaced it).
    fn reload_access(&self) -> Result<(), StoreError> {
        let record = self.state.access()?;
        self.access.store(Arc::new(AccessState::new(record)));
        Ok(())
    }

    fn read_applied(&self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let last = self.state.meta(meta::LAST_APPLIED).map_err(sm_err)?;
        let membership = self.state.meta(meta::MEMBERSHIP).map_err(sm_err)?;
        let last: Option<LogId> = match last {
            Some(b) => codec::decode(&b).map_err(sm_err)?,
            None => None,
        };
        let membership = match membership {
            Some(b) => codec::decode(&b).map_err(sm_err)?,
            None => StoredMembership::default(),
        };
        Ok((last, membership))
    }

    fn apply_all(
        &mut self,
        entries: Vec<openraft::Entry<TypeConfig>>,
    ) -> Result<Vec<Response>, StoreError> {
        // Nothing to record: committing would overwrite `last_applied` with `None`.
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let mut clock_ms = self.state.clock_ms()?;
        let mut access = self.access.load();
        let mut access_changed = false;
        let mut txn = self.state.txn();
        let mut responses = Vec::with_capacity(entries.len());
        let mut last = None;
        for entry in entries {
            let index = entry.log_id.index;
            last = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => responses.push(Response::default()),
                EntryPayload::Membership(m) => {
                    let stored = StoredMembership::new(Some(entry.log_id), m);
                    txn.put_meta(meta::MEMBERSHIP, &codec::encode(&stored));
                    responses.push(Response::default());
                }
                EntryPayload::Normal(request) => {
                    // Leader clocks may step back across elections; the apply clock never does.
                    clock_ms = clock_ms.max(request.now_ms);
                    let ctx = Ctx {
                        revision: index,
                        now_ms: clock_ms,
                    };
                    let access_outcome = request.access.as_ref().map(|change| {
                        let mut next = (*access).clone();
                        let outcome = cairn_access::change::apply(&mut next, change, clock_ms);
                        if outcome.is_ok() {
                            txn.put_access(next.record());
                            access = Arc::new(next);
                            access_changed = true;
                        }
                        outcome
                    });
                    txn.begin_revision();
                    let permit = StatePermit(&access);
                    let mut out = Vec::with_capacity(request.commands.len());
                    for command in request.commands.iter() {
                        let planted_command = planted_write_through_tombstone(command);
                        let command = planted_command.as_ref().unwrap_or(command);
                        let source = PlantedDedup(&txn);
                        let (response, effects) = execute::execute(
                            command,
                            &source,
                            &permit,
                            &ctx,
                            request.dedup_retention_ms,
                        )?;
                        txn.apply_effects(effects)?;
                        out.push(response);
                    }
                    txn.expire_dedup(
                        clock_ms.saturating_sub(request.dedup_retention_ms),
                        DEDUP_EXPIRE_PER_ENTRY_MAX,
                    )?;
                    responses.push(Response {
                        responses: out,
                        access: access_outcome,
                    });
                }
            }
            if index % FEED_TRIM_EVERY == 0 {
                txn.trim_feed(feed_retained_from(index));
            }
        }
        txn.put_meta(meta::LAST_APPLIED, &codec::encode(&last));
        txn.put_clock_ms(clock_ms);
        txn.commit()?;
        if access_changed {
            self.access.store(access);
        }
        if let Some(id) = last {
            self.applied_tx.send_replace(id.index);
        }
        Ok(responses)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        self.read_applied()
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        self.apply_all(entries).map_err(sm_err)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            state: self.state.clone(),
            snapshots: self.snapshots.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        let path = self.snapshots.partial_path().map_err(snap_err)?;
        let file = tokio::fs::File::create(&path).await.map_err(snap_err)?;
        self.receiving = Some(path);
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError> {
        let partial = self.receiving.take().ok_or_else(|| {
            snap_err(StoreError::Invariant(
                "install without a received snapshot".into(),
            ))
        })?;
        land_in_partial(*snapshot, &partial)
            .await
            .map_err(snap_err)?;
        let (state, snapshots, expected) =
            (self.state.clone(), self.snapshots.clone(), meta.clone());
        let installed = tokio::task::spawn_blocking(move || -> Result<u64, StoreError> {
            let _exclusive = snapshots.exclusive();
            let header = snapshot::verify_file(&partial)?;
            let meta_in_file = meta_from_header(&header)?;
            if meta_in_file.last_log_id != expected.last_log_id
                || header.snapshot_id != expected.snapshot_id
            {
                return Err(StoreError::Invariant(format!(
                    "received snapshot {} does not match announced {}",
                    header.snapshot_id, expected.snapshot_id
                )));
            }
            let path = snapshots.promote(&partial)?;
            snapshot::install_file(&state, &path)?;
            Ok(expected.last_log_id.map(|id| id.index).unwrap_or(0))
        })
        .await
        .map_err(|e| snap_err(std::io::Error::other(e.to_string())))?
        .map_err(snap_err)?;
        self.reload_access().map_err(snap_err)?;
        tracing::info!(index = installed, id = %meta.snapshot_id, "installed snapshot");
        self.applied_tx.send_replace(installed);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let Some(path) = self.snapshots.current().map_err(snap_err)? else {
            return Ok(None);
        };
        let header = snapshot::read_header(&path).map_err(snap_err)?;
        let meta = meta_from_header(&header).map_err(snap_err)?;
        let file = tokio::fs::File::open(&path).await.map_err(snap_err)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(file),
        }))
    }
}

/// Makes sure the snapshot's bytes are in `partial`, fsynced.
///
/// openraft hands back the box `begin_receiving_snapshot` returned, but its contract only
/// promises a snapshot handle: the box's file may have been replaced by another one (the
/// conformance suite installs the leader's own file this way). A handle that is not our
/// partial file is copied into it from its start, so verifying and installing by path
/// always see the bytes openraft gave us.
async fn land_in_partial(mut snapshot: tokio::fs::File, partial: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    use tokio::io::AsyncSeekExt;
    // Completes buffered writes before the metadata and the bytes are looked at.
    snapshot.sync_all().await?;
    let theirs = snapshot.metadata().await?;
    let ours = tokio::fs::metadata(partial).await?;
    if (theirs.dev(), theirs.ino()) == (ours.dev(), ours.ino()) {
        return Ok(());
    }
    snapshot.seek(std::io::SeekFrom::Start(0)).await?;
    let mut out = tokio::fs::File::create(partial).await?;
    tokio::io::copy(&mut snapshot, &mut out).await?;
    out.sync_all().await
}

/// Planted bug `forget-no-tombstone-check`: every write clears tombstones silently.
fn planted_write_through_tombstone(command: &Command) -> Option<Command> {
    if !planted::active(Bug::WriteThroughTombstone) {
        return None;
    }
    let mut command = command.clone();
    for m in &mut command.mutations {
        if let Op::Write {
            clear_tombstone, ..
        } = &mut m.op
        {
            *clear_tombstone = true;
        }
    }
    Some(command)
}

/// The state machine's view for `execute`. With the planted bug `dedup-applies-twice` it
/// forgets every `request_id`; otherwise it is the transaction itself.
struct PlantedDedup<'t, 'a>(&'t StateTxn<'a>);

impl SlotSource for PlantedDedup<'_, '_> {
    type Error = StoreError;

    fn slot(&self, key: &str) -> Result<Option<cairn_memory::Slot>, StoreError> {
        self.0.slot(key)
    }

    fn dedup(&self, request_id: &str) -> Result<Option<cairn_memory::DedupRecord>, StoreError> {
        if planted::active(Bug::DedupAppliesTwice) {
            return Ok(None);
        }
        self.0.dedup(request_id)
    }
}

fn meta_from_header(header: &SnapshotHeader) -> Result<SnapshotMeta, StoreError> {
    let decode_err = |source| StoreError::Codec {
        cf: "snapshot header",
        source,
    };
    let last_log_id: Option<LogId> = match &header.last_applied {
        Some(b) => codec::decode(b).map_err(decode_err)?,
        None => None,
    };
    let last_membership: StoredMembership = match &header.membership {
        Some(b) => codec::decode(b).map_err(decode_err)?,
        None => StoredMembership::default(),
    };
    Ok(SnapshotMeta {
        last_log_id,
        last_membership,
        snapshot_id: header.snapshot_id.clone(),
    })
}

/// Builds snapshot files off the async workers.
pub struct SnapshotBuilder {
    state: StateEngine,
    snapshots: SnapshotDir,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let (state, snapshots) = (self.state.clone(), self.snapshots.clone());
        let (path, header) = tokio::task::spawn_blocking(move || -> Result<_, StoreError> {
            let _exclusive = snapshots.exclusive();
            let partial = snapshots.partial_path()?;
            let header = snapshot::write_file(&state, &partial, snapshot_id)?;
            Ok((snapshots.promote(&partial)?, header))
        })
        .await
        .map_err(|e| snap_err(std::io::Error::other(e.to_string())))?
        .map_err(snap_err)?;
        let meta = meta_from_header(&header).map_err(snap_err)?;
        tracing::info!(id = %meta.snapshot_id, path = %path.display(), "built snapshot");
        let file = tokio::fs::File::open(&path).await.map_err(snap_err)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(file),
        })
    }
}

/// `term-index-nonce`: unique even when two snapshots cover the same log id.
fn snapshot_id(last_applied: Option<&[u8]>) -> String {
    let id: Option<LogId> = last_applied
        .and_then(|b| codec::decode::<Option<LogId>>(b).ok())
        .flatten();
    let (term, index) = id.map(|id| (id.leader_id.term, id.index)).unwrap_or((0, 0));
    format!("{term}-{index}-{:08x}", rand::random::<u32>())
}
