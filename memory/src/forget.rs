//! `forget` (SPEC §2): erase a key's value behind a durable tombstone with provenance.
//!
//! | state | outcome |
//! |---|---|
//! | absent | → forgotten, pre-emptive tombstone (`value_hash: null`), generation 1 |
//! | active, revoked | → forgotten, tombstone with the erased value's hash |
//! | forgotten | idempotent: same tombstone, `already: true`, no event, slot unchanged |
//!
//! What a forget erases: the value and everything describing it (`value_hash`, meta
//! `source`, `anchors`, `tags`, stale flags, revocation), since those could themselves carry
//! the forgotten fact. It keeps `meta.actor` (the last writer; the tombstone names who
//! forgot), `value_revision` (so `probe` can tell when the value's bytes left the log) and
//! `superseded_by` (a pointer about the key, not its value).

use crate::hash::tombstone_id;
use crate::records::{EventKind, State, Tombstone};
use crate::step;
use crate::types::{Change, Ctx, OpError, Slot};

/// Applies a forget of `key` (currently `slot`) per the table above.
///
/// - After it the key is forgotten, holds no value, and has no anchors in the index.
/// - `forget_epoch` = the new version = the tombstone's version.
/// - `fence_revision` = this revision (also for a pre-emptive forget).
/// - A second forget never writes a second, contradictory tombstone.
pub fn apply(
    slot: Option<&Slot>,
    key: &str,
    actor: &str,
    reason: &str,
    ctx: &Ctx,
) -> Result<Change, OpError> {
    if let Some(s) = slot.filter(|s| s.state == State::Forgotten) {
        return Ok(step::already(s));
    }
    let mut next = step::begin(slot, key, ctx);
    next.tombstone = Some(Tombstone {
        id: tombstone_id(key, next.generation, next.version),
        key: key.to_string(),
        actor: actor.to_string(),
        reason: reason.to_string(),
        value_hash: next.value_hash.take(),
        forgotten_at: ctx.now_ms,
        version: next.version,
        generation: next.generation,
        revision: ctx.revision,
    });
    if slot.is_none() {
        // A pre-emptive forget creates the slot: nobody wrote it, so it names the forgetter.
        next.meta.actor = actor.to_string();
    }
    next.state = State::Forgotten;
    next.forget_epoch = next.version;
    next.fence_revision = ctx.revision;
    next.value = None;
    next.revocation = None;
    next.stale.clear();
    next.meta.source = None;
    next.meta.anchors.clear();
    next.meta.tags.clear();
    Ok(step::finish(
        slot,
        next,
        EventKind::Forgotten,
        actor,
        Some(reason),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::value_hash;
    use crate::step::fixtures::*;
    use crate::write;

    #[test]
    fn absent_gets_a_pre_emptive_tombstone() {
        let c = ctx(3);
        let ch = apply(None, KEY, "ops", "never store this", &c).unwrap();
        assert_applied(None, &ch, EventKind::Forgotten, &c);
        let s = &ch.slot;
        assert_eq!(
            (s.state, s.version, s.generation, s.forget_epoch),
            (State::Forgotten, 1, 1, 1)
        );
        assert_eq!(
            (s.value.as_ref(), s.value_revision, s.meta.actor.as_str()),
            (None, 0, "ops")
        );
        let t = ch.new_tombstone.clone().unwrap();
        assert_eq!(t.value_hash, None);
        assert_eq!(
            (t.version, t.generation, t.revision, t.forgotten_at),
            (1, 1, 3, c.now_ms)
        );
        assert_eq!(
            (t.actor.as_str(), t.reason.as_str()),
            ("ops", "never store this")
        );
        assert_eq!(ch.result.tombstone, Some(t.clone()));
        assert_eq!(s.tombstone, Some(t));
        assert_eq!(ch.event.unwrap().value_hash, None);
    }

    #[test]
    fn active_value_is_erased_behind_a_tombstone() {
        let anchors = ["tag:x".to_string()];
        let w = write::Write {
            anchors: &anchors,
            tags: &anchors,
            ..write_op("\"secret\"")
        };
        let prev = write::apply(None, KEY, &w, &ctx(1)).unwrap().slot;
        let c = ctx(5);
        let ch = apply(Some(&prev), KEY, "gdpr", "erase", &c).unwrap();
        assert_applied(Some(&prev), &ch, EventKind::Forgotten, &c);
        let s = &ch.slot;
        assert_eq!(
            (s.state, s.forget_epoch, s.value_revision),
            (State::Forgotten, 2, 1)
        );
        assert_eq!(
            (
                s.value.as_ref(),
                s.value_hash.as_ref(),
                s.meta.source.as_ref()
            ),
            (None, None, None)
        );
        assert!(s.meta.anchors.is_empty() && s.meta.tags.is_empty());
        let t = ch.new_tombstone.unwrap();
        assert_eq!(t.value_hash, Some(value_hash("\"secret\"")));
        assert_eq!(ch.event.unwrap().value_hash, Some(value_hash("\"secret\"")));
        assert_eq!(ch.anchors_removed, anchors.to_vec());
        assert!(ch.anchors_added.is_empty());
    }

    #[test]
    fn revoked_is_forgotten_and_loses_its_revocation() {
        let prev = revoked();
        let c = ctx(20);
        let ch = apply(Some(&prev), KEY, "gdpr", "erase", &c).unwrap();
        assert_applied(Some(&prev), &ch, EventKind::Forgotten, &c);
        assert_eq!(
            (
                ch.slot.state,
                ch.slot.revocation.as_ref(),
                ch.slot.value.as_ref()
            ),
            (State::Forgotten, None, None)
        );
        assert_eq!(ch.new_tombstone.unwrap().value_hash, prev.value_hash);
    }

    #[test]
    fn forgotten_is_idempotent_with_the_same_tombstone() {
        let prev = forgotten();
        let ch = apply(Some(&prev), KEY, "someone-else", "again", &ctx(40)).unwrap();
        assert_already(&prev, &ch);
        assert_eq!(ch.result.tombstone, prev.tombstone);
        assert_eq!(ch.result.state, State::Forgotten);
    }

    #[test]
    fn forget_after_re_creation_gets_a_distinct_tombstone() {
        let first = forgotten();
        let w = write::Write {
            clear_tombstone: true,
            ..write_op("1")
        };
        let re = write::apply(Some(&first), KEY, &w, &ctx(30)).unwrap().slot;
        let second = apply(Some(&re), KEY, "a", "r", &ctx(31)).unwrap();
        let (t1, t2) = (first.tombstone.unwrap(), second.new_tombstone.unwrap());
        assert_ne!(t1.id, t2.id);
        assert_eq!(
            (t2.version, t2.generation, second.slot.forget_epoch),
            (4, 2, 4)
        );
    }
}
