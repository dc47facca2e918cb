//! The part every operation shares: stamping a new version, building the history event,
//! the anchor-index diff and the result; plus the shared rejections.
//!
//! An operation module decides *what* changes (state, value, tombstone, flags) on a draft
//! from [`begin`], then hands it to [`finish`]; an idempotent no-op returns [`already`].

use std::collections::BTreeSet;

use serde_json::json;

use crate::records::{ErrorCode, EventKind, HistoryEvent, Meta, MutationResult, State};
use crate::types::{Change, Ctx, OpError, Slot};
use crate::wire;

/// The draft of the slot after an applied mutation, before the operation's own changes.
///
/// - `version` is the previous version + 1 (1 for a key never touched): never resets.
/// - `revision` is `ctx.revision` and `meta.updated_at` is `ctx.now_ms`.
/// - A key never touched starts generation 1 at this revision, with `state: Absent`,
///   which the operation must replace ([`finish`] checks it).
pub(crate) fn begin(prev: Option<&Slot>, key: &str, ctx: &Ctx) -> Slot {
    stamp(prev.cloned().unwrap_or_else(|| fresh(key, ctx)), ctx)
}

/// [`begin`] for an operation that sets the value, its hash, `meta`, `revocation` and
/// `stale` itself (a write): those of `prev` are left out of the draft (`None`, default,
/// empty) instead of being copied and dropped at once; a copy of the old value was most
/// of what a write's draft cost.
pub(crate) fn begin_overwrite(prev: Option<&Slot>, key: &str, ctx: &Ctx) -> Slot {
    let Some(prev) = prev else {
        return begin(None, key, ctx);
    };
    let draft = Slot {
        key: prev.key.clone(),
        state: prev.state,
        version: prev.version,
        generation: prev.generation,
        forget_epoch: prev.forget_epoch,
        revision: prev.revision,
        create_revision: prev.create_revision,
        value: None,
        value_hash: None,
        value_revision: prev.value_revision,
        meta: Meta::default(),
        tombstone: prev.tombstone.clone(),
        revocation: None,
        stale: Vec::new(),
        superseded_by: prev.superseded_by.clone(),
        fence_revision: prev.fence_revision,
    };
    stamp(draft, ctx)
}

/// The new version, this revision and this time.
fn stamp(mut next: Slot, ctx: &Ctx) -> Slot {
    next.version += 1;
    next.revision = ctx.revision;
    next.meta.updated_at = ctx.now_ms;
    next
}

/// A slot for a key never touched, at version 0 (so that [`begin`] makes it 1).
fn fresh(key: &str, ctx: &Ctx) -> Slot {
    Slot {
        key: key.to_string(),
        state: State::Absent,
        version: 0,
        generation: 1,
        forget_epoch: 0,
        revision: ctx.revision,
        create_revision: ctx.revision,
        value: None,
        value_hash: None,
        value_revision: 0,
        meta: Meta::default(),
        tombstone: None,
        revocation: None,
        stale: Vec::new(),
        superseded_by: None,
        fence_revision: 0,
    }
}

/// Completes an applied mutation whose new slot is `next` (a [`begin`] draft).
///
/// - Exactly one history event, of `kind`, at `next`'s version and revision. Its
///   `value_hash` is the current value's, or for a forget the forgotten value's; its
///   `reason` is `reason` verbatim. The kind-specific fields (`by`, `anchor`,
///   `observed_hash`) are left `None` for the operation to set.
/// - `new_tombstone` is set for a forget only.
/// - The anchor diff keeps the index `anchor → key` exact: it is the difference between
///   the indexed anchors of `prev` and of `next` (a forgotten slot has none).
pub(crate) fn finish(
    prev: Option<&Slot>,
    next: Slot,
    kind: EventKind,
    actor: &str,
    reason: Option<&str>,
) -> Change {
    debug_assert_ne!(next.state, State::Absent, "an operation must set the state");
    debug_assert_eq!(
        next.value.is_some(),
        matches!(next.state, State::Active | State::Revoked)
    );
    let value_hash = match &next.tombstone {
        Some(t) if next.state == State::Forgotten => t.value_hash.clone(),
        _ => next.value_hash.clone(),
    };
    let event = HistoryEvent {
        kind,
        version: next.version,
        revision: next.revision,
        actor: actor.to_string(),
        reason: reason.map(str::to_string),
        at: next.meta.updated_at,
        value_hash,
        by: None,
        anchor: None,
        observed_hash: None,
    };
    let before = indexed_anchors(prev);
    let after = indexed_anchors(Some(&next));
    Change {
        new_tombstone: next
            .tombstone
            .clone()
            .filter(|_| kind == EventKind::Forgotten),
        anchors_removed: before.difference(&after).map(|a| a.to_string()).collect(),
        anchors_added: after.difference(&before).map(|a| a.to_string()).collect(),
        result: result(&next, None),
        event: Some(event),
        slot: next,
    }
}

/// An idempotent no-op: the slot is unchanged, nothing is written, the result says
/// `already: true` and (for a forgotten key) carries the existing tombstone.
pub(crate) fn already(slot: &Slot) -> Change {
    Change {
        slot: slot.clone(),
        event: None,
        new_tombstone: None,
        anchors_removed: Vec::new(),
        anchors_added: Vec::new(),
        result: result(slot, Some(true)),
    }
}

/// The mutation result describing `slot`. `revision` is the key's, which for an applied
/// change is the entry being applied, and for a no-op the entry that last changed it.
fn result(slot: &Slot, already: Option<bool>) -> MutationResult {
    MutationResult {
        key: slot.key.clone(),
        state: slot.state,
        version: slot.version,
        generation: slot.generation,
        forget_epoch: slot.forget_epoch,
        revision: slot.revision,
        replayed: false,
        already,
        tombstone: slot
            .tombstone
            .clone()
            .filter(|_| slot.state == State::Forgotten),
    }
}

/// The anchors the recall index holds for this slot: none for an absent or forgotten key
/// (forgotten keys are never recalled), else the meta anchors.
fn indexed_anchors(slot: Option<&Slot>) -> BTreeSet<&str> {
    match slot {
        Some(s) if s.state != State::Forgotten => {
            s.meta.anchors.iter().map(String::as_str).collect()
        }
        _ => BTreeSet::new(),
    }
}

/// The slot of a key that revoke, reinstate, flag_stale and supersede (`op`) may act on:
/// 404 `not_found` for an absent key, 409 `key_forgotten` for a forgotten one.
pub(crate) fn live<'a>(slot: Option<&'a Slot>, key: &str, op: &str) -> Result<&'a Slot, OpError> {
    match slot {
        None => Err(OpError::new(
            ErrorCode::NotFound,
            format!("key {key:?} does not exist"),
            json!({ "key": key }),
        )),
        Some(s) if s.state == State::Forgotten => Err(forgotten_error(
            s,
            &format!(
                "{op} acts only on a key that exists; a write with clear_tombstone re-creates it"
            ),
        )),
        Some(s) => Ok(s),
    }
}

/// 409 `key_forgotten` for a forgotten slot, with its tombstone; `remedy` says what the
/// refused operation would need.
pub(crate) fn forgotten_error(slot: &Slot, remedy: &str) -> OpError {
    OpError::new(
        ErrorCode::KeyForgotten,
        format!("key {:?} is forgotten; {remedy}", slot.key),
        json!({ "tombstone": wire::tombstone_json(slot.tombstone.as_ref()) }),
    )
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Slots in every state, built through the real operations, for the operation tests.

    use super::*;
    use crate::{forget, revoke, write};

    pub const KEY: &str = "k";

    pub fn ctx(revision: u64) -> Ctx {
        Ctx {
            revision,
            now_ms: 1_700_000_000_000 + revision,
        }
    }

    pub fn write_op(value: &str) -> write::Write<'_> {
        // Leaked: a test's few small hashes, so that `Write` stays a plain borrow as the log
        // entry's fields are.
        let value_hash: &'static str = Box::leak(crate::hash::value_hash(value).into_boxed_str());
        write::Write {
            value,
            value_hash,
            actor: "writer",
            source: Some("test"),
            anchors: &[],
            tags: &[],
            clear_tombstone: false,
            override_revocation: false,
            reason: None,
        }
    }

    /// `"v1"` written at revision 10: version 1.
    pub fn active() -> Slot {
        write::apply(None, KEY, &write_op("\"v1\""), &ctx(10))
            .unwrap()
            .slot
    }

    /// [`active`] revoked at revision 11: version 2.
    pub fn revoked() -> Slot {
        revoke::apply(Some(&active()), KEY, "judge", "wrong", &ctx(11))
            .unwrap()
            .slot
    }

    /// [`active`] forgotten at revision 12: version 2.
    pub fn forgotten() -> Slot {
        forget::apply(Some(&active()), KEY, "gdpr", "erase", &ctx(12))
            .unwrap()
            .slot
    }

    /// The states a slot can be in, with a representative slot (`None`: absent).
    pub fn all() -> Vec<(State, Option<Slot>)> {
        vec![
            (State::Absent, None),
            (State::Active, Some(active())),
            (State::Revoked, Some(revoked())),
            (State::Forgotten, Some(forgotten())),
        ]
    }

    /// Asserts the invariants of every applied (non-idempotent) change of `prev`.
    pub fn assert_applied(prev: Option<&Slot>, change: &Change, kind: EventKind, ctx: &Ctx) {
        let prev_version = prev.map_or(0, |s| s.version);
        assert_eq!(change.slot.version, prev_version + 1, "version +1");
        assert_eq!(change.slot.revision, ctx.revision);
        assert_eq!(change.slot.meta.updated_at, ctx.now_ms);
        let event = change.event.as_ref().expect("one event per applied change");
        assert_eq!(event.kind, kind);
        assert_eq!(
            (event.version, event.revision, event.at),
            (change.slot.version, ctx.revision, ctx.now_ms)
        );
        assert_eq!(change.result.version, change.slot.version);
        assert_eq!(change.result.revision, ctx.revision);
        assert_eq!(change.result.state, change.slot.state);
        assert_eq!(change.result.already, None);
        assert!(!change.result.replayed);
    }

    /// Asserts an idempotent no-op on `prev`.
    pub fn assert_already(prev: &Slot, change: &Change) {
        assert_eq!(&change.slot, prev);
        assert_eq!(change.event, None);
        assert_eq!(change.new_tombstone, None);
        assert!(change.anchors_added.is_empty() && change.anchors_removed.is_empty());
        assert_eq!(change.result.already, Some(true));
        assert_eq!(
            (change.result.version, change.result.revision),
            (prev.version, prev.revision)
        );
    }

    /// The error code of a rejection.
    pub fn code(r: Result<Change, OpError>) -> ErrorCode {
        r.expect_err("expected a rejection").code
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn live_rejects_absent_and_forgotten() {
        assert_eq!(
            live(None, KEY, "revoke").unwrap_err().code,
            ErrorCode::NotFound
        );
        let f = forgotten();
        let err = live(Some(&f), KEY, "revoke").unwrap_err();
        assert_eq!(err.code, ErrorCode::KeyForgotten);
        assert!(
            !err.message.contains("writing it again") && err.message.contains("revoke"),
            "{}",
            err.message
        );
        let details: serde_json::Value = serde_json::from_str(&err.details_json).unwrap();
        assert_eq!(details["tombstone"]["id"], json!(f.tombstone.unwrap().id));
        assert!(live(Some(&active()), KEY, "revoke").is_ok());
        assert!(live(Some(&revoked()), KEY, "revoke").is_ok());
    }

    #[test]
    fn begin_stamps_version_revision_and_time() {
        let a = active();
        let next = begin(Some(&a), KEY, &ctx(20));
        assert_eq!(
            (next.version, next.revision, next.meta.updated_at),
            (2, 20, ctx(20).now_ms)
        );
        let fresh = begin(None, KEY, &ctx(5));
        assert_eq!(
            (fresh.version, fresh.generation, fresh.create_revision),
            (1, 1, 5)
        );
    }
}
