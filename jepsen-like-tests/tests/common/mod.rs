//! The short real-process chaos run shared by `chaos_smoke` and `chaos_secure`: seed
//! choice, node binary, environment overrides, the run, and its verdict.
//!
//! - `CAIRN_CHAOS_SEED`: unset for the test's fixed seed, `random` to draw one (printed so
//!   a failure can be replayed), or a number to replay.
//! - `CAIRN_CHAOS_NEMESES` (comma-separated names, or `none`), `CAIRN_CHAOS_DURATION_S`
//!   and `CAIRN_CHAOS_NODES` change the run (the time budget applies to the default size
//!   only); `CAIRN_NODE_BIN` runs another node binary instead of building the workspace's.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cairn_jepsen::chaos::cli::{self, RunOptions};
use cairn_jepsen::chaos::nemesis::schedule::Timing;
use cairn_jepsen::chaos::nemesis::Kind;
use cairn_jepsen::chaos::planted;
use cairn_jepsen::prereq::{self, Prereq};

/// The chaos run itself must stay within this at the default size (compilation not
/// included).
const RUN_BUDGET: Duration = Duration::from_secs(120);

/// One smoke test: its name, whether SPEC §8 is on, its fixed seed and default duration.
pub struct Smoke {
    pub test: &'static str,
    pub secure: bool,
    pub fixed_seed: u64,
    pub default_duration_s: u64,
}

impl Smoke {
    fn seed(&self) -> (u64, &'static str) {
        match std::env::var("CAIRN_CHAOS_SEED") {
            Ok(s) if s.trim().eq_ignore_ascii_case("random") => (rand::random(), "random"),
            Ok(s) if !s.trim().is_empty() => (
                s.trim()
                    .parse()
                    .expect("CAIRN_CHAOS_SEED: a number or `random`"),
                "from CAIRN_CHAOS_SEED",
            ),
            _ => (self.fixed_seed, "fixed; CAIRN_CHAOS_SEED=random draws one"),
        }
    }

    /// Runs it (or skips loudly outside CI without root and iptables) and asserts a pass
    /// within the budget.
    pub fn run(&self) {
        let test = self.test;
        if !prereq::require(test, &[Prereq::RootAndIptables]) {
            return;
        }
        let (seed, origin) = self.seed();
        // Straight to stderr, past the test harness's capture: the seed shows in every log.
        let _ = writeln!(
            std::io::stderr(),
            "{test}: seed {seed} ({origin}); replay with CAIRN_CHAOS_SEED={seed}"
        );
        let nemeses = match std::env::var("CAIRN_CHAOS_NEMESES") {
            Ok(list) if list == "none" => Vec::new(),
            Ok(list) => list
                .split(',')
                .map(|n| n.parse::<Kind>().expect("CAIRN_CHAOS_NEMESES"))
                .collect(),
            Err(_) => Kind::ALL.to_vec(),
        };
        let duration_s = env_u64("CAIRN_CHAOS_DURATION_S").unwrap_or(self.default_duration_s);
        let nodes = env_u64("CAIRN_CHAOS_NODES").unwrap_or(3);
        let opts = RunOptions {
            nodes,
            duration_ms: duration_s * 1_000,
            seed,
            nemeses,
            timing: Timing {
                fault_ms: (1_500, 2_500),
                heal_ms: (1_000, 1_500),
                liveness_bound: Duration::from_secs(10),
            },
            node_bin: node_bin(),
            search_budget_ms: 20_000,
            secure: self.secure,
            ..RunOptions::default()
        };
        let started = Instant::now();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let passed = runtime
            .block_on(cli::run(opts))
            .expect("the chaos run could not complete");
        let took = started.elapsed();
        assert!(
            passed,
            "{test} with seed {seed} found violations (see the verdicts above and the \
             report); replay with CAIRN_CHAOS_SEED={seed}"
        );
        if duration_s <= self.default_duration_s && nodes == 3 {
            assert!(took < RUN_BUDGET, "{test} took {took:?}");
        }
    }
}

/// The node binary to run: `CAIRN_NODE_BIN`, else the workspace's, built now (`cargo test
/// -p cairn-jepsen` alone would not build it, so it could be stale).
pub fn node_bin() -> PathBuf {
    match std::env::var_os("CAIRN_NODE_BIN") {
        Some(bin) if !bin.is_empty() => bin.into(),
        _ => planted::build::normal().expect("building cairn-node"),
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}
