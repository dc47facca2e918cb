//! A bounded in-memory cache of encoded slots, in front of the `slots` family, for the
//! apply path.
//!
//! Every mutation reads its key's slot before it writes it, on every replica, and the
//! RocksDB point lookup (memtable bloom, SST index and filter, block cache, block search,
//! a copy) was a fifth of a follower's CPU under writes. A hit here is one hash lookup
//! (the slot is still decoded and checked, as one read from disk is).
//! `examples/apply_bench` (100k keys, 32 upserts per entry, three interleaved runs):
//! 11.6 / 12.3 / 12.5 µs per upsert without the cache, 9.9 / 10.2 / 10.8 with 64 MiB
//! (every key cached). End to end, 256 writers over 100k keys (interleaved 6 s points,
//! four rounds, an earlier version of this cache): 12.9k ops/s without it, 13.7k with
//! 64 MiB that held 80% of the keys, 14.9k with 128 MiB that held all of them.
//!
//! Eviction is CLOCK (second chance), an approximation of LRU in the memory of the entries
//! alone: a lookup marks its entry; when room is needed, a hand sweeps the entries,
//! clearing marks, and evicts the first unmarked one. A cache that holds the working set
//! therefore hits every time (two generations of half the capacity each, tried first,
//! needed twice the working set: 64 MiB hit 80% of a 55 MiB working set).
//!
//! Invariants:
//! - Bounded: the bytes held (keys, encoded slots and a fixed per-entry overhead) never
//!   exceed the capacity; an entry larger than a quarter of it is not cached.
//! - Used by the apply path alone, which is also the only writer of the `slots` family:
//!   it caches a slot it read from RocksDB (the committed state, which nothing can change
//!   before that apply commits) or one it has just committed, so a cached slot is never
//!   stale. Readers go to RocksDB: between an apply's RocksDB write and its cache update,
//!   a reader of both could see a key's new slot and then its old one.
//! - A snapshot install clears the cache before it replaces the state families.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

/// Bytes counted per entry on top of its encoded slot and (twice held) key: the map's
/// bucket, the ring's entry, the heap headers and the `Bytes` counts.
const ENTRY_OVERHEAD_BYTES: usize = 96;

pub struct SlotCache {
    capacity_bytes: usize,
    clock: Mutex<Clock>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Clock {
    /// Key → position in `ring`. foldhash, seeded per process like hashbrown's default:
    /// SipHash was 2-3% of a node's CPU under writes across this map and the apply's.
    index: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
    ring: Vec<Entry>,
    hand: usize,
    bytes: usize,
}

struct Entry {
    key: Box<str>,
    slot: Bytes,
    /// Used since the hand last passed: spared once.
    marked: bool,
}

/// What `/metrics` shows of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub bytes: usize,
    pub entries: usize,
}

fn cost(key: &str, slot: &[u8]) -> usize {
    2 * key.len() + slot.len() + ENTRY_OVERHEAD_BYTES
}

impl SlotCache {
    /// A cache holding at most `capacity_bytes`; 0 disables it.
    pub fn new(capacity_bytes: usize) -> SlotCache {
        SlotCache {
            capacity_bytes,
            clock: Mutex::new(Clock::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Clock> {
        // Every operation leaves the map and the ring consistent before it can panic (the
        // only panics are the ring's index asserts), so a poisoned lock is still usable.
        self.clock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The encoded slot of `key`, if cached.
    pub fn get(&self, key: &str) -> Option<Bytes> {
        if self.capacity_bytes == 0 {
            return None;
        }
        let found = self.lock().get(key);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Caches `slot` as the current encoded slot of `key`. Only the apply path may call
    /// this (see the module's invariants).
    pub fn insert(&self, key: &str, slot: Bytes) {
        let bytes = cost(key, &slot);
        let mut clock = self.lock();
        // Larger than a quarter of the cache (or a disabled cache): not worth the churn;
        // the older copy is gone all the same.
        if bytes > self.capacity_bytes / 4 {
            clock.remove(key);
            return;
        }
        // A key cached before is in use (the apply looked it up to write it): it keeps its
        // mark, or every write would leave its key unmarked and first in line for eviction.
        let (slot, in_use) = match clock.index.get(key).copied() {
            None => (slot, false),
            // The common case, a key written again: its entry takes the new slot where it
            // is unless that needs an eviction. One hash lookup either way.
            Some(position) => match clock.replace_at(position, slot, bytes, self.capacity_bytes) {
                Ok(()) => return,
                Err(slot) => {
                    clock.remove_at(position);
                    (slot, true)
                }
            },
        };
        while clock.bytes + bytes > self.capacity_bytes {
            clock.evict_one();
        }
        clock.push(key.into(), slot, bytes, in_use);
    }

    /// Drops every entry (a snapshot install replaces the whole state).
    pub fn clear(&self) {
        *self.lock() = Clock::default();
    }

    pub fn stats(&self) -> SlotCacheStats {
        let clock = self.lock();
        SlotCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: clock.bytes,
            entries: clock.ring.len(),
        }
    }
}

impl Clock {
    fn get(&mut self, key: &str) -> Option<Bytes> {
        let position = *self.index.get(key)?;
        let entry = &mut self.ring[position];
        entry.marked = true;
        Some(entry.slot.clone())
    }

    fn push(&mut self, key: Box<str>, slot: Bytes, bytes: usize, marked: bool) {
        self.index.insert(key.clone(), self.ring.len());
        self.ring.push(Entry { key, slot, marked });
        self.bytes += bytes;
    }

    /// Puts `slot` (costing `bytes`) into the entry at `position` and marks it (in use), if
    /// the cache stays within `capacity` without evicting; else changes nothing and hands
    /// `slot` back. Removing the entry and pushing it again took three more hash lookups
    /// and a copy of the key.
    fn replace_at(
        &mut self,
        position: usize,
        slot: Bytes,
        bytes: usize,
        capacity: usize,
    ) -> Result<(), Bytes> {
        let entry = &mut self.ring[position];
        let held = self.bytes - cost(&entry.key, &entry.slot) + bytes;
        if held > capacity {
            return Err(slot);
        }
        entry.slot = slot;
        entry.marked = true;
        self.bytes = held;
        Ok(())
    }

    /// Removes `key`'s entry, if there is one.
    fn remove(&mut self, key: &str) {
        if let Some(position) = self.index.get(key).copied() {
            self.remove_at(position);
        }
    }

    /// Evicts the first unmarked entry from the hand on, unmarking the ones it passes.
    /// Ends within two sweeps: the first clears every mark it meets.
    fn evict_one(&mut self) {
        assert!(!self.ring.is_empty(), "evicting from an empty slot cache");
        loop {
            if self.hand >= self.ring.len() {
                self.hand = 0;
            }
            let entry = &mut self.ring[self.hand];
            if !entry.marked {
                return self.remove_at(self.hand);
            }
            entry.marked = false;
            self.hand += 1;
        }
    }

    /// Removes the entry at `position`; the last entry takes its place (the hand, if it is
    /// there, looks at that one next).
    fn remove_at(&mut self, position: usize) {
        let removed = self.ring.swap_remove(position);
        self.index.remove(&removed.key);
        self.bytes -= cost(&removed.key, &removed.slot);
        if let Some(moved) = self.ring.get(position) {
            let slot_of_moved = self
                .index
                .get_mut(&moved.key)
                .expect("every ring entry is indexed");
            *slot_of_moved = position;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(len: usize) -> Bytes {
        vec![7u8; len].into()
    }

    #[test]
    fn a_cached_slot_is_returned_and_replaced_by_the_next_insert() {
        let cache = SlotCache::new(1 << 20);
        assert_eq!(cache.get("a"), None);
        cache.insert("a", vec![1u8].into());
        assert_eq!(cache.get("a").as_deref(), Some(&[1u8][..]));
        cache.insert("a", vec![2u8].into());
        assert_eq!(cache.get("a").as_deref(), Some(&[2u8][..]));
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (2, 1, 1));
        assert_eq!(stats.bytes, cost("a", &[2u8]));
    }

    #[test]
    fn the_bytes_held_never_exceed_the_capacity() {
        let capacity = 10_000;
        let cache = SlotCache::new(capacity);
        for i in 0..1_000 {
            cache.insert(&format!("key/{i}"), slot(50 + i % 200));
            if i % 3 == 0 {
                cache.get(&format!("key/{}", i / 2));
            }
            let stats = cache.stats();
            assert!(stats.bytes <= capacity, "{i}: {stats:?}");
        }
        let stats = cache.stats();
        assert!(
            stats.entries > 10,
            "the cache kept almost nothing: {stats:?}"
        );
    }

    #[test]
    fn an_entry_in_use_survives_while_unused_ones_are_evicted() {
        let cache = SlotCache::new(40 * cost("key/00", &slot(100)));
        cache.insert("hot", slot(100));
        for i in 0..100 {
            cache.insert(&format!("key/{i:02}"), slot(100));
            assert!(cache.get("hot").is_some(), "evicted after {i} inserts");
        }
        assert!(
            cache.get("key/00").is_none(),
            "the oldest unused entry stayed"
        );
        assert!(cache.get("key/99").is_some());
    }

    #[test]
    fn a_key_written_again_and_again_survives_a_stream_of_new_keys() {
        let cache = SlotCache::new(40 * cost("key/00", &slot(100)));
        cache.insert("hot", slot(100));
        for i in 0..100 {
            // What an apply does: look the slot up, then cache the one it wrote.
            assert!(cache.get("hot").is_some(), "evicted after {i} new keys");
            cache.insert("hot", slot(100));
            cache.insert(&format!("key/{i:02}"), slot(100));
        }
    }

    #[test]
    fn a_key_rewritten_larger_in_a_full_cache_evicts_others_not_itself() {
        let capacity = 10 * cost("key/0", &slot(100));
        let cache = SlotCache::new(capacity);
        for i in 0..10 {
            cache.insert(&format!("key/{i}"), slot(100));
        }
        assert_eq!(cache.stats().entries, 10);
        // In place while it fits: nothing else goes.
        cache.insert("key/3", slot(90));
        assert_eq!(cache.stats().entries, 10);
        // No longer fits where it is: others make room, the rewritten key stays.
        cache.insert("key/3", slot(300));
        let stats = cache.stats();
        assert!(stats.bytes <= capacity, "{stats:?}");
        assert!(stats.entries < 10, "nothing was evicted: {stats:?}");
        assert_eq!(cache.get("key/3").map(|s| s.len()), Some(300));
    }

    #[test]
    fn an_entry_too_large_to_cache_removes_the_older_copy() {
        let cache = SlotCache::new(1_000);
        cache.insert("k", slot(10));
        cache.insert("k", slot(600));
        assert_eq!(cache.get("k"), None, "a stale copy was left behind");
        assert_eq!(cache.stats().bytes, 0);
    }

    #[test]
    fn a_disabled_cache_holds_nothing_and_clear_empties_it() {
        let off = SlotCache::new(0);
        off.insert("k", slot(1));
        assert_eq!(off.get("k"), None);
        assert_eq!(off.stats().entries, 0);

        let on = SlotCache::new(1 << 20);
        on.insert("k", slot(1));
        on.clear();
        assert_eq!(on.get("k"), None);
        assert_eq!(on.stats().bytes, 0);
    }
}
