//! `[batching]`: how client operations are grouped into Raft entries.

use serde::{Deserialize, Serialize};

use crate::error::{check_at_most, check_positive, ConfigError};

/// Longest a proposer may wait for more operations before sealing an entry.
pub const LINGER_US_LIMIT: u64 = 100_000;
/// Upper bound of `commit_timeout_ms`: a write on a leader that cannot commit holds its
/// place in the batcher's queue and its client's connection until then (and a follower
/// relaying it waits that plus one second, `node/src/api/forward.rs`), so the wait a
/// setting can ask for stays bounded.
pub const COMMIT_TIMEOUT_MS_MAX: u64 = 20_000;
/// Most entries in flight. Each may be `bytes_max` (64 MiB) large, and the pipelining it
/// buys stops paying at a handful (see `inflight_entries_max`).
pub const INFLIGHT_ENTRIES_LIMIT: u64 = 64;
/// Most operations queued for proposal: 16 times the default. Each holds its request
/// (up to a value's size) and its client's connection until it is applied.
pub const QUEUE_OPS_LIMIT: u64 = 1 << 20;
/// Largest Raft entry: one entry always travels whole in one append-entries RPC, whose
/// body a peer takes up to 256 MiB.
pub const BYTES_MAX_LIMIT: u64 = 64 * 1024 * 1024;

/// Group commit: operations queue up (bounded); when one of the `inflight_entries_max`
/// proposal slots is free, everything queued (up to `ops_max` operations or `bytes_max`
/// bytes) is sealed into one Raft entry, after waiting `linger_us` for company if non-zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchingConfig {
    /// Operations per Raft entry. A client `/v1/batch` is one entry, so this is at least
    /// `limits.batch_ops_max`.
    pub ops_max: u64,
    /// Encoded bytes per Raft entry. At least `limits.value_bytes_max` so the largest
    /// write fits.
    pub bytes_max: u64,
    /// How long the first queued operation may wait for company. 0 (default) = never wait:
    /// entries fill up by themselves with what queues while earlier ones are in flight.
    pub linger_us: u64,
    /// Entries proposed but not yet applied (pipelining depth). 1 measured best on a
    /// 2-core machine: more slots make smaller entries, and per-entry CPU (replication
    /// RPCs, fsyncs, wake-ups; ~1.4 ms per entry across 3 nodes) is what bounds throughput
    /// there. The log writer already overlaps the leader's fsync with replication, so one
    /// entry in flight loses little. Measured for git 93e8679 (2026-11-30), 64 writers, 5 s
    /// points: 9.6k ops/s at 2, 7.1k at 4, 5.8k at 8. Measured for git cab5d5d, interleaved
    /// 6 s points, 1 vs 2: 64 writers 7.8k-9.3k vs 7.0k-8.6k (1 ahead in 6 of 6 pairs), 16
    /// writers +5% (3 of 3), 256 writers 10.1k-11.3k vs 9.5k-11.3k (2 of 3), 1 writer the
    /// same.
    pub inflight_entries_max: u64,
    /// Operations waiting to be proposed; a full queue answers 503 `overloaded`.
    pub queue_ops_max: u64,
    /// How long a mutation waits to be applied before it is answered 504
    /// `outcome_unknown` (SPEC §2). A leader cut off from its majority cannot commit and
    /// would otherwise never answer; the command may still commit later (when the
    /// partition heals), which is why the answer is "unknown": retry with the same
    /// `request_id`. Above the election timeout, so an ordinary failover finishes first.
    pub commit_timeout_ms: u64,
}

impl Default for BatchingConfig {
    fn default() -> Self {
        BatchingConfig {
            ops_max: 1024,
            bytes_max: 4 * 1024 * 1024,
            linger_us: 0,
            inflight_entries_max: 1,
            queue_ops_max: 65_536,
            commit_timeout_ms: 5_000,
        }
    }
}

impl BatchingConfig {
    /// Checks:
    /// - `ops_max`, `bytes_max`, `inflight_entries_max`, `queue_ops_max` > 0;
    /// - `linger_us <= 100_000`, `bytes_max <= 64 MiB`, `inflight_entries_max <= 64`,
    ///   `queue_ops_max <= 1_048_576` (the batcher's semaphore and channel take no more
    ///   than a few billion permits, and a queue that long would hold gigabytes);
    /// - `commit_timeout_ms <= 20_000` (and above the election timeout, checked by
    ///   [`crate::NodeConfig::validate`]);
    /// - `queue_ops_max >= ops_max` (a full entry must fit in the queue).
    ///
    /// Bounds relative to `[limits]` are checked by [`crate::NodeConfig::validate`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive("batching.ops_max", self.ops_max)?;
        check_positive("batching.bytes_max", self.bytes_max)?;
        check_positive("batching.inflight_entries_max", self.inflight_entries_max)?;
        check_positive("batching.queue_ops_max", self.queue_ops_max)?;
        check_at_most("batching.linger_us", self.linger_us, LINGER_US_LIMIT)?;
        check_at_most("batching.bytes_max", self.bytes_max, BYTES_MAX_LIMIT)?;
        check_at_most(
            "batching.inflight_entries_max",
            self.inflight_entries_max,
            INFLIGHT_ENTRIES_LIMIT,
        )?;
        check_at_most(
            "batching.queue_ops_max",
            self.queue_ops_max,
            QUEUE_OPS_LIMIT,
        )?;
        check_at_most(
            "batching.commit_timeout_ms",
            self.commit_timeout_ms,
            COMMIT_TIMEOUT_MS_MAX,
        )?;

        if self.queue_ops_max < self.ops_max {
            return Err(ConfigError::invalid(
                "batching.queue_ops_max",
                format!(
                    "must be >= batching.ops_max ({}) (got {})",
                    self.ops_max, self.queue_ops_max
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        BatchingConfig::default().validate().unwrap();
    }

    #[test]
    fn queue_and_pipeline_depths_are_bounded() {
        let deep = BatchingConfig {
            inflight_entries_max: INFLIGHT_ENTRIES_LIMIT + 1,
            ..BatchingConfig::default()
        };
        let err = deep.validate().unwrap_err();
        assert_eq!(err.field(), Some("batching.inflight_entries_max"));
        let long = BatchingConfig {
            queue_ops_max: u64::MAX,
            ..BatchingConfig::default()
        };
        let err = long.validate().unwrap_err();
        assert_eq!(err.field(), Some("batching.queue_ops_max"));
        assert!(err.to_string().contains("<= 1048576"), "{err}");
    }
}
