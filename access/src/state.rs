//! The replicated access state: whether auth is on, the principals, `acl_revision`.

use std::collections::{BTreeMap, HashMap};

use cairn_api::Permission;
use serde::{Deserialize, Serialize};

use crate::grants::{self, GrantRecord};
use crate::token::{Token, TokenHash};

/// One principal as stored. Its token exists only as `token_hash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalRecord {
    pub token_hash: TokenHash,
    pub grants: Vec<GrantRecord>,
    /// Leader time of the entry that made it.
    pub created_at_ms: u64,
    pub created_by: String,
}

impl PrincipalRecord {
    pub fn allows(&self, permission: Permission, key: &str) -> bool {
        grants::allows(&self.grants, permission, key)
    }

    pub fn is_admin(&self) -> bool {
        self.allows(Permission::Admin, "")
    }
}

/// What the state machine persists (one record; its field order is its layout).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessRecord {
    pub enabled: bool,
    /// +1 on every applied access change.
    pub acl_revision: u64,
    pub principals: BTreeMap<String, PrincipalRecord>,
}

/// [`AccessRecord`] with its token index, rebuilt whenever a record is loaded (start,
/// snapshot install) so that authenticating is one hash lookup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessState {
    record: AccessRecord,
    by_hash: HashMap<TokenHash, String>,
}

impl AccessState {
    pub fn new(record: AccessRecord) -> AccessState {
        let by_hash = record
            .principals
            .iter()
            .map(|(name, p)| (p.token_hash, name.clone()))
            .collect();
        AccessState { record, by_hash }
    }

    pub fn record(&self) -> &AccessRecord {
        &self.record
    }

    pub fn enabled(&self) -> bool {
        self.record.enabled
    }

    pub fn acl_revision(&self) -> u64 {
        self.record.acl_revision
    }

    pub fn principal(&self, name: &str) -> Option<&PrincipalRecord> {
        self.record.principals.get(name)
    }

    pub fn principals(&self) -> impl Iterator<Item = (&String, &PrincipalRecord)> {
        self.record.principals.iter()
    }

    /// The principal a token belongs to, if any. The index finds the candidate; the stored
    /// hash is then compared in constant time.
    pub fn authenticate(&self, token: &Token) -> Option<(&str, &PrincipalRecord)> {
        let hash = token.hash();
        let name = self.by_hash.get(&hash)?;
        let principal = self.record.principals.get(name)?;
        principal
            .token_hash
            .ct_eq(&hash)
            .then_some((name.as_str(), principal))
    }

    /// How many principals hold `admin` on the empty prefix.
    pub fn admin_count(&self) -> usize {
        self.record
            .principals
            .values()
            .filter(|p| p.is_admin())
            .count()
    }

    /// Mutable access for [`crate::change`]: the index is kept in step there.
    pub(crate) fn parts_mut(&mut self) -> (&mut AccessRecord, &mut HashMap<TokenHash, String>) {
        (&mut self.record, &mut self.by_hash)
    }
}
