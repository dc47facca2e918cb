//! The API edge: the key model's records ([`crate::records`]) as `cairn-api` wire types.
//!
//! One direction is all the node needs (records go out in answers; requests come in
//! through [`crate::admit`]), and it is enough to keep the two in step: each record is
//! destructured without `..` and each wire type built without `..`, enums matched without
//! `_`, so a field or variant added on either side fails to compile here until someone
//! decides what it means for the other. A JSON field added to the API never silently
//! changes a stored layout, and a stored field never silently goes missing from the API.

use cairn_api as api;
use serde_json::Value;

use crate::records::{
    ErrorCode, EventKind, HistoryEvent, Meta, MutationResult, Revocation, StaleFlag, State,
    Tombstone, WatchEvent,
};

fn into<A: Into<B>, B>(a: A) -> B {
    a.into()
}

fn opt<A: Into<B>, B>(a: Option<A>) -> Option<B> {
    a.map(Into::into)
}

/// `From` a record for its wire type, each field through its converter (`into`, or `opt`
/// for an optional record).
macro_rules! to_wire {
    ($ours:ident => $theirs:ident { $($field:ident: $conv:ident),* $(,)? }) => {
        impl From<$ours> for api::$theirs {
            fn from(value: $ours) -> api::$theirs {
                let $ours { $($field),* } = value;
                api::$theirs { $($field: $conv($field)),* }
            }
        }
    };
}

/// `From` a fieldless enum for the wire enum with the same variants.
macro_rules! to_wire_enum {
    ($ours:ident => $theirs:ident { $($variant:ident),* $(,)? }) => {
        impl From<$ours> for api::$theirs {
            fn from(value: $ours) -> api::$theirs {
                match value {
                    $($ours::$variant => api::$theirs::$variant),*
                }
            }
        }
    };
}

to_wire_enum!(State => State { Absent, Active, Revoked, Forgotten });

to_wire_enum!(EventKind => EventKind {
    Written, Forgotten, TombstoneCleared, Revoked, Reinstated, StaleFlagged, Superseded,
});

to_wire!(Meta => Meta {
    actor: into, source: into, anchors: into, tags: into, updated_at: into,
});

to_wire!(Tombstone => Tombstone {
    id: into, key: into, actor: into, reason: into, value_hash: into, forgotten_at: into,
    version: into, generation: into, revision: into,
});

to_wire!(Revocation => Revocation {
    actor: into, reason: into, revoked_at: into, version: into,
});

to_wire!(StaleFlag => StaleFlag {
    anchor: into, observed_hash: into, actor: into, flagged_at: into,
});

to_wire!(HistoryEvent => HistoryEvent {
    kind: into, version: into, revision: into, actor: into, reason: into, at: into,
    value_hash: into, by: into, anchor: into, observed_hash: into,
});

to_wire!(MutationResult => MutationResult {
    key: into, state: into, version: into, generation: into, forget_epoch: into,
    revision: into, replayed: into, already: into, tombstone: opt,
});

to_wire!(WatchEvent => WatchEvent {
    revision: into, key: into, kind: into, state: into, version: into, generation: into,
    forget_epoch: into,
});

impl From<ErrorCode> for api::ErrorCode {
    fn from(code: ErrorCode) -> api::ErrorCode {
        match code {
            ErrorCode::InvalidRequest => api::ErrorCode::InvalidRequest,
            ErrorCode::NotFound => api::ErrorCode::NotFound,
            ErrorCode::VersionConflict => api::ErrorCode::VersionConflict,
            ErrorCode::KeyForgotten => api::ErrorCode::KeyForgotten,
            ErrorCode::KeyRevoked => api::ErrorCode::KeyRevoked,
            ErrorCode::StaleWrite => api::ErrorCode::StaleWrite,
            ErrorCode::InvalidTransition => api::ErrorCode::InvalidTransition,
            ErrorCode::TooLarge => api::ErrorCode::TooLarge,
            ErrorCode::RequestIdReused => api::ErrorCode::RequestIdReused,
            ErrorCode::PermissionDenied => api::ErrorCode::PermissionDenied,
        }
    }
}

/// A tombstone as error details show it (`key_forgotten`): its wire JSON, `null` if none.
pub fn tombstone_json(tombstone: Option<&Tombstone>) -> Value {
    json_of(tombstone.cloned().map(api::Tombstone::from))
}

/// A revocation as error details show it (`key_revoked`): its wire JSON, `null` if none.
pub fn revocation_json(revocation: Option<&Revocation>) -> Value {
    json_of(revocation.cloned().map(api::Revocation::from))
}

fn json_of<T: serde::Serialize>(wire: T) -> Value {
    serde_json::to_value(wire).expect("wire records have string keys and plain fields")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_keep_their_api_names() {
        use ErrorCode::*;
        for code in [
            InvalidRequest,
            NotFound,
            VersionConflict,
            KeyForgotten,
            KeyRevoked,
            StaleWrite,
            InvalidTransition,
            TooLarge,
            RequestIdReused,
        ] {
            assert_eq!(api::ErrorCode::from(code).as_str(), code.as_str());
        }
    }

    #[test]
    fn a_history_event_keeps_every_field_on_the_wire() {
        let event = HistoryEvent {
            kind: EventKind::StaleFlagged,
            version: 3,
            revision: 9,
            actor: "ci".into(),
            reason: None,
            at: 5,
            value_hash: Some("h".into()),
            by: None,
            anchor: Some("path:a".into()),
            observed_hash: Some("o".into()),
        };
        let wire = api::HistoryEvent::from(event);
        assert_eq!(
            wire,
            api::HistoryEvent {
                kind: api::EventKind::StaleFlagged,
                version: 3,
                revision: 9,
                actor: "ci".into(),
                reason: None,
                at: 5,
                value_hash: Some("h".into()),
                by: None,
                anchor: Some("path:a".into()),
                observed_hash: Some("o".into()),
            }
        );
    }
}
