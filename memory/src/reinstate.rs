//! `reinstate` (SPEC §2): undo a revocation at no cost.
//!
//! | state | outcome |
//! |---|---|
//! | absent | 404 `not_found` |
//! | active | idempotent: `already: true`, no event |
//! | revoked | → active, revocation cleared, event `reinstated` |
//! | forgotten | 409 `key_forgotten` |

use crate::records::{EventKind, State};
use crate::step;
use crate::types::{Change, Ctx, OpError, Slot};

/// Applies a reinstate of `key` (currently `slot`) per the table above.
///
/// - The value kept by the revoke becomes active again, unchanged (same `value_revision`).
/// - `fence_revision` is kept: a writer whose data predates the revoke is still fenced.
pub fn apply(
    slot: Option<&Slot>,
    key: &str,
    actor: &str,
    reason: Option<&str>,
    ctx: &Ctx,
) -> Result<Change, OpError> {
    let s = step::live(slot, key, "reinstate")?;
    if s.state == State::Active {
        return Ok(step::already(s));
    }
    let mut next = step::begin(Some(s), key, ctx);
    next.state = State::Active;
    next.revocation = None;
    Ok(step::finish(
        Some(s),
        next,
        EventKind::Reinstated,
        actor,
        reason,
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
            code(apply(None, KEY, "a", None, &ctx(20))),
            ErrorCode::NotFound
        );
    }

    #[test]
    fn active_is_idempotent() {
        let prev = active();
        assert_already(
            &prev,
            &apply(Some(&prev), KEY, "a", None, &ctx(20)).unwrap(),
        );
    }

    #[test]
    fn revoked_becomes_active_with_its_value() {
        let prev = revoked();
        let c = ctx(20);
        let ch = apply(Some(&prev), KEY, "judge", Some("was right"), &c).unwrap();
        assert_applied(Some(&prev), &ch, EventKind::Reinstated, &c);
        let s = &ch.slot;
        assert_eq!(
            (s.state, s.revocation.as_ref(), s.version),
            (State::Active, None, 3)
        );
        assert_eq!(
            (&s.value, s.value_revision),
            (&prev.value, prev.value_revision)
        );
        assert_eq!(ch.event.unwrap().reason.as_deref(), Some("was right"));
    }

    #[test]
    fn forgotten_is_key_forgotten() {
        let prev = forgotten();
        assert_eq!(
            code(apply(Some(&prev), KEY, "a", None, &ctx(20))),
            ErrorCode::KeyForgotten
        );
    }
}
