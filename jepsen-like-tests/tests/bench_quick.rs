//! The benchmark's CI smoke: `cairn-jepsen bench --quick` against a fresh 3-node cairn
//! cluster and a 3-member etcd cluster on loopback (a few seconds per point), then checks
//! what it wrote: a row per (system, workload, clients) with throughput and latency, the
//! disk's fdatasync rate, the report and the plots. It proves the harness runs end to end;
//! the numbers themselves come from the full run (`scripts/bench`), not from here. A
//! second, shorter run measures both systems with auth and TLS on beside their plain twins.
//!
//! Needs etcd (`etcd` in PATH, or `$ETCD_BIN`; Debian `etcd-server`, installed by
//! `scripts/test`), checked by [`prereq`]: under CI (`CI=true`) the test fails without it,
//! elsewhere it skips loudly.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use cairn_jepsen::chaos::planted;
use cairn_jepsen::prereq::{self, Prereq};
use serde_json::Value;

const SYSTEMS: [&str; 2] = ["cairn", "etcd"];
const WORKLOADS: [&str; 4] = ["write", "read-linearizable", "read-bounded", "mixed"];
const CLIENTS: [u64; 4] = [1, 16, 64, 256];
/// A whole run must end within this (the quick one takes 2-3 minutes on 2 cores).
const TIME_LIMIT_SECS: u64 = 420;
/// Failed operations tolerated per point (timeouts on a machine stall), as a fraction.
const ERRORS_MAX_FRACTION: f64 = 0.01;

/// The benchmark's clusters listen on fixed ports: one run at a time.
static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A finished `cairn-jepsen bench` run: its results JSON (`OUT/MODE/results.json`), its
/// markdown report, and whether it wrote `OUT/latest.json`.
struct Run {
    latest: Value,
    wrote_latest: bool,
    report: String,
    out: tempfile::TempDir,
}

#[test]
fn quick_bench_measures_both_systems() {
    if !prereq::require("quick_bench_measures_both_systems", &[Prereq::Etcd]) {
        return;
    }
    let run = bench(&["--quick"]);
    let latest = &run.latest;
    assert_eq!(latest["mode"], "quick");
    assert!(run.wrote_latest, "a quick run writes latest.json");
    let fsync_rate = latest["fdatasync_start"]["ops_per_s"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(
        fsync_rate > 0.0,
        "fdatasync rate: {}",
        latest["fdatasync_start"]
    );
    let rows = latest["rows"].as_array().expect("rows");
    for system in SYSTEMS {
        for workload in WORKLOADS {
            for clients in CLIENTS {
                check_row(rows, system, workload, clients, 256);
            }
        }
        // The smoke's one large-value point.
        check_row(rows, system, "write", 16, 65536);
    }
    for row in ["| write | 64 | 256 B |", "| write | 16 | 64 KiB |"] {
        assert!(run.report.contains(row), "no {row} in {}", run.report);
    }
    assert_plots(run.out.path());
}

/// Both systems with auth and TLS on beside their plain twins (#16's budget compares
/// them): every secure cluster starts, serves writes and linearizable reads, and the
/// report sets each beside its twin.
#[test]
fn secure_twins_are_measured_beside_the_plain_systems() {
    if !prereq::require(
        "secure_twins_are_measured_beside_the_plain_systems",
        &[Prereq::Etcd],
    ) {
        return;
    }
    let run = bench(&[
        "--systems",
        "cairn,cairn-secure,etcd,etcd-secure",
        "--clients",
        "16",
        "--workloads",
        "write,read-linearizable",
        "--point-secs",
        "1",
        "--warmup-secs",
        "0.3",
        "--keys",
        "2000",
    ]);
    // Narrowed (one client count, two workloads, short points): never the published run.
    assert_eq!(run.latest["mode"], "custom");
    assert!(!run.wrote_latest, "a custom run leaves latest.json alone");
    let rows = run.latest["rows"].as_array().expect("rows");
    for system in ["cairn", "cairn-secure", "etcd", "etcd-secure"] {
        for workload in ["write", "read-linearizable"] {
            check_row(rows, system, workload, 16, 256);
        }
    }
    for heading in [
        "### The cost of auth + TLS (cairn-secure ÷ cairn)",
        "### The cost of auth + TLS (etcd-secure ÷ etcd)",
    ] {
        assert!(
            run.report.contains(heading),
            "no {heading} in {}",
            run.report
        );
    }
}

/// Runs `cairn-jepsen bench` with `args` on a normal node build, in a fresh directory.
fn bench(args: &[&str]) -> Run {
    let _one = ONE_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let node_bin = planted::build::normal().expect("building cairn-node");
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("REPORT.md");
    let status = Command::new(env!("CARGO_BIN_EXE_cairn-jepsen"))
        .arg("bench")
        .args(args)
        .arg("--node-bin")
        .arg(&node_bin)
        .arg("--out")
        .arg(out.path())
        .arg("--report")
        .arg(&report)
        .arg("--work-dir")
        .arg(out.path())
        .arg("--time-limit-secs")
        .arg(TIME_LIMIT_SECS.to_string())
        .status()
        .expect("running cairn-jepsen bench");
    assert!(status.success(), "bench {args:?} failed: {status}");
    let results = ["quick", "custom", "full"]
        .map(|mode| out.path().join(mode).join("results.json"))
        .into_iter()
        .find(|path| path.is_file())
        .expect("OUT/MODE/results.json");
    Run {
        latest: serde_json::from_slice(&std::fs::read(results).unwrap()).unwrap(),
        wrote_latest: out.path().join("latest.json").is_file(),
        report: std::fs::read_to_string(&report).unwrap(),
        out,
    }
}

fn check_row(rows: &[Value], system: &str, workload: &str, clients: u64, value_bytes: u64) {
    let row = rows
        .iter()
        .find(|r| {
            r["system"] == system
                && r["workload"] == workload
                && r["clients"] == clients
                && r["value_bytes"] == value_bytes
        })
        .unwrap_or_else(|| panic!("no row for {system} {workload} c={clients} {value_bytes} B"));
    let what = format!("{system} {workload} c={clients} {value_bytes} B: {row}");
    let ops = row["ops"].as_f64().unwrap_or(0.0);
    assert!(row["ops_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{what}");
    for latency in ["p50_ms", "p99_ms", "p999_ms"] {
        assert!(
            row[latency].as_f64().unwrap_or(0.0) > 0.0,
            "{latency} of {what}"
        );
    }
    assert!(
        row["p50_ms"].as_f64() <= row["p99_ms"].as_f64(),
        "p50 above p99: {what}"
    );
    let errors = row["errors"].as_f64().unwrap_or(f64::MAX);
    assert!(errors <= ops * ERRORS_MAX_FRACTION, "errors: {what}");
}

fn assert_plots(out: &Path) {
    let pngs: Vec<_> = walk(out)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    assert!(
        pngs.iter().any(|p| p.ends_with("throughput.png")),
        "no throughput plot among {pngs:?}"
    );
    for png in &pngs {
        let len = std::fs::metadata(png).unwrap().len();
        assert!(len > 1_000, "{} is only {len} bytes", png.display());
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}
