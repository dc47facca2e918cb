//! The `tombstones` family: the durable record of a forget, stored under its id and kept
//! forever.
//!
//! Format 3: the tombstone as `cairn_memory::Tombstone` lays it out (the general codec
//! format the tombstone has been written at since format 3 was introduced).

use cairn_memory::Tombstone;

use crate::store::codec::{self, CodecError};

/// Current format of a stored tombstone.
pub const FORMAT: u8 = 3;

pub fn encode(tombstone: &Tombstone) -> Vec<u8> {
    codec::encode_at(FORMAT, tombstone)
}

pub fn decode(bytes: &[u8]) -> Result<Tombstone, CodecError> {
    super::decode_only(FORMAT, bytes)
}

/// Golden bytes generated from commit 7ebcaca (before the key model had its own record
/// types), when the store wrote `cairn_api::Tombstone` with `codec::encode`. Regenerate
/// only together with a format bump.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::assert_golden;
    use crate::store::records::samples::{tombstone_full, tombstone_min};

    const TOMBSTONE_FULL: &str = concat!(
        "03040000000000000074732d310800000000000000676f6c64656e2f6b03000000000000",
        "00626f620300000000000000706969010500000000000000682d6f6c643268e5cf8b0100",
        "00030000000000000001000000000000006900000000000000",
    );
    const TOMBSTONE_MIN: &str = concat!(
        "03040000000000000074732d320800000000000000676f6c64656e2f6d01000000000000",
        "006101000000000000007200050000000000000001000000000000000100000000000000",
        "0900000000000000",
    );

    #[test]
    fn golden_tombstone_with_a_value_hash() {
        let bytes = encode(&tombstone_full());
        assert_golden("tombstone", FORMAT, &bytes, TOMBSTONE_FULL);
        assert_eq!(decode(&bytes).unwrap(), tombstone_full());
    }

    #[test]
    fn golden_tombstone_of_a_pre_emptive_forget() {
        let bytes = encode(&tombstone_min());
        assert_golden("tombstone", FORMAT, &bytes, TOMBSTONE_MIN);
        assert_eq!(decode(&bytes).unwrap(), tombstone_min());
    }

    #[test]
    fn unknown_formats_are_refused() {
        let mut bytes = encode(&tombstone_min());
        bytes[0] = 4;
        assert!(matches!(decode(&bytes), Err(CodecError::UnknownFormat(4))));
    }
}
