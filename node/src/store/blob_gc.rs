//! Blob garbage collection of the [`BLOB_FAMILIES`](super::engine::BLOB_FAMILIES), steered
//! by how much of the blob files is garbage.
//!
//! RocksDB collects blob garbage inside ordinary compactions: with an age cutoff `c`, a
//! compaction moves the live blobs it meets in the oldest fraction `c` of the blob files
//! (by count) to a new blob file, and a file left without live blobs is deleted. In
//! `slots` an L0 → L1 compaction meets every key (a slot's reference is small, so the whole
//! family is a few table files that every flush overlaps), and every flush adds one small
//! blob file, so a fixed cutoff moves about `c` of all live values at every compaction,
//! whatever the garbage: under writes that is once a second or so, and the bytes moved grow
//! with the data set, not with the writes. Measured with the fixed cutoff of 0.25 (64 KiB
//! values over 20,000 keys, 20 s of preload and 40 s of writes at 64 clients, git
//! `243af47`): one node's compactions wrote 4,355 MB of moved blobs while 2,500 MB of
//! values came in, and the point ran at 461–581 ops/s against 658–715 with no collection
//! and 558–642 steered as below (docs/design.md, Storage, has the longer runs).
//!
//! So collection is off (cutoff 0: compactions move nothing) until garbage is at least
//! half of the blob files' bytes and at least [`COLLECT_FROM_BYTES`] (the engine's
//! `blob_gc_from_bytes`); then on (cutoff
//! [`COLLECTING_CUTOFF`]: the oldest files, which hold the most garbage) until garbage is
//! under a quarter. [`BlobGc::steer`] looks every [`STEER_INTERVAL`].
//!
//! - Disk: the blob files hold about twice their live bytes by RocksDB's count (an
//!   overwritten value counts as garbage once a compaction drops its reference), plus
//!   [`COLLECT_FROM_BYTES`] and what is written between a look and the compactions that
//!   follow it.
//! - A live value moves only when collection is on, so each byte moved frees about as much
//!   garbage or more, instead of a fixed share of the data set per compaction.
//! - `/cluster/compact` ([`BlobGc::force_all`], cutoff 1.0: every live blob moves, so every
//!   old blob file and the forgotten values in it go) wins over the steering while it runs,
//!   and the steering's cutoff is back when it ends.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How often [`BlobGc::steer`] looks at the garbage. A look reads two integer properties
/// per family; at 64 KiB values and ~1,000 writes/s a second adds ~64 MiB of garbage.
pub const STEER_INTERVAL: Duration = Duration::from_secs(1);

/// Collection never starts below this much garbage by default: a small data set is not
/// rewritten for a few megabytes.
pub const COLLECT_FROM_BYTES: u64 = 64 << 20;

/// The age cutoff while collecting: RocksDB's recommended start, the oldest quarter.
pub const COLLECTING_CUTOFF: f64 = 0.25;

/// The age cutoff of a compaction that moves every live blob (`/cluster/compact`).
const ALL_BLOBS_CUTOFF: f64 = 1.0;

/// The age cutoff while not collecting: compactions move no blob.
const IDLE_CUTOFF: f64 = 0.0;

/// The RocksDB option each cutoff is written to (a dynamic option: nothing reopens).
pub const AGE_CUTOFF_OPTION: &str = "blob_garbage_collection_age_cutoff";

/// The blob files' bytes and the garbage in them, as RocksDB counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlobSpace {
    /// Bytes of every blob file in the current version, garbage included.
    pub file_bytes: u64,
    /// Bytes of overwritten or deleted blobs still in those files.
    pub garbage_bytes: u64,
}

/// Whether collection should be on after a look at `space`, given whether it is now.
///
/// - Starts at garbage ≥ half the blob bytes and ≥ `from_bytes`.
/// - Stops at garbage < a quarter of the blob bytes (the gap keeps one look's noise from
///   turning it on and off again).
pub fn should_collect(collecting: bool, space: BlobSpace, from_bytes: u64) -> bool {
    let BlobSpace {
        file_bytes,
        garbage_bytes,
    } = space;
    debug_assert!(garbage_bytes <= file_bytes, "garbage is inside the files");
    if collecting {
        garbage_bytes.saturating_mul(4) >= file_bytes
    } else {
        garbage_bytes >= from_bytes && garbage_bytes.saturating_mul(2) >= file_bytes
    }
}

/// The collection state of one engine: what the steering decided and whether a
/// `/cluster/compact` is moving every blob. One lock, so that the two never restore each
/// other's cutoff.
#[derive(Debug)]
pub struct BlobGc {
    /// The least garbage that starts collection ([`should_collect`]).
    from_bytes: u64,
    state: Mutex<GcState>,
}

#[derive(Debug, Clone, Copy)]
struct GcState {
    collecting: bool,
    /// Compactions that move every blob are running (`/cluster/compact`).
    forcing: u32,
    /// The cutoff RocksDB has: a write that failed is retried at the next look.
    applied: f64,
}

impl Default for GcState {
    fn default() -> Self {
        GcState {
            collecting: false,
            forcing: 0,
            applied: BlobGc::OPEN_CUTOFF,
        }
    }
}

impl GcState {
    /// Writes [`GcState::cutoff`] to RocksDB with `apply` unless it is there already.
    fn sync<E>(&mut self, apply: impl FnOnce(f64) -> Result<(), E>) -> Result<(), E> {
        let wanted = self.cutoff();
        if wanted != self.applied {
            apply(wanted)?;
            self.applied = wanted;
        }
        Ok(())
    }

    fn cutoff(self) -> f64 {
        if self.forcing > 0 {
            ALL_BLOBS_CUTOFF
        } else if self.collecting {
            COLLECTING_CUTOFF
        } else {
            IDLE_CUTOFF
        }
    }
}

impl BlobGc {
    /// The age cutoff a family opens with: not collecting.
    pub const OPEN_CUTOFF: f64 = IDLE_CUTOFF;

    /// Not collecting; collection starts at `from_bytes` of garbage or more.
    pub fn new(from_bytes: u64) -> BlobGc {
        BlobGc {
            from_bytes,
            state: Mutex::default(),
        }
    }

    /// Whether the steering has collection on.
    pub fn collecting(&self) -> bool {
        self.lock().collecting
    }

    /// Turns collection on or off for `space` ([`should_collect`]); calls `apply` with the
    /// cutoff when RocksDB does not have it yet (not while [`BlobGc::force_all`] runs: its
    /// end writes it). On an error the decision is left as it was. Returns whether
    /// collection is on.
    pub fn steer<E>(
        &self,
        space: BlobSpace,
        apply: impl FnOnce(f64) -> Result<(), E>,
    ) -> Result<bool, E> {
        let mut state = self.lock();
        let was_collecting = state.collecting;
        let collecting = should_collect(was_collecting, space, self.from_bytes);
        state.collecting = collecting;
        if let Err(e) = state.sync(apply) {
            state.collecting = was_collecting;
            return Err(e);
        }
        if collecting != was_collecting {
            tracing::info!(
                collecting,
                blob_file_bytes = space.file_bytes,
                garbage_bytes = space.garbage_bytes,
                "blob garbage collection {}",
                if collecting { "on" } else { "off" }
            );
        }
        Ok(collecting)
    }

    /// Runs `during` with compactions moving every live blob (cutoff 1.0), then goes back
    /// to the steering's cutoff (if writing it fails, the next [`BlobGc::steer`] retries).
    /// `apply` writes a cutoff to RocksDB.
    pub fn force_all<E, T>(
        &self,
        apply: impl Fn(f64) -> Result<(), E>,
        during: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        {
            let mut state = self.lock();
            state.forcing += 1;
            if let Err(e) = state.sync(&apply) {
                state.forcing -= 1;
                return Err(e);
            }
        }
        let result = during();
        let mut state = self.lock();
        state.forcing -= 1;
        let restored = state.sync(&apply);
        drop(state);
        let value = result?;
        restored?;
        Ok(value)
    }

    fn lock(&self) -> MutexGuard<'_, GcState> {
        // The state is plain fields, consistent after any panic.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    const MIB: u64 = 1 << 20;

    fn collects(collecting: bool, space: BlobSpace) -> bool {
        should_collect(collecting, space, COLLECT_FROM_BYTES)
    }

    /// The cutoffs written to RocksDB, in order.
    #[derive(Default)]
    struct Applied(RefCell<Vec<f64>>);

    impl Applied {
        fn apply(&self, cutoff: f64) -> Result<(), &'static str> {
            self.0.borrow_mut().push(cutoff);
            Ok(())
        }

        fn cutoffs(&self) -> Vec<f64> {
            self.0.borrow().clone()
        }
    }

    fn space(file_mib: u64, garbage_mib: u64) -> BlobSpace {
        BlobSpace {
            file_bytes: file_mib * MIB,
            garbage_bytes: garbage_mib * MIB,
        }
    }

    #[test]
    fn collection_starts_at_half_garbage_and_stops_under_a_quarter() {
        assert!(!collects(false, space(1000, 499)));
        assert!(collects(false, space(1000, 500)));
        assert!(collects(true, space(1000, 250)), "still above a quarter");
        assert!(!collects(true, space(1000, 249)));
        assert!(!collects(false, space(1000, 0)));
    }

    #[test]
    fn a_small_data_set_is_not_collected_for_a_few_megabytes() {
        assert!(!collects(false, space(100, 63)), "63 of 100 MiB is garbage");
        assert!(collects(false, space(100, 64)));
    }

    #[test]
    fn steering_applies_a_cutoff_only_when_collection_turns() {
        let gc = BlobGc::new(COLLECT_FROM_BYTES);
        let applied = Applied::default();
        let apply = |c| applied.apply(c);
        assert_eq!(gc.steer(space(1000, 100), apply), Ok(false));
        assert_eq!(gc.steer(space(1000, 600), apply), Ok(true));
        assert_eq!(gc.steer(space(1000, 400), apply), Ok(true));
        assert_eq!(gc.steer(space(1000, 100), apply), Ok(false));
        assert_eq!(applied.cutoffs(), vec![COLLECTING_CUTOFF, IDLE_CUTOFF]);
    }

    #[test]
    fn a_failed_apply_leaves_the_state_as_it_was() {
        let gc = BlobGc::new(COLLECT_FROM_BYTES);
        assert_eq!(
            gc.steer(space(1000, 600), |_| Err("rocksdb")),
            Err("rocksdb")
        );
        assert!(!gc.collecting());
        let ok = |_: f64| -> Result<(), &str> { Ok(()) };
        assert_eq!(gc.steer(space(1000, 600), ok), Ok(true));
    }

    #[test]
    fn moving_every_blob_wins_over_the_steering_and_its_cutoff_comes_back() {
        let gc = BlobGc::new(COLLECT_FROM_BYTES);
        let applied = Applied::default();
        let apply = |c| applied.apply(c);
        gc.force_all(apply, || {
            // The steering turns collection on meanwhile: RocksDB keeps 1.0.
            assert_eq!(gc.steer(space(1000, 600), apply), Ok(true));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            applied.cutoffs(),
            vec![ALL_BLOBS_CUTOFF, COLLECTING_CUTOFF],
            "1.0 during the compaction, then the steering's cutoff"
        );
    }

    #[test]
    fn a_cutoff_that_could_not_be_restored_is_written_at_the_next_look() {
        let gc = BlobGc::new(COLLECT_FROM_BYTES);
        let fails_after_first = RefCell::new(0);
        let apply = |_: f64| -> Result<(), &str> {
            *fails_after_first.borrow_mut() += 1;
            match *fails_after_first.borrow() {
                1 => Ok(()),
                _ => Err("rocksdb"),
            }
        };
        assert_eq!(gc.force_all(apply, || Ok(())), Err("rocksdb"));
        let applied = Applied::default();
        assert_eq!(gc.steer(space(1000, 100), |c| applied.apply(c)), Ok(false));
        assert_eq!(
            applied.cutoffs(),
            vec![IDLE_CUTOFF],
            "RocksDB was left at 1.0: the look writes the idle cutoff"
        );
    }

    #[test]
    fn a_failed_compaction_still_restores_the_cutoff() {
        let gc = BlobGc::new(COLLECT_FROM_BYTES);
        let applied = Applied::default();
        let apply = |c| applied.apply(c);
        let result = gc.force_all(apply, || Err::<(), _>("compaction"));
        assert_eq!(result, Err("compaction"));
        assert_eq!(applied.cutoffs(), vec![ALL_BLOBS_CUTOFF, IDLE_CUTOFF]);
    }
}
