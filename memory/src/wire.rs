//! The API edge: conversions between the key model's records ([`crate::records`]) and the
//! `cairn-api` wire types, both ways.
//!
//! Structs are destructured without `..` and enums matched without `_`, so a field or
//! variant added on either side fails to compile here until someone decides what it means
//! for the other: a JSON field added to the API never silently changes a stored layout,
//! and a stored field never silently goes missing from the API.
//!
//! Every code of [`ErrorCode`] has an API code; the API has more (node-level codes such
//! as `no_leader`), so that direction is a `TryFrom`.

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

/// `From` both ways between a record and its wire type, each field through its
/// converter (`into`, or `opt` for an optional record).
macro_rules! both_ways {
    ($ours:ident <-> $theirs:ident { $($field:ident: $conv:ident),* $(,)? }) => {
        impl From<$ours> for api::$theirs {
            fn from(value: $ours) -> api::$theirs {
                let $ours { $($field),* } = value;
                api::$theirs { $($field: $conv($field)),* }
            }
        }
        impl From<api::$theirs> for $ours {
            fn from(value: api::$theirs) -> $ours {
                let api::$theirs { $($field),* } = value;
                $ours { $($field: $conv($field)),* }
            }
        }
    };
}

/// `From` both ways between two fieldless enums with the same variants.
macro_rules! same_variants {
    ($ours:ident <-> $theirs:ident { $($variant:ident),* $(,)? }) => {
        impl From<$ours> for api::$theirs {
            fn from(value: $ours) -> api::$theirs {
                match value {
                    $($ours::$variant => api::$theirs::$variant),*
                }
            }
        }
        impl From<api::$theirs> for $ours {
            fn from(value: api::$theirs) -> $ours {
                match value {
                    $(api::$theirs::$variant => $ours::$variant),*
                }
            }
        }
    };
}

same_variants!(State <-> State { Absent, Active, Revoked, Forgotten });

same_variants!(EventKind <-> EventKind {
    Written, Forgotten, TombstoneCleared, Revoked, Reinstated, StaleFlagged, Superseded,
});

both_ways!(Meta <-> Meta {
    actor: into, source: into, anchors: into, tags: into, updated_at: into,
});

both_ways!(Tombstone <-> Tombstone {
    id: into, key: into, actor: into, reason: into, value_hash: into, forgotten_at: into,
    version: into, generation: into, revision: into,
});

both_ways!(Revocation <-> Revocation {
    actor: into, reason: into, revoked_at: into, version: into,
});

both_ways!(StaleFlag <-> StaleFlag {
    anchor: into, observed_hash: into, actor: into, flagged_at: into,
});

both_ways!(HistoryEvent <-> HistoryEvent {
    kind: into, version: into, revision: into, actor: into, reason: into, at: into,
    value_hash: into, by: into, anchor: into, observed_hash: into,
});

both_ways!(MutationResult <-> MutationResult {
    key: into, state: into, version: into, generation: into, forget_epoch: into,
    revision: into, replayed: into, already: into, tombstone: opt,
});

both_ways!(WatchEvent <-> WatchEvent {
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
        }
    }
}

impl TryFrom<api::ErrorCode> for ErrorCode {
    /// A code only the node answers (`no_leader`, `internal`, …), never the key model.
    type Error = api::ErrorCode;

    fn try_from(code: api::ErrorCode) -> Result<ErrorCode, api::ErrorCode> {
        Ok(match code {
            api::ErrorCode::InvalidRequest => ErrorCode::InvalidRequest,
            api::ErrorCode::NotFound => ErrorCode::NotFound,
            api::ErrorCode::VersionConflict => ErrorCode::VersionConflict,
            api::ErrorCode::KeyForgotten => ErrorCode::KeyForgotten,
            api::ErrorCode::KeyRevoked => ErrorCode::KeyRevoked,
            api::ErrorCode::StaleWrite => ErrorCode::StaleWrite,
            api::ErrorCode::InvalidTransition => ErrorCode::InvalidTransition,
            api::ErrorCode::TooLarge => ErrorCode::TooLarge,
            api::ErrorCode::RequestIdReused => ErrorCode::RequestIdReused,
            api::ErrorCode::NoLeader
            | api::ErrorCode::StaleRead
            | api::ErrorCode::OutcomeUnknown
            | api::ErrorCode::Overloaded
            | api::ErrorCode::Internal => return Err(code),
        })
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
            let wire = api::ErrorCode::from(code);
            assert_eq!(wire.as_str(), code.as_str());
            assert_eq!(ErrorCode::try_from(wire), Ok(code));
        }
        assert_eq!(
            ErrorCode::try_from(api::ErrorCode::NoLeader),
            Err(api::ErrorCode::NoLeader)
        );
    }

    #[test]
    fn a_history_event_round_trips_through_the_wire_type() {
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
        let wire = api::HistoryEvent::from(event.clone());
        assert_eq!(wire.kind, api::EventKind::StaleFlagged);
        assert_eq!(HistoryEvent::from(wire), event);
    }
}
