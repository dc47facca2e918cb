//! How a Raft log entry is stored: its own format byte, then bincode.
//!
//! - Format 5: a write carries its value's sha256 (`Op::Write::value_hash`), computed once
//!   by the leader, so that no replica hashes a value again at apply.
//! - Format 4: no value hash; the entry payload [`Request`] carries an optional access
//!   change (SPEC §8) after its commands.
//! - Format 3: no access field either.
//!
//! Entries of formats 3 and 4 (written by earlier builds) still decode, into today's
//! [`Entry`]: each write's value hash is computed as they are read, an absent access change
//! is `None`. So an existing data dir keeps its log. Every other consensus blob (vote, log
//! ids, membership) keeps [`codec::FORMAT`]; only the entry's layout moved. The peer wire
//! carries entries inside openraft's requests at the same layout, so peers must run one
//! build (there is no version negotiation on it).

use std::sync::Arc;

use cairn_access::AccessChange;
use cairn_memory::hash::value_hash;
use cairn_memory::{Command, Conditions, Mutation, Op};
use openraft::{EntryPayload, Membership};
use serde::Deserialize;

use super::{Entry, LogId, NodeId, NodeInfo, Request};
use crate::store::codec::{self, CodecError};

/// The layout of stored entries.
pub const FORMAT: u8 = 5;
/// Writes without their value hash: still read.
const FORMAT_NO_VALUE_HASH: u8 = 4;
/// Writes without their value hash, and no access field: still read.
const FORMAT_NO_ACCESS: u8 = 3;

pub fn encode(entry: &Entry) -> Vec<u8> {
    codec::encode_at(FORMAT, entry)
}

pub fn decode(bytes: &[u8]) -> Result<Entry, CodecError> {
    match codec::split_format(bytes)? {
        (FORMAT, body) => codec::decode_body(body),
        (FORMAT_NO_VALUE_HASH, body) => {
            codec::decode_body::<OldEntry<RequestV4>>(body).map(upgrade)
        }
        (FORMAT_NO_ACCESS, body) => codec::decode_body::<OldEntry<RequestV3>>(body).map(upgrade),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

/// The log id an encoded entry starts with (every layout begins with it), without decoding
/// the payload.
pub fn log_id(bytes: &[u8]) -> Result<LogId, CodecError> {
    match codec::split_format(bytes)? {
        (FORMAT | FORMAT_NO_VALUE_HASH | FORMAT_NO_ACCESS, body) => codec::decode_body(body),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

/// openraft's `Entry` as formats 3 and 4 stored it: the same fields and variant order, with
/// that format's payload.
#[derive(Deserialize)]
struct OldEntry<R> {
    log_id: LogId,
    payload: OldPayload<R>,
}

#[derive(Deserialize)]
enum OldPayload<R> {
    Blank,
    Normal(R),
    Membership(Membership<NodeId, NodeInfo>),
}

#[derive(Deserialize)]
struct RequestV4 {
    now_ms: u64,
    dedup_retention_ms: u64,
    commands: Vec<CommandV4>,
    access: Option<AccessChange>,
}

#[derive(Deserialize)]
struct RequestV3 {
    now_ms: u64,
    dedup_retention_ms: u64,
    commands: Vec<CommandV4>,
}

/// A [`Command`] before format 5: the same fields, its mutations without value hashes.
#[derive(Deserialize)]
struct CommandV4 {
    request_id: Option<String>,
    payload_hash: String,
    mutations: Vec<MutationV4>,
    is_batch: bool,
}

#[derive(Deserialize)]
struct MutationV4 {
    op: OpV4,
    cond: Conditions,
}

/// [`Op`] before format 5: the same variants in the same order; `Write` has no
/// `value_hash`.
#[derive(Deserialize)]
enum OpV4 {
    Write {
        key: String,
        value: String,
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

fn upgrade<R: Into<Request>>(old: OldEntry<R>) -> Entry {
    let payload = match old.payload {
        OldPayload::Blank => EntryPayload::Blank,
        OldPayload::Membership(m) => EntryPayload::Membership(m),
        OldPayload::Normal(r) => EntryPayload::Normal(r.into()),
    };
    Entry {
        log_id: old.log_id,
        payload,
    }
}

impl From<RequestV4> for Request {
    fn from(old: RequestV4) -> Request {
        Request {
            now_ms: old.now_ms,
            dedup_retention_ms: old.dedup_retention_ms,
            commands: upgrade_commands(old.commands),
            access: old.access,
        }
    }
}

impl From<RequestV3> for Request {
    fn from(old: RequestV3) -> Request {
        Request {
            now_ms: old.now_ms,
            dedup_retention_ms: old.dedup_retention_ms,
            commands: upgrade_commands(old.commands),
            access: None,
        }
    }
}

fn upgrade_commands(old: Vec<CommandV4>) -> Arc<[Command]> {
    old.into_iter()
        .map(|c| Command {
            request_id: c.request_id,
            payload_hash: c.payload_hash,
            is_batch: c.is_batch,
            mutations: c
                .mutations
                .into_iter()
                .map(|m| Mutation {
                    op: m.op.into(),
                    cond: m.cond,
                })
                .collect(),
        })
        .collect()
}

impl From<OpV4> for Op {
    fn from(old: OpV4) -> Op {
        match old {
            OpV4::Write {
                key,
                value,
                actor,
                source,
                anchors,
                tags,
                clear_tombstone,
                override_revocation,
                reason,
            } => Op::Write {
                key,
                value_hash: value_hash(&value),
                value,
                actor,
                source,
                anchors,
                tags,
                clear_tombstone,
                override_revocation,
                reason,
            },
            OpV4::Forget { key, actor, reason } => Op::Forget { key, actor, reason },
            OpV4::Revoke { key, actor, reason } => Op::Revoke { key, actor, reason },
            OpV4::Reinstate { key, actor, reason } => Op::Reinstate { key, actor, reason },
            OpV4::FlagStale {
                key,
                actor,
                anchor,
                observed_hash,
            } => Op::FlagStale {
                key,
                actor,
                anchor,
                observed_hash,
            },
            OpV4::Supersede {
                key,
                by,
                actor,
                reason,
            } => Op::Supersede {
                key,
                by,
                actor,
                reason,
            },
        }
    }
}
