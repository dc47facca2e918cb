//! Checker 1 of the chaos suite: linearizability of recorded histories.
//!
//! - [`history`]: the generic operation model (process, invoke time, completion time or
//!   indeterminate, input, result) and a builder that pairs invoke/complete events.
//! - [`models`]: sequential specifications behind the [`models::Model`] trait: a register
//!   (read / write / cas) and a key-value map (get / put / append).
//! - [`linearizable`]: the search (Wing & Gong / Lowe, memoized, partitioned by key, with a
//!   step and time [`Budget`]) and its [`Verdict`].
//! - [`parse_etcd`], [`parse_kv`]: the two external formats of the peer histories.
//! - `event_list`, `memo` (private): the search's data structures: the dancing-links event
//!   list, and the linearized-set bitset with its compact encoding and the configuration
//!   cache.
//!
//! [`check_file`] ties them together; [`run_cli`] is the `cairn-jepsen check` command.

mod event_list;
pub mod history;
pub mod linearizable;
mod memo;
pub mod models;
pub mod parse_etcd;
pub mod parse_kv;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use linearizable::{Budget, Counterexample, Exhausted, Limit, Verdict};

/// A history file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Jepsen's etcd register logs ([`parse_etcd`]), checked against [`models::Register`].
    JepsenEtcd,
    /// Porcupine's key-value histories ([`parse_kv`]), checked against [`models::KvMap`].
    Kv,
}

impl FromStr for Format {
    type Err = CheckError;

    fn from_str(s: &str) -> Result<Self, CheckError> {
        match s {
            "jepsen-etcd" => Ok(Format::JepsenEtcd),
            "kv" => Ok(Format::Kv),
            _ => Err(CheckError::UnknownFormat(s.to_string())),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::JepsenEtcd => "jepsen-etcd",
            Format::Kv => "kv",
        })
    }
}

/// A line of a history file that could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

/// Why a history could not be checked at all (as opposed to failing the check).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("unknown history format {0:?} (expected jepsen-etcd or kv)")]
    UnknownFormat(String),
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Parse { path: PathBuf, source: ParseError },
}

/// Parses `text` as `format` and checks it.
pub fn check_text(format: Format, text: &str, budget: Budget) -> Result<Verdict, ParseError> {
    Ok(match format {
        Format::JepsenEtcd => {
            linearizable::check(&models::Register, &parse_etcd::parse(text)?, budget)
        }
        Format::Kv => linearizable::check(&models::KvMap, &parse_kv::parse(text)?, budget),
    })
}

/// Reads, parses and checks one history file.
pub fn check_file(format: Format, path: &Path, budget: Budget) -> Result<Verdict, CheckError> {
    let text = std::fs::read_to_string(path).map_err(|source| CheckError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    check_text(format, &text, budget).map_err(|source| CheckError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// `cairn-jepsen check --format FORMAT FILE`: prints `linearizable` or `not linearizable`
/// on stdout (details on stderr) and returns the exit code: 0 linearizable, 1 not (or
/// unknown: the budget ran out, which proves nothing and so must fail), 2 bad input.
pub fn run_cli(format: &str, path: &Path) -> i32 {
    let verdict = format
        .parse()
        .and_then(|format| check_file(format, path, Budget::default()));
    match verdict {
        Ok(Verdict::Linearizable) => {
            println!("linearizable");
            0
        }
        Ok(Verdict::NotLinearizable(c)) => {
            println!("not linearizable");
            eprintln!("partition {}: {}", c.partition, c.description);
            1
        }
        Ok(verdict @ Verdict::Unknown(_)) => {
            println!("unknown");
            eprintln!("{verdict}; treating it as a failure");
            1
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_round_trip() {
        for format in [Format::JepsenEtcd, Format::Kv] {
            assert_eq!(format.to_string().parse::<Format>().unwrap(), format);
        }
        assert!(matches!(
            "edn".parse::<Format>(),
            Err(CheckError::UnknownFormat(_))
        ));
    }

    #[test]
    fn cli_exit_codes() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let good = write(
            "good.log",
            "INFO  jepsen.util - 0\t:invoke\t:write\t1\nINFO  jepsen.util - 0\t:ok\t:write\t1\n",
        );
        let stale = write(
            "stale.log",
            "INFO  jepsen.util - 0\t:invoke\t:write\t1\nINFO  jepsen.util - 0\t:ok\t:write\t1\n\
             INFO  jepsen.util - 1\t:invoke\t:read\tnil\nINFO  jepsen.util - 1\t:ok\t:read\tnil\n",
        );
        let garbage = write("garbage.txt", "{:process 0, :type");
        assert_eq!(run_cli("jepsen-etcd", &good), 0);
        assert_eq!(run_cli("jepsen-etcd", &stale), 1);
        assert_eq!(run_cli("kv", &garbage), 2);
        assert_eq!(run_cli("edn", &good), 2);
        assert_eq!(run_cli("kv", &dir.path().join("missing")), 2);
    }
}
