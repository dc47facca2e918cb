//! Consensus: the openraft type config and the adapters between openraft and the store.
//! This is the one place openraft's generics appear.
//!
//! - `types`: [`TypeConfig`], the entry payload ([`Request`]) and response.
//! - `log_store`: `RaftLogStorage` over [`crate::store::LogEngine`] and its group-commit
//!   [`crate::store::LogWriter`].
//! - `state_machine`: `RaftStateMachine` over [`crate::store::StateEngine`], applying
//!   commands with the pure rules of `cairn_memory`.
//! - `access`: [`access::AccessCell`], the applied principals and grants (SPEC §8) as
//!   the API layer reads them.
//! - `entry_codec`: the stored layout of log entries (format 5; formats 4 and 3 still read).
//! - `batcher`: packs concurrent client commands into one Raft entry.
//! - `config`: the explicit `openraft::Config`.
//! - `snapshot_trigger`: a snapshot once the log grew by `raft.snapshot_log_bytes`.
//! - `reads`: the read gate (ReadIndex, bounded-staleness tokens, `min_revision` waits).
//! - `view`: [`view::StateView`], the API layer's one handle on storage: the applied
//!   state's reads, the change feed, log positions and store statistics.
//! - `golden` (tests): the stored bytes of log entries and Raft metadata, pinned.

// openraft's `StorageError` is large, and it is the error type its storage traits demand:
// boxing it here would only add a conversion at every trait boundary.
#![allow(clippy::result_large_err)]

pub mod access;
pub mod batcher;
pub mod config;
pub mod entry_codec;
#[cfg(test)]
mod golden;
pub mod log_store;
pub mod reads;
pub mod snapshot_trigger;
pub mod state_machine;
pub mod types;
pub mod view;

pub use types::*;

use openraft::{RaftMetrics, ServerState};

/// The leader this node knows of, as status reports it and forwarding uses it: Raft's
/// `current_leader`, unless that is this node while it is not leading (openraft keeps
/// the vote of a leader that a membership change removed, so a former leader would name
/// itself while it answers `no_leader`), or a node outside the membership it holds.
pub fn known_leader(metrics: &RaftMetrics<NodeId, NodeInfo>) -> Option<NodeId> {
    known_leader_node(metrics).map(|(id, _)| id)
}

/// [`known_leader`] with its addresses, from the membership this node holds.
pub fn known_leader_node(metrics: &RaftMetrics<NodeId, NodeInfo>) -> Option<(NodeId, NodeInfo)> {
    let id = metrics.current_leader?;
    if id == metrics.id && metrics.state != ServerState::Leader {
        return None;
    }
    let node = metrics.membership_config.membership().get_node(&id)?;
    Some((id, node.clone()))
}
