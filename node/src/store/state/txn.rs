//! [`StateTxn`]: one atomic write to the state machine, the effects of one `apply` call.
//!
//! It reads through its own pending writes (slots, dedup records, the `dedup_by_time`
//! index), so later commands of one Raft entry, and later entries of one apply call, see
//! earlier ones; and it commits everything, including the applied log id, membership and
//! the apply clock, as ONE `WriteBatch`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use cairn_memory::{DedupRecord, Effect, Slot, SlotSource};
use rocksdb::{IteratorMode, WriteBatch};

use super::slots::check_slot;
use super::{meta, StateEngine};
use crate::store::codec::{self, pair_key, u64_key};
use crate::store::engine::{cf, Engine, StoreError};
use crate::store::records::{dedup, feed, history, slot, tombstone};

impl StateEngine {
    pub fn txn(&self) -> StateTxn<'_> {
        StateTxn {
            state: self,
            engine: &self.engine,
            batch: WriteBatch::default(),
            slots: HashMap::default(),
            dedup: HashMap::default(),
            dedup_by_time: BTreeMap::new(),
            dedup_floor_ms: self.engine.dedup_floor_ms(),
            feed_seq: 0,
        }
    }
}

/// One atomic write to the state machine.
pub struct StateTxn<'a> {
    state: &'a StateEngine,
    engine: &'a Engine,
    batch: WriteBatch,
    /// Pending slot writes (decoded and encoded), read back by later commands before the
    /// batch is committed, and cached once it is.
    slots: HashMap<String, (Slot, Bytes), foldhash::fast::RandomState>,
    /// Pending dedup writes: `None` is a record expired by an earlier entry of this txn.
    dedup: HashMap<String, Option<DedupRecord>, foldhash::fast::RandomState>,
    /// Pending changes to the `dedup_by_time` index (`true`: put, `false`: deleted), so
    /// that expiry sees what earlier entries of this txn did to it.
    dedup_by_time: BTreeMap<Vec<u8>, bool>,
    /// A lower bound on the time of every committed `dedup_by_time` key this txn has not
    /// deleted ([`Engine`]'s floor, raised by this txn's scans); its own puts are not in it.
    dedup_floor_ms: u64,
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
                // `Bytes` takes the encoding's allocation as it is: no copy of a large slot.
                let encoded: Bytes = slot::encode(&slot).into();
                self.batch
                    .put_cf(self.cf(cf::SLOTS), slot.key.as_bytes(), &encoded);
                self.slots.insert(slot.key.clone(), (slot, encoded));
            }
            Effect::AppendEvent { key, event } => {
                let k = pair_key(&key, &u64_key(event.version));
                self.batch
                    .put_cf(self.cf(cf::HISTORY), k, history::encode(&event));
            }
            Effect::PutTombstone(t) => {
                self.batch.put_cf(
                    self.cf(cf::TOMBSTONES),
                    t.id.as_bytes(),
                    tombstone::encode(&t),
                );
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
                self.batch.put_cf(
                    self.cf(cf::DEDUP),
                    request_id.as_bytes(),
                    dedup::encode(&record),
                );
                self.dedup.insert(request_id, Some(record));
            }
            Effect::Watch(event) => {
                let k = [u64_key(event.revision), u64_key(self.feed_seq as u64)].concat();
                self.feed_seq += 1;
                self.batch
                    .put_cf(self.cf(cf::FEED), k, feed::encode(&event));
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
    ///
    /// The committed index is scanned only when the cutoff is above the known floor of its
    /// times: below it, a scan would find nothing to expire, so skipping it changes
    /// nothing on any replica.
    pub fn expire_dedup(&mut self, cutoff_ms: u64, max: usize) -> Result<(), StoreError> {
        for k in self.expired_index_keys(cutoff_ms, max)? {
            let at = key_time_ms(&k);
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
    /// Raises the txn's floor to what the scan saw remain.
    fn expired_index_keys(
        &mut self,
        cutoff_ms: u64,
        max: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let below_cutoff = |k: &[u8]| key_time_ms(k) < cutoff_ms;
        let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
        if cutoff_ms > self.dedup_floor_ms {
            let (committed, stopped_at_ms) = self.committed_keys_below(cutoff_ms, max)?;
            keys = committed;
            self.dedup_floor_ms = stopped_at_ms;
        }
        let put = self
            .dedup_by_time
            .iter()
            .filter(|(k, put)| **put && below_cutoff(k));
        keys.extend(put.take(max).map(|(k, _)| k.clone()));
        let mut expired: Vec<Vec<u8>> = keys.into_iter().collect();
        if let Some(first_kept) = expired.get(max) {
            // Committed keys collected but not deleted now stay in the index.
            self.dedup_floor_ms = self.dedup_floor_ms.min(key_time_ms(first_kept));
            expired.truncate(max);
        }
        Ok(expired)
    }

    /// Up to `max` committed `dedup_by_time` keys below `cutoff_ms` that this txn has not
    /// deleted, and the time of the key the scan stopped at (`u64::MAX` at the end of the
    /// index): every other committed key is at least that old.
    fn committed_keys_below(
        &self,
        cutoff_ms: u64,
        max: usize,
    ) -> Result<(BTreeSet<Vec<u8>>, u64), StoreError> {
        let mut keys = BTreeSet::new();
        let by_time = self.cf(cf::DEDUP_BY_TIME);
        // Reads at most `max` kept keys plus the keys this txn deleted (which are skipped).
        for item in self
            .state
            .engine
            .state_db()
            .iterator_cf(by_time, IteratorMode::Start)
        {
            let (k, _) = item?;
            let at_ms = key_time_ms(&k);
            if at_ms >= cutoff_ms || keys.len() >= max {
                return Ok((keys, at_ms));
            }
            if self.dedup_by_time.get(&*k) != Some(&false) {
                keys.insert(k.into_vec());
            }
        }
        Ok((keys, u64::MAX))
    }

    /// Drops change-feed events older than `keep_from_revision`.
    pub fn trim_feed(&mut self, keep_from_revision: u64) {
        self.batch
            .delete_range_cf(self.cf(cf::FEED), u64_key(0), u64_key(keep_from_revision));
    }

    pub fn put_meta(&mut self, name: &[u8], bytes: &[u8]) {
        self.batch.put_cf(self.cf(cf::SM_META), name, bytes);
    }

    pub fn put_access(&mut self, record: &cairn_access::state::AccessRecord) {
        self.put_meta(meta::ACCESS, &super::super::records::access::encode(record));
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
        // The index is ordered by time: the first key put is the oldest.
        let put_floor_ms = self
            .dedup_by_time
            .iter()
            .find(|(_, put)| **put)
            .map_or(u64::MAX, |(k, _)| key_time_ms(k));
        engine
            .state_db()
            .write_opt(self.batch, &Engine::unlogged())?;
        engine.set_dedup_floor_ms(self.dedup_floor_ms.min(put_floor_ms));
        for (key, (_, encoded)) in self.slots {
            engine.slot_cache().insert(&key, encoded);
        }
        Ok(())
    }
}

/// The time a `dedup_by_time` key starts with (`u64::MAX` for a malformed key, which is
/// then never expired, as before).
fn key_time_ms(key: &[u8]) -> u64 {
    codec::u64_from_key(key).unwrap_or(u64::MAX)
}
