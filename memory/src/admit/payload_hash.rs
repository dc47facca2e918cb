//! `payload_hash` (compared on `request_id` replays) is the sha256 of what the request asks
//! the log to do: its validated mutations (each names its operation, so a forget and a
//! revoke with byte-identical bodies differ) and whether they came as a batch, in the
//! codec's binary form. Values are canonical JSON by then and omitted fields hold their
//! defaults, so key order and spelled-out defaults do not change it; the `request_id`
//! is not part of it, and neither is a write's `value_hash`: the leader derives it from
//! the value, and dedup records of builds before it (log-entry format 5) hold hashes
//! without it. A command without a `request_id` carries an empty hash: nothing
//! ever compares it, and hashing every write cost the leader ~5% of its CPU in a profile
//! when it went through `serde_json::Value` and canonical JSON text.

use serde::ser::{Serialize, SerializeStruct, SerializeStructVariant, Serializer};
use sha2::{Digest, Sha256};

use crate::types::{Mutation, Op};

/// sha256 (hex) of the mutations and the batch flag (see the module doc).
///
/// The codec's bytes stream into the hash instead of into a buffer first: a request of
/// large values is not copied once more only to be hashed.
pub(super) fn payload_hash(mutations: &[Mutation], is_batch: bool) -> String {
    // `Sha256` is an `io::Write` that hashes what is written to it.
    let mut hasher = Sha256::new();
    let asked = AskedMutations(mutations);
    bincode::serialize_into(&mut hasher, &(PAYLOAD_HASH_DOMAIN, is_batch, asked))
        .expect("plain data always serializes, and hashing cannot fail");
    hex::encode(hasher.finalize())
}

/// The mutations as the request asked for them: encoded as [`Mutation`]s, except that a
/// write has no `value_hash` (the layout of `Op::Write` before it carried one).
struct AskedMutations<'a>(&'a [Mutation]);

impl Serialize for AskedMutations<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(AskedMutation))
    }
}

struct AskedMutation<'a>(&'a Mutation);

impl Serialize for AskedMutation<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("Mutation", 2)?;
        m.serialize_field("op", &AskedOp(&self.0.op))?;
        m.serialize_field("cond", &self.0.cond)?;
        m.end()
    }
}

struct AskedOp<'a>(&'a Op);

impl Serialize for AskedOp<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Op::Write {
            key,
            value,
            value_hash: _,
            actor,
            source,
            anchors,
            tags,
            clear_tombstone,
            override_revocation,
            reason,
        } = self.0
        else {
            return self.0.serialize(s);
        };
        let mut w = s.serialize_struct_variant("Op", 0, "Write", 9)?;
        w.serialize_field("key", key)?;
        w.serialize_field("value", value)?;
        w.serialize_field("actor", actor)?;
        w.serialize_field("source", source)?;
        w.serialize_field("anchors", anchors)?;
        w.serialize_field("tags", tags)?;
        w.serialize_field("clear_tombstone", clear_tombstone)?;
        w.serialize_field("override_revocation", override_revocation)?;
        w.serialize_field("reason", reason)?;
        w.end()
    }
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

    /// Dedup records on disk hold hashes of earlier builds: a write (every field set) and
    /// a batch of every other operation hash to what they did when the codec's bytes of the
    /// mutations were the hash's whole input (git 7b8a72c).
    #[test]
    fn payload_hashes_of_earlier_builds_still_match() {
        let w = write_req(json!({
            "key": "k", "value": {"b": [1, "two"], "a": null}, "actor": "alice",
            "source": "src", "anchors": ["path:a"], "tags": ["t"], "clear_tombstone": true,
            "override_revocation": true, "reason": "why", "expected_version": 3,
            "based_on_revision": 40,
        }));
        let cw = single(write(&w, &l()).unwrap(), Some("r".into()), &l()).unwrap();
        assert_eq!(
            cw.payload_hash,
            "3258f84b5d3fc31b6465be049d05fc02f833499e80cec100d56e87ea741ece03"
        );
        let b: BatchRequest = parse(json!({"request_id": "r", "ops": [
            {"op": "write", "key": "w", "value": 1, "actor": "a"},
            {"op": "forget", "key": "f", "actor": "a", "reason": "r"},
            {"op": "revoke", "key": "r", "actor": "a", "reason": "r"},
            {"op": "reinstate", "key": "i", "actor": "a"},
            {"op": "flag_stale", "key": "s", "actor": "a", "anchor": "path:a", "observed_hash": "h"},
            {"op": "supersede", "key": "p", "by": "q", "actor": "a"},
        ]}));
        assert_eq!(
            batch(&b, &l()).unwrap().payload_hash,
            "1c3dfef1ecbc9b125249b44963847ea0c36df851c9201e9da739659b33a3da69"
        );
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
