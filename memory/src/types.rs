//! Types of the key model. Everything here is persisted with bincode (slots, dedup records)
//! or logged (commands), so no `skip_serializing_if`, no `serde_json::Value` (values travel
//! as canonical JSON text), and field order is layout (see [`crate::records`]).

use crate::records::{
    ErrorCode, HistoryEvent, Meta, MutationResult, Revocation, StaleFlag, State, Tombstone,
    WatchEvent,
};
use serde::{Deserialize, Serialize};

/// The current record of a key that has been touched at least once.
/// An absent key has no `Slot` (`Option<Slot>::None`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub key: String,
    /// Never `Absent`.
    pub state: State,
    /// +1 on every applied mutation; never resets.
    pub version: u64,
    /// Incarnation; +1 when a forgotten key is re-established with `clear_tombstone`.
    pub generation: u64,
    /// `version` at the last forget; 0 if never forgotten.
    pub forget_epoch: u64,
    /// Log index of the entry that last changed the key.
    pub revision: u64,
    /// Log index that started the current generation.
    pub create_revision: u64,
    /// Canonical JSON of the value; `Some` exactly when state is active or revoked.
    pub value: Option<String>,
    /// sha256 (hex) of `value`; kept after a forget in the tombstone, not here.
    pub value_hash: Option<String>,
    /// Log index of the entry that carried the current or last value; 0 if none ever.
    /// Kept after a forget so `probe` can tell when the value's bytes left the log.
    pub value_revision: u64,
    pub meta: Meta,
    pub tombstone: Option<Tombstone>,
    pub revocation: Option<Revocation>,
    pub stale: Vec<StaleFlag>,
    pub superseded_by: Option<String>,
    /// Log index of the latest change that fenced the key for `based_on_revision`: its
    /// last forget, revoke or re-creation (`clear_tombstone`); 0 if none. Kept when the
    /// change is undone (reinstate, `override_revocation`): a writer whose data predates a
    /// revoke stays fenced after it is lifted (SPEC §2). Never decreases.
    pub fence_revision: u64,
}

/// Preconditions any mutation may carry, checked atomically at apply time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conditions {
    /// Reject with `version_conflict` unless the current version equals this (0 = absent).
    pub expected_version: Option<u64>,
    /// Reject with `stale_write` if the key was forgotten, revoked or re-created at a
    /// revision greater than this.
    pub based_on_revision: Option<u64>,
}

/// One logged operation. Values are canonical JSON text (validated before logging).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Write {
        key: String,
        value: String,
        /// sha256 (hex) of `value`, computed once when the leader admits the write, so that
        /// no replica hashes the value again at apply (log-entry format 5).
        value_hash: String,
        actor: String,
        source: Option<String>,
        anchors: Vec<String>,
        tags: Vec<String>,
        clear_tombstone: bool,
        override_revocation: bool,
        reason: Option<String>,
    },
    Forget {
        key: String,
        actor: String,
        reason: String,
    },
    Revoke {
        key: String,
        actor: String,
        reason: String,
    },
    Reinstate {
        key: String,
        actor: String,
        reason: Option<String>,
    },
    FlagStale {
        key: String,
        actor: String,
        anchor: String,
        observed_hash: String,
    },
    Supersede {
        key: String,
        by: String,
        actor: String,
        reason: Option<String>,
    },
}

impl Op {
    pub fn key(&self) -> &str {
        match self {
            Op::Write { key, .. }
            | Op::Forget { key, .. }
            | Op::Revoke { key, .. }
            | Op::Reinstate { key, .. }
            | Op::FlagStale { key, .. }
            | Op::Supersede { key, .. } => key,
        }
    }

    /// Who the operation is logged as done by (with auth on: the principal's name).
    pub fn actor(&self) -> &str {
        match self {
            Op::Write { actor, .. }
            | Op::Forget { actor, .. }
            | Op::Revoke { actor, .. }
            | Op::Reinstate { actor, .. }
            | Op::FlagStale { actor, .. }
            | Op::Supersede { actor, .. } => actor,
        }
    }

    /// The operation's name as the API spells it (`write`, `forget`, …, `flag_stale`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Write { .. } => "write",
            Op::Forget { .. } => "forget",
            Op::Revoke { .. } => "revoke",
            Op::Reinstate { .. } => "reinstate",
            Op::FlagStale { .. } => "flag_stale",
            Op::Supersede { .. } => "supersede",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mutation {
    pub op: Op,
    pub cond: Conditions,
}

/// What one client request asks the log to do: a single mutation, or an all-or-nothing
/// batch. Several commands are packed into one Raft entry by the write batcher; each
/// command succeeds or fails on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub request_id: Option<String>,
    /// sha256 (hex) of what the request asks (`admit::payload_hash`), compared on `request_id`
    /// replays; empty when there is no `request_id`.
    pub payload_hash: String,
    pub mutations: Vec<Mutation>,
    /// `true` for `POST /v1/batch` (its result is a `BatchResult`).
    pub is_batch: bool,
}

/// Apply context, identical on every replica: from the log entry, never from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctx {
    /// Log index of the entry being applied (becomes `revision`).
    pub revision: u64,
    /// Leader-stamped unix milliseconds of the entry.
    pub now_ms: u64,
}

/// Why a mutation was rejected. Rejections change nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpError {
    pub code: ErrorCode,
    pub message: String,
    /// Details as compact JSON object text (e.g. `{"current_version":3}`), merged into the
    /// error body next to `code` and `message`.
    pub details_json: String,
}

impl OpError {
    pub fn new(code: ErrorCode, message: impl Into<String>, details: serde_json::Value) -> Self {
        debug_assert!(details.is_object() || details.is_null());
        let details_json = if details.is_null() {
            "{}".to_string()
        } else {
            details.to_string()
        };
        OpError {
            code,
            message: message.into(),
            details_json,
        }
    }

    /// The same rejection answered again from the dedup record: its details gain
    /// `"replayed": true`, so the caller can tell the 409 is the request's original answer.
    pub fn replayed(self) -> Self {
        self.with_details(|details| {
            details.insert("replayed".into(), serde_json::Value::Bool(true));
        })
    }

    /// The same rejection with its details changed by `change`.
    pub fn with_details(
        self,
        change: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
    ) -> Self {
        let mut details: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&self.details_json).unwrap_or_default();
        change(&mut details);
        OpError {
            details_json: serde_json::Value::Object(details).to_string(),
            ..self
        }
    }
}

/// The effect of one successfully applied mutation on one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The slot after the mutation (unchanged for idempotent no-ops).
    pub slot: Slot,
    /// `None` for idempotent no-ops (`already: true`), which write nothing.
    pub event: Option<HistoryEvent>,
    /// A new tombstone to store by id (forget of a non-forgotten key only).
    pub new_tombstone: Option<Tombstone>,
    /// Anchor index maintenance for this key.
    pub anchors_removed: Vec<String>,
    pub anchors_added: Vec<String>,
    pub result: MutationResult,
}

/// A remembered `request_id` (exactly-once retries): how its command was decided the first
/// time the log reached it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupRecord {
    pub payload_hash: String,
    pub decision: Decision,
    /// Log index of the entry that first decided the command.
    pub revision: u64,
    /// Leader time of that entry; retention is measured from here.
    pub decided_at_ms: u64,
}

/// The first decision on a command. Rejections are remembered as well as applications: an
/// earlier attempt of the same request can reach the log *after* a retry was rejected (a
/// relay delayed in the network, a client that gave up on a slow node), and it must get the
/// same answer rather than apply against the state that has moved on since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    Applied(Vec<MutationResult>),
    Rejected {
        error: OpError,
        op_index: Option<usize>,
    },
}

/// The outcome of one command: per-mutation results, or the first rejection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResponse {
    Applied {
        results: Vec<MutationResult>,
        revision: u64,
        replayed: bool,
    },
    Rejected {
        error: OpError,
        op_index: Option<usize>,
    },
}

/// A write the store must commit, all of one entry's effects in one atomic batch.
// Effects live only between `execute` and the store's write batch, a few per command;
// boxing the slot would cost an allocation each for no memory worth saving.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    PutSlot(Slot),
    AppendEvent {
        key: String,
        event: HistoryEvent,
    },
    PutTombstone(Tombstone),
    AnchorAdd {
        anchor: String,
        key: String,
    },
    AnchorRemove {
        anchor: String,
        key: String,
    },
    PutDedup {
        request_id: String,
        record: DedupRecord,
    },
    /// A change feed record for `GET /v1/watch`.
    Watch(WatchEvent),
}

/// Read access to the applied state, as seen by the executor. The store implements this
/// over RocksDB; tests implement it over a map.
pub trait SlotSource {
    type Error;
    fn slot(&self, key: &str) -> Result<Option<Slot>, Self::Error>;
    fn dedup(&self, request_id: &str) -> Result<Option<DedupRecord>, Self::Error>;
}
