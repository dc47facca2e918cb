//! glibc's heap, where RocksDB's C++ allocations go: the global allocator (mimalloc)
//! serves Rust's allocations only.
//!
//! glibc gives freed memory back to the kernel only from the top of each arena, so after
//! a bulk load its arenas stay resident with the space RocksDB freed (memtables flushed,
//! compaction buffers). Measured at 1M keys (`cairn-jepsen bench --systems cairn --scale`,
//! git `3ebd7fc` plus the memory gauges, `/proc/<pid>/smaps` of the leader during the
//! join step): its glibc arenas held ~120 MiB resident while RocksDB reported ~40 MiB in
//! use. [`trim_periodically`] hands the free pages back: the leader's RSS in the same
//! step fell from 278 to 227 MiB.
//!
//! Measured and not kept (`--scale-keys 100000,1000000`, RSS after the 1M load, leader /
//! followers; 308 / 238 / 231 MiB as it was):
//! - a fixed 128 KiB mmap threshold (`M_MMAP_THRESHOLD`: large blocks unmapped when freed)
//!   gave 274 / 197 / 181, but made every apply of 64 KiB values map and fault in its
//!   ~1 MiB write batch: 25–35% more server CPU per write at 16 writers, behind in 4 of 4
//!   interleaved pairs;
//! - `MALLOC_ARENA_MAX=2`: 301 / 225 / 231 (all three levels);
//! - RocksDB's allocations routed to mimalloc (its `override` feature): 307 / 269 / 252,
//!   with 372 MiB committed by mimalloc on the leader.

use std::time::Duration;

use tokio::sync::watch;

/// How often free pages inside glibc's arenas go back to the kernel. A trim walks the
/// arenas under their locks; at this interval it is invisible in throughput (64 KiB
/// writes at 16 writers, four interleaved pairs with and without: 659 / 599 / 733 / 677
/// against 672 / 677 / 665 / 634 ops/s).
pub const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Gives glibc's free pages back to the kernel every [`TRIM_INTERVAL`] until `shutdown`
/// (returns at once where the allocator is not glibc's).
pub async fn trim_periodically(mut shutdown: watch::Receiver<bool>) {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let mut tick = tokio::time::interval(TRIM_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        // Off the async workers: the walk holds each arena's lock for its length.
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe and only releases memory that is free.
    unsafe {
        libc::malloc_trim(0);
    }
}
