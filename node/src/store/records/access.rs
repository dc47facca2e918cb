//! The access record in `sm_meta`: principals (token hashes only), grants, whether auth
//! is on, and `acl_revision` (SPEC §8). One record, rewritten by each access change,
//! which are rare administrative entries; snapshots copy it with the rest of `sm_meta`.
//!
//! Format 1: `cairn_access::state::AccessRecord` as laid out by its field order.

use cairn_access::state::AccessRecord;

use crate::store::codec::CodecError;

/// Current format of the stored access record.
pub const FORMAT: u8 = 1;

pub fn encode(record: &AccessRecord) -> Vec<u8> {
    crate::store::codec::encode_at(FORMAT, record)
}

pub fn decode(bytes: &[u8]) -> Result<AccessRecord, CodecError> {
    super::decode_only(FORMAT, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::assert_golden;
    use cairn_access::state::PrincipalRecord;
    use cairn_access::{GrantRecord, Permissions, TokenHash};
    use cairn_api::Permission;

    const ACCESS: &str = concat!(
        "0101070000000000000002000000000000000500000000000000616c6963650202020202",
        "020202020202020202020202020202020202020202020202020202010000000000000006",
        "0000000000000066616374732f090068e5cf8b0100000400000000000000726f6f740400",
        "000000000000726f6f740101010101010101010101010101010101010101010101010101",
        "010101010101010000000000000000000000000000001f0068e5cf8b0100000400000000",
        "000000726f6f74",
    );

    fn sample() -> AccessRecord {
        let principal = |hash: u8, grants: Vec<GrantRecord>| PrincipalRecord {
            token_hash: TokenHash([hash; 32]),
            grants,
            created_at_ms: 1_700_000_000_000,
            created_by: "root".into(),
        };
        AccessRecord {
            enabled: true,
            acl_revision: 7,
            principals: [
                (
                    "root".to_string(),
                    principal(
                        1,
                        vec![GrantRecord {
                            prefix: String::new(),
                            permissions: Permissions::ALL,
                        }],
                    ),
                ),
                (
                    "alice".to_string(),
                    principal(
                        2,
                        vec![GrantRecord {
                            prefix: "facts/".into(),
                            permissions: Permissions::of([Permission::Read, Permission::Revoke]),
                        }],
                    ),
                ),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn golden_access_record() {
        let bytes = encode(&sample());
        assert_golden("access record", FORMAT, &bytes, ACCESS);
        assert_eq!(decode(&bytes).unwrap(), sample());
    }

    #[test]
    fn unknown_formats_are_refused() {
        let mut bytes = encode(&sample());
        bytes[0] = 9;
        assert!(decode(&bytes).is_err());
    }
}
