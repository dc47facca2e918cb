//! A run's outputs: the [`Results`] record (with the build and git identity of what was
//! measured), `latest.json` and `OUT/MODE/results.json`, the plots and the markdown report.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;

use super::loadgen::LoadgenCheck;
use super::report::{self, PreloadRow, ResourceRow, Results, Row, Settings};
use super::run::Plan;
use super::scale::ScaleResults;
use super::sysinfo::{self, Fdatasync, Machine};
use super::{cairn, markdown, plot, tables, BenchArgs, OP_TIMEOUT};

/// What the run's phases measured, for [`results`].
pub(super) struct Measured {
    pub machine: Machine,
    pub etcd_version: String,
    pub node_bin_info: String,
    pub fdatasync_start: Fdatasync,
    pub fdatasync_busy_start: Fdatasync,
    pub fdatasync_append_start: Fdatasync,
    pub fdatasync_end: Fdatasync,
    pub fdatasync_busy_end: Fdatasync,
    pub loadgen: Option<LoadgenCheck>,
    pub preload: Vec<PreloadRow>,
    pub rows: Vec<Row>,
    pub resources: Vec<ResourceRow>,
    pub scale: Option<ScaleResults>,
}

pub(super) fn results(args: &BenchArgs, plan: &Plan, run_started: Instant, m: Measured) -> Results {
    Results {
        generated_at_unix: unix_now(),
        mode: plan.mode.into(),
        command: args
            .invocation
            .clone()
            .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" ")),
        git: git_describe(),
        machine: m.machine,
        loadavg_at_end: sysinfo::loadavg(),
        duration_s: run_started.elapsed().as_secs_f64(),
        settings: Settings {
            warmup_s: plan.warmup.as_secs_f64(),
            measure_s: plan.measure.as_secs_f64(),
            rounds: args.rounds,
            keys: args.keys,
            value_bytes: args.value_bytes,
            cairn_driver: format!("{:?}", args.cairn_driver).to_lowercase(),
            etcd_conns_per_member: args.etcd_conns,
            etcd_version: m.etcd_version,
            op_timeout_s: OP_TIMEOUT.as_secs_f64(),
            cairn_max_staleness_ms: cairn::MAX_STALENESS_MS,
            keep_cpus_busy: args.keep_cpus_busy,
            cairn_node_binary: m.node_bin_info,
            cairn_config: args
                .cairn_config
                .as_ref()
                .and_then(|c| std::fs::read_to_string(c).ok()),
        },
        fdatasync_start: m.fdatasync_start,
        fdatasync_end: m.fdatasync_end,
        fdatasync_busy_start: m.fdatasync_busy_start,
        fdatasync_busy_end: m.fdatasync_busy_end,
        fdatasync_append_start: Some(m.fdatasync_append_start),
        loadgen: m.loadgen,
        preload: m.preload,
        rows: m.rows,
        resources: m.resources,
        scale: m.scale,
    }
}

/// OUT/MODE/results.json and, but for a custom run, latest.json (when `write_json`); the
/// plots in OUT/MODE/; the markdown report (BENCH.md for a full run, else OUT/MODE/REPORT.md,
/// unless `--report` names one).
pub(super) fn write_outputs(args: &BenchArgs, results: &Results, write_json: bool) -> Result<()> {
    let mode_dir = args.out.join(&results.mode);
    std::fs::create_dir_all(&mode_dir)?;
    let custom = results.mode == "custom";
    if write_json {
        let json = serde_json::to_vec_pretty(results)?;
        if !custom {
            std::fs::write(args.out.join("latest.json"), &json)?;
        }
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
        if results.mode == "full" {
            PathBuf::from("BENCH.md")
        } else {
            mode_dir.join("REPORT.md")
        }
    });
    markdown::write_markdown(results, &report_path, &plots)?;
    println!(
        "bench: wrote {}{} and {} plot(s) in {}",
        if write_json && !custom {
            format!("{}, ", args.out.join("latest.json").display())
        } else {
            String::new()
        },
        report_path.display(),
        plots.len(),
        mode_dir.display()
    );
    println!("{}", tables::summary_table(results));
    for (plain, secure, table) in tables::secure_cost_tables(&results.rows) {
        println!("auth + TLS cost ({secure} ÷ {plain}):\n{table}");
    }
    Ok(())
}

pub(super) fn unix_now() -> u64 {
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
pub(super) fn binary_info(path: &Path) -> String {
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
