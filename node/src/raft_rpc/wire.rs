//! Decoding peer requests and answers: the codec's layout (one format byte, then bincode
//! 1.3 with fixed-width integers, trailing bytes allowed, exactly what
//! `bincode::deserialize` reads), with a limit on the bytes the decoder may consume.
//!
//! Why a limit when the input is a slice: bincode checks every length prefix against it
//! before reading or allocating, so a forged length (a string or byte vector claiming
//! 2^60 bytes) fails at once. Sequences are preallocated at most 1 MiB by serde whatever
//! their claimed length, then grow only as elements are actually decoded, so memory stays
//! proportional to the body (itself capped at `server::PEER_BODY_BYTES_MAX` before
//! decoding). The proptest in node/tests/t81_peer_decode.rs measures that.

use bincode::Options;
use serde::de::DeserializeOwned;

use crate::store::codec::{self, CodecError};

/// Decodes `bytes` as the codec's [`codec::FORMAT`], consuming at most `bytes.len()`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    match codec::split_format(bytes)? {
        (codec::FORMAT, body) => Ok(bincode::DefaultOptions::new()
            .with_fixint_encoding()
            .allow_trailing_bytes()
            .with_limit(body.len() as u64)
            .deserialize(body)?),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::{NodeId, Vote};

    #[test]
    fn the_limit_keeps_the_codec_layout() {
        let vote = openraft::raft::VoteRequest::<NodeId>::new(Vote::new(7, 3), None);
        let bytes = codec::encode(&vote);
        let back: openraft::raft::VoteRequest<NodeId> = decode(&bytes).unwrap();
        assert_eq!(back, vote);
        let strings = vec!["a".repeat(10), String::new(), "b".into()];
        let bytes = codec::encode(&strings);
        assert_eq!(decode::<Vec<String>>(&bytes).unwrap(), strings);
        assert_eq!(
            codec::decode::<Vec<String>>(&bytes).unwrap(),
            decode::<Vec<String>>(&bytes).unwrap()
        );
    }

    #[test]
    fn a_forged_length_fails_without_allocating_it() {
        let mut bytes = vec![codec::FORMAT];
        bytes.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
        bytes.extend_from_slice(b"abc");
        assert!(decode::<String>(&bytes).is_err());
        assert!(decode::<Vec<u8>>(&bytes).is_err());
    }
}
