//! The machine measured from outside, at the start of a run (before any cluster exists)
//! and at its end: fdatasync rates (alone, beside busy CPUs, appending) and the load
//! generator's own ceiling.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use super::loadgen::{self, LoadgenCheck};
use super::sysinfo::{self, Fdatasync, Machine};
use super::BenchArgs;

/// What the machine could do before any cluster started.
pub(super) struct StartProbes {
    pub machine: Machine,
    pub fdatasync: Fdatasync,
    pub fdatasync_busy: Fdatasync,
    pub fdatasync_append: Fdatasync,
    pub loadgen: Option<LoadgenCheck>,
}

fn fsync_probe_time(args: &BenchArgs) -> Duration {
    Duration::from_secs(if args.quick { 1 } else { 2 })
}

pub(super) async fn probe_start(args: &BenchArgs, work: &Path) -> Result<StartProbes> {
    let machine = sysinfo::machine(work);
    println!(
        "bench: {} cores ({}), {} MiB, kernel {}, disk {}, load {}",
        machine.nproc,
        machine.cpu_model,
        machine.mem_total_mib,
        machine.kernel,
        machine.disk,
        machine.loadavg_at_start
    );
    let fsync_secs = fsync_probe_time(args);
    let (fdatasync, fdatasync_busy) = {
        let w = work.to_path_buf();
        tokio::task::spawn_blocking(move || sysinfo::fdatasync_rates(&w, fsync_secs)).await??
    };
    let fdatasync_append = {
        let w = work.to_path_buf();
        tokio::task::spawn_blocking(move || sysinfo::fdatasync_append_rate(&w, fsync_secs))
            .await??
    };
    println!(
        "bench: fdatasync alone {:.0}/s (mean {:.3} ms, p99 {:.3} ms); with busy CPUs {:.0}/s (mean {:.3} ms); appending {:.0}/s (mean {:.3} ms)",
        fdatasync.ops_per_s, fdatasync.mean_ms, fdatasync.p99_ms,
        fdatasync_busy.ops_per_s, fdatasync_busy.mean_ms,
        fdatasync_append.ops_per_s, fdatasync_append.mean_ms
    );
    let loadgen = loadgen::ceiling(if args.quick { 1.0 } else { 3.0 })
        .await
        .ok();
    if let Some(c) = &loadgen {
        println!(
            "bench: load generator: {:.0} µs CPU per request, ~{:.0} req/s per core (raw driver vs a stub)",
            c.client_cpu_us_per_req, c.client_req_per_core_s
        );
    }
    Ok(StartProbes {
        machine,
        fdatasync,
        fdatasync_busy,
        fdatasync_append,
        loadgen,
    })
}

/// The disk again at the end (alone, with busy CPUs): did it drift during the run?
pub(super) async fn probe_end(args: &BenchArgs, work: &Path) -> Result<(Fdatasync, Fdatasync)> {
    let fsync_secs = fsync_probe_time(args);
    let (end, busy_end) = {
        let w = work.to_path_buf();
        tokio::task::spawn_blocking(move || sysinfo::fdatasync_rates(&w, fsync_secs)).await??
    };
    println!(
        "bench: fdatasync at the end: alone {:.0}/s (mean {:.3} ms); with busy CPUs {:.0}/s (mean {:.3} ms)",
        end.ops_per_s, end.mean_ms, busy_end.ops_per_s, busy_end.mean_ms
    );
    Ok((end, busy_end))
}
