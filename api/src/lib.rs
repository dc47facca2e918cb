//! Wire types of the cairn HTTP API (SPEC §5, §6): the JSON shapes clients and nodes
//! exchange, shared by the node, the Rust client and CLI, the key model's API edge and the
//! chaos harness.
//!
//! This crate depends on serde alone. It knows nothing of openraft or RocksDB, and nothing
//! here is written to disk: the node stores its own record types (`cairn-memory`'s slot and
//! history records, `cairn-node`'s `store::records`) and converts at its API edge, so a
//! field added here changes the JSON contract and never a stored layout.
//!
//! Every request type rejects unknown fields, so a typo such as `expected_vesion` is a 400,
//! never a silently unconditional write.
//!
//! # Layout
//!
//! - [`state`]: a key's lifecycle [`State`] and the read [`Consistency`] levels.
//! - [`mutations`]: the six mutation requests, [`BatchRequest`], and their results.
//! - [`reads`]: `read`, `probe`, `history`, `list` and `recall` with [`ReadOptions`].
//! - [`records`]: what reads return about a key ([`Record`], [`Tombstone`],
//!   [`Revocation`], [`StaleFlag`], [`Meta`], [`HistoryEvent`]) and [`Served`].
//! - [`watch`]: the change feed's [`WatchEvent`].
//! - [`cluster`]: `/cluster/*` administration.
//! - [`auth`]: principals, grants and the `/v1/auth/*` bodies (SPEC §8).
//! - [`error`]: [`ErrorCode`] (every code of SPEC §5, with its HTTP status) and the error
//!   body.

pub mod auth;
pub mod cluster;
pub mod error;
pub mod mutations;
#[cfg(feature = "json-schema")]
mod patterns;
pub mod reads;
pub mod records;
pub mod state;
mod strict_value;
pub mod watch;

pub use auth::*;
pub use cluster::*;
pub use error::*;
pub use mutations::*;
pub use reads::*;
pub use records::*;
pub use state::*;
pub use strict_value::{value_from_slice, value_from_str};
pub use watch::*;
