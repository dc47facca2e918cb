//! `supersede` (SPEC §2): record that another key replaced this one.
//!
//! | state | outcome |
//! |---|---|
//! | absent | 404 `not_found` |
//! | active, revoked | state unchanged, `superseded_by` recorded, event `superseded` |
//! | forgotten | 409 `key_forgotten` |
//!
//! The replacing key is not checked here: it may be written later, and one key's apply
//! never depends on another key's state. `superseded_by` is overwritten by a later
//! supersede; the event's `by` names the replacing key so the history keeps it, and its
//! `reason` is the one given, verbatim.

use crate::records::EventKind;
use crate::step;
use crate::types::{Change, Ctx, OpError, Slot};

/// Applies a supersede of `key` (currently `slot`) by `by` per the table above.
///
/// - The value and state are unchanged.
pub fn apply(
    slot: Option<&Slot>,
    key: &str,
    by: &str,
    actor: &str,
    reason: Option<&str>,
    ctx: &Ctx,
) -> Result<Change, OpError> {
    let s = step::live(slot, key, "supersede")?;
    let mut next = step::begin(Some(s), key, ctx);
    next.superseded_by = Some(by.to_string());
    let mut change = step::finish(Some(s), next, EventKind::Superseded, actor, reason);
    if let Some(event) = change.event.as_mut() {
        event.by = Some(by.to_string());
    }
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ErrorCode;
    use crate::step::fixtures::*;

    #[test]
    fn absent_is_not_found() {
        assert_eq!(
            code(apply(None, KEY, "k2", "a", None, &ctx(20))),
            ErrorCode::NotFound
        );
    }

    #[test]
    fn active_and_revoked_record_superseded_by() {
        for prev in [active(), revoked()] {
            let c = ctx(20);
            let ch = apply(Some(&prev), KEY, "k2", "editor", Some("merged"), &c).unwrap();
            assert_applied(Some(&prev), &ch, EventKind::Superseded, &c);
            assert_eq!((ch.slot.state, &ch.slot.value), (prev.state, &prev.value));
            assert_eq!(ch.slot.superseded_by.as_deref(), Some("k2"));
            let event = ch.event.unwrap();
            assert_eq!(event.reason.as_deref(), Some("merged"));
            assert_eq!(event.by.as_deref(), Some("k2"));
            assert_eq!((event.anchor, event.observed_hash), (None, None));
        }
    }

    #[test]
    fn without_a_reason_the_event_has_none() {
        let ch = apply(Some(&active()), KEY, "k2", "editor", None, &ctx(20)).unwrap();
        let event = ch.event.unwrap();
        assert_eq!(event.reason, None);
        assert_eq!(event.by.as_deref(), Some("k2"));
    }

    #[test]
    fn forgotten_is_key_forgotten() {
        let prev = forgotten();
        assert_eq!(
            code(apply(Some(&prev), KEY, "k2", "a", None, &ctx(20))),
            ErrorCode::KeyForgotten
        );
    }
}
