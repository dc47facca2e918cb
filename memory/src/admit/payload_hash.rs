//! `payload_hash` (compared on `request_id` replays) is the sha256 of what the request asks
//! the log to do: its validated mutations (each names its operation, so a forget and a
//! revoke with byte-identical bodies differ) and whether they came as a batch, in the
//! codec's binary form. Values are canonical JSON by then and omitted fields hold their
//! defaults, so key order and spelled-out defaults do not change it; the `request_id`
//! is not part of it. A command without a `request_id` carries an empty hash: nothing
//! ever compares it, and hashing every write cost the leader ~5% of its CPU in a profile
//! when it went through `serde_json::Value` and canonical JSON text.

use sha2::{Digest, Sha256};

use crate::types::Mutation;

/// sha256 (hex) of the mutations and the batch flag (see the module doc).
///
/// The codec's bytes stream into the hash instead of into a buffer first: a request of
/// large values is not copied once more only to be hashed.
pub(super) fn payload_hash(mutations: &[Mutation], is_batch: bool) -> String {
    // `Sha256` is an `io::Write` that hashes what is written to it.
    let mut hasher = Sha256::new();
    bincode::serialize_into(&mut hasher, &(PAYLOAD_HASH_DOMAIN, is_batch, mutations))
        .expect("plain data always serializes, and hashing cannot fail");
    hex::encode(hasher.finalize())
}

/// Prefix of every hashed payload; a change of what is hashed changes it, so that old and
/// new hashes can never be equal by accident.
const PAYLOAD_HASH_DOMAIN: &str = "cairn payload v2";

#[cfg(test)]
mod tests {
    use crate::admit::test_support::*;

    #[test]
    fn payload_hash_ignores_request_id_and_key_order_but_not_the_operation() {
        let a = write_req(
            json!({"key": "k", "value": {"x": 1, "y": 2}, "actor": "a", "request_id": "r1"}),
        );
        let b = write_req(
            json!({"value": {"y": 2, "x": 1}, "actor": "a", "key": "k", "request_id": "r2"}),
        );
        let ca = single(write(&a, &l()).unwrap(), a.request_id.clone(), &l()).unwrap();
        let cb = single(write(&b, &l()).unwrap(), b.request_id.clone(), &l()).unwrap();
        assert_eq!(ca.payload_hash, cb.payload_hash);
        assert_eq!(ca.payload_hash.len(), 64, "sha256 hex");
        assert_eq!((ca.request_id.as_deref(), ca.is_batch), (Some("r1"), false));
        let c = write_req(json!({"key": "k", "value": {"x": 1, "y": 3}, "actor": "a"}));
        let cc = single(write(&c, &l()).unwrap(), Some("r3".into()), &l()).unwrap();
        assert_ne!(ca.payload_hash, cc.payload_hash);
        // A default spelled out is the same request.
        let d = write_req(
            json!({"key": "k", "value": {"x": 1, "y": 2}, "actor": "a", "clear_tombstone": false}),
        );
        let cd = single(write(&d, &l()).unwrap(), Some("r4".into()), &l()).unwrap();
        assert_eq!(ca.payload_hash, cd.payload_hash);

        let f: ForgetRequest = parse(json!({"key": "k", "actor": "a", "reason": "r"}));
        let r: RevokeRequest = parse(json!({"key": "k", "actor": "a", "reason": "r"}));
        let id = || Some("r5".to_string());
        let cf = single(forget(&f, &l()).unwrap(), id(), &l()).unwrap();
        let cr = single(revoke(&r, &l()).unwrap(), id(), &l()).unwrap();
        assert_ne!(
            cf.payload_hash, cr.payload_hash,
            "same body, different operation"
        );
    }

    /// Stored dedup records hold these hashes, so how they are computed may change but
    /// their value may not: the hash of the codec's bytes of (domain, batch flag,
    /// mutations).
    #[test]
    fn the_payload_hash_is_the_sha256_of_the_encoded_payload() {
        let a = write_req(json!({"key": "k", "value": "x".repeat(70_000), "actor": "a"}));
        let c = single(write(&a, &l()).unwrap(), Some("r".into()), &l()).unwrap();
        let encoded =
            bincode::serialize(&(super::PAYLOAD_HASH_DOMAIN, false, &c.mutations)).unwrap();
        assert_eq!(c.payload_hash, crate::hash::sha256_hex(&encoded));
    }

    #[test]
    fn a_command_without_request_id_is_not_hashed() {
        let a = write_req(json!({"key": "k", "value": 1, "actor": "a"}));
        let c = single(write(&a, &l()).unwrap(), None, &l()).unwrap();
        assert_eq!((c.request_id, c.payload_hash.as_str()), (None, ""));
    }

    #[test]
    fn batch_payload_hash_ignores_only_the_batch_request_id() {
        let a: BatchRequest = parse(
            json!({"ops": [{"op": "reinstate", "key": "k", "actor": "a"}], "request_id": "1"}),
        );
        let b: BatchRequest = parse(
            json!({"ops": [{"op": "reinstate", "key": "k", "actor": "a"}], "request_id": "2"}),
        );
        let c: BatchRequest = parse(
            json!({"ops": [{"op": "revoke", "key": "k", "actor": "a", "reason": "r"}], "request_id": "3"}),
        );
        let hash = |r: &BatchRequest| batch(r, &l()).unwrap().payload_hash;
        assert_eq!(hash(&a), hash(&b));
        assert_ne!(hash(&a), hash(&c));
    }
}
