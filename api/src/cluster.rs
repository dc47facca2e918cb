//! Cluster administration (SPEC §6): init, join, remove, status, compact.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub id: u64,
    pub client_addr: String,
    pub peer_addr: String,
}

/// `POST /cluster/init`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct InitRequest {
    pub nodes: Vec<NodeSpec>,
    /// Turns auth on from the start, with this first admin (SPEC §8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<crate::EnableAuthRequest>,
}

/// `POST /cluster/remove`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RemoveRequest {
    pub id: u64,
}

/// Answer of init, join and remove: the membership after the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct MembershipResponse {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub nodes: Vec<NodeSpec>,
    /// Init with `auth`: the admin's token, shown this once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<crate::AuthEnabled>,
}

/// `GET /cluster/status`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ClusterStatus {
    pub node_id: u64,
    pub role: String,
    pub leader_id: Option<u64>,
    pub term: u64,
    pub last_log_index: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub ms_since_leader_contact: Option<u64>,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub nodes: Vec<NodeSpec>,
    pub snapshot_index: u64,
    pub log_purged_through: u64,
}

/// `GET /healthz`: 200 while the node serves its ports and Raft runs, 503 (`ok: false`)
/// once Raft has stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Health {
    /// Whether Raft runs on this node.
    pub ok: bool,
    pub node_id: u64,
    pub role: String,
}

/// `POST /cluster/compact`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CompactResponse {
    pub snapshot_index: u64,
    pub log_purged_through: u64,
}
