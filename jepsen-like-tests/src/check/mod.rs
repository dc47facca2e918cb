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

use history::History;
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

impl Format {
    /// What a file of this format is, for messages: `jepsen-etcd log`, `kv history`.
    pub fn noun(self) -> &'static str {
        match self {
            Format::JepsenEtcd => "jepsen-etcd log",
            Format::Kv => "kv history",
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

/// Why a history's text could not be checked at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// Not one client operation: garbage, an empty file or the wrong format. Lines a
    /// parser skips on purpose (a jepsen-etcd log's other log lines) are no error, but a
    /// history made only of them proves nothing and must not pass as linearizable.
    #[error("no client operation in it (is it a {}?)", .0.noun())]
    NoOperations(Format),
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
    #[error("{}: {}", path.display(), TextError::NoOperations(*format))]
    NoOperations { path: PathBuf, format: Format },
}

/// Parses `text` as `format` and checks it. A text without a single client operation is
/// an error ([`TextError::NoOperations`]), not a vacuously linearizable history.
pub fn check_text(format: Format, text: &str, budget: Budget) -> Result<Verdict, TextError> {
    fn nonempty<I, O>(format: Format, h: History<I, O>) -> Result<History<I, O>, TextError> {
        match h.is_empty() {
            true => Err(TextError::NoOperations(format)),
            false => Ok(h),
        }
    }
    Ok(match format {
        Format::JepsenEtcd => {
            let history = nonempty(format, parse_etcd::parse(text)?)?;
            linearizable::check(&models::Register, &history, budget)
        }
        Format::Kv => {
            let history = nonempty(format, parse_kv::parse(text)?)?;
            linearizable::check(&models::KvMap, &history, budget)
        }
    })
}

/// Reads, parses and checks one history file.
pub fn check_file(format: Format, path: &Path, budget: Budget) -> Result<Verdict, CheckError> {
    let text = std::fs::read_to_string(path).map_err(|source| CheckError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    check_text(format, &text, budget).map_err(|e| {
        let path = path.to_path_buf();
        match e {
            TextError::Parse(source) => CheckError::Parse { path, source },
            TextError::NoOperations(format) => CheckError::NoOperations { path, format },
        }
    })
}

/// `cairn-jepsen check --format FORMAT FILE`: prints `linearizable` or `not linearizable`
/// on stdout (details on stderr) and returns the exit code: 0 linearizable, 1 not (or
/// unknown: the budget ran out, which proves nothing and so must fail), 2 bad input: an
/// unknown format, an unreadable file, a line that does not parse, or a file without a
/// single client operation (error on stderr).
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

    /// A history without one client operation is bad input in either format, not a
    /// vacuously linearizable one; a jepsen-etcd log's other lines are still skipped.
    #[test]
    fn a_history_without_operations_is_bad_input() {
        let kv_text = "{:process 0, :type :invoke, :f :get, :key \"x\", :value nil}\n\
                       {:process 0, :type :ok, :f :get, :key \"x\", :value \"\"}\n";
        let etcd_noise = "INFO  jepsen.core - Running test\nINFO  jepsen.core - Run complete\n";
        let no_ops = [
            (Format::JepsenEtcd, "hello\nworld\n"),
            (Format::JepsenEtcd, ""),
            (Format::JepsenEtcd, etcd_noise),
            (Format::JepsenEtcd, kv_text),
            (Format::Kv, ""),
            (Format::Kv, "\n  \n"),
        ];
        for (format, text) in no_ops {
            assert_eq!(
                check_text(format, text, Budget::default()),
                Err(TextError::NoOperations(format)),
                "{format}: {text:?}"
            );
        }
        // The same formats with operations still check.
        assert!(check_text(Format::Kv, kv_text, Budget::default())
            .unwrap()
            .is_linearizable());
        let etcd_op =
            "INFO  jepsen.util - 0\t:invoke\t:write\t1\nINFO  jepsen.util - 0\t:ok\t:write\t1\n";
        let with_noise = format!("{etcd_noise}{etcd_op}{etcd_noise}");
        assert!(
            check_text(Format::JepsenEtcd, &with_noise, Budget::default())
                .unwrap()
                .is_linearizable()
        );

        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.log");
        std::fs::write(&empty, "").unwrap();
        let kv_file = dir.path().join("kv.txt");
        std::fs::write(&kv_file, kv_text).unwrap();
        let err = check_file(Format::JepsenEtcd, &kv_file, Budget::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: no client operation in it (is it a jepsen-etcd log?)",
                kv_file.display()
            )
        );
        assert_eq!(run_cli("jepsen-etcd", &empty), 2);
        assert_eq!(run_cli("kv", &empty), 2);
        assert_eq!(run_cli("jepsen-etcd", &kv_file), 2);
        assert_eq!(run_cli("kv", &kv_file), 0);
    }
}
