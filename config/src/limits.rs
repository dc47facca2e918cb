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
    /// A list or recall answer stops taking items once the values it holds reach this
    /// many bytes (the first item is always taken): 1000 values of 1 MiB would otherwise
    /// be one 2 GB answer (each value is sent as `value` and inside `rendered`), built in
    /// the node's memory at once.
    pub page_value_bytes_max: usize,
    /// Open `GET /v1/watch` streams per node; one more is 503 `overloaded`. Every stream
    /// reads the change feed after each applied entry.
    pub watchers_max: usize,
    /// Open client-port connections per node; past it the node accepts no more until one
    /// closes (the kernel queues them), so idle connections cannot take every file
    /// descriptor. The peer port has its own fixed bound.
    pub connections_max: usize,
    /// A connection that has not sent a whole request head this long after it opened, or
    /// after its previous answer (an idle kept-alive connection), is closed.
    pub request_head_timeout_ms: u64,
    /// A request whose body stops arriving (no byte of it for this long, before its end)
    /// is refused and its connection closed: a client that declares a long body and sends
    /// part of it holds no connection for ever.
    pub request_body_timeout_ms: u64,
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
            page_value_bytes_max: 4 * 1024 * 1024,
            watchers_max: 1024,
            connections_max: 4096,
            request_head_timeout_ms: 30_000,
            request_body_timeout_ms: 30_000,
        }
    }
}
