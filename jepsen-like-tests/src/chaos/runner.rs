//! The chaos run: workloads on every node, the seeded nemesis schedule, then the
//! harness's final heal, checks and report.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use rand::rngs::StdRng;
use rand::SeedableRng;

use super::harness::{Harness, RunReport};
use super::nemesis::schedule;
use super::options::RunOptions;
use super::workload::{self, Ctx};

/// The first pass over every nemesis may overrun the duration by at most this.
const OVERRUN: Duration = Duration::from_secs(90);
/// Workload processes finish their current operation within this after being stopped
/// (an operation is bounded by the client's timeouts and retries).
const STOP_GRACE: Duration = Duration::from_secs(30);

pub async fn run(opts: RunOptions) -> Result<RunReport> {
    eprintln!(
        "chaos: seed {} ({} nodes, {} s, nemeses {:?})",
        opts.seed,
        opts.nodes,
        opts.duration_ms / 1_000,
        opts.nemeses.iter().map(|k| k.name()).collect::<Vec<_>>()
    );
    let harness = Harness::start(opts.clone(), "").await?;
    let started = Instant::now();
    let duration = Duration::from_millis(opts.duration_ms);
    let ctx = Ctx {
        rec: harness.rec.clone(),
        nodes: harness.cluster.base.clone(),
        stop: Arc::new(AtomicBool::new(false)),
        deadline: started + duration + OVERRUN + STOP_GRACE,
        seed: opts.seed,
        pace: Duration::from_millis(opts.pace_ms),
    };
    let tasks = workload::start(&ctx, opts.mix);
    let mut nemesis = harness.nemesis(StdRng::seed_from_u64(opts.seed));
    schedule::run(
        &mut nemesis,
        &opts.nemeses,
        opts.timing,
        started + duration,
        started + duration + OVERRUN,
    )
    .await;
    let rest = (started + duration).saturating_duration_since(Instant::now());
    tokio::time::sleep(rest).await;
    tasks.stop(STOP_GRACE).await?;
    harness.finish(&mut nemesis).await
}
