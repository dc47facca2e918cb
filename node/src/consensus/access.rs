//! The applied access state, shared between the state machine (which replaces it after
//! each applied access change, at start and after a snapshot install) and the API layer
//! (which authenticates and authorizes every request against it).

use std::sync::{Arc, RwLock};

use cairn_access::AccessState;

/// The latest applied [`AccessState`]. Readers take an `Arc` and never block the apply
/// path for longer than the pointer swap.
#[derive(Clone, Default)]
pub struct AccessCell(Arc<RwLock<Arc<AccessState>>>);

impl AccessCell {
    pub fn load(&self) -> Arc<AccessState> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn store(&self, state: Arc<AccessState>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = state;
    }
}

/// Proposes `change` in an entry of its own and waits until it is applied on this node
/// (the leader). The inner result is the state machine's verdict: the new `acl_revision`,
/// or why the change was refused (identically on every replica).
///
/// Access changes are rare administrative writes, so they bypass the write batcher; like
/// a batch, a `NotLeader` failure proves nothing was appended.
pub async fn propose(
    raft: &super::Raft,
    change: cairn_access::AccessChange,
    dedup_retention_ms: u64,
) -> Result<Result<u64, cairn_access::AccessError>, super::batcher::WriteError> {
    let request = super::Request {
        now_ms: super::batcher::unix_ms(),
        dedup_retention_ms,
        commands: Vec::new().into(),
        access: Some(change),
    };
    let written = raft
        .client_write(request)
        .await
        .map_err(super::batcher::classify)?;
    // Both sides of the log: the state machine answers every access change it applies.
    Ok(written
        .data
        .access
        .expect("the state machine gives every applied access change a verdict"))
}
