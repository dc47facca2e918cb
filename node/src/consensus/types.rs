//! The openraft type configuration and what a log entry carries.

use std::sync::Arc;

use cairn_access::{AccessChange, AccessError};
use cairn_memory::{Command, CommandResponse};
use serde::{Deserialize, Serialize};

/// Where a member listens. Stored in the Raft membership, so every node learns every
/// other node's addresses from the log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub client_addr: String,
    pub peer_addr: String,
}

/// The payload of one normal Raft entry: the commands the leader's batcher gathered, with
/// the leader's clock and dedup retention stamped in, so that every replica applies the
/// entry identically (no replica consults its own clock or config while applying).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Leader wall-clock unix milliseconds at proposal.
    pub now_ms: u64,
    /// How long `request_id`s are remembered, in leader time.
    pub dedup_retention_ms: u64,
    /// Shared: an entry is cloned for each follower's replication and for apply, and the
    /// commands never change after proposal (encoded exactly like a `Vec`).
    pub commands: Arc<[Command]>,
    /// A change of principals or grants (SPEC §8), proposed in an entry of its own (no
    /// commands). Applied before the entry's commands would be.
    pub access: Option<AccessChange>,
}

/// One response per command of the entry, in order, and the access change's outcome
/// (the new `acl_revision`, or why it was refused).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub responses: Vec<CommandResponse>,
    pub access: Option<Result<u64, AccessError>>,
}

openraft::declare_raft_types!(
    /// cairn's Raft types: u64 node ids, [`NodeInfo`] addresses, snapshots as files.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = NodeInfo,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StoredMembership = openraft::StoredMembership<NodeId, NodeInfo>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, NodeInfo>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StorageIOError = openraft::StorageIOError<NodeId>;
