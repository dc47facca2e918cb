//! Storage: RocksDB and the log's segment files stay inside this module.
//!
//! - `engine`: the two RocksDB instances (log, state machine), their column families and
//!   explicit options.
//! - `blob_gc`: when compactions collect blob garbage (pure policy; the engine applies it).
//! - `codec`: the versioned binary framing (format byte + bincode 1.3) and key encodings.
//! - `records`: each stored record type's format, encoder and decoder (old formats too),
//!   pinned by golden-bytes tests.
//! - `log`: the Raft log as opaque bytes, with its metadata.
//! - `segments`: the log's entries in append-only segment files, each written once.
//! - `log_writer`: group commit of the log: staged appends, one fsync per group.
//! - `state`: the state machine's data: read queries, slot decoding, and its atomic apply
//!   transaction.
//! - `slot_cache`: encoded slots in memory, in front of the `slots` family (pure: no RocksDB).
//! - `snapshot`: snapshot files, streamed to and from disk.
//!
//! Nothing here knows openraft: the consensus layer encodes its own types and passes bytes.
//! Nothing outside this module sees a RocksDB type.

pub mod blob_gc;
pub mod codec;
pub mod engine;
pub mod log;
pub mod log_writer;
pub mod records;
pub mod segments;
pub mod slot_cache;
pub mod snapshot;
pub mod state;

pub use engine::{Engine, EngineMemory, EngineOptions, StoreError};
pub use log::LogEngine;
pub use log_writer::LogWriter;
pub use snapshot::{SnapshotDir, SnapshotHeader};
pub use state::{StateEngine, StateTxn};
