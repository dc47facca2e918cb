//! Preconditions a mutation may carry (SPEC §2), checked at apply time before any rule,
//! including the idempotent ones: a client that states what it expects is told when the
//! key is not in that state, even if the operation would have been a no-op.

use cairn_client::api::{ErrorCode, State};
use serde_json::json;

use crate::types::{Conditions, OpError, Slot};

/// Checks `cond` against the current `slot` (`None`: absent, version 0).
///
/// - `expected_version`: 409 `version_conflict` with `{current_version}` unless equal.
/// - `based_on_revision`: 409 `stale_write` with `{based_on_revision, fence_revision}` if
///   the key's [`fence_revision`] is greater.
pub fn check(slot: Option<&Slot>, cond: &Conditions) -> Result<(), OpError> {
    let current = slot.map_or(0, |s| s.version);
    if let Some(expected) = cond.expected_version.filter(|&e| e != current) {
        return Err(OpError::new(
            ErrorCode::VersionConflict,
            format!("expected version {expected}, current version is {current}"),
            json!({ "current_version": current }),
        ));
    }
    let fence = slot.and_then(fence_revision);
    if let (Some(based), Some(fence)) = (cond.based_on_revision, fence) {
        if fence > based {
            return Err(OpError::new(
                ErrorCode::StaleWrite,
                format!(
                    "the key was forgotten, revoked or re-created at revision {fence}, \
                     after based_on_revision {based}"
                ),
                json!({ "based_on_revision": based, "fence_revision": fence }),
            ));
        }
    }
    Ok(())
}

/// The revision of the latest change that closed or re-created the key, as far as the
/// current slot can tell; `None` if there is none.
///
/// - forgotten: the forget's revision (`tombstone.revision`).
/// - revoked: `slot.revision`. The slot does not keep the revoke's own revision, and any
///   later change (flag_stale, supersede) happened while revoked, so this is the revoke's
///   revision or later: conservative, it may reject a writer whose data postdates the
///   revoke but predates a later stale flag, never the other way round.
/// - active in generation > 1: `create_revision`, the write that cleared the tombstone
///   (which is after the forget it cleared).
/// - active in generation 1: none. A revoke that was since reinstated does not fence:
///   reinstating declares the belief valid again, the key is back to what the writer saw.
pub fn fence_revision(slot: &Slot) -> Option<u64> {
    match slot.state {
        State::Forgotten => Some(
            slot.tombstone
                .as_ref()
                .map_or(slot.revision, |t| t.revision),
        ),
        State::Revoked => Some(slot.revision),
        State::Active if slot.generation > 1 => Some(slot.create_revision),
        State::Active | State::Absent => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::fixtures::*;
    use crate::{flag_stale, write};

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
        assert_eq!(details(err)["fence_revision"], 12);
    }

    #[test]
    fn based_on_revision_before_a_revoke_is_stale_write() {
        let r = revoked(); // revoked at revision 11
        assert!(check(Some(&r), &based(11)).is_ok());
        assert_eq!(
            check(Some(&r), &based(10)).unwrap_err().code,
            ErrorCode::StaleWrite
        );
        // Conservative: a later change while revoked moves the fence.
        let flagged = flag_stale::apply(Some(&r), KEY, "a", "tag:x", "h", &ctx(15))
            .unwrap()
            .slot;
        assert_eq!(
            check(Some(&flagged), &based(11)).unwrap_err().code,
            ErrorCode::StaleWrite
        );
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
