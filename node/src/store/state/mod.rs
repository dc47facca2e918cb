//! The state machine's data in RocksDB: slots, history, tombstones, the anchor index,
//! dedup records and the change feed.
//!
//! - `reads`: the queries (slot, history, tombstone, list and anchor scans, feed page,
//!   digest). Readers always go to RocksDB, never to the slot cache.
//! - `slots`: reading a slot back: decode (upgrading a format-3 slot with a fence from
//!   history), check, and the apply path's cached read.
//! - `txn`: [`StateTxn`], the write transaction of one `apply` call.
//! - What each record's bytes are is `store::records`' business.
//!
//! Writes go through a [`StateTxn`]: it reads through its own pending writes (so later
//! commands of one Raft entry, and later entries of one apply call, see earlier ones) and
//! commits everything, including the applied log id and membership, as ONE `WriteBatch`.
//! A crash therefore never leaves data and `last_applied` out of step.

mod reads;
mod slots;
mod txn;

use std::sync::Arc;

use super::codec::{self, CodecError};
use super::engine::{cf, Engine, StoreError};

pub use reads::FeedPosition;
pub use txn::StateTxn;

/// Names of the blobs kept in `sm_meta`.
pub mod meta {
    /// Encoded last applied log id (opaque here).
    pub const LAST_APPLIED: &[u8] = b"last_applied";
    /// Encoded last membership (opaque here).
    pub const MEMBERSHIP: &[u8] = b"membership";
    /// u64: the apply clock, the highest leader time applied (keeps time monotonic across
    /// leader changes).
    pub const CLOCK_MS: &[u8] = b"clock_ms";
    /// The access record (`store::records::access`): principals, grants, `acl_revision`.
    pub const ACCESS: &[u8] = b"access";
}

#[derive(Clone)]
pub struct StateEngine {
    engine: Arc<Engine>,
}

/// Maps a record's decode error to the store error naming its column family.
fn in_family(family: &'static str) -> impl Fn(CodecError) -> StoreError {
    move |source| StoreError::Codec { cf: family, source }
}

impl StateEngine {
    pub fn new(engine: Arc<Engine>) -> Self {
        StateEngine { engine }
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    fn get(&self, family: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.engine.state_db().get_cf(self.engine.cf(family), key)?)
    }

    pub fn meta(&self, name: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.get(cf::SM_META, name)
    }

    /// The access record; the default (auth off, no principals) if none was ever stored.
    pub fn access(&self) -> Result<cairn_access::state::AccessRecord, StoreError> {
        Ok(match self.meta(meta::ACCESS)? {
            Some(b) => super::records::access::decode(&b).map_err(in_family(cf::SM_META))?,
            None => Default::default(),
        })
    }

    pub fn clock_ms(&self) -> Result<u64, StoreError> {
        Ok(match self.meta(meta::CLOCK_MS)? {
            Some(b) => codec::decode(&b).map_err(in_family(cf::SM_META))?,
            None => 0,
        })
    }
}
