//! The state machine's data in RocksDB: slots, history, tombstones, the anchor index,
//! dedup records and the change feed.
//!
//! Writes go through a [`StateTxn`]: it reads through its own pending writes (so later
//! commands of one Raft entry, and later entries of one apply call, see earlier ones) and
//! commits everything, including the applied log id and membership, as ONE `WriteBatch`.
//! A crash therefore never leaves data and `last_applied` out of step.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use cairn_api::{EventKind, HistoryEvent, MutationResult, State, Tombstone, WatchEvent};
use cairn_memory::{Decision, DedupRecord, Effect, OpError, Slot, SlotSource};
use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::codec::{self, pair_key, split_pair, u64_key};
use super::engine::{cf, Engine, StoreError};

/// Names of the blobs kept in `sm_meta`.
pub mod meta {
    /// Encoded last applied log id (opaque here).
    pub const LAST_APPLIED: &[u8] = b"last_applied";
    /// Encoded last membership (opaque here).
    pub const MEMBERSHIP: &[u8] = b"membership";
    /// u64: the apply clock, the highest leader time applied (keeps time monotonic across
    /// leader changes).
    pub const CLOCK_MS: &[u8] = b"clock_ms";
}

/// A change-feed position: `(revision, seq)`.
pub type FeedPosition = (u64, u64);

#[derive(Clone)]
pub struct StateEngine {
    engine: Arc<Engine>,
}

fn decode_in<T: serde::de::DeserializeOwned>(
    family: &'static str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    codec::decode(bytes).map_err(|source| StoreError::Codec { cf: family, source })
}

impl StateEngine {
    pub fn new(engine: Arc<Engine>) -> Self {
        StateEngine { engine }
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn txn(&self) -> StateTxn<'_> {
        StateTxn {
            state: self,
            engine: &self.engine,
            batch: WriteBatch::default(),
            slots: HashMap::new(),
            dedup: HashMap::new(),
            dedup_by_time: BTreeMap::new(),
            feed_seq: 0,
        }
    }

    fn get(&self, family: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.engine.state_db().get_cf(self.engine.cf(family), key)?)
    }

    pub fn meta(&self, name: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(cf::SM_META, name)
    }

    pub fn clock_ms(&self) -> Result<u64, StoreError> {
        Ok(match self.meta(meta::CLOCK_MS)? {
            Some(b) => decode_in(cf::SM_META, &b)?,
            None => 0,
        })
    }

    /// The slot of `key`, checked on the way out of the disk. Always RocksDB, never the
    /// [`SlotCache`](super::slot_cache::SlotCache): an apply writes RocksDB and then the
    /// cache, and a reader that could see both might read the new slot (in a list scan)
    /// and then the old one (a cache hit) in between: a linearizable read going back.
    pub fn slot(&self, key: &str) -> Result<Option<Slot>, StoreError> {
        match self.get(cf::SLOTS, key.as_bytes())? {
            Some(stored) => self.decode_slot(&stored, key).map(Some),
            None => Ok(None),
        }
    }

    /// The slot of `key` for the apply path, through the slot cache, which it fills from
    /// RocksDB on a miss: nothing else writes `slots`, so what it read stays current until
    /// it commits, and only the apply path uses the cache, so it never sees it disagree
    /// with RocksDB.
    ///
    /// A slot stored at the previous format is cached re-encoded at the current one (the
    /// same slot: its history, which gave it its `fence_revision`, only grows with a write
    /// of the slot, which replaces the cached bytes), so the history is read once.
    fn slot_for_apply(&self, key: &str) -> Result<Option<Slot>, StoreError> {
        let cache = self.engine.slot_cache();
        if let Some(cached) = cache.get(key) {
            return self.decode_slot(&cached, key).map(Some);
        }
        let Some(stored) = self.get(cf::SLOTS, key.as_bytes())? else {
            return Ok(None);
        };
        let slot = self.decode_slot(&stored, key)?;
        let encoded: Arc<[u8]> = if stored.first() == Some(&codec::SLOT_FORMAT) {
            stored.into()
        } else {
            encode_slot(&slot).into()
        };
        cache.insert(key, encoded);
        Ok(Some(slot))
    }

    pub fn dedup(&self, request_id: &str) -> Result<Option<DedupRecord>, StoreError> {
        let Some(bytes) = self.get(cf::DEDUP, request_id.as_bytes())? else {
            return Ok(None);
        };
        Ok(Some(decode_in::<StoredDedup>(cf::DEDUP, &bytes)?.into()))
    }

    pub fn tombstone(&self, id: &str) -> Result<Option<Tombstone>, StoreError> {
        self.get(cf::TOMBSTONES, id.as_bytes())?
            .map(|b| decode_in(cf::TOMBSTONES, &b))
            .transpose()
    }

    /// The key's history, oldest first (bounded by `limit`).
    pub fn history(&self, key: &str, limit: usize) -> Result<Vec<HistoryEvent>, StoreError> {
        let prefix = pair_key(key, &[]);
        self.scan_prefix(cf::HISTORY, &prefix, limit, |_, v| decode_event(v))
    }

    /// Slots whose key starts with `prefix` and sorts after `after`, in key order.
    pub fn slots_after(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Slot>, StoreError> {
        let start = match after {
            // The smallest key strictly greater than `after`.
            Some(a) if a >= prefix => [a.as_bytes(), &[0]].concat(),
            _ => prefix.as_bytes().to_vec(),
        };
        let family = self.engine.cf(cf::SLOTS);
        let mut out = Vec::new();
        for item in self
            .engine
            .state_db()
            .iterator_cf(family, IteratorMode::From(&start, Direction::Forward))
        {
            let (k, v) = item?;
            if !k.starts_with(prefix.as_bytes()) || out.len() >= limit {
                break;
            }
            out.push(self.decode_slot(&v, std::str::from_utf8(&k).unwrap_or(""))?);
        }
        Ok(out)
    }

    /// Keys indexed under exactly `anchor`.
    pub fn keys_for_anchor(&self, anchor: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let prefix = pair_key(anchor, &[]);
        self.scan_prefix(cf::ANCHORS, &prefix, limit, |k, _| {
            let (_, key) = split_pair(k)
                .ok_or_else(|| StoreError::Invariant("anchor key without separator".into()))?;
            Ok(String::from_utf8_lossy(key).into_owned())
        })
    }

    /// `(anchor, key)` pairs for every anchor starting with `anchor_prefix`.
    pub fn keys_under_anchor_prefix(
        &self,
        anchor_prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.scan_prefix(cf::ANCHORS, anchor_prefix.as_bytes(), limit, |k, _| {
            let (a, key) = split_pair(k)
                .ok_or_else(|| StoreError::Invariant("anchor key without separator".into()))?;
            Ok((
                String::from_utf8_lossy(a).into_owned(),
                String::from_utf8_lossy(key).into_owned(),
            ))
        })
    }

    /// Change-feed events at or after position `(revision, seq)`, in order, with their
    /// positions (events of one entry share a revision and are numbered by `seq`).
    pub fn feed_page(
        &self,
        from: FeedPosition,
        limit: usize,
    ) -> Result<Vec<(FeedPosition, WatchEvent)>, StoreError> {
        let family = self.engine.cf(cf::FEED);
        let start = [u64_key(from.0), u64_key(from.1)].concat();
        let mut out = Vec::new();
        for item in self
            .engine
            .state_db()
            .iterator_cf(family, IteratorMode::From(&start, Direction::Forward))
        {
            if out.len() >= limit {
                break;
            }
            let (k, v) = item?;
            let position = (
                codec::u64_from_key(&k).unwrap_or(0),
                codec::u64_from_key(&k[8..]).unwrap_or(0),
            );
            out.push((position, decode_in(cf::FEED, &v)?));
        }
        Ok(out)
    }

    /// Oldest revision still in the change feed (None when empty).
    pub fn feed_first_revision(&self) -> Result<Option<u64>, StoreError> {
        let family = self.engine.cf(cf::FEED);
        match self
            .engine
            .state_db()
            .iterator_cf(family, IteratorMode::Start)
            .next()
        {
            None => Ok(None),
            Some(item) => Ok(codec::u64_from_key(&item?.0)),
        }
    }

    /// sha256 over every key and value of the state families except `sm_meta` (applied id,
    /// membership, clock: they legitimately differ between replicas caught up to different
    /// points), in order: two replicas that applied the same log have the same digest.
    /// Slots and history events are hashed in the current format, so a record still
    /// stored at format 3 hashes like the same record written by this build.
    pub fn digest(&self) -> Result<String, StoreError> {
        let snapshot = self.engine.state_db().snapshot();
        let mut hasher = Sha256::new();
        for family in cf::STATE {
            if family == cf::SM_META {
                continue;
            }
            hasher.update(family.as_bytes());
            for item in snapshot.iterator_cf(self.engine.cf(family), IteratorMode::Start) {
                let (k, mut v) = item?;
                if family == cf::SLOTS && v.first() != Some(&codec::SLOT_FORMAT) {
                    let slot = self.decode_slot(&v, std::str::from_utf8(&k).unwrap_or(""))?;
                    v = encode_slot(&slot).into_boxed_slice();
                }
                if family == cf::HISTORY && v.first() != Some(&codec::HISTORY_FORMAT) {
                    v = encode_event(decode_event(&v)?).into_boxed_slice();
                }
                hasher.update((k.len() as u64).to_be_bytes());
                hasher.update(&k);
                hasher.update((v.len() as u64).to_be_bytes());
                hasher.update(&v);
            }
        }
        Ok(hex::encode(hasher.finalize()))
    }

    fn scan_prefix<T>(
        &self,
        family: &'static str,
        prefix: &[u8],
        limit: usize,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut opts = ReadOptions::default();
        opts.set_prefix_same_as_start(false);
        let handle = self.engine.cf(family);
        let mut out = Vec::new();
        for item in self.engine.state_db().iterator_cf_opt(
            handle,
            opts,
            IteratorMode::From(prefix, Direction::Forward),
        ) {
            let (k, v) = item?;
            if !k.starts_with(prefix) || out.len() >= limit {
                break;
            }
            out.push(f(&k, &v)?);
        }
        Ok(out)
    }
}

/// How a [`DedupRecord`] is stored. Its results are `MutationResult`s, an API type whose
/// JSON form omits an absent `already`/`tombstone` (`skip_serializing_if`). bincode has no
/// field names, so an omitted field cannot be read back (the record fails to decode, or a
/// later byte is misread as the field). This mirror keeps every field positional; the
/// conversions destructure without `..`, so a new API field fails to compile here.
#[derive(Serialize, Deserialize)]
struct StoredDedup {
    payload_hash: String,
    decision: StoredDecision,
    revision: u64,
    decided_at_ms: u64,
}

#[derive(Serialize, Deserialize)]
enum StoredDecision {
    Applied(Vec<StoredResult>),
    Rejected {
        error: OpError,
        op_index: Option<u64>,
    },
}

#[derive(Serialize, Deserialize)]
struct StoredResult {
    key: String,
    state: State,
    version: u64,
    generation: u64,
    forget_epoch: u64,
    revision: u64,
    replayed: bool,
    already: Option<bool>,
    tombstone: Option<Tombstone>,
}

impl From<&DedupRecord> for StoredDedup {
    fn from(record: &DedupRecord) -> Self {
        let DedupRecord {
            payload_hash,
            decision,
            revision,
            decided_at_ms,
        } = record.clone();
        let decision = match decision {
            Decision::Applied(results) => {
                StoredDecision::Applied(results.into_iter().map(StoredResult::from).collect())
            }
            Decision::Rejected { error, op_index } => StoredDecision::Rejected {
                error,
                op_index: op_index.map(|i| i as u64),
            },
        };
        StoredDedup {
            payload_hash,
            decision,
            revision,
            decided_at_ms,
        }
    }
}

impl From<StoredDedup> for DedupRecord {
    fn from(stored: StoredDedup) -> Self {
        let StoredDedup {
            payload_hash,
            decision,
            revision,
            decided_at_ms,
        } = stored;
        let decision = match decision {
            StoredDecision::Applied(results) => {
                Decision::Applied(results.into_iter().map(MutationResult::from).collect())
            }
            StoredDecision::Rejected { error, op_index } => Decision::Rejected {
                error,
                op_index: op_index.map(|i| i as usize),
            },
        };
        DedupRecord {
            payload_hash,
            decision,
            revision,
            decided_at_ms,
        }
    }
}

/// `From` both ways between two structs with the same fields. Each side is destructured
/// without `..`, so a field added to either struct fails to compile here until the mirror
/// is updated.
macro_rules! mirror {
    ($a:ident <-> $b:ident { $($field:ident),* $(,)? }) => {
        impl From<$a> for $b {
            fn from(value: $a) -> $b {
                let $a { $($field),* } = value;
                $b { $($field),* }
            }
        }
        impl From<$b> for $a {
            fn from(value: $b) -> $a {
                let $b { $($field),* } = value;
                $a { $($field),* }
            }
        }
    };
}

mirror!(StoredResult <-> MutationResult {
    key, state, version, generation, forget_epoch, revision, replayed, already, tombstone,
});

/// How a [`HistoryEvent`] is stored, at [`codec::HISTORY_FORMAT`]. The API type's JSON
/// form omits an absent `by`/`anchor`/`observed_hash` (`skip_serializing_if`), which
/// bincode cannot read back (see [`StoredDedup`]); this mirror keeps every field
/// positional.
#[derive(Serialize, Deserialize)]
struct StoredEvent {
    kind: EventKind,
    version: u64,
    revision: u64,
    actor: String,
    reason: Option<String>,
    at: u64,
    value_hash: Option<String>,
    by: Option<String>,
    anchor: Option<String>,
    observed_hash: Option<String>,
}

mirror!(StoredEvent <-> HistoryEvent {
    kind, version, revision, actor, reason, at, value_hash, by, anchor, observed_hash,
});

/// The layout of a [`HistoryEvent`] stored at codec format 3: the fields it had before
/// format 4 added `by`, `anchor` and `observed_hash`, in the same order.
#[derive(Serialize, Deserialize)]
struct EventV3 {
    kind: EventKind,
    version: u64,
    revision: u64,
    actor: String,
    reason: Option<String>,
    at: u64,
    value_hash: Option<String>,
}

impl From<EventV3> for HistoryEvent {
    /// A format-3 event keeps its `reason` as written then (a supersede's or a stale
    /// flag's names the key or anchor in its text); the format-4 fields are absent.
    fn from(old: EventV3) -> HistoryEvent {
        let EventV3 {
            kind,
            version,
            revision,
            actor,
            reason,
            at,
            value_hash,
        } = old;
        HistoryEvent {
            kind,
            version,
            revision,
            actor,
            reason,
            at,
            value_hash,
            by: None,
            anchor: None,
            observed_hash: None,
        }
    }
}

/// Encodes a history event for the `history` family.
/// Takes the event by value: the apply path owns it, and converting moves its strings.
fn encode_event(event: HistoryEvent) -> Vec<u8> {
    codec::encode_at(codec::HISTORY_FORMAT, &StoredEvent::from(event))
}

/// Decodes a history event stored at [`codec::HISTORY_FORMAT`] or at format 3.
fn decode_event(bytes: &[u8]) -> Result<HistoryEvent, StoreError> {
    let codec_err = |source| StoreError::Codec {
        cf: cf::HISTORY,
        source,
    };
    Ok(match codec::split_format(bytes).map_err(codec_err)? {
        (codec::HISTORY_FORMAT, body) => codec::decode_body::<StoredEvent>(body)
            .map_err(codec_err)?
            .into(),
        (codec::FORMAT, body) => codec::decode_body::<EventV3>(body)
            .map_err(codec_err)?
            .into(),
        (other, _) => return Err(codec_err(codec::CodecError::UnknownFormat(other))),
    })
}

impl StateEngine {
    /// Decodes a slot read back (from RocksDB or the slot cache) and checks it.
    ///
    /// A slot stored at format 3 ([`codec::FORMAT`], before [`codec::SLOT_FORMAT`]) has no
    /// `fence_revision`: it gets the one the rules would have kept, recomputed from the
    /// key's history ([`cairn_memory::conditions::fence_from_history`]). History holds an
    /// event for every change with its revision and is never pruned, so every replica
    /// derives the same fence, and the same as a replica that applied those entries with
    /// this build. The slot is rewritten at format 4 by its next change.
    fn decode_slot(&self, bytes: &[u8], key: &str) -> Result<Slot, StoreError> {
        let codec_err = |source| StoreError::Codec {
            cf: cf::SLOTS,
            source,
        };
        let slot = match codec::split_format(bytes).map_err(codec_err)? {
            (codec::SLOT_FORMAT, body) => codec::decode_body::<Slot>(body).map_err(codec_err)?,
            (codec::FORMAT, body) => {
                let old: SlotV3 = codec::decode_body(body).map_err(codec_err)?;
                let history = self.history(key, usize::MAX)?;
                old.into_slot(cairn_memory::conditions::fence_from_history(&history))
            }
            (other, _) => return Err(codec_err(codec::CodecError::UnknownFormat(other))),
        };
        check_slot(&slot, key)?;
        Ok(slot)
    }
}

/// Encodes a slot for the `slots` family and the slot cache.
fn encode_slot(slot: &Slot) -> Vec<u8> {
    codec::encode_at(codec::SLOT_FORMAT, slot)
}

/// The layout of a [`Slot`] stored at codec format 3: the same fields in the same order,
/// without `fence_revision` (bincode has no field names, so the old bytes only decode as
/// this). Both conversions list every field without `..`: a field added to `Slot` fails to
/// compile here until the format question is answered.
#[derive(Serialize, Deserialize)]
struct SlotV3 {
    key: String,
    state: State,
    version: u64,
    generation: u64,
    forget_epoch: u64,
    revision: u64,
    create_revision: u64,
    value: Option<String>,
    value_hash: Option<String>,
    value_revision: u64,
    meta: cairn_api::Meta,
    tombstone: Option<Tombstone>,
    revocation: Option<cairn_api::Revocation>,
    stale: Vec<cairn_api::StaleFlag>,
    superseded_by: Option<String>,
}

impl SlotV3 {
    fn into_slot(self, fence_revision: u64) -> Slot {
        let SlotV3 {
            key,
            state,
            version,
            generation,
            forget_epoch,
            revision,
            create_revision,
            value,
            value_hash,
            value_revision,
            meta,
            tombstone,
            revocation,
            stale,
            superseded_by,
        } = self;
        Slot {
            key,
            state,
            version,
            generation,
            forget_epoch,
            revision,
            create_revision,
            value,
            value_hash,
            value_revision,
            meta,
            tombstone,
            revocation,
            stale,
            superseded_by,
            fence_revision,
        }
    }
}

/// Read-side assertion: a slot read back must be the key it is stored under and must hold a
/// value exactly when its state allows one.
fn check_slot(slot: &Slot, key: &str) -> Result<(), StoreError> {
    let value_allowed = matches!(slot.state, State::Active | State::Revoked);
    if slot.key != key || slot.value.is_some() != value_allowed || slot.state == State::Absent {
        return Err(StoreError::Invariant(format!(
            "slot under {key:?} is {:?} in state {} with value present={}",
            slot.key,
            slot.state,
            slot.value.is_some()
        )));
    }
    Ok(())
}

/// One atomic write to the state machine.
pub struct StateTxn<'a> {
    state: &'a StateEngine,
    engine: &'a Engine,
    batch: WriteBatch,
    /// Pending slot writes (decoded and encoded), read back by later commands before the
    /// batch is committed, and cached once it is.
    slots: HashMap<String, (Slot, Arc<[u8]>)>,
    /// Pending dedup writes: `None` is a record expired by an earlier entry of this txn.
    dedup: HashMap<String, Option<DedupRecord>>,
    /// Pending changes to the `dedup_by_time` index (`true`: put, `false`: deleted), so
    /// that expiry sees what earlier entries of this txn did to it.
    dedup_by_time: BTreeMap<Vec<u8>, bool>,
    feed_seq: u32,
}

impl SlotSource for StateTxn<'_> {
    type Error = StoreError;

    fn slot(&self, key: &str) -> Result<Option<Slot>, StoreError> {
        match self.slots.get(key) {
            Some((s, _)) => Ok(Some(s.clone())),
            None => self.state.slot_for_apply(key),
        }
    }

    fn dedup(&self, request_id: &str) -> Result<Option<DedupRecord>, StoreError> {
        match self.dedup.get(request_id) {
            Some(d) => Ok(d.clone()),
            None => self.state.dedup(request_id),
        }
    }
}

impl<'a> StateTxn<'a> {
    fn cf(&self, name: &'static str) -> &'a rocksdb::ColumnFamily {
        self.engine.cf(name)
    }

    /// Stages the effects of one applied command.
    pub fn apply_effects(&mut self, effects: Vec<Effect>) -> Result<(), StoreError> {
        for effect in effects {
            self.apply_effect(effect)?;
        }
        Ok(())
    }

    fn apply_effect(&mut self, effect: Effect) -> Result<(), StoreError> {
        match effect {
            Effect::PutSlot(slot) => {
                check_slot(&slot, &slot.key)?;
                let encoded: Arc<[u8]> = encode_slot(&slot).into();
                self.batch
                    .put_cf(self.cf(cf::SLOTS), slot.key.as_bytes(), &encoded);
                self.slots.insert(slot.key.clone(), (slot, encoded));
            }
            Effect::AppendEvent { key, event } => {
                let k = pair_key(&key, &u64_key(event.version));
                self.batch
                    .put_cf(self.cf(cf::HISTORY), k, encode_event(event));
            }
            Effect::PutTombstone(t) => {
                self.batch
                    .put_cf(self.cf(cf::TOMBSTONES), t.id.as_bytes(), codec::encode(&t));
            }
            Effect::AnchorAdd { anchor, key } => {
                self.batch
                    .put_cf(self.cf(cf::ANCHORS), pair_key(&anchor, key.as_bytes()), []);
            }
            Effect::AnchorRemove { anchor, key } => {
                self.batch
                    .delete_cf(self.cf(cf::ANCHORS), pair_key(&anchor, key.as_bytes()));
            }
            Effect::PutDedup { request_id, record } => {
                let by_time = [&u64_key(record.decided_at_ms)[..], request_id.as_bytes()].concat();
                self.batch.put_cf(self.cf(cf::DEDUP_BY_TIME), &by_time, []);
                self.dedup_by_time.insert(by_time, true);
                let stored = StoredDedup::from(&record);
                self.batch.put_cf(
                    self.cf(cf::DEDUP),
                    request_id.as_bytes(),
                    codec::encode(&stored),
                );
                self.dedup.insert(request_id, Some(record));
            }
            Effect::Watch(event) => {
                let k = [u64_key(event.revision), u64_key(self.feed_seq as u64)].concat();
                self.feed_seq += 1;
                self.batch
                    .put_cf(self.cf(cf::FEED), k, codec::encode(&event));
            }
        }
        Ok(())
    }

    /// Starts a new revision in the change feed (events of one entry share a revision).
    pub fn begin_revision(&mut self) {
        self.feed_seq = 0;
    }

    /// Deletes dedup records first applied before `cutoff_ms`, at most `max` of them (apply
    /// time stays bounded; the rest go with later entries). Deterministic: every replica
    /// iterates the same ordered index, as earlier entries left it whether or not they were
    /// committed in the same apply call (openraft's batching differs between replicas).
    pub fn expire_dedup(&mut self, cutoff_ms: u64, max: usize) -> Result<(), StoreError> {
        for k in self.expired_index_keys(cutoff_ms, max)? {
            let at = codec::u64_from_key(&k).unwrap_or(u64::MAX);
            let request_id = String::from_utf8_lossy(&k[8..]).into_owned();
            // The id may have been applied again after it expired: only the record that
            // this index entry points at is dropped.
            let current = SlotSource::dedup(self, &request_id)?;
            if current.is_some_and(|r| r.decided_at_ms == at) {
                self.batch
                    .delete_cf(self.cf(cf::DEDUP), request_id.as_bytes());
                self.dedup.insert(request_id, None);
            }
            self.batch.delete_cf(self.cf(cf::DEDUP_BY_TIME), &k);
            self.dedup_by_time.insert(k, false);
        }
        Ok(())
    }

    /// The first `max` `dedup_by_time` keys below `cutoff_ms` in the index as this txn has
    /// changed it so far: the committed keys it has not deleted, plus the keys it put.
    fn expired_index_keys(&self, cutoff_ms: u64, max: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        let below_cutoff = |k: &[u8]| codec::u64_from_key(k).unwrap_or(u64::MAX) < cutoff_ms;
        let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
        let by_time = self.cf(cf::DEDUP_BY_TIME);
        // Reads at most `max` kept keys plus the keys this txn deleted (which are skipped).
        for item in self
            .state
            .engine
            .state_db()
            .iterator_cf(by_time, IteratorMode::Start)
        {
            let (k, _) = item?;
            if !below_cutoff(&k) || keys.len() >= max {
                break;
            }
            if self.dedup_by_time.get(&*k) != Some(&false) {
                keys.insert(k.into_vec());
            }
        }
        let put = self
            .dedup_by_time
            .iter()
            .filter(|(k, put)| **put && below_cutoff(k));
        keys.extend(put.take(max).map(|(k, _)| k.clone()));
        Ok(keys.into_iter().take(max).collect())
    }

    /// Drops change-feed events older than `keep_from_revision`.
    pub fn trim_feed(&mut self, keep_from_revision: u64) {
        self.batch
            .delete_range_cf(self.cf(cf::FEED), u64_key(0), u64_key(keep_from_revision));
    }

    pub fn put_meta(&mut self, name: &[u8], bytes: &[u8]) {
        self.batch.put_cf(self.cf(cf::SM_META), name, bytes);
    }

    pub fn put_clock_ms(&mut self, clock_ms: u64) {
        self.put_meta(meta::CLOCK_MS, &codec::encode(&clock_ms));
    }

    /// Commits everything staged, atomically, to the memtables only ([`Engine::unlogged`]):
    /// the Raft log, synced before any entry is applied, is this write's log. A crash loses
    /// what no flush has reached, back to one consistent applied index (atomic flush), and
    /// openraft re-applies from there to the committed index at restart.
    ///
    /// The slots it wrote go into the slot cache after the write (only later applies
    /// read it).
    pub fn commit(self) -> Result<(), StoreError> {
        let engine = &self.state.engine;
        engine
            .state_db()
            .write_opt(self.batch, &Engine::unlogged())?;
        for (key, (_, encoded)) in self.slots {
            engine.slot_cache().insert(&key, encoded);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::engine::EngineOptions;
    use cairn_memory::{reinstate, revoke, supersede, write, Change, Ctx};

    fn ctx(revision: u64) -> Ctx {
        Ctx {
            revision,
            now_ms: 1_700_000_000_000 + revision,
        }
    }

    fn commit(state: &StateEngine, change: Change) -> Slot {
        let mut txn = state.txn();
        let key = change.slot.key.clone();
        let mut effects = vec![Effect::PutSlot(change.slot.clone())];
        effects.extend(change.event.map(|event| Effect::AppendEvent { key, event }));
        txn.apply_effects(effects).unwrap();
        txn.commit().unwrap();
        change.slot
    }

    /// Stores `slot` as a build before format 4 did: format 3, no `fence_revision`.
    fn store_as_format_3(state: &StateEngine, slot: &Slot) {
        let s = slot.clone();
        let old = SlotV3 {
            key: s.key,
            state: s.state,
            version: s.version,
            generation: s.generation,
            forget_epoch: s.forget_epoch,
            revision: s.revision,
            create_revision: s.create_revision,
            value: s.value,
            value_hash: s.value_hash,
            value_revision: s.value_revision,
            meta: s.meta,
            tombstone: s.tombstone,
            revocation: s.revocation,
            stale: s.stale,
            superseded_by: s.superseded_by,
        };
        let bytes = codec::encode(&old);
        assert_eq!(bytes[0], 3);
        let engine = state.engine();
        engine
            .state_db()
            .put_cf(engine.cf(cf::SLOTS), slot.key.as_bytes(), bytes)
            .unwrap();
        engine.slot_cache().clear();
    }

    #[test]
    fn a_format_3_slot_gets_its_fence_from_history() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateEngine::new(Engine::open(dir.path(), &EngineOptions::default()).unwrap());
        let w = |v| write::Write {
            value: v,
            actor: "a",
            source: None,
            anchors: &[],
            tags: &[],
            clear_tombstone: false,
            override_revocation: false,
            reason: None,
        };
        // write 52, revoke 53, reinstate 54, write 55: the fence is the revoke's.
        let s = commit(
            &state,
            write::apply(None, "f/1", &w("1"), &ctx(52)).unwrap(),
        );
        let s = commit(
            &state,
            revoke::apply(Some(&s), "f/1", "a", "r", &ctx(53)).unwrap(),
        );
        let s = commit(
            &state,
            reinstate::apply(Some(&s), "f/1", "a", None, &ctx(54)).unwrap(),
        );
        let s = commit(
            &state,
            write::apply(Some(&s), "f/1", &w("2"), &ctx(55)).unwrap(),
        );
        assert_eq!(s.fence_revision, 53);
        let digest = state.digest().unwrap();
        assert_eq!(state.slot("f/1").unwrap().as_ref(), Some(&s));

        store_as_format_3(&state, &s);
        assert_eq!(state.slot("f/1").unwrap().as_ref(), Some(&s));
        assert_eq!(state.slots_after("f/", None, 10).unwrap(), vec![s.clone()]);
        assert_eq!(state.digest().unwrap(), digest, "same slot, same digest");
        let txn = state.txn();
        assert_eq!(txn.slot("f/1").unwrap().as_ref(), Some(&s));
        // The apply path cached it at the current format.
        let cached = state.engine().slot_cache().get("f/1").unwrap();
        assert_eq!(cached[0], codec::SLOT_FORMAT);
        assert_eq!(&*cached, &encode_slot(&s)[..]);

        // A key without history of a fencing change has none.
        let other = commit(&state, write::apply(None, "g", &w("1"), &ctx(60)).unwrap());
        store_as_format_3(&state, &other);
        assert_eq!(state.slot("g").unwrap().unwrap().fence_revision, 0);
    }

    #[test]
    fn a_format_3_history_event_still_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateEngine::new(Engine::open(dir.path(), &EngineOptions::default()).unwrap());
        let w = write::Write {
            value: "1",
            actor: "a",
            source: None,
            anchors: &[],
            tags: &[],
            clear_tombstone: false,
            override_revocation: false,
            reason: Some("first"),
        };
        let s = commit(&state, write::apply(None, "h", &w, &ctx(70)).unwrap());
        let superseding = supersede::apply(Some(&s), "h", "h2", "a", None, &ctx(71)).unwrap();
        commit(&state, superseding);
        let events = state.history("h", 10).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].by.as_deref(), Some("h2"));
        assert_eq!(events[1].reason, None);
        let digest = state.digest().unwrap();

        // The write's event as a build before format 4 stored it.
        let old = &events[0];
        let bytes = codec::encode(&EventV3 {
            kind: old.kind,
            version: old.version,
            revision: old.revision,
            actor: old.actor.clone(),
            reason: old.reason.clone(),
            at: old.at,
            value_hash: old.value_hash.clone(),
        });
        assert_eq!(bytes[0], 3);
        let engine = state.engine();
        let k = pair_key("h", &u64_key(old.version));
        let stored = engine
            .state_db()
            .get_cf(engine.cf(cf::HISTORY), &k)
            .unwrap()
            .unwrap();
        assert_eq!(stored[0], codec::HISTORY_FORMAT);
        engine
            .state_db()
            .put_cf(engine.cf(cf::HISTORY), &k, &bytes)
            .unwrap();

        assert_eq!(state.history("h", 10).unwrap(), events);
        assert_eq!(state.digest().unwrap(), digest, "same event, same digest");

        // A format-3 record's extension fields are absent.
        let superseded_v3 = codec::encode(&EventV3 {
            kind: EventKind::Superseded,
            version: 2,
            revision: 71,
            actor: "a".into(),
            reason: Some("superseded by h2".into()),
            at: 5,
            value_hash: None,
        });
        let event = decode_event(&superseded_v3).unwrap();
        assert_eq!(event.reason.as_deref(), Some("superseded by h2"));
        assert_eq!(
            (event.by, event.anchor, event.observed_hash),
            (None, None, None)
        );

        let err = decode_event(&[9, 0, 0]).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Codec {
                    source: codec::CodecError::UnknownFormat(9),
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_slot_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateEngine::new(Engine::open(dir.path(), &EngineOptions::default()).unwrap());
        let engine = state.engine();
        engine
            .state_db()
            .put_cf(engine.cf(cf::SLOTS), b"k", [9, 0, 0])
            .unwrap();
        let err = state.slot("k").unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Codec {
                    source: codec::CodecError::UnknownFormat(9),
                    ..
                }
            ),
            "{err}"
        );
    }
}
