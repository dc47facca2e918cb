//! The `cairn-node` processes of a run: start, kill -9, restart, SIGSTOP/SIGCONT, wipe,
//! and teardown.
//!
//! - Node `i` listens on [`node_ip`]`(i)` with client port [`CLIENT_PORT`] and peer port
//!   [`PEER_PORT`]; its directory is `<run>/nodes/n<i>/` with `data/` and `node.log`
//!   (appended across restarts, each start marked by a header line).
//! - Children are started by a [`Spawner`]: the kernel kills them if the harness dies,
//!   even by SIGKILL, and each runs in its own process group, so a terminal Ctrl-C
//!   reaches only the harness, which then tears down itself.
//! - [`Supervisor::kill_all`] is synchronous and idempotent; [`Teardown`] calls it on
//!   drop (normal return, error, panic) and the Ctrl-C handler calls it too.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::net::node_ip;
use crate::spawn::Spawner;

pub const CLIENT_PORT: u16 = 8400;
pub const PEER_PORT: u16 = 8500;
/// Variables a node reads that must come from the supervisor only.
const NODE_ENV: [&str; 6] = [
    "CAIRN_CONFIG",
    "CAIRN_ID",
    "CAIRN_DATA_DIR",
    "CAIRN_CLIENT_ADDR",
    "CAIRN_PEER_ADDR",
    "CAIRN_PLANTED_BUG",
];
/// How long a SIGKILLed child may take to be reaped.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn client_addr(id: u64) -> String {
    format!("{}:{CLIENT_PORT}", node_ip(id))
}

pub fn peer_addr(id: u64) -> String {
    format!("{}:{PEER_PORT}", node_ip(id))
}

/// `http://127.0.0.(10+id):8400` (`https://` in a `--secure` run)
pub fn endpoint(id: u64) -> String {
    format!("{}://{}", super::secure::endpoint_scheme(), client_addr(id))
}

struct Proc {
    child: Child,
    paused: bool,
}

/// Everything the supervisor knows about its nodes.
pub struct Supervisor {
    bin: PathBuf,
    dir: PathBuf,
    planted_bug: Option<String>,
    procs: Mutex<BTreeMap<u64, Proc>>,
    /// Exits nobody asked for (a node crashed by itself): always a finding.
    unexpected_exits: Mutex<Vec<String>>,
    spawner: Spawner,
    torn_down: AtomicBool,
}

impl Supervisor {
    /// `bin` is copied into `dir` first, so a rebuild during the run cannot swap it.
    pub fn new(bin: &Path, dir: &Path, planted_bug: Option<String>) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let copy = dir.join("cairn-node");
        std::fs::copy(bin, &copy)
            .with_context(|| format!("copying {} (build it first)", bin.display()))?;
        let spawner = Spawner::new("chaos-spawner")?;
        Ok(Arc::new(Supervisor {
            bin: copy,
            dir: dir.to_path_buf(),
            planted_bug,
            procs: Mutex::new(BTreeMap::new()),
            unexpected_exits: Mutex::new(Vec::new()),
            spawner,
            torn_down: AtomicBool::new(false),
        }))
    }

    pub fn node_dir(&self, id: u64) -> PathBuf {
        self.dir.join(format!("n{id}"))
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.node_dir(id).join("data")
    }

    pub fn log_path(&self, id: u64) -> PathBuf {
        self.node_dir(id).join("node.log")
    }

    /// Starts node `id` on its data dir (created empty if missing).
    pub fn start(&self, id: u64) -> Result<()> {
        if self.torn_down.load(Ordering::SeqCst) {
            bail!("shutting down; not starting node {id}");
        }
        self.reap_exited();
        if lock(&self.procs).contains_key(&id) {
            bail!("node {id} is already running");
        }
        std::fs::create_dir_all(self.data_dir(id))?;
        let mut log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path(id))?;
        writeln!(log, "\n==== chaos: starting node {id} ====")?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--id")
            .arg(id.to_string())
            .arg("--data-dir")
            .arg(self.data_dir(id))
            .arg("--client-addr")
            .arg(client_addr(id))
            .arg("--peer-addr")
            .arg(peer_addr(id))
            .args(super::secure::node_args(id));
        for var in NODE_ENV {
            cmd.env_remove(var);
        }
        if let Some(bug) = &self.planted_bug {
            cmd.env("CAIRN_PLANTED_BUG", bug);
        }
        let child = self.spawner.spawn(cmd, log, &format!("node {id}"))?;
        lock(&self.procs).insert(
            id,
            Proc {
                child,
                paused: false,
            },
        );
        Ok(())
    }

    /// kill -9 and reap. No-op when not running.
    pub fn kill9(&self, id: u64) -> Result<()> {
        let Some(mut proc) = lock(&self.procs).remove(&id) else {
            return Ok(());
        };
        let _ = proc.child.kill();
        reap(&mut proc.child)
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`).
    pub fn pause(&self, id: u64, stop: bool) -> Result<()> {
        let mut procs = lock(&self.procs);
        let proc = procs
            .get_mut(&id)
            .ok_or_else(|| anyhow!("node {id} is not running"))?;
        signal(
            proc.child.id(),
            if stop { libc::SIGSTOP } else { libc::SIGCONT },
        );
        proc.paused = stop;
        Ok(())
    }

    /// Deletes node `id`'s data directory; the node must not be running.
    pub fn wipe(&self, id: u64) -> Result<()> {
        if self.is_running(id) {
            bail!("wiping node {id} while it runs");
        }
        let dir = self.data_dir(id);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        Ok(())
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.reap_exited();
        lock(&self.procs).contains_key(&id)
    }

    pub fn paused(&self) -> Vec<u64> {
        lock(&self.procs)
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn running(&self) -> Vec<u64> {
        self.reap_exited();
        lock(&self.procs).keys().copied().collect()
    }

    /// Nodes that exited without being killed, with their status and last log lines.
    pub fn unexpected_exits(&self) -> Vec<String> {
        self.reap_exited();
        lock(&self.unexpected_exits).clone()
    }

    /// Records nodes that died on their own since the last look.
    fn reap_exited(&self) {
        let mut procs = lock(&self.procs);
        let mut gone = Vec::new();
        for (id, proc) in procs.iter_mut() {
            if let Ok(Some(status)) = proc.child.try_wait() {
                gone.push((*id, status));
            }
        }
        for (id, status) in gone {
            procs.remove(&id);
            let tail = tail(&self.log_path(id), 15);
            lock(&self.unexpected_exits).push(format!(
                "node {id} exited by itself ({status}); last log lines:\n{tail}"
            ));
        }
    }

    /// Panics any node logged (`panicked at` and the message after it), whether or not
    /// the process exited: a node whose consensus task panicked may keep serving HTTP.
    pub fn panics(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for dir in dirs {
            let text = std::fs::read(dir.join("node.log")).unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                if line.contains("panicked at") {
                    let message = lines.get(i + 1).copied().unwrap_or("");
                    found.push(format!(
                        "{} panicked: {} {}",
                        dir.file_name().and_then(|n| n.to_str()).unwrap_or("?"),
                        line.trim(),
                        message.trim()
                    ));
                }
            }
        }
        found
    }

    /// SIGKILLs every node (stopped ones too) and reaps them. Idempotent, never panics.
    pub fn kill_all(&self) {
        self.torn_down.store(true, Ordering::SeqCst);
        let mut procs = std::mem::take(&mut *lock(&self.procs));
        for proc in procs.values_mut() {
            let _ = proc.child.kill();
        }
        for (id, proc) in procs.iter_mut() {
            if let Err(e) = reap(&mut proc.child) {
                eprintln!("chaos: node {id}: {e}");
            }
        }
    }

    /// `Ok` when no child of this supervisor is alive.
    pub fn verify_gone(&self) -> Result<()> {
        let left = lock(&self.procs).len();
        if left > 0 {
            bail!("{left} node process(es) still registered");
        }
        Ok(())
    }

    /// Deletes every node's data directory (the logs stay).
    pub fn remove_data(&self) {
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let data = entry.path().join("data");
            if data.is_dir() {
                let _ = std::fs::remove_dir_all(&data);
            }
        }
        let _ = std::fs::remove_file(&self.bin);
    }
}

fn reap(child: &mut Child) -> Result<()> {
    let started = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        if started.elapsed() > REAP_TIMEOUT {
            bail!("pid {} not reaped after SIGKILL", child.id());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// The last `lines` lines of a file (empty if unreadable).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Kills every node and removes the iptables chain when dropped: on return, on error
/// and while unwinding from a panic. Also disarms the run's watchdog.
pub struct Teardown {
    pub supervisor: Arc<Supervisor>,
    pub net: Option<Arc<super::net::Net>>,
    pub done: Arc<AtomicBool>,
}

impl Teardown {
    /// A watchdog thread that, unless the teardown happened first, kills every node,
    /// removes the chain and exits the process with 124 once `limit` has passed: no run
    /// outlives its budget, whatever hangs.
    pub fn start_watchdog(&self, limit: Duration) {
        let (supervisor, net, done) =
            (self.supervisor.clone(), self.net.clone(), self.done.clone());
        let started = Instant::now();
        let spawned = std::thread::Builder::new()
            .name("chaos-watchdog".into())
            .spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    if started.elapsed() > limit {
                        eprintln!("chaos: the run exceeded its {limit:?} budget; tearing down");
                        supervisor.kill_all();
                        if let Some(net) = &net {
                            net.teardown();
                        }
                        std::process::exit(124);
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            });
        if let Err(e) = spawned {
            eprintln!("chaos: no watchdog ({e}); the run is bounded by its own timeouts only");
        }
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        self.supervisor.kill_all();
        if let Some(net) = &self.net {
            net.teardown();
        }
    }
}
