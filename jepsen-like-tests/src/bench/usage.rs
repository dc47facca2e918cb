//! What a point or a run cost, seen from outside: CPU seconds of the machine, of the load
//! generator and of every child process; deltas of the servers' own counters; RSS and
//! data dir size per process at the end of the points.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::procs::Procs;
use super::report::{CpuUsage, ResourceRow};
use super::run::Clusters;
use super::sysinfo;

/// CPU seconds used so far: the machine, this process, every child by name.
pub(super) struct CpuSnap {
    at: Instant,
    machine: f64,
    me: f64,
    children: BTreeMap<String, f64>,
}

pub(super) fn cpu_snap(procs: &Procs) -> CpuSnap {
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

/// Whether process `name` (`{system}-{id}`) is one of `system`'s: `cairn-secure-1` is
/// not `cairn`'s.
fn is_process_of(name: &str, system: &str) -> bool {
    name.strip_prefix(system)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

pub(super) fn cpu_usage(system: &str, a: &CpuSnap, b: &CpuSnap) -> CpuUsage {
    let wall = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let mut by_process = BTreeMap::new();
    let (mut server, mut idle_system) = (0.0, 0.0);
    for (name, after) in &b.children {
        let used = after - a.children.get(name).copied().unwrap_or(*after);
        if is_process_of(name, system) {
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
pub(super) const CAIRN_COUNTERS: &[&str] = &[
    "cairn_mutations_ok_total",
    "cairn_mutations_rejected_total",
    "cairn_mutations_forwarded_total",
    "cairn_reads_linearizable_total",
    "cairn_reads_bounded_total",
    "cairn_reads_stale_refused_total",
    "cairn_read_index_rounds_total",
    "cairn_read_confirm_retries_total",
    "cairn_mutation_latency_us_sum",
    "cairn_last_log_index",
];
pub(super) const ETCD_COUNTERS: &[&str] = &[
    "etcd_disk_wal_fsync_duration_seconds_count",
    "etcd_disk_wal_fsync_duration_seconds_sum",
    "etcd_disk_backend_commit_duration_seconds_count",
    "etcd_server_proposals_committed_total",
    "etcd_network_peer_sent_bytes_total",
];

pub(super) fn deltas(
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

/// RSS and data dir size of every node and member, cairn first.
pub(super) fn resources(procs: &Arc<Procs>, clusters: &Clusters) -> Vec<ResourceRow> {
    let mut resources = Vec::new();
    for (system, c) in clusters.cairns() {
        for n in &c.nodes {
            resources.push(resource_row(
                system,
                &n.name,
                procs.pid(&n.name),
                &n.data_dir,
            ));
        }
    }
    for (system, e) in clusters.etcds() {
        for m in &e.members {
            resources.push(resource_row(
                system,
                &m.name,
                procs.pid(&m.name),
                &m.data_dir,
            ));
        }
    }
    resources
}

fn resource_row(system: &str, name: &str, pid: Option<u32>, data_dir: &Path) -> ResourceRow {
    ResourceRow {
        system: system.into(),
        process: name.into(),
        rss_mib: pid.and_then(sysinfo::rss_mib).unwrap_or(0.0),
        data_dir_mib: sysinfo::disk_usage_bytes(data_dir) as f64 / (1 << 20) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::is_process_of;

    #[test]
    fn a_system_owns_its_numbered_processes_only() {
        assert!(is_process_of("cairn-1", "cairn"));
        assert!(is_process_of("cairn-secure-3", "cairn-secure"));
        assert!(is_process_of("etcd-2", "etcd"));
        assert!(!is_process_of("cairn-secure-1", "cairn"));
        assert!(!is_process_of("cairn-1", "cairn-secure"));
        assert!(!is_process_of("cairn-", "cairn"));
        assert!(!is_process_of("scale-1", "cairn"));
    }
}
