//! The planted-bug self-test: proof that the checkers catch real bugs.
//!
//! The node has deliberate bugs compiled in only with `--features planted-bugs` and
//! switched on by `CAIRN_PLANTED_BUG=<name>`. For each bug the self-test starts a fresh
//! cluster of the planted binary with that bug on, runs a short scenario aimed at it
//! ([`scenarios`]), and runs every checker: the bug counts as caught only when one of the
//! checkers the scenario aims at fails. With `control`, the same scenario also runs on
//! the normal binary and must pass, so a scenario cannot "catch" a bug by being broken.
//!
//! - [`build`]: building the planted binary next to the normal one.
//! - [`scenarios`]: the scenario per bug.

pub mod build;
pub mod scenarios;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::harness::{Harness, RunReport};
use super::nemesis::schedule::Timing;
use super::options::RunOptions;

#[derive(Clone, Debug)]
pub struct SelftestOptions {
    /// Bug names; empty means all.
    pub bugs: Vec<String>,
    /// Also run every scenario on the normal binary (must pass).
    pub control: bool,
    /// Build the planted binary first (else use an existing `cairn-node-planted`).
    pub build: bool,
    pub store: PathBuf,
    pub nodes: u64,
}

impl Default for SelftestOptions {
    fn default() -> Self {
        SelftestOptions {
            bugs: Vec::new(),
            control: false,
            build: true,
            store: super::store::default_store(),
            nodes: 3,
        }
    }
}

fn run_options(base: &SelftestOptions, bin: PathBuf, bug: Option<&str>) -> RunOptions {
    RunOptions {
        nodes: base.nodes,
        duration_ms: 0,
        seed: 1,
        nemeses: Vec::new(),
        timing: Timing {
            fault_ms: (0, 0),
            heal_ms: (0, 0),
            liveness_bound: Duration::from_secs(15),
        },
        store: base.store.clone(),
        node_bin: bin,
        planted_bug: bug.map(str::to_string),
        search_budget_ms: 30_000,
        // A planted bug may leave the cluster unable to converge; do not wait long.
        converge_timeout_ms: 15_000,
        ..RunOptions::default()
    }
}

async fn run_one(scenario: &str, opts: RunOptions, tag: String) -> Result<RunReport> {
    let harness = Harness::start(opts, &tag).await?;
    let mut nemesis = harness.nemesis(StdRng::seed_from_u64(1));
    if let Err(e) = scenarios::run(scenario, &harness, &mut nemesis).await {
        nemesis.errors.push(format!("scenario {scenario}: {e:#}"));
    }
    harness.finish(&mut nemesis).await
}

/// Runs the self-test; `Ok(true)` when every bug was caught (and every control passed).
pub async fn selftest(opts: SelftestOptions) -> Result<bool> {
    for bug in &opts.bugs {
        scenarios::find(bug).map_err(anyhow::Error::msg)?;
    }
    let chosen: Vec<&scenarios::Scenario> = scenarios::ALL
        .iter()
        .filter(|s| opts.bugs.is_empty() || opts.bugs.iter().any(|b| b == s.bug))
        .collect();
    let planted = if opts.build {
        tokio::task::spawn_blocking(build::planted).await??
    } else {
        let planted = build::planted_bin();
        build::require_planted(&planted)?;
        planted
    };
    let normal = super::options::default_node_bin();
    let mut lines = Vec::new();
    let mut all_good = true;
    for s in chosen {
        let report = run_one(
            s.bug,
            run_options(&opts, planted.clone(), Some(s.bug)),
            format!("planted-{}", s.bug),
        )
        .await?;
        let failed = report.failed();
        let caught = failed.iter().any(|f| s.expect.contains(f));
        all_good &= caught;
        lines.push(format!(
            "{} {:28} failed checkers: {:?} (expected one of {:?})",
            if caught { "CAUGHT " } else { "MISSED " },
            s.bug,
            failed,
            s.expect
        ));
        if opts.control {
            let control = run_one(
                s.bug,
                run_options(&opts, normal.clone(), None),
                format!("control-{}", s.bug),
            )
            .await?;
            all_good &= control.passed();
            lines.push(format!(
                "{} {:28} same scenario on the normal binary: failed checkers {:?}",
                if control.passed() {
                    "CONTROL"
                } else {
                    "BROKEN "
                },
                s.bug,
                control.failed()
            ));
        }
    }
    println!("planted-bug self-test:");
    for line in &lines {
        println!("  {line}");
    }
    let caught = lines.iter().filter(|l| l.starts_with("CAUGHT")).count();
    println!(
        "{caught} of {} planted bugs caught",
        lines
            .iter()
            .filter(|l| l.starts_with("CAUGHT") || l.starts_with("MISSED"))
            .count()
    );
    Ok(all_good)
}
