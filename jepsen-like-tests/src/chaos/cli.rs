//! Entry points for `cairn-jepsen run` / `cairn-jepsen selftest` and for the tests.
//!
//! - [`run`]: the chaos run from [`RunOptions`]; `Ok(true)` when every checker passed
//!   and the teardown left nothing behind.
//! - [`Args`] / [`run_blocking`]: the same from the command line (`cairn-jepsen run ...`);
//!   [`Args::into_options`] checks the options before anything starts.
//! - [`SelftestArgs`] / [`planted_selftest`]: the planted-bug self-test.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};

use super::nemesis::schedule::Timing;
use super::nemesis::Kind;
pub use super::options::RunOptions;
pub use super::planted::SelftestOptions;
use super::workload::Mix;

/// Runs one chaos run; `Ok(true)` when every checker passed.
pub async fn run(opts: RunOptions) -> Result<bool> {
    Ok(super::runner::run(opts).await?.passed())
}

/// `cairn-jepsen run`: a real-process chaos run against a local cluster (needs root
/// and iptables). Prints the verdicts; the last line is `N passed, M failed`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Cluster size, 1 to 7.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub nodes: u64,
    /// Length of the fault phase in seconds (the first pass over every nemesis may run
    /// past it).
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// Seed of the nemesis schedule and the workloads (random if omitted; printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Comma-separated nemeses (default all): partition-halves, isolate-leader, bridge,
    /// ring, lossy, crash, pause, membership, membership-paused, snapshot-kill,
    /// snapshot-rejoin. `none` (alone) for no faults.
    #[arg(long, value_delimiter = ',', value_parser = nemesis_name)]
    pub nemeses: Vec<String>,
    /// Fault interval bounds, ms.
    #[arg(long, default_value_t = 2_000)]
    pub fault_min_ms: u64,
    #[arg(long, default_value_t = 5_000)]
    pub fault_max_ms: u64,
    /// Heal interval bounds, ms.
    #[arg(long, default_value_t = 2_000)]
    pub heal_min_ms: u64,
    #[arg(long, default_value_t = 4_000)]
    pub heal_max_ms: u64,
    /// After a heal, operations must succeed within this, ms (1 or more).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub liveness_bound_ms: u64,
    /// Register-workload processes, 1 or more (the other workloads have fixed sizes).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub clients: u64,
    /// Pause between operations of one process, ms.
    #[arg(long, default_value_t = 20)]
    pub pace_ms: u64,
    /// Report directory root (default: store/ at the repository root).
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// cairn-node binary (default $CARGO_TARGET_DIR/debug/cairn-node).
    #[arg(long, env = "CAIRN_NODE_BIN")]
    pub node_bin: Option<PathBuf>,
    /// Run a planted bug (needs a planted-bugs build as --node-bin); the run should fail.
    /// One of the bugs `selftest --bugs` names.
    #[arg(long, value_parser = bug_name)]
    pub planted_bug: Option<String>,
    /// Keep the nodes' data directories.
    #[arg(long)]
    pub keep_data: bool,
    /// Auth and TLS on (SPEC §8): certificates from `cairn-node certs`, HTTPS client
    /// ports, mutual TLS between peers, init with `auth: {admin: "chaos"}`, every client
    /// with the admin token and the CA. The checkers are the same.
    #[arg(long)]
    pub secure: bool,
}

/// `--nemeses` value: a nemesis name or `none`.
fn nemesis_name(s: &str) -> std::result::Result<String, String> {
    match s {
        "none" => Ok(s.to_string()),
        _ => s.parse::<Kind>().map(|kind| kind.name().to_string()),
    }
}

impl Args {
    /// The run's options, or why they make no sense (values that contradict each other;
    /// clap has checked each value alone). Prints and starts nothing, so the command line
    /// can treat an error here as bad usage (exit 2), unlike a failed run (exit 1).
    pub fn into_options(self) -> Result<RunOptions> {
        let nemeses = match self.nemeses.as_slice() {
            [] => Kind::ALL.to_vec(),
            [none] if none == "none" => Vec::new(),
            names if names.iter().any(|n| n == "none") => {
                bail!("--nemeses none means no faults; it cannot be combined with other nemeses")
            }
            names => names
                .iter()
                .map(|n| n.parse::<Kind>())
                .collect::<std::result::Result<_, _>>()
                .map_err(anyhow::Error::msg)?,
        };
        if !(1..=7).contains(&self.nodes) {
            bail!("--nodes must be between 1 and 7, not {}", self.nodes);
        }
        if self.fault_min_ms > self.fault_max_ms {
            bail!(
                "--fault-min-ms {} is above --fault-max-ms {}",
                self.fault_min_ms,
                self.fault_max_ms
            );
        }
        if self.heal_min_ms > self.heal_max_ms {
            bail!(
                "--heal-min-ms {} is above --heal-max-ms {}",
                self.heal_min_ms,
                self.heal_max_ms
            );
        }
        let Some(duration_ms) = self.duration.checked_mul(1_000) else {
            bail!("--duration {} is too long", self.duration);
        };
        let defaults = RunOptions::default();
        let node_bin = self.node_bin.unwrap_or(defaults.node_bin);
        if self.planted_bug.is_some() {
            super::planted::build::require_planted(&node_bin)?;
        }
        Ok(RunOptions {
            nodes: self.nodes,
            duration_ms,
            seed: self.seed.unwrap_or(defaults.seed),
            nemeses,
            timing: Timing {
                fault_ms: (self.fault_min_ms, self.fault_max_ms),
                heal_ms: (self.heal_min_ms, self.heal_max_ms),
                liveness_bound: Duration::from_millis(self.liveness_bound_ms),
            },
            mix: Mix {
                register: self.clients,
                ..Mix::default()
            },
            pace_ms: self.pace_ms,
            store: self.store.unwrap_or(defaults.store),
            node_bin,
            planted_bug: self.planted_bug,
            keep_data: self.keep_data,
            search_budget_ms: defaults.search_budget_ms,
            converge_timeout_ms: defaults.converge_timeout_ms,
            secure: self.secure,
        })
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// `cairn-jepsen run`, for a synchronous `main`, from [`Args::into_options`].
pub fn run_blocking(opts: RunOptions) -> Result<bool> {
    runtime()?.block_on(run(opts))
}

/// `cairn-jepsen selftest`: build the planted-bugs node and prove every bug is caught.
#[derive(Debug, Clone, clap::Args)]
pub struct SelftestArgs {
    /// Comma-separated planted bugs to test (default all): forget-no-tombstone-check,
    /// bounded-skips-token, ack-before-fsync, dedup-applies-twice, stale-leader-read.
    #[arg(long, value_delimiter = ',', value_parser = bug_name)]
    pub bugs: Vec<String>,
    /// Also run each scenario on the normal binary, which must pass.
    #[arg(long)]
    pub control: bool,
    /// Use an existing $CARGO_TARGET_DIR/debug/cairn-node-planted instead of building.
    #[arg(long)]
    pub no_build: bool,
    /// Report directory root (default: store/ at the repository root); each scenario run
    /// writes `<UTC time>-planted-<bug>/` in it (and `<UTC time>-control-<bug>/`).
    #[arg(long)]
    pub store: Option<PathBuf>,
}

/// `--bugs` value: the name of a planted bug.
fn bug_name(s: &str) -> std::result::Result<String, String> {
    super::planted::scenarios::find(s).map(|scenario| scenario.bug.to_string())
}

impl From<SelftestArgs> for SelftestOptions {
    fn from(a: SelftestArgs) -> Self {
        let d = SelftestOptions::default();
        SelftestOptions {
            bugs: a.bugs,
            control: a.control,
            build: !a.no_build,
            store: a.store.unwrap_or(d.store),
            nodes: d.nodes,
        }
    }
}

/// The planted-bug self-test (builds its own runtime); `Ok(true)` when every bug was
/// caught by a checker aimed at it.
pub fn planted_selftest(opts: SelftestOptions) -> Result<bool> {
    runtime()?.block_on(super::planted::selftest(opts))
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;
    use crate::chaos::planted::scenarios;

    #[derive(Debug, Parser)]
    struct Run {
        #[command(flatten)]
        args: Args,
    }

    #[derive(Debug, Parser)]
    struct Selftest {
        #[command(flatten)]
        args: SelftestArgs,
    }

    fn run_args(argv: &[&str]) -> std::result::Result<Args, clap::Error> {
        Run::try_parse_from(std::iter::once("run").chain(argv.iter().copied())).map(|r| r.args)
    }

    #[test]
    fn run_values_are_checked_before_anything_starts() {
        let clap_error = |argv: &[&str]| run_args(argv).unwrap_err();
        let e = clap_error(&["--nemeses", "crash,bogus"]);
        assert_eq!(e.exit_code(), 2);
        assert!(e
            .to_string()
            .contains("unknown nemesis \"bogus\" (known: partition-halves, "));
        assert_eq!(clap_error(&["--nodes", "0"]).exit_code(), 2);
        assert_eq!(clap_error(&["--nodes", "8"]).exit_code(), 2);
        assert_eq!(clap_error(&["--clients", "0"]).exit_code(), 2);
        assert_eq!(clap_error(&["--liveness-bound-ms", "0"]).exit_code(), 2);
        let bug = clap_error(&["--planted-bug", "bogus"]);
        assert_eq!(bug.exit_code(), 2);
        assert!(bug.to_string().contains("unknown bug \"bogus\""), "{bug}");
        assert_eq!(
            run_args(&["--planted-bug", "stale-leader-read"])
                .unwrap()
                .planted_bug
                .as_deref(),
            Some("stale-leader-read")
        );
        // A bug asked of a node without planted bugs would be a plain run.
        let normal = std::env::temp_dir().join(format!("cairn-normal-{}", std::process::id()));
        std::fs::write(&normal, b"a node built without planted bugs").unwrap();
        let normal_arg = normal.to_str().unwrap();
        let refused = run_args(&[
            "--planted-bug",
            "stale-leader-read",
            "--node-bin",
            normal_arg,
        ])
        .unwrap()
        .into_options()
        .unwrap_err()
        .to_string();
        std::fs::remove_file(&normal).unwrap();
        assert!(
            refused.contains("has no planted bugs compiled in"),
            "{refused}"
        );

        let options_error = |argv: &[&str]| {
            run_args(argv)
                .unwrap()
                .into_options()
                .unwrap_err()
                .to_string()
        };
        assert!(options_error(&["--nemeses", "none,crash"]).contains("cannot be combined"));
        assert!(options_error(&["--nemeses", "crash,none"]).contains("cannot be combined"));
        assert_eq!(
            options_error(&["--fault-min-ms", "5000", "--fault-max-ms", "1000"]),
            "--fault-min-ms 5000 is above --fault-max-ms 1000"
        );
        assert_eq!(
            options_error(&["--heal-min-ms", "5", "--heal-max-ms", "4"]),
            "--heal-min-ms 5 is above --heal-max-ms 4"
        );
        assert!(options_error(&["--duration", &u64::MAX.to_string()]).contains("too long"));
        // Built in code, past clap's range check.
        let mut args = run_args(&[]).unwrap();
        args.nodes = 0;
        assert!(args.into_options().is_err());

        // The --nemeses help lists the names by hand; this keeps it in sync.
        let help = Run::command().render_long_help().to_string();
        for kind in Kind::ALL {
            assert!(help.contains(kind.name()), "--help lacks {}", kind.name());
        }

        let opts = |argv: &[&str]| run_args(argv).unwrap().into_options().unwrap();
        assert_eq!(opts(&[]).nemeses, Kind::ALL.to_vec());
        assert!(opts(&["--nemeses", "none"]).nemeses.is_empty());
        assert_eq!(
            opts(&["--nemeses", "crash,lossy", "--nodes", "7"]).nemeses,
            vec![Kind::Crash, Kind::Lossy]
        );
    }

    /// `--bugs` refuses an unknown bug at parse time naming the known ones, and its help
    /// names every planted bug (the list is written out by hand; this keeps it in sync).
    #[test]
    fn selftest_bugs_are_named() {
        let parse = |argv: &[&str]| {
            Selftest::try_parse_from(std::iter::once("selftest").chain(argv.iter().copied()))
        };
        let e = parse(&["--bugs", "bogus", "--no-build"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let known: Vec<&str> = scenarios::ALL.iter().map(|s| s.bug).collect();
        let wanted = format!("unknown bug \"bogus\" (known: {})", known.join(", "));
        assert!(e.to_string().contains(&wanted), "{e}");
        let all = parse(&["--bugs", &known.join(",")]).unwrap();
        assert_eq!(all.args.bugs, known);

        let mut cmd = Selftest::command();
        let help = cmd.render_long_help().to_string();
        for bug in &known {
            assert!(help.contains(bug), "--help lacks {bug}:\n{help}");
        }
        let store = cmd.get_arguments().find(|a| a.get_id() == "store").unwrap();
        assert!(store.get_help().is_some(), "--store has no help");

        // Library callers (tests/chaos_planted.rs) get the same message before any build.
        let opts = SelftestOptions {
            bugs: vec!["ack-before-fsync".into(), "bogus".into()],
            build: false,
            ..SelftestOptions::default()
        };
        let e = planted_selftest(opts).unwrap_err().to_string();
        assert_eq!(e, wanted);
    }
}
