//! Results of a run: the JSON model (`latest.json`, `OUT/MODE/results.json`), which
//! `--render-from` reads back; the markdown report made from it is in `markdown`.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::loadgen::LoadgenCheck;
use super::scale::ScaleResults;
use super::sysinfo::{Fdatasync, Machine};
use super::workload::{PointResult, PointSpec, Workload};

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
    /// ops/s of every round of this point (`--rounds`), in run order; this row is the
    /// median one. Empty in results written before rounds existed.
    #[serde(default)]
    pub rounds_ops_per_s: Vec<f64>,
    /// Reads and mutations apart, for the workloads that mix them (`mixed`); absent
    /// elsewhere and in results written before the split existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_kind: Option<ByKind>,
}

/// A mixed point's latency, reads and mutations apart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ByKind {
    pub reads: KindLatency,
    pub mutations: KindLatency,
}

/// Latency of one kind of operation: those served that started in the measured window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KindLatency {
    pub ops: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl KindLatency {
    fn of(h: &Histogram<u64>) -> KindLatency {
        KindLatency {
            ops: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
        }
    }
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
            rounds_ops_per_s: vec![ops_per_s],
            by_kind: (spec.workload == Workload::Mixed).then(|| ByKind {
                reads: KindLatency::of(&r.by_kind.reads),
                mutations: KindLatency::of(&r.by_kind.mutations),
            }),
        }
    }
}

#[cfg(test)]
impl Row {
    /// A row for tests of the tables and the rounds: the given point and numbers, every
    /// other field zero or empty.
    pub(super) fn sample(
        system: &str,
        workload: &str,
        clients: usize,
        value_bytes: usize,
        ops_per_s: f64,
        p50_ms: f64,
        p99_ms: f64,
    ) -> Row {
        serde_json::from_value(serde_json::json!({
            "system": system, "workload": workload, "clients": clients,
            "value_bytes": value_bytes, "ops_per_s": ops_per_s, "p50_ms": p50_ms,
            "p99_ms": p99_ms, "p999_ms": 0.0, "mean_ms": 0.0, "max_ms": 0.0, "ops": 0,
            "errors": 0, "rejected": 0, "error_samples": {},
            "cpu": {"server_cores": 0.0, "server_by_process": {}, "loadgen_cores": 0.0,
                    "idle_system_cores": 0.0, "other_cores": 0.0},
            "server_cpu_us_per_op": 0.0, "loadgen_cpu_us_per_op": 0.0,
            "server_metrics": {}, "latency_cdf": [], "note": ""
        }))
        .expect("a sample row")
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

fn one_round() -> u32 {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    pub warmup_s: f64,
    pub measure_s: f64,
    /// Rounds per point (`--rounds`); results written before rounds existed had one.
    #[serde(default = "one_round")]
    pub rounds: u32,
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

/// The row of `system` at one point, if the run has it.
pub fn find_row<'a>(
    rows: &'a [Row],
    system: &str,
    workload: &str,
    clients: usize,
    value_bytes: usize,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.system == system
            && r.workload == workload
            && r.clients == clients
            && r.value_bytes == value_bytes
    })
}

impl Results {
    pub fn find(
        &self,
        system: &str,
        workload: &str,
        clients: usize,
        value_bytes: usize,
    ) -> Option<&Row> {
        find_row(&self.rows, system, workload, clients, value_bytes)
    }
}

/// The points of `rows`, (workload, clients, value_bytes), in run order without repeats.
pub fn points(rows: &[Row]) -> Vec<(String, usize, usize)> {
    let mut out: Vec<(String, usize, usize)> = Vec::new();
    for r in rows {
        let p = (r.workload.clone(), r.clients, r.value_bytes);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
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
