//! Replicas converge: random logs of key-model commands, applied to RocksDB state machines
//! in random chunkings (and across a snapshot), leave byte-identical state, and agree with
//! a plain in-memory run of `cairn_memory::execute`.
//!
//! Each case:
//! - (a) two fresh state machines apply the same entries in different chunkings: same
//!   responses, same `digest()`, same applied state;
//! - (b) a third applies a prefix and builds a snapshot, a fresh fourth installs it and
//!   applies the tail: same digest and tail responses as (a);
//! - the reference (maps + `execute`) gives the same responses, the same slot for every key
//!   and exactly the live dedup records.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;

use cairn_memory::execute::{dedup_live, execute, AllowAll};
use cairn_memory::{
    Command, Conditions, Ctx, Decision, DedupRecord, Effect, Mutation, Op, Slot, SlotSource,
};
use cairn_node::consensus::state_machine::StateMachine;
use cairn_node::consensus::{Entry, LogId, Request, Response};
use cairn_node::store::{Engine, EngineOptions, SnapshotDir, StateEngine};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload, Membership, RaftSnapshotBuilder};
use proptest::prelude::*;
use proptest::sample::{select, Index};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEYS: [&str; 3] = ["k0", "k1", "k2"];
const REQUEST_IDS: [&str; 3] = ["r0", "r1", "r2"];
const VALUES: [&str; 4] = ["1", "2", "\"s\"", "{\"a\":[1,2]}"];
const ANCHORS: [&str; 3] = ["tag:a", "tag:b", "path:src/x"];
/// Leader time of the first entry.
const T0: u64 = 1_700_000_000_000;

// ---------------------------------------------------------------- generated cases

/// A command of an entry: a new one, or a verbatim retry of an earlier one (index taken
/// modulo the number issued so far).
#[derive(Debug, Clone)]
enum CmdSpec {
    Fresh(Command),
    Retry(Index),
}

#[derive(Debug, Clone)]
enum Step {
    /// A normal entry; the leader clock moves by `clock_step_ms` (negative: a new leader
    /// whose clock is behind).
    Normal {
        commands: Vec<CmdSpec>,
        clock_step_ms: i64,
    },
    /// A new leader's first entry (the term goes up).
    Blank,
    Membership,
}

#[derive(Debug, Clone)]
struct Case {
    steps: Vec<Step>,
    retention_ms: u64,
    chunks_a: Vec<usize>,
    chunks_b: Vec<usize>,
    chunks_prefix: Vec<usize>,
    chunks_tail: Vec<usize>,
    /// Where the snapshot of (b) is taken (at least one entry in the prefix).
    split: Index,
}

fn key() -> impl Strategy<Value = String> {
    select(&KEYS[..]).prop_map(str::to_string)
}

fn write_op() -> impl Strategy<Value = Op> {
    let anchors = proptest::sample::subsequence(&ANCHORS[..], 0..=2);
    (
        key(),
        select(&VALUES[..]),
        anchors,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(key, value, anchors, clear_tombstone, override_revocation)| Op::Write {
                key,
                value: value.to_string(),
                value_hash: cairn_memory::hash::value_hash(value),
                actor: "agent".into(),
                source: None,
                anchors: anchors.into_iter().map(str::to_string).collect(),
                tags: vec![],
                clear_tombstone,
                override_revocation,
                reason: None,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    let actor = || "agent".to_string();
    prop_oneof![
        4 => write_op(),
        1 => key().prop_map(move |key| Op::Forget { key, actor: actor(), reason: "r".into() }),
        1 => key().prop_map(move |key| Op::Revoke { key, actor: actor(), reason: "r".into() }),
        1 => key().prop_map(move |key| Op::Reinstate { key, actor: actor(), reason: None }),
        1 => (key(), select(&ANCHORS[..]), select(&["h1", "h2"][..])).prop_map(move |(key, anchor, hash)| {
            Op::FlagStale { key, actor: actor(), anchor: anchor.into(), observed_hash: hash.into() }
        }),
        1 => (key(), key()).prop_map(move |(key, by)| Op::Supersede { key, by, actor: actor(), reason: None }),
    ]
}

fn conditions() -> impl Strategy<Value = Conditions> {
    (
        proptest::option::weighted(0.2, 0u64..6),
        proptest::option::weighted(0.2, 0u64..40),
    )
        .prop_map(|(expected_version, based_on_revision)| Conditions {
            expected_version,
            based_on_revision,
        })
}

fn command() -> impl Strategy<Value = Command> {
    let mutations = proptest::collection::vec(
        (op(), conditions()).prop_map(|(op, cond)| Mutation { op, cond }),
        1..=3,
    );
    let request_id = proptest::option::of(select(&REQUEST_IDS[..]));
    (mutations, request_id, any::<bool>()).prop_map(|(mutations, request_id, batch)| Command {
        request_id: request_id.map(str::to_string),
        // Same mutations, same payload: reusing an id with other mutations is a conflict.
        payload_hash: format!("{mutations:?}"),
        is_batch: batch || mutations.len() > 1,
        mutations,
    })
}

fn step() -> impl Strategy<Value = Step> {
    let spec = prop_oneof![4 => command().prop_map(CmdSpec::Fresh), 1 => any::<Index>().prop_map(CmdSpec::Retry)];
    prop_oneof![
        8 => (proptest::collection::vec(spec, 1..=3), -1500i64..4000)
            .prop_map(|(commands, clock_step_ms)| Step::Normal { commands, clock_step_ms }),
        1 => Just(Step::Blank),
        1 => Just(Step::Membership),
    ]
}

fn chunks() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(1usize..=6, 1..=6)
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(step(), 1..=30),
        select(&[500u64, 2_000, 10_000][..]),
        (chunks(), chunks(), chunks(), chunks()),
        any::<Index>(),
    )
        .prop_map(
            |(steps, retention_ms, (chunks_a, chunks_b, chunks_prefix, chunks_tail), split)| Case {
                steps,
                retention_ms,
                chunks_a,
                chunks_b,
                chunks_prefix,
                chunks_tail,
                split,
            },
        )
}

// ---------------------------------------------------------------- the log

/// The entries of a case: consecutive indexes from 1, the term bumped by each blank entry,
/// retries resolved to the command they repeat.
fn entries(case: &Case) -> Vec<Entry> {
    let mut issued: Vec<Command> = Vec::new();
    let (mut now_ms, mut term) = (T0, 1u64);
    let mut out = Vec::with_capacity(case.steps.len());
    for (i, step) in case.steps.iter().enumerate() {
        let log_id = LogId::new(CommittedLeaderId::new(term, 1), i as u64 + 1);
        let payload = match step {
            Step::Blank => {
                term += 1;
                EntryPayload::Blank
            }
            Step::Membership => {
                EntryPayload::Membership(Membership::new(vec![[1u64, 2, 3].into()], ()))
            }
            Step::Normal {
                commands,
                clock_step_ms,
            } => {
                now_ms = now_ms.saturating_add_signed(*clock_step_ms);
                let commands: Vec<Command> = commands.iter().map(|c| resolve(c, &issued)).collect();
                issued.extend(commands.iter().cloned());
                let request = Request {
                    now_ms,
                    dedup_retention_ms: case.retention_ms,
                    commands: commands.into(),
                    access: None,
                };
                EntryPayload::Normal(request)
            }
        };
        out.push(Entry { log_id, payload });
    }
    out
}

fn resolve(spec: &CmdSpec, issued: &[Command]) -> Command {
    match spec {
        CmdSpec::Fresh(c) => c.clone(),
        CmdSpec::Retry(i) if !issued.is_empty() => issued[i.index(issued.len())].clone(),
        // Nothing to retry yet: a plain write stands in.
        CmdSpec::Retry(_) => Command {
            request_id: Some(REQUEST_IDS[0].into()),
            payload_hash: "first".into(),
            mutations: vec![Mutation {
                op: Op::Reinstate {
                    key: KEYS[0].into(),
                    actor: "agent".into(),
                    reason: None,
                },
                cond: Conditions::default(),
            }],
            is_batch: false,
        },
    }
}

// ---------------------------------------------------------------- the reference

/// The applied state as plain maps, driven by `execute` exactly as the SPEC describes it:
/// no RocksDB, no expiry (an expired record is simply not live).
#[derive(Default)]
struct Reference {
    slots: BTreeMap<String, Slot>,
    dedup: BTreeMap<String, DedupRecord>,
    clock_ms: u64,
}

impl SlotSource for Reference {
    type Error = Infallible;
    fn slot(&self, key: &str) -> Result<Option<Slot>, Infallible> {
        Ok(self.slots.get(key).cloned())
    }
    fn dedup(&self, request_id: &str) -> Result<Option<DedupRecord>, Infallible> {
        Ok(self.dedup.get(request_id).cloned())
    }
}

impl Reference {
    fn apply(&mut self, entry: &Entry) -> Response {
        let EntryPayload::Normal(request) = &entry.payload else {
            return Response::default();
        };
        self.clock_ms = self.clock_ms.max(request.now_ms);
        let ctx = Ctx {
            revision: entry.log_id.index,
            now_ms: self.clock_ms,
        };
        let mut responses = Vec::with_capacity(request.commands.len());
        for command in request.commands.iter() {
            let (response, effects) =
                execute(command, &*self, &AllowAll, &ctx, request.dedup_retention_ms).unwrap();
            self.absorb(effects);
            responses.push(response);
        }
        Response {
            responses,
            access: None,
        }
    }

    fn absorb(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::PutSlot(slot) => {
                    self.slots.insert(slot.key.clone(), slot);
                }
                Effect::PutDedup { request_id, record } => {
                    self.dedup.insert(request_id, record);
                }
                _ => {}
            }
        }
    }
}

// ---------------------------------------------------------------- state machines

struct Replica {
    _dir: TempDir,
    state: StateEngine,
    sm: StateMachine,
}

fn replica() -> Replica {
    let dir = TempDir::new().unwrap();
    let (state, sm) = open(dir.path());
    Replica {
        _dir: dir,
        state,
        sm,
    }
}

fn open(dir: &Path) -> (StateEngine, StateMachine) {
    let options = EngineOptions {
        block_cache_bytes: 1 << 20,
        write_buffer_bytes: 1 << 20,
        background_jobs: 1,
        // Holds every key of these logs (three), so the applies read slots from the cache
        // across entries and apply calls: a stale cached slot would make a replica diverge
        // from the reference. Eviction is covered by slot_cache's unit tests, the clear on
        // install by t11.
        slot_cache_bytes: 16 << 10,
        ..Default::default()
    };
    let engine = Engine::open(&dir.join("db"), &options).expect("open rocksdb");
    let snapshots = SnapshotDir::open(dir.join("snapshots")).expect("open snapshot dir");
    let state = StateEngine::new(engine);
    let sm = StateMachine::open(state.clone(), snapshots).expect("open state machine");
    (state, sm)
}

/// Applies `entries` in consecutive calls sized by `sizes` (cycled).
async fn apply_chunked(sm: &mut StateMachine, entries: &[Entry], sizes: &[usize]) -> Vec<Response> {
    let mut out = Vec::with_capacity(entries.len());
    let mut rest = entries;
    // Each call takes at least one entry, so this ends after at most `entries.len()` calls.
    for size in sizes.iter().cycle().take(entries.len()) {
        if rest.is_empty() {
            break;
        }
        let (chunk, tail) = rest.split_at((*size).min(rest.len()));
        out.extend(sm.apply(chunk.to_vec()).await.expect("apply"));
        rest = tail;
    }
    assert!(rest.is_empty());
    out
}

/// Builds a snapshot on `from` and installs it on `to` through the receive path.
async fn transfer_snapshot(from: &mut StateMachine, to: &mut StateMachine) {
    let mut snapshot = from
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build snapshot");
    let mut bytes = Vec::new();
    snapshot.snapshot.read_to_end(&mut bytes).await.unwrap();
    let mut file = to.begin_receiving_snapshot().await.expect("receive");
    file.write_all(&bytes).await.unwrap();
    file.flush().await.unwrap();
    to.install_snapshot(&snapshot.meta, file)
        .await
        .expect("install snapshot");
}

// ---------------------------------------------------------------- the property

async fn check(case: Case) -> Result<(), TestCaseError> {
    let log = entries(&case);
    let mut reference = Reference::default();
    let expected: Vec<Response> = log.iter().map(|e| reference.apply(e)).collect();

    // (a) two replicas, two chunkings.
    let (mut a, mut b) = (replica(), replica());
    prop_assert_eq!(
        &apply_chunked(&mut a.sm, &log, &case.chunks_a).await,
        &expected
    );
    prop_assert_eq!(
        &apply_chunked(&mut b.sm, &log, &case.chunks_b).await,
        &expected
    );
    let digest = a.state.digest().unwrap();
    prop_assert_eq!(
        &b.state.digest().unwrap(),
        &digest,
        "chunkings {:?} vs {:?}",
        case.chunks_a,
        case.chunks_b
    );
    let applied = a.sm.applied_state().await.unwrap();
    prop_assert_eq!(&b.sm.applied_state().await.unwrap(), &applied);
    prop_assert_eq!(applied.0.map(|id| id.index), Some(log.len() as u64));

    // (b) prefix + snapshot on a third, install + tail on a fresh fourth.
    let split = 1 + case.split.index(log.len());
    let (mut c, mut d) = (replica(), replica());
    apply_chunked(&mut c.sm, &log[..split], &case.chunks_prefix).await;
    transfer_snapshot(&mut c.sm, &mut d.sm).await;
    let tail = apply_chunked(&mut d.sm, &log[split..], &case.chunks_tail).await;
    prop_assert_eq!(&tail[..], &expected[split..]);
    prop_assert_eq!(
        &d.state.digest().unwrap(),
        &digest,
        "snapshot after {} of {} entries",
        split,
        log.len()
    );
    prop_assert_eq!(&d.sm.applied_state().await.unwrap(), &applied);

    check_against_reference(&a.state, &reference, case.retention_ms)
}

/// Every key's slot (state, version, generation, forget_epoch and the rest) and exactly
/// the dedup records still live at the final apply clock.
fn check_against_reference(
    state: &StateEngine,
    reference: &Reference,
    retention_ms: u64,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(state.clock_ms().unwrap(), reference.clock_ms);
    for key in KEYS {
        let stored = state.slot(key).unwrap();
        let modeled = reference.slots.get(key);
        let summary = |s: &Slot| (s.state, s.version, s.generation, s.forget_epoch);
        prop_assert_eq!(
            stored.as_ref().map(summary),
            modeled.map(summary),
            "key {}",
            key
        );
        prop_assert_eq!(stored.as_ref(), modeled, "key {}", key);
        let events = state.history(key, 1000).unwrap();
        prop_assert_eq!(
            events.len() as u64,
            modeled.map_or(0, |s| s.version),
            "history of {}",
            key
        );
    }
    for id in REQUEST_IDS {
        let live = reference
            .dedup
            .get(id)
            .filter(|r| dedup_live(r, reference.clock_ms, retention_ms));
        let stored = state.dedup(id).unwrap();
        prop_assert_eq!(stored.as_ref(), live, "dedup record {}", id);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn replicas_converge_whatever_the_chunking_or_snapshot(case in case()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(check(case))?;
    }
}

/// Regression: expiry must see the dedup records put by earlier entries of the same
/// `apply` call. Entry 1 remembers `r0`; entry 2 comes after its retention: whether the two
/// are applied together or apart, entry 2 expires the record.
#[test]
fn a_dedup_record_expires_the_same_whatever_the_chunking() {
    let remembered = Command {
        request_id: Some("r0".into()),
        payload_hash: "p".into(),
        mutations: vec![Mutation {
            op: Op::Forget {
                key: "k0".into(),
                actor: "agent".into(),
                reason: "r".into(),
            },
            cond: Conditions::default(),
        }],
        is_batch: false,
    };
    let plain = Command {
        request_id: None,
        ..remembered.clone()
    };
    let normal = |index: u64, now_ms: u64, command: &Command| Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request {
            now_ms,
            dedup_retention_ms: 1000,
            commands: vec![command.clone()].into(),
            access: None,
        }),
    };
    let log = [normal(1, T0, &remembered), normal(2, T0 + 5000, &plain)];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut together, mut apart) = (replica(), replica());
        apply_chunked(&mut together.sm, &log, &[2]).await;
        apply_chunked(&mut apart.sm, &log, &[1]).await;
        assert_eq!(apart.state.dedup("r0").unwrap(), None, "expired apart");
        assert_eq!(
            together.state.dedup("r0").unwrap(),
            None,
            "expired together"
        );
        assert_eq!(
            together.state.digest().unwrap(),
            apart.state.digest().unwrap()
        );
    });
}

/// Regression: with the per-entry bound on expiry, two entries applied in one transaction
/// make the same progress as in two (the second must not pick the keys the first deleted).
#[test]
fn bounded_expiry_progresses_the_same_in_one_transaction_or_several() {
    let seed = |state: &StateEngine| {
        let mut txn = state.txn();
        let puts = (1..=3).map(|at| Effect::PutDedup {
            request_id: format!("r{at}"),
            record: dedup_record(at),
        });
        txn.apply_effects(puts.collect()).unwrap();
        txn.commit().unwrap();
    };
    let (one, several) = (replica(), replica());
    seed(&one.state);
    seed(&several.state);

    let mut txn = one.state.txn();
    txn.expire_dedup(10, 1).unwrap();
    txn.expire_dedup(10, 1).unwrap();
    txn.commit().unwrap();
    for _ in 0..2 {
        let mut txn = several.state.txn();
        txn.expire_dedup(10, 1).unwrap();
        txn.commit().unwrap();
    }

    for replica in [&one, &several] {
        let left: Vec<bool> = ["r1", "r2", "r3"]
            .iter()
            .map(|id| replica.state.dedup(id).unwrap().is_some())
            .collect();
        assert_eq!(left, [false, false, true]);
    }
    assert_eq!(one.state.digest().unwrap(), several.state.digest().unwrap());
}

/// A dedup record decided at `at` ms (its revision too).
fn dedup_record(at: u64) -> DedupRecord {
    DedupRecord {
        payload_hash: "p".into(),
        decision: Decision::Applied(vec![]),
        revision: at,
        decided_at_ms: at,
    }
}

fn put_dedup(state: &StateEngine, id: &str, at: u64) {
    let mut txn = state.txn();
    txn.apply_effects(vec![Effect::PutDedup {
        request_id: id.into(),
        record: dedup_record(at),
    }])
    .unwrap();
    txn.commit().unwrap();
}

fn expire_dedup(state: &StateEngine, cutoff_ms: u64) {
    let mut txn = state.txn();
    txn.expire_dedup(cutoff_ms, 10).unwrap();
    txn.commit().unwrap();
}

fn dedup_present(state: &StateEngine, ids: &[&str]) -> Vec<bool> {
    ids.iter()
        .map(|id| state.dedup(id).unwrap().is_some())
        .collect()
}

/// One step of [`expiry_skips_a_scan_only_when_nothing_is_below_the_cutoff`].
type ExpiryStep = (Option<(&'static str, u64)>, u64, [bool; 4], &'static str);

/// The floor of `dedup_by_time` times lets an apply skip the expiry scan only when it would
/// find nothing: a record put below the floor still expires, and so does one put after the
/// index was found empty.
#[test]
fn expiry_skips_a_scan_only_when_nothing_is_below_the_cutoff() {
    let replica = replica();
    let state = &replica.state;
    let ids = ["r1", "r2", "r3", "late"];
    for (id, at) in [("r1", 10), ("r2", 20), ("r3", 30)] {
        put_dedup(state, id, at);
    }
    // (a record put first, the expiry cutoff, which of `ids` are left after it, why)
    let steps: [ExpiryStep; 6] = [
        (None, 15, [false, true, true, false], "r1 is below 15"),
        (None, 20, [false, true, true, false], "nothing below 20"),
        (
            Some(("late", 5)),
            20,
            [false, true, true, false],
            "put below the floor",
        ),
        (None, 25, [false, false, true, false], "r2 is below 25"),
        (None, 31, [false; 4], "r3 is below 31"),
        (
            Some(("r1", 40)),
            41,
            [false; 4],
            "put after the index was found empty",
        ),
    ];
    for (put, cutoff_ms, left, why) in steps {
        if let Some((id, at)) = put {
            put_dedup(state, id, at);
        }
        expire_dedup(state, cutoff_ms);
        assert_eq!(dedup_present(state, &ids), left, "{why}");
    }
}

/// A snapshot install replaces the index the floor described: records older than the
/// receiver's floor arrive with it and still expire.
#[test]
fn an_installed_snapshot_brings_records_below_the_old_floor_that_still_expire() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (mut sender, mut receiver) = (replica(), replica());
        put_dedup(&receiver.state, "new", 30);
        expire_dedup(&receiver.state, 25);
        put_dedup(&sender.state, "old", 10);
        transfer_snapshot(&mut sender.sm, &mut receiver.sm).await;
        assert_eq!(
            dedup_present(&receiver.state, &["old", "new"]),
            [true, false]
        );
        expire_dedup(&receiver.state, 15);
        assert_eq!(dedup_present(&receiver.state, &["old"]), [false]);
    });
}
