//! Client workloads: concurrent processes spread over all nodes, each recording every
//! operation it issues.
//!
//! - [`register`]: per-key registers under `reg/`: unique-value writes, CAS through
//!   `expected_version`, `clear_tombstone` writes, forget / revoke / reinstate, batches,
//!   and reads at every consistency level, with and without a session.
//! - [`forget_race`]: summarizer-like writers (`based_on_revision` / `expected_version`
//!   from an earlier read) racing a forgetter under `race/`.
//! - [`handoff`]: forget through one node, export the session token, import it in
//!   another client and read from another node (`hand/`).
//! - [`retries`]: responses dropped on purpose, then resent under the same
//!   `request_id` (`retry/`); each key has a single writer, so versions must count up by
//!   exactly one per acknowledged write.
//! - [`exec`]: running one operation through the client library and classifying it.
//! - [`probe`]: the post-heal liveness probe.

pub mod exec;
pub mod forget_race;
pub mod handoff;
pub mod probe;
pub mod register;
pub mod retries;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_client::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

use super::history::Recorder;
use super::secure;
use super::supervisor::endpoint;

/// Per-attempt timeout of workload clients: short, so a cut-off leader costs little.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The client's own retries after the first attempt (same request_id).
const CLIENT_RETRIES: u32 = 2;

/// What every workload process shares.
#[derive(Clone)]
pub struct Ctx {
    pub rec: Arc<Recorder>,
    /// Node ids clients may talk to.
    pub nodes: Vec<u64>,
    pub stop: Arc<AtomicBool>,
    /// Hard end of the workload phase, whatever `stop` says.
    pub deadline: Instant,
    pub seed: u64,
    /// Pause between two operations of one process.
    pub pace: Duration,
}

impl Ctx {
    pub fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed) && Instant::now() < self.deadline
    }

    pub fn rng(&self, process: u64) -> StdRng {
        StdRng::seed_from_u64(self.seed ^ process.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(|id| endpoint(*id)).collect()
    }

    /// A client over every node, with short timeouts and few retries.
    pub fn client(&self) -> Client {
        client_for(self.endpoints())
    }

    /// A client over every node that makes exactly one attempt per call.
    pub fn one_shot_client(&self) -> Client {
        secure::configure(Client::builder(self.endpoints()))
            .request_timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .discovery_timeout(CONNECT_TIMEOUT)
            .retries_max(0)
            .build()
            .expect("endpoints are valid")
    }

    pub fn random_node(&self, rng: &mut StdRng) -> u64 {
        self.nodes[rng.gen_range(0..self.nodes.len())]
    }

    /// Sleeps the pace, jittered, unless stopping.
    pub async fn pause(&self, rng: &mut StdRng) {
        let ms = self.pace.as_millis() as u64;
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(ms / 2..=ms))).await;
        }
    }
}

pub fn client_for(endpoints: Vec<String>) -> Client {
    secure::configure(Client::builder(endpoints))
        .request_timeout(REQUEST_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .discovery_timeout(CONNECT_TIMEOUT)
        .retries_max(CLIENT_RETRIES)
        .backoff_ms(50, 400)
        .build()
        .expect("endpoints are valid")
}

/// How many processes of each workload to run.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Mix {
    pub register: u64,
    pub forget_race_writers: u64,
    pub handoff: u64,
    pub retries: u64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            register: 5,
            forget_race_writers: 2,
            handoff: 1,
            retries: 1,
        }
    }
}

/// Running workload processes. Dropping this stops and aborts them, so no process
/// outlives its run (and writes into the next run's cluster) on an early return.
pub struct Running {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Asks every process to stop, waits up to `grace`, aborts the rest. A panicked
    /// process is a harness bug and an error.
    pub async fn stop(mut self, grace: Duration) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + grace;
        for task in std::mem::take(&mut self.tasks) {
            let abort = task.abort_handle();
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Err(e)) if e.is_panic() => anyhow::bail!("a workload process panicked: {e}"),
                Ok(_) => {}
                Err(_) => {
                    eprintln!("chaos: a workload process did not stop in time; aborted");
                    abort.abort();
                }
            }
        }
        Ok(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts every workload process; each stops when `ctx.running()` turns false.
pub fn start(ctx: &Ctx, mix: Mix) -> Running {
    let mut tasks = Vec::new();
    let mut process = 0u64;
    let mut next = || {
        process += 1;
        process
    };
    for _ in 0..mix.register {
        tasks.push(tokio::spawn(register::run(ctx.clone(), next())));
    }
    if mix.forget_race_writers > 0 {
        for _ in 0..mix.forget_race_writers {
            tasks.push(tokio::spawn(forget_race::summarizer(ctx.clone(), next())));
        }
        tasks.push(tokio::spawn(forget_race::forgetter(ctx.clone(), next())));
    }
    for _ in 0..mix.handoff {
        tasks.push(tokio::spawn(handoff::run(ctx.clone(), next())));
    }
    for _ in 0..mix.retries {
        tasks.push(tokio::spawn(retries::run(ctx.clone(), next())));
    }
    Running {
        stop: ctx.stop.clone(),
        tasks,
    }
}

/// Process ids at or above this are used by the harness itself (probes, resolution).
pub const HARNESS_PROCESS: u64 = 1_000;
