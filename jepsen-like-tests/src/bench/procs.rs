//! Child processes of a bench run (cairn nodes, etcd members) and their teardown.
//!
//! - Children are started by a [`Spawner`] (killed with the harness, own process group): a
//!   terminal Ctrl-C reaches only the harness, which then stops the children itself
//!   (SIGTERM, then SIGKILL after a grace period).
//! - [`Procs::kill_all`] is idempotent and synchronous; the [`Teardown`] guard calls it on
//!   return and on panic, the signal handler on SIGINT/SIGTERM/SIGHUP, the watchdog when the
//!   whole-run deadline passes.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use cairn_jepsen::spawn::Spawner;

/// Grace between SIGTERM and SIGKILL when tearing everything down.
const KILL_ALL_GRACE: Duration = Duration::from_secs(5);

struct Entry {
    child: Child,
    log: PathBuf,
}

/// The registry of running children, by name (`cairn-1`, `etcd-2`, ...).
pub struct Procs {
    children: Mutex<BTreeMap<String, Entry>>,
    spawner: Spawner,
    /// Removed by [`Procs::kill_all`] unless the run asked to keep it.
    cleanup_dir: Mutex<Option<PathBuf>>,
    torn_down: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Procs {
    pub fn new() -> Result<Arc<Procs>> {
        let spawner = Spawner::new("bench-spawner")?;
        Ok(Arc::new(Procs {
            children: Mutex::new(BTreeMap::new()),
            spawner,
            cleanup_dir: Mutex::new(None),
            torn_down: AtomicBool::new(false),
        }))
    }

    /// `dir` is deleted after the children are stopped (it holds their data).
    pub fn remove_on_teardown(&self, dir: Option<PathBuf>) {
        *lock(&self.cleanup_dir) = dir;
    }

    /// Starts `cmd` as child `name`, stdout and stderr appended to `log`.
    pub fn spawn(&self, name: &str, cmd: Command, log: &Path) -> Result<u32> {
        if self.torn_down.load(Ordering::SeqCst) {
            bail!("shutting down; not starting {name}");
        }
        if lock(&self.children).contains_key(name) {
            bail!("{name} is already running");
        }
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let child = self.spawner.spawn(cmd, out, name)?;
        let pid = child.id();
        lock(&self.children).insert(
            name.to_string(),
            Entry {
                child,
                log: log.to_path_buf(),
            },
        );
        Ok(pid)
    }

    pub fn pid(&self, name: &str) -> Option<u32> {
        lock(&self.children).get(name).map(|e| e.child.id())
    }

    /// Pids of the running children whose name starts with `prefix`, by name.
    pub fn pids(&self, prefix: &str) -> Vec<(String, u32)> {
        lock(&self.children)
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(n, e)| (n.clone(), e.child.id()))
            .collect()
    }

    /// `Err` with the exit status if child `name` has exited.
    pub fn check_alive(&self, name: &str) -> Result<()> {
        let mut children = lock(&self.children);
        let entry = children
            .get_mut(name)
            .ok_or_else(|| anyhow!("{name} is not running"))?;
        match entry.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!(
                "{name} exited ({status}); last lines of {}:\n{}",
                entry.log.display(),
                tail(&entry.log, 30)
            ),
        }
    }

    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        match lock(&self.children).get(name) {
            Some(e) => tail(&e.log, lines),
            None => String::new(),
        }
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL. Returns how long the exit took.
    pub async fn stop(&self, name: &str, grace: Duration) -> Result<Duration> {
        let mut entry = lock(&self.children)
            .remove(name)
            .ok_or_else(|| anyhow!("{name} is not running"))?;
        let started = Instant::now();
        signal(entry.child.id(), libc::SIGTERM);
        loop {
            if entry.child.try_wait()?.is_some() {
                return Ok(started.elapsed());
            }
            if started.elapsed() >= grace {
                eprintln!("bench: {name} ignored SIGTERM for {grace:?}; SIGKILL");
                let _ = entry.child.kill();
                let _ = entry.child.wait();
                return Ok(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops every child (SIGTERM, SIGKILL after a grace period), reaps them and removes the
    /// cleanup directory. Blocking; safe to call more than once and from any thread.
    pub fn kill_all(&self) {
        if self.torn_down.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut children = std::mem::take(&mut *lock(&self.children));
        for entry in children.values() {
            signal(entry.child.id(), libc::SIGTERM);
        }
        let deadline = Instant::now() + KILL_ALL_GRACE;
        while Instant::now() < deadline {
            children.retain(|_, e| matches!(e.child.try_wait(), Ok(None)));
            if children.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for (name, entry) in children.iter_mut() {
            eprintln!(
                "bench: {name} (pid {}) still running; SIGKILL",
                entry.child.id()
            );
            let _ = entry.child.kill();
            let _ = entry.child.wait();
        }
        if let Some(dir) = lock(&self.cleanup_dir).take() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                eprintln!("bench: could not remove {}: {e}", dir.display());
            }
        }
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: plain kill(2) on a child we spawned and have not reaped yet.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Stops every child when dropped: on a normal return, an error, or a panic.
pub struct Teardown(pub Arc<Procs>);

impl Drop for Teardown {
    fn drop(&mut self) {
        self.0.kill_all();
    }
}

/// On SIGINT, SIGTERM or SIGHUP: stop every child, then exit 130.
pub fn install_signal_handler(procs: Arc<Procs>) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hup.recv() => "SIGHUP",
        };
        eprintln!("bench: {name}: stopping every process this run started");
        procs.kill_all();
        std::process::exit(130);
    });
    Ok(())
}

/// After `limit`, stop every child and exit 124: no run outlives its budget.
pub fn start_watchdog(procs: Arc<Procs>, limit: Duration) {
    std::thread::Builder::new()
        .name("bench-watchdog".into())
        .spawn(move || {
            std::thread::sleep(limit);
            eprintln!("bench: the whole run exceeded its {limit:?} budget; tearing down");
            procs.kill_all();
            std::process::exit(124);
        })
        .expect("starting the watchdog thread");
}

/// Fails if something already listens on (or holds) 127.0.0.1:`port`.
pub fn ensure_port_free(port: u16) -> Result<()> {
    TcpListener::bind(("127.0.0.1", port))
        .map(drop)
        .with_context(|| {
            format!("port 127.0.0.1:{port} is in use by a process this run did not start")
        })
}

/// The last `lines` lines of a log file (reads at most its last 64 KiB).
pub fn tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
