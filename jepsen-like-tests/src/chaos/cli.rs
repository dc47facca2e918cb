//! Entry points for `cairn-jepsen run` / `cairn-jepsen selftest` and for the tests.
//!
//! - [`run`]: the chaos run from [`RunOptions`]; `Ok(true)` when every checker passed
//!   and the teardown left nothing behind.
//! - [`Args`] / [`run_blocking`]: the same from the command line (`cairn-jepsen run ...`).
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
    /// Cluster size.
    #[arg(long, default_value_t = 3)]
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
    /// snapshot-rejoin. `none` for no faults.
    #[arg(long, value_delimiter = ',')]
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
    /// After a heal, operations must succeed within this, ms.
    #[arg(long, default_value_t = 10_000)]
    pub liveness_bound_ms: u64,
    /// Register-workload processes (the other workloads have fixed sizes).
    #[arg(long, default_value_t = 5)]
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
    #[arg(long)]
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

impl Args {
    pub fn into_options(self) -> Result<RunOptions> {
        let defaults = RunOptions::default();
        let nemeses = match self.nemeses.as_slice() {
            [] => Kind::ALL.to_vec(),
            [none] if none == "none" => Vec::new(),
            names => names
                .iter()
                .map(|n| n.parse::<Kind>())
                .collect::<std::result::Result<_, _>>()
                .map_err(anyhow::Error::msg)?,
        };
        if self.fault_min_ms > self.fault_max_ms || self.heal_min_ms > self.heal_max_ms {
            bail!("interval minimum above maximum");
        }
        Ok(RunOptions {
            nodes: self.nodes,
            duration_ms: self.duration * 1_000,
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
            node_bin: self.node_bin.unwrap_or(defaults.node_bin),
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

/// `cairn-jepsen run ARGS`, for a synchronous `main`.
pub fn run_blocking(args: Args) -> Result<bool> {
    let opts = args.into_options()?;
    runtime()?.block_on(run(opts))
}

/// `cairn-jepsen selftest`: build the planted-bugs node and prove every bug is caught.
#[derive(Debug, Clone, clap::Args)]
pub struct SelftestArgs {
    /// Comma-separated bug names (default all).
    #[arg(long, value_delimiter = ',')]
    pub bugs: Vec<String>,
    /// Also run each scenario on the normal binary, which must pass.
    #[arg(long)]
    pub control: bool,
    /// Use an existing $CARGO_TARGET_DIR/debug/cairn-node-planted instead of building.
    #[arg(long)]
    pub no_build: bool,
    #[arg(long)]
    pub store: Option<PathBuf>,
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
