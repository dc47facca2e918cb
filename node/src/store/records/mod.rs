//! The stored record types, one module each, and their formats: what the state machine
//! writes to its column families (and so to snapshots, which copy those records as they
//! are stored).
//!
//! Each module has the record's current `FORMAT` (the first byte of every stored value,
//! [`super::codec`]), `encode`, and `decode`, which also reads the record's previous
//! formats that a data dir or snapshot may still hold. The records themselves are the key
//! model's types (`cairn_memory::records`, `Slot`, `DedupRecord`): bincode has no field
//! names, so their field and variant order is the layout. Never the `cairn-api` wire
//! types: those grow JSON fields freely.
//!
//! | record        | family       | format | also reads                          |
//! |---------------|--------------|--------|-------------------------------------|
//! | [`slot`]      | `slots`      | 4      | 3 (`SlotV3`: no `fence_revision`)   |
//! | [`history`]   | `history`    | 4      | 3 (`EventV3`: no `by`/`anchor`/…)   |
//! | [`tombstone`] | `tombstones` | 3      |                                     |
//! | [`dedup`]     | `dedup`      | 3      |                                     |
//! | [`feed`]      | `feed`       | 3      |                                     |
//! | [`access`]    | `sm_meta`    | 1      |                                     |
//!
//! Changing a record's layout means a new `FORMAT` for that record, decoding the old one
//! (a `…V<n>` type with the old fields in the old order), and new golden bytes. Each
//! module's golden tests encode fixed samples and compare them to checked-in bytes, so a
//! layout change without a format bump fails them. Raft log entries, vote, membership
//! and applied ids are openraft's types, encoded by `consensus` at [`super::codec::FORMAT`];
//! the store keeps them as opaque bytes.

pub mod access;
pub mod dedup;
pub mod feed;
pub mod history;
pub mod slot;
pub mod tombstone;

#[cfg(test)]
mod samples;

use serde::de::DeserializeOwned;

use super::codec::{self, CodecError};

/// Decodes a record that has only ever had one layout, stored at `format`.
fn decode_only<T: DeserializeOwned>(format: u8, bytes: &[u8]) -> Result<T, CodecError> {
    match codec::split_format(bytes)? {
        (f, body) if f == format => codec::decode_body(body),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

/// Golden-bytes assertion shared by the record tests.
#[cfg(test)]
fn assert_golden(record: &str, format: u8, encoded: &[u8], golden_hex: &str) {
    assert_eq!(
        hex::encode(encoded),
        golden_hex,
        "the stored encoding of a {record} changed: records already on disk and in \
         snapshots hold the old bytes. Bump the {record}'s FORMAT (now {format}), keep \
         decoding the old layout, and only then update this golden hex"
    );
}
