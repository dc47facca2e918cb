//! Which permission, on which key, each key-model operation needs (SPEC §8).

use cairn_api::Permission;
use cairn_memory::execute::Permit;
use cairn_memory::{ErrorCode, Op, OpError};
use serde_json::json;

use crate::state::{AccessState, PrincipalRecord};

/// The permissions `op` needs, each on the op's key:
/// - write: `write`, plus `forget` with `clear_tombstone` and `revoke` with
///   `override_revocation`;
/// - forget: `forget`; revoke, reinstate, supersede (of the superseded key): `revoke`;
/// - flag-stale: `write`.
pub fn required(op: &Op) -> Vec<Permission> {
    match op {
        Op::Write {
            clear_tombstone,
            override_revocation,
            ..
        } => {
            let mut needed = vec![Permission::Write];
            if *clear_tombstone {
                needed.push(Permission::Forget);
            }
            if *override_revocation {
                needed.push(Permission::Revoke);
            }
            needed
        }
        Op::Forget { .. } => vec![Permission::Forget],
        Op::Revoke { .. } | Op::Reinstate { .. } | Op::Supersede { .. } => vec![Permission::Revoke],
        Op::FlagStale { .. } => vec![Permission::Write],
    }
}

/// The 403 `permission_denied` for `permission` on `key`.
pub fn denied(permission: Permission, key: &str) -> OpError {
    OpError::new(
        ErrorCode::PermissionDenied,
        format!("no grant allows {permission} on {key:?}"),
        json!({"permission": permission, "key": key}),
    )
}

/// Whether `principal` may do `op`: the first permission it lacks is the refusal.
pub fn check_op(principal: &PrincipalRecord, op: &Op) -> Result<(), OpError> {
    let key = op.key();
    match required(op)
        .into_iter()
        .find(|p| !principal.allows(*p, key))
    {
        Some(missing) => Err(denied(missing, key)),
        None => Ok(()),
    }
}

/// The apply-time [`Permit`]: with auth on, an operation's actor must still be a
/// principal whose grants cover it, in the state at the entry's own log position.
pub struct StatePermit<'a>(pub &'a AccessState);

impl Permit for StatePermit<'_> {
    fn check(&self, op: &Op) -> Result<(), OpError> {
        if !self.0.enabled() {
            return Ok(());
        }
        match self.0.principal(op.actor()) {
            Some(principal) => check_op(principal, op),
            None => Err(OpError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{:?} is not a principal (deleted since the request was made?)",
                    op.actor()
                ),
                json!({"permission": required(op)[0], "key": op.key()}),
            )),
        }
    }

    fn request_ids_per_principal(&self) -> bool {
        self.0.enabled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::{apply, AccessChange};
    use crate::grants::{GrantRecord, Permissions};
    use crate::token::Token;

    fn write(key: &str, clear_tombstone: bool, override_revocation: bool) -> Op {
        Op::Write {
            key: key.into(),
            value: "1".into(),
            value_hash: cairn_memory::hash::value_hash("1"),
            actor: "alice".into(),
            source: None,
            anchors: vec![],
            tags: vec![],
            clear_tombstone,
            override_revocation,
            reason: None,
        }
    }

    fn with_alice(permissions: &[Permission]) -> AccessState {
        let mut state = AccessState::default();
        let enable = AccessChange::Enable {
            admin: "root".into(),
            token_hash: Token::generate().hash(),
        };
        apply(&mut state, &enable, 1).unwrap();
        let alice = AccessChange::AddPrincipal {
            by: "root".into(),
            name: "alice".into(),
            grants: vec![GrantRecord {
                prefix: "facts/".into(),
                permissions: Permissions::of(permissions.iter().copied()),
            }],
            token_hash: Token::generate().hash(),
        };
        apply(&mut state, &alice, 2).unwrap();
        state
    }

    #[test]
    fn flags_on_a_write_need_their_own_permissions() {
        let state = with_alice(&[Permission::Write]);
        let permit = StatePermit(&state);
        assert!(permit.check(&write("facts/a", false, false)).is_ok());
        let err = permit.check(&write("facts/a", true, false)).unwrap_err();
        assert_eq!(err.code, ErrorCode::PermissionDenied);
        assert!(
            err.details_json.contains("\"forget\""),
            "{}",
            err.details_json
        );
        assert!(permit.check(&write("facts/a", false, true)).is_err());
        assert!(permit.check(&write("notes/a", false, false)).is_err());
    }

    #[test]
    fn an_actor_that_is_no_principal_is_refused_and_auth_off_allows_all() {
        let state = with_alice(&[Permission::Write]);
        let forged = Op::Forget {
            key: "facts/a".into(),
            actor: "mallory".into(),
            reason: "r".into(),
        };
        assert!(StatePermit(&state).check(&forged).is_err());
        assert!(StatePermit(&AccessState::default()).check(&forged).is_ok());
    }
}
