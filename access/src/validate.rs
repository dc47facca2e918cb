//! Limits and syntax of access requests, checked before anything is logged.

use cairn_api::{Grant, Permission};

use crate::change::AccessError;
use crate::grants::{GrantRecord, Permissions};

/// Most principals a cluster holds.
pub const PRINCIPALS_MAX: usize = 1024;
/// Most grants one principal holds.
pub const GRANTS_MAX: usize = 64;
/// Longest principal name, in bytes (the same bound as `actor`, which it becomes).
pub const NAME_BYTES_MAX: usize = 128;
/// Longest grant prefix, in bytes (the longest key).
pub const PREFIX_BYTES_MAX: usize = 512;

/// Bad input in the request field `field`.
fn invalid(field: impl Into<String>, message: String) -> AccessError {
    AccessError::Invalid {
        field: field.into(),
        message,
    }
}

/// A size past its bound in `field`.
fn out_of_bounds(
    field: impl Into<String>,
    message: String,
    size: usize,
    limit: usize,
) -> AccessError {
    AccessError::OutOfBounds {
        field: field.into(),
        message,
        size,
        limit,
    }
}

/// A principal name: 1-128 bytes of ASCII letters, digits and `_ - . @ :`, so it is safe
/// in a URL path segment, a log line and a header. `field` names where the request
/// carries it (`name`, `admin`).
pub fn name(field: &str, name: &str) -> Result<(), AccessError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "_-.@:".contains(c);
    let rule = format!("1-{NAME_BYTES_MAX} bytes of letters, digits and _ - . @ :");
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(out_of_bounds(
            field,
            format!("principal name of {} bytes: {rule}", name.len()),
            name.len(),
            NAME_BYTES_MAX,
        ));
    }
    if !name.chars().all(ok_char) {
        return Err(invalid(field, format!("principal name {name:?}: {rule}")));
    }
    Ok(())
}

/// The name of a principal being made (`POST /v1/auth/principals`, the first admin of
/// `enable` and `init`): a [`name`], and not `.` or `..`, which URL clients resolve as
/// path segments, so that `/v1/auth/principals/../rotate` would never reach the node
/// and the principal could not be rotated or deleted by name. (Names made before this
/// rule still pass [`name`] where a request names an existing principal.)
pub fn new_name(field: &str, name: &str) -> Result<(), AccessError> {
    self::name(field, name)?;
    match name {
        "." | ".." => Err(invalid(
            field,
            format!(
                "principal name {name:?}: a name of dots only would be read as a URL path \
                 segment"
            ),
        )),
        _ => Ok(()),
    }
}

/// Grants as requested, made stored records: each with at least one permission, a
/// prefix of at most 512 bytes without control characters, `admin` only on the empty
/// prefix; at most 64.
pub fn grants(grants: &[Grant]) -> Result<Vec<GrantRecord>, AccessError> {
    if grants.len() > GRANTS_MAX {
        return Err(out_of_bounds(
            "grants",
            format!("{} grants; at most {GRANTS_MAX}", grants.len()),
            grants.len(),
            GRANTS_MAX,
        ));
    }
    grants
        .iter()
        .enumerate()
        .map(|(i, g)| grant(i, g))
        .collect()
}

fn grant(i: usize, g: &Grant) -> Result<GrantRecord, AccessError> {
    let refuse = |part: &str, why: &str| {
        invalid(
            format!("grants[{i}].{part}"),
            format!("grant on {:?}: {why}", g.prefix),
        )
    };
    if g.permissions.is_empty() {
        return Err(refuse("permissions", "no permissions"));
    }
    if g.prefix.len() > PREFIX_BYTES_MAX {
        return Err(out_of_bounds(
            format!("grants[{i}].prefix"),
            format!(
                "grant prefix of {} bytes; at most {PREFIX_BYTES_MAX}",
                g.prefix.len()
            ),
            g.prefix.len(),
            PREFIX_BYTES_MAX,
        ));
    }
    if g.prefix.chars().any(char::is_control) {
        return Err(refuse("prefix", "control character in the prefix"));
    }
    if g.permissions.contains(&Permission::Admin) && !g.prefix.is_empty() {
        return Err(refuse(
            "permissions",
            "admin is granted on the empty prefix only",
        ));
    }
    Ok(GrantRecord {
        prefix: g.prefix.clone(),
        permissions: Permissions::of(g.permissions.iter().copied()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_url_and_log_safe() {
        for good in ["alice", "planner-1", "svc:summarizer", "a@b.c"] {
            assert!(name("name", good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a/b", "ä", "x\n", &"n".repeat(129)] {
            assert!(
                matches!(
                    name("admin", bad),
                    Err(AccessError::Invalid { field, .. } | AccessError::OutOfBounds { field, .. })
                        if field == "admin"
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_new_name_is_no_url_path_segment() {
        for dots in [".", ".."] {
            assert!(
                name("name", dots).is_ok(),
                "an existing {dots:?} is still named"
            );
            assert!(
                matches!(new_name("name", dots), Err(AccessError::Invalid { field, .. }) if field == "name"),
                "{dots:?}"
            );
        }
        for good in ["...", ".a", "a..b", "alice"] {
            assert!(new_name("name", good).is_ok(), "{good}");
        }
    }

    #[test]
    fn a_name_too_long_gives_its_size_and_the_limit() {
        let long = "n".repeat(NAME_BYTES_MAX + 1);
        assert_eq!(
            name("name", &long).unwrap_err().details(),
            serde_json::json!({"field": "name", "size": NAME_BYTES_MAX + 1, "limit": NAME_BYTES_MAX})
        );
        assert_eq!(
            AccessError::TooManyPrincipals.details(),
            serde_json::json!({"field": "name", "size": PRINCIPALS_MAX + 1, "limit": PRINCIPALS_MAX})
        );
    }

    #[test]
    fn grants_are_checked_one_by_one() {
        let ok = grants(&[Grant::new("facts/", [Permission::Read, Permission::Write])]).unwrap();
        assert!(ok[0].permissions.contains(Permission::Write));
        for (bad, part) in [
            (Grant::new("facts/", []), "permissions"),
            (Grant::new("facts/", [Permission::Admin]), "permissions"),
            (Grant::new("a\u{7}", [Permission::Read]), "prefix"),
            (Grant::new("p".repeat(513), [Permission::Read]), "prefix"),
        ] {
            let list = [Grant::new("ok/", [Permission::Read]), bad.clone()];
            let field = match grants(&list) {
                Err(
                    AccessError::Invalid { field, .. } | AccessError::OutOfBounds { field, .. },
                ) => field,
                other => panic!("{bad:?}: {other:?}"),
            };
            assert_eq!(field, format!("grants[1].{part}"), "{bad:?}");
        }
        let many = vec![Grant::new("x", [Permission::Read]); GRANTS_MAX + 1];
        assert_eq!(
            grants(&many).unwrap_err().details(),
            serde_json::json!({"field": "grants", "size": GRANTS_MAX + 1, "limit": GRANTS_MAX})
        );
        let long = [Grant::new("p".repeat(513), [Permission::Read])];
        assert_eq!(
            grants(&long).unwrap_err().details(),
            serde_json::json!({"field": "grants[0].prefix", "size": 513, "limit": PREFIX_BYTES_MAX})
        );
        assert!(grants(&[Grant::new("", [Permission::Admin])]).is_ok());
    }
}
