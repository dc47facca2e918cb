//! `cairn-jepsen`: the outside-in harness of cairn. It judges the cluster only through the
//! public client library and raw HTTP, never through node internals.
//!
//! Subcommands:
//! - `bench`: cairn vs etcd on the same machine (see `bench/mod.rs`, driven by `scripts/bench`).
//! - `check --format jepsen-etcd|kv FILE`: checker 1 (linearizability) on an external history;
//!   prints `linearizable` or `not linearizable`, exit 0 / 1, 2 on bad input.
//! - `run`: a real-process chaos run (see `chaos/`); `selftest`: the planted-bug self-test.

mod bench;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "cairn-jepsen", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmark a local 3-node cairn cluster against a local 3-node etcd cluster.
    Bench(Box<bench::BenchArgs>),
    /// Check an external history for linearizability.
    Check {
        /// History format: `jepsen-etcd` or `kv`.
        #[arg(long)]
        format: String,
        /// The history file.
        file: std::path::PathBuf,
    },
    /// A chaos run: real nodes, seeded nemeses, recorded history, checkers.
    Run(cairn_jepsen::chaos::cli::Args),
    /// Plant each known bug in a node build and prove a checker catches it.
    Selftest(cairn_jepsen::chaos::cli::SelftestArgs),
}

/// A run whose checkers failed is an error (exit 1), like one that could not run.
fn verdict(result: anyhow::Result<bool>) -> anyhow::Result<()> {
    match result? {
        true => Ok(()),
        false => Err(anyhow::anyhow!("checkers failed (see the report above)")),
    }
}

/// A command with every option checked, ready to start.
#[derive(Debug)]
enum Job {
    Bench(Box<bench::BenchArgs>),
    Check {
        format: String,
        file: std::path::PathBuf,
    },
    Run(cairn_jepsen::chaos::cli::RunOptions),
    Selftest(cairn_jepsen::chaos::cli::SelftestOptions),
}

/// Checks what clap cannot check value by value (values that contradict each other), so
/// that a bad invocation is a usage error like clap's own: one line on stderr and exit 2,
/// before anything is printed or started. Exit 1 stays for a run that failed.
fn job(cli: Cli) -> Result<Job, clap::Error> {
    Ok(match cli.command {
        Command::Bench(args) => {
            bench::validate(&args).map_err(|e| usage_error("bench", e))?;
            Job::Bench(args)
        }
        Command::Check { format, file } => Job::Check { format, file },
        Command::Run(args) => Job::Run(args.into_options().map_err(|e| usage_error("run", e))?),
        Command::Selftest(args) => Job::Selftest(args.into()),
    })
}

/// `error: MESSAGE` with the subcommand's usage, in clap's format and with its exit code 2.
fn usage_error(subcommand: &str, e: anyhow::Error) -> clap::Error {
    let mut cli = Cli::command();
    cli.build();
    let sub = cli
        .find_subcommand_mut(subcommand)
        .expect("a subcommand of Cli");
    sub.error(clap::error::ErrorKind::ValueValidation, format!("{e:#}"))
}

fn main() -> ExitCode {
    let job = job(Cli::parse()).unwrap_or_else(|e| e.exit());
    let result = match job {
        Job::Bench(args) => bench::main(*args),
        Job::Run(opts) => verdict(cairn_jepsen::chaos::cli::run_blocking(opts)),
        Job::Selftest(opts) => verdict(cairn_jepsen::chaos::cli::planted_selftest(opts)),
        Job::Check { format, file } => {
            let code = cairn_jepsen::check::run_cli(&format, &file);
            return ExitCode::from(u8::try_from(code).unwrap_or(2));
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn-jepsen: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error of an invocation (`cairn-jepsen` is prepended), from clap or from [`job`].
    fn usage_error_of(args: &[&str]) -> clap::Error {
        let argv = std::iter::once("cairn-jepsen").chain(args.iter().copied());
        match Cli::try_parse_from(argv).and_then(job) {
            Ok(job) => panic!("{args:?} accepted: {job:?}"),
            Err(e) => e,
        }
    }

    /// Exit 2 and `error:` + `wanted` in the message, as the user sees it.
    fn assert_usage_error(args: &[&str], wanted: &str) {
        let e = usage_error_of(args);
        let shown = e.render().to_string();
        assert_eq!(e.exit_code(), 2, "{args:?}: {shown}");
        assert!(shown.starts_with("error: "), "{args:?}: {shown}");
        assert!(
            shown.contains(wanted),
            "{args:?}: {shown:?} lacks {wanted:?}"
        );
    }

    /// Every seconds flag refuses negative, NaN, infinite and absurd values at parse time
    /// (they used to panic in `Duration::from_secs_f64`), and 0 where it makes no sense.
    #[test]
    fn bench_seconds_flags_are_checked_by_clap() {
        let bench = |flag: &str, value: &str| {
            let arg = format!("--{flag}={value}");
            usage_error_of(&["bench", "--node-bin", "/bin/true", &arg])
        };
        for value in ["-1", "nan", "NaN", "inf", "-inf", "1e30", "x", ""] {
            for flag in ["point-secs", "warmup-secs"] {
                let e = bench(flag, value);
                assert_eq!(e.exit_code(), 2, "--{flag}={value}");
                assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
            }
        }
        assert!(bench("point-secs", "0")
            .to_string()
            .contains("expected a finite number of seconds above 0"));
        assert!(bench("warmup-secs", "-0.5")
            .to_string()
            .contains("expected a finite number of seconds, 0 or more"));
        let ok = |args: &[&str]| {
            let argv = ["cairn-jepsen", "bench", "--node-bin", "/bin/true"];
            let cli = Cli::try_parse_from(argv.iter().chain(args)).unwrap();
            job(cli).unwrap()
        };
        ok(&["--point-secs", "0.25", "--warmup-secs", "0"]);
        ok(&["--point-secs=12", "--warmup-secs=2.5"]);
    }

    #[test]
    fn bad_bench_values_are_usage_errors() {
        fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
            [&["bench", "--node-bin", "/bin/true"][..], extra].concat()
        }
        assert_usage_error(&with(&["--systems", "bogus"]), "possible values: cairn");
        assert_usage_error(&with(&["--systems", "cairn,bogus"]), "'bogus'");
        assert_usage_error(&with(&["--workloads", "bogus"]), "possible values: write");
        assert_usage_error(&with(&["--clients", "0"]), "1 or more, got \"0\"");
        assert_usage_error(&with(&["--clients", "1,0"]), "--clients");
        assert_usage_error(&with(&["--keys", "0"]), "--keys");
        let argv = with(&["--systems", "cairn-secure,etcd-secure", "--clients", "1,2"]);
        let argv = std::iter::once("cairn-jepsen").chain(argv.iter().copied());
        job(Cli::try_parse_from(argv).unwrap()).unwrap();
    }

    #[test]
    fn bad_run_values_are_usage_errors() {
        assert_usage_error(
            &["run", "--nemeses", "bogus"],
            "unknown nemesis \"bogus\" (known: ",
        );
        assert_usage_error(&["run", "--nodes", "0"], "--nodes");
        assert_usage_error(&["run", "--nodes", "8"], "--nodes");
        assert_usage_error(&["run", "--nemeses", "none,crash"], "none");
        assert_usage_error(
            &["run", "--fault-min-ms", "5000", "--fault-max-ms", "1000"],
            "--fault-min-ms",
        );
        assert_usage_error(
            &["run", "--heal-min-ms", "5000", "--heal-max-ms", "1000"],
            "--heal-min-ms",
        );
        let e = usage_error_of(&["run", "--nemeses", "none,crash"])
            .render()
            .to_string();
        assert!(e.contains("Usage: cairn-jepsen run"), "{e}");
        for ok in [
            &["run"][..],
            &["run", "--nemeses", "none"],
            &["run", "--nemeses", "crash,lossy", "--nodes", "5"],
        ] {
            let argv = std::iter::once("cairn-jepsen").chain(ok.iter().copied());
            let job = job(Cli::try_parse_from(argv).unwrap()).unwrap();
            assert!(matches!(job, Job::Run(_)), "{ok:?}");
        }
    }

    #[test]
    fn bad_selftest_values_are_usage_errors() {
        assert_usage_error(
            &["selftest", "--bugs", "bogus", "--no-build"],
            "unknown bug \"bogus\" (known: forget-no-tombstone-check, ",
        );
        let argv = [
            "cairn-jepsen",
            "selftest",
            "--bugs",
            "ack-before-fsync",
            "--no-build",
        ];
        job(Cli::try_parse_from(argv).unwrap()).unwrap();
    }
}
