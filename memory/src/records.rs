//! The key model's own records: what a slot holds, what history and the change feed
//! remember, what a mutation answers and why it was rejected.
//!
//! These are the types the rules work on and the store persists with bincode (inside
//! [`Slot`](crate::Slot), history events, tombstones, dedup records and feed records).
//! bincode has no field names and encodes an enum variant by its position, so for every
//! type here the field order and the variant order ARE the stored layout:
//! - never reorder, insert or remove a field or variant without a format bump in the
//!   store (`node/src/store/records`, whose golden-bytes tests fail on any change);
//! - no `skip_serializing_if` (an omitted field cannot be read back) and no
//!   `serde_json::Value` (values travel as canonical JSON text).
//!
//! They started as copies of the `cairn-api` wire types, field for field, so the bytes
//! on disk did not change when the key model stopped storing wire types. The wire types
//! are free to grow JSON fields; conversions live in [`wire`](crate::wire), at the API
//! edge.

use serde::{Deserialize, Serialize};

/// Lifecycle state of a key (a "slot").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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

/// Who last wrote a key, from where, and how recall finds it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Meta {
    pub actor: String,
    pub source: Option<String>,
    pub anchors: Vec<String>,
    pub tags: Vec<String>,
    /// Leader-stamped unix milliseconds.
    pub updated_at: u64,
}

/// The durable record of a forget. Kept forever; readable by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    pub id: String,
    pub key: String,
    pub actor: String,
    pub reason: String,
    /// sha256 of the canonical JSON of the forgotten value; `None` for a pre-emptive forget.
    pub value_hash: Option<String>,
    pub forgotten_at: u64,
    pub version: u64,
    pub generation: u64,
    pub revision: u64,
}

/// Why and when a key was revoked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    pub actor: String,
    pub reason: String,
    pub revoked_at: u64,
    pub version: u64,
}

/// One anchor reported changed since the key was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleFlag {
    pub anchor: String,
    pub observed_hash: String,
    pub actor: String,
    pub flagged_at: u64,
}

/// What a history event (and a feed record) says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Written,
    Forgotten,
    TombstoneCleared,
    Revoked,
    Reinstated,
    StaleFlagged,
    Superseded,
}

impl EventKind {
    /// Whether the change this event records sets the key's fence (`Slot::fence_revision`,
    /// SPEC §2 `based_on_revision`): a forget, a revoke or a re-creation.
    pub fn fences(self) -> bool {
        matches!(
            self,
            EventKind::Forgotten | EventKind::Revoked | EventKind::TombstoneCleared
        )
    }
}

/// One entry of a key's append-only history. Never holds a value, only its hash.
///
/// `reason` is the reason the request gave, verbatim (`None` when it gave none). The
/// extension fields say what the operation acted on and are set only for their kind: `by`
/// for `Superseded`, `anchor` and `observed_hash` for `StaleFlagged`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub kind: EventKind,
    pub version: u64,
    pub revision: u64,
    pub actor: String,
    pub reason: Option<String>,
    pub at: u64,
    pub value_hash: Option<String>,
    /// `Superseded`: the key that replaced this one.
    pub by: Option<String>,
    /// `StaleFlagged`: the anchor that changed.
    pub anchor: Option<String>,
    /// `StaleFlagged`: the hash observed for the anchor.
    pub observed_hash: Option<String>,
}

/// The result of one applied mutation, as answered and as remembered for `request_id`
/// replays (dedup records).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutationResult {
    pub key: String,
    pub state: State,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub revision: u64,
    pub replayed: bool,
    /// `Some(true)` for an idempotent no-op; `None` otherwise.
    pub already: Option<bool>,
    /// The key's tombstone, when the mutation left it forgotten.
    pub tombstone: Option<Tombstone>,
}

/// One change-feed record (`GET /v1/watch`): one per applied history event.
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

/// Why the key model rejected a mutation: the codes of SPEC §5 that input validation and
/// the apply rules produce. Stored in dedup records (a remembered rejection), so the
/// variant order is the stored layout: it is the order of the first nine
/// `cairn_api::ErrorCode`s, which is what dedup records held before this type existed.
/// `InvalidTransition` is no rule's answer today; it keeps its position. Codes added
/// later are appended, which leaves every earlier record's bytes as they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The command's author lost the grant (or was deleted) between proposal and apply
    /// (SPEC §8): refused by the [`crate::execute::Permit`] the state machine passes.
    PermissionDenied,
}

impl ErrorCode {
    /// The code as the API spells it.
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
            ErrorCode::PermissionDenied => "permission_denied",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
