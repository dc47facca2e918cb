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
