//! Binary codec for everything cairn puts on disk or on the peer wire.
//!
//! Format: one format byte, then bincode 1.3 (fixed-width little-endian integers, the
//! crate's `DefaultOptions` are *not* used so the layout is the stable `bincode::serialize`
//! one). The format byte lets a future release read old data or refuse it loudly instead of
//! misparsing it.
//!
//! Every decode is bounded by its input: bincode checks each length prefix against the
//! bytes actually given before reading or allocating, so a forged or corrupted length (a
//! string or vector claiming 2^60 bytes, from a peer or from a damaged disk record) fails
//! at once. Sequences are preallocated at most 1 MiB by serde whatever their claimed
//! length, then grow only as elements are decoded, so memory stays proportional to the
//! input; peer bodies are themselves capped (`raft_rpc::server::PEER_BODY_BYTES_MAX`)
//! before decoding. node/tests/t81_peer_decode.rs measures that under proptest.
//!
//! Keys in RocksDB are built by hand (big-endian integers, `0x00` separators) so that byte
//! order equals logical order. Stored values go through their record's module
//! ([`super::records`]), which frames them here with [`encode_at`] / [`split_format`];
//! everything else goes through [`encode`]/[`decode`] at [`FORMAT`].

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The general on-disk/on-wire format: Raft log entries, vote, membership and applied ids
/// (encoded by `consensus`), the peer wire, snapshot headers, and the stored records whose
/// layout has not moved on alone. 2: dedup records remember rejections too (format 1
/// remembered only applied commands). 3: `payload_hash` is computed from the validated
/// mutations instead of the request's JSON, so a format-2 dedup record would answer a
/// retry of its own request with `request_id_reused`. Older data is refused, not misread.
///
/// Each stored record type has its own format constant in [`super::records`] (slots and
/// history events are at 4); this module is only the framing.
pub const FORMAT: u8 = 3;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("empty record: no format byte")]
    Empty,
    #[error(
        "unknown format byte {0} (this build reads format {FORMAT}, and slots at {slot} and history at {history} too)",
        slot = super::records::slot::FORMAT,
        history = super::records::history::FORMAT
    )]
    UnknownFormat(u8),
    #[error("bincode: {0}")]
    Bincode(#[from] bincode::Error),
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    encode_at(FORMAT, value)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    match split_format(bytes)? {
        (FORMAT, body) => decode_body(body),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

/// [`encode`] with another format byte: each stored record type says its own
/// ([`super::records`]).
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

/// Decodes a bincode body in `bincode::serialize`'s layout (fixed-width integers,
/// trailing bytes allowed, as `bincode::deserialize` reads), consuming at most
/// `body.len()` bytes.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, CodecError> {
    Ok(bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(body.len() as u64)
        .deserialize(body)?)
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
    fn the_bounded_decoder_reads_the_layout_of_bincode_serialize() {
        let sample = Sample {
            a: u64::MAX,
            b: Some("a".repeat(10)),
            c: vec![(String::new(), 0), ("b".into(), 255)],
        };
        let body = bincode::serialize(&sample).unwrap();
        assert_eq!(decode_body::<Sample>(&body).unwrap(), sample);
        let vote = openraft::raft::VoteRequest::<u64>::new(openraft::Vote::new(7, 3), None);
        let bytes = encode(&vote);
        assert_eq!(
            decode::<openraft::raft::VoteRequest<u64>>(&bytes).unwrap(),
            vote
        );
    }

    #[test]
    fn a_forged_length_fails_without_allocating_it() {
        let mut bytes = vec![FORMAT];
        bytes.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
        bytes.extend_from_slice(b"abc");
        assert!(decode::<String>(&bytes).is_err());
        assert!(decode::<Vec<u8>>(&bytes).is_err());
    }

    #[test]
    fn keys_sort_numerically_and_split() {
        assert!(u64_key(2) < u64_key(10));
        assert_eq!(u64_from_key(&u64_key(42)), Some(42));
        let k = pair_key("path:src/", b"key-1");
        assert_eq!(split_pair(&k), Some((&b"path:src/"[..], &b"key-1"[..])));
    }
}
