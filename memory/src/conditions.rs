//! Preconditions a mutation may carry (SPEC §2), checked at apply time before any rule,
//! including the idempotent ones: a client that states what it expects is told when the
//! key is not in that state, even if the operation would have been a no-op.

use serde_json::json;

use crate::records::{ErrorCode, HistoryEvent};
use crate::types::{Conditions, OpError, Slot};

/// Checks `cond` against the current `slot` (`None`: absent, version 0).
///
/// - `expected_version`: 409 `version_conflict` with `{current_version}` unless equal.
/// - `based_on_revision`: 409 `stale_write` with `{based_on_revision, fence_revision}` if
///   the key's [`Slot::fence_revision`] is greater: it was forgotten, revoked or re-created
///   after that revision, even if the revoke was lifted since (reinstate or a write with
///   `override_revocation`), as forgets and re-creations fence for ever too.
pub fn check(slot: Option<&Slot>, cond: &Conditions) -> Result<(), OpError> {
    let current = slot.map_or(0, |s| s.version);
    if let Some(expected) = cond.expected_version.filter(|&e| e != current) {
        return Err(OpError::new(
            ErrorCode::VersionConflict,
            format!("expected version {expected}, current version is {current}"),
            json!({ "current_version": current }),
        ));
    }
    let fence = slot.map_or(0, |s| s.fence_revision);
    if let Some(based) = cond.based_on_revision.filter(|&b| fence > b) {
        return Err(OpError::new(
            ErrorCode::StaleWrite,
            format!(
                "the key was forgotten, revoked or re-created at revision {fence}, \
                 after based_on_revision {based}"
            ),
            json!({ "based_on_revision": based, "fence_revision": fence }),
        ));
    }
    Ok(())
}

/// The fence a slot stored before `Slot::fence_revision` existed gets, recomputed from
/// the key's `history` (oldest first): the revision of its latest `forgotten`, `revoked`
/// or `tombstone_cleared` event, 0 if none. These are exactly the changes whose rules set
/// the fence, so a replica upgrading a slot it applied with the old build holds the same
/// fence as one that applies the same entries with this build (history is never pruned).
pub fn fence_from_history<'a>(history: impl IntoIterator<Item = &'a HistoryEvent>) -> u64 {
    history
        .into_iter()
        .filter(|e| e.kind.fences())
        .map(|e| e.revision)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::State;
    use crate::step::fixtures::*;
    use crate::types::{Change, Ctx};
    use crate::{flag_stale, forget, reinstate, revoke, write};

    fn expect(v: u64) -> Conditions {
        Conditions {
            expected_version: Some(v),
            based_on_revision: None,
        }
    }

    fn based(r: u64) -> Conditions {
        Conditions {
            expected_version: None,
            based_on_revision: Some(r),
        }
    }

    fn details(err: OpError) -> serde_json::Value {
        serde_json::from_str(&err.details_json).unwrap()
    }

    #[test]
    fn no_conditions_always_pass() {
        for (_, slot) in all() {
            assert!(check(slot.as_ref(), &Conditions::default()).is_ok());
        }
    }

    #[test]
    fn expected_version_zero_means_absent() {
        assert!(check(None, &expect(0)).is_ok());
        let err = check(None, &expect(1)).unwrap_err();
        assert_eq!(err.code, ErrorCode::VersionConflict);
        assert_eq!(details(err)["current_version"], 0);
        let a = active();
        let err = check(Some(&a), &expect(0)).unwrap_err();
        assert_eq!(details(err)["current_version"], 1);
    }

    #[test]
    fn expected_version_must_equal_in_every_state() {
        for (_, slot) in all().into_iter().skip(1) {
            let s = slot.unwrap();
            assert!(check(Some(&s), &expect(s.version)).is_ok());
            for wrong in [s.version - 1, s.version + 1] {
                assert_eq!(
                    check(Some(&s), &expect(wrong)).unwrap_err().code,
                    ErrorCode::VersionConflict
                );
            }
        }
    }

    #[test]
    fn based_on_revision_passes_for_absent_and_first_generation_active() {
        assert!(check(None, &based(0)).is_ok());
        assert!(
            check(Some(&active()), &based(0)).is_ok(),
            "a first creation is no re-creation"
        );
    }

    #[test]
    fn based_on_revision_before_a_forget_is_stale_write() {
        let f = forgotten(); // forgotten at revision 12
        assert!(check(Some(&f), &based(12)).is_ok());
        let err = check(Some(&f), &based(11)).unwrap_err();
        assert_eq!(err.code, ErrorCode::StaleWrite);
        assert_eq!(
            details(err),
            json!({ "based_on_revision": 11, "fence_revision": 12 })
        );
    }

    #[test]
    fn based_on_revision_before_a_revoke_is_stale_write() {
        let r = revoked(); // revoked at revision 11
        assert_eq!(r.fence_revision, 11);
        assert!(check(Some(&r), &based(11)).is_ok());
        let err = check(Some(&r), &based(10)).unwrap_err();
        assert_eq!(err.code, ErrorCode::StaleWrite);
        assert_eq!(
            details(err),
            json!({ "based_on_revision": 10, "fence_revision": 11 })
        );
        // Exact: a later change while revoked does not move the fence.
        let flagged = flag_stale::apply(Some(&r), KEY, "a", "tag:x", "h", &ctx(15))
            .unwrap()
            .slot;
        assert!(check(Some(&flagged), &based(11)).is_ok());
        assert_eq!(
            details(check(Some(&flagged), &based(10)).unwrap_err())["fence_revision"],
            11
        );
    }

    #[test]
    fn a_lifted_revoke_still_fences_older_data() {
        let r = revoked(); // revoked at revision 11
        let reinstated = reinstate::apply(Some(&r), KEY, "judge", None, &ctx(20))
            .unwrap()
            .slot;
        let overridden = write::apply(
            Some(&r),
            KEY,
            &write::Write {
                override_revocation: true,
                ..write_op("2")
            },
            &ctx(20),
        )
        .unwrap()
        .slot;
        for lifted in [reinstated, overridden] {
            assert_eq!(lifted.state, State::Active);
            let err = check(Some(&lifted), &based(10)).unwrap_err();
            assert_eq!(err.code, ErrorCode::StaleWrite);
            assert_eq!(details(err)["fence_revision"], 11);
            assert!(check(Some(&lifted), &based(11)).is_ok());
            // A plain write later neither lifts nor moves the fence.
            let later = write::apply(Some(&lifted), KEY, &write_op("3"), &ctx(30))
                .unwrap()
                .slot;
            assert_eq!(later.fence_revision, 11);
            assert!(check(Some(&later), &based(10)).is_err());
            assert!(check(Some(&later), &based(25)).is_ok());
        }
    }

    #[test]
    fn the_latest_fencing_change_sets_the_fence() {
        // revoke 11, reinstate 20, forget 21, re-create 22, revoke 23, reinstate 24.
        let r = revoked();
        let s = reinstate::apply(Some(&r), KEY, "a", None, &ctx(20))
            .unwrap()
            .slot;
        let s = forget::apply(Some(&s), KEY, "a", "r", &ctx(21))
            .unwrap()
            .slot;
        assert_eq!(s.fence_revision, 21);
        let clear = write::Write {
            clear_tombstone: true,
            ..write_op("1")
        };
        let s = write::apply(Some(&s), KEY, &clear, &ctx(22)).unwrap().slot;
        assert_eq!(s.fence_revision, 22);
        let s = revoke::apply(Some(&s), KEY, "a", "r", &ctx(23))
            .unwrap()
            .slot;
        let s = reinstate::apply(Some(&s), KEY, "a", None, &ctx(24))
            .unwrap()
            .slot;
        assert_eq!(s.fence_revision, 23);
        assert_eq!(
            details(check(Some(&s), &based(22)).unwrap_err())["fence_revision"],
            23
        );
        assert!(check(Some(&s), &based(23)).is_ok());
        // Idempotent closes change nothing, the fence included.
        let again = revoke::apply(Some(&r), KEY, "a", "r", &ctx(25))
            .unwrap()
            .slot;
        assert_eq!(again.fence_revision, 11);
    }

    #[test]
    fn a_pre_emptive_forget_fences() {
        let f = forget::apply(None, KEY, "ops", "never", &ctx(5))
            .unwrap()
            .slot;
        assert_eq!(f.fence_revision, 5);
        assert!(check(Some(&f), &based(4)).is_err());
    }

    #[test]
    fn fence_from_history_is_what_the_rules_keep() {
        // The same sequence as above, through the rules, and its events.
        let mut slot: Option<Slot> = None;
        let mut events = Vec::new();
        let clear = write::Write {
            clear_tombstone: true,
            ..write_op("1")
        };
        type Step<'a> = Box<dyn Fn(Option<&Slot>, &Ctx) -> Change + 'a>;
        let steps: Vec<Step> = vec![
            Box::new(|s, c| write::apply(s, KEY, &write_op("1"), c).unwrap()),
            Box::new(|s, c| revoke::apply(s, KEY, "a", "r", c).unwrap()),
            Box::new(|s, c| flag_stale::apply(s, KEY, "a", "tag:x", "h", c).unwrap()),
            Box::new(|s, c| reinstate::apply(s, KEY, "a", None, c).unwrap()),
            Box::new(|s, c| write::apply(s, KEY, &write_op("2"), c).unwrap()),
            Box::new(|s, c| forget::apply(s, KEY, "a", "r", c).unwrap()),
            Box::new(|s, c| write::apply(s, KEY, &clear, c).unwrap()),
            Box::new(|s, c| write::apply(s, KEY, &write_op("3"), c).unwrap()),
        ];
        assert_eq!(fence_from_history(&events), 0);
        for (i, step) in steps.iter().enumerate() {
            let change = step(slot.as_ref(), &ctx(100 + i as u64));
            events.extend(change.event.clone());
            assert_eq!(fence_from_history(&events), change.slot.fence_revision);
            slot = Some(change.slot);
        }
        assert_eq!(slot.unwrap().fence_revision, 106);
    }

    #[test]
    fn based_on_revision_before_a_re_creation_is_stale_write() {
        let w = write::Write {
            clear_tombstone: true,
            ..write_op("1")
        };
        let re = write::apply(Some(&forgotten()), KEY, &w, &ctx(30))
            .unwrap()
            .slot;
        assert!(check(Some(&re), &based(30)).is_ok());
        assert_eq!(
            check(Some(&re), &based(29)).unwrap_err().code,
            ErrorCode::StaleWrite
        );
        // A plain overwrite later does not move the fence: it is no close or re-creation.
        let later = write::apply(Some(&re), KEY, &write_op("2"), &ctx(40))
            .unwrap()
            .slot;
        assert!(check(Some(&later), &based(35)).is_ok());
    }

    #[test]
    fn version_is_checked_before_revision() {
        let f = forgotten();
        let both = Conditions {
            expected_version: Some(9),
            based_on_revision: Some(0),
        };
        assert_eq!(
            check(Some(&f), &both).unwrap_err().code,
            ErrorCode::VersionConflict
        );
    }
}
