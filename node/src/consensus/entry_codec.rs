//! How a Raft log entry is stored: its own format byte, then bincode.
//!
//! - Format 4: the entry payload [`Request`] carries an optional access change (SPEC §8)
//!   after its commands.
//! - Format 3: the payload had no access field. Such entries (written before format 4)
//!   still decode, into a [`Request`] without an access change, so an existing data dir
//!   keeps its log.
//!
//! Every other consensus blob (vote, log ids, membership) keeps [`codec::FORMAT`]; only the
//! entry's layout moved. The peer wire carries entries inside openraft's requests at the
//! same layout, so peers must run one build (there is no version negotiation on it).

use std::sync::Arc;

use cairn_memory::Command;
use openraft::{EntryPayload, Membership};
use serde::Deserialize;

use super::{Entry, LogId, NodeId, NodeInfo, Request};
use crate::store::codec::{self, CodecError};

/// The layout of stored entries.
pub const FORMAT: u8 = 4;
/// The previous layout, still read.
const FORMAT_NO_ACCESS: u8 = 3;

pub fn encode(entry: &Entry) -> Vec<u8> {
    codec::encode_at(FORMAT, entry)
}

pub fn decode(bytes: &[u8]) -> Result<Entry, CodecError> {
    match codec::split_format(bytes)? {
        (FORMAT, body) => codec::decode_body(body),
        (FORMAT_NO_ACCESS, body) => codec::decode_body::<EntryV3>(body).map(Entry::from),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

/// The log id an encoded entry starts with (both layouts begin with it), without decoding
/// the payload.
pub fn log_id(bytes: &[u8]) -> Result<LogId, CodecError> {
    match codec::split_format(bytes)? {
        (FORMAT | FORMAT_NO_ACCESS, body) => codec::decode_body(body),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

/// openraft's `Entry` at format 3: the same fields and variant order.
#[derive(Deserialize)]
struct EntryV3 {
    log_id: LogId,
    payload: PayloadV3,
}

#[derive(Deserialize)]
enum PayloadV3 {
    Blank,
    Normal(RequestV3),
    Membership(Membership<NodeId, NodeInfo>),
}

#[derive(Deserialize)]
struct RequestV3 {
    now_ms: u64,
    dedup_retention_ms: u64,
    commands: Arc<[Command]>,
}

impl From<EntryV3> for Entry {
    fn from(old: EntryV3) -> Entry {
        let payload = match old.payload {
            PayloadV3::Blank => EntryPayload::Blank,
            PayloadV3::Membership(m) => EntryPayload::Membership(m),
            PayloadV3::Normal(r) => EntryPayload::Normal(Request {
                now_ms: r.now_ms,
                dedup_retention_ms: r.dedup_retention_ms,
                commands: r.commands,
                access: None,
            }),
        };
        Entry {
            log_id: old.log_id,
            payload,
        }
    }
}
