//! The `history` family: a key's append-only [`HistoryEvent`]s, stored under
//! `key 0x00 version`.
//!
//! Format 4: the event as `cairn_memory::HistoryEvent` lays it out, with `by`, `anchor`
//! and `observed_hash` last. Format 3 (still read): the fields before those three
//! ([`EventV3`]); they decode absent, and the `reason` stays as written then (a
//! supersede's or a stale flag's named the key or anchor in its text). A build before
//! format 4 refuses a format-4 event instead of misreading it.

use cairn_memory::{EventKind, HistoryEvent};
use serde::{Deserialize, Serialize};

use crate::store::codec::{self, CodecError};

/// Current format of a stored history event. 4: the event gained `by`, `anchor` and
/// `observed_hash`.
pub const FORMAT: u8 = 4;

/// The previous format, still read: [`EventV3`].
pub const FORMAT_V3: u8 = 3;

/// Encodes a history event for the `history` family.
pub fn encode(event: &HistoryEvent) -> Vec<u8> {
    codec::encode_at(FORMAT, event)
}

/// Decodes a history event stored at [`FORMAT`] or [`FORMAT_V3`].
pub fn decode(bytes: &[u8]) -> Result<HistoryEvent, CodecError> {
    match codec::split_format(bytes)? {
        (FORMAT, body) => codec::decode_body(body),
        (FORMAT_V3, body) => Ok(codec::decode_body::<EventV3>(body)?.into()),
        (other, _) => Err(CodecError::UnknownFormat(other)),
    }
}

/// Whether `bytes` hold an event at the current format.
pub fn is_current(bytes: &[u8]) -> bool {
    bytes.first() == Some(&FORMAT)
}

/// The layout of a [`HistoryEvent`] stored at format 3: the fields it had before format 4
/// added `by`, `anchor` and `observed_hash`, in the same order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventV3 {
    pub kind: EventKind,
    pub version: u64,
    pub revision: u64,
    pub actor: String,
    pub reason: Option<String>,
    pub at: u64,
    pub value_hash: Option<String>,
}

impl EventV3 {
    /// Encodes at format 3, as a build before format 4 did.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode_at(FORMAT_V3, self)
    }
}

impl From<EventV3> for HistoryEvent {
    /// A format-3 event keeps its `reason` as written then; the format-4 fields are absent.
    fn from(old: EventV3) -> HistoryEvent {
        let EventV3 {
            kind,
            version,
            revision,
            actor,
            reason,
            at,
            value_hash,
        } = old;
        HistoryEvent {
            kind,
            version,
            revision,
            actor,
            reason,
            at,
            value_hash,
            by: None,
            anchor: None,
            observed_hash: None,
        }
    }
}

/// Golden bytes generated from commit 7ebcaca (before the key model had its own record
/// types): that commit's `StoredEvent` mirror at format 4 and `EventV3` at format 3, for
/// the samples below. Regenerate only together with a format bump.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::assert_golden;

    const EVENT_FULL: &str = concat!(
        "040500000006000000000000007700000000000000040000000000000064617665010500",
        "0000000000006d6f7665646e68e5cf8b010000010700000000000000682d76616c756501",
        "0900000000000000676f6c64656e2f6b32010600000000000000706174683a6101080000",
        "0000000000682d616e63686f72",
    );
    const EVENT_MIN: &str = concat!(
        "040000000001000000000000000800000000000000010000000000000061000500000000",
        "00000000000000",
    );
    const EVENT_V3_FULL: &str = concat!(
        "030600000002000000000000004700000000000000010000000000000061011000000000",
        "000000737570657273656465642062792068320500000000000000010700000000000000",
        "682d76616c7565",
    );
    const EVENT_V3_MIN: &str = concat!(
        "030000000001000000000000000800000000000000010000000000000061000500000000",
        "00000000",
    );
    const KINDS: &str = "070000000000000000000000010000000200000003000000040000000500000006000000";

    fn event_full() -> HistoryEvent {
        HistoryEvent {
            kind: EventKind::StaleFlagged,
            version: 6,
            revision: 119,
            actor: "dave".into(),
            reason: Some("moved".into()),
            at: 1_700_000_000_110,
            value_hash: Some("h-value".into()),
            by: Some("golden/k2".into()),
            anchor: Some("path:a".into()),
            observed_hash: Some("h-anchor".into()),
        }
    }

    fn event_min() -> HistoryEvent {
        HistoryEvent {
            kind: EventKind::Written,
            version: 1,
            revision: 8,
            actor: "a".into(),
            reason: None,
            at: 5,
            value_hash: None,
            by: None,
            anchor: None,
            observed_hash: None,
        }
    }

    #[test]
    fn golden_event_with_every_optional_field() {
        let bytes = encode(&event_full());
        assert_golden("history event", FORMAT, &bytes, EVENT_FULL);
        assert_eq!(decode(&bytes).unwrap(), event_full());
    }

    #[test]
    fn golden_event_with_no_optional_field() {
        let bytes = encode(&event_min());
        assert_golden("history event", FORMAT, &bytes, EVENT_MIN);
        assert_eq!(decode(&bytes).unwrap(), event_min());
    }

    #[test]
    fn golden_event_kind_variant_order() {
        use EventKind::*;
        let kinds = [
            Written,
            Forgotten,
            TombstoneCleared,
            Revoked,
            Reinstated,
            StaleFlagged,
            Superseded,
        ];
        let bytes = bincode::serialize(&kinds.to_vec()).unwrap();
        assert_golden("history event (EventKind)", FORMAT, &bytes, KINDS);
    }

    #[test]
    fn format_3_events_still_decode() {
        let full = EventV3 {
            kind: EventKind::Superseded,
            version: 2,
            revision: 71,
            actor: "a".into(),
            reason: Some("superseded by h2".into()),
            at: 5,
            value_hash: Some("h-value".into()),
        };
        let min = EventV3 {
            kind: EventKind::Written,
            version: 1,
            revision: 8,
            actor: "a".into(),
            reason: None,
            at: 5,
            value_hash: None,
        };
        for (hex_bytes, old) in [(EVENT_V3_FULL, full), (EVENT_V3_MIN, min)] {
            let bytes = hex::decode(hex_bytes).unwrap();
            assert_eq!(old.encode(), bytes);
            let event = decode(&bytes).unwrap();
            assert_eq!(event, HistoryEvent::from(old));
            assert_eq!(
                (event.by, event.anchor, event.observed_hash),
                (None, None, None)
            );
        }
        let superseded = decode(&hex::decode(EVENT_V3_FULL).unwrap()).unwrap();
        assert_eq!(superseded.reason.as_deref(), Some("superseded by h2"));
        assert!(!is_current(&hex::decode(EVENT_V3_MIN).unwrap()));
    }

    #[test]
    fn unknown_formats_are_refused() {
        assert!(matches!(
            decode(&[9, 0, 0]),
            Err(CodecError::UnknownFormat(9))
        ));
        assert!(matches!(decode(&[]), Err(CodecError::Empty)));
    }
}
