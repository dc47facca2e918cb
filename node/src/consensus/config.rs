//! The openraft `Config`, every field that matters set explicitly from the node config.

use cairn_config::RaftConfig;
use openraft::{Config, SnapshotPolicy};

/// Builds and validates openraft's config.
///
/// Loopback timings: heartbeats every `heartbeat_interval_ms`, elections after
/// `election_timeout_min_ms..max_ms` of silence, so a killed leader is replaced within
/// about `election_timeout_max_ms` plus one election round (config validation caps the max
/// at 1.5 s).
pub fn openraft_config(raft: &RaftConfig) -> anyhow::Result<Config> {
    let config = Config {
        cluster_name: "cairn".to_string(),
        heartbeat_interval: raft.heartbeat_interval_ms,
        election_timeout_min: raft.election_timeout_min_ms,
        election_timeout_max: raft.election_timeout_max_ms,
        install_snapshot_timeout: raft.install_snapshot_timeout_ms,
        max_payload_entries: raft.max_payload_entries,
        // A follower this far behind gets a snapshot instead of entries.
        replication_lag_threshold: raft.snapshot_logs_since_last,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(raft.snapshot_logs_since_last),
        snapshot_max_chunk_size: raft.snapshot_chunk_bytes,
        max_in_snapshot_log_to_keep: raft.purge_keep_logs,
        purge_batch_size: 256,
        enable_tick: true,
        enable_heartbeat: true,
        enable_elect: true,
        ..Config::default()
    };
    Ok(config.validate()?)
}
