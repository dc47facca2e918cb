//! The `slots` family: a key's current [`Slot`], stored under the key.
//!
//! Format 4: the slot as `cairn_memory::Slot` lays it out, `fence_revision` last.
//! Format 3 (still read): the same fields without `fence_revision` ([`SlotV3`]). Its fence
//! is not in the bytes: the caller recomputes it from the key's history
//! (`store/state/slots.rs`), so every replica derives the same one. A build before
//! format 4 refuses a format-4 slot (unknown format byte) rather than misreading it.

use cairn_memory::{Meta, Revocation, Slot, StaleFlag, State, Tombstone};
use serde::{Deserialize, Serialize};

use crate::store::codec::{self, CodecError};

/// Current format of a stored slot. 4: the slot gained `fence_revision`.
pub const FORMAT: u8 = 4;

/// The previous format, still read: [`SlotV3`].
pub const FORMAT_V3: u8 = 3;

/// A slot read back, at the format it was stored in.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    Current(Slot),
    /// Needs its `fence_revision` from the key's history: [`SlotV3::into_slot`].
    V3(SlotV3),
}

/// Encodes a slot for the `slots` family and the slot cache.
pub fn encode(slot: &Slot) -> Vec<u8> {
    codec::encode_at(FORMAT, slot)
}

/// Decodes a slot stored at [`FORMAT`] or [`FORMAT_V3`]; refuses any other format byte.
pub fn decode(bytes: &[u8]) -> Result<Decoded, CodecError> {
    match codec::split_format(bytes)? {
        (FORMAT, body) => Ok(Decoded::Current(codec::decode_body(body)?)),
        (FORMAT_V3, body) => Ok(Decoded::V3(codec::decode_body(body)?)),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

/// Whether `bytes` hold a slot at the current format (stored bytes that can be cached or
/// hashed as they are).
pub fn is_current(bytes: &[u8]) -> bool {
    bytes.first() == Some(&FORMAT)
}

/// The layout of a [`Slot`] stored at format 3: the same fields in the same order,
/// without `fence_revision` (bincode has no field names, so the old bytes only decode as
/// this). Both conversions list every field without `..`: a field added to `Slot` fails to
/// compile here until the format question is answered.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct SlotV3 {
    key: String,
    state: State,
    version: u64,
    generation: u64,
    forget_epoch: u64,
    revision: u64,
    create_revision: u64,
    value: Option<String>,
    value_hash: Option<String>,
    value_revision: u64,
    meta: Meta,
    tombstone: Option<Tombstone>,
    revocation: Option<Revocation>,
    stale: Vec<StaleFlag>,
    superseded_by: Option<String>,
}

impl SlotV3 {
    /// The slot with the `fence_revision` the caller recomputed.
    pub fn into_slot(self, fence_revision: u64) -> Slot {
        let SlotV3 {
            key,
            state,
            version,
            generation,
            forget_epoch,
            revision,
            create_revision,
            value,
            value_hash,
            value_revision,
            meta,
            tombstone,
            revocation,
            stale,
            superseded_by,
        } = self;
        Slot {
            key,
            state,
            version,
            generation,
            forget_epoch,
            revision,
            create_revision,
            value,
            value_hash,
            value_revision,
            meta,
            tombstone,
            revocation,
            stale,
            superseded_by,
            fence_revision,
        }
    }

    /// The slot as a build before format 4 stored it (tests write old data with this).
    pub fn from_slot(slot: Slot) -> SlotV3 {
        let Slot {
            key,
            state,
            version,
            generation,
            forget_epoch,
            revision,
            create_revision,
            value,
            value_hash,
            value_revision,
            meta,
            tombstone,
            revocation,
            stale,
            superseded_by,
            fence_revision: _,
        } = slot;
        SlotV3 {
            key,
            state,
            version,
            generation,
            forget_epoch,
            revision,
            create_revision,
            value,
            value_hash,
            value_revision,
            meta,
            tombstone,
            revocation,
            stale,
            superseded_by,
        }
    }

    /// Encodes at format 3, as a build before format 4 did.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode_at(FORMAT_V3, self)
    }
}

/// Golden bytes generated from commit 7ebcaca (before the key model had its own record
/// types): `codec::encode_at(4, &slot)` of the samples, and format-3 bytes as that commit's
/// `SlotV3` encoded them. Regenerate only together with a format bump.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::assert_golden;
    use crate::store::records::samples::{slot_full, slot_min};

    const SLOT_FULL: &str = concat!(
        "040800000000000000676f6c64656e2f6b02000000070000000000000002000000000000",
        "000400000000000000780000000000000064000000000000000107000000000000007b22",
        "61223a317d010700000000000000682d76616c7565760000000000000005000000000000",
        "00616c696365010300000000000000737263020000000000000006000000000000007061",
        "74683a610600000000000000706174683a62010000000000000002000000000000007431",
        "7b68e5cf8b01000001040000000000000074732d310800000000000000676f6c64656e2f",
        "6b0300000000000000626f620300000000000000706969010500000000000000682d6f6c",
        "643268e5cf8b010000030000000000000001000000000000006900000000000000010500",
        "0000000000006361726f6c050000000000000077726f6e677868e5cf8b01000007000000",
        "0000000001000000000000000600000000000000706174683a610800000000000000682d",
        "616e63686f720400000000000000646176656e68e5cf8b01000001090000000000000067",
        "6f6c64656e2f6b327800000000000000",
    );
    const SLOT_MIN: &str = concat!(
        "040800000000000000676f6c64656e2f6d03000000020000000000000001000000000000",
        "000200000000000000090000000000000008000000000000000000080000000000000001",
        "000000000000006100000000000000000000000000000000000500000000000000000000",
        "00000000000000000000000000000000",
    );
    const SLOT_V3_FULL: &str = concat!(
        "030800000000000000676f6c64656e2f6b02000000070000000000000002000000000000",
        "000400000000000000780000000000000064000000000000000107000000000000007b22",
        "61223a317d010700000000000000682d76616c7565760000000000000005000000000000",
        "00616c696365010300000000000000737263020000000000000006000000000000007061",
        "74683a610600000000000000706174683a62010000000000000002000000000000007431",
        "7b68e5cf8b01000001040000000000000074732d310800000000000000676f6c64656e2f",
        "6b0300000000000000626f620300000000000000706969010500000000000000682d6f6c",
        "643268e5cf8b010000030000000000000001000000000000006900000000000000010500",
        "0000000000006361726f6c050000000000000077726f6e677868e5cf8b01000007000000",
        "0000000001000000000000000600000000000000706174683a610800000000000000682d",
        "616e63686f720400000000000000646176656e68e5cf8b01000001090000000000000067",
        "6f6c64656e2f6b32",
    );
    const SLOT_V3_MIN: &str = concat!(
        "030800000000000000676f6c64656e2f6d03000000020000000000000001000000000000",
        "000200000000000000090000000000000008000000000000000000080000000000000001",
        "000000000000006100000000000000000000000000000000000500000000000000000000",
        "0000000000000000",
    );
    const STATES: &str = "040000000000000000000000010000000200000003000000";

    #[test]
    fn golden_slot_with_every_optional_field() {
        let bytes = encode(&slot_full());
        assert_golden("slot", FORMAT, &bytes, SLOT_FULL);
        assert_eq!(decode(&bytes).unwrap(), Decoded::Current(slot_full()));
    }

    #[test]
    fn golden_slot_with_no_optional_field() {
        let bytes = encode(&slot_min());
        assert_golden("slot", FORMAT, &bytes, SLOT_MIN);
        assert_eq!(decode(&bytes).unwrap(), Decoded::Current(slot_min()));
    }

    #[test]
    fn golden_state_variant_order() {
        use State::*;
        let states = bincode::serialize(&vec![Absent, Active, Revoked, Forgotten]).unwrap();
        assert_golden("slot (State)", FORMAT, &states, STATES);
    }

    #[test]
    fn format_3_slots_still_decode() {
        for (hex_bytes, slot) in [(SLOT_V3_FULL, slot_full()), (SLOT_V3_MIN, slot_min())] {
            let bytes = hex::decode(hex_bytes).unwrap();
            let Decoded::V3(old) = decode(&bytes).unwrap() else {
                panic!("a format-3 slot decoded as current");
            };
            let fence = slot.fence_revision;
            assert_eq!(old.into_slot(fence), slot);
            assert_eq!(SlotV3::from_slot(slot).encode(), bytes);
        }
    }

    #[test]
    fn unknown_formats_are_refused() {
        let mut bytes = encode(&slot_min());
        bytes[0] = 9;
        assert!(matches!(decode(&bytes), Err(CodecError::UnknownFormat(9))));
        assert!(matches!(decode(&[]), Err(CodecError::Empty)));
        assert!(is_current(&encode(&slot_min())));
        assert!(!is_current(&hex::decode(SLOT_V3_MIN).unwrap()));
    }
}
