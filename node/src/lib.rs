//! `cairn-node`: one member of a cairn cluster.
//!
//! # Layout
//! The arrows point one way: `api` → `consensus` → `store` → `cairn_memory` (the pure key
//! model, its own crate so that purity is enforced by the dependency graph).
//!
//! - [`api`]: axum routes for clients and operators (SPEC §5, §6): JSON, strict bodies,
//!   consistency barriers, relaying to the leader.
//! - [`consensus`]: openraft's type config and the adapters from its storage traits to the
//!   store; the write batcher; the read gate (ReadIndex, bounded-staleness tokens); the
//!   API's one view of storage (`consensus::view::StateView`: `api` holds no store handle).
//! - [`raft_rpc`]: Raft RPCs between peers over HTTP with bincode bodies.
//! - [`store`]: RocksDB (log, state machine, snapshots, codec). No RocksDB type leaves it;
//!   it knows nothing of openraft.
//! - [`serve`]: the accept loop of both ports: a bound on open connections, a deadline for
//!   request heads, TLS when configured, graceful shutdown.
//! - [`tls`]: TLS configurations, presented certificates, certificate generation (SPEC §8).
//! - [`datadir`]: the exclusive lock and node-id check on the data directory.
//! - [`metrics`]: counters for `GET /metrics`.
//! - [`native_heap`]: gives glibc's free pages (RocksDB's heap) back to the kernel.
//! - [`node`]: wiring and clean shutdown.
//! - [`planted`]: deliberate bugs for the chaos suite's self-test (feature `planted-bugs`).

pub mod api;
pub mod consensus;
pub mod datadir;
pub mod log_throttle;
pub mod metrics;
pub mod native_heap;
pub mod node;
pub mod planted;
pub mod raft_rpc;
pub mod serve;
pub mod store;
pub mod tls;
