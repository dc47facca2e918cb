//! The lifecycle state of a key and the read consistency levels (SPEC §2, §3).

use serde::{Deserialize, Serialize};

/// Lifecycle state of a key (a "slot").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum State {
    Absent,
    Active,
    Revoked,
    Forgotten,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Absent => "absent",
            State::Active => "active",
            State::Revoked => "revoked",
            State::Forgotten => "forgotten",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Read consistency level (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    #[default]
    Linearizable,
    Bounded,
    Any,
}

impl Consistency {
    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::Linearizable => "linearizable",
            Consistency::Bounded => "bounded",
            Consistency::Any => "any",
        }
    }
}
