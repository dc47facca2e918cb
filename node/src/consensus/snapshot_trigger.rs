//! A snapshot by log bytes, beside openraft's snapshot by entry count.
//!
//! openraft 0.9 snapshots after `raft.snapshot_logs_since_last` applied entries and purges
//! the log behind the snapshot. A count does not bound the log's size: with 64 KiB values
//! an entry holds up to `batching.bytes_max`, and the benchmark's 64 KiB preload left
//! 7.8 GB of segments per node before its 20,000th entry (git `cfbe449`). This task asks
//! openraft for a snapshot once `raft.snapshot_log_bytes` of entries were appended since
//! the last snapshot, on every node for its own log, so the log between snapshots is
//! bounded by bytes as well as by count. A snapshot streams the whole state, so the budget
//! (8 GiB by default) is a bound, not a schedule: docs/design.md has what a budget below
//! the state's size cost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::log_store::LogStore;
use super::Raft;

/// How often the appended bytes are compared with the budget: at the benchmark's fastest
/// 64 KiB rate (~50 MB/s) a check overshoots the budget by ~10 MB at most.
const CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// Snapshots requested because of log bytes (`/metrics`).
#[derive(Clone, Default)]
pub struct SnapshotTrigger {
    fired: Arc<AtomicU64>,
}

impl SnapshotTrigger {
    /// How many snapshots this node requested because of log bytes.
    pub fn fired(&self) -> u64 {
        self.fired.load(Ordering::Relaxed)
    }

    /// Watches `log` until `shutdown` fires, asking `raft` for a snapshot whenever
    /// `log_bytes_max` bytes were appended since the last snapshot.
    ///
    /// - The count restarts at every request made here, so a request openraft ignores
    ///   (a snapshot is being built already) is not repeated on every check, and at every
    ///   snapshot asked for elsewhere (openraft's count policy, `/cluster/compact`), seen
    ///   when it is built: entries appended meanwhile count toward the next one only from
    ///   then, so the log may pass the budget by what one build takes.
    /// - The snapshot that answers a request here does not restart the count again: the
    ///   request did, and entries appended while it was built are counted.
    pub async fn run(
        self,
        raft: Raft,
        log: LogStore,
        log_bytes_max: u64,
        mut shutdown: watch::Receiver<bool>,
    ) {
        assert!(
            log_bytes_max > 0,
            "raft.snapshot_log_bytes is validated > 0"
        );
        let metrics = raft.metrics();
        let mut snapshot = metrics.borrow().snapshot;
        let mut mark = log.appended_bytes();
        let mut requested = false;
        loop {
            tokio::select! {
                () = tokio::time::sleep(CHECK_INTERVAL) => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
            let appended = log.appended_bytes();
            let latest = metrics.borrow().snapshot;
            if latest != snapshot {
                snapshot = latest;
                if !std::mem::take(&mut requested) {
                    mark = appended;
                    continue;
                }
            }
            let since = appended - mark;
            if since < log_bytes_max {
                continue;
            }
            mark = appended;
            requested = true;
            self.fired.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                appended_since_snapshot = since,
                log_bytes_max,
                "requesting a snapshot: the log grew by raft.snapshot_log_bytes since the last"
            );
            if let Err(e) = raft.trigger().snapshot().await {
                tracing::warn!(error = %e, "requesting a snapshot");
            }
        }
    }
}
