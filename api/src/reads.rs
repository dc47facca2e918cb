//! Read requests and their responses (SPEC §3, §5): `read`, `probe`, `history`, `list`
//! and `recall`, each with the consistency options of SPEC §3.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Consistency, HistoryEvent, Record, Served, State};

/// Consistency options any read may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReadOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

/// `POST /v1/read`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReadRequest {
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ReadResponse {
    #[serde(flatten)]
    pub record: Record,
    pub served: Served,
}

/// `POST /v1/probe`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ProbeRequest {
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

/// Value record vs retention record of a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ProbeResponse {
    pub key: String,
    pub state: State,
    pub value_present: bool,
    pub retention_present: bool,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub tombstone_id: Option<String>,
    /// Log index of the entry that carried the current or last value (0: never had one).
    pub value_revision: u64,
    /// Highest log index purged from this node's Raft log (0: none).
    pub log_purged_through: u64,
    pub served: Served,
}

/// `POST /v1/history`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct HistoryRequest {
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct HistoryResponse {
    pub key: String,
    pub events: Vec<HistoryEvent>,
    pub served: Served,
}

/// `POST /v1/list`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ListRequest {
    pub prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states: Option<Vec<State>>,
    /// Page size, 1 to the node's `limits.page_items_max` (default 100). A `u64`, so that
    /// any whole number out of that range is refused by the node naming the range, with
    /// `limit` and `size`, not by the JSON decoder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ListResponse {
    pub items: Vec<Record>,
    pub next_after: Option<String>,
    pub served: Served,
}

// The schema of a recall's `include`: a `forgotten` or `absent` state still decodes (as a
// `State`), so that the node refuses it by name (SPEC §4), but a schema lists only what is
// served.
/// A state a recall may include; `forgotten` and `absent` are refused (400).
#[cfg(feature = "json-schema")]
#[derive(schemars::JsonSchema)]
#[schemars(rename_all = "snake_case")]
pub enum RecallableState {
    Active,
    Revoked,
}

/// `POST /v1/recall`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RecallRequest {
    #[cfg_attr(
        feature = "json-schema",
        schemars(inner(pattern(crate::patterns::ANCHOR)))
    )]
    pub cues: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// States to include; default `["active", "revoked"]`. `forgotten` is never returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "json-schema",
        schemars(with = "Option<Vec<RecallableState>>")
    )]
    pub include: Option<Vec<State>>,
    /// Page size, 1 to the node's `limits.page_items_max` (default 100). A `u64`, so that
    /// any whole number out of that range is refused by the node naming the range, with
    /// `limit` and `size`, not by the JSON decoder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct RecallNote {
    pub key: String,
    pub state: State,
    pub rendered: String,
    pub matched: Vec<String>,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub revision: u64,
    /// The note's value, left out when it holds none; a stored JSON `null` is present as
    /// `null`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::records::present_value"
    )]
    pub value: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct RecallResponse {
    pub notes: Vec<RecallNote>,
    pub served: Served,
}
/// `new(key, options)` for the reads of one key.
macro_rules! keyed_read {
    ($request:ident) => {
        impl $request {
            pub fn new(key: impl Into<String>, options: ReadOptions) -> Self {
                $request {
                    key: key.into(),
                    consistency: options.consistency,
                    max_staleness_ms: options.max_staleness_ms,
                    min_revision: options.min_revision,
                }
            }
        }
    };
}

keyed_read!(ReadRequest);
keyed_read!(ProbeRequest);
keyed_read!(HistoryRequest);

impl ListRequest {
    pub fn new(prefix: impl Into<String>) -> Self {
        ListRequest {
            prefix: prefix.into(),
            states: None,
            limit: None,
            after: None,
            consistency: None,
            max_staleness_ms: None,
            min_revision: None,
        }
    }
}

impl RecallRequest {
    pub fn new(cues: Vec<String>) -> Self {
        RecallRequest {
            cues,
            prefix: None,
            include: None,
            limit: None,
            consistency: None,
            max_staleness_ms: None,
            min_revision: None,
        }
    }
}
