//! `cairn-jepsen bench`: cairn against etcd, same machine, same workloads, judged from
//! outside.
//!
//! One run starts a 3-node cairn cluster and a 3-member etcd cluster side by side (data
//! dirs on the same filesystem, loopback only), measures the disk's raw fdatasync rate,
//! loads the key space into both, then runs every (workload, clients) point once per system,
//! alternating which system goes first so drift on a shared machine hits both. Results go to
//! `<out>/latest.json`, a markdown report and PNG plots.
//!
//! Files: `procs` (children, teardown, signals), `cairn` / `etcd` (clusters and workers),
//! `workload` (the closed-loop runner), `sysinfo` (machine, fdatasync, CPU, RSS),
//! `loadgen` (the load generator's own ceiling), `scale` (`--scale`), `report`, `plot`.

mod cairn;
mod etcd;
mod http1;
mod loadgen;
mod plot;
mod procs;
mod report;
mod scale;
mod sysinfo;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use procs::{Procs, Teardown};
use report::{CpuUsage, PreloadRow, ResourceRow, Results, Row, Settings};
use workload::{PointSpec, Workload};

/// Client port base / peer port base: node i listens on base + i.
const CAIRN_PORTS: (u16, u16) = (7600, 7700);
const ETCD_PORTS: (u16, u16) = (7610, 7710);
const SCALE_PORTS: (u16, u16) = (7620, 7720);
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// Preload: most ops per cairn batch / per etcd txn (etcd's default --max-txn-ops), in
/// flight.
const CAIRN_BATCH_OPS: u64 = 500;
const ETCD_TXN_OPS: u64 = 128;
const PRELOAD_CONCURRENCY: usize = 8;
/// Bytes of values per preload request: cairn's default body limit is 2 MiB
/// (`limits.value_bytes_max` plus a 1 MiB envelope) and etcd's `--max-request-bytes`
/// 1.5 MiB, so 500 writes of 64 KiB in one request were refused (`--value-bytes 65536`
/// failed so).
const PRELOAD_REQUEST_BYTES: u64 = 512 << 10;
/// What one preloaded write adds to a request besides its value (key, field names).
const PRELOAD_OP_OVERHEAD_BYTES: u64 = 128;
/// Quiet gap between points (lets connections of the previous point close).
const POINT_GAP: Duration = Duration::from_millis(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DriverArg {
    Raw,
    Client,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// CI smoke: 0.5 s warm-up + 2 s per point, about 2-3 minutes in all.
    #[arg(long)]
    quick: bool,
    /// Also run the scale part (cairn: 10k/100k/1M keys, RSS, disk, restart, join) and
    /// 4 KiB / 64 KiB writes on both systems.
    #[arg(long)]
    scale: bool,
    /// Output directory (latest.json, plots).
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Markdown report to write. Default: BENCH.md for a full run, OUT/quick/REPORT.md for
    /// --quick (a smoke run must not overwrite the published numbers).
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
    /// Concurrent clients per point.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    clients: Vec<usize>,
    /// Subset of: write, read-linearizable, read-bounded, mixed.
    #[arg(long, value_delimiter = ',')]
    workloads: Option<Vec<String>>,
    /// Subset of: cairn, etcd.
    #[arg(long, value_delimiter = ',', default_value = "cairn,etcd")]
    systems: Vec<String>,
    /// Measured seconds per point (default 2 with --quick, else 12).
    #[arg(long)]
    point_secs: Option<f64>,
    /// Unrecorded warm-up seconds per point (default 0.5 with --quick, else 2).
    #[arg(long)]
    warmup_secs: Option<f64>,
    #[arg(long, default_value_t = 100_000)]
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

pub fn main(args: BenchArgs) -> Result<()> {
    if let Some(path) = &args.render_from {
        let results: Results = serde_json::from_slice(
            &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("parsing {}", path.display()))?;
        return write_outputs(&args, &results, false);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run(args))
}

struct Plan {
    mode: &'static str,
    workloads: Vec<Workload>,
    systems: Vec<System>,
    warmup: Duration,
    measure: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Cairn,
    Etcd,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Cairn => "cairn",
            System::Etcd => "etcd",
        }
    }
}

fn plan(args: &BenchArgs) -> Result<Plan> {
    let workloads = match &args.workloads {
        None => Workload::ALL.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| Workload::parse(n).with_context(|| format!("unknown workload {n}")))
            .collect::<Result<_>>()?,
    };
    let systems = args
        .systems
        .iter()
        .map(|s| match s.as_str() {
            "cairn" => Ok(System::Cairn),
            "etcd" => Ok(System::Etcd),
            other => bail!("unknown system {other}"),
        })
        .collect::<Result<Vec<_>>>()?;
    if systems.is_empty() || args.clients.is_empty() || args.clients.contains(&0) {
        bail!("need at least one system and client counts >= 1");
    }
    let (measure, warmup) = if args.quick { (2.0, 0.5) } else { (12.0, 2.0) };
    Ok(Plan {
        mode: if args.quick { "quick" } else { "full" },
        workloads,
        systems,
        warmup: Duration::from_secs_f64(args.warmup_secs.unwrap_or(warmup)),
        measure: Duration::from_secs_f64(args.point_secs.unwrap_or(measure)),
    })
}

async fn run(args: BenchArgs) -> Result<()> {
    let plan = plan(&args)?;
    let run_started = Instant::now();
    let procs = Procs::new()?;
    let _teardown = Teardown(procs.clone());
    procs::install_signal_handler(procs.clone())?;
    let points = plan.workloads.len() * args.clients.len() * plan.systems.len();
    let per_point = plan.warmup + plan.measure + Duration::from_secs(2);
    let default_limit =
        240 + per_point.as_secs() * points as u64 * 2 + if args.scale { 2400 } else { 0 };
    procs::start_watchdog(
        procs.clone(),
        Duration::from_secs(args.time_limit_secs.unwrap_or(default_limit)),
    );

    // Always a fresh directory of our own (inside --work-dir if given), so removing it at
    // the end can never touch anything this run did not create.
    let work = args
        .work_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("cairn-bench-{}-{}", std::process::id(), unix_now()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let work = work.canonicalize()?;
    if !args.keep_work_dir {
        procs.remove_on_teardown(Some(work.clone()));
    }
    println!("bench: mode {}, work dir {}", plan.mode, work.display());
    let result = measure(&args, &plan, &procs, &work, run_started).await;
    if result.is_err() {
        // Keep data dirs and logs of a failed run for diagnosis.
        procs.remove_on_teardown(None);
        eprintln!(
            "bench: run failed; logs and data kept in {}",
            work.display()
        );
    }
    result
}

/// Everything after the work dir exists: probes, clusters, points, report.
async fn measure(
    args: &BenchArgs,
    plan: &Plan,
    procs: &Arc<Procs>,
    work: &Path,
    run_started: Instant,
) -> Result<()> {
    let work = work.to_path_buf();

    let node_bin = work.join("cairn-node");
    // Copied too, so the run keeps using the file it started with.
    let cairn_config = match &args.cairn_config {
        Some(c) => {
            let copy = work.join("cairn-node.toml");
            std::fs::copy(c, &copy).with_context(|| format!("copying {}", c.display()))?;
            Some(copy)
        }
        None => None,
    };
    let node_bin_src = args.node_bin.as_deref().context("--node-bin is required")?;
    std::fs::copy(node_bin_src, &node_bin)
        .with_context(|| format!("copying {}", node_bin_src.display()))?;
    let node_bin_info = binary_info(node_bin_src);
    let etcd_bin = which(&args.etcd_bin)?;

    let machine = sysinfo::machine(&work);
    println!(
        "bench: {} cores ({}), {} MiB, kernel {}, disk {}, load {}",
        machine.nproc,
        machine.cpu_model,
        machine.mem_total_mib,
        machine.kernel,
        machine.disk,
        machine.loadavg_at_start
    );
    let fsync_secs = Duration::from_secs(if args.quick { 1 } else { 2 });
    let (fdatasync_start, fdatasync_busy_start) = {
        let w = work.clone();
        tokio::task::spawn_blocking(move || sysinfo::fdatasync_rates(&w, fsync_secs)).await??
    };
    let fdatasync_append_start = {
        let w = work.clone();
        tokio::task::spawn_blocking(move || sysinfo::fdatasync_append_rate(&w, fsync_secs))
            .await??
    };
    println!(
        "bench: fdatasync alone {:.0}/s (mean {:.3} ms, p99 {:.3} ms); with busy CPUs {:.0}/s (mean {:.3} ms); appending {:.0}/s (mean {:.3} ms)",
        fdatasync_start.ops_per_s, fdatasync_start.mean_ms, fdatasync_start.p99_ms,
        fdatasync_busy_start.ops_per_s, fdatasync_busy_start.mean_ms,
        fdatasync_append_start.ops_per_s, fdatasync_append_start.mean_ms
    );
    let loadgen_check = loadgen::ceiling(if args.quick { 1.0 } else { 3.0 })
        .await
        .ok();
    if let Some(c) = &loadgen_check {
        println!(
            "bench: load generator: {:.0} µs CPU per request, ~{:.0} req/s per core (raw driver vs a stub)",
            c.client_cpu_us_per_req, c.client_req_per_core_s
        );
    }

    let has = |s| plan.systems.contains(&s);
    let cairn = if has(System::Cairn) {
        println!("bench: starting 3 cairn nodes (127.0.0.1:7601-7603, peers 7701-7703)");
        Some(
            cairn::Cluster::start(
                procs.clone(),
                &node_bin,
                &work,
                "cairn",
                3,
                CAIRN_PORTS,
                OP_TIMEOUT,
                cairn_config.as_deref(),
            )
            .await?,
        )
    } else {
        None
    };
    let etcd = if has(System::Etcd) {
        println!("bench: starting 3 etcd members (127.0.0.1:7611-7613, peers 7711-7713)");
        Some(
            etcd::Cluster::start(
                procs.clone(),
                &etcd_bin,
                &work,
                3,
                ETCD_PORTS,
                args.etcd_conns,
                OP_TIMEOUT,
            )
            .await?,
        )
    } else {
        None
    };

    // Preload every key so reads hit: cairn in batches, etcd in transactions.
    let mut preload = Vec::new();
    let cairn_ops = preload_ops(CAIRN_BATCH_OPS, args.value_bytes);
    let etcd_ops = preload_ops(ETCD_TXN_OPS, args.value_bytes);
    if let Some(c) = &cairn {
        let t = Instant::now();
        let rate = c
            .load(
                0..args.keys,
                args.value_bytes,
                cairn_ops,
                PRELOAD_CONCURRENCY,
            )
            .await?;
        println!(
            "bench: cairn preload of {} keys: {:.1} s ({rate:.0} keys/s)",
            args.keys,
            t.elapsed().as_secs_f64()
        );
        preload.push(PreloadRow {
            system: "cairn".into(),
            keys: args.keys,
            ops_per_request: cairn_ops,
            concurrency: PRELOAD_CONCURRENCY,
            seconds: t.elapsed().as_secs_f64(),
            keys_per_s: rate,
        });
    }
    if let Some(e) = &etcd {
        let t = Instant::now();
        let rate = e
            .load(
                0..args.keys,
                args.value_bytes,
                etcd_ops,
                PRELOAD_CONCURRENCY,
            )
            .await?;
        println!(
            "bench: etcd preload of {} keys: {:.1} s ({rate:.0} keys/s)",
            args.keys,
            t.elapsed().as_secs_f64()
        );
        preload.push(PreloadRow {
            system: "etcd".into(),
            keys: args.keys,
            ops_per_request: etcd_ops,
            concurrency: PRELOAD_CONCURRENCY,
            seconds: t.elapsed().as_secs_f64(),
            keys_per_s: rate,
        });
    }

    let driver = match args.cairn_driver {
        DriverArg::Raw => cairn::DriverKind::Raw,
        DriverArg::Client => cairn::DriverKind::Client,
    };
    let ctx = Ctx {
        procs,
        cairn: cairn.as_ref(),
        etcd: etcd.as_ref(),
        driver,
        keys: args.keys,
    };
    let mut schedule: Vec<(Workload, usize, usize)> = Vec::new();
    for &w in &plan.workloads {
        for &c in &args.clients {
            schedule.push((w, c, args.value_bytes));
        }
    }
    if args.scale && plan.workloads.contains(&Workload::Write) {
        for vb in [4096usize, 65536] {
            for c in [16usize, 64] {
                schedule.push((Workload::Write, c, vb));
            }
        }
    }
    let total = schedule.len() * plan.systems.len();
    let mut rows = Vec::new();
    let mut done = 0;
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _spinners = args.keep_cpus_busy.then(|| {
        println!("bench: --keep-cpus-busy: {nproc} SCHED_IDLE spinning threads during the points");
        sysinfo::Spinners::start(nproc, Duration::from_secs(24 * 3600))
    });
    for (p, &(workload, clients, value_bytes)) in schedule.iter().enumerate() {
        let mut order = plan.systems.clone();
        if p % 2 == 1 {
            order.reverse();
        }
        for system in order {
            done += 1;
            let spec = PointSpec {
                workload,
                clients,
                value_bytes,
                keys: args.keys,
                warmup: plan.warmup,
                measure: plan.measure,
                op_timeout: OP_TIMEOUT,
            };
            let row = ctx.point(system, spec, p as u64).await?;
            println!(
                "[{done:>2}/{total}] {:<5} {:<17} c={:<3} {:>6}B {:>8.0} ops/s  p50 {:>7.2} ms  p99 {:>7.2} ms  p99.9 {:>7.2} ms  err {} rej {}  cpu: server {:.2} loadgen {:.2} other {:.2}",
                row.system, row.workload, row.clients, row.value_bytes, row.ops_per_s, row.p50_ms, row.p99_ms, row.p999_ms,
                row.errors, row.rejected, row.cpu.server_cores, row.cpu.loadgen_cores, row.cpu.other_cores
            );
            rows.push(row);
            tokio::time::sleep(POINT_GAP).await;
        }
    }

    drop(_spinners);
    let mut resources = Vec::new();
    if let Some(c) = &cairn {
        for n in &c.nodes {
            resources.push(resource_row(
                "cairn",
                &n.name,
                procs.pid(&n.name),
                &n.data_dir,
            ));
        }
    }
    if let Some(e) = &etcd {
        for m in &e.members {
            resources.push(resource_row(
                "etcd",
                &m.name,
                procs.pid(&m.name),
                &m.data_dir,
            ));
        }
    }
    let etcd_version = etcd.as_ref().map(|e| e.version.clone()).unwrap_or_default();
    // The comparison clusters are done: stop them before the scale part and the final
    // fdatasync probe so those run on a quiet machine.
    for (name, _) in procs.pids("cairn-").into_iter().chain(procs.pids("etcd-")) {
        procs.stop(&name, Duration::from_secs(10)).await?;
    }

    let scale = if args.scale {
        let levels = args.scale_keys.clone().unwrap_or_else(|| {
            if args.quick {
                vec![10_000, 100_000]
            } else {
                vec![10_000, 100_000, 1_000_000]
            }
        });
        Some(
            scale::run(
                procs.clone(),
                &node_bin,
                &work,
                SCALE_PORTS,
                &levels,
                OP_TIMEOUT,
                cairn_config.as_deref(),
            )
            .await?,
        )
    } else {
        None
    };

    let (fdatasync_end, fdatasync_busy_end) = {
        let w = work.clone();
        tokio::task::spawn_blocking(move || sysinfo::fdatasync_rates(&w, fsync_secs)).await??
    };
    println!(
        "bench: fdatasync at the end: alone {:.0}/s (mean {:.3} ms); with busy CPUs {:.0}/s (mean {:.3} ms)",
        fdatasync_end.ops_per_s, fdatasync_end.mean_ms, fdatasync_busy_end.ops_per_s, fdatasync_busy_end.mean_ms
    );

    let results = Results {
        generated_at_unix: unix_now(),
        mode: plan.mode.into(),
        command: args
            .invocation
            .clone()
            .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" ")),
        git: git_describe(),
        machine,
        loadavg_at_end: sysinfo::loadavg(),
        duration_s: run_started.elapsed().as_secs_f64(),
        settings: Settings {
            warmup_s: plan.warmup.as_secs_f64(),
            measure_s: plan.measure.as_secs_f64(),
            keys: args.keys,
            value_bytes: args.value_bytes,
            cairn_driver: format!("{:?}", args.cairn_driver).to_lowercase(),
            etcd_conns_per_member: args.etcd_conns,
            etcd_version,
            op_timeout_s: OP_TIMEOUT.as_secs_f64(),
            cairn_max_staleness_ms: cairn::MAX_STALENESS_MS,
            keep_cpus_busy: args.keep_cpus_busy,
            cairn_node_binary: node_bin_info,
            cairn_config: args
                .cairn_config
                .as_ref()
                .and_then(|c| std::fs::read_to_string(c).ok()),
        },
        fdatasync_start,
        fdatasync_end,
        fdatasync_busy_start,
        fdatasync_busy_end,
        fdatasync_append_start: Some(fdatasync_append_start),
        loadgen: loadgen_check,
        preload,
        rows,
        resources,
        scale,
    };
    write_outputs(args, &results, true)
}

/// latest.json and OUT/MODE/results.json (when `write_json`), the plots in OUT/MODE/ and
/// the markdown report.
fn write_outputs(args: &BenchArgs, results: &Results, write_json: bool) -> Result<()> {
    let mode_dir = args.out.join(&results.mode);
    std::fs::create_dir_all(&mode_dir)?;
    if write_json {
        let json = serde_json::to_vec_pretty(results)?;
        std::fs::write(args.out.join("latest.json"), &json)?;
        std::fs::write(mode_dir.join("results.json"), &json)?;
    }
    let plots = match plot::render(results, &mode_dir, &args.font) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("bench: plots failed: {e:#}");
            Vec::new()
        }
    };
    let report_path = args.report.clone().unwrap_or_else(|| {
        if results.mode == "quick" {
            mode_dir.join("REPORT.md")
        } else {
            PathBuf::from("BENCH.md")
        }
    });
    report::write_markdown(results, &report_path, &plots)?;
    println!(
        "bench: wrote {}{} and {} plot(s) in {}",
        if write_json {
            format!("{}, ", args.out.join("latest.json").display())
        } else {
            String::new()
        },
        report_path.display(),
        plots.len(),
        mode_dir.display()
    );
    println!("{}", report::summary_table(results));
    Ok(())
}

struct Ctx<'a> {
    procs: &'a Arc<Procs>,
    cairn: Option<&'a cairn::Cluster>,
    etcd: Option<&'a etcd::Cluster>,
    driver: cairn::DriverKind,
    keys: u64,
}

/// CPU seconds used so far: the machine, this process, every child by name.
struct CpuSnap {
    at: Instant,
    machine: f64,
    me: f64,
    children: BTreeMap<String, f64>,
}

fn cpu_snap(procs: &Procs) -> CpuSnap {
    CpuSnap {
        at: Instant::now(),
        machine: sysinfo::machine_busy_s(),
        me: sysinfo::self_cpu_s(),
        children: procs
            .pids("")
            .into_iter()
            .filter_map(|(n, pid)| Some((n, sysinfo::process_cpu_s(pid)?)))
            .collect(),
    }
}

fn cpu_usage(system: &str, a: &CpuSnap, b: &CpuSnap) -> CpuUsage {
    let wall = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let mut by_process = BTreeMap::new();
    let (mut server, mut idle_system) = (0.0, 0.0);
    for (name, after) in &b.children {
        let used = after - a.children.get(name).copied().unwrap_or(*after);
        if name.starts_with(system) {
            server += used;
            by_process.insert(name.clone(), used / wall);
        } else {
            idle_system += used;
        }
    }
    let loadgen = b.me - a.me;
    let machine = b.machine - a.machine;
    CpuUsage {
        server_cores: server / wall,
        server_by_process: by_process,
        loadgen_cores: loadgen / wall,
        idle_system_cores: idle_system / wall,
        other_cores: ((machine - server - loadgen - idle_system) / wall).max(0.0),
    }
}

/// Counters worth a delta per point, by system.
const CAIRN_COUNTERS: &[&str] = &[
    "cairn_mutations_ok_total",
    "cairn_mutations_rejected_total",
    "cairn_mutations_forwarded_total",
    "cairn_reads_linearizable_total",
    "cairn_reads_bounded_total",
    "cairn_reads_stale_refused_total",
    "cairn_read_index_rounds",
    "cairn_mutation_latency_us_sum",
    "cairn_last_log_index",
];
const ETCD_COUNTERS: &[&str] = &[
    "etcd_disk_wal_fsync_duration_seconds_count",
    "etcd_disk_wal_fsync_duration_seconds_sum",
    "etcd_disk_backend_commit_duration_seconds_count",
    "etcd_server_proposals_committed_total",
    "etcd_network_peer_sent_bytes_total",
];

fn deltas(
    names: &[&str],
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    let sum = |m: &BTreeMap<String, f64>, n: &str| -> Option<f64> {
        let v: Vec<f64> = m
            .iter()
            .filter(|(k, _)| *k == n || k.starts_with(&format!("{n}{{")))
            .map(|(_, v)| *v)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    names
        .iter()
        .filter_map(|n| {
            Some((
                n.to_string(),
                sum(after, n)? - sum(before, n).unwrap_or(0.0),
            ))
        })
        .collect()
}

impl Ctx<'_> {
    async fn point(&self, system: System, spec: PointSpec, seed: u64) -> Result<Row> {
        let (workers, metrics_before, leader_ref) = match system {
            System::Cairn => {
                let c = self.cairn.context("cairn not started")?;
                let leader = c.leader().await?;
                let workers = (0..spec.clients)
                    .map(|i| {
                        c.worker(self.driver, spec.workload, i, &leader)
                            .map(workload::Worker::Cairn)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let m = c.metrics(&leader).await.unwrap_or_default();
                (workers, m, LeaderRef::Cairn(leader))
            }
            System::Etcd => {
                let e = self.etcd.context("etcd not started")?;
                let leader = e.leader().await?;
                let workers = (0..spec.clients)
                    .map(|i| {
                        workload::Worker::Etcd(e.worker(spec.workload, i, spec.clients, leader))
                    })
                    .collect();
                let m = e.metrics(leader).await.unwrap_or_default();
                (workers, m, LeaderRef::Etcd(leader))
            }
        };
        let before = cpu_snap(self.procs);
        let result =
            workload::run_point(spec, workers, seed.wrapping_mul(7919) + spec.clients as u64)
                .await?;
        let after = cpu_snap(self.procs);
        let server_metrics = match &leader_ref {
            LeaderRef::Cairn(leader) => {
                let m = self
                    .cairn
                    .expect("cairn")
                    .metrics(leader)
                    .await
                    .unwrap_or_default();
                deltas(CAIRN_COUNTERS, &metrics_before, &m)
            }
            LeaderRef::Etcd(i) => {
                let m = self
                    .etcd
                    .expect("etcd")
                    .metrics(*i)
                    .await
                    .unwrap_or_default();
                deltas(ETCD_COUNTERS, &metrics_before, &m)
            }
        };
        let note = match (system, spec.workload) {
            (System::Etcd, Workload::ReadBounded) => {
                "etcd serializable reads on all members: NO staleness bound"
            }
            (System::Cairn, Workload::ReadBounded) => {
                "cairn bounded reads (max_staleness_ms 1000) on all nodes"
            }
            (System::Cairn, Workload::Mixed) => {
                "70% linearizable read, 20% write, 5% forget, 5% revoke"
            }
            (System::Etcd, Workload::Mixed) => "70% linearizable get, 20% put, 10% delete",
            _ => "",
        };
        let _ = self.keys;
        Ok(Row::new(
            system.name(),
            spec,
            &result,
            cpu_usage(system.name(), &before, &after),
            server_metrics,
            note,
        ))
    }
}

enum LeaderRef {
    Cairn(cairn::Node),
    Etcd(usize),
}

fn resource_row(system: &str, name: &str, pid: Option<u32>, data_dir: &Path) -> ResourceRow {
    ResourceRow {
        system: system.into(),
        process: name.into(),
        rss_mib: pid.and_then(sysinfo::rss_mib).unwrap_or(0.0),
        data_dir_mib: sysinfo::disk_usage_bytes(data_dir) as f64 / (1 << 20) as f64,
    }
}

fn which(bin: &Path) -> Result<PathBuf> {
    if bin.components().count() > 1 {
        return Ok(bin.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "{} not found in PATH (Debian: apt-get install etcd-server)",
                bin.display()
            )
        })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `git rev-parse --short HEAD` (+ `-dirty`) of the working directory's repository.
fn git_describe() -> String {
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = run(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let dirty =
        run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{head}-dirty")
    } else {
        head
    }
}

/// "PATH (N bytes, modified at unix time T)": which build of the node was measured.
fn binary_info(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => format!(
            "{} ({} bytes, modified {})",
            path.display(),
            m.len(),
            m.modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or("?".into(), |d| report::utc(d.as_secs()))
        ),
        Err(_) => path.display().to_string(),
    }
}

/// Ops per preload request: `max_ops`, fewer when the values would not fit in
/// [`PRELOAD_REQUEST_BYTES`], at least one.
fn preload_ops(max_ops: u64, value_bytes: usize) -> u64 {
    let per_op = value_bytes as u64 + PRELOAD_OP_OVERHEAD_BYTES;
    (PRELOAD_REQUEST_BYTES / per_op).clamp(1, max_ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_requests_shrink_with_the_value_size_and_never_to_zero() {
        assert_eq!(preload_ops(CAIRN_BATCH_OPS, 256), CAIRN_BATCH_OPS);
        assert_eq!(preload_ops(ETCD_TXN_OPS, 256), ETCD_TXN_OPS);
        let kib4 = preload_ops(CAIRN_BATCH_OPS, 4096);
        assert!(
            kib4 < CAIRN_BATCH_OPS && kib4 * 4096 <= PRELOAD_REQUEST_BYTES,
            "{kib4}"
        );
        assert_eq!(preload_ops(CAIRN_BATCH_OPS, 65_536), 7);
        assert_eq!(preload_ops(ETCD_TXN_OPS, 1 << 20), 1);
    }
}
