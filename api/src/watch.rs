//! The change feed, `GET /v1/watch` (SPEC §5).

use serde::{Deserialize, Serialize};

use crate::{EventKind, State};

/// One Server-Sent Event of `GET /v1/watch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct WatchEvent {
    pub revision: u64,
    pub key: String,
    pub kind: EventKind,
    pub state: State,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
}
