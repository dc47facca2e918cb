//! `revoke` (SPEC §2): mark a belief as wrong, keeping it (with its reason) as a deterrent.
//!
//! | state | outcome |
//! |---|---|
//! | absent | 404 `not_found` |
//! | active | → revoked, value kept, revocation recorded, event `revoked` |
//! | revoked | idempotent: `already: true`, the first revocation stands, no event |
//! | forgotten | 409 `key_forgotten` |

use crate::records::{EventKind, Revocation, State};
use crate::step;
use crate::types::{Change, Ctx, OpError, Slot};

/// Applies a revoke of `key` (currently `slot`) per the table above.
///
/// - The value, its anchors and stale flags are kept: a revoked note is still recalled,
///   as a warning.
/// - `revocation.version` is the version the revoke created.
/// - `fence_revision` is this revision, and stays so when the revoke is lifted.
pub fn apply(
    slot: Option<&Slot>,
    key: &str,
    actor: &str,
    reason: &str,
    ctx: &Ctx,
) -> Result<Change, OpError> {
    let s = step::live(slot, key, "revoke")?;
    if s.state == State::Revoked {
        return Ok(step::already(s));
    }
    let mut next = step::begin(Some(s), key, ctx);
    next.state = State::Revoked;
    next.fence_revision = ctx.revision;
    next.revocation = Some(Revocation {
        actor: actor.to_string(),
        reason: reason.to_string(),
        revoked_at: ctx.now_ms,
        version: next.version,
    });
    Ok(step::finish(
        Some(s),
        next,
        EventKind::Revoked,
        actor,
        Some(reason),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ErrorCode;
    use crate::step::fixtures::*;

    #[test]
    fn absent_is_not_found() {
        assert_eq!(
            code(apply(None, KEY, "a", "r", &ctx(20))),
            ErrorCode::NotFound
        );
    }

    #[test]
    fn active_becomes_revoked_keeping_value_and_anchors() {
        let prev = active();
        let c = ctx(20);
        let ch = apply(Some(&prev), KEY, "judge", "wrong premise", &c).unwrap();
        assert_applied(Some(&prev), &ch, EventKind::Revoked, &c);
        assert_eq!(
            (ch.slot.state, &ch.slot.value),
            (State::Revoked, &prev.value)
        );
        let r = ch.slot.revocation.clone().unwrap();
        assert_eq!(
            (r.actor.as_str(), r.reason.as_str()),
            ("judge", "wrong premise")
        );
        assert_eq!((r.revoked_at, r.version), (c.now_ms, 2));
        assert!(ch.anchors_added.is_empty() && ch.anchors_removed.is_empty());
        let event = ch.event.unwrap();
        assert_eq!(
            (event.reason.as_deref(), event.value_hash),
            (Some("wrong premise"), prev.value_hash)
        );
    }

    #[test]
    fn revoked_is_idempotent() {
        let prev = revoked();
        let ch = apply(Some(&prev), KEY, "other", "other reason", &ctx(20)).unwrap();
        assert_already(&prev, &ch);
        assert_eq!(
            ch.slot.revocation.unwrap().reason,
            "wrong",
            "the first revocation stands"
        );
    }

    #[test]
    fn forgotten_is_key_forgotten() {
        let prev = forgotten();
        assert_eq!(
            code(apply(Some(&prev), KEY, "a", "r", &ctx(20))),
            ErrorCode::KeyForgotten
        );
    }
}
