//! The state machine adapter over RocksDB: crash consistency between applies, snapshot
//! round trips, refusal of corrupted snapshots, and redoing an interrupted install.
//!
//! "Crash" here means dropping every store object without any shutdown step and reopening
//! RocksDB on the same directory: what survives is exactly what was committed.

use std::path::Path;

use cairn_memory::{execute, Command, Conditions, Ctx, Mutation, Op, SlotSource, State};
use cairn_node::consensus::state_machine::StateMachine;
use cairn_node::consensus::{Entry, LogId, Request, SnapshotMeta};
use cairn_node::store::snapshot::INSTALLING;
use cairn_node::store::state::meta;
use cairn_node::store::{codec, Engine, EngineOptions, SnapshotDir, StateEngine};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, Membership, RaftSnapshotBuilder};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// The snapshot layout only: the rest of `support` is the process-cluster fixture.
#[path = "support/snapshot_file.rs"]
mod snapshot_file;

const RETENTION_MS: u64 = 60_000;
/// Leader time of entry 1; entry `i` is stamped `T0 + i` seconds.
const T0: u64 = 1_700_000_000_000;

/// One node's state machine over its own RocksDB and snapshot directory.
struct Opened {
    state: StateEngine,
    sm: StateMachine,
}

fn open(dir: &Path) -> Opened {
    let options = EngineOptions {
        block_cache_bytes: 1 << 20,
        write_buffer_bytes: 1 << 20,
        background_jobs: 1,
        slot_cache_bytes: 64 << 10,
        ..Default::default()
    };
    let engine = Engine::open(&dir.join("db"), &options).expect("open rocksdb");
    let snapshots = SnapshotDir::open(dir.join("snapshots")).expect("open snapshot dir");
    let state = StateEngine::new(engine);
    let sm = StateMachine::open(state.clone(), snapshots).expect("open state machine");
    Opened { state, sm }
}

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn now_of(index: u64) -> u64 {
    T0 + index * 1000
}

fn mutation(op: Op) -> Mutation {
    Mutation {
        op,
        cond: Conditions::default(),
    }
}

fn command(mutations: Vec<Mutation>) -> Command {
    let payload_hash = format!("{mutations:?}");
    Command {
        request_id: None,
        payload_hash,
        mutations,
        is_batch: false,
    }
}

fn write(key: &str, value: &str) -> Command {
    command(vec![mutation(Op::Write {
        key: key.into(),
        value: value.into(),
        value_hash: cairn_memory::hash::value_hash(value),
        actor: "agent".into(),
        source: None,
        anchors: vec!["tag:t".into()],
        tags: vec![],
        clear_tombstone: false,
        override_revocation: false,
        reason: None,
    })])
}

fn forget(key: &str) -> Command {
    command(vec![mutation(Op::Forget {
        key: key.into(),
        actor: "agent".into(),
        reason: "gdpr".into(),
    })])
}

fn revoke(key: &str) -> Command {
    command(vec![mutation(Op::Revoke {
        key: key.into(),
        actor: "agent".into(),
        reason: "wrong".into(),
    })])
}

fn normal(index: u64, commands: Vec<Command>) -> Entry {
    let request = Request {
        now_ms: now_of(index),
        dedup_retention_ms: RETENTION_MS,
        commands: commands.into(),
        access: None,
    };
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Normal(request),
    }
}

fn membership(index: u64) -> Entry {
    let m = Membership::new(vec![[1u64, 2, 3].into_iter().collect()], ());
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Membership(m),
    }
}

/// Nine entries in three applies: membership, writes over four keys, a forget, a revoke.
fn three_batches() -> Vec<Vec<Entry>> {
    vec![
        vec![
            membership(1),
            normal(2, vec![write("a", "1"), write("b", "2")]),
            normal(3, vec![write("c", "3")]),
        ],
        vec![
            normal(4, vec![write("a", "10")]),
            normal(5, vec![forget("b")]),
            normal(6, vec![revoke("c")]),
        ],
        vec![
            normal(7, vec![write("d", "\"x\"")]),
            normal(8, vec![write("a", "11")]),
            normal(9, vec![forget("a")]),
        ],
    ]
}

async fn applied_index(sm: &mut StateMachine) -> Option<u64> {
    sm.applied_state()
        .await
        .expect("applied state")
        .0
        .map(|id| id.index)
}

#[tokio::test]
async fn a_crash_between_applies_keeps_exactly_the_last_completed_apply() {
    // The replica that never crashes: its digest after each apply is the reference.
    let steady_dir = TempDir::new().unwrap();
    let mut steady = open(steady_dir.path());
    let mut digests = Vec::new();
    for batch in three_batches() {
        steady.sm.apply(batch).await.unwrap();
        digests.push(steady.state.digest().unwrap());
    }

    let dir = TempDir::new().unwrap();
    let mut batches = three_batches().into_iter();
    {
        let mut node = open(dir.path());
        for batch in batches.by_ref().take(2) {
            node.sm.apply(batch).await.unwrap();
        }
        assert_eq!(applied_index(&mut node.sm).await, Some(6));
    } // Crash: everything dropped, no shutdown step.

    let mut node = open(dir.path());
    let (last, stored_membership) = node.sm.applied_state().await.unwrap();
    assert_eq!(last, Some(log_id(6)));
    assert_eq!(stored_membership.log_id(), &Some(log_id(1)));
    assert_eq!(
        node.state.digest().unwrap(),
        digests[1],
        "data is the state after the second apply"
    );
    assert_eq!(node.state.clock_ms().unwrap(), now_of(6));
    assert_eq!(
        node.state.slot("a").unwrap().unwrap().value.as_deref(),
        Some("10")
    );
    assert_eq!(
        node.state.slot("b").unwrap().unwrap().state,
        State::Forgotten
    );

    // Raft re-applies from last_applied: the replica converges on the steady one.
    node.sm.apply(batches.next().unwrap()).await.unwrap();
    assert_eq!(node.state.digest().unwrap(), digests[2]);
    assert_eq!(
        node.sm.applied_state().await.unwrap(),
        steady.sm.applied_state().await.unwrap()
    );
}

#[tokio::test]
async fn an_apply_that_never_committed_leaves_no_trace() {
    let dir = TempDir::new().unwrap();
    let digest_before;
    {
        let mut node = open(dir.path());
        for batch in three_batches() {
            node.sm.apply(batch).await.unwrap();
        }
        digest_before = node.state.digest().unwrap();
        stage_entry_10_without_commit(&node.state);
        // Staged but uncommitted writes are invisible even before the crash.
        assert_eq!(node.state.digest().unwrap(), digest_before);
    }

    let mut node = open(dir.path());
    assert_eq!(applied_index(&mut node.sm).await, Some(9));
    assert_eq!(node.state.digest().unwrap(), digest_before);
    assert_eq!(node.state.clock_ms().unwrap(), now_of(9));
    assert!(node.state.slot("lost").unwrap().is_none());
    assert!(node.state.history("lost", 10).unwrap().is_empty());
    assert!(node
        .state
        .keys_for_anchor("tag:t", 10)
        .unwrap()
        .iter()
        .all(|k| k != "lost"));
}

/// Builds the whole write of an entry 10 (slot, history, anchor, feed, applied id, clock)
/// in a transaction, checks the transaction reads its own writes, then drops it.
fn stage_entry_10_without_commit(state: &StateEngine) {
    let mut txn = state.txn();
    let ctx = Ctx {
        revision: 10,
        now_ms: now_of(10),
    };
    let (_, effects) = execute::execute(
        &write("lost", "\"never\""),
        &txn,
        &execute::AllowAll,
        &ctx,
        RETENTION_MS,
    )
    .unwrap();
    assert!(!effects.is_empty());
    txn.begin_revision();
    txn.apply_effects(effects).unwrap();
    txn.put_meta(meta::LAST_APPLIED, &codec::encode(&Some(log_id(10))));
    txn.put_clock_ms(now_of(10));
    let staged = SlotSource::slot(&txn, "lost")
        .unwrap()
        .expect("the txn reads its own writes");
    assert_eq!(staged.value.as_deref(), Some("\"never\""));
    drop(txn);
}

#[tokio::test]
async fn an_empty_apply_changes_nothing() {
    let dir = TempDir::new().unwrap();
    let mut node = open(dir.path());
    node.sm.apply(three_batches().remove(0)).await.unwrap();
    let before = (
        node.sm.applied_state().await.unwrap(),
        node.state.digest().unwrap(),
    );
    let responses = node.sm.apply(Vec::new()).await.unwrap();
    assert!(responses.is_empty());
    assert_eq!(
        (
            node.sm.applied_state().await.unwrap(),
            node.state.digest().unwrap()
        ),
        before
    );
}

/// Builds a snapshot on `node` and returns its meta and its file's bytes.
async fn snapshot_bytes(node: &mut Opened) -> (SnapshotMeta, Vec<u8>) {
    let mut snapshot = node
        .sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let mut bytes = Vec::new();
    snapshot.snapshot.read_to_end(&mut bytes).await.unwrap();
    (snapshot.meta, bytes)
}

/// Receives `bytes` the way openraft does (into the file `begin_receiving_snapshot`
/// returned), then installs.
async fn install(
    node: &mut Opened,
    meta: &SnapshotMeta,
    bytes: &[u8],
) -> Result<(), openraft::StorageError<u64>> {
    let mut file = node.sm.begin_receiving_snapshot().await?;
    file.write_all(bytes).await.unwrap();
    file.flush().await.unwrap();
    node.sm.install_snapshot(meta, file).await
}

/// A fresh node with the snapshot `bytes` installed.
async fn installed(meta: &SnapshotMeta, bytes: &[u8]) -> (TempDir, Opened) {
    let dir = TempDir::new().unwrap();
    let mut node = open(dir.path());
    install(&mut node, meta, bytes).await.unwrap();
    (dir, node)
}

/// A leader-side node after the three batches.
async fn leader() -> (TempDir, Opened) {
    let dir = TempDir::new().unwrap();
    let mut node = open(dir.path());
    for batch in three_batches() {
        node.sm.apply(batch).await.unwrap();
    }
    (dir, node)
}

#[tokio::test]
async fn a_snapshot_round_trip_reproduces_the_state() {
    let (_leader_dir, mut source) = leader().await;
    let (meta, bytes) = snapshot_bytes(&mut source).await;
    assert_eq!(meta.last_log_id, Some(log_id(9)));

    let (_dir, mut target) = installed(&meta, &bytes).await;

    assert_eq!(
        target.state.digest().unwrap(),
        source.state.digest().unwrap()
    );
    assert_eq!(
        target.sm.applied_state().await.unwrap(),
        source.sm.applied_state().await.unwrap()
    );
    assert_eq!(
        target.state.clock_ms().unwrap(),
        source.state.clock_ms().unwrap()
    );
    assert_eq!(
        target
            .sm
            .get_current_snapshot()
            .await
            .unwrap()
            .expect("installed snapshot is current")
            .meta,
        meta
    );
    assert_same_reads(&source.state, &target.state);

    // Both continue from the snapshot identically.
    let next = || {
        vec![
            normal(10, vec![write("a", "12")]),
            normal(11, vec![write("e", "5")]),
        ]
    };
    source.sm.apply(next()).await.unwrap();
    target.sm.apply(next()).await.unwrap();
    assert_eq!(
        target.state.digest().unwrap(),
        source.state.digest().unwrap()
    );
}

#[tokio::test]
async fn an_install_replaces_the_slots_the_apply_path_had_cached() {
    let (_leader_dir, mut source) = leader().await;
    let (meta, bytes) = snapshot_bytes(&mut source).await;
    let dir = TempDir::new().unwrap();
    let mut target = open(dir.path());
    // The target applied writes of its own to the same keys: its slot cache holds them.
    target
        .sm
        .apply(vec![normal(1, vec![write("a", "99"), write("e", "98")])])
        .await
        .unwrap();
    install(&mut target, &meta, &bytes).await.unwrap();

    // Continuing from the snapshot, the next mutations of those keys must start from the
    // installed slots ("a" forgotten at version 4, "e" absent), not from the cached ones.
    let next = || vec![normal(10, vec![write("a", "12"), write("e", "5")])];
    source.sm.apply(next()).await.unwrap();
    target.sm.apply(next()).await.unwrap();
    for key in ["a", "e"] {
        assert_eq!(
            target.state.slot(key).unwrap(),
            source.state.slot(key).unwrap(),
            "slot {key}"
        );
    }
    assert_eq!(
        target.state.digest().unwrap(),
        source.state.digest().unwrap()
    );
}

/// Slot, history and tombstone reads agree, and hold what the entries did.
fn assert_same_reads(source: &StateEngine, target: &StateEngine) {
    for key in ["a", "b", "c", "d"] {
        assert_eq!(
            target.slot(key).unwrap(),
            source.slot(key).unwrap(),
            "slot {key}"
        );
        assert_eq!(
            target.history(key, 100).unwrap(),
            source.history(key, 100).unwrap(),
            "history {key}"
        );
    }
    let a = target.slot("a").unwrap().unwrap();
    assert_eq!(
        (a.state, a.version, a.forget_epoch),
        (State::Forgotten, 4, 4)
    );
    assert_eq!(target.history("a", 100).unwrap().len(), 4);
    let tombstone = a.tombstone.expect("forgotten key keeps its tombstone");
    assert_eq!(target.tombstone(&tombstone.id).unwrap(), Some(tombstone));
    assert_eq!(target.slot("c").unwrap().unwrap().state, State::Revoked);
    assert_eq!(
        target.keys_for_anchor("tag:t", 10).unwrap(),
        vec!["c".to_string(), "d".to_string()]
    );
}

/// A follower with state of its own and a current snapshot of it.
async fn follower() -> (TempDir, Opened, SnapshotMeta) {
    let dir = TempDir::new().unwrap();
    let mut node = open(dir.path());
    node.sm
        .apply(vec![
            normal(1, vec![write("own", "1")]),
            normal(2, vec![write("own", "2")]),
        ])
        .await
        .unwrap();
    let (meta, _) = snapshot_bytes(&mut node).await;
    (dir, node, meta)
}

/// `bytes` (a snapshot file as this build writes it) rewritten in the uncompressed layout
/// of earlier builds: the magic `CAIRNSNP`, the format byte, the frame's content, and the
/// sha256 of all that.
fn uncompressed_layout(bytes: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let content = snapshot_file::frame_content(bytes)
        .expect("this build writes LZ4 snapshot files")
        .unwrap();
    let mut out = b"CAIRNSNP".to_vec();
    out.push(bytes[snapshot_file::PREFIX_BYTES - 1]);
    out.extend_from_slice(&content);
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    out
}

#[tokio::test]
async fn a_snapshot_file_in_the_uncompressed_layout_still_installs() {
    let (_leader_dir, mut source) = leader().await;
    let (meta, bytes) = snapshot_bytes(&mut source).await;
    let old = uncompressed_layout(&bytes);
    let (_dir, target) = installed(&meta, &old).await;
    assert_eq!(
        target.state.digest().unwrap(),
        source.state.digest().unwrap()
    );
    assert_same_reads(&source.state, &target.state);
    // Its trailer is checked as before: one flipped byte and it is refused.
    let (_dir, mut other, _) = follower().await;
    let mut flipped = old.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x01;
    assert!(install(&mut other, &meta, &flipped).await.is_err());
}

/// Corruptions of a valid snapshot file: flipped bytes across the file, truncations.
fn corruptions(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let len = bytes.len();
    for at in [0, 9, 14, len / 3, len / 2, len - 41, len - 33, len - 1] {
        let mut flipped = bytes.to_vec();
        flipped[at] ^= 0x01;
        out.push((format!("byte {at} of {len} flipped"), flipped));
    }
    for keep in [0, 8, len / 2, len - 32, len - 1] {
        out.push((
            format!("truncated to {keep} of {len}"),
            bytes[..keep].to_vec(),
        ));
    }
    out
}

#[tokio::test]
async fn a_corrupted_snapshot_is_refused_without_touching_the_state() {
    let (_leader_dir, mut source) = leader().await;
    let (meta, bytes) = snapshot_bytes(&mut source).await;
    let (_dir, mut target, own_meta) = follower().await;
    let before = (
        target.sm.applied_state().await.unwrap(),
        target.state.digest().unwrap(),
    );

    for (what, corrupt) in corruptions(&bytes) {
        let result = install(&mut target, &meta, &corrupt).await;
        assert!(result.is_err(), "{what}: installed");
        assert_eq!(
            (
                target.sm.applied_state().await.unwrap(),
                target.state.digest().unwrap()
            ),
            before,
            "{what}"
        );
        let current = target
            .sm
            .get_current_snapshot()
            .await
            .unwrap()
            .expect("own snapshot stays");
        assert_eq!(current.meta, own_meta, "{what}");
    }

    // A sound file announced under another id is refused too.
    let mut wrong = meta.clone();
    wrong.snapshot_id.push_str("-other");
    assert!(install(&mut target, &wrong, &bytes).await.is_err());
    assert_eq!(
        (
            target.sm.applied_state().await.unwrap(),
            target.state.digest().unwrap()
        ),
        before
    );

    // The intact file still installs after all those refusals.
    install(&mut target, &meta, &bytes).await.unwrap();
    assert_eq!(
        target.state.digest().unwrap(),
        source.state.digest().unwrap()
    );
}

#[tokio::test]
async fn an_interrupted_install_is_redone_at_open() {
    let (_leader_dir, mut source) = leader().await;
    let (meta, bytes) = snapshot_bytes(&mut source).await;
    let (dir, target, _) = follower().await;
    {
        let snapshots = SnapshotDir::open(dir.path().join("snapshots")).unwrap();
        let partial = snapshots.partial_path().unwrap();
        std::fs::write(&partial, &bytes).unwrap();
        let path = snapshots.promote(&partial).unwrap();
        leave_half_installed(&target.state, &path);
    } // Crash mid-install.
    drop(target);

    let mut node = open(dir.path());
    assert_eq!(node.state.digest().unwrap(), source.state.digest().unwrap());
    assert_eq!(
        node.sm.applied_state().await.unwrap(),
        source.sm.applied_state().await.unwrap()
    );
    assert!(
        node.state.meta(INSTALLING).unwrap().is_none(),
        "marker cleared by the redo"
    );
    assert!(
        node.state.slot("own").unwrap().is_none(),
        "the follower's own state is replaced"
    );
    assert_eq!(
        node.sm.get_current_snapshot().await.unwrap().unwrap().meta,
        meta
    );
    assert_same_reads(&source.state, &node.state);
}

/// What a crash in the middle of `install_file` leaves: the marker naming the file, and a
/// state that is neither the old one nor the snapshot's (here: one foreign key, a bogus
/// applied id).
fn leave_half_installed(state: &StateEngine, path: &Path) {
    let mut txn = state.txn();
    txn.put_meta(INSTALLING, path.to_string_lossy().as_bytes());
    let ctx = Ctx {
        revision: 50,
        now_ms: now_of(50),
    };
    let (_, effects) = execute::execute(
        &write("half", "1"),
        &txn,
        &execute::AllowAll,
        &ctx,
        RETENTION_MS,
    )
    .unwrap();
    txn.apply_effects(effects).unwrap();
    txn.put_meta(meta::LAST_APPLIED, &codec::encode(&Some(log_id(50))));
    txn.commit().unwrap();
}
