//! A JSON value whose objects name each member once.
//!
//! `serde_json::Value` keeps the last of two members with one name (`{"a":1,"a":2}` is
//! `{"a":2}`), so a write stored something other than what it was sent, and its
//! `value_hash` was the hash of that. RFC 8259 leaves such objects' meaning open; a write's
//! value refuses them instead, naming the member (`duplicate field `a``, the wording serde
//! uses for a request's own fields, so the node's refusal names it as `field`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// Deserializes a [`Value`], refusing an object that names a member twice, at any depth.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    deserializer.deserialize_any(StrictVisitor)
}

/// `text` as a value by the rules a write's value is decoded by: JSON whose objects
/// name each member once.
pub fn value_from_str(text: &str) -> Result<Value, serde_json::Error> {
    value_from_slice(text.as_bytes())
}

/// [`value_from_str`] of bytes (JSON text, UTF-8).
pub fn value_from_slice(json: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let value = deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

struct StrictVisitor;

/// One nested value, decoded by the same rules.
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number must be finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(Strict)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let value = map.next_value_seed(Strict)?;
            match members.entry(name) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(slot) => {
                    let name = slot.key();
                    return Err(de::Error::custom(format_args!("duplicate field `{name}`")));
                }
            }
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[derive(serde::Deserialize, Debug)]
    struct Holder {
        #[serde(deserialize_with = "super::deserialize")]
        value: serde_json::Value,
    }

    fn decode(text: &str) -> Result<serde_json::Value, String> {
        serde_json::from_str::<Holder>(text)
            .map(|h| h.value)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn values_decode_as_serde_json_decodes_them() {
        for text in [
            r#"{"value": {"b": [1, -2, 3.5, true, null, "x"], "a": {"c": {}}}}"#,
            r#"{"value": 18446744073709551615}"#,
            r#"{"value": -9223372036854775808}"#,
            r#"{"value": 1e300}"#,
            r#"{"value": "\u00e9\n"}"#,
            r#"{"value": []}"#,
        ] {
            let plain: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(decode(text).unwrap(), plain["value"], "{text}");
        }
    }

    #[test]
    fn a_member_named_twice_is_refused_at_any_depth() {
        for text in [
            r#"{"value": {"a": 1, "a": 2}}"#,
            r#"{"value": [{"x": {"a": 1, "b": 2, "a": 1}}]}"#,
        ] {
            let e = decode(text).unwrap_err();
            assert!(e.starts_with("duplicate field `a`"), "{text}: {e}");
        }
        assert_eq!(
            decode(r#"{"value": {"a": {"a": 1}}}"#).unwrap(),
            json!({"a": {"a": 1}})
        );
    }
}
