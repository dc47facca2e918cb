//! `flag_stale` (SPEC §2): record that something a note depends on has changed.
//!
//! | state | outcome |
//! |---|---|
//! | absent | 404 `not_found` |
//! | active, revoked | state unchanged, stale flag added, event `stale_flagged` |
//! | forgotten | 409 `key_forgotten` |
//!
//! A new flag replaces an earlier flag on the same anchor (the latest observation is the
//! one that matters). A key holds at most [`STALE_FLAGS_MAX`] flags: a flag on one more
//! anchor is 413 `too_large` (`field: "stale"`, `limit`, `size`), since every read, list
//! and recall of the key carries the whole list. The flags are cleared by the next write,
//! so the event's `anchor` and `observed_hash` keep them for the history. The request takes
//! no reason, so the event has none.

use serde_json::json;

use crate::records::{ErrorCode, EventKind, StaleFlag};
use crate::step;
use crate::types::{Change, Ctx, OpError, Slot};

/// The most stale flags a key holds. A constant, not a node setting: the refusal happens
/// at apply, and every replica must refuse the same flags. 64 flags of the longest anchor
/// and hash keep a record under 100 KiB.
pub const STALE_FLAGS_MAX: usize = 64;

/// Applies a stale flag on `key` (currently `slot`) per the table above.
///
/// - At most one flag per anchor, at most [`STALE_FLAGS_MAX`] flags.
/// - The value and state are unchanged.
pub fn apply(
    slot: Option<&Slot>,
    key: &str,
    actor: &str,
    anchor: &str,
    observed_hash: &str,
    ctx: &Ctx,
) -> Result<Change, OpError> {
    let s = step::live(slot, key, "flag_stale")?;
    let mut next = step::begin(Some(s), key, ctx);
    next.stale.retain(|f| f.anchor != anchor);
    if next.stale.len() >= STALE_FLAGS_MAX {
        return Err(OpError::new(
            ErrorCode::TooLarge,
            format!(
                "key {key:?} already holds {STALE_FLAGS_MAX} stale flags on other anchors, \
                 the most a key keeps; a write clears them"
            ),
            json!({"field": "stale", "limit": STALE_FLAGS_MAX, "size": next.stale.len() + 1}),
        ));
    }
    next.stale.push(StaleFlag {
        anchor: anchor.to_string(),
        observed_hash: observed_hash.to_string(),
        actor: actor.to_string(),
        flagged_at: ctx.now_ms,
    });
    let mut change = step::finish(Some(s), next, EventKind::StaleFlagged, actor, None);
    if let Some(event) = change.event.as_mut() {
        event.anchor = Some(anchor.to_string());
        event.observed_hash = Some(observed_hash.to_string());
    }
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::State;
    use crate::step::fixtures::*;

    #[test]
    fn a_flag_past_the_most_a_key_keeps_is_too_large_and_a_repeat_is_not() {
        let mut s = active();
        for i in 0..STALE_FLAGS_MAX {
            let change = apply(Some(&s), KEY, "a", &format!("path:f{i}"), "h", &ctx(20)).unwrap();
            s = change.slot;
        }
        let e = apply(Some(&s), KEY, "a", "path:one-more", "h", &ctx(20)).unwrap_err();
        assert_eq!(e.code, ErrorCode::TooLarge);
        let details: serde_json::Value = serde_json::from_str(&e.details_json).unwrap();
        assert_eq!(
            details,
            json!({"field": "stale", "limit": STALE_FLAGS_MAX, "size": STALE_FLAGS_MAX + 1})
        );
        // An anchor already flagged is replaced, not added.
        let change = apply(Some(&s), KEY, "b", "path:f0", "h2", &ctx(21)).unwrap();
        assert_eq!(change.slot.stale.len(), STALE_FLAGS_MAX);
    }

    #[test]
    fn absent_is_not_found() {
        assert_eq!(
            code(apply(None, KEY, "a", "path:x", "h", &ctx(20))),
            ErrorCode::NotFound
        );
    }

    #[test]
    fn active_and_revoked_keep_their_state_and_gain_a_flag() {
        for prev in [active(), revoked()] {
            let c = ctx(20);
            let ch = apply(Some(&prev), KEY, "ci", "path:src/a.rs", "abc", &c).unwrap();
            assert_applied(Some(&prev), &ch, EventKind::StaleFlagged, &c);
            assert_eq!((ch.slot.state, &ch.slot.value), (prev.state, &prev.value));
            assert_eq!(
                ch.slot.stale,
                vec![StaleFlag {
                    anchor: "path:src/a.rs".into(),
                    observed_hash: "abc".into(),
                    actor: "ci".into(),
                    flagged_at: c.now_ms,
                }]
            );
            let event = ch.event.unwrap();
            assert_eq!(event.reason, None);
            assert_eq!(event.anchor.as_deref(), Some("path:src/a.rs"));
            assert_eq!(event.observed_hash.as_deref(), Some("abc"));
            assert_eq!(event.by, None);
        }
    }

    #[test]
    fn a_new_flag_on_the_same_anchor_replaces_the_old_one() {
        let one = apply(Some(&active()), KEY, "ci", "path:a", "h1", &ctx(20))
            .unwrap()
            .slot;
        let two = apply(Some(&one), KEY, "ci", "path:b", "h2", &ctx(21))
            .unwrap()
            .slot;
        let three = apply(Some(&two), KEY, "ci", "path:a", "h3", &ctx(22))
            .unwrap()
            .slot;
        let flags: Vec<_> = three
            .stale
            .iter()
            .map(|f| (f.anchor.as_str(), f.observed_hash.as_str()))
            .collect();
        assert_eq!(flags, vec![("path:b", "h2"), ("path:a", "h3")]);
        assert_eq!(three.state, State::Active);
    }

    #[test]
    fn forgotten_is_key_forgotten() {
        let prev = forgotten();
        assert_eq!(
            code(apply(Some(&prev), KEY, "a", "path:x", "h", &ctx(20))),
            ErrorCode::KeyForgotten
        );
    }
}
