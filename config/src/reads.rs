//! `[reads]`: read tokens for bounded-staleness reads and `min_revision` waits (SPEC §3).

use serde::{Deserialize, Serialize};

use crate::error::{check_at_most, check_positive, ConfigError};

/// Longest a read may wait for `min_revision` to be applied.
pub const MIN_REVISION_WAIT_MS_LIMIT: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReadsConfig {
    /// How often a node asks the leader for a fresh quorum-confirmed read token.
    pub token_refresh_ms: u64,
    /// How long a read waits for its `min_revision` to be applied before 503 `stale_read`.
    pub min_revision_wait_ms: u64,
    /// `max_staleness_ms` of a `bounded` read that does not name one.
    pub default_max_staleness_ms: u64,
}

impl Default for ReadsConfig {
    fn default() -> Self {
        ReadsConfig {
            token_refresh_ms: 50,
            min_revision_wait_ms: 2000,
            default_max_staleness_ms: 1000,
        }
    }
}

impl ReadsConfig {
    /// Checks:
    /// - every field > 0;
    /// - `token_refresh_ms < default_max_staleness_ms`, else a healthy follower's token
    ///   would routinely age past the default bound between refreshes;
    /// - `min_revision_wait_ms <= 60_000`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive("reads.token_refresh_ms", self.token_refresh_ms)?;
        check_positive("reads.min_revision_wait_ms", self.min_revision_wait_ms)?;
        check_positive(
            "reads.default_max_staleness_ms",
            self.default_max_staleness_ms,
        )?;
        check_at_most(
            "reads.min_revision_wait_ms",
            self.min_revision_wait_ms,
            MIN_REVISION_WAIT_MS_LIMIT,
        )?;
        if self.token_refresh_ms >= self.default_max_staleness_ms {
            return Err(ConfigError::invalid(
                "reads.token_refresh_ms",
                format!(
                    "must be < reads.default_max_staleness_ms ({}) (got {})",
                    self.default_max_staleness_ms, self.token_refresh_ms
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        ReadsConfig::default().validate().unwrap();
    }
}
