//! The measured points: the schedule (every workload × client count, plus the large-value
//! writes of `--scale` and `--quick`), each point `--rounds` times per system with the order alternating
//! (each system's median round is its row), and one point from leader lookup to its row.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::procs::Procs;
use super::report::Row;
use super::run::{Clusters, Plan};
use super::usage::{cpu_snap, cpu_usage, deltas, CAIRN_COUNTERS, ETCD_COUNTERS};
use super::workload::{self, PointSpec, Workload};
use super::{cairn, etcd, sysinfo, BenchArgs, DriverArg, System, OP_TIMEOUT, POINT_GAP};

/// (workload, clients, value bytes), in run order.
fn schedule(args: &BenchArgs, plan: &Plan) -> Vec<(Workload, usize, usize)> {
    let mut schedule = Vec::new();
    for &w in &plan.workloads {
        for &c in &args.clients {
            schedule.push((w, c, args.value_bytes));
        }
    }
    if plan.workloads.contains(&Workload::Write) {
        schedule.extend(large_value_writes(args).map(|(c, vb)| (Workload::Write, c, vb)));
    }
    schedule
}

/// (clients, value bytes) of the large-value write points: 4 KiB and 64 KiB at 16 and 64
/// clients with `--scale`; one 64 KiB point at 16 clients in a `--quick` smoke, so CI
/// sees the blob-file write path of both systems.
fn large_value_writes(args: &BenchArgs) -> impl Iterator<Item = (usize, usize)> {
    let points: &[(usize, usize)] = match (args.scale, args.quick) {
        (true, _) => &[(16, 4096), (64, 4096), (16, 65536), (64, 65536)],
        (false, true) => &[(16, 65536)],
        (false, false) => &[],
    };
    points.iter().copied()
}

/// A writeback before a point that took this long is worth a line in the output.
const SETTLE_REPORTED: Duration = Duration::from_millis(500);

/// Runs the whole schedule on every planned system and returns a row per point.
pub(super) async fn run_all(
    args: &BenchArgs,
    plan: &Plan,
    procs: &Arc<Procs>,
    clusters: &Clusters,
) -> Result<Vec<Row>> {
    let driver = match args.cairn_driver {
        DriverArg::Raw => cairn::DriverKind::Raw,
        DriverArg::Client => cairn::DriverKind::Client,
    };
    let ctx = Ctx {
        procs,
        clusters,
        driver,
    };
    let schedule = schedule(args, plan);
    let total = schedule.len() * plan.systems.len() * args.rounds as usize;
    let mut rows = Vec::new();
    let mut done = 0;
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _spinners = args.keep_cpus_busy.then(|| {
        println!("bench: --keep-cpus-busy: {nproc} SCHED_IDLE spinning threads during the points");
        sysinfo::Spinners::start(nproc, Duration::from_secs(24 * 3600))
    });
    for (p, &(workload, clients, value_bytes)) in schedule.iter().enumerate() {
        let spec = PointSpec {
            workload,
            clients,
            value_bytes,
            keys: args.keys,
            warmup: plan.warmup,
            measure: plan.measure,
            op_timeout: OP_TIMEOUT,
        };
        let mut rounds: Vec<Vec<Row>> = vec![Vec::new(); plan.systems.len()];
        for round in 0..args.rounds as usize {
            let mut order: Vec<usize> = (0..plan.systems.len()).collect();
            if (p + round) % 2 == 1 {
                order.reverse();
            }
            for s in order {
                done += 1;
                let settled = sysinfo::settle_disk().await;
                if settled >= SETTLE_REPORTED {
                    println!(
                        "bench: dirty pages written back in {:.1} s before the next point",
                        settled.as_secs_f64()
                    );
                }
                let row = ctx.point(plan.systems[s], spec, p as u64).await?;
                print_row(&row, done, total);
                rounds[s].push(row);
                tokio::time::sleep(POINT_GAP).await;
            }
        }
        rows.extend(rounds.into_iter().map(median_round));
    }
    Ok(rows)
}

/// A system's rounds of one point as one row: the round of median throughput (the lower
/// middle one of an even count), carrying every round's ops/s in run order.
fn median_round(rounds: Vec<Row>) -> Row {
    let all: Vec<f64> = rounds.iter().map(|r| r.ops_per_s).collect();
    let mut by_throughput = rounds;
    by_throughput.sort_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s));
    let mut median = by_throughput.swap_remove((by_throughput.len() - 1) / 2);
    median.rounds_ops_per_s = all;
    median
}

fn print_row(row: &Row, done: usize, total: usize) {
    println!(
        "[{done:>2}/{total}] {:<5} {:<17} c={:<3} {:>6}B {:>8.0} ops/s  p50 {:>7.2} ms  p99 {:>7.2} ms  p99.9 {:>7.2} ms  err {} rej {}  cpu: server {:.2} loadgen {:.2} other {:.2}",
        row.system, row.workload, row.clients, row.value_bytes, row.ops_per_s, row.p50_ms, row.p99_ms, row.p999_ms,
        row.errors, row.rejected, row.cpu.server_cores, row.cpu.loadgen_cores, row.cpu.other_cores
    );
}

struct Ctx<'a> {
    procs: &'a Arc<Procs>,
    clusters: &'a Clusters,
    driver: cairn::DriverKind,
}

enum LeaderRef {
    /// The leader of the cairn cluster of this system (plain or secure).
    Cairn(System, cairn::Node),
    /// The leading member of the etcd cluster of this system (plain or secure).
    Etcd(System, usize),
}

impl Ctx<'_> {
    /// One point: workers at the current leader, counters and CPU before and after the
    /// closed-loop run (warm-up, then the timed window), the row.
    async fn point(&self, system: System, spec: PointSpec, seed: u64) -> Result<Row> {
        let (workers, leader) = self.workers(system, spec).await?;
        let metrics_before = self.leader_metrics(&leader).await;
        let before = cpu_snap(self.procs);
        let result =
            workload::run_point(spec, workers, seed.wrapping_mul(7919) + spec.clients as u64)
                .await?;
        let after = cpu_snap(self.procs);
        let metrics_after = self.leader_metrics(&leader).await;
        let counters = match leader {
            LeaderRef::Cairn(..) => CAIRN_COUNTERS,
            LeaderRef::Etcd(..) => ETCD_COUNTERS,
        };
        Ok(Row::new(
            system.name(),
            spec,
            &result,
            cpu_usage(system.name(), &before, &after),
            deltas(counters, &metrics_before, &metrics_after),
            note(system, spec.workload),
        ))
    }

    /// One worker per client, aimed at the leader found now.
    async fn workers(
        &self,
        system: System,
        spec: PointSpec,
    ) -> Result<(Vec<workload::Worker>, LeaderRef)> {
        match system {
            System::Cairn | System::CairnSecure => {
                let c = self.cairn_of(system)?;
                let leader = c.leader().await?;
                let workers = (0..spec.clients)
                    .map(|i| {
                        c.worker(self.driver, spec.workload, i, &leader)
                            .map(workload::Worker::Cairn)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok((workers, LeaderRef::Cairn(system, leader)))
            }
            System::Etcd | System::EtcdSecure => {
                let e = self.etcd_of(system)?;
                let leader = e.leader().await?;
                let workers = (0..spec.clients)
                    .map(|i| {
                        workload::Worker::Etcd(e.worker(spec.workload, i, spec.clients, leader))
                    })
                    .collect();
                Ok((workers, LeaderRef::Etcd(system, leader)))
            }
        }
    }

    fn cairn_of(&self, system: System) -> Result<&cairn::Cluster> {
        let cluster = match system {
            System::CairnSecure => &self.clusters.cairn_secure,
            _ => &self.clusters.cairn,
        };
        cluster
            .as_ref()
            .with_context(|| format!("{} not started", system.name()))
    }

    fn etcd_of(&self, system: System) -> Result<&etcd::Cluster> {
        let cluster = match system {
            System::EtcdSecure => &self.clusters.etcd_secure,
            _ => &self.clusters.etcd,
        };
        cluster
            .as_ref()
            .with_context(|| format!("{} not started", system.name()))
    }

    /// The leader's Prometheus metrics; empty when they cannot be read.
    async fn leader_metrics(&self, leader: &LeaderRef) -> std::collections::BTreeMap<String, f64> {
        match leader {
            LeaderRef::Cairn(system, node) => match self.cairn_of(*system) {
                Ok(c) => c.metrics(node).await.unwrap_or_default(),
                Err(_) => Default::default(),
            },
            LeaderRef::Etcd(system, i) => match self.etcd_of(*system) {
                Ok(e) => e.metrics(*i).await.unwrap_or_default(),
                Err(_) => Default::default(),
            },
        }
    }
}

/// What a row's numbers mean where the two systems differ.
fn note(system: System, workload: Workload) -> &'static str {
    match (system, workload) {
        (System::Etcd | System::EtcdSecure, Workload::ReadBounded) => {
            "etcd serializable reads on all members: NO staleness bound"
        }
        (System::Cairn | System::CairnSecure, Workload::ReadBounded) => {
            "cairn bounded reads (max_staleness_ms 1000) on all nodes"
        }
        (System::Cairn | System::CairnSecure, Workload::Mixed) => {
            "70% linearizable read, 20% write, 5% forget, 5% revoke"
        }
        (System::Etcd | System::EtcdSecure, Workload::Mixed) => {
            "70% linearizable get, 20% put, 10% delete"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ops_per_s: f64) -> Row {
        Row::sample("cairn", "write", 1, 256, ops_per_s, 0.0, 0.0)
    }

    #[test]
    fn the_median_round_is_kept_with_every_round_in_run_order() {
        let kept = median_round(vec![row(30.0), row(10.0), row(20.0)]);
        assert_eq!(kept.ops_per_s, 20.0);
        assert_eq!(kept.rounds_ops_per_s, vec![30.0, 10.0, 20.0]);
        let kept = median_round(vec![row(40.0), row(10.0), row(30.0), row(20.0)]);
        assert_eq!(kept.ops_per_s, 20.0, "the lower middle of an even count");
        let kept = median_round(vec![row(5.0)]);
        assert_eq!((kept.ops_per_s, kept.rounds_ops_per_s), (5.0, vec![5.0]));
    }
}
