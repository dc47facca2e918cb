//! The closed-loop load generator, shared by both systems.
//!
//! A point runs `clients` tasks; each issues one operation, waits for its answer, records
//! its latency and issues the next, until the point's deadline. The first `warmup` is not
//! recorded. Latencies (µs) go into one HDR histogram per task, merged at the end.
//! Throughput counts the answers that arrived inside the measured window; latency covers
//! every operation that started inside it, however late it finished, so a stall cannot hide
//! in the tail. Every operation has a timeout and every point a hard deadline.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::{cairn, etcd};

/// Pause after a failed operation, so a refused connection cannot become a busy loop.
const ERROR_PAUSE: Duration = Duration::from_millis(10);
/// Distinct error messages kept per point (with counts).
const ERROR_SAMPLES_MAX: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Writes of random keys (upserts), at the leader.
    Write,
    /// cairn `linearizable` reads at the leader; etcd default (linearizable) range gets at
    /// the leader.
    ReadLinearizable,
    /// cairn `bounded` (max_staleness_ms 1000) reads spread over all nodes; etcd
    /// serializable range gets spread over all members (no staleness bound).
    ReadBounded,
    /// 70% reads (linearizable, leader), 20% writes, 10% forget/revoke (etcd: delete).
    Mixed,
}

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::Write,
        Workload::ReadLinearizable,
        Workload::ReadBounded,
        Workload::Mixed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Write => "write",
            Workload::ReadLinearizable => "read-linearizable",
            Workload::ReadBounded => "read-bounded",
            Workload::Mixed => "mixed",
        }
    }

    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }

    /// Draws the next operation.
    pub fn next_op(self, rng: &mut StdRng, keys: u64) -> Op {
        let key = rng.gen_range(0..keys);
        let kind = match self {
            Workload::Write => OpKind::Write,
            Workload::ReadLinearizable | Workload::ReadBounded => OpKind::Read,
            Workload::Mixed => match rng.gen_range(0..100) {
                0..=69 => OpKind::Read,
                70..=89 => OpKind::Write,
                90..=94 => OpKind::Forget,
                _ => OpKind::Revoke,
            },
        };
        Op { kind, key }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    /// cairn forget; etcd delete.
    Forget,
    /// cairn revoke; etcd delete.
    Revoke,
}

#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub kind: OpKind,
    pub key: u64,
}

pub fn key_name(i: u64) -> String {
    format!("bench/k{i:07}")
}

/// A random printable value of exactly `bytes` bytes (its first 12 bytes vary per write).
pub fn value_template(rng: &mut StdRng, bytes: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..bytes)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Stamps `counter` into the start of `value` so successive writes differ.
pub fn stamp(value: &mut String, counter: u64) {
    let stamp = format!("{counter:012}");
    let n = stamp.len().min(value.len());
    value.replace_range(..n, &stamp[stamp.len() - n..]);
}

/// How one operation ended.
#[derive(Debug)]
pub enum Outcome {
    Ok,
    /// A definite refusal by the system's own rules (e.g. cairn 409 `key_forgotten` for a
    /// revoke of a forgotten key): served, counted apart from errors.
    Rejected(String),
    /// Transport failure, timeout, 5xx, or an answer the workload did not expect.
    Error(String),
}

/// One client task's connection to the system under test (one per task, built once, so
/// the size difference of the variants does not matter).
#[allow(clippy::large_enum_variant)]
pub enum Worker {
    Cairn(cairn::Worker),
    Etcd(etcd::Worker),
}

impl Worker {
    async fn exec(&mut self, op: Op, value: &str) -> Outcome {
        match self {
            Worker::Cairn(w) => w.exec(op, value).await,
            Worker::Etcd(w) => w.exec(op, value).await,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct PointSpec {
    pub workload: Workload,
    pub clients: usize,
    pub value_bytes: usize,
    pub keys: u64,
    pub warmup: Duration,
    pub measure: Duration,
    pub op_timeout: Duration,
}

pub struct PointResult {
    /// Latency of every served operation (ok or rejected) started in the window, in µs.
    pub hist: Histogram<u64>,
    /// The same, split into reads and mutations (write, forget, revoke): the mixed
    /// workload's two halves wait on different things (a ReadIndex round, a log entry).
    pub by_kind: KindHists,
    /// Served answers that arrived inside the window.
    pub served_in_window: u64,
    pub rejected: u64,
    pub errors: u64,
    pub window_s: f64,
    pub error_samples: BTreeMap<String, u64>,
}

impl PointResult {
    pub fn ops_per_s(&self) -> f64 {
        self.served_in_window as f64 / self.window_s.max(1e-9)
    }
}

/// Latency histograms (µs) of reads and of mutations.
pub struct KindHists {
    pub reads: Histogram<u64>,
    pub mutations: Histogram<u64>,
}

impl KindHists {
    fn new() -> KindHists {
        KindHists {
            reads: new_hist(),
            mutations: new_hist(),
        }
    }

    fn of(&mut self, kind: OpKind) -> &mut Histogram<u64> {
        match kind {
            OpKind::Read => &mut self.reads,
            OpKind::Write | OpKind::Forget | OpKind::Revoke => &mut self.mutations,
        }
    }

    fn add(&mut self, other: &KindHists) -> Result<()> {
        self.reads
            .add(&other.reads)
            .and_then(|()| self.mutations.add(&other.mutations))
            .map_err(|e| anyhow!("merging histograms: {e:?}"))
    }
}

struct TaskResult {
    hist: Histogram<u64>,
    by_kind: KindHists,
    served_in_window: u64,
    rejected: u64,
    errors: u64,
    samples: BTreeMap<String, u64>,
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

/// Runs one point with `workers` (one per client): each client warms up, then is measured
/// until the window ends; their results are merged. Bounded by
/// `warmup + measure + op_timeout` plus a small margin.
pub async fn run_point(spec: PointSpec, workers: Vec<Worker>, seed: u64) -> Result<PointResult> {
    let started = Instant::now();
    let warm_end = started + spec.warmup;
    let window = Window {
        warm_end,
        end: warm_end + spec.measure,
    };
    let tasks = workers
        .into_iter()
        .enumerate()
        .map(|(i, worker)| tokio::spawn(client(spec, worker, seed, i, window)))
        .collect();
    let hard_limit = spec.warmup + spec.measure + spec.op_timeout + Duration::from_secs(5);
    let results = join_within(tasks, hard_limit).await?;
    merge(spec, results)
}

/// The warm-up ends at `warm_end`; the measured window runs from there to `end`.
#[derive(Clone, Copy)]
struct Window {
    warm_end: Instant,
    end: Instant,
}

/// One closed-loop client: issues operations until the window ends, recording those that
/// started after the warm-up.
async fn client(
    spec: PointSpec,
    mut worker: Worker,
    seed: u64,
    i: usize,
    window: Window,
) -> TaskResult {
    let mut rng = StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut value = value_template(&mut rng, spec.value_bytes);
    let mut counter = (i as u64) << 40;
    let mut r = TaskResult {
        hist: new_hist(),
        by_kind: KindHists::new(),
        served_in_window: 0,
        rejected: 0,
        errors: 0,
        samples: BTreeMap::new(),
    };
    while Instant::now() < window.end {
        let op = spec.workload.next_op(&mut rng, spec.keys);
        if op.kind == OpKind::Write {
            counter += 1;
            stamp(&mut value, counter);
        }
        let t0 = Instant::now();
        let outcome = match tokio::time::timeout(spec.op_timeout, worker.exec(op, &value)).await {
            Ok(o) => o,
            Err(_) => Outcome::Error(format!("timeout after {:?}", spec.op_timeout)),
        };
        let t1 = Instant::now();
        if r.record(op.kind, &outcome, t0, t1, window) {
            tokio::time::sleep(ERROR_PAUSE).await;
        }
    }
    r
}

impl TaskResult {
    /// Records one operation of `kind` that ran from `t0` to `t1`; returns whether it failed.
    fn record(
        &mut self,
        kind: OpKind,
        outcome: &Outcome,
        t0: Instant,
        t1: Instant,
        window: Window,
    ) -> bool {
        let measured = t0 >= window.warm_end;
        let (served, failed) = match outcome {
            Outcome::Ok => (true, None),
            Outcome::Rejected(code) => {
                if measured {
                    self.rejected += 1;
                    note(&mut self.samples, format!("rejected: {code}"));
                }
                (true, None)
            }
            Outcome::Error(msg) => (false, Some(msg.clone())),
        };
        if served {
            if measured {
                let us = t1.duration_since(t0).as_micros() as u64;
                self.hist.saturating_record(us);
                self.by_kind.of(kind).saturating_record(us);
            }
            if t1 >= window.warm_end && t1 <= window.end {
                self.served_in_window += 1;
            }
        }
        match failed {
            Some(msg) => {
                if measured {
                    self.errors += 1;
                    note(&mut self.samples, msg);
                }
                true
            }
            None => false,
        }
    }
}

/// Waits for every client, aborting them all when `hard_limit` passes first.
async fn join_within(
    tasks: Vec<tokio::task::JoinHandle<TaskResult>>,
    hard_limit: Duration,
) -> Result<Vec<std::result::Result<TaskResult, tokio::task::JoinError>>> {
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    let joined = tokio::time::timeout(hard_limit, futures::future::join_all(tasks)).await;
    match joined {
        Ok(r) => Ok(r),
        Err(_) => {
            aborts.iter().for_each(|a| a.abort());
            Err(anyhow!("point did not finish within {hard_limit:?}"))
        }
    }
}

/// Merges the clients' histograms, counters and error samples into the point's result.
fn merge(
    spec: PointSpec,
    results: Vec<std::result::Result<TaskResult, tokio::task::JoinError>>,
) -> Result<PointResult> {
    let mut total = PointResult {
        hist: new_hist(),
        by_kind: KindHists::new(),
        served_in_window: 0,
        rejected: 0,
        errors: 0,
        window_s: spec.measure.as_secs_f64(),
        error_samples: BTreeMap::new(),
    };
    for r in results {
        let r = r.map_err(|e| anyhow!("client task failed: {e}"))?;
        total
            .hist
            .add(&r.hist)
            .map_err(|e| anyhow!("merging histograms: {e:?}"))?;
        total.by_kind.add(&r.by_kind)?;
        total.served_in_window += r.served_in_window;
        total.rejected += r.rejected;
        total.errors += r.errors;
        for (k, v) in r.samples {
            if total.error_samples.len() < ERROR_SAMPLES_MAX || total.error_samples.contains_key(&k)
            {
                *total.error_samples.entry(k).or_default() += v;
            }
        }
    }
    Ok(total)
}

fn note(samples: &mut BTreeMap<String, u64>, msg: String) {
    let msg: String = msg.chars().take(200).collect();
    if samples.len() < ERROR_SAMPLES_MAX || samples.contains_key(&msg) {
        *samples.entry(msg).or_default() += 1;
    }
}
