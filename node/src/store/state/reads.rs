//! Read queries over the state families. They read RocksDB only, never the slot cache
//! (see [`StateEngine::slot`]), and check what they decode.

use cairn_memory::{DedupRecord, HistoryEvent, Slot, Tombstone, WatchEvent};
use rocksdb::{Direction, IteratorMode, ReadOptions};
use sha2::{Digest, Sha256};

use super::{in_family, StateEngine};
use crate::store::codec::{self, pair_key, split_pair, u64_key};
use crate::store::engine::{cf, Engine, StoreError};
use crate::store::records::{dedup, feed, history, slot, tombstone};

/// A change-feed position: `(revision, seq)`.
pub type FeedPosition = (u64, u64);

impl StateEngine {
    /// The slot of `key`, checked on the way out of the disk. Always RocksDB, never the
    /// [`SlotCache`](crate::store::slot_cache::SlotCache): an apply writes RocksDB and then
    /// the cache, and a reader that could see both might read the new slot (in a list scan)
    /// and then the old one (a cache hit) in between: a linearizable read going back.
    pub fn slot(&self, key: &str) -> Result<Option<Slot>, StoreError> {
        match self.get(cf::SLOTS, key.as_bytes())? {
            Some(stored) => self.decode_slot(&stored, key).map(Some),
            None => Ok(None),
        }
    }

    pub fn dedup(&self, request_id: &str) -> Result<Option<DedupRecord>, StoreError> {
        self.get(cf::DEDUP, request_id.as_bytes())?
            .map(|b| dedup::decode(&b).map_err(in_family(cf::DEDUP)))
            .transpose()
    }

    pub fn tombstone(&self, id: &str) -> Result<Option<Tombstone>, StoreError> {
        self.get(cf::TOMBSTONES, id.as_bytes())?
            .map(|b| tombstone::decode(&b).map_err(in_family(cf::TOMBSTONES)))
            .transpose()
    }

    /// The key's newest `limit` history events, oldest first. The newest, not the oldest:
    /// a key changed more often than `limit` still shows how it came to be as it is (its
    /// forget, its revocation), and the first event's version says where the list starts.
    pub fn history(&self, key: &str, limit: usize) -> Result<Vec<HistoryEvent>, StoreError> {
        let prefix = pair_key(key, &[]);
        let newest_possible = pair_key(key, &u64_key(u64::MAX));
        let mut opts = ReadOptions::default();
        opts.set_prefix_same_as_start(false);
        let mut events = Vec::new();
        for item in self.engine.state_db().iterator_cf_opt(
            self.engine.cf(cf::HISTORY),
            opts,
            IteratorMode::From(&newest_possible, Direction::Reverse),
        ) {
            let (k, v) = item?;
            if !k.starts_with(&prefix) || events.len() >= limit {
                break;
            }
            events.push(history::decode(&v).map_err(in_family(cf::HISTORY))?);
        }
        events.reverse();
        Ok(events)
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
            out.push((position, feed::decode(&v).map_err(in_family(cf::FEED))?));
        }
        Ok(out)
    }

    /// sha256 over every key and value of the state families except `sm_meta` (applied id,
    /// membership, clock: they legitimately differ between replicas caught up to different
    /// points), in order, and then the access record (principals, grants, `acl_revision`,
    /// from `sm_meta`): two replicas that applied the same log have the same digest.
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
            let family_handle = self.engine.cf(family);
            let scan = Engine::full_scan();
            for item in snapshot.iterator_cf_opt(family_handle, scan, IteratorMode::Start) {
                let (k, mut v) = item?;
                if family == cf::SLOTS && !slot::is_current(&v) {
                    let s = self.decode_slot(&v, std::str::from_utf8(&k).unwrap_or(""))?;
                    v = slot::encode(&s).into_boxed_slice();
                }
                if family == cf::HISTORY && !history::is_current(&v) {
                    let event = history::decode(&v).map_err(in_family(cf::HISTORY))?;
                    v = history::encode(&event).into_boxed_slice();
                }
                hasher.update((k.len() as u64).to_be_bytes());
                hasher.update(&k);
                hasher.update((v.len() as u64).to_be_bytes());
                hasher.update(&v);
            }
        }
        let access = snapshot.get_cf(self.engine.cf(cf::SM_META), super::meta::ACCESS)?;
        hasher.update(b"access");
        hasher.update(access.unwrap_or_default());
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
