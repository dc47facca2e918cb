//! Stored access records as `cairn-api` wire types (one direction: records go out).

use cairn_api as api;

use crate::grants::GrantRecord;
use crate::state::{AccessState, PrincipalRecord};

pub fn grant(g: &GrantRecord) -> api::Grant {
    api::Grant {
        prefix: g.prefix.clone(),
        permissions: g.permissions.list(),
    }
}

pub fn grants(grants: &[GrantRecord]) -> Vec<api::Grant> {
    grants.iter().map(grant).collect()
}

/// A principal as listed: never its token hash.
pub fn principal(name: &str, p: &PrincipalRecord) -> api::Principal {
    api::Principal {
        name: name.to_string(),
        grants: grants(&p.grants),
        created_at: p.created_at_ms,
        created_by: p.created_by.clone(),
    }
}

pub fn principal_list(state: &AccessState) -> api::PrincipalList {
    api::PrincipalList {
        principals: state
            .principals()
            .map(|(name, p)| principal(name, p))
            .collect(),
        acl_revision: state.acl_revision(),
    }
}
