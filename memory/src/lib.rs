//! The key model (SPEC §2, §4): pure apply rules, no RocksDB, no Raft, no HTTP.
//!
//! This is its own crate (not a module of `cairn-node`) so that purity is enforced by the
//! dependency graph: nothing here can reach RocksDB or openraft, and its unit tests build
//! without them.
//!
//! Layout:
//! - `types`: what a slot is, what a logged mutation is, what applying one produces.
//! - `records`: the key model's own record types (state, metadata, tombstone, history
//!   event, mutation result, feed record, error code): what the rules use and the store
//!   persists. Their field order is the stored layout.
//! - `wire`: those records as `cairn-api` wire types (one direction: records go out);
//!   the only place (with `render` and `admit`, which build and read wire types) where
//!   the key model touches the API.
//! - one file per operation (`write`, `forget`, `revoke`, `reinstate`, `flag_stale`,
//!   `supersede`): `apply(slot, key, <the op's fields>, ctx) -> Result<Change, OpError>`, a
//!   pure function of the current slot and the logged operation;
//!   `execute::apply(slot, &Mutation, ctx)` checks conditions and dispatches to them.
//! - `conditions`: `expected_version` / `based_on_revision`, checked before every rule.
//! - `execute`: runs a logged command (one op, or an all-or-nothing batch) against a
//!   [`SlotSource`], handles `request_id` dedup, and returns [`Effect`]s for the store to
//!   commit in one atomic batch.
//! - `render`, `anchors`: delivery (SPEC §4) and the anchor matching used by recall.
//! - `admit`: a wire request becomes a logged command: every field validated, values made
//!   canonical, the payload hash of `request_id` replays; run before anything reaches the log.
//! - `hash`: canonical JSON, `value_hash`, tombstone ids.
//! - `step` (private): the version/revision/event/result step every operation shares.
//!
//! Determinism: every function here depends only on its arguments. Time comes from the
//! leader-stamped `Ctx::now_ms`, identity from the log index. No clock, no randomness, no
//! I/O ordering, so every replica applies identically.

pub mod admit;
pub mod anchors;
pub mod conditions;
pub mod execute;
pub mod flag_stale;
pub mod forget;
pub mod hash;
pub mod records;
pub mod reinstate;
pub mod render;
pub mod revoke;
mod step;
pub mod supersede;
pub mod types;
pub mod wire;
pub mod write;

pub use records::*;
pub use types::*;
