//! The one error type of this crate. Every message names the field (or the file) at fault,
//! so an operator can fix the config without reading code.

use std::path::PathBuf;

/// Why a node configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file the configuration names (`what`: the config file, the peer secret file)
    /// could not be read. The cause is part of the message, not a separate error source,
    /// so a printed error chain says it once.
    #[error("{what} {}: cannot read: {cause}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The TOML is malformed, has a wrongly typed value or an unknown field. `message` is the
    /// toml crate's message: line, column, a snippet, and the offending field's name.
    #[error("config file {origin}: {message}")]
    Parse { origin: String, message: String },
    /// Neither the file nor an override gave the node its id.
    #[error("id: missing; set `id = N` in the config file or pass --id N")]
    MissingId,
    /// A value is out of range or inconsistent with another one. `field` is its dotted path
    /// as written in the TOML file, e.g. `raft.election_timeout_max_ms`.
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl ConfigError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field,
            reason: reason.into(),
        }
    }

    /// The dotted field path an [`ConfigError::Invalid`] (or [`ConfigError::MissingId`]) is
    /// about; `None` for file-level errors.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ConfigError::Invalid { field, .. } => Some(field),
            ConfigError::MissingId => Some("id"),
            ConfigError::Read { .. } | ConfigError::Parse { .. } => None,
        }
    }
}

/// `value > 0`, else an error naming `field`.
pub(crate) fn check_positive(field: &'static str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::invalid(field, "must be > 0 (got 0)"));
    }
    Ok(())
}

/// `value <= max`, else an error naming `field`.
pub(crate) fn check_at_most(field: &'static str, value: u64, max: u64) -> Result<(), ConfigError> {
    if value > max {
        return Err(ConfigError::invalid(
            field,
            format!("must be <= {max} (got {value})"),
        ));
    }
    Ok(())
}

/// `low < high`, else an error naming `high_field` (the later one in the chain).
pub(crate) fn check_less(
    low_field: &'static str,
    low: u64,
    high_field: &'static str,
    high: u64,
) -> Result<(), ConfigError> {
    if low >= high {
        return Err(ConfigError::invalid(
            high_field,
            format!("must be > {low_field} ({low}) (got {high})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_start_with_the_field() {
        let e = check_at_most("raft.election_timeout_max_ms", 5000, 3000).unwrap_err();
        assert_eq!(
            e.to_string(),
            "raft.election_timeout_max_ms: must be <= 3000 (got 5000)"
        );
        assert_eq!(e.field(), Some("raft.election_timeout_max_ms"));
        let e = check_positive("batching.ops_max", 0).unwrap_err();
        assert_eq!(e.to_string(), "batching.ops_max: must be > 0 (got 0)");
        let e = check_less("a", 5, "b", 5).unwrap_err();
        assert_eq!(e.to_string(), "b: must be > a (5) (got 5)");
        assert!(check_less("a", 4, "b", 5).is_ok());
    }
}
