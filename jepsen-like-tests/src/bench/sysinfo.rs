//! What the machine is and what it is doing: the hardware/kernel summary of the report, the
//! raw fdatasync rate of the disk under the work dir, CPU time per process (from /proc), RSS
//! and on-disk sizes.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub mem_total_mib: u64,
    pub kernel: String,
    /// Device, filesystem and mount point holding the work dir, plus whether it rotates.
    pub disk: String,
    pub loadavg_at_start: String,
}

pub fn machine(work_dir: &Path) -> Machine {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let mem_total_mib = fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb / 1024)
        .unwrap_or(0);
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Machine {
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        mem_total_mib,
        kernel,
        disk: disk_of(work_dir),
        loadavg_at_start: loadavg(),
    }
}

pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// "/dev/vda (ext4 on /, kernel flag rotational=1, virtio-blk (VM disk), 256 GiB)" for the filesystem of `path`.
fn disk_of(path: &Path) -> String {
    let Ok(canon) = path.canonicalize() else {
        return "unknown".into();
    };
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let best = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3).then(|| (f[0].to_string(), f[1].to_string(), f[2].to_string()))
        })
        .filter(|(_, mnt, _)| canon.starts_with(mnt))
        .max_by_key(|(_, mnt, _)| mnt.len());
    let Some((dev, mnt, fstype)) = best else {
        return "unknown".into();
    };
    let mut details = vec![format!("{fstype} on {mnt}")];
    if let Some(name) = dev.strip_prefix("/dev/") {
        let block = name.trim_end_matches(|c: char| c.is_ascii_digit());
        let block = if block.ends_with('p') && name.starts_with("nvme") {
            block.trim_end_matches('p')
        } else {
            block
        };
        let sys = format!("/sys/block/{block}");
        if let Ok(rot) = fs::read_to_string(format!("{sys}/queue/rotational")) {
            // virtio-blk reports 1 whatever the host's media is.
            details.push(format!("kernel flag rotational={}", rot.trim()));
        }
        if let Ok(model) = fs::read_to_string(format!("{sys}/device/model")) {
            details.push(model.trim().to_string());
        } else if name.starts_with("vd") {
            details.push("virtio-blk (VM disk)".into());
        }
        if let Ok(sectors) = fs::read_to_string(format!("{sys}/size")) {
            if let Ok(s) = sectors.trim().parse::<u64>() {
                details.push(format!("{} GiB", (s * 512) >> 30));
            }
        }
    }
    format!("{dev} ({})", details.join(", "))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fdatasync {
    pub ops_per_s: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub ops: u64,
    pub method: String,
    /// Threads spinning on the CPU meanwhile (0: an otherwise idle probe).
    pub busy_neighbors: usize,
}

/// The probe twice: alone, then with every core kept busy by a spinning thread. On VMs
/// whose idle vCPUs halt, an fsync that waits on an idle CPU pays the wake-up latency of
/// the halted vCPU; the busy variant shows the device's rate without that artifact.
pub fn fdatasync_rates(dir: &Path, duration: Duration) -> Result<(Fdatasync, Fdatasync)> {
    let alone = fdatasync_rate(dir, duration, 0)?;
    let busy = fdatasync_rate(
        dir,
        duration,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    )?;
    Ok((alone, busy))
}

/// Overwrites one 4 KiB block of a small file in `dir` and fdatasyncs it, in a loop for
/// `duration`: the disk's raw durable-write rate, the floor under any fsync-per-commit store.
pub fn fdatasync_rate(dir: &Path, duration: Duration, busy_neighbors: usize) -> Result<Fdatasync> {
    let spinners = Spinners::start(busy_neighbors, duration + Duration::from_secs(2));
    let result = probe(dir, duration, Block::Overwrite);
    drop(spinners);
    let mut r = result?;
    r.busy_neighbors = busy_neighbors;
    if busy_neighbors > 0 {
        r.method.push_str(&format!(
            ", {busy_neighbors} SCHED_IDLE spinning threads alongside"
        ));
    }
    Ok(r)
}

/// The probe writing each block after the previous one, as a write-ahead log does: the file
/// grows, so every fdatasync must also journal the new size. This, not the overwrite above,
/// is the floor under one durable log append.
pub fn fdatasync_append_rate(dir: &Path, duration: Duration) -> Result<Fdatasync> {
    probe(dir, duration, Block::Append)
}

/// Where each probe write goes.
#[derive(Clone, Copy)]
enum Block {
    /// The same 4 KiB at offset 0: data only, no metadata to journal.
    Overwrite,
    /// The next 4 KiB after the end of the file.
    Append,
}

/// Threads that spin under `SCHED_IDLE` (they run only when no other thread wants the
/// CPU), so the vCPUs never halt but nothing real is slowed down. Stopped when dropped, or
/// after `limit` at the latest.
pub struct Spinners {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Spinners {
    pub fn start(n: usize, limit: Duration) -> Spinners {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let param = libc::sched_param { sched_priority: 0 };
                    // SAFETY: changes only the calling thread's policy; param is valid.
                    unsafe {
                        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
                    }
                    let deadline = Instant::now() + limit;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        for _ in 0..1000 {
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        Spinners { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn probe(dir: &Path, duration: Duration, pattern: Block) -> Result<Fdatasync> {
    let path = dir.join("fdatasync-probe");
    let mut file =
        fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let block = vec![0x5au8; 4096];
    file.write_all(&block)?;
    file.sync_all()?;
    let fd = file.as_raw_fd();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let started = Instant::now();
    let mut ops = 0u64;
    while started.elapsed() < duration {
        let t0 = Instant::now();
        let offset = match pattern {
            Block::Overwrite => 0,
            Block::Append => (ops + 1) * block.len() as u64,
        };
        // SAFETY: fd is a valid open file for the whole loop; the buffer outlives the call.
        let written = unsafe {
            libc::pwrite(
                fd,
                block.as_ptr().cast(),
                block.len(),
                offset as libc::off_t,
            )
        };
        if written != block.len() as isize {
            anyhow::bail!("pwrite: {}", std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::fdatasync(fd) } != 0 {
            anyhow::bail!("fdatasync: {}", std::io::Error::last_os_error());
        }
        hist.saturating_record(t0.elapsed().as_micros() as u64);
        ops += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    drop(file);
    let _ = fs::remove_file(&path);
    Ok(Fdatasync {
        ops_per_s: ops as f64 / secs,
        mean_ms: hist.mean() / 1000.0,
        p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
        ops,
        method: match pattern {
            Block::Overwrite => "pwrite 4 KiB at offset 0 + fdatasync, one thread",
            Block::Append => "pwrite 4 KiB at the end of a growing file + fdatasync, one thread",
        }
        .into(),
        busy_neighbors: 0,
    })
}

/// Ticks per second of /proc CPU times.
fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// CPU seconds (user + system) used so far by process `pid` (all its threads).
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After "pid (comm) ": state is field 3, utime 14, stime 15 (1-based) -> 11, 12 here.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / clk_tck())
}

/// CPU seconds used so far by thread `tid` of this process.
pub fn thread_cpu_s(tid: libc::pid_t) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / clk_tck())
}

pub fn self_cpu_s() -> f64 {
    process_cpu_s(std::process::id()).unwrap_or(0.0)
}

/// CPU seconds the whole machine spent busy (not idle, not iowait), all cores.
pub fn machine_busy_s() -> f64 {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().next() else {
        return 0.0;
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return 0.0;
    }
    // user nice system idle iowait irq softirq steal (guest is already in user).
    let total: f64 = v.iter().take(8).sum();
    (total - v[3] - v[4]) / clk_tck()
}

/// Resident set size of `pid` in MiB.
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Bytes allocated on disk under `path` (like `du -s`, following no symlinks).
pub fn disk_usage_bytes(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(entries) = fs::read_dir(path) {
            for entry in entries.flatten() {
                total += disk_usage_bytes(&entry.path());
            }
        }
    }
    total
}

/// Writes every dirty page of the machine back to disk (`sync(2)`, which waits for the
/// writeback) and returns how long that took. Run before each point, so that a point does
/// not pay for the writeback of what the point before it (the other system's, or the
/// preload) left in the page cache: the kernel writes dirty pages back up to 30 s after
/// they were written, on the disk both systems' fsyncs wait on.
pub async fn settle_disk() -> Duration {
    let start = Instant::now();
    // SAFETY: sync(2) takes no arguments and cannot fail.
    tokio::task::spawn_blocking(|| unsafe { libc::sync() })
        .await
        .expect("sync(2) does not panic");
    start.elapsed()
}
