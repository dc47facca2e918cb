//! cairn node configuration: types, TOML files, validation.
//!
//! # Layout
//! - [`node`]: [`NodeConfig`] (top-level fields + the sections below), [`Overrides`] (flags
//!   and env, filled by the node binary), [`NodeConfig::load`], cross-section checks.
//! - [`raft`]: `[raft]`, [`RaftConfig`]: openraft timings, snapshot and log-purge policy.
//! - [`batching`]: `[batching]`, [`BatchingConfig`]: group commit of client ops into entries.
//! - [`reads`]: `[reads]`, [`ReadsConfig`]: read tokens and `min_revision` waits.
//! - [`limits`]: `[limits]`, [`Limits`]: bounds on client input (SPEC §5);
//!   `limits_check` validates them.
//! - [`transport`]: TLS and peer-proof keys (SPEC §8), [`PeerProof`], the peer secret.
//! - [`error`]: [`ConfigError`]; every message starts with the field it is about.
//!
//! Example files, every field with its default and why: `config/node{1,2,3}.toml`.
//!
//! # Precedence
//! Per field: override (flag/env) > file > default. Defaults for `data_dir`,
//! `client_addr` and `peer_addr` derive from the id (SPEC §6): `./data/node-{id}`,
//! `127.0.0.1:(7400+id)`, `127.0.0.1:(7500+id)`. The file rejects unknown fields.

pub mod batching;
pub mod error;
pub mod limits;
mod limits_check;
pub mod node;
pub mod raft;
pub mod reads;
pub mod transport;

pub use batching::BatchingConfig;
pub use error::ConfigError;
pub use limits::Limits;
pub use limits_check::{
    BATCH_OPS_MAX_LIMIT, KEY_BYTES_MAX_LIMIT, PAGE_ITEMS_MAX_LIMIT, VALUE_BYTES_MAX_LIMIT,
};
pub use node::{
    host_of, is_host_port, resolve, Host, NodeConfig, Overrides, CLIENT_PORT_BASE, DEFAULT_HOST,
    NODE_ID_MAX, PEER_PORT_BASE,
};
pub use raft::RaftConfig;
pub use reads::ReadsConfig;
pub use transport::{
    check_tls_files_open, is_loopback, read_peer_secret, PeerProof, PEER_SECRET_BYTES_MIN,
};
