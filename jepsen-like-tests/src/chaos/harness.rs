//! One run's life: lock, iptables chain, node processes, cluster init; then (after the
//! caller's workload and faults) the final heal, final state, teardown with
//! verification, checkers and report.
//!
//! Teardown happens on every path: [`Teardown`] kills the nodes and removes the chain
//! when dropped (normal return, error, panic), and a Ctrl-C task does the same and
//! exits 130.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::rngs::StdRng;
use tokio::task::JoinHandle;

use super::checkers::{self, Inputs, Verdict};
use super::clock::Clock;
use super::cluster::Cluster;
use super::final_state::{self, FinalState};
use super::history::Recorder;
use super::nemesis::{Nemesis, START_TIMEOUT};
use super::net::{self, Net};
use super::options::RunOptions;
use super::store::{self, RunLock};
use super::supervisor::{Supervisor, Teardown};
use super::{plot, report};

/// How long a run waits for another chaos run to release the machine.
const LOCK_WAIT: Duration = Duration::from_secs(900);
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// A run's budget beyond its fault phase: setup, the nemesis first-pass overrun, the
/// final state, the checks and the report. Past it the watchdog tears everything down.
const RUN_SLACK: Duration = Duration::from_secs(900);

pub struct Harness {
    pub opts: RunOptions,
    pub dir: PathBuf,
    pub rec: Arc<Recorder>,
    pub net: Arc<Net>,
    pub supervisor: Arc<Supervisor>,
    pub cluster: Arc<Cluster>,
    guard: Teardown,
    ctrl_c: JoinHandle<()>,
    _lock: RunLock,
    started: Instant,
}

/// What a finished run found.
pub struct RunReport {
    pub dir: PathBuf,
    pub verdicts: Vec<Verdict>,
    /// Problems found verifying the teardown (leftover rules or processes).
    pub cleanup_errors: Vec<String>,
}

impl RunReport {
    pub fn passed(&self) -> bool {
        self.cleanup_errors.is_empty() && self.verdicts.iter().all(|v| v.passed)
    }

    pub fn failed(&self) -> Vec<&'static str> {
        self.verdicts
            .iter()
            .filter(|v| !v.passed)
            .map(|v| v.name)
            .collect()
    }
}

impl Harness {
    /// Sets everything up and returns with an initialized cluster that has a leader.
    pub async fn start(opts: RunOptions, tag: &str) -> Result<Harness> {
        if let Err(why) = net::available() {
            bail!("chaos runs need root and iptables: {why}");
        }
        if !(1..=7).contains(&opts.nodes) {
            bail!("--nodes must be between 1 and 7");
        }
        let lock = tokio::task::spawn_blocking(|| RunLock::acquire(LOCK_WAIT)).await??;
        let dir = store::run_dir(&opts.store, tag)?;
        eprintln!("chaos: run directory {}", dir.display());
        let rec = Arc::new(Recorder::create(
            &dir.join("history.jsonl"),
            Clock::start(),
        )?);
        if opts.secure {
            super::secure::install(&opts.node_bin, &dir.join("certs"), opts.nodes)
                .context("generating the certificates of a --secure run")?;
            eprintln!("chaos: secure run: HTTPS, peer mTLS, auth (admin token redacted)");
        } else {
            super::secure::clear();
        }
        let net = Arc::new(Net::setup().context("setting up the iptables chain")?);
        let supervisor =
            Supervisor::new(&opts.node_bin, &dir.join("nodes"), opts.planted_bug.clone())?;
        let guard = Teardown {
            supervisor: supervisor.clone(),
            net: Some(net.clone()),
            done: Arc::new(AtomicBool::new(false)),
        };
        guard.start_watchdog(Duration::from_millis(opts.duration_ms) + RUN_SLACK);
        let ctrl_c = {
            let (supervisor, net) = (supervisor.clone(), net.clone());
            tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    eprintln!("chaos: Ctrl-C: stopping every node and removing the iptables rules");
                    supervisor.kill_all();
                    net.teardown();
                    std::process::exit(130);
                }
            })
        };
        let cluster = Cluster::new(supervisor.clone(), opts.nodes)?;
        for id in &cluster.base {
            supervisor.start(*id)?;
        }
        for id in &cluster.base {
            cluster.wait_healthy(*id, START_TIMEOUT).await?;
        }
        cluster.init().await.context("POST /cluster/init")?;
        let leader = cluster
            .wait_leader_among(&cluster.base, LEADER_TIMEOUT)
            .await?;
        eprintln!("chaos: {} nodes up, leader {leader}", opts.nodes);
        Ok(Harness {
            opts,
            dir,
            rec,
            net,
            supervisor,
            cluster,
            guard,
            ctrl_c,
            _lock: lock,
            started: Instant::now(),
        })
    }

    pub fn nemesis(&self, rng: StdRng) -> Nemesis {
        Nemesis::new(
            self.cluster.clone(),
            self.net.clone(),
            self.rec.clone(),
            rng,
        )
    }

    /// Kills every node, removes the iptables chain and checks that nothing is left;
    /// returns what was.
    fn teardown_verified(&self) -> Vec<String> {
        self.supervisor.kill_all();
        self.net.teardown();
        let mut cleanup_errors = Vec::new();
        if let Err(e) = net::verify_gone() {
            cleanup_errors.push(format!("{e:#}"));
        }
        if let Err(e) = self.supervisor.verify_gone() {
            cleanup_errors.push(format!("{e:#}"));
        }
        self.ctrl_c.abort();
        cleanup_errors
    }

    fn search_budget(&self) -> crate::check::Budget {
        crate::check::Budget {
            max_time: Duration::from_millis(self.opts.search_budget_ms),
            max_memory: 1 << 30,
            ..crate::check::Budget::default()
        }
    }

    /// Heals, collects the final state, tears down (verified), checks and reports.
    pub async fn finish(self, nemesis: &mut Nemesis) -> Result<RunReport> {
        if let Err(e) = nemesis.heal_all().await {
            nemesis.errors.push(format!("final heal: {e:#}"));
        }
        let bound = self.opts.timing.liveness_bound;
        eprintln!(
            "chaos: +{:.1}s collecting the final state",
            self.started.elapsed().as_secs_f64()
        );
        let converge = Duration::from_millis(self.opts.converge_timeout_ms);
        let fs: FinalState = final_state::collect(&self.rec, &self.cluster, bound, converge).await;
        let mut exits = self.supervisor.unexpected_exits();
        exits.extend(self.supervisor.panics());
        // Teardown before the (CPU-heavy) checks, verified.
        let cleanup_errors = self.teardown_verified();
        self.rec.flush();
        let records = self.rec.records();
        let (nemesis_intervals, probes) = (self.rec.nemesis(), self.rec.probes());
        eprintln!(
            "chaos: +{:.1}s checking {} operations",
            self.started.elapsed().as_secs_f64(),
            records.len()
        );
        let verdicts = {
            let inputs = Inputs {
                records: &records,
                final_state: &fs,
                nemesis: &nemesis_intervals,
                probes: &probes,
                wipes: &nemesis.wipes,
                nemesis_errors: &nemesis.errors,
                unexpected_exits: &exits,
                liveness_bound_us: bound.as_micros() as u64,
                search_budget: self.search_budget(),
            };
            // The search is CPU-bound; the runtime has nothing else to do meanwhile.
            tokio::task::block_in_place(|| checkers::run_all(&inputs))
        };
        let summary = report::Summary {
            opts: &self.opts,
            records: &records,
            verdicts: &verdicts,
            nemesis: &nemesis_intervals,
            fault_counts: &nemesis.counts,
            skipped_faults: &nemesis.skipped,
            probes: &probes,
            final_state: &fs,
            cleanup_errors: &cleanup_errors,
            elapsed: self.started.elapsed(),
        };
        report::write(&self.dir, &summary)?;
        if let Err(e) = plot::render(&self.dir, &records, &nemesis_intervals) {
            eprintln!("chaos: plots skipped: {e:#}");
        }
        if !self.opts.keep_data {
            self.supervisor.remove_data();
        }
        report::print(&summary, &self.dir);
        drop(self.guard);
        super::secure::clear();
        Ok(RunReport {
            dir: self.dir,
            verdicts,
            cleanup_errors,
        })
    }
}
