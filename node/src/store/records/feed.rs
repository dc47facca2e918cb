//! The `feed` family: the change feed of `GET /v1/watch`, one [`WatchEvent`] per applied
//! history event, stored under `revision seq` (both big-endian u64).
//!
//! Format 3: the event as `cairn_memory::WatchEvent` lays it out.

use cairn_memory::WatchEvent;

use crate::store::codec::{self, CodecError};

/// Current format of a stored feed event.
pub const FORMAT: u8 = 3;

pub fn encode(event: &WatchEvent) -> Vec<u8> {
    codec::encode_at(FORMAT, event)
}

pub fn decode(bytes: &[u8]) -> Result<WatchEvent, CodecError> {
    super::decode_only(FORMAT, bytes)
}

/// Golden bytes generated from commit 7ebcaca (before the key model had its own record
/// types), when the store wrote `cairn_api::WatchEvent` with `codec::encode`. A feed event
/// has no optional field. Regenerate only together with a format bump.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::assert_golden;
    use cairn_memory::{EventKind, State};

    const FEED: &str = concat!(
        "0378000000000000000800000000000000676f6c64656e2f6b0300000002000000070000",
        "000000000002000000000000000400000000000000",
    );

    #[test]
    fn golden_feed_event() {
        let event = WatchEvent {
            revision: 120,
            key: "golden/k".into(),
            kind: EventKind::Revoked,
            state: State::Revoked,
            version: 7,
            generation: 2,
            forget_epoch: 4,
        };
        let bytes = encode(&event);
        assert_golden("feed event", FORMAT, &bytes, FEED);
        assert_eq!(decode(&bytes).unwrap(), event);
    }

    #[test]
    fn unknown_formats_are_refused() {
        assert!(matches!(decode(&[4, 0]), Err(CodecError::UnknownFormat(4))));
    }
}
