//! What a chaos run is asked to do, and where its pieces come from.

use std::path::PathBuf;

use serde::Serialize;

use super::nemesis::schedule::Timing;
use super::nemesis::Kind;
use super::workload::Mix;

#[derive(Clone, Debug, Serialize)]
pub struct RunOptions {
    /// Cluster size (3 or 5).
    pub nodes: u64,
    /// Fault phase length; the first pass over every nemesis may run past it.
    pub duration_ms: u64,
    pub seed: u64,
    pub nemeses: Vec<Kind>,
    pub timing: Timing,
    pub mix: Mix,
    /// Pause between two operations of one workload process.
    pub pace_ms: u64,
    /// Runs go to `<store>/<UTC time>-<tag>/`.
    pub store: PathBuf,
    pub node_bin: PathBuf,
    /// Sets `CAIRN_PLANTED_BUG` on every node (needs a planted-bugs build).
    pub planted_bug: Option<String>,
    /// Keep the nodes' data dirs after the run (logs are always kept).
    pub keep_data: bool,
    /// Time budget of the linearizability search per key.
    pub search_budget_ms: u64,
    /// How long the final phase waits for every member to apply the same index.
    pub converge_timeout_ms: u64,
    /// SPEC §8 on: HTTPS client ports, mutual TLS between peers, auth with an admin
    /// token every client presents ([`super::secure`]).
    pub secure: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            nodes: 3,
            duration_ms: 60_000,
            seed: rand::random(),
            nemeses: Kind::ALL.to_vec(),
            timing: Timing {
                fault_ms: (2_000, 5_000),
                heal_ms: (2_000, 4_000),
                liveness_bound: std::time::Duration::from_secs(10),
            },
            mix: Mix::default(),
            pace_ms: 20,
            store: super::store::default_store(),
            node_bin: default_node_bin(),
            planted_bug: None,
            keep_data: false,
            search_budget_ms: 60_000,
            converge_timeout_ms: 45_000,
            secure: false,
        }
    }
}

/// `$CARGO_TARGET_DIR`, default `$HOME/.cache/cairn/target` (as every script uses).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/cairn/target")
        }
    }
}

/// `$CAIRN_NODE_BIN`, default `<target dir>/debug/cairn-node`.
pub fn default_node_bin() -> PathBuf {
    match std::env::var_os("CAIRN_NODE_BIN") {
        Some(bin) if !bin.is_empty() => PathBuf::from(bin),
        _ => target_dir().join("debug/cairn-node"),
    }
}
