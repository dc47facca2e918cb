//! The `dedup` family: a remembered `request_id` ([`DedupRecord`]), stored under the id.
//! (`dedup_by_time` holds keys only: `decided_at_ms` big-endian, then the id.)
//!
//! Format 3: the record as `cairn_memory::DedupRecord` lays it out, its results as
//! `cairn_memory::MutationResult` and its rejection as `cairn_memory::OpError` (whose
//! `ErrorCode` variant order is part of the layout); `op_index` is a `usize`, which
//! bincode 1.3 writes as a u64 on every platform. 2 remembered rejections too (1 only
//! applied commands); 3 computes `payload_hash` from the validated mutations instead of
//! the request's JSON, so a format-2 record would answer a retry of its own request with
//! `request_id_reused`. Older records are refused, not misread.

use cairn_memory::DedupRecord;

use crate::store::codec::{self, CodecError};

/// Current format of a stored dedup record.
pub const FORMAT: u8 = 3;

pub fn encode(record: &DedupRecord) -> Vec<u8> {
    codec::encode_at(FORMAT, record)
}

pub fn decode(bytes: &[u8]) -> Result<DedupRecord, CodecError> {
    super::decode_only(FORMAT, bytes)
}

/// Golden bytes generated from commit 7ebcaca (before the key model had its own record
/// types), from that commit's positional `StoredDedup` mirror of the samples. Regenerate
/// only together with a format bump.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::assert_golden;
    use crate::store::records::samples::{result_full, result_min};
    use cairn_memory::{Decision, ErrorCode, OpError};

    const DEDUP_APPLIED: &str = concat!(
        "03040000000000000070682d310000000002000000000000000800000000000000676f6c",
        "64656e2f6b03000000030000000000000001000000000000000300000000000000690000",
        "000000000000010101040000000000000074732d310800000000000000676f6c64656e2f",
        "6b0300000000000000626f620300000000000000706969010500000000000000682d6f6c",
        "643268e5cf8b010000030000000000000001000000000000006900000000000000080000",
        "0000000000676f6c64656e2f6d0100000001000000000000000100000000000000000000",
        "0000000000080000000000000000000082000000000000008268e5cf8b010000",
    );
    const DEDUP_REJECTED_FULL: &str = concat!(
        "03040000000000000070682d32010000000500000005000000000000007374616c651400",
        "0000000000007b2266656e63655f7265766973696f6e223a357d01020000000000000083",
        "000000000000008368e5cf8b010000",
    );
    const DEDUP_REJECTED_MIN: &str = concat!(
        "030000000000000000010000000100000002000000000000006e6f02000000000000007b",
        "7d0084000000000000000700000000000000",
    );
    const CODES: &str = concat!(
        "090000000000000000000000010000000200000003000000040000000500000006000000",
        "0700000008000000",
    );

    fn check(record: DedupRecord, golden_hex: &str) {
        let bytes = encode(&record);
        assert_golden("dedup record", FORMAT, &bytes, golden_hex);
        assert_eq!(decode(&bytes).unwrap(), record);
    }

    #[test]
    fn golden_applied_record_with_and_without_optional_result_fields() {
        check(
            DedupRecord {
                payload_hash: "ph-1".into(),
                decision: Decision::Applied(vec![result_full(), result_min()]),
                revision: 130,
                decided_at_ms: 1_700_000_000_130,
            },
            DEDUP_APPLIED,
        );
    }

    #[test]
    fn golden_rejected_record_with_an_op_index() {
        check(
            DedupRecord {
                payload_hash: "ph-2".into(),
                decision: Decision::Rejected {
                    error: OpError {
                        code: ErrorCode::StaleWrite,
                        message: "stale".into(),
                        details_json: r#"{"fence_revision":5}"#.into(),
                    },
                    op_index: Some(2),
                },
                revision: 131,
                decided_at_ms: 1_700_000_000_131,
            },
            DEDUP_REJECTED_FULL,
        );
    }

    #[test]
    fn golden_rejected_record_without_an_op_index() {
        check(
            DedupRecord {
                payload_hash: String::new(),
                decision: Decision::Rejected {
                    error: OpError {
                        code: ErrorCode::NotFound,
                        message: "no".into(),
                        details_json: "{}".into(),
                    },
                    op_index: None,
                },
                revision: 132,
                decided_at_ms: 7,
            },
            DEDUP_REJECTED_MIN,
        );
    }

    /// Every code a remembered rejection can hold, at the position `cairn_api::ErrorCode`
    /// gave it when dedup records stored that type.
    #[test]
    fn golden_error_code_variant_order() {
        use ErrorCode::*;
        let codes = [
            InvalidRequest,
            NotFound,
            VersionConflict,
            KeyForgotten,
            KeyRevoked,
            StaleWrite,
            InvalidTransition,
            TooLarge,
            RequestIdReused,
        ];
        let bytes = bincode::serialize(&codes.to_vec()).unwrap();
        assert_golden("dedup record (ErrorCode)", FORMAT, &bytes, CODES);
    }

    #[test]
    fn older_formats_are_refused() {
        let mut bytes = hex::decode(DEDUP_REJECTED_MIN).unwrap();
        bytes[0] = 2;
        assert!(matches!(decode(&bytes), Err(CodecError::UnknownFormat(2))));
    }
}
