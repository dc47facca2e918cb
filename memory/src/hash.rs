//! Canonical JSON and the hashes derived from it.
//!
//! Canonical JSON is compact JSON with object keys sorted (by Rust `String` order, i.e.
//! bytewise UTF-8) at every depth. The sorting is done here explicitly instead of relying on
//! `serde_json`'s default `BTreeMap` map: the `preserve_order` feature is additive and any
//! crate in the workspace could switch it on, which would silently change every hash.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Compact JSON of `value` with object keys sorted at every depth.
///
/// - Two values that are equal as JSON (same members, any key order) give the same text.
/// - The text parses back to an equal value.
pub fn canonical_json(value: &Value) -> String {
    match value {
        Value::Object(_) | Value::Array(_) => {
            let mut out = String::new();
            write_canonical(value, &mut out);
            out
        }
        // A scalar's compact text is the answer itself: a large string value is not
        // copied once more into an output buffer.
        scalar => scalar.to_string(),
    }
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        // Scalars have a single compact form.
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The `value_hash` of a value given as canonical JSON text (SPEC §2).
pub fn value_hash(canonical: &str) -> String {
    sha256_hex(canonical.as_bytes())
}

/// The id of the tombstone written when `key` is forgotten at `version` in `generation`.
///
/// - Deterministic: every replica derives the same id (no clock, no randomness).
/// - Unique: `version` never repeats for a key, and keys cannot contain `\0`, so the
///   hashed text never repeats either.
pub fn tombstone_id(key: &str, generation: u64, version: u64) -> String {
    let mut id = sha256_hex(format!("{key}\0{generation}\0{version}").as_bytes());
    id.truncate(32);
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A written number is the nearest double, and its canonical text reads back as that
    /// double: serde_json's default float parser is not correctly rounded and read some of
    /// these one step off (`float_roundtrip` in the workspace's serde_json features).
    #[test]
    fn a_number_is_the_nearest_double_and_its_text_round_trips() {
        for (written, canonical) in [
            ("0.9100271653223867", "0.9100271653223867"),
            ("3.2839432695173058e-133", "3.2839432695173058e-133"),
            ("1180591620717411303424", "1.1805916207174113e+21"),
            ("1.1805916207174113e21", "1.1805916207174113e+21"),
            ("0.1", "0.1"),
        ] {
            let value: Value = serde_json::from_str(written).unwrap();
            assert_eq!(canonical_json(&value), canonical, "{written}");
            let again: Value = serde_json::from_str(canonical).unwrap();
            assert_eq!(
                again, value,
                "{written}: the canonical text reads back the same"
            );
        }
    }

    #[test]
    fn key_order_does_not_change_canonical_text_or_hash() {
        let a: Value =
            serde_json::from_str(r#"{"b":1,"a":{"y":[1,{"q":2,"p":1}],"x":null}}"#).unwrap();
        let b: Value =
            serde_json::from_str(r#"{"a":{"x":null,"y":[1,{"p":1,"q":2}]},"b":1}"#).unwrap();
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"x":null,"y":[1,{"p":1,"q":2}]},"b":1}"#
        );
        assert_eq!(
            value_hash(&canonical_json(&a)),
            value_hash(&canonical_json(&b))
        );
    }

    #[test]
    fn canonical_text_round_trips_and_escapes() {
        let v = json!({"k\"ey": "line\nbreak", "n": 1.5, "u": "é"});
        let text = canonical_json(&v);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
        assert!(!text.contains('\n'));
    }

    /// A top-level scalar takes the shortcut; it must give the text a nested one gets.
    #[test]
    fn a_scalar_alone_reads_as_it_does_nested() {
        for scalar in [
            json!("line\nbreak \"quoted\" é"),
            json!(1.5),
            json!(-7),
            json!(true),
            json!(null),
        ] {
            let alone = canonical_json(&scalar);
            assert_eq!(canonical_json(&json!([scalar])), format!("[{alone}]"));
            assert_eq!(serde_json::from_str::<Value>(&alone).unwrap(), scalar);
        }
    }

    #[test]
    fn value_hash_is_sha256_hex() {
        // sha256("1")
        assert_eq!(
            value_hash("1"),
            "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b"
        );
    }

    #[test]
    fn tombstone_ids_are_deterministic_and_distinct() {
        assert_eq!(tombstone_id("k", 1, 3), tombstone_id("k", 1, 3));
        assert_eq!(tombstone_id("k", 1, 3).len(), 32);
        assert_ne!(tombstone_id("k", 1, 3), tombstone_id("k", 1, 4));
        assert_ne!(tombstone_id("k", 1, 3), tombstone_id("k", 2, 3));
        assert_ne!(tombstone_id("k", 1, 3), tombstone_id("j", 1, 3));
    }
}
