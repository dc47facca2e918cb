//! Identity and access (SPEC §8): principals, their grants, and the `/v1/auth/*` bodies.
//!
//! A token travels in exactly two places: the `Authorization: Bearer` header of a request,
//! and the one answer that makes or rotates it ([`CreatedPrincipal`], [`RotatedToken`],
//! [`AuthEnabled`]). Those answers' `Debug` output redacts it, so a logged answer never
//! leaks it.

use serde::{Deserialize, Serialize};

/// What a grant allows on the keys under its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// read, probe, history, list, recall, watch, tombstone lookup.
    Read,
    /// write, flag-stale.
    Write,
    /// forget, and `clear_tombstone` on a write.
    Forget,
    /// revoke, reinstate, supersede (of the superseded key), and `override_revocation`.
    Revoke,
    /// Principals and grants, membership, compact, auth settings (empty prefix only).
    Admin,
}

impl Permission {
    pub const ALL: [Permission; 5] = [
        Permission::Read,
        Permission::Write,
        Permission::Forget,
        Permission::Revoke,
        Permission::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Forget => "forget",
            Permission::Revoke => "revoke",
            Permission::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Permission {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Permission::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown permission {s:?} (read, write, forget, revoke, admin)"))
    }
}

/// `{prefix, permissions}`: the permissions hold on every key that starts with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub prefix: String,
    pub permissions: Vec<Permission>,
}

impl Grant {
    pub fn new(
        prefix: impl Into<String>,
        permissions: impl IntoIterator<Item = Permission>,
    ) -> Self {
        Grant {
            prefix: prefix.into(),
            permissions: permissions.into_iter().collect(),
        }
    }
}

/// `POST /v1/auth/principals`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CreatePrincipalRequest {
    pub name: String,
    /// Required (SPEC §8: `{name, grants}`); `[]` makes a principal that may do nothing
    /// until granted.
    pub grants: Vec<Grant>,
}

/// Answer of `POST /v1/auth/principals`: the token, shown this once.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct CreatedPrincipal {
    pub name: String,
    pub token: String,
}

/// Answer of `POST /v1/auth/principals/{name}/rotate`: the new token, shown this once;
/// the old one stopped working when this answer was made.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct RotatedToken {
    pub token: String,
}

/// `PUT /v1/auth/principals/{name}/grants`: replaces every grant of the principal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SetGrantsRequest {
    pub grants: Vec<Grant>,
}

/// One principal as `GET /v1/auth/principals` lists it (never its token or its hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct Principal {
    pub name: String,
    pub grants: Vec<Grant>,
    /// Unix milliseconds (leader time of the entry that made it).
    pub created_at: u64,
    pub created_by: String,
}

/// `GET /v1/auth/principals`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct PrincipalList {
    pub principals: Vec<Principal>,
    /// +1 on every change of principals, tokens or grants.
    pub acl_revision: u64,
}

/// `GET /v1/auth/whoami`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct WhoAmI {
    pub name: String,
    pub grants: Vec<Grant>,
    pub acl_revision: u64,
}

/// Answer of `PUT .../grants` and `DELETE /v1/auth/principals/{name}`: the ACL revision
/// the change made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct AclChanged {
    pub name: String,
    pub acl_revision: u64,
}

/// `POST /v1/auth/enable`, and the `auth` field of `POST /cluster/init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EnableAuthRequest {
    /// Name of the first principal, granted `admin` (and every other permission) on the
    /// empty prefix.
    pub admin: String,
}

/// Answer of `POST /v1/auth/enable` (and the `auth` field of init's answer): the admin's
/// token, shown this once.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct AuthEnabled {
    pub admin: String,
    pub token: String,
    pub acl_revision: u64,
}

const REDACTED: &str = "<redacted>";

impl std::fmt::Debug for CreatedPrincipal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedPrincipal")
            .field("name", &self.name)
            .field("token", &REDACTED)
            .finish()
    }
}

impl std::fmt::Debug for RotatedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotatedToken")
            .field("token", &REDACTED)
            .finish()
    }
}

impl std::fmt::Debug for AuthEnabled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthEnabled")
            .field("admin", &self.admin)
            .field("token", &REDACTED)
            .field("acl_revision", &self.acl_revision)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_use_the_spec_names() {
        for p in Permission::ALL {
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                serde_json::Value::String(p.as_str().into())
            );
            assert_eq!(p.as_str().parse::<Permission>().unwrap(), p);
        }
        assert!("delete".parse::<Permission>().is_err());
    }

    #[test]
    fn answers_carrying_a_token_never_show_it_in_debug_output() {
        let token = "cairn_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA";
        let created = format!(
            "{:?}",
            CreatedPrincipal {
                name: "p".into(),
                token: token.into()
            }
        );
        let rotated = format!(
            "{:?}",
            RotatedToken {
                token: token.into()
            }
        );
        let enabled = format!(
            "{:?}",
            AuthEnabled {
                admin: "root".into(),
                token: token.into(),
                acl_revision: 1
            }
        );
        for shown in [created, rotated, enabled] {
            assert!(!shown.contains(token), "{shown}");
            assert!(shown.contains(REDACTED), "{shown}");
        }
    }

    #[test]
    fn grants_reject_unknown_fields_and_permissions() {
        let ok: Grant =
            serde_json::from_str(r#"{"prefix":"facts/","permissions":["read","write"]}"#).unwrap();
        assert_eq!(
            ok,
            Grant::new("facts/", [Permission::Read, Permission::Write])
        );
        assert!(serde_json::from_str::<Grant>(r#"{"prefix":"","permissions":["root"]}"#).is_err());
        assert!(
            serde_json::from_str::<Grant>(r#"{"prefix":"","permissions":[],"expires":1}"#).is_err()
        );
    }
}
