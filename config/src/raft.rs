//! `[raft]`: openraft timings, snapshot and log-purge policy.

use serde::{Deserialize, Serialize};

use crate::error::{check_at_most, check_less, check_positive, ConfigError};

/// A killed leader must be replaced within 3 s. openraft 0.9 followers wait out the
/// leader lease (= `election_timeout_max`) and then their own random election timeout
/// before campaigning, so failover takes up to about 2 × max: capped at 1500 ms.
pub const ELECTION_TIMEOUT_MAX_MS_LIMIT: u64 = 1500;
/// One snapshot chunk travels in one RPC body; keep it well below any body limit.
pub const SNAPSHOT_CHUNK_BYTES_LIMIT: u64 = 64 * 1024 * 1024;
/// One append-entries payload is one RPC body too, and it must arrive, be written and be
/// fsynced within `heartbeat_interval_ms` (openraft 0.9's timeout for the RPC).
pub const MAX_PAYLOAD_BYTES_LIMIT: u64 = 64 * 1024 * 1024;
/// Largest `raft.snapshot_log_bytes`: 1 TiB, beyond any disk this is meant for (a log
/// that large would take hours to replay).
pub const SNAPSHOT_LOG_BYTES_LIMIT: u64 = 1 << 40;

/// Longest `raft.join_catch_up_timeout_ms`: one hour, the time to stream a large state to
/// a new node over a slow link; a join request is answered within it.
pub const JOIN_CATCH_UP_TIMEOUT_MS_LIMIT: u64 = 3_600_000;

/// Raft timings and log-compaction policy. Every field is passed explicitly to openraft's
/// `Config` by the node rather than trusting the library's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftConfig {
    /// Leader → follower heartbeat period. Must be below `election_timeout_min_ms`.
    pub heartbeat_interval_ms: u64,
    /// A follower that hears nothing for a random time in
    /// `[election_timeout_min_ms, election_timeout_max_ms)` starts an election.
    pub election_timeout_min_ms: u64,
    /// Upper end of the election timeout; at most 1500 (failover takes up to ~2x this).
    pub election_timeout_max_ms: u64,
    /// Timeout for one install-snapshot chunk RPC.
    pub install_snapshot_timeout_ms: u64,
    /// Timeout for vote and ReadIndex RPCs. An append-entries RPC has
    /// `heartbeat_interval_ms` (openraft 0.9 sets it), which `max_payload_bytes` respects.
    pub rpc_timeout_ms: u64,
    /// Most log entries sent in one append-entries RPC.
    pub max_payload_entries: u64,
    /// Most bytes of log entries sent in one append-entries RPC (one entry is always
    /// sent, whatever its size). A lagging follower catches up in RPCs that finish within
    /// their timeout instead of one that never does.
    pub max_payload_bytes: u64,
    /// Take a snapshot after this many entries were applied since the last one.
    pub snapshot_logs_since_last: u64,
    /// Take a snapshot also once this many bytes of entries were appended to the log since
    /// the last one: with large entries (64 KiB values, batched up to
    /// `batching.bytes_max`) `snapshot_logs_since_last` entries alone let the log grow
    /// without a byte bound. A snapshot streams the whole state, so a budget below the
    /// state's size makes snapshots cost more than the log they save (docs/design.md,
    /// Snapshots, "When").
    pub snapshot_log_bytes: u64,
    /// Log entries kept behind a snapshot so a slow follower can catch up from the log
    /// instead of a full snapshot. 0 purges everything the snapshot covers.
    pub purge_keep_logs: u64,
    /// Size of one install-snapshot chunk.
    pub snapshot_chunk_bytes: u64,
    /// How long `POST /cluster/join` waits for the new learner to hold the log up to its
    /// own membership entry (from the log or a snapshot) before it is made a voter. A node
    /// that does not catch up in time stays a learner, never counted toward quorum, and the
    /// join answers 409 `invalid_transition` (join again once it runs, or remove it).
    pub join_catch_up_timeout_ms: u64,
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 400,
            election_timeout_max_ms: 800,
            install_snapshot_timeout_ms: 10_000,
            rpc_timeout_ms: 1000,
            max_payload_entries: 512,
            max_payload_bytes: 4 * 1024 * 1024,
            snapshot_logs_since_last: 20_000,
            snapshot_log_bytes: 8 * 1024 * 1024 * 1024,
            purge_keep_logs: 1_000,
            snapshot_chunk_bytes: 1024 * 1024,
            join_catch_up_timeout_ms: 60_000,
        }
    }
}

impl RaftConfig {
    /// Checks:
    /// - every field > 0, except `purge_keep_logs` (0 = keep nothing behind a snapshot);
    /// - `heartbeat_interval_ms < election_timeout_min_ms < election_timeout_max_ms`;
    /// - `election_timeout_max_ms <= 1500`;
    /// - `snapshot_chunk_bytes <= 64 MiB`, `max_payload_bytes <= 64 MiB`,
    ///   `snapshot_log_bytes <= 1 TiB`, `join_catch_up_timeout_ms <= 1 h`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive("raft.heartbeat_interval_ms", self.heartbeat_interval_ms)?;
        check_positive("raft.election_timeout_min_ms", self.election_timeout_min_ms)?;
        check_positive("raft.election_timeout_max_ms", self.election_timeout_max_ms)?;
        check_positive(
            "raft.install_snapshot_timeout_ms",
            self.install_snapshot_timeout_ms,
        )?;
        check_positive("raft.rpc_timeout_ms", self.rpc_timeout_ms)?;
        check_positive("raft.max_payload_entries", self.max_payload_entries)?;
        check_positive("raft.max_payload_bytes", self.max_payload_bytes)?;
        check_positive(
            "raft.snapshot_logs_since_last",
            self.snapshot_logs_since_last,
        )?;
        check_positive("raft.snapshot_log_bytes", self.snapshot_log_bytes)?;
        check_positive("raft.snapshot_chunk_bytes", self.snapshot_chunk_bytes)?;
        check_positive(
            "raft.join_catch_up_timeout_ms",
            self.join_catch_up_timeout_ms,
        )?;
        check_at_most(
            "raft.join_catch_up_timeout_ms",
            self.join_catch_up_timeout_ms,
            JOIN_CATCH_UP_TIMEOUT_MS_LIMIT,
        )?;
        check_less(
            "raft.heartbeat_interval_ms",
            self.heartbeat_interval_ms,
            "raft.election_timeout_min_ms",
            self.election_timeout_min_ms,
        )?;
        check_less(
            "raft.election_timeout_min_ms",
            self.election_timeout_min_ms,
            "raft.election_timeout_max_ms",
            self.election_timeout_max_ms,
        )?;
        check_at_most(
            "raft.election_timeout_max_ms",
            self.election_timeout_max_ms,
            ELECTION_TIMEOUT_MAX_MS_LIMIT,
        )?;
        check_at_most(
            "raft.snapshot_chunk_bytes",
            self.snapshot_chunk_bytes,
            SNAPSHOT_CHUNK_BYTES_LIMIT,
        )?;
        check_at_most(
            "raft.max_payload_bytes",
            self.max_payload_bytes,
            MAX_PAYLOAD_BYTES_LIMIT,
        )?;
        check_at_most(
            "raft.snapshot_log_bytes",
            self.snapshot_log_bytes,
            SNAPSHOT_LOG_BYTES_LIMIT,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        RaftConfig::default().validate().unwrap();
    }

    #[test]
    fn purge_keep_logs_may_be_zero() {
        let raft = RaftConfig {
            purge_keep_logs: 0,
            ..RaftConfig::default()
        };
        raft.validate().unwrap();
    }
}
