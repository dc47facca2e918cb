//! Admission: a wire request becomes a logged command (SPEC §5), or a typed rejection.
//!
//! Runs before anything reaches the Raft log, so the log only ever holds valid input and
//! apply never has to reject on shape. Every rejection is 400 `invalid_request` whose
//! message starts with the offending field (`ops[2].key: …` inside a batch) and whose
//! details carry `field` (and `op_index` in a batch), or 413 `too_large` for a value. A
//! rejection for a size also carries `limit` (the largest allowed) and `size`, in the
//! same unit: bytes for a string, items for a list (SPEC §5, error details).
//!
//! Rules:
//! - key: 1..=`key_bytes_max` bytes of UTF-8, no control characters.
//! - value: ≤ `value_bytes_max` bytes as canonical (compact, sorted-keys) JSON, else 413.
//! - actor: 1..=`actor_bytes_max`, no control characters.
//! - reason: required and not blank for forget and revoke, optional elsewhere but never
//!   blank when given; ≤ `reason_bytes_max`; no control characters but newline and tab.
//! - source, tags, anchors, `observed_hash`, `request_id`: bounded, no control characters;
//!   anchors are valid `kind:value`. Repeated anchors or tags are kept once.
//! - supersede `by`: a valid key, different from `key`.
//! - batch: 1..=`batch_ops_max` ops; `request_id` belongs on the batch, never on an op.
//!
//! Layout:
//! - `ops`: one function per mutation request (`write`, `forget`, ...): request → [`Mutation`].
//! - `command`: the [`Command`] of a single-operation endpoint or of a batch, with its
//!   `request_id` and payload hash.
//! - `fields`: the rule of each field (key, actor, reason, anchors, tags, cues, ...).
//! - `payload_hash`: what a `request_id` replay is compared on.
//! - `rejection`: the shapes of a 400 (`field`, `limit`, `size`, `op_index`).
//!
//! [`Mutation`]: crate::Mutation
//! [`Command`]: crate::Command

mod command;
mod fields;
mod ops;
mod payload_hash;
mod rejection;
#[cfg(test)]
mod test_support;

pub use command::{batch, single};
pub use fields::{actor, cues, key, prefix, OBSERVED_HASH_BYTES_MAX};
pub use ops::{flag_stale, forget, mutation, reinstate, revoke, supersede, write, VALUE_DEPTH_MAX};
pub use rejection::in_op_path;
