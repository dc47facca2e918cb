//! Memoization for the linearizability search: the set of linearized operations, and the
//! cache of every `(set, state)` configuration reached.
//!
//! Long histories (tens of thousands of operations on one key) make a plain bitset per cache
//! entry the dominant cost in time and memory, so the set has a compact canonical encoding:
//! completed operations are numbered by return time, and at any point of the search every
//! operation that returned before the earliest unlinearized return is linearized. Their bits
//! form a run of all-ones words, stored as a count; what follows is a window about as wide as
//! the concurrency, then zeros (not stored). Indeterminate operations never return, so they
//! get their own region, stored whole.
//!
//! Subsumption: an indeterminate operation not yet used is an option, never an obligation.
//! So if `(completed set D, state s, indeterminate set U)` was fully explored and failed,
//! every `(D, s, U')` with `U' ⊇ U` fails too: any order that would complete it also
//! completes `(D, s, U)` (the extra operations in `U'` are simply never applied). The cache
//! prunes such configurations. It only compares against *finished* entries, never ones
//! still on the search path, which keeps the argument a plain induction on finishing order.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::event_list::NIL;

/// The set of linearized operations of one partition.
pub(super) struct Linearized {
    bits: Vec<u64>,
    /// Bit position of each operation: completed ones by return order in words
    /// `[0, completed_words)`, indeterminate ones after.
    position: Vec<u32>,
    completed_words: usize,
    /// Leading all-ones words of the completed region.
    full: usize,
    /// One past the last nonzero word of the completed region (`>= full`).
    top: usize,
    /// XOR of a per-operation hash over the completed operations only (subsumption
    /// compares entries that differ in indeterminate ones), maintained incrementally.
    hash: u64,
}

impl Linearized {
    /// `completion[op]`: when each operation completed, `None` if never.
    pub fn new(completion: &[Option<u64>]) -> Self {
        let mut completed: Vec<u32> = (0..completion.len() as u32)
            .filter(|&op| completion[op as usize].is_some())
            .collect();
        completed.sort_by_key(|&op| (completion[op as usize], op));
        let completed_words = completed.len().div_ceil(64);
        let mut position = vec![0; completion.len()];
        for (rank, &op) in completed.iter().enumerate() {
            position[op as usize] = rank as u32;
        }
        let indeterminate = (0..completion.len()).filter(|&op| completion[op].is_none());
        for (rank, op) in indeterminate.enumerate() {
            position[op] = (completed_words * 64 + rank) as u32;
        }
        let total_words = completed_words + (completion.len() - completed.len()).div_ceil(64);
        Linearized {
            bits: vec![0; total_words],
            position,
            completed_words,
            full: 0,
            top: 0,
            hash: 0,
        }
    }

    fn locate(&self, op: u32) -> (usize, u64) {
        let pos = self.position[op as usize] as usize;
        (pos / 64, 1 << (pos % 64))
    }

    pub fn contains(&self, op: u32) -> bool {
        let (word, bit) = self.locate(op);
        self.bits[word] & bit != 0
    }

    pub fn insert(&mut self, op: u32) {
        let (word, bit) = self.locate(op);
        debug_assert_eq!(self.bits[word] & bit, 0, "op {op} linearized twice");
        self.bits[word] |= bit;
        if word < self.completed_words {
            self.hash ^= splitmix64(u64::from(op));
            self.top = self.top.max(word + 1);
            // Bounded by the region's size; amortized O(1).
            while self.full < self.completed_words && self.bits[self.full] == u64::MAX {
                self.full += 1;
            }
        }
    }

    pub fn remove(&mut self, op: u32) {
        let (word, bit) = self.locate(op);
        debug_assert_ne!(self.bits[word] & bit, 0, "op {op} was not linearized");
        self.bits[word] &= !bit;
        if word < self.completed_words {
            self.hash ^= splitmix64(u64::from(op));
            self.full = self.full.min(word);
            // Stops at `full` at the latest: the words below it are all ones.
            while self.top > self.full && self.bits[self.top - 1] == 0 {
                self.top -= 1;
            }
        }
    }

    /// The canonical encoding of the completed region: `[full, window words..]`. Equal
    /// sets give equal encodings and vice versa.
    fn encode_completed(&self, out: &mut Vec<u64>) {
        out.clear();
        out.push(self.full as u64);
        out.extend_from_slice(&self.bits[self.full..self.top]);
    }

    /// The indeterminate region, fixed length.
    fn indeterminate(&self) -> &[u64] {
        &self.bits[self.completed_words..]
    }
}

pub(super) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FxHash-style hasher for model states: much cheaper than SipHash, and the cache needs no
/// DoS resistance.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Hasher for keys that already are well-mixed hashes.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

struct Entry<S> {
    state: S,
    /// The next entry with the same hash.
    next: u32,
    /// `words[start..start + len]`: the encoded completed set, then the indeterminate words.
    start: usize,
    len: u32,
    /// Explored completely without success.
    failed: bool,
}

/// Every configuration reached so far. Encoded sets live in one flat `Vec<u64>` and entries
/// with the same completed set and state are chained under one hash, so a lookup allocates
/// nothing and finds the candidates for subsumption.
pub(super) struct Cache<S> {
    heads: HashMap<u64, u32, BuildHasherDefault<PassThrough>>,
    entries: Vec<Entry<S>>,
    words: Vec<u64>,
    scratch: Vec<u64>,
}

/// The answer of [`Cache::insert`].
pub(super) enum Seen {
    /// New; explore it, then report it with [`Cache::failed`] if it leads nowhere.
    New(u32),
    /// Already explored, or subsumed by a configuration that failed: it fails too.
    Before,
}

impl<S: Clone + Eq + Hash> Cache<S> {
    pub fn new() -> Self {
        Cache {
            heads: HashMap::default(),
            entries: Vec::new(),
            words: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Records the configuration `(set, state)` unless it was seen or is subsumed.
    pub fn insert(&mut self, set: &Linearized, state: &S) -> Seen {
        let mut hasher = FxHasher::default();
        state.hash(&mut hasher);
        let key = splitmix64(set.hash ^ hasher.finish().rotate_left(29));
        set.encode_completed(&mut self.scratch);
        let completed = self.scratch.len();
        self.scratch.extend_from_slice(set.indeterminate());
        let head = self.heads.get(&key).copied().unwrap_or(NIL);
        if self.covered(head, state, completed) {
            return Seen::Before;
        }
        let index = self.entries.len() as u32;
        self.heads.insert(key, index);
        self.entries.push(Entry {
            state: state.clone(),
            next: head,
            start: self.words.len(),
            len: self.scratch.len() as u32,
            failed: false,
        });
        self.words.extend_from_slice(&self.scratch);
        Seen::New(index)
    }

    /// Whether the chain from `at` holds the configuration in `scratch` (its first
    /// `completed` words the completed set) or a failed one it subsumes.
    fn covered(&self, mut at: u32, state: &S, completed: usize) -> bool {
        let (want_completed, want_indeterminate) = self.scratch.split_at(completed);
        // Bounded by the number of cached entries.
        while at != NIL {
            let entry = &self.entries[at as usize];
            let words = &self.words[entry.start..entry.start + entry.len as usize];
            // Same total length means same completed-encoding length: the indeterminate
            // region's length is fixed.
            let (has_completed, has_indeterminate) = words.split_at(completed.min(words.len()));
            let comparable = words.len() == self.scratch.len() && entry.state == *state;
            if comparable && has_completed == want_completed {
                let equal = has_indeterminate == want_indeterminate;
                let subset = || {
                    has_indeterminate
                        .iter()
                        .zip(want_indeterminate)
                        .all(|(h, w)| h & !w == 0)
                };
                if equal || (entry.failed && subset()) {
                    return true;
                }
            }
            at = entry.next;
        }
        false
    }

    /// The configuration `entry` was explored completely without success.
    pub fn failed(&mut self, entry: u32) {
        self.entries[entry as usize].failed = true;
    }

    /// Memory held, roughly: heap parts of the states themselves are not counted.
    pub fn approx_bytes(&self) -> usize {
        let head = std::mem::size_of::<(u64, u32)>() + 1;
        self.heads.capacity() * head
            + self.entries.capacity() * std::mem::size_of::<Entry<S>>()
            + self.words.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(set: &Linearized) -> Vec<u64> {
        let mut out = vec![];
        set.encode_completed(&mut out);
        out.extend_from_slice(set.indeterminate());
        out
    }

    fn is_new(seen: Seen) -> bool {
        matches!(seen, Seen::New(_))
    }

    #[test]
    fn encoding_is_compact_and_canonical() {
        // 200 completed operations (completion order reversed) and 70 indeterminate ones.
        let completion: Vec<Option<u64>> = (0..270)
            .map(|op| (op < 200).then(|| 1000 - op as u64))
            .collect();
        let mut set = Linearized::new(&completion);
        let empty = encoded(&set);
        assert_eq!(empty, vec![0, 0, 0]); // no full words, no window, two indeterminate words
                                          // The 130 earliest-returning completed ops (ids 199 down to 70), plus id 0 (the latest return).
        for op in (70..200).rev() {
            set.insert(op);
        }
        set.insert(0);
        let a = encoded(&set);
        assert_eq!(a[0], 2, "two full words");
        assert_eq!(
            a.len(),
            1 + 2 + 2,
            "window up to id 0's word, then indeterminate words"
        );
        set.insert(250);
        assert_ne!(encoded(&set), a);
        set.remove(250);
        assert_eq!(encoded(&set), a);
        // Same set, built in another order, encodes the same.
        let mut other = Linearized::new(&completion);
        other.insert(0);
        for op in 70..200 {
            other.insert(op);
        }
        assert_eq!(encoded(&other), a);
        assert_eq!(other.hash, set.hash);
        for op in (70..200).chain([0]) {
            set.remove(op);
        }
        assert_eq!(encoded(&set), empty);
        assert_eq!((set.full, set.top, set.hash), (0, 0, 0));
    }

    #[test]
    fn cache_tells_configurations_apart() {
        let completion = vec![Some(1), Some(2), None];
        let mut set = Linearized::new(&completion);
        let mut cache: Cache<Option<i64>> = Cache::new();
        assert!(is_new(cache.insert(&set, &None)));
        assert!(!is_new(cache.insert(&set, &None)));
        assert!(is_new(cache.insert(&set, &Some(1))));
        set.insert(1);
        assert!(is_new(cache.insert(&set, &None)));
        set.remove(1);
        set.insert(0);
        assert!(is_new(cache.insert(&set, &None)));
        assert!(!is_new(cache.insert(&set, &None)));
        assert!(cache.approx_bytes() > 0);
    }

    #[test]
    fn failed_configurations_subsume_those_with_more_indeterminate_operations() {
        // Ops 0 and 1 completed, 2 and 3 indeterminate.
        let completion = vec![Some(1), Some(2), None, None];
        let mut set = Linearized::new(&completion);
        let mut cache: Cache<Option<i64>> = Cache::new();
        set.insert(0);
        set.insert(2);
        let Seen::New(with_two) = cache.insert(&set, &Some(7)) else {
            panic!("new")
        };
        set.insert(3);
        // Not failed yet (still being explored): no subsumption.
        assert!(is_new(cache.insert(&set, &Some(7))));
        set.remove(3);
        set.remove(2);
        set.insert(3);
        cache.failed(with_two);
        // {0, 3} is not a superset of {0, 2}.
        assert!(is_new(cache.insert(&set, &Some(7))));
        set.insert(2);
        // {0, 2, 3} was seen already; and it is subsumed by the failed {0, 2} anyway.
        assert!(!is_new(cache.insert(&set, &Some(7))));
        // Another state or another completed set is not subsumed.
        assert!(is_new(cache.insert(&set, &Some(8))));
        set.insert(1);
        assert!(is_new(cache.insert(&set, &Some(7))));
        // Fewer indeterminate operations than the failed one: not subsumed.
        let mut fewer = Linearized::new(&completion);
        fewer.insert(0);
        assert!(is_new(cache.insert(&fewer, &Some(7))));
        // A superset of {0, 2} not seen before: subsumed.
        let mut cache2: Cache<Option<i64>> = Cache::new();
        let mut base = Linearized::new(&completion);
        base.insert(2);
        let Seen::New(entry) = cache2.insert(&base, &None) else {
            panic!("new")
        };
        cache2.failed(entry);
        base.insert(3);
        assert!(!is_new(cache2.insert(&base, &None)));
    }
}
