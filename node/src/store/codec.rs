//! Binary codec for everything cairn puts on disk or on the peer wire.
//!
//! Format: one format byte, then bincode 1.3 (fixed-width little-endian integers, the
//! crate's `DefaultOptions` are *not* used so the layout is the stable `bincode::serialize`
//! one). The format byte lets a future release read old data or refuse it loudly instead of
//! misparsing it.
//!
//! Keys in RocksDB are built by hand (big-endian integers, `0x00` separators) so that byte
//! order equals logical order; values go through [`encode`]/[`decode`].

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Current on-disk/on-wire format. 2: dedup records remember rejections too (format 1
/// remembered only applied commands). 3: `payload_hash` is computed from the validated
/// mutations instead of the request's JSON, so a format-2 dedup record would answer a
/// retry of its own request with `request_id_reused`. Older data is refused, not misread.
pub const FORMAT: u8 = 3;

/// Format of a stored slot (`slots` family, and so the slot records of a snapshot). 4: the
/// slot gained `fence_revision`. Only the slot's layout changed, so everything else stays
/// at [`FORMAT`], and a slot written at format 3 is still read (`store/state.rs` decodes
/// the old layout and recomputes the field from the key's history). A build that predates
/// format 4 refuses a format-4 slot instead of misreading it.
pub const SLOT_FORMAT: u8 = 4;

/// Format of a stored history event (`history` family, and so the history records of a
/// snapshot). 4: the event gained `by`, `anchor` and `observed_hash`. Only the event's
/// layout changed, so everything else stays at [`FORMAT`], and an event written at format 3
/// is still read (`store/state.rs` decodes the old layout, the new fields absent). A build
/// that predates format 4 refuses a format-4 event instead of misreading it.
pub const HISTORY_FORMAT: u8 = 4;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("empty record: no format byte")]
    Empty,
    #[error("unknown format byte {0} (this build reads format {FORMAT}, and slots at {SLOT_FORMAT} and history at {HISTORY_FORMAT} too)")]
    UnknownFormat(u8),
    #[error("bincode: {0}")]
    Bincode(#[from] bincode::Error),
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    encode_at(FORMAT, value)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    match split_format(bytes)? {
        (FORMAT, body) => Ok(bincode::deserialize(body)?),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

/// [`encode`] with another format byte, for a record type whose layout moved on alone
/// ([`SLOT_FORMAT`], [`HISTORY_FORMAT`]).
pub fn encode_at<T: Serialize>(format: u8, value: &T) -> Vec<u8> {
    let size = bincode::serialized_size(value).expect("in-memory value always has a size");
    let mut out = Vec::with_capacity(1 + size as usize);
    out.push(format);
    bincode::serialize_into(&mut out, value).expect("serializing into a Vec cannot fail");
    out
}

/// The format byte and the bincode body after it, for a reader that knows several layouts
/// of one record type; it decodes the body with [`decode_body`].
pub fn split_format(bytes: &[u8]) -> Result<(u8, &[u8]), CodecError> {
    match bytes.split_first() {
        None => Err(CodecError::Empty),
        Some((&format, body)) => Ok((format, body)),
    }
}

pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    Ok(bincode::deserialize(body)?)
}

/// Big-endian u64: byte order equals numeric order in RocksDB's comparator.
pub fn u64_key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

pub fn u64_from_key(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// `a 0x00 b`: keys never contain control characters, so `0x00` cannot occur inside one.
pub fn pair_key(a: &str, b: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(a.len() + 1 + b.len());
    k.extend_from_slice(a.as_bytes());
    k.push(0);
    k.extend_from_slice(b);
    k
}

/// Splits a [`pair_key`] at its first `0x00`.
pub fn split_pair(key: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = key.iter().position(|&b| b == 0)?;
    Some((&key[..at], &key[at + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        a: u64,
        b: Option<String>,
        c: Vec<(String, u8)>,
    }

    #[test]
    fn round_trip() {
        let s = Sample {
            a: 7,
            b: Some("x".into()),
            c: vec![("k".into(), 3)],
        };
        let bytes = encode(&s);
        assert_eq!(bytes[0], FORMAT);
        assert_eq!(decode::<Sample>(&bytes).unwrap(), s);
    }

    #[test]
    fn rejects_unknown_format_and_truncation() {
        let mut bytes = encode(&Sample {
            a: 1,
            b: None,
            c: vec![],
        });
        assert!(matches!(decode::<Sample>(&[]), Err(CodecError::Empty)));
        let truncated = &bytes[..bytes.len() - 1];
        assert!(matches!(
            decode::<Sample>(truncated),
            Err(CodecError::Bincode(_))
        ));
        bytes[0] = 9;
        assert!(matches!(
            decode::<Sample>(&bytes),
            Err(CodecError::UnknownFormat(9))
        ));
    }

    #[test]
    fn keys_sort_numerically_and_split() {
        assert!(u64_key(2) < u64_key(10));
        assert_eq!(u64_from_key(&u64_key(42)), Some(42));
        let k = pair_key("path:src/", b"key-1");
        assert_eq!(split_pair(&k), Some((&b"path:src/"[..], &b"key-1"[..])));
    }
}
