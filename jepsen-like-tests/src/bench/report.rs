//! Results of a run: the JSON model (`latest.json`) and the markdown report.
//!
//! The report is regenerated on every run, except the block between `<!-- notes:begin -->`
//! and `<!-- notes:end -->`, which is carried over from the existing file: that is where
//! hand-written analysis lives.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::loadgen::LoadgenCheck;
use super::scale::ScaleResults;
use super::sysinfo::{Fdatasync, Machine};
use super::workload::{PointResult, PointSpec, Workload};

const NOTES_BEGIN: &str = "<!-- notes:begin -->";
const NOTES_END: &str = "<!-- notes:end -->";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CpuUsage {
    /// Cores used by the system under test during the point (all its processes).
    pub server_cores: f64,
    pub server_by_process: BTreeMap<String, f64>,
    /// Cores used by this load generator.
    pub loadgen_cores: f64,
    /// Cores used by the other, idle system (heartbeats, token refresh).
    pub idle_system_cores: f64,
    /// Everything else on the machine (other users of a shared box): noise.
    pub other_cores: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub system: String,
    pub workload: String,
    pub clients: usize,
    pub value_bytes: usize,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub mean_ms: f64,
    pub max_ms: f64,
    /// Served operations (ok + rejected) that completed inside the measured window.
    pub ops: u64,
    /// Transport failures, timeouts, 5xx: not served.
    pub errors: u64,
    /// Definite refusals by the system's rules (4xx), served and counted in ops.
    pub rejected: u64,
    pub error_samples: BTreeMap<String, u64>,
    pub cpu: CpuUsage,
    /// Server CPU per served operation, in microseconds.
    pub server_cpu_us_per_op: f64,
    /// Load-generator CPU per served operation, in microseconds.
    pub loadgen_cpu_us_per_op: f64,
    /// Deltas of the leader's counters over the point.
    pub server_metrics: BTreeMap<String, f64>,
    /// (quantile, latency ms), for CDF plots.
    pub latency_cdf: Vec<(f64, f64)>,
    pub note: String,
}

impl Row {
    pub fn new(
        system: &str,
        spec: PointSpec,
        r: &PointResult,
        cpu: CpuUsage,
        server_metrics: BTreeMap<String, f64>,
        note: &str,
    ) -> Row {
        let ms = |us: u64| us as f64 / 1000.0;
        let h = &r.hist;
        let mut latency_cdf: Vec<(f64, f64)> = (0..=32)
            .map(|k| {
                let q = 1.0 - 10f64.powf(-(k as f64) / 8.0);
                (q, ms(h.value_at_quantile(q)))
            })
            .collect();
        latency_cdf.push((1.0, ms(h.max())));
        let ops_per_s = r.ops_per_s();
        let per_op = |cores: f64| {
            if r.served_in_window > 0 {
                cores * r.window_s * 1e6 / r.served_in_window as f64
            } else {
                0.0
            }
        };
        let server_cpu_us_per_op = per_op(cpu.server_cores);
        let loadgen_cpu_us_per_op = per_op(cpu.loadgen_cores);
        Row {
            system: system.into(),
            workload: spec.workload.name().into(),
            clients: spec.clients,
            value_bytes: spec.value_bytes,
            ops_per_s,
            p50_ms: ms(h.value_at_quantile(0.5)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            mean_ms: h.mean() / 1000.0,
            max_ms: ms(h.max()),
            ops: r.served_in_window,
            errors: r.errors,
            rejected: r.rejected,
            error_samples: r.error_samples.clone(),
            cpu,
            server_cpu_us_per_op,
            loadgen_cpu_us_per_op,
            server_metrics,
            latency_cdf,
            note: note.into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreloadRow {
    pub system: String,
    pub keys: u64,
    pub ops_per_request: u64,
    pub concurrency: usize,
    pub seconds: f64,
    pub keys_per_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResourceRow {
    pub system: String,
    pub process: String,
    pub rss_mib: f64,
    pub data_dir_mib: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    pub warmup_s: f64,
    pub measure_s: f64,
    pub keys: u64,
    pub value_bytes: usize,
    pub cairn_driver: String,
    pub etcd_conns_per_member: usize,
    pub etcd_version: String,
    pub op_timeout_s: f64,
    pub cairn_max_staleness_ms: u64,
    /// Diagnostic mode: SCHED_IDLE spinners kept every core busy during the points.
    pub keep_cpus_busy: bool,
    /// The cairn-node binary measured (path, size, build time).
    pub cairn_node_binary: String,
    /// Contents of the `--cairn-config` file given to every node, if any.
    pub cairn_config: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub generated_at_unix: u64,
    pub mode: String,
    pub command: String,
    pub git: String,
    pub machine: Machine,
    pub loadavg_at_end: String,
    pub duration_s: f64,
    pub settings: Settings,
    /// The raw fdatasync probe alone (what the brief asks for) ...
    pub fdatasync_start: Fdatasync,
    pub fdatasync_end: Fdatasync,
    /// ... and with every core kept busy by a spinning thread (no idle-vCPU wake-ups).
    pub fdatasync_busy_start: Fdatasync,
    pub fdatasync_busy_end: Fdatasync,
    /// The probe appending to a growing file, as a log does (absent in older results).
    #[serde(default)]
    pub fdatasync_append_start: Option<Fdatasync>,
    pub loadgen: Option<LoadgenCheck>,
    pub preload: Vec<PreloadRow>,
    pub rows: Vec<Row>,
    pub resources: Vec<ResourceRow>,
    pub scale: Option<ScaleResults>,
}

impl Results {
    pub fn find(
        &self,
        system: &str,
        workload: &str,
        clients: usize,
        value_bytes: usize,
    ) -> Option<&Row> {
        self.rows.iter().find(|r| {
            r.system == system
                && r.workload == workload
                && r.clients == clients
                && r.value_bytes == value_bytes
        })
    }

    /// (workload, clients, value_bytes) in run order, without repeats.
    pub fn points(&self) -> Vec<(String, usize, usize)> {
        let mut out: Vec<(String, usize, usize)> = Vec::new();
        for r in &self.rows {
            let p = (r.workload.clone(), r.clients, r.value_bytes);
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.decimals$}"))
}

fn bytes_label(b: usize) -> String {
    #[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; MSRV is 1.85
    let whole_kib = b >= 1024 && b % 1024 == 0;
    if whole_kib {
        format!("{} KiB", b / 1024)
    } else {
        format!("{b} B")
    }
}

/// The side-by-side comparison table (also printed at the end of a run).
pub fn summary_table(res: &Results) -> String {
    let mut s = String::new();
    s.push_str("| workload | clients | value | cairn ops/s | etcd ops/s | ops/s cairn÷etcd | cairn p50 ms | etcd p50 ms | cairn p99 ms | etcd p99 ms | p99 cairn÷etcd | cairn p99.9 ms | etcd p99.9 ms | errors cairn/etcd |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (w, c, vb) in res.points() {
        let a = res.find("cairn", &w, c, vb);
        let b = res.find("etcd", &w, c, vb);
        let _ = writeln!(
            s,
            "| {w} | {c} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} |",
            bytes_label(vb),
            num(a.map(|r| r.ops_per_s), 0),
            num(b.map(|r| r.ops_per_s), 0),
            ratio(a.map(|r| r.ops_per_s), b.map(|r| r.ops_per_s)),
            num(a.map(|r| r.p50_ms), 2),
            num(b.map(|r| r.p50_ms), 2),
            num(a.map(|r| r.p99_ms), 2),
            num(b.map(|r| r.p99_ms), 2),
            ratio(a.map(|r| r.p99_ms), b.map(|r| r.p99_ms)),
            num(a.map(|r| r.p999_ms), 2),
            num(b.map(|r| r.p999_ms), 2),
            a.map_or("–".into(), |r| (r.errors).to_string()),
            b.map_or("–".into(), |r| (r.errors).to_string()),
        );
    }
    s
}

fn efficiency_table(res: &Results) -> String {
    let mut s = String::new();
    s.push_str("| system | workload | clients | value | server cores | server CPU µs/op | load-gen cores | load-gen CPU µs/op | other load (cores) | leader counters over the point |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in &res.rows {
        let m = &r.server_metrics;
        let counters = if r.system == "cairn" {
            let muts = m.get("cairn_mutations_ok_total").copied().unwrap_or(0.0)
                + m.get("cairn_mutations_rejected_total")
                    .copied()
                    .unwrap_or(0.0);
            let entries = m.get("cairn_last_log_index").copied().unwrap_or(0.0);
            let rounds = m.get("cairn_read_index_rounds").copied().unwrap_or(0.0);
            let lin = m
                .get("cairn_reads_linearizable_total")
                .copied()
                .unwrap_or(0.0);
            let mut parts = Vec::new();
            if muts > 0.0 {
                parts.push(format!(
                    "{muts:.0} mutations in {entries:.0} log entries ({:.1}/entry)",
                    muts / entries.max(1.0)
                ));
            }
            if lin > 0.0 {
                parts.push(format!(
                    "{lin:.0} lin. reads, {rounds:.0} ReadIndex rounds ({:.1} reads/round)",
                    lin / rounds.max(1.0)
                ));
            }
            parts.join("; ")
        } else {
            let fsyncs = m
                .get("etcd_disk_wal_fsync_duration_seconds_count")
                .copied()
                .unwrap_or(0.0);
            let proposals = m
                .get("etcd_server_proposals_committed_total")
                .copied()
                .unwrap_or(0.0);
            if fsyncs > 0.0 {
                format!(
                    "{proposals:.0} proposals, {fsyncs:.0} WAL fsyncs ({:.1} proposals/fsync)",
                    proposals / fsyncs
                )
            } else {
                String::new()
            }
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} | {} |",
            r.system,
            r.workload,
            r.clients,
            bytes_label(r.value_bytes),
            r.cpu.server_cores,
            r.server_cpu_us_per_op,
            r.cpu.loadgen_cores,
            r.loadgen_cpu_us_per_op,
            r.cpu.other_cores,
            counters
        );
    }
    s
}

/// `to` relative to directory `from` when it lies below it, else as given.
fn relative(from: &Path, to: &Path) -> String {
    let from = from.canonicalize().unwrap_or_else(|_| from.to_path_buf());
    let to_abs = to.canonicalize().unwrap_or_else(|_| to.to_path_buf());
    match to_abs.strip_prefix(&from) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => to.display().to_string(),
    }
}

fn carried_notes(path: &Path) -> String {
    let existing = std::fs::read_to_string(path).unwrap_or_default();
    match (existing.find(NOTES_BEGIN), existing.find(NOTES_END)) {
        (Some(a), Some(b)) if b > a => existing[a + NOTES_BEGIN.len()..b].trim().to_string(),
        _ => "_(no observations recorded yet: write them between the notes markers; a rerun keeps them)_".into(),
    }
}

pub fn write_markdown(res: &Results, path: &Path, plots: &[PathBuf]) -> Result<()> {
    let notes = carried_notes(path);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut s = String::new();
    let m = &res.machine;
    let _ = writeln!(s, "# cairn vs etcd: benchmark\n");
    let _ = writeln!(
        s,
        "_Generated by `{}` ({} mode) on {} from git `{}`; the run took {:.1} min. \
         Everything but the Observations block is rewritten by the next run._\n",
        res.command,
        res.mode,
        utc(res.generated_at_unix),
        res.git,
        res.duration_s / 60.0
    );
    let _ = writeln!(s, "## Setup\n");
    let _ = writeln!(
        s,
        "- **Machine:** {} cores ({}), {} MiB RAM, Linux {}.",
        m.nproc, m.cpu_model, m.mem_total_mib, m.kernel
    );
    let _ = writeln!(
        s,
        "- **Disk:** {} (both systems' data dirs in one work dir on it).",
        m.disk
    );
    let (a, b, ba, bb) = (
        &res.fdatasync_start,
        &res.fdatasync_end,
        &res.fdatasync_busy_start,
        &res.fdatasync_busy_end,
    );
    let _ = writeln!(
        s,
        "- **Raw fdatasync rate of that disk** ({}, {:.0} s in the bench work dir): **{:.0}/s, mean {:.3} ms** (p50 {:.3}, p99 {:.3}) at the start; {:.0}/s, mean {:.3} ms at the end. \
         The same probe while {} SCHED_IDLE threads spin on the CPUs: {:.0}/s, mean {:.3} ms at the start; {:.0}/s, mean {:.3} ms at the end. \
         When the two differ a lot, what a lone thread sees is dominated by the machine (other jobs' I/O, wake-ups of idle vCPUs), not by the device.",
        a.method, a.ops as f64 / a.ops_per_s.max(1e-9), a.ops_per_s, a.mean_ms, a.p50_ms, a.p99_ms, b.ops_per_s, b.mean_ms,
        ba.busy_neighbors, ba.ops_per_s, ba.mean_ms, bb.ops_per_s, bb.mean_ms
    );
    if let Some(ap) = &res.fdatasync_append_start {
        let _ = writeln!(
            s,
            "- **Appending fdatasync** ({}, at the start): {:.0}/s, mean {:.3} ms (p50 {:.3}, p99 {:.3}). A log's writes grow its file, so each fdatasync also journals the new size: this is the floor under one durable append, on the leader and on each follower.",
            ap.method, ap.ops_per_s, ap.mean_ms, ap.p50_ms, ap.p99_ms
        );
    }
    let _ = writeln!(
        s,
        "- **Load average:** {} at the start, {} at the end (1/5/15 min).",
        m.loadavg_at_start, res.loadavg_at_end
    );
    let st = &res.settings;
    let _ = writeln!(
        s,
        "- **cairn:** 3 `cairn-node` processes (dev profile, {} config; binary {}), loopback; load generator = `{}` driver ({}; writes and linearizable reads sent straight to the leader found with `GET /cluster/status`, not forwarded).",
        if st.cairn_config.is_some() { "overridden" } else { "default" },
        st.cairn_node_binary,
        st.cairn_driver,
        if st.cairn_driver == "raw" {
            "one keep-alive HTTP/1.1 connection per client and node, driven by the client's own task"
        } else {
            "the public `cairn_client` library, one pinned client per node, retries off"
        }
    );
    let _ = writeln!(
        s,
        "- **etcd:** {} × 3 members (Debian `etcd-server`, default durability: WAL fdatasync per commit; default settings except `--quota-backend-bytes` 8 GiB instead of 2 GiB, which the 64 KiB write points would otherwise exhaust, as etcd does not compact its MVCC history by default), loopback; native gRPC API via `etcd-client`, up to {} connections per member; writes and linearizable reads at the leader.",
        if st.etcd_version.is_empty() { "etcd".to_string() } else { format!("etcd {}", st.etcd_version) },
        st.etcd_conns_per_member
    );
    let _ = writeln!(
        s,
        "- **Points:** closed loop, {:.1} s warm-up + {:.1} s measured per point; {} keys (uniform), {} values; per-op timeout {:.0} s; cairn and etcd alternate which goes first at each point; both clusters stay up for the whole run (the idle one costs a little CPU, shown as `idle_system_cores` in the JSON).",
        st.warmup_s, st.measure_s, st.keys, bytes_label(st.value_bytes), st.op_timeout_s
    );
    if let Some(l) = &res.loadgen {
        let _ = writeln!(
            s,
            "- **Load-generator cost:** against an HTTP/1.1 stub on its own thread ({} clients), the raw cairn driver spends {:.0} µs of CPU per request, i.e. one core of this machine generates about {:.0} req/s. The measured load-generator CPU of every point is in the CPU table below: on {} cores the client and the servers share the CPUs, for both systems alike.",
            l.clients, l.client_cpu_us_per_req, l.client_req_per_core_s, res.machine.nproc
        );
    }
    let others: Vec<f64> = res.rows.iter().map(|r| r.cpu.other_cores).collect();
    if !others.is_empty() {
        let mean = others.iter().sum::<f64>() / others.len() as f64;
        let max = others.iter().cloned().fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "- **Noise:** other processes on the machine used {mean:.2} cores on average during the points (max {max:.2}) out of {}.{}",
            res.machine.nproc,
            if mean > 0.25 * res.machine.nproc as f64 {
                " **The machine was shared and busy: treat absolute numbers as noisy; the alternating order keeps the cairn/etcd ratios fairer than the absolutes.**"
            } else {
                ""
            }
        );
    }
    if let Some(cfg) = &st.cairn_config {
        let _ = writeln!(s, "- **cairn config override** (`--cairn-config`, passed to every node):\n\n```toml\n{}\n```", cfg.trim());
    }
    if st.keep_cpus_busy {
        let _ = writeln!(s, "- **Diagnostic mode `--keep-cpus-busy`:** SCHED_IDLE threads spun on every core during the points, so no vCPU ever halted (their CPU time shows up as load-generator CPU). Not a normal run.");
    }
    let _ = writeln!(s, "\n### Workloads\n");
    let _ = writeln!(s, "- `write`: upserts of {} values to random keys. cairn `POST /v1/write` with a `request_id` (as the client library always sends) and `clear_tombstone`/`override_revocation` (no-ops on live keys; they re-establish keys the mixed workload forgot or revoked, as etcd `Put` recreates deleted keys); etcd `Put`.", bytes_label(st.value_bytes));
    let _ = writeln!(s, "- `read-linearizable`: cairn `consistency: linearizable` at the leader (ReadIndex); etcd default (linearizable) `Range` at the leader.");
    let _ = writeln!(
        s,
        "- `read-bounded`: cairn `consistency: bounded, max_staleness_ms: {}` spread over all 3 nodes; etcd **serializable** `Range` spread over all 3 members. **etcd gives no staleness bound** for serializable reads (a partitioned member keeps answering from arbitrarily old state); cairn refuses once its read token is older than the bound.",
        st.cairn_max_staleness_ms
    );
    let _ = writeln!(s, "- `mixed` (agent-like): cairn 70% linearizable reads, 20% writes (re-establishing with `clear_tombstone`/`override_revocation`), 5% forget, 5% revoke; etcd 70% linearizable gets, 20% puts, 10% deletes. cairn 409s (e.g. revoke of a forgotten key) are counted as `rejected`, served, not errors.");
    let _ = writeln!(s, "\n## Results\n");
    let _ = writeln!(
        s,
        "Ratios are cairn ÷ etcd: above 1× cairn has more throughput, or a higher (worse) p99.\n"
    );
    s.push_str(&summary_table(res));
    let _ = writeln!(s, "\n### Where the CPU went\n");
    let _ = writeln!(s, "`server cores`: CPU of the system's 3 processes during the point; `other load`: CPU used by anything else on the machine (other jobs sharing it) — high values mean a noisy point.\n");
    s.push_str(&efficiency_table(res));
    if !res.preload.is_empty() {
        let _ = writeln!(s, "\n### Preload (bulk load of the key space)\n");
        s.push_str("| system | keys | ops per request | in flight | seconds | keys/s |\n|---|---:|---:|---:|---:|---:|\n");
        for p in &res.preload {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.1} | {:.0} |",
                p.system, p.keys, p.ops_per_request, p.concurrency, p.seconds, p.keys_per_s
            );
        }
    }
    if !res.resources.is_empty() {
        let _ = writeln!(s, "\n### Memory and disk after the comparison\n");
        s.push_str("| system | process | RSS MiB | data dir MiB |\n|---|---|---:|---:|\n");
        for r in &res.resources {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.0} |",
                r.system, r.process, r.rss_mib, r.data_dir_mib
            );
        }
    }
    let errors: Vec<&super::report::Row> = res
        .rows
        .iter()
        .filter(|r| !r.error_samples.is_empty())
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(s, "\n### Errors and rejections (samples)\n");
        for r in errors {
            let _ = writeln!(
                s,
                "- {} {} c={}: {:?}",
                r.system, r.workload, r.clients, r.error_samples
            );
        }
    }
    if let Some(sc) = &res.scale {
        s.push_str(&super::scale::markdown(sc));
    }
    if !plots.is_empty() {
        let _ = writeln!(s, "\n## Plots\n");
        for p in plots {
            let rel = relative(dir, p);
            let _ = writeln!(
                s,
                "![{}]({rel})\n",
                p.file_stem().and_then(|x| x.to_str()).unwrap_or("plot")
            );
        }
    }
    let _ = writeln!(
        s,
        "\n## Observations\n\n{NOTES_BEGIN}\n{notes}\n{NOTES_END}"
    );
    let _ = Workload::ALL;
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

/// "2026-11-30 06:07 UTC" for a unix time (civil-from-days, proleptic Gregorian).
pub fn utc(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60
    )
}
