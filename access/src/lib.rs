//! Identity and access (SPEC §8), pure: no RocksDB, no Raft, no HTTP.
//!
//! The node authenticates a request's bearer token against the replicated
//! [`AccessState`], authorizes each operation against the principal's grants, and
//! changes principals and grants only through logged [`AccessChange`]s, which every
//! replica applies identically.
//!
//! Layout:
//! - `token`: [`Token`] (the secret, shown once, redacted everywhere else) and
//!   [`TokenHash`] (its sha256, the only form a node keeps, compared in constant time).
//! - `grants`: the stored grant record ([`GrantRecord`], permissions as a bit set) and
//!   the rule "any grant whose prefix covers the key, with the permission".
//! - `state`: [`AccessState`], the replicated principals and `acl_revision`, with the
//!   token index rebuilt on load.
//! - `change`: [`AccessChange`], what an access entry logs, and its apply rule.
//! - `required`: which permissions on which keys a key-model operation needs, and the
//!   apply-time [`cairn_memory::execute::Permit`] over a state.
//! - `validate`: limits and syntax of names and grants, checked before anything is logged.
//! - `wire`: stored records as `cairn-api` types (records only go out).
//!
//! Determinism: applying a change depends only on the state, the change and the entry's
//! leader time. Randomness (new tokens) happens before proposal, on the proposing node,
//! and only the token's hash is logged.

pub mod change;
pub mod grants;
pub mod required;
pub mod state;
pub mod token;
pub mod validate;
pub mod wire;

pub use change::{AccessChange, AccessError};
pub use grants::{GrantRecord, Permissions};
pub use required::{required, StatePermit};
pub use state::{AccessState, PrincipalRecord};
pub use token::{Token, TokenHash};
