//! Wire types of the cairn HTTP API (SPEC §5, §6).
//!
//! These are the JSON shapes clients and nodes exchange. They know nothing of openraft or
//! RocksDB. Every request type rejects unknown fields, so a typo such as `expected_vesion`
//! is a 400, never a silently unconditional write.
//!
//! Types that the node also persists (tombstones, revocations, stale flags, history events,
//! meta) carry no `skip_serializing_if`: their optional fields serialize as `null` in JSON
//! and stay positional for bincode on disk.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Lifecycle state of a key (a "slot").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Absent,
    Active,
    Revoked,
    Forgotten,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Absent => "absent",
            State::Active => "active",
            State::Revoked => "revoked",
            State::Forgotten => "forgotten",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Read consistency level (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    #[default]
    Linearizable,
    Bounded,
    Any,
}

impl Consistency {
    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::Linearizable => "linearizable",
            Consistency::Bounded => "bounded",
            Consistency::Any => "any",
        }
    }
}

// ---------------------------------------------------------------------------------------
// Mutations
// ---------------------------------------------------------------------------------------

/// `POST /v1/write`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteRequest {
    pub key: String,
    pub value: Value,
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchors: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub clear_tombstone: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub override_revocation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `POST /v1/forget`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetRequest {
    pub key: String,
    pub actor: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `POST /v1/revoke`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeRequest {
    pub key: String,
    pub actor: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `POST /v1/reinstate`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReinstateRequest {
    pub key: String,
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `POST /v1/flag-stale`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlagStaleRequest {
    pub key: String,
    pub actor: String,
    pub anchor: String,
    pub observed_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `POST /v1/supersede`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupersedeRequest {
    pub key: String,
    pub by: String,
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// One operation of a `POST /v1/batch`, tagged by `op`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum BatchOp {
    Write(WriteRequest),
    Forget(ForgetRequest),
    Revoke(RevokeRequest),
    Reinstate(ReinstateRequest),
    FlagStale(FlagStaleRequest),
    Supersede(SupersedeRequest),
}

impl BatchOp {
    pub fn key(&self) -> &str {
        match self {
            BatchOp::Write(r) => &r.key,
            BatchOp::Forget(r) => &r.key,
            BatchOp::Revoke(r) => &r.key,
            BatchOp::Reinstate(r) => &r.key,
            BatchOp::FlagStale(r) => &r.key,
            BatchOp::Supersede(r) => &r.key,
        }
    }

    pub fn request_id(&self) -> Option<&str> {
        match self {
            BatchOp::Write(r) => r.request_id.as_deref(),
            BatchOp::Forget(r) => r.request_id.as_deref(),
            BatchOp::Revoke(r) => r.request_id.as_deref(),
            BatchOp::Reinstate(r) => r.request_id.as_deref(),
            BatchOp::FlagStale(r) => r.request_id.as_deref(),
            BatchOp::Supersede(r) => r.request_id.as_deref(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            BatchOp::Write(_) => "write",
            BatchOp::Forget(_) => "forget",
            BatchOp::Revoke(_) => "revoke",
            BatchOp::Reinstate(_) => "reinstate",
            BatchOp::FlagStale(_) => "flag_stale",
            BatchOp::Supersede(_) => "supersede",
        }
    }
}

/// `POST /v1/batch`: all operations are applied in one Raft entry, or none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub ops: Vec<BatchOp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Result of one applied mutation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutationResult {
    pub key: String,
    pub state: State,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub revision: u64,
    pub replayed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub already: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone: Option<Tombstone>,
}

/// Result of `POST /v1/batch`: one result per operation, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult {
    pub results: Vec<MutationResult>,
    pub revision: u64,
    pub replayed: bool,
}

// ---------------------------------------------------------------------------------------
// Records (also persisted by the node: no skip_serializing_if below)
// ---------------------------------------------------------------------------------------

/// The durable record of a forget. Kept forever; readable by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    pub id: String,
    pub key: String,
    pub actor: String,
    pub reason: String,
    /// sha256 of the canonical JSON of the forgotten value; `null` for a pre-emptive forget.
    pub value_hash: Option<String>,
    pub forgotten_at: u64,
    pub version: u64,
    pub generation: u64,
    pub revision: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    pub actor: String,
    pub reason: String,
    pub revoked_at: u64,
    pub version: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleFlag {
    pub anchor: String,
    pub observed_hash: String,
    pub actor: String,
    pub flagged_at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Meta {
    pub actor: String,
    pub source: Option<String>,
    pub anchors: Vec<String>,
    pub tags: Vec<String>,
    /// Leader-stamped unix milliseconds.
    pub updated_at: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Written,
    Forgotten,
    TombstoneCleared,
    Revoked,
    Reinstated,
    StaleFlagged,
    Superseded,
}

/// One entry of a key's append-only history. Never holds a value, only its hash.
///
/// `reason` is the reason the request gave, verbatim (`None` when it gave none). The
/// extension fields say what the operation acted on and are present only for their kind:
/// `by` for `superseded`, `anchor` and `observed_hash` for `stale_flagged`; JSON omits them
/// when absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub kind: EventKind,
    pub version: u64,
    pub revision: u64,
    pub actor: String,
    pub reason: Option<String>,
    pub at: u64,
    pub value_hash: Option<String>,
    /// `superseded`: the key that replaced this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// `stale_flagged`: the anchor that changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
    /// `stale_flagged`: the hash observed for the anchor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_hash: Option<String>,
}

/// Where and how a read was served (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    pub node_id: u64,
    pub role: String,
    pub consistency: Consistency,
    pub applied_index: u64,
    pub leader_commit_index: u64,
    pub ms_since_leader_contact: u64,
}

/// A key's current record as returned by reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub key: String,
    pub state: State,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub revision: u64,
    pub create_revision: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    pub meta: Meta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone: Option<Tombstone>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revocation: Option<Revocation>,
    #[serde(default)]
    pub stale: Vec<StaleFlag>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    pub rendered: String,
}

// ---------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------

/// Consistency options any read may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
#[serde(deny_unknown_fields)]
pub struct ReadRequest {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadResponse {
    #[serde(flatten)]
    pub record: Record,
    pub served: Served,
}

/// `POST /v1/probe`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeRequest {
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
#[serde(deny_unknown_fields)]
pub struct HistoryRequest {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryResponse {
    pub key: String,
    pub events: Vec<HistoryEvent>,
    pub served: Served,
}

/// `POST /v1/list`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListRequest {
    pub prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states: Option<Vec<State>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
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
pub struct ListResponse {
    pub items: Vec<Record>,
    pub next_after: Option<String>,
    pub served: Served,
}

/// `POST /v1/recall`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallRequest {
    pub cues: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// States to include; default `["active", "revoked"]`. `forgotten` is never returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<State>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_revision: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecallNote {
    pub key: String,
    pub state: State,
    pub rendered: String,
    pub matched: Vec<String>,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub revision: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecallResponse {
    pub notes: Vec<RecallNote>,
    pub served: Served,
}

/// One Server-Sent Event of `GET /v1/watch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    pub revision: u64,
    pub key: String,
    pub kind: EventKind,
    pub state: State,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
}

// ---------------------------------------------------------------------------------------
// Cluster administration (SPEC §6)
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub id: u64,
    pub client_addr: String,
    pub peer_addr: String,
}

/// `POST /cluster/init`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitRequest {
    pub nodes: Vec<NodeSpec>,
}

/// `POST /cluster/remove`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveRequest {
    pub id: u64,
}

/// Answer of init, join and remove: the membership after the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipResponse {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    pub nodes: Vec<NodeSpec>,
}

/// `GET /cluster/status`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// `POST /cluster/compact`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactResponse {
    pub snapshot_index: u64,
    pub log_purged_through: u64,
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// Every error code of SPEC §5, with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    NotFound,
    VersionConflict,
    KeyForgotten,
    KeyRevoked,
    StaleWrite,
    InvalidTransition,
    TooLarge,
    RequestIdReused,
    NoLeader,
    StaleRead,
    OutcomeUnknown,
    /// 503: the node's bounded write queue is full; nothing was proposed, retry later.
    Overloaded,
    Internal,
}

impl ErrorCode {
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::NotFound => 404,
            ErrorCode::VersionConflict
            | ErrorCode::KeyForgotten
            | ErrorCode::KeyRevoked
            | ErrorCode::StaleWrite
            | ErrorCode::InvalidTransition => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::RequestIdReused => 422,
            ErrorCode::NoLeader | ErrorCode::StaleRead | ErrorCode::Overloaded => 503,
            ErrorCode::OutcomeUnknown => 504,
            ErrorCode::Internal => 500,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::NotFound => "not_found",
            ErrorCode::VersionConflict => "version_conflict",
            ErrorCode::KeyForgotten => "key_forgotten",
            ErrorCode::KeyRevoked => "key_revoked",
            ErrorCode::StaleWrite => "stale_write",
            ErrorCode::InvalidTransition => "invalid_transition",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::RequestIdReused => "request_id_reused",
            ErrorCode::NoLeader => "no_leader",
            ErrorCode::StaleRead => "stale_read",
            ErrorCode::OutcomeUnknown => "outcome_unknown",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{"error": {"code", "message", ...details}}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
    /// Code-specific details, e.g. `current_version`, `tombstone`, `revocation`, `op_index`,
    /// `request_id`, `leader_id`.
    #[serde(flatten)]
    pub details: serde_json::Map<String, Value>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_rejected() {
        let typo = r#"{"key":"k","value":1,"actor":"a","expected_vesion":3}"#;
        let err = serde_json::from_str::<WriteRequest>(typo).unwrap_err();
        assert!(err.to_string().contains("expected_vesion"), "{err}");
    }

    #[test]
    fn batch_ops_are_tagged_and_strict() {
        let ok = r#"{"ops":[{"op":"write","key":"k","value":"v","actor":"a"},
                           {"op":"forget","key":"k","actor":"a","reason":"r"}]}"#;
        let batch: BatchRequest = serde_json::from_str(ok).unwrap();
        assert_eq!(batch.ops.len(), 2);
        assert_eq!(batch.ops[1].name(), "forget");
        let typo =
            r#"{"ops":[{"op":"forget","key":"k","actor":"a","reason":"r","expected_vesion":1}]}"#;
        assert!(serde_json::from_str::<BatchRequest>(typo).is_err());
        let unknown_op = r#"{"ops":[{"op":"erase","key":"k"}]}"#;
        assert!(serde_json::from_str::<BatchRequest>(unknown_op).is_err());
    }

    #[test]
    fn error_codes_serialize_as_spec_names() {
        for code in [
            ErrorCode::VersionConflict,
            ErrorCode::OutcomeUnknown,
            ErrorCode::RequestIdReused,
        ] {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, Value::String(code.as_str().to_string()));
        }
        assert_eq!(ErrorCode::StaleRead.http_status(), 503);
    }
}
