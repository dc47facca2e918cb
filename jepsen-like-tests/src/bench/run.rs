//! One benchmark run, phase by phase: plan, work dir and watchdog ([`run`]), then
//! [`measure`]: copy the inputs, probe the machine (`probes`), start the clusters,
//! preload (`preload`), run the points (`points`), record resources (`usage`), stop the
//! clusters, the scale part, the final fdatasync probe and the outputs (`output`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cairn_jepsen::certs::ClusterCerts;

use super::output::{self, binary_info, unix_now, Measured};
use super::probes::{probe_end, probe_start};
use super::procs::{self, Procs, Teardown};
use super::scale::{self, ScaleResults};
use super::workload::Workload;
use super::{cairn, etcd, points, preload, usage};
use super::{
    BenchArgs, System, CAIRN_PORTS, CAIRN_SECURE_PORTS, ETCD_PORTS, ETCD_SECURE_PORTS, OP_TIMEOUT,
    SCALE_PORTS,
};

pub(super) struct Plan {
    pub mode: &'static str,
    pub workloads: Vec<Workload>,
    pub systems: Vec<System>,
    pub warmup: Duration,
    pub measure: Duration,
}

/// What the run will measure; an error here is bad input (see `super::validate`).
pub(super) fn plan(args: &BenchArgs) -> Result<Plan> {
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
        .map(|s| {
            System::ALL
                .into_iter()
                .find(|system| system.name() == s)
                .with_context(|| format!("unknown system {s}"))
        })
        .collect::<Result<Vec<_>>>()?;
    if systems.is_empty() || args.clients.is_empty() || args.clients.contains(&0) {
        bail!("need at least one system and client counts >= 1");
    }
    let (measure, warmup) = if args.quick { (2.0, 0.5) } else { (12.0, 2.0) };
    Ok(Plan {
        mode: mode(args),
        workloads,
        systems,
        warmup: Duration::from_secs_f64(args.warmup_secs.unwrap_or(warmup)),
        measure: Duration::from_secs_f64(args.point_secs.unwrap_or(measure)),
    })
}

/// `quick` for the CI smoke; `full` for a run of the published shape, whose report is
/// BENCH.md; `custom` for any run that measures less or otherwise than that shape (fewer
/// workloads, other client counts, shorter points, another key space or driver, a tuning
/// config), which must not replace the published numbers. More rounds, the scale part and
/// the secure systems beside cairn and etcd add to the published shape.
fn mode(args: &BenchArgs) -> &'static str {
    let defaults = parse_args(&[]).expect("the defaults parse");
    let published = args.workloads.is_none()
        && args.clients == defaults.clients
        && args.point_secs.is_none()
        && args.warmup_secs.is_none()
        && args.keys == defaults.keys
        && args.value_bytes == defaults.value_bytes
        && args.cairn_driver == defaults.cairn_driver
        && args.etcd_conns == defaults.etcd_conns
        && args.cairn_config.is_none()
        && !args.keep_cpus_busy
        && args.scale_keys.is_none()
        && defaults.systems.iter().all(|s| args.systems.contains(s));
    match (args.quick, published) {
        (true, _) => "quick",
        (false, true) => "full",
        (false, false) => "custom",
    }
}

/// `BenchArgs` from the flags after `bench` (with a `--node-bin`): the published shape's
/// defaults, and the tests' command lines.
fn parse_args(flags: &[&str]) -> std::result::Result<BenchArgs, clap::Error> {
    #[derive(clap::Parser)]
    struct Bench {
        #[command(flatten)]
        args: BenchArgs,
    }
    let argv = ["bench", "--node-bin", "cairn-node"].iter().chain(flags);
    <Bench as clap::Parser>::try_parse_from(argv).map(|bench| bench.args)
}

pub(super) async fn run(args: BenchArgs) -> Result<()> {
    let plan = plan(&args)?;
    let run_started = Instant::now();
    let procs = Procs::new()?;
    let _teardown = Teardown(procs.clone());
    procs::install_signal_handler(procs.clone())?;
    procs::start_watchdog(procs.clone(), time_limit(&args, &plan));
    let work = create_work_dir(&args, &procs)?;
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

/// `--time-limit-secs`, or twice the points' planned time plus slack (and the scale part).
fn time_limit(args: &BenchArgs, plan: &Plan) -> Duration {
    let points =
        plan.workloads.len() * args.clients.len() * plan.systems.len() * args.rounds as usize;
    let per_point = plan.warmup + plan.measure + Duration::from_secs(2);
    let default_limit =
        240 + per_point.as_secs() * points as u64 * 2 + if args.scale { 2400 } else { 0 };
    Duration::from_secs(args.time_limit_secs.unwrap_or(default_limit))
}

/// Always a fresh directory of our own (inside --work-dir if given), so removing it at the
/// end can never touch anything this run did not create.
fn create_work_dir(args: &BenchArgs, procs: &Arc<Procs>) -> Result<PathBuf> {
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
    Ok(work)
}

/// Everything after the work dir exists: probes, clusters, points, report.
async fn measure(
    args: &BenchArgs,
    plan: &Plan,
    procs: &Arc<Procs>,
    work: &Path,
    run_started: Instant,
) -> Result<()> {
    let inputs = copy_inputs(args, work)?;
    let start = probe_start(args, work).await?;
    let clusters = start_clusters(args, plan, procs, &inputs, work).await?;
    let preload = preload::run(args, &clusters).await?;
    let rows = points::run_all(args, plan, procs, &clusters).await?;
    let resources = usage::resources(procs, &clusters);
    let etcd_version = clusters.etcd_version();
    stop_clusters(procs).await?;
    let scale = run_scale(args, procs, &inputs, work).await?;
    let (fdatasync_end, fdatasync_busy_end) = probe_end(args, work).await?;
    let measured = Measured {
        machine: start.machine,
        etcd_version,
        node_bin_info: inputs.node_bin_info,
        fdatasync_start: start.fdatasync,
        fdatasync_busy_start: start.fdatasync_busy,
        fdatasync_append_start: start.fdatasync_append,
        fdatasync_end,
        fdatasync_busy_end,
        loadgen: start.loadgen,
        preload,
        rows,
        resources,
        scale,
    };
    let results = output::results(args, plan, run_started, measured);
    output::write_outputs(args, &results, true)
}

/// The run's own copies of what it runs, so a rebuild cannot swap them mid-run.
struct Inputs {
    node_bin: PathBuf,
    /// Which build of the node was measured (see [`binary_info`]).
    node_bin_info: String,
    cairn_config: Option<PathBuf>,
    etcd_bin: PathBuf,
}

fn copy_inputs(args: &BenchArgs, work: &Path) -> Result<Inputs> {
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
    Ok(Inputs {
        node_bin,
        node_bin_info: binary_info(node_bin_src),
        cairn_config,
        etcd_bin: which(&args.etcd_bin)?,
    })
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

/// The comparison clusters; a system left out of `--systems` is `None`.
pub(super) struct Clusters {
    pub cairn: Option<cairn::Cluster>,
    /// `cairn-secure`: the same node binary with auth + HTTPS + peer mTLS.
    pub cairn_secure: Option<cairn::Cluster>,
    pub etcd: Option<etcd::Cluster>,
    /// `etcd-secure`: etcd with its own auth + HTTPS + peer mTLS.
    pub etcd_secure: Option<etcd::Cluster>,
}

impl Clusters {
    /// The started cairn clusters by system name, plain first.
    pub fn cairns(&self) -> impl Iterator<Item = (&'static str, &cairn::Cluster)> {
        [
            (System::Cairn, &self.cairn),
            (System::CairnSecure, &self.cairn_secure),
        ]
        .into_iter()
        .filter_map(|(system, c)| Some((system.name(), c.as_ref()?)))
    }

    /// The started etcd clusters by system name, plain first.
    pub fn etcds(&self) -> impl Iterator<Item = (&'static str, &etcd::Cluster)> {
        [
            (System::Etcd, &self.etcd),
            (System::EtcdSecure, &self.etcd_secure),
        ]
        .into_iter()
        .filter_map(|(system, e)| Some((system.name(), e.as_ref()?)))
    }

    fn etcd_version(&self) -> String {
        self.etcds()
            .map(|(_, e)| e.version.clone())
            .next()
            .unwrap_or_default()
    }
}

async fn start_clusters(
    args: &BenchArgs,
    plan: &Plan,
    procs: &Arc<Procs>,
    inputs: &Inputs,
    work: &Path,
) -> Result<Clusters> {
    let has = |s| plan.systems.contains(&s);
    let cairn = if has(System::Cairn) {
        println!("bench: starting 3 cairn nodes (127.0.0.1:7601-7603, peers 7701-7703)");
        Some(
            cairn::Cluster::start(
                procs.clone(),
                &inputs.node_bin,
                work,
                "cairn",
                3,
                CAIRN_PORTS,
                OP_TIMEOUT,
                inputs.cairn_config.as_deref(),
                false,
            )
            .await?,
        )
    } else {
        None
    };
    let cairn_secure = if has(System::CairnSecure) {
        println!(
            "bench: starting 3 cairn-secure nodes (auth, HTTPS 127.0.0.1:7631-7633, peer mTLS 7731-7733)"
        );
        Some(
            cairn::Cluster::start(
                procs.clone(),
                &inputs.node_bin,
                work,
                "cairn-secure",
                3,
                CAIRN_SECURE_PORTS,
                OP_TIMEOUT,
                inputs.cairn_config.as_deref(),
                true,
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
                &inputs.etcd_bin,
                work,
                "etcd",
                3,
                ETCD_PORTS,
                args.etcd_conns,
                OP_TIMEOUT,
                None,
            )
            .await?,
        )
    } else {
        None
    };
    let etcd_secure = if has(System::EtcdSecure) {
        println!(
            "bench: starting 3 etcd-secure members (auth, HTTPS 127.0.0.1:7641-7643, peer mTLS 7741-7743, metrics 7751-7753)"
        );
        let dir = work.join("etcd-secure-certs");
        std::fs::create_dir_all(&dir)?;
        let security = etcd::Security {
            certs: ClusterCerts::generate(&inputs.node_bin, &dir, 1..=3, |_| None)?,
        };
        Some(
            etcd::Cluster::start(
                procs.clone(),
                &inputs.etcd_bin,
                work,
                "etcd-secure",
                3,
                ETCD_SECURE_PORTS,
                args.etcd_conns,
                OP_TIMEOUT,
                Some(&security),
            )
            .await?,
        )
    } else {
        None
    };
    Ok(Clusters {
        cairn,
        cairn_secure,
        etcd,
        etcd_secure,
    })
}

/// The comparison clusters are done: stop them before the scale part and the final
/// fdatasync probe so those run on a quiet machine.
async fn stop_clusters(procs: &Arc<Procs>) -> Result<()> {
    for (name, _) in procs.pids("cairn-").into_iter().chain(procs.pids("etcd-")) {
        procs.stop(&name, Duration::from_secs(10)).await?;
    }
    Ok(())
}

async fn run_scale(
    args: &BenchArgs,
    procs: &Arc<Procs>,
    inputs: &Inputs,
    work: &Path,
) -> Result<Option<ScaleResults>> {
    if !args.scale {
        return Ok(None);
    }
    let levels = args.scale_keys.clone().unwrap_or_else(|| {
        if args.quick {
            vec![10_000, 100_000]
        } else {
            vec![10_000, 100_000, 1_000_000]
        }
    });
    let scale = scale::run(
        procs.clone(),
        &inputs.node_bin,
        work,
        SCALE_PORTS,
        &levels,
        OP_TIMEOUT,
        inputs.cairn_config.as_deref(),
    )
    .await?;
    Ok(Some(scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_run_of_the_published_shape_is_full() {
        let mode_of = |flags: &[&str]| mode(&parse_args(flags).unwrap());
        assert_eq!(mode_of(&[]), "full");
        assert_eq!(mode_of(&["--rounds", "5", "--scale"]), "full");
        assert_eq!(mode_of(&["--systems", "cairn,etcd,cairn-secure"]), "full");
        assert_eq!(mode_of(&["--quick", "--workloads", "write"]), "quick");
        for narrowed in [
            &["--workloads", "write"][..],
            &["--clients", "64"],
            &["--point-secs", "3"],
            &["--warmup-secs", "1"],
            &["--keys", "10"],
            &["--systems", "cairn,cairn-secure"],
            &["--cairn-driver", "client"],
        ] {
            assert_eq!(mode_of(narrowed), "custom", "{narrowed:?}");
        }
    }
}
