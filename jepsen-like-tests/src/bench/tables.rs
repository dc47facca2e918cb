//! The report's tables: cairn beside etcd per point (also printed at the end of a run) and
//! where the CPU went per row.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::report::{Results, Row};

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.decimals$}"))
}

pub(super) fn bytes_label(b: usize) -> String {
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

/// The cost of auth + TLS (SPEC §8): `cairn-secure` beside `cairn` per point, measured in
/// the same run; empty unless both ran. Ratios are secure ÷ plain (throughput below 1× and
/// CPU per op above 1× are the cost).
pub fn secure_cost_table(res: &Results) -> String {
    let both = |system: &str| res.rows.iter().any(|r| r.system == system);
    if !both("cairn") || !both("cairn-secure") {
        return String::new();
    }
    let mut s = String::new();
    s.push_str("| workload | clients | value | cairn ops/s | cairn-secure ops/s | ops/s secure÷plain | cairn p50 ms | secure p50 ms | cairn p99 ms | secure p99 ms | cairn server CPU µs/op | secure server CPU µs/op | CPU/op secure÷plain | ops/s secure÷plain by round |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (w, c, vb) in res.points() {
        let a = res.find("cairn", &w, c, vb);
        let b = res.find("cairn-secure", &w, c, vb);
        let _ = writeln!(
            s,
            "| {w} | {c} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            bytes_label(vb),
            num(a.map(|r| r.ops_per_s), 0),
            num(b.map(|r| r.ops_per_s), 0),
            ratio(b.map(|r| r.ops_per_s), a.map(|r| r.ops_per_s)),
            num(a.map(|r| r.p50_ms), 2),
            num(b.map(|r| r.p50_ms), 2),
            num(a.map(|r| r.p99_ms), 2),
            num(b.map(|r| r.p99_ms), 2),
            num(a.map(|r| r.server_cpu_us_per_op), 0),
            num(b.map(|r| r.server_cpu_us_per_op), 0),
            ratio(
                b.map(|r| r.server_cpu_us_per_op),
                a.map(|r| r.server_cpu_us_per_op)
            ),
            round_ratios(a, b),
        );
    }
    s
}

/// `b ÷ a` throughput of each round, paired in run order (the two systems ran each round
/// back to back); "–" when either has no rounds recorded.
fn round_ratios(a: Option<&Row>, b: Option<&Row>) -> String {
    let (Some(a), Some(b)) = (a, b) else {
        return "–".into();
    };
    let ratios: Vec<String> = a
        .rounds_ops_per_s
        .iter()
        .zip(&b.rounds_ops_per_s)
        .map(|(a, b)| ratio(Some(*b), Some(*a)))
        .collect();
    match ratios.is_empty() {
        true => "–".into(),
        false => ratios.join(" "),
    }
}

/// What the leader's counters say about batching (cairn: mutations per log entry, reads per
/// ReadIndex round; etcd: proposals per WAL fsync).
fn counters_text(r: &Row) -> String {
    if r.system.starts_with("cairn") {
        cairn_counters(&r.server_metrics)
    } else {
        etcd_counters(&r.server_metrics)
    }
}

fn cairn_counters(m: &BTreeMap<String, f64>) -> String {
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
}

fn etcd_counters(m: &BTreeMap<String, f64>) -> String {
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
}

pub(super) fn efficiency_table(res: &Results) -> String {
    let mut s = String::new();
    s.push_str("| system | workload | clients | value | server cores | server CPU µs/op | load-gen cores | load-gen CPU µs/op | other load (cores) | leader counters over the point |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for r in &res.rows {
        let counters = counters_text(r);
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
