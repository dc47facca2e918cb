//! What the real-process tests need from the machine, and what they do without it.
//!
//! `tests/chaos_smoke.rs` and `tests/chaos_planted.rs` need root and iptables;
//! `tests/bench_quick.rs` needs an etcd binary. A test calls [`require`] first:
//!
//! - everything present: it runs;
//! - something missing under CI (the `CI` environment variable set to anything but
//!   empty, `0` or `false`, as CI services and `.ci/run`'s environment set `CI=true`): the
//!   test **fails**, naming what is missing and how to install it, so a CI machine that
//!   lost a prerequisite cannot turn the test into a silent pass;
//! - something missing outside CI: the test prints `SKIPPED: <test> because <why>` on
//!   stderr (written past the test harness's output capture, framed so it stands out in
//!   cargo's output) and returns without running.

use std::io::Write as _;
use std::process::Command;

/// A prerequisite of a real-process test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prereq {
    /// Root, and `iptables` that runs (the chaos network nemeses).
    RootAndIptables,
    /// An etcd binary that runs: `$ETCD_BIN` if set (as `cairn-jepsen bench` reads it),
    /// else `etcd` in PATH (the benchmark's comparison system).
    Etcd,
}

impl Prereq {
    /// `Err(why)` when the prerequisite is missing here.
    pub fn check(self) -> Result<(), String> {
        match self {
            Prereq::RootAndIptables => crate::chaos::net::available(),
            Prereq::Etcd => etcd_available(),
        }
    }

    /// How to get it (Debian names, as `scripts/test` installs them).
    pub fn install_hint(self) -> &'static str {
        match self {
            Prereq::RootAndIptables => {
                "run the tests as root with iptables installed \
                 (Debian: apt-get install iptables; scripts/test installs it when it can)"
            }
            Prereq::Etcd => {
                "install etcd (Debian: apt-get install etcd-server; scripts/test installs it) \
                 or point ETCD_BIN at an etcd binary"
            }
        }
    }
}

fn etcd_available() -> Result<(), String> {
    let bin = std::env::var_os("ETCD_BIN")
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "etcd".into());
    let shown = bin.to_string_lossy().into_owned();
    match Command::new(&bin).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let said = match stderr.trim() {
                "" => String::new(),
                text => format!(": {text}"),
            };
            Err(format!("`{shown} --version` failed ({}){said}", out.status))
        }
        Err(e) => Err(format!("no etcd binary (`{shown}`: {e})")),
    }
}

/// Whether this is a CI run: `CI` set to anything but empty, `0` or `false`.
pub fn on_ci() -> bool {
    ci_value_means_ci(std::env::var("CI").ok().as_deref())
}

fn ci_value_means_ci(value: Option<&str>) -> bool {
    match value.map(str::trim) {
        None | Some("") | Some("0") => false,
        Some(v) => !v.eq_ignore_ascii_case("false"),
    }
}

/// What a test does about its prerequisites.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Run,
    /// Outside CI, with the message to print.
    Skip(String),
    /// Under CI, with the message to fail with.
    Fail(String),
}

/// The decision for `test`, given each missing prerequisite with the reason it is missing.
pub fn decide(test: &str, missing: &[(Prereq, String)], ci: bool) -> Decision {
    if missing.is_empty() {
        return Decision::Run;
    }
    let why = missing
        .iter()
        .map(|(_, why)| why.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    let how = missing
        .iter()
        .map(|(p, _)| p.install_hint())
        .collect::<Vec<_>>()
        .join("; ");
    if ci {
        Decision::Fail(format!(
            "{test} cannot run under CI (CI is set) because {why}. \
             To fix the CI machine: {how}. (Outside CI the test would skip.)"
        ))
    } else {
        Decision::Skip(format!(
            "SKIPPED: {test} because {why}. To run it: {how}. \
             (Under CI, i.e. with CI=true, this is a failure.)"
        ))
    }
}

/// Checks `prereqs` for `test`: returns `true` when the test can run; panics (fails the
/// test) under CI when something is missing; otherwise prints a loud `SKIPPED` line and
/// returns `false`, and the test should return at once.
#[track_caller]
pub fn require(test: &str, prereqs: &[Prereq]) -> bool {
    let missing: Vec<(Prereq, String)> = prereqs
        .iter()
        .filter_map(|&p| p.check().err().map(|why| (p, why)))
        .collect();
    match decide(test, &missing, on_ci()) {
        Decision::Run => true,
        Decision::Skip(msg) => {
            // Straight to the process's stderr: the test harness captures `eprintln!` of
            // a passing test, which would hide the skip.
            let rule = "*".repeat(78);
            let _ = writeln!(std::io::stderr(), "\n{rule}\n*** {msg}\n{rule}\n");
            false
        }
        Decision::Fail(msg) => panic!("{msg}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_is_any_value_but_empty_zero_or_false() {
        assert!(!ci_value_means_ci(None));
        for off in ["", " ", "0", "false", "FALSE", "False"] {
            assert!(!ci_value_means_ci(Some(off)), "{off:?}");
        }
        for on in ["true", "1", "yes", "TRUE"] {
            assert!(ci_value_means_ci(Some(on)), "{on:?}");
        }
    }

    #[test]
    fn nothing_missing_runs_anywhere() {
        assert_eq!(decide("t", &[], true), Decision::Run);
        assert_eq!(decide("t", &[], false), Decision::Run);
    }

    #[test]
    fn missing_fails_under_ci_and_skips_loudly_outside() {
        let missing = [(
            Prereq::Etcd,
            "no etcd binary (`etcd`: not found)".to_string(),
        )];
        let Decision::Fail(msg) = decide("bench_quick", &missing, true) else {
            panic!("under CI a missing prerequisite must fail");
        };
        assert!(
            msg.contains("bench_quick") && msg.contains("no etcd binary"),
            "{msg}"
        );
        assert!(msg.contains("apt-get install etcd-server"), "{msg}");
        let Decision::Skip(msg) = decide("bench_quick", &missing, false) else {
            panic!("outside CI a missing prerequisite must skip");
        };
        assert!(
            msg.starts_with("SKIPPED: bench_quick because no etcd"),
            "{msg}"
        );
    }

    #[test]
    fn every_missing_part_is_named_with_its_fix() {
        let missing = [
            (Prereq::RootAndIptables, "not running as root".to_string()),
            (Prereq::Etcd, "no etcd binary".to_string()),
        ];
        let Decision::Fail(msg) = decide("t", &missing, true) else {
            panic!("must fail");
        };
        for part in [
            "not running as root",
            "no etcd binary",
            "iptables",
            "etcd-server",
        ] {
            assert!(msg.contains(part), "{part} missing from {msg}");
        }
    }
}
