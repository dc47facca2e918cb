//! Input limits (SPEC §5). Enforced before anything reaches the Raft log.

use serde::{Deserialize, Serialize};

/// Every bound on client input, with its unit last in the name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Key length in bytes of UTF-8 (keys must also be non-empty, without control chars).
    pub key_bytes_max: usize,
    /// Value size as compact JSON.
    pub value_bytes_max: usize,
    pub actor_bytes_max: usize,
    pub reason_bytes_max: usize,
    pub anchors_max: usize,
    pub anchor_bytes_max: usize,
    pub tags_max: usize,
    pub tag_bytes_max: usize,
    pub source_bytes_max: usize,
    pub request_id_bytes_max: usize,
    pub batch_ops_max: usize,
    /// Largest `limit` a list or recall may ask for.
    pub page_items_max: u32,
    pub cues_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            key_bytes_max: 512,
            value_bytes_max: 1024 * 1024,
            actor_bytes_max: 128,
            reason_bytes_max: 4096,
            anchors_max: 64,
            anchor_bytes_max: 1024,
            tags_max: 64,
            tag_bytes_max: 256,
            source_bytes_max: 1024,
            request_id_bytes_max: 128,
            batch_ops_max: 1000,
            page_items_max: 1000,
            cues_max: 64,
        }
    }
}
