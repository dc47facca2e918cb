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

use clap::{Parser, Subcommand};

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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::main(*args),
        Command::Run(args) => verdict(cairn_jepsen::chaos::cli::run_blocking(args)),
        Command::Selftest(args) => verdict(cairn_jepsen::chaos::cli::planted_selftest(args.into())),
        Command::Check { format, file } => {
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
