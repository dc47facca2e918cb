//! `cairn-jepsen bench`: cairn against etcd, same machine, same workloads, judged from
//! outside.
//!
//! One run starts a 3-node cairn cluster and a 3-member etcd cluster side by side (data
//! dirs on the same filesystem, loopback only), measures the disk's raw fdatasync rate,
//! loads the key space into both, then runs every (workload, clients) point once per system,
//! alternating which system goes first so drift on a shared machine hits both. Results go to
//! `<out>/latest.json`, a markdown report and PNG plots.
//!
//! Files, in the order a run uses them:
//! - this file: the command line ([`BenchArgs`]) and the shared constants;
//! - `run`: the run's phases (work dir, inputs, clusters, scale), each its own function;
//!   `probes`: the machine before the clusters start and after they stop;
//! - `procs` (children, teardown, signals), `cairn` / `etcd` (clusters and workers);
//! - `preload` (loading the key space), `points` (the schedule and one measured point),
//!   `workload` (the closed-loop runner: warm-up, timed window, merge), `usage` (CPU and
//!   server-counter deltas, RSS and disk per process);
//! - `sysinfo` (machine, fdatasync, CPU, RSS), `loadgen` (the load generator's own
//!   ceiling), `scale` (`--scale`);
//! - `output` (results and where they go), `report` (the results JSON model), `markdown`
//!   and `tables` (the report), `plot` (PNGs).

mod cairn;
mod etcd;
mod http1;
mod loadgen;
mod markdown;
mod output;
mod plot;
mod points;
mod preload;
mod probes;
mod procs;
mod report;
mod run;
mod scale;
mod sysinfo;
mod tables;
mod usage;
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::ValueEnum;

use report::Results;
use workload::Workload;

/// Client port base / peer port base: node i listens on base + i.
const CAIRN_PORTS: (u16, u16) = (7600, 7700);
const ETCD_PORTS: (u16, u16) = (7610, 7710);
const SCALE_PORTS: (u16, u16) = (7620, 7720);
const CAIRN_SECURE_PORTS: (u16, u16) = (7630, 7730);
const ETCD_SECURE_PORTS: (u16, u16) = (7640, 7740);
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// Quiet gap between points (lets connections of the previous point close).
const POINT_GAP: Duration = Duration::from_millis(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DriverArg {
    Raw,
    Client,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// CI smoke: 0.5 s warm-up + 2 s per point, and one 64 KiB write point at 16 clients;
    /// about 2-3 minutes in all.
    #[arg(long)]
    quick: bool,
    /// Also run the scale part (cairn: 10k/100k/1M keys, RSS, disk, restart, join) and
    /// 4 KiB / 64 KiB writes on both systems.
    #[arg(long)]
    scale: bool,
    /// Output directory (latest.json, plots).
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Markdown report to write. Default: BENCH.md for a full run (every workload, the
    /// default clients, points, keys and driver, cairn and etcd among the systems; more
    /// rounds, --scale and the secure systems may be added), else OUT/quick/REPORT.md for
    /// --quick and OUT/custom/REPORT.md for any other run, which also leaves latest.json
    /// alone: a partial run must not replace the published numbers.
    #[arg(long)]
    report: Option<PathBuf>,
    /// The cairn-node binary (copied into the work dir so a rebuild cannot swap it mid-run).
    #[arg(long, env = "CAIRN_NODE_BIN", required_unless_present = "render_from")]
    node_bin: Option<PathBuf>,
    #[arg(long, env = "ETCD_BIN", default_value = "etcd")]
    etcd_bin: PathBuf,
    /// Parent of the run's own fresh work dir (data dirs and logs), default $TMPDIR or /tmp.
    /// Both systems' data dirs are in it, so on the same filesystem.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the work dir (data dirs and logs) after the run.
    #[arg(long)]
    keep_work_dir: bool,
    /// Concurrent clients per point (each 1 or more).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,16,64,256",
        value_parser = at_least_one::<usize>,
    )]
    clients: Vec<usize>,
    /// Comma-separated workloads to run (default all).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = clap::builder::PossibleValuesParser::new(Workload::ALL.map(Workload::name)),
    )]
    workloads: Option<Vec<String>>,
    /// Subset of: cairn, cairn-secure (auth + HTTPS + peer mTLS, SPEC §8), etcd, and
    /// etcd-secure (etcd's own auth + HTTPS + peer mTLS, the same certificates).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cairn,etcd",
        value_parser = clap::builder::PossibleValuesParser::new(System::ALL.map(System::name)),
    )]
    systems: Vec<String>,
    /// Measured seconds per point, above 0 (default 2 with --quick, else 12).
    #[arg(long, value_parser = secs_above_zero)]
    point_secs: Option<f64>,
    /// Unrecorded warm-up seconds per point, 0 or more (default 0.5 with --quick, else 2).
    #[arg(long, value_parser = secs_at_least_zero)]
    warmup_secs: Option<f64>,
    /// Measure every point this many times, the systems' order alternating each round,
    /// and report each system's median-throughput round (with every round's ops/s beside
    /// it). This machine's speed drifts by tens of percent over minutes; short alternated
    /// rounds compare systems under the same drift, one long point does not.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=99))]
    rounds: u32,
    /// Key space of the points (keys 0..KEYS, preloaded), 1 or more.
    #[arg(long, default_value_t = 100_000, value_parser = at_least_one::<u64>)]
    keys: u64,
    #[arg(long, default_value_t = 256)]
    value_bytes: usize,
    /// How the load generator talks to cairn.
    #[arg(long, value_enum, default_value = "raw")]
    cairn_driver: DriverArg,
    /// Most gRPC connections per etcd member.
    #[arg(long, default_value_t = 16)]
    etcd_conns: usize,
    /// TTF font for plot text.
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    font: PathBuf,
    /// The command line to record in the report (scripts/bench passes its own).
    #[arg(long)]
    invocation: Option<String>,
    /// Hard limit on the whole run; everything is torn down when it passes.
    #[arg(long)]
    time_limit_secs: Option<u64>,
    /// Run nothing: re-render the markdown report and plots of an earlier run from its
    /// results JSON (e.g. bench-results/full/results.json) after a change of report text.
    #[arg(long)]
    render_from: Option<PathBuf>,
    /// cairn node config file passed to every node as `--config` (tuning experiments;
    /// default: none, i.e. the built-in defaults).
    #[arg(long)]
    cairn_config: Option<PathBuf>,
    /// Diagnostic: keep every core busy with SCHED_IDLE spinning threads during the points,
    /// so idle vCPUs never halt (separates VM wake-up latency from the systems' own costs).
    #[arg(long)]
    keep_cpus_busy: bool,
    /// Key counts of the scale part, loaded cumulatively (default 10000,100000,1000000;
    /// with --quick 10000,100000).
    #[arg(long, value_delimiter = ',')]
    scale_keys: Option<Vec<u64>>,
}

/// The longest point phase a seconds flag accepts (a day): far past any useful point, and
/// far enough from `Duration`'s limit that the run's time arithmetic cannot overflow.
const MAX_POINT_SECS: f64 = 86_400.0;

/// A seconds flag: a finite number in `0..=MAX_POINT_SECS` (`above_zero`: not 0 either).
fn secs(s: &str, above_zero: bool) -> Result<f64, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    let low_ok = if above_zero { secs > 0.0 } else { secs >= 0.0 };
    // NaN fails both comparisons.
    if low_ok && secs <= MAX_POINT_SECS {
        Ok(secs)
    } else if above_zero {
        Err(format!(
            "expected a finite number of seconds above 0 (at most {MAX_POINT_SECS}), got {s}"
        ))
    } else {
        Err(format!(
            "expected a finite number of seconds, 0 or more (at most {MAX_POINT_SECS}), got {s}"
        ))
    }
}

/// A count flag (`--clients`, `--keys`): a whole number, 1 or more.
fn at_least_one<T: std::str::FromStr + PartialOrd + From<u8>>(s: &str) -> Result<T, String> {
    match s.trim().parse::<T>() {
        Ok(n) if n >= T::from(1) => Ok(n),
        _ => Err(format!("expected a whole number, 1 or more, got {s:?}")),
    }
}

/// `--point-secs`: a measured window of 0 s has no rate.
fn secs_above_zero(s: &str) -> Result<f64, String> {
    secs(s, true)
}

/// `--warmup-secs`: 0 means no warm-up.
fn secs_at_least_zero(s: &str) -> Result<f64, String> {
    secs(s, false)
}

/// Checks the options that clap cannot check one by one (a bad value is a usage error,
/// exit 2, before anything starts); `--render-from` runs nothing, so it needs none.
pub fn validate(args: &BenchArgs) -> Result<()> {
    if args.render_from.is_none() {
        run::plan(args)?;
    }
    Ok(())
}

pub fn main(args: BenchArgs) -> Result<()> {
    if let Some(path) = &args.render_from {
        let results: Results = serde_json::from_slice(
            &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("parsing {}", path.display()))?;
        return output::write_outputs(&args, &results, false);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run::run(args))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Cairn,
    /// cairn with auth, HTTPS client ports and mutual TLS between peers (SPEC §8).
    CairnSecure,
    Etcd,
    /// etcd with auth, HTTPS client URLs and mutual TLS between members.
    EtcdSecure,
}

impl System {
    const ALL: [System; 4] = [
        System::Cairn,
        System::CairnSecure,
        System::Etcd,
        System::EtcdSecure,
    ];

    fn name(self) -> &'static str {
        match self {
            System::Cairn => "cairn",
            System::CairnSecure => "cairn-secure",
            System::Etcd => "etcd",
            System::EtcdSecure => "etcd-secure",
        }
    }
}
