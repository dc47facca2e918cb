//! Model test: random command sequences run through `execute` over an in-memory store,
//! and through a small reference model written directly from the SPEC §2 table. They must
//! agree after every command, and the store must keep the key-model invariants.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use cairn_memory::execute::{execute, AllowAll};
use cairn_memory::{
    Command, CommandResponse, Conditions, Ctx, DedupRecord, Effect, ErrorCode, HistoryEvent,
    Mutation, Op, Slot, SlotSource, State, Tombstone, WatchEvent,
};
use proptest::prelude::*;

const KEYS: [&str; 3] = ["a", "b", "c"];
const ANCHORS: [&str; 3] = ["path:src/", "path:src/a.rs", "tag:x"];
const RETENTION_MS: u64 = 100;

// ---------------------------------------------------------------------------------------
// The store under test: effects applied to maps, as the RocksDB store applies them.
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Store {
    slots: BTreeMap<String, Slot>,
    dedup: BTreeMap<String, DedupRecord>,
    history: BTreeMap<String, Vec<HistoryEvent>>,
    tombstones: BTreeMap<String, Tombstone>,
    anchors: BTreeSet<(String, String)>,
    watch: Vec<WatchEvent>,
}

impl SlotSource for Store {
    type Error = Infallible;
    fn slot(&self, key: &str) -> Result<Option<Slot>, Infallible> {
        Ok(self.slots.get(key).cloned())
    }
    fn dedup(&self, id: &str) -> Result<Option<DedupRecord>, Infallible> {
        Ok(self.dedup.get(id).cloned())
    }
}

impl Store {
    fn apply(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::PutSlot(s) => {
                    self.slots.insert(s.key.clone(), s);
                }
                Effect::AppendEvent { key, event } => {
                    self.history.entry(key).or_default().push(event)
                }
                Effect::PutTombstone(t) => {
                    assert!(
                        !self.tombstones.contains_key(&t.id),
                        "tombstone id reused: {t:?}"
                    );
                    self.tombstones.insert(t.id.clone(), t);
                }
                Effect::AnchorAdd { anchor, key } => {
                    assert!(self.anchors.insert((anchor, key)), "anchor added twice");
                }
                Effect::AnchorRemove { anchor, key } => {
                    assert!(self.anchors.remove(&(anchor, key)), "absent anchor removed");
                }
                Effect::PutDedup { request_id, record } => {
                    self.dedup.insert(request_id, record);
                }
                Effect::Watch(w) => self.watch.push(w),
            }
        }
    }

    /// The invariants every applied state must satisfy.
    fn check_invariants(&self) {
        let mut expected_anchors = BTreeSet::new();
        for (key, s) in &self.slots {
            assert_ne!(s.state, State::Absent);
            let history = &self.history[key];
            // One event per applied mutation, so versions are exactly 1..=version.
            let versions: Vec<u64> = history.iter().map(|e| e.version).collect();
            assert_eq!(
                versions,
                (1..=s.version).collect::<Vec<_>>(),
                "history of {key}"
            );
            assert!(history.windows(2).all(|w| w[0].revision <= w[1].revision));
            assert_eq!(
                s.value.is_some(),
                matches!(s.state, State::Active | State::Revoked)
            );
            if s.state == State::Forgotten {
                let t = s
                    .tombstone
                    .as_ref()
                    .expect("a forgotten key has a tombstone");
                assert_eq!(
                    self.tombstones.get(&t.id),
                    Some(t),
                    "tombstone readable by id"
                );
                assert_eq!((s.value_hash.as_ref(), s.forget_epoch), (None, t.version));
                assert!(s.meta.anchors.is_empty());
            } else {
                assert!(s.tombstone.is_none());
                expected_anchors.extend(s.meta.anchors.iter().map(|a| (a.clone(), key.clone())));
            }
            assert_eq!(s.revocation.is_some(), s.state == State::Revoked);
        }
        assert_eq!(self.anchors, expected_anchors, "anchor index is exact");
    }
}

// ---------------------------------------------------------------------------------------
// The reference model, from the SPEC §2 table and nothing else.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct RefKey {
    state: State,
    version: u64,
    generation: u64,
    forget_epoch: u64,
    value: Option<String>,
    revision: u64,
    create_revision: u64,
    /// Revision of the last forget, revoke or re-creation (for `based_on_revision`); a
    /// lifted revoke keeps fencing.
    fence_revision: u64,
}

/// What a response must say, as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RefResponse {
    Applied {
        results: Vec<RefResult>,
        revision: u64,
        replayed: bool,
    },
    Rejected {
        code: ErrorCode,
        op_index: Option<usize>,
    },
}

/// A remembered request: payload hash, its first response, decided at ms.
type RefDedup = (String, RefResponse, u64);

/// (key, state, version, generation, forget_epoch, already) of one applied mutation.
type RefResult = (String, State, u64, u64, u64, bool);

#[derive(Default)]
struct Model {
    keys: BTreeMap<String, RefKey>,
    dedup: BTreeMap<String, RefDedup>,
}

impl Model {
    /// Runs `cmd`; the first response to a `request_id` is its answer for the retention
    /// window, whether it applied or was rejected.
    fn run(&mut self, cmd: &Command, revision: u64, now_ms: u64) -> RefResponse {
        let remembered = cmd.request_id.as_ref().and_then(|id| self.dedup.get(id));
        if let Some((hash, first, _)) = remembered.filter(|d| d.2 + RETENTION_MS >= now_ms) {
            if hash != &cmd.payload_hash {
                return RefResponse::Rejected {
                    code: ErrorCode::RequestIdReused,
                    op_index: None,
                };
            }
            return match first.clone() {
                RefResponse::Applied {
                    results, revision, ..
                } => RefResponse::Applied {
                    results,
                    revision,
                    replayed: true,
                },
                rejected => rejected,
            };
        }
        let response = self.decide(cmd, revision);
        if let Some(id) = &cmd.request_id {
            self.dedup.insert(
                id.clone(),
                (cmd.payload_hash.clone(), response.clone(), now_ms),
            );
        }
        response
    }

    /// Applies `cmd` against the current keys, all mutations or none.
    fn decide(&mut self, cmd: &Command, revision: u64) -> RefResponse {
        let mut keys = self.keys.clone();
        let mut results = Vec::new();
        for (i, m) in cmd.mutations.iter().enumerate() {
            let key = m.op.key().to_string();
            match step(keys.get(&key), m, revision) {
                Ok((next, already)) => {
                    results.push((
                        key.clone(),
                        next.state,
                        next.version,
                        next.generation,
                        next.forget_epoch,
                        already,
                    ));
                    keys.insert(key, next);
                }
                Err(code) => {
                    return RefResponse::Rejected {
                        code,
                        op_index: cmd.is_batch.then_some(i),
                    };
                }
            }
        }
        self.keys = keys;
        RefResponse::Applied {
            results,
            revision,
            replayed: false,
        }
    }
}

/// One mutation on one key: the new key record and whether it was an idempotent no-op.
fn step(k: Option<&RefKey>, m: &Mutation, revision: u64) -> Result<(RefKey, bool), ErrorCode> {
    let state = k.map_or(State::Absent, |k| k.state);
    let version = k.map_or(0, |k| k.version);
    if m.cond.expected_version.is_some_and(|e| e != version) {
        return Err(ErrorCode::VersionConflict);
    }
    if let (Some(based), Some(k)) = (m.cond.based_on_revision, k) {
        if k.fence_revision > based {
            return Err(ErrorCode::StaleWrite);
        }
    }
    let mut next = k.cloned().unwrap_or(RefKey {
        state: State::Absent,
        version: 0,
        generation: 1,
        forget_epoch: 0,
        value: None,
        revision,
        create_revision: revision,
        fence_revision: 0,
    });
    let live = |next: RefKey| match state {
        State::Absent => Err(ErrorCode::NotFound),
        State::Forgotten => Err(ErrorCode::KeyForgotten),
        _ => Ok(next),
    };
    next = match (&m.op, state) {
        (
            Op::Write {
                override_revocation: false,
                ..
            },
            State::Revoked,
        ) => return Err(ErrorCode::KeyRevoked),
        (
            Op::Write {
                clear_tombstone: false,
                ..
            },
            State::Forgotten,
        ) => return Err(ErrorCode::KeyForgotten),
        (Op::Write { value, .. }, _) => {
            if state == State::Forgotten {
                next.generation += 1;
                next.create_revision = revision;
                next.fence_revision = revision;
            }
            RefKey {
                state: State::Active,
                value: Some(value.clone()),
                ..next
            }
        }
        (Op::Forget { .. }, State::Forgotten) => return Ok((next, true)),
        (Op::Forget { .. }, _) => RefKey {
            state: State::Forgotten,
            value: None,
            forget_epoch: version + 1,
            fence_revision: revision,
            ..next
        },
        (Op::Revoke { .. }, State::Revoked) | (Op::Reinstate { .. }, State::Active) => {
            return Ok((next, true))
        }
        (Op::Revoke { .. }, _) => RefKey {
            state: State::Revoked,
            fence_revision: revision,
            ..live(next)?
        },
        (Op::Reinstate { .. }, _) => RefKey {
            state: State::Active,
            ..live(next)?
        },
        (Op::FlagStale { .. } | Op::Supersede { .. }, _) => live(next)?,
    };
    next.version = version + 1;
    next.revision = revision;
    Ok((next, false))
}

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(KEYS.to_vec()).prop_map(str::to_string)
}

fn anchor() -> impl Strategy<Value = String> {
    prop::sample::select(ANCHORS.to_vec()).prop_map(str::to_string)
}

fn op() -> impl Strategy<Value = Op> {
    let actor = || "agent".to_string();
    prop_oneof![
        4 => (key(), 0u8..3, prop::collection::vec(anchor(), 0..3), any::<bool>(), any::<bool>())
            .prop_map(move |(key, v, anchors, clear_tombstone, override_revocation)| {
                let mut anchors = anchors;
                anchors.dedup();
                Op::Write {
                    key,
                    value: v.to_string(),
                    value_hash: cairn_memory::hash::value_hash(&v.to_string()),
                    actor: actor(),
                    source: None,
                    anchors,
                    tags: vec![],
                    clear_tombstone,
                    override_revocation,
                    reason: None,
                }
            }),
        2 => key().prop_map(move |key| Op::Forget { key, actor: actor(), reason: "r".into() }),
        2 => key().prop_map(move |key| Op::Revoke { key, actor: actor(), reason: "r".into() }),
        2 => key().prop_map(move |key| Op::Reinstate { key, actor: actor(), reason: None }),
        1 => (key(), anchor()).prop_map(move |(key, anchor)| Op::FlagStale {
            key,
            actor: actor(),
            anchor,
            observed_hash: "h".into(),
        }),
        1 => (0..KEYS.len(), 1..KEYS.len()).prop_map(move |(k, d)| Op::Supersede {
            key: KEYS[k].into(),
            by: KEYS[(k + d) % KEYS.len()].into(),
            actor: actor(),
            reason: None,
        }),
    ]
}

fn conditions() -> impl Strategy<Value = Conditions> {
    (
        prop::option::weighted(0.25, 0u64..6),
        prop::option::weighted(0.15, 0u64..40),
    )
        .prop_map(|(expected_version, based_on_revision)| Conditions {
            expected_version,
            based_on_revision,
        })
}

fn command() -> impl Strategy<Value = Command> {
    let mutations = prop::collection::vec((op(), conditions()), 1..=3);
    let request_id = prop::option::weighted(0.4, prop::sample::select(vec!["r0", "r1", "r2"]));
    (mutations, any::<bool>(), request_id).prop_map(|(ms, batch, request_id)| {
        let mutations: Vec<Mutation> = ms
            .into_iter()
            .map(|(op, cond)| Mutation { op, cond })
            .collect();
        let is_batch = batch || mutations.len() > 1;
        let payload_hash = serde_json::to_string(&(&mutations, is_batch)).unwrap();
        Command {
            request_id: request_id.map(str::to_string),
            payload_hash,
            mutations,
            is_batch,
        }
    })
}

/// A client submission: a new command, or a retry of an earlier one (by index).
#[derive(Debug, Clone)]
enum Submit {
    New(Command),
    Retry(usize),
}

fn submit() -> impl Strategy<Value = Submit> {
    prop_oneof![4 => command().prop_map(Submit::New), 1 => any::<usize>().prop_map(Submit::Retry)]
}

/// Raft entries: each packs 1..=2 submissions and advances leader time by 0..40 ms.
fn entries() -> impl Strategy<Value = Vec<(Vec<Submit>, u64)>> {
    prop::collection::vec((prop::collection::vec(submit(), 1..=2), 0u64..40), 1..40)
}

// ---------------------------------------------------------------------------------------
// The property
// ---------------------------------------------------------------------------------------

fn as_ref_response(resp: &CommandResponse) -> RefResponse {
    match resp {
        CommandResponse::Applied {
            results,
            revision,
            replayed,
        } => RefResponse::Applied {
            results: results
                .iter()
                .map(|r| {
                    assert_eq!(r.replayed, *replayed);
                    assert_eq!(r.tombstone.is_some(), r.state == State::Forgotten);
                    (
                        r.key.clone(),
                        r.state,
                        r.version,
                        r.generation,
                        r.forget_epoch,
                        r.already == Some(true),
                    )
                })
                .collect(),
            revision: *revision,
            replayed: *replayed,
        },
        CommandResponse::Rejected { error, op_index } => RefResponse::Rejected {
            code: error.code,
            op_index: *op_index,
        },
    }
}

/// A forgotten key only ever leaves `forgotten` through a write with `clear_tombstone`.
fn check_no_silent_reopen(before: &Store, cmd: &Command, resp: &CommandResponse) {
    let CommandResponse::Applied {
        results,
        replayed: false,
        ..
    } = resp
    else {
        return;
    };
    let mut state: BTreeMap<&str, State> = before
        .slots
        .iter()
        .map(|(k, s)| (k.as_str(), s.state))
        .collect();
    for (m, r) in cmd.mutations.iter().zip(results) {
        let prev = state.get(r.key.as_str()).copied().unwrap_or(State::Absent);
        if prev == State::Forgotten && r.state != State::Forgotten {
            assert!(
                matches!(
                    m.op,
                    Op::Write {
                        clear_tombstone: true,
                        ..
                    }
                ),
                "forgotten key {} reopened by {:?}",
                r.key,
                m.op
            );
        }
        if r.already.is_none() {
            let prev_version = before.slots.get(&r.key).map_or(0, |s| s.version);
            assert!(r.version > prev_version, "version must increase");
        }
        state.insert(&r.key, r.state);
    }
}

fn check_agreement(store: &Store, model: &Model) {
    let keys: BTreeSet<&String> = store.slots.keys().chain(model.keys.keys()).collect();
    for key in keys {
        let s = store
            .slots
            .get(key)
            .unwrap_or_else(|| panic!("store lacks {key}"));
        let k = model
            .keys
            .get(key)
            .unwrap_or_else(|| panic!("model lacks {key}"));
        assert_eq!(
            (
                s.state,
                s.version,
                s.generation,
                s.forget_epoch,
                &s.value,
                s.revision,
                s.create_revision
            ),
            (
                k.state,
                k.version,
                k.generation,
                k.forget_epoch,
                &k.value,
                k.revision,
                k.create_revision
            ),
            "key {key}"
        );
        assert_eq!(s.tombstone.is_some(), k.state == State::Forgotten);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn execute_agrees_with_the_reference_model(entries in entries()) {
        let mut store = Store::default();
        let mut model = Model::default();
        let mut submitted: Vec<Command> = Vec::new();
        let mut now_ms = 1_000;
        for (revision, (subs, advance)) in (1u64..).zip(entries) {
            now_ms += advance;
            let ctx = Ctx { revision, now_ms };
            for sub in subs {
                let cmd = match sub {
                    Submit::New(cmd) => cmd,
                    Submit::Retry(_) if submitted.is_empty() => continue,
                    Submit::Retry(i) => submitted[i % submitted.len()].clone(),
                };
                submitted.push(cmd.clone());
                let (resp, effects) = execute(&cmd, &store, &AllowAll, &ctx, RETENTION_MS).unwrap();
                let expected = model.run(&cmd, revision, now_ms);
                prop_assert_eq!(as_ref_response(&resp), expected, "command {:?}", cmd);
                let applies = matches!(resp, CommandResponse::Applied { replayed: false, .. });
                let key_effects = effects.iter().filter(|e| !matches!(e, Effect::PutDedup { .. })).count();
                prop_assert!(applies || key_effects == 0, "rejections and replays change no key");
                let answered_from_record = match &resp {
                    CommandResponse::Applied { replayed, .. } => *replayed,
                    CommandResponse::Rejected { error, .. } => {
                        error.code == ErrorCode::RequestIdReused
                            || error.details_json.contains(r#""replayed":true"#)
                    }
                };
                prop_assert!(!answered_from_record || effects.is_empty(), "a replay writes nothing");
                let events = effects.iter().filter(|e| matches!(e, Effect::AppendEvent { .. })).count();
                let watches = effects.iter().filter(|e| matches!(e, Effect::Watch(_))).count();
                prop_assert_eq!(events, watches);
                check_no_silent_reopen(&store, &cmd, &resp);
                store.apply(effects);
                store.check_invariants();
                check_agreement(&store, &model);
            }
        }
        prop_assert!(store.watch.windows(2).all(|w| w[0].revision <= w[1].revision));
    }
}
