//! Validation of [`Limits`] (`[limits]`), kept beside `limits.rs` rather than in it so the
//! type's definition stays a plain list of bounds.

use crate::error::{check_at_most, check_positive, ConfigError};
use crate::Limits;

/// Keys are stored in RocksDB keys and echoed in every rendered note.
pub const KEY_BYTES_MAX_LIMIT: u64 = 4096;
/// A value travels whole in one Raft entry and one HTTP body.
pub const VALUE_BYTES_MAX_LIMIT: u64 = 64 * 1024 * 1024;
/// A client batch is applied as one Raft entry.
pub const BATCH_OPS_MAX_LIMIT: u64 = 100_000;
/// One page of a list or recall is built in memory.
pub const PAGE_ITEMS_MAX_LIMIT: u64 = 100_000;
/// Likewise, in bytes: 1 GiB.
pub const PAGE_VALUE_BYTES_MAX_LIMIT: u64 = 1 << 30;
/// A node's open file descriptors must cover its connections and RocksDB's files.
pub const CONNECTIONS_MAX_LIMIT: u64 = 1_000_000;
/// An hour: a longer wait for a request head, or for the rest of a body, is a typo.
pub const REQUEST_HEAD_TIMEOUT_MS_LIMIT: u64 = 3_600_000;

impl Limits {
    /// Checks:
    /// - every bound > 0 (a zero bound would reject all input of that kind);
    /// - `key_bytes_max <= 4096`, `value_bytes_max <= 64 MiB`, `batch_ops_max <= 100_000`,
    ///   `page_items_max <= 100_000`, `page_value_bytes_max <= 1 GiB`,
    ///   `connections_max <= 1_000_000`, `request_head_timeout_ms` and `request_body_timeout_ms <= 1 h`;
    /// - `watchers_max <= connections_max` (each stream holds a connection).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let all: [(&'static str, usize); 17] = [
            ("limits.key_bytes_max", self.key_bytes_max),
            ("limits.value_bytes_max", self.value_bytes_max),
            ("limits.actor_bytes_max", self.actor_bytes_max),
            ("limits.reason_bytes_max", self.reason_bytes_max),
            ("limits.anchors_max", self.anchors_max),
            ("limits.anchor_bytes_max", self.anchor_bytes_max),
            ("limits.tags_max", self.tags_max),
            ("limits.tag_bytes_max", self.tag_bytes_max),
            ("limits.source_bytes_max", self.source_bytes_max),
            ("limits.request_id_bytes_max", self.request_id_bytes_max),
            ("limits.batch_ops_max", self.batch_ops_max),
            ("limits.cues_max", self.cues_max),
            ("limits.page_value_bytes_max", self.page_value_bytes_max),
            ("limits.watchers_max", self.watchers_max),
            ("limits.connections_max", self.connections_max),
            (
                "limits.request_head_timeout_ms",
                self.request_head_timeout_ms as usize,
            ),
            (
                "limits.request_body_timeout_ms",
                self.request_body_timeout_ms as usize,
            ),
        ];
        for (field, value) in all {
            check_positive(field, value as u64)?;
        }
        check_positive("limits.page_items_max", u64::from(self.page_items_max))?;
        check_at_most(
            "limits.key_bytes_max",
            self.key_bytes_max as u64,
            KEY_BYTES_MAX_LIMIT,
        )?;
        check_at_most(
            "limits.value_bytes_max",
            self.value_bytes_max as u64,
            VALUE_BYTES_MAX_LIMIT,
        )?;
        check_at_most(
            "limits.batch_ops_max",
            self.batch_ops_max as u64,
            BATCH_OPS_MAX_LIMIT,
        )?;
        check_at_most(
            "limits.page_items_max",
            u64::from(self.page_items_max),
            PAGE_ITEMS_MAX_LIMIT,
        )?;
        check_at_most(
            "limits.page_value_bytes_max",
            self.page_value_bytes_max as u64,
            PAGE_VALUE_BYTES_MAX_LIMIT,
        )?;
        check_at_most(
            "limits.watchers_max",
            self.watchers_max as u64,
            self.connections_max as u64,
        )?;
        check_at_most(
            "limits.connections_max",
            self.connections_max as u64,
            CONNECTIONS_MAX_LIMIT,
        )?;
        check_at_most(
            "limits.request_head_timeout_ms",
            self.request_head_timeout_ms,
            REQUEST_HEAD_TIMEOUT_MS_LIMIT,
        )?;
        check_at_most(
            "limits.request_body_timeout_ms",
            self.request_body_timeout_ms,
            REQUEST_HEAD_TIMEOUT_MS_LIMIT,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Limits::default().validate().unwrap();
    }

    #[test]
    fn zero_bound_names_the_field() {
        let limits = Limits {
            cues_max: 0,
            ..Limits::default()
        };
        let err = limits.validate().unwrap_err();
        assert_eq!(err.to_string(), "limits.cues_max: must be > 0 (got 0)");
    }

    #[test]
    fn the_request_timers_are_bounded_on_both_sides() {
        for (limits, field) in [
            (
                Limits {
                    request_body_timeout_ms: 0,
                    ..Limits::default()
                },
                "limits.request_body_timeout_ms: must be > 0",
            ),
            (
                Limits {
                    request_body_timeout_ms: REQUEST_HEAD_TIMEOUT_MS_LIMIT + 1,
                    ..Limits::default()
                },
                "limits.request_body_timeout_ms",
            ),
            (
                Limits {
                    request_head_timeout_ms: REQUEST_HEAD_TIMEOUT_MS_LIMIT + 1,
                    ..Limits::default()
                },
                "limits.request_head_timeout_ms",
            ),
        ] {
            let err = limits.validate().unwrap_err().to_string();
            assert!(err.starts_with(field), "{err}");
        }
        let longest = Limits {
            request_head_timeout_ms: REQUEST_HEAD_TIMEOUT_MS_LIMIT,
            request_body_timeout_ms: REQUEST_HEAD_TIMEOUT_MS_LIMIT,
            ..Limits::default()
        };
        longest.validate().unwrap();
    }
}
