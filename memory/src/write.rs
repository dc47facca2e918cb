//! `write` (SPEC §2): set a key's value.
//!
//! | state | outcome |
//! |---|---|
//! | absent | → active, generation 1, event `written` |
//! | active | → active, event `written` (`override_revocation`, `clear_tombstone` ignored) |
//! | revoked | 409 `key_revoked` unless `override_revocation`, then → active, event `written` |
//! | forgotten | 409 `key_forgotten` unless `clear_tombstone`, then → active, generation + 1, event `tombstone_cleared` |
//!
//! Choices the SPEC leaves open:
//! - A flag that does not apply to the current state is ignored, not rejected: a client
//!   that always sends `clear_tombstone: true` after a deliberate decision must not fail
//!   because the key happens not to be forgotten (the flag only ever *permits* more).
//! - A write clears `stale` flags and the revocation; it keeps `superseded_by`, because
//!   writing an old key does not make it stop being replaced (the marker keeps warning).
//!   A new generation (write with `clear_tombstone`) starts clean: no `superseded_by`.
//! - Re-establishing a forgotten key is one mutation, so it is one version and one event,
//!   of kind `tombstone_cleared`, carrying the new value's hash (not two events).
//! - `meta` is replaced entirely: it describes the value and who wrote it.
//! - A re-creation (`clear_tombstone`) moves `fence_revision` to its revision; a write with
//!   `override_revocation` does not, and keeps the revoke's: data older than the revoke
//!   stays fenced (SPEC §2 `based_on_revision`).

use serde_json::json;

use crate::records::{ErrorCode, EventKind, Meta, State};
use crate::render::render;
use crate::step;
use crate::types::{Change, Ctx, OpError, Slot};
use crate::wire;

/// The fields of a logged `write` ([`crate::Op::Write`] minus the key).
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// Canonical JSON text of the value.
    pub value: &'a str,
    /// sha256 (hex) of `value`, as the log entry carries it.
    pub value_hash: &'a str,
    pub actor: &'a str,
    pub source: Option<&'a str>,
    pub anchors: &'a [String],
    pub tags: &'a [String],
    pub clear_tombstone: bool,
    pub override_revocation: bool,
    pub reason: Option<&'a str>,
}

/// Applies a write of `key` (currently `slot`) per the table above.
///
/// - Never reopens a revoked or forgotten key without its explicit flag.
/// - On success the key is active with the new value, `value_revision` is this revision,
///   and the anchor index holds exactly the new anchors.
pub fn apply(slot: Option<&Slot>, key: &str, w: &Write, ctx: &Ctx) -> Result<Change, OpError> {
    let kind = match slot {
        Some(s) if s.state == State::Revoked && !w.override_revocation => {
            return Err(revoked_error(s))
        }
        Some(s) if s.state == State::Forgotten && !w.clear_tombstone => {
            return Err(step::forgotten_error(
                s,
                "writing it again requires clear_tombstone",
            ))
        }
        Some(s) if s.state == State::Forgotten => EventKind::TombstoneCleared,
        _ => EventKind::Written,
    };
    // The draft has no value, meta, revocation or stale flags: a write replaces the first
    // two and clears the others.
    let mut next = step::begin_overwrite(slot, key, ctx);
    if kind == EventKind::TombstoneCleared {
        next.generation += 1;
        next.create_revision = ctx.revision;
        next.fence_revision = ctx.revision;
        next.tombstone = None;
        next.superseded_by = None;
    }
    next.state = State::Active;
    next.value = Some(w.value.to_string());
    next.value_hash = Some(w.value_hash.to_string());
    next.value_revision = ctx.revision;
    next.meta = Meta {
        actor: w.actor.to_string(),
        source: w.source.map(str::to_string),
        anchors: w.anchors.to_vec(),
        tags: w.tags.to_vec(),
        updated_at: ctx.now_ms,
    };
    Ok(step::finish(slot, next, kind, w.actor, w.reason))
}

/// 409 `key_revoked`, carrying the revocation and the warning a reader would get.
fn revoked_error(slot: &Slot) -> OpError {
    OpError::new(
        ErrorCode::KeyRevoked,
        format!(
            "key {:?} is revoked; writing it requires override_revocation",
            slot.key
        ),
        json!({
            "revocation": wire::revocation_json(slot.revocation.as_ref()),
            "rendered": render(slot),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::value_hash;
    use crate::step::fixtures::*;

    fn anchored<'a>(value: &'a str, anchors: &'a [String]) -> Write<'a> {
        Write {
            anchors,
            ..write_op(value)
        }
    }

    #[test]
    fn absent_becomes_active_generation_1() {
        let c = ctx(7);
        let ch = apply(None, KEY, &write_op("\"v\""), &c).unwrap();
        assert_applied(None, &ch, EventKind::Written, &c);
        let s = &ch.slot;
        assert_eq!(
            (s.state, s.version, s.generation, s.forget_epoch),
            (State::Active, 1, 1, 0)
        );
        assert_eq!((s.create_revision, s.value_revision), (7, 7));
        assert_eq!(s.value.as_deref(), Some("\"v\""));
        assert_eq!(s.value_hash, Some(value_hash("\"v\"")));
        assert_eq!(ch.event.unwrap().value_hash, Some(value_hash("\"v\"")));
        assert_eq!(
            (s.meta.actor.as_str(), s.meta.source.as_deref()),
            ("writer", Some("test"))
        );
        assert_eq!(ch.new_tombstone, None);
        assert_eq!(ch.result.tombstone, None);
    }

    #[test]
    fn active_is_overwritten_and_stale_flags_cleared_superseded_kept() {
        let mut prev = active();
        prev.stale.push(crate::records::StaleFlag {
            anchor: "path:a".into(),
            observed_hash: "h".into(),
            actor: "x".into(),
            flagged_at: 1,
        });
        prev.superseded_by = Some("k2".into());
        let c = ctx(20);
        let ch = apply(Some(&prev), KEY, &write_op("2"), &c).unwrap();
        assert_applied(Some(&prev), &ch, EventKind::Written, &c);
        assert_eq!(ch.slot.value.as_deref(), Some("2"));
        assert_eq!(
            (ch.slot.generation, ch.slot.create_revision),
            (1, prev.create_revision)
        );
        assert!(ch.slot.stale.is_empty());
        assert_eq!(ch.slot.superseded_by.as_deref(), Some("k2"));
    }

    #[test]
    fn flags_that_do_not_apply_are_ignored_on_active() {
        let prev = active();
        let w = Write {
            clear_tombstone: true,
            override_revocation: true,
            ..write_op("3")
        };
        let ch = apply(Some(&prev), KEY, &w, &ctx(20)).unwrap();
        assert_applied(Some(&prev), &ch, EventKind::Written, &ctx(20));
        assert_eq!(
            ch.slot.generation, 1,
            "clear_tombstone on a live key starts no generation"
        );
    }

    #[test]
    fn revoked_without_override_is_key_revoked_with_rendered_warning() {
        let prev = revoked();
        let err = apply(Some(&prev), KEY, &write_op("3"), &ctx(20)).unwrap_err();
        assert_eq!(err.code, ErrorCode::KeyRevoked);
        let details: serde_json::Value = serde_json::from_str(&err.details_json).unwrap();
        assert_eq!(details["revocation"]["reason"], "wrong");
        assert!(details["rendered"]
            .as_str()
            .unwrap()
            .starts_with("[k] [REVOKED] Previously believed: v1."));
    }

    #[test]
    fn revoked_with_override_becomes_active_without_revocation() {
        let prev = revoked();
        let w = Write {
            override_revocation: true,
            ..write_op("3")
        };
        let c = ctx(20);
        let ch = apply(Some(&prev), KEY, &w, &c).unwrap();
        assert_applied(Some(&prev), &ch, EventKind::Written, &c);
        assert_eq!(
            (ch.slot.state, ch.slot.revocation.as_ref()),
            (State::Active, None)
        );
    }

    #[test]
    fn forgotten_without_clear_is_key_forgotten() {
        let prev = forgotten();
        let w = Write {
            override_revocation: true,
            ..write_op("3")
        };
        assert_eq!(
            code(apply(Some(&prev), KEY, &w, &ctx(20))),
            ErrorCode::KeyForgotten
        );
    }

    #[test]
    fn forgotten_with_clear_starts_a_new_generation_without_resetting_version() {
        let mut prev = forgotten();
        prev.superseded_by = Some("k2".into());
        let w = Write {
            clear_tombstone: true,
            reason: Some("re-learned"),
            ..write_op("4")
        };
        let c = ctx(30);
        let ch = apply(Some(&prev), KEY, &w, &c).unwrap();
        assert_applied(Some(&prev), &ch, EventKind::TombstoneCleared, &c);
        let s = &ch.slot;
        assert_eq!((s.state, s.version, s.generation), (State::Active, 3, 2));
        assert_eq!(
            (s.forget_epoch, s.create_revision),
            (2, 30),
            "forget_epoch is kept"
        );
        assert_eq!(
            (s.tombstone.as_ref(), s.superseded_by.as_ref()),
            (None, None)
        );
        let event = ch.event.unwrap();
        assert_eq!(event.reason.as_deref(), Some("re-learned"));
        assert_eq!(event.value_hash, Some(value_hash("4")));
    }

    #[test]
    fn anchors_are_replaced_in_the_index() {
        let a = ["path:a".to_string(), "tag:x".to_string()];
        let b = ["tag:x".to_string(), "topic:y".to_string()];
        let first = apply(None, KEY, &anchored("1", &a), &ctx(1)).unwrap();
        assert_eq!(first.anchors_added, a.to_vec());
        let second = apply(Some(&first.slot), KEY, &anchored("2", &b), &ctx(2)).unwrap();
        assert_eq!(second.anchors_removed, vec!["path:a".to_string()]);
        assert_eq!(second.anchors_added, vec!["topic:y".to_string()]);
    }

    #[test]
    fn clear_tombstone_re_adds_anchors() {
        let a = ["tag:x".to_string()];
        let prev = forgotten();
        let w = Write {
            clear_tombstone: true,
            ..anchored("1", &a)
        };
        let ch = apply(Some(&prev), KEY, &w, &ctx(30)).unwrap();
        assert_eq!((ch.anchors_added, ch.anchors_removed), (a.to_vec(), vec![]));
    }
}
