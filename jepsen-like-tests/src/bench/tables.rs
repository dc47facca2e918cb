//! The report's tables: the performance goals judged on the run, cairn beside etcd per
//! point (also printed at the end of a run) and where the CPU went per row.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::report::{find_row, points, ByKind, Results, Row};
use super::scale::{Join, Level, Restart, ScaleResults};

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

/// A throughput goal: cairn ÷ etcd at one point at least `at_least` (`stretch`: the further
/// aim), and with `p99_no_higher`, cairn's p99 no higher than etcd's. `value_bytes` 0 is
/// the run's own value size (256 B by default).
struct ThroughputGoal {
    workload: &'static str,
    clients: usize,
    value_bytes: usize,
    at_least: f64,
    stretch: Option<f64>,
    p99_no_higher: bool,
}

const fn goal(
    workload: &'static str,
    clients: usize,
    value_bytes: usize,
    at_least: f64,
    stretch: Option<f64>,
    p99_no_higher: bool,
) -> ThroughputGoal {
    ThroughputGoal {
        workload,
        clients,
        value_bytes,
        at_least,
        stretch,
        p99_no_higher,
    }
}

const THROUGHPUT_GOALS: [ThroughputGoal; 7] = [
    goal("write", 64, 0, 1.5, None, true),
    goal("write", 256, 0, 1.5, None, true),
    goal("write", 16, 4096, 1.0, Some(1.5), true),
    goal("write", 64, 4096, 1.0, Some(1.5), true),
    goal("write", 16, 65536, 1.0, Some(1.5), true),
    goal("write", 64, 65536, 1.0, Some(1.5), true),
    goal("mixed", 16, 0, 3.0, None, false),
];

/// The scale goals, at 1M keys: RSS per node, a restarted follower caught up, a new node
/// caught up.
const GOAL_KEYS: u64 = 1_000_000;
const GOAL_RSS_MIB: f64 = 300.0;
const GOAL_RESTART_S: f64 = 10.0;
const GOAL_JOIN_S: f64 = 60.0;

/// The project's performance goals, each judged on this run: what was measured, cairn ÷
/// etcd, and whether it is met. A goal whose point the run lacks (`--quick` has no 64 KiB
/// writes and no 1M keys) says so.
pub(super) fn goals_table(res: &Results) -> String {
    goals(&res.rows, res.scale.as_ref(), res.settings.value_bytes)
}

fn goals(rows: &[Row], scale: Option<&ScaleResults>, base_value: usize) -> String {
    let mut s = String::from("| goal | measured | met |\n|---|---|---|\n");
    for g in &THROUGHPUT_GOALS {
        s.push_str(&throughput_goal(g, rows, base_value));
    }
    s.push_str(&one_client_goal(rows, base_value));
    let level = scale.and_then(|sc| sc.levels.iter().find(|l| l.keys == GOAL_KEYS));
    for (goal, (measured, met)) in scale_goals(level) {
        let _ = writeln!(s, "| 1M keys: {goal} | {measured} | {met} |");
    }
    s
}

/// (what was measured, whether the goal is met) of a goal whose point the run lacks.
fn missing() -> (String, String) {
    ("not in this run".to_string(), "–".to_string())
}

fn yes_no(met: bool) -> String {
    if met { "yes" } else { "no" }.to_string()
}

/// The table line of one throughput goal: cairn ÷ etcd at its point (and p99 ÷ p99).
fn throughput_goal(g: &ThroughputGoal, rows: &[Row], base_value: usize) -> String {
    let vb = if g.value_bytes == 0 {
        base_value
    } else {
        g.value_bytes
    };
    let cairn = find_row(rows, "cairn", g.workload, g.clients, vb);
    let etcd = find_row(rows, "etcd", g.workload, g.clients, vb);
    let (measured, met) = match (cairn, etcd) {
        (Some(a), Some(b)) if b.ops_per_s > 0.0 && b.p99_ms > 0.0 => {
            let (x, p99) = (a.ops_per_s / b.ops_per_s, a.p99_ms / b.p99_ms);
            let mut measured = format!("{:.0} vs {:.0} ops/s ({x:.2}×)", a.ops_per_s, b.ops_per_s);
            if g.p99_no_higher {
                let _ = write!(
                    measured,
                    "; p99 {:.2} vs {:.2} ms ({p99:.2}×)",
                    a.p99_ms, b.p99_ms
                );
            }
            let met = x >= g.at_least && (!g.p99_no_higher || p99 <= 1.0);
            match g.stretch {
                Some(st) if met && x >= st => (measured, "yes, stretch too".into()),
                _ => (measured, yes_no(met)),
            }
        }
        _ => missing(),
    };
    let stretch = g
        .stretch
        .map_or(String::new(), |x| format!(" (stretch {x:.1}×)"));
    let p99 = if g.p99_no_higher {
        ", p99 no higher"
    } else {
        ""
    };
    format!(
        "| {}, {} clients, {}: ≥ {:.1}× etcd{stretch}{p99} | {measured} | {met} |\n",
        g.workload,
        g.clients,
        bytes_label(vb),
        g.at_least
    )
}

/// The table line of the one-writer latency goal: cairn's p50 no higher than etcd's.
fn one_client_goal(rows: &[Row], base_value: usize) -> String {
    let cairn = find_row(rows, "cairn", "write", 1, base_value);
    let etcd = find_row(rows, "etcd", "write", 1, base_value);
    let (measured, met) = match (cairn, etcd) {
        (Some(a), Some(b)) if b.p50_ms > 0.0 => (
            format!(
                "p50 {:.2} vs {:.2} ms ({:.2}×)",
                a.p50_ms,
                b.p50_ms,
                a.p50_ms / b.p50_ms
            ),
            yes_no(a.p50_ms <= b.p50_ms),
        ),
        _ => missing(),
    };
    format!(
        "| write, 1 client, {}: p50 no higher than etcd's | {measured} | {met} |\n",
        bytes_label(base_value)
    )
}

/// (goal, (measured, met)) of the three scale goals at 1M keys.
fn scale_goals(level: Option<&Level>) -> [(String, (String, String)); 3] {
    let (rss, restart, join) = match level {
        None => (missing(), missing(), missing()),
        Some(l) => {
            let restart = l.restart.as_ref().map(|r| (r.caught_up_s, restart_text(r)));
            let join = l.join.as_ref().map(|j| (j.caught_up_s, join_text(j)));
            (
                rss_goal(l),
                caught_up_goal(restart, GOAL_RESTART_S),
                caught_up_goal(join, GOAL_JOIN_S),
            )
        }
    };
    [
        (format!("RSS ≤ {GOAL_RSS_MIB:.0} MiB per node"), rss),
        (
            format!("a restarted follower ready ≤ {GOAL_RESTART_S:.0} s"),
            restart,
        ),
        (format!("a new node caught up ≤ {GOAL_JOIN_S:.0} s"), join),
    ]
}

/// (measured, met) of a step that must catch up within `limit_s`: `step` is its catch-up
/// time and description, `None` when the step failed (the Scale table says how).
fn caught_up_goal(step: Option<(f64, String)>, limit_s: f64) -> (String, String) {
    match step {
        Some((caught_up_s, measured)) => (measured, yes_no(caught_up_s <= limit_s)),
        None => ("failed (Scale table)".to_string(), "no".to_string()),
    }
}

fn restart_text(r: &Restart) -> String {
    format!(
        "caught up {:.2} s after the restart (`/healthz` {:.2} s)",
        r.caught_up_s, r.healthz_s
    )
}

fn join_text(j: &Join) -> String {
    format!(
        "caught up {:.2} s after `POST /cluster/join` (compacting before it: {:.2} s)",
        j.caught_up_s, j.compact_s
    )
}

fn rss_goal(l: &Level) -> (String, String) {
    let Some(max) = l.nodes.iter().map(|n| n.rss_mib).reduce(f64::max) else {
        return missing();
    };
    let each: Vec<String> = l
        .nodes
        .iter()
        .map(|n| format!("{:.0}", n.rss_mib))
        .collect();
    (
        format!("{} MiB", each.join(" / ")),
        yes_no(max <= GOAL_RSS_MIB),
    )
}

/// One column of a two-system table: its header, its alignment row cell, and its cell
/// from the two systems' rows of a point (`a` the first system, `b` the second).
struct Column {
    header: &'static str,
    align: &'static str,
    cell: fn(Option<&Row>, Option<&Row>) -> String,
}

const fn column(header: &'static str, cell: fn(Option<&Row>, Option<&Row>) -> String) -> Column {
    Column {
        header,
        align: "---:",
        cell,
    }
}

fn ops(r: Option<&Row>) -> Option<f64> {
    r.map(|r| r.ops_per_s)
}

fn p50(r: Option<&Row>) -> Option<f64> {
    r.map(|r| r.p50_ms)
}

fn p99(r: Option<&Row>) -> Option<f64> {
    r.map(|r| r.p99_ms)
}

fn cpu(r: Option<&Row>) -> Option<f64> {
    r.map(|r| r.server_cpu_us_per_op)
}

/// `system_a` beside `system_b`, one row per point of the run, in `columns` after the
/// point's workload, clients and value size.
fn two_system_table(rows: &[Row], system_a: &str, system_b: &str, columns: &[Column]) -> String {
    let mut s = String::from("| workload | clients | value |");
    for c in columns {
        let _ = write!(s, " {} |", c.header);
    }
    s.push_str("\n|---|---:|---:|");
    for c in columns {
        let _ = write!(s, "{}|", c.align);
    }
    s.push('\n');
    for (w, clients, vb) in points(rows) {
        let (a, b) = (
            find_row(rows, system_a, &w, clients, vb),
            find_row(rows, system_b, &w, clients, vb),
        );
        let _ = write!(s, "| {w} | {clients} | {} |", bytes_label(vb));
        for c in columns {
            let _ = write!(s, " {} |", (c.cell)(a, b));
        }
        s.push('\n');
    }
    s
}

/// cairn beside etcd.
const SUMMARY_COLUMNS: [Column; 11] = [
    column("cairn ops/s", |a, _| num(ops(a), 0)),
    column("etcd ops/s", |_, b| num(ops(b), 0)),
    column("ops/s cairn÷etcd", |a, b| ratio(ops(a), ops(b))),
    column("cairn p50 ms", |a, _| num(p50(a), 2)),
    column("etcd p50 ms", |_, b| num(p50(b), 2)),
    column("cairn p99 ms", |a, _| num(p99(a), 2)),
    column("etcd p99 ms", |_, b| num(p99(b), 2)),
    column("p99 cairn÷etcd", |a, b| ratio(p99(a), p99(b))),
    column("cairn p99.9 ms", |a, _| num(a.map(|r| r.p999_ms), 2)),
    column("etcd p99.9 ms", |_, b| num(b.map(|r| r.p999_ms), 2)),
    column("errors cairn/etcd", |a, b| {
        let errors = |r: Option<&Row>| r.map_or("–".into(), |r| r.errors.to_string());
        format!("{}/{}", errors(a), errors(b))
    }),
];

/// The side-by-side comparison table (also printed at the end of a run).
pub fn summary_table(res: &Results) -> String {
    two_system_table(&res.rows, "cairn", "etcd", &SUMMARY_COLUMNS)
}

/// A system (plain) beside its secure twin: ratios are secure ÷ plain.
const SECURE_COLUMNS: [Column; 11] = [
    column("plain ops/s", |a, _| num(ops(a), 0)),
    column("secure ops/s", |_, b| num(ops(b), 0)),
    column("ops/s secure÷plain", |a, b| ratio(ops(b), ops(a))),
    column("plain p50 ms", |a, _| num(p50(a), 2)),
    column("secure p50 ms", |_, b| num(p50(b), 2)),
    column("plain p99 ms", |a, _| num(p99(a), 2)),
    column("secure p99 ms", |_, b| num(p99(b), 2)),
    column("plain server CPU µs/op", |a, _| num(cpu(a), 0)),
    column("secure server CPU µs/op", |_, b| num(cpu(b), 0)),
    column("CPU/op secure÷plain", |a, b| ratio(cpu(b), cpu(a))),
    Column {
        header: "ops/s secure÷plain by round",
        align: "---",
        cell: round_ratios,
    },
];

/// The systems the benchmark runs both plain and with auth + TLS on: (plain, secure).
const SECURE_TWINS: [(&str, &str); 2] = [("cairn", "cairn-secure"), ("etcd", "etcd-secure")];

/// The cost of auth + TLS: each secure system beside its plain twin per point, measured
/// in the same run, as `(plain, secure, table)` for every pair that ran. Ratios are
/// secure ÷ plain (throughput below 1× and CPU per op above 1× are the cost).
pub fn secure_cost_tables(rows: &[Row]) -> Vec<(&'static str, &'static str, String)> {
    let ran = |system: &str| rows.iter().any(|r| r.system == system);
    SECURE_TWINS
        .into_iter()
        .filter(|(plain, secure)| ran(plain) && ran(secure))
        .map(|(plain, secure)| {
            let table = two_system_table(rows, plain, secure, &SECURE_COLUMNS);
            (plain, secure, table)
        })
        .collect()
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
    let rounds = m
        .get("cairn_read_index_rounds_total")
        .copied()
        .unwrap_or(0.0);
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

/// The mixed points' latency, reads and mutations apart: a read waits for a ReadIndex
/// round, a mutation for its log entry's commit and apply, and the table shows which
/// half a gap comes from. Empty when the run had no mixed point.
pub(super) fn mixed_by_kind_table(rows: &[Row]) -> String {
    let rows: Vec<(&Row, &ByKind)> = rows
        .iter()
        .filter_map(|r| r.by_kind.as_ref().map(|k| (r, k)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    s.push_str("| system | clients | value | reads | read mean ms | read p50 ms | read p99 ms | mutations | mutation mean ms | mutation p50 ms | mutation p99 ms |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (r, k) in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {:.2} |",
            r.system,
            r.clients,
            bytes_label(r.value_bytes),
            k.reads.ops,
            k.reads.mean_ms,
            k.reads.p50_ms,
            k.reads.p99_ms,
            k.mutations.ops,
            k.mutations.mean_ms,
            k.mutations.p50_ms,
            k.mutations.p99_ms,
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::KindLatency;

    #[test]
    fn mixed_points_show_reads_and_mutations_apart_and_other_runs_show_nothing() {
        let latency = |ops, mean_ms, p50_ms, p99_ms| KindLatency {
            ops,
            mean_ms,
            p50_ms,
            p99_ms,
        };
        let mut mixed = Row::sample("cairn", "mixed", 16, 256, 4_000.0, 2.0, 12.0);
        mixed.by_kind = Some(ByKind {
            reads: latency(700, 1.5, 1.25, 6.0),
            mutations: latency(300, 5.5, 4.75, 20.0),
        });
        let write = Row::sample("cairn", "write", 16, 256, 3_000.0, 5.0, 17.0);
        let table = mixed_by_kind_table(&[write.clone(), mixed]);
        assert_eq!(
            table.lines().nth(2),
            Some("| cairn | 16 | 256 B | 700 | 1.50 | 1.25 | 6.00 | 300 | 5.50 | 4.75 | 20.00 |")
        );
        assert_eq!(table.lines().count(), 3, "{table}");
        assert_eq!(mixed_by_kind_table(&[write]), "");
    }

    #[test]
    fn each_secure_system_is_set_beside_its_plain_twin_when_both_ran() {
        let rows = vec![
            Row::sample("cairn", "write", 64, 256, 8_000.0, 7.0, 20.0),
            Row::sample("etcd", "write", 64, 256, 6_000.0, 9.0, 24.0),
            Row::sample("etcd-secure", "write", 64, 256, 4_500.0, 12.0, 30.0),
        ];
        let tables = secure_cost_tables(&rows);
        let pairs: Vec<_> = tables.iter().map(|(p, s, _)| (*p, *s)).collect();
        assert_eq!(pairs, [("etcd", "etcd-secure")], "cairn-secure did not run");
        let row = tables[0].2.lines().nth(2).expect("a row per point");
        assert!(
            row.starts_with(
                "| write | 64 | 256 B | 6000 | 4500 | 0.75× | 9.00 | 12.00 | 24.00 | 30.00 |"
            ),
            "{row}"
        );
        assert!(secure_cost_tables(&rows[..2]).is_empty());
    }

    #[test]
    fn each_goal_is_judged_on_the_run_and_a_missing_point_says_so() {
        let rows = vec![
            Row::sample("cairn", "write", 64, 256, 15_000.0, 4.0, 14.0),
            Row::sample("etcd", "write", 64, 256, 10_000.0, 6.0, 15.0),
            // 1.6× etcd but a higher p99: not met.
            Row::sample("cairn", "write", 256, 256, 16_000.0, 15.0, 40.0),
            Row::sample("etcd", "write", 256, 256, 10_000.0, 15.0, 35.0),
            Row::sample("cairn", "write", 16, 4096, 3_300.0, 4.0, 19.0),
            Row::sample("etcd", "write", 16, 4096, 3_000.0, 4.0, 20.0),
            Row::sample("cairn", "write", 64, 4096, 4_800.0, 10.0, 40.0),
            Row::sample("etcd", "write", 64, 4096, 3_000.0, 11.0, 45.0),
            Row::sample("cairn", "write", 1, 256, 800.0, 1.16, 1.8),
            Row::sample("etcd", "write", 1, 256, 1_200.0, 0.76, 1.3),
            Row::sample("cairn", "mixed", 16, 256, 6_000.0, 1.7, 14.0),
            Row::sample("etcd", "mixed", 16, 256, 3_000.0, 3.8, 15.0),
        ];
        let scale: ScaleResults = serde_json::from_value(serde_json::json!({
            "value_bytes": 256, "batch_ops": 500, "load_concurrency": 16,
            "levels": [{
                "keys": 1_000_000, "load_s": 20.0, "load_keys_per_s": 50_000.0,
                "nodes": [{"node": "a", "rss_mib": 296.9, "data_dir_mib": 1.0},
                          {"node": "b", "rss_mib": 301.0, "data_dir_mib": 1.0}],
                "restart": {"node": "b", "stop_s": 0.1, "healthz_s": 0.13, "caught_up_s": 0.14},
                "restart_error": null, "join": null, "join_error": "timed out"
            }]
        }))
        .expect("scale results");
        let table = goals(&rows, Some(&scale), 256);
        let expected = [
            "| write, 64 clients, 256 B: ≥ 1.5× etcd, p99 no higher | 15000 vs 10000 ops/s (1.50×); p99 14.00 vs 15.00 ms (0.93×) | yes |",
            "| write, 256 clients, 256 B: ≥ 1.5× etcd, p99 no higher | 16000 vs 10000 ops/s (1.60×); p99 40.00 vs 35.00 ms (1.14×) | no |",
            "| write, 16 clients, 4 KiB: ≥ 1.0× etcd (stretch 1.5×), p99 no higher | 3300 vs 3000 ops/s (1.10×); p99 19.00 vs 20.00 ms (0.95×) | yes |",
            "| write, 64 clients, 4 KiB: ≥ 1.0× etcd (stretch 1.5×), p99 no higher | 4800 vs 3000 ops/s (1.60×); p99 40.00 vs 45.00 ms (0.89×) | yes, stretch too |",
            "| write, 16 clients, 64 KiB: ≥ 1.0× etcd (stretch 1.5×), p99 no higher | not in this run | – |",
            "| write, 64 clients, 64 KiB: ≥ 1.0× etcd (stretch 1.5×), p99 no higher | not in this run | – |",
            "| mixed, 16 clients, 256 B: ≥ 3.0× etcd | 6000 vs 3000 ops/s (2.00×) | no |",
            "| write, 1 client, 256 B: p50 no higher than etcd's | p50 1.16 vs 0.76 ms (1.53×) | no |",
            "| 1M keys: RSS ≤ 300 MiB per node | 297 / 301 MiB | no |",
            "| 1M keys: a restarted follower ready ≤ 10 s | caught up 0.14 s after the restart (`/healthz` 0.13 s) | yes |",
            "| 1M keys: a new node caught up ≤ 60 s | failed (Scale table) | no |",
        ];
        assert_eq!(table.lines().skip(2).collect::<Vec<_>>(), expected);
        let without_scale = goals(&rows, None, 256);
        assert!(
            without_scale
                .ends_with("| 1M keys: a new node caught up ≤ 60 s | not in this run | – |\n"),
            "{without_scale}"
        );
    }
}
