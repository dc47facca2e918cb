//! Grants as stored: a prefix and a permission bit set.

use cairn_api::Permission;
use serde::{Deserialize, Serialize};

/// A set of [`Permission`]s, one bit each. Stored as one byte; bit positions never move.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Permissions(u8);

impl Permissions {
    pub const NONE: Permissions = Permissions(0);
    /// Every permission: what the first admin holds.
    pub const ALL: Permissions = Permissions(0b1_1111);

    fn bit(p: Permission) -> u8 {
        match p {
            Permission::Read => 1,
            Permission::Write => 1 << 1,
            Permission::Forget => 1 << 2,
            Permission::Revoke => 1 << 3,
            Permission::Admin => 1 << 4,
        }
    }

    pub fn of(permissions: impl IntoIterator<Item = Permission>) -> Permissions {
        Permissions(permissions.into_iter().fold(0, |acc, p| acc | Self::bit(p)))
    }

    pub fn contains(self, p: Permission) -> bool {
        self.0 & Self::bit(p) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The permissions in the API's order.
    pub fn list(self) -> Vec<Permission> {
        Permission::ALL
            .into_iter()
            .filter(|p| self.contains(*p))
            .collect()
    }
}

/// `{prefix, permissions}` as the replicated state keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    pub prefix: String,
    pub permissions: Permissions,
}

impl GrantRecord {
    pub fn covers(&self, permission: Permission, key: &str) -> bool {
        self.permissions.contains(permission) && key.starts_with(&self.prefix)
    }
}

/// Whether any grant covers `key` with `permission` (SPEC §8: a longer prefix never
/// narrows a broader grant).
pub fn allows(grants: &[GrantRecord], permission: Permission, key: &str) -> bool {
    grants.iter().any(|g| g.covers(permission, key))
}

/// The key ranges (prefixes) under `prefix` in which `grants` allow `read`, so that a
/// scan of exactly these sees exactly the readable keys under `prefix`: `prefix` itself
/// when one grant covers all of it, else each read grant's prefix that lies under it.
/// Sorted, and none is a prefix of another, so scanning them one after another visits
/// keys in key order and never twice.
pub fn readable_ranges(grants: &[GrantRecord], prefix: &str) -> Vec<String> {
    let mut ranges: Vec<&str> = Vec::new();
    for grant in grants
        .iter()
        .filter(|g| g.permissions.contains(Permission::Read))
    {
        if prefix.starts_with(&grant.prefix) {
            return vec![prefix.to_string()];
        }
        if grant.prefix.starts_with(prefix) {
            ranges.push(&grant.prefix);
        }
    }
    ranges.sort_unstable();
    let mut outer: Vec<String> = Vec::new();
    for range in ranges {
        if !outer.last().is_some_and(|o| range.starts_with(o.as_str())) {
            outer.push(range.to_string());
        }
    }
    outer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(prefix: &str, permissions: &[Permission]) -> GrantRecord {
        GrantRecord {
            prefix: prefix.into(),
            permissions: Permissions::of(permissions.iter().copied()),
        }
    }

    #[test]
    fn bits_round_trip_and_never_move() {
        for p in Permission::ALL {
            assert_eq!(Permissions::of([p]).list(), vec![p]);
        }
        assert_eq!(Permissions::of(Permission::ALL), Permissions::ALL);
        // Stored layout: read = bit 0 … admin = bit 4.
        assert_eq!(
            Permissions::of([Permission::Read, Permission::Admin]).0,
            0b1_0001
        );
    }

    #[test]
    fn any_covering_grant_allows_and_a_longer_prefix_never_narrows() {
        let grants = [
            grant("facts/", &[Permission::Read, Permission::Write]),
            grant("facts/private/", &[Permission::Read]),
        ];
        assert!(allows(&grants, Permission::Write, "facts/private/x"));
        assert!(allows(&grants, Permission::Read, "facts/a"));
        assert!(!allows(&grants, Permission::Forget, "facts/a"));
        assert!(!allows(&grants, Permission::Read, "fact"));
        assert!(!allows(&grants, Permission::Read, "other/facts/a"));
        assert!(allows(
            &[grant("", &[Permission::Read])],
            Permission::Read,
            "anything"
        ));
    }

    #[test]
    fn readable_ranges_cover_exactly_the_readable_keys_in_key_order() {
        let grants = [
            grant("notes/b/", &[Permission::Read]),
            grant("notes/a/", &[Permission::Read]),
            grant("notes/a/x/", &[Permission::Read]),
            grant("notes/c/", &[Permission::Write]),
            grant("facts/", &[Permission::Read]),
        ];
        assert_eq!(readable_ranges(&grants, "notes/"), ["notes/a/", "notes/b/"]);
        assert_eq!(readable_ranges(&grants, "facts/x"), ["facts/x"]);
        assert!(readable_ranges(&grants, "other/").is_empty());
        assert_eq!(
            readable_ranges(&grants, ""),
            ["facts/", "notes/a/", "notes/b/"]
        );
    }
}
