//! Test fixture: a cluster of real `cairn-node` processes on 127.0.0.1.
//!
//! Use it from a test file with `mod support;`. Every node runs the binary this package
//! builds, on free ports, in its own temporary directory (`data/` and `node.log`).
//!
//! - [`Cluster::start`] (or [`Cluster::builder`], for a config file or no init) spawns
//!   the nodes, waits until each serves `/healthz`, sends `POST /cluster/init` and waits
//!   until the cluster settles: one leader, followed and caught up with by every node.
//! - Fault injection: [`Cluster::kill9`], [`Cluster::sigstop`] / [`Cluster::sigcont`],
//!   [`Cluster::terminate`], and [`Cluster::restart`] (same data dir, same ports).
//! - [`ClusterBuilder::ip_base`] puts node i on its own loopback IP `127.0.0.(base+i)`, so
//!   packet filters can partition the cluster ([`Cluster::host`] names a node's IP).
//! - [`Cluster::add_node`] starts an extra, uninitialized node for `POST /cluster/join`.
//! - Clients: [`Cluster::client`] (all endpoints) and [`Cluster::client_for`] (one node).
//! - [`wait_until`] / [`wait_for`]: bounded polling; every wait in the fixture is bounded.
//!
//! No orphans: dropping the [`Cluster`] SIGKILLs every node it started (also while a test
//! panics), and each node also gets SIGKILL from the kernel if the test process dies
//! (`PR_SET_PDEATHSIG`). When a test fails, the tail of every node's log is printed and
//! the node directories are kept for inspection.
//!
//! Clusters in one test binary run one at a time (a process-wide lock, held from
//! [`ClusterBuilder::start`] until the [`Cluster`] is dropped): several 3-node clusters
//! with writers on a 2-core machine starve heartbeats and turn timing assertions
//! (elections within 3 s) into noise. Tests without a cluster still run in parallel.

// Each test binary uses a different part of the fixture.
#![allow(dead_code)]

pub mod load;
pub mod snapshot_file;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cairn_api::{ClusterStatus, InitRequest, NodeSpec};
use cairn_client::{Client, ClientError};
use tempfile::TempDir;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// The node binary of this package.
pub const NODE_BIN: &str = env!("CARGO_BIN_EXE_cairn-node");
/// Where nodes serve unless [`ClusterBuilder::ip_base`] says otherwise.
pub const LOCALHOST: &str = "127.0.0.1";
/// Until a started node serves `/healthz` (RocksDB open and log replay included).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Until some node reports itself leader.
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Polling period of every wait.
pub const POLL: Duration = Duration::from_millis(20);
/// One `GET /cluster/status`; a node slower than this counts as not answering.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// Until a signalled process has exited.
const EXIT_TIMEOUT: Duration = Duration::from_secs(15);
/// Log lines printed per node when a test fails.
const LOG_TAIL_LINES: usize = 80;
/// Fresh port pairs tried when another process grabbed a port between our probe and the
/// node's bind.
const PORT_ATTEMPTS: usize = 5;
/// Inherited variables that would silently override what the fixture passes.
const NODE_ENV: [&str; 6] = [
    "CAIRN_CONFIG",
    "CAIRN_ID",
    "CAIRN_DATA_DIR",
    "CAIRN_CLIENT_ADDR",
    "CAIRN_PEER_ADDR",
    "CAIRN_PLANTED_BUG",
];

/// Whether a node's process is running, stopped (SIGSTOP) or gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    Running,
    Stopped,
    Dead,
}

struct Node {
    spec: NodeSpec,
    dir: TempDir,
    child: Option<Child>,
    run: Run,
    starts: u32,
}

impl Node {
    fn new(id: u64) -> Node {
        Node::new_on(id, LOCALHOST)
    }

    /// A node whose client and peer ports are both on `host` (a loopback IP).
    fn new_on(id: u64, host: &str) -> Node {
        let dir = tempfile::Builder::new()
            .prefix(&format!("cairn-node-{id}-"))
            .tempdir()
            .expect("creating a node tempdir");
        let (client_addr, peer_addr) = free_addr_pair_on(host);
        let spec = NodeSpec {
            id,
            client_addr,
            peer_addr,
        };
        Node {
            spec,
            dir,
            child: None,
            run: Run::Dead,
            starts: 0,
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("node.log")
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("node.toml")
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.spec.client_addr)
    }

    fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// Starts the process, appending its stdout and stderr to `node.log`.
    fn spawn(&mut self, with_config: bool) {
        assert!(
            self.child.is_none(),
            "node {} is already running",
            self.spec.id
        );
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("opening the node log");
        writeln!(
            log,
            "=== fixture: start #{} of node {} ({} / {})",
            self.starts, self.spec.id, self.spec.client_addr, self.spec.peer_addr
        )
        .expect("writing the node log");
        let mut cmd = node_command(self.dir.path());
        cmd.arg("--id").arg(self.spec.id.to_string());
        cmd.arg("--data-dir").arg(self.data_dir());
        cmd.arg("--client-addr").arg(&self.spec.client_addr);
        cmd.arg("--peer-addr").arg(&self.spec.peer_addr);
        if with_config {
            cmd.arg("--config").arg(self.config_path());
        }
        cmd.stdout(log.try_clone().expect("cloning the log handle"))
            .stderr(log);
        self.child = Some(cmd.spawn().expect("spawning cairn-node"));
        self.run = Run::Running;
    }

    fn signal(&self, signal: i32) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("node {} has no process", self.spec.id));
        // SAFETY: plain syscall on a pid we spawned and have not reaped (no reuse possible).
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {signal}): {}",
            std::io::Error::last_os_error()
        );
    }

    /// Waits (bounded) for the process to exit and reaps it.
    fn reap(&mut self) -> ExitStatus {
        let id = self.spec.id;
        let child = self
            .child
            .as_mut()
            .unwrap_or_else(|| panic!("node {id} has no process"));
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().expect("waiting for cairn-node") {
                self.child = None;
                self.run = Run::Dead;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} did not exit within {EXIT_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL and reap, whatever state the process is in (a stopped process dies too).
    fn kill_now(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
            self.child = None;
        }
        self.run = Run::Dead;
    }

    /// `Some(status)` if the process has exited (it is reaped then).
    fn exited(&mut self) -> Option<ExitStatus> {
        let status = self
            .child
            .as_mut()?
            .try_wait()
            .expect("polling cairn-node")?;
        self.child = None;
        self.run = Run::Dead;
        Some(status)
    }
}

/// A `cairn-node` command with a clean environment, run in `dir` (so relative default
/// paths never land in the repository), killed by the kernel if the test process dies.
pub fn node_command(dir: &Path) -> Command {
    let mut cmd = Command::new(NODE_BIN);
    for var in NODE_ENV {
        cmd.env_remove(var);
    }
    // Plain text logs: they are read in files, not on a terminal.
    cmd.env("NO_COLOR", "1");
    cmd.current_dir(dir).stdin(Stdio::null());
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec. Without
    // this a test process killed by a timeout would leave its nodes running. (The signal
    // fires when the *thread* that spawned exits; tokio workers and the test thread live
    // until the test ends, and the Cluster kills its nodes before that anyway.)
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// An address with a port that was free a moment ago, below the kernel's ephemeral range
/// ([`bind_any_port`]; [`Cluster`] retries on a lost race).
pub fn free_addr() -> String {
    free_addr_on(LOCALHOST)
}

/// [`free_addr`] on another loopback IP (any of 127.0.0.0/8 works on Linux without setup).
pub fn free_addr_on(host: &str) -> String {
    addr_of(&bind_any_port(host))
}

/// Two different free addresses on 127.0.0.1 ([`free_addr_pair_on`]).
pub fn free_addr_pair() -> (String, String) {
    free_addr_pair_on(LOCALHOST)
}

/// Two different free addresses on `host`, for a node's client and peer ports. Both
/// listeners are held until both ports are known: taken one after the other, the kernel
/// once handed out the same port twice, and the node refused to start (a CI rehearsal,
/// 2026-11-30; fixed in git 5711ad5).
pub fn free_addr_pair_on(host: &str) -> (String, String) {
    let (a, b) = (bind_any_port(host), bind_any_port(host));
    (addr_of(&a), addr_of(&b))
}

/// Nodes' ports are drawn from here up to the kernel's first ephemeral port.
const PORTS_FIRST: u16 = 10_000;
/// Random ports tried before giving up (each a `bind`; a busy machine has a few hundred
/// listeners, so this is never reached by chance).
const PORT_TRIES: usize = 1_000;

/// A listener on a random free port of `host` below the kernel's ephemeral range. A port
/// from `bind(0)` is an ephemeral one: while its node was down for a restart, an outgoing
/// connection (a client's, another node's) could take it as its local port, and the node
/// could not bind it again ("Address already in use"; seen in the Python fixture, which
/// draws its ports the same way since git af47007).
fn bind_any_port(host: &str) -> TcpListener {
    use rand::Rng;
    let ephemeral_first = ephemeral_first();
    let mut rng = rand::thread_rng();
    for _ in 0..PORT_TRIES {
        let port = rng.gen_range(PORTS_FIRST..ephemeral_first);
        if let Ok(listener) = TcpListener::bind((host, port)) {
            return listener;
        }
    }
    panic!("no free port on {host} in {PORTS_FIRST}..{ephemeral_first} after {PORT_TRIES} tries")
}

/// The first port the kernel hands to outgoing connections (32768 if it cannot be read).
fn ephemeral_first() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|first| *first > PORTS_FIRST)
        .unwrap_or(32_768)
}

fn addr_of(listener: &TcpListener) -> String {
    listener.local_addr().expect("local_addr").to_string()
}

/// One cluster at a time per test binary (see the module doc).
fn serial() -> Arc<Mutex<()>> {
    static SERIAL: OnceLock<Arc<Mutex<()>>> = OnceLock::new();
    SERIAL.get_or_init(|| Arc::new(Mutex::new(()))).clone()
}

/// Options of a cluster before it starts.
pub struct ClusterBuilder {
    size: u64,
    init: bool,
    config: Option<String>,
    ip_base: Option<u8>,
    /// `Some(admin)`: init with `auth: {admin}` (SPEC §8).
    auth_admin: Option<String>,
}

impl ClusterBuilder {
    /// Init with `auth: {admin}`: auth is on from the first entry. The admin token of
    /// init's answer is kept ([`Cluster::admin_token`]) and sent by the fixture's own
    /// status polls (`/cluster/status` needs a valid token then).
    pub fn auth(mut self, admin: &str) -> Self {
        self.auth_admin = Some(admin.to_string());
        self
    }

    /// Start the nodes but do not send `POST /cluster/init`.
    pub fn uninitialized(mut self) -> Self {
        self.init = false;
        self
    }

    /// TOML given to every node with `--config` (flags still set id, dir and addresses).
    pub fn config(mut self, toml: &str) -> Self {
        self.config = Some(toml.to_string());
        self
    }

    /// Node `i` serves its client and peer ports on `127.0.0.(base + i)` instead of
    /// 127.0.0.1. Nodes bind their outgoing peer and relay connections to their own peer
    /// IP, so packet filters can then cut a precise set of node pairs (see
    /// [`Cluster::host`]); test clients still connect from 127.0.0.1.
    pub fn ip_base(mut self, base: u8) -> Self {
        self.ip_base = Some(base);
        self
    }

    pub async fn start(self) -> Cluster {
        let serial = serial().lock_owned().await;
        let status_client = status_client(None);
        let mut cluster = Cluster {
            nodes: BTreeMap::new(),
            config: self.config,
            ip_base: self.ip_base,
            status_client,
            admin_token: None,
            _serial: serial,
        };
        for id in 1..=self.size {
            cluster.add_node(id).await;
        }
        if self.init {
            match &self.auth_admin {
                None => cluster.init().await,
                Some(admin) => drop(cluster.init_with_auth(admin).await),
            }
            cluster.wait_settled(LEADER_TIMEOUT).await;
        }
        cluster
    }
}

/// Real `cairn-node` processes; see the module doc.
pub struct Cluster {
    nodes: BTreeMap<u64, Node>,
    config: Option<String>,
    /// See [`ClusterBuilder::ip_base`]; `None`: every node on 127.0.0.1.
    ip_base: Option<u8>,
    /// One attempt per call, short timeouts: status is polled, never retried. Sends
    /// [`Cluster::admin_token`] once there is one.
    status_client: Client,
    /// The admin token of an auth-on cluster (init with `auth`, or [`Cluster::use_token`]).
    admin_token: Option<String>,
    _serial: OwnedMutexGuard<()>,
}

impl Cluster {
    /// `size` nodes with ids 1..=size, initialized and settled (see [`Cluster::wait_settled`]).
    pub async fn start(size: u64) -> Cluster {
        Cluster::builder(size).start().await
    }

    pub fn builder(size: u64) -> ClusterBuilder {
        ClusterBuilder {
            size,
            init: true,
            config: None,
            ip_base: None,
            auth_admin: None,
        }
    }

    // -- topology ----------------------------------------------------------------------

    /// Every node id the fixture started, running or not.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// Every id but `id` (e.g. the followers of a leader), in order.
    pub fn others(&self, id: u64) -> Vec<u64> {
        self.nodes.keys().copied().filter(|n| *n != id).collect()
    }

    /// Ids of the nodes whose process runs and is not stopped.
    pub fn running_ids(&self) -> Vec<u64> {
        self.nodes
            .values()
            .filter(|n| n.run == Run::Running)
            .map(|n| n.spec.id)
            .collect()
    }

    pub fn run_state(&self, id: u64) -> Run {
        self.node(id).run
    }

    pub fn spec(&self, id: u64) -> NodeSpec {
        self.node(id).spec.clone()
    }

    /// `http://127.0.0.1:PORT` of the node's client API.
    pub fn endpoint(&self, id: u64) -> String {
        self.node(id).endpoint()
    }

    /// Process id of node `id`, while it has a process (running or stopped).
    pub fn pid(&self, id: u64) -> Option<i32> {
        self.node(id).pid()
    }

    /// The loopback IP node `id` serves on (and binds its outgoing connections to).
    pub fn host(&self, id: u64) -> String {
        match self.ip_base {
            None => LOCALHOST.to_string(),
            Some(base) => {
                let last = u64::from(base) + id;
                assert!(last < 255, "node {id} does not fit above 127.0.0.{base}");
                format!("127.0.0.{last}")
            }
        }
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.node(id).data_dir()
    }

    pub fn log_path(&self, id: u64) -> PathBuf {
        self.node(id).log_path()
    }

    pub fn log_text(&self, id: u64) -> String {
        fs::read_to_string(self.log_path(id)).unwrap_or_default()
    }

    fn node(&self, id: u64) -> &Node {
        self.nodes
            .get(&id)
            .unwrap_or_else(|| panic!("no node {id} in this cluster"))
    }

    fn node_mut(&mut self, id: u64) -> &mut Node {
        self.nodes
            .get_mut(&id)
            .unwrap_or_else(|| panic!("no node {id} in this cluster"))
    }

    // -- lifecycle ---------------------------------------------------------------------

    /// Starts a fresh node `id` (uninitialized: it waits for init or join) and waits until
    /// it serves `/healthz`. Retries with new ports if another process took one.
    pub async fn add_node(&mut self, id: u64) -> NodeSpec {
        self.add_node_configured(id, self.config.clone()).await
    }

    /// [`Self::add_node`] with a config file of its own (`None`: none), not the cluster's.
    pub async fn add_node_configured(&mut self, id: u64, config: Option<String>) -> NodeSpec {
        assert!(!self.nodes.contains_key(&id), "node {id} exists already");
        let host = self.host(id);
        let mut node = Node::new_on(id, &host);
        if let Some(toml) = &config {
            fs::write(node.config_path(), toml).expect("writing the node config");
        }
        for attempt in 1..=PORT_ATTEMPTS {
            node.spawn(config.is_some());
            self.nodes.insert(id, node);
            match self.wait_healthy(id).await {
                Ok(()) => return self.spec(id),
                Err(status) => {
                    node = self.nodes.remove(&id).expect("node just inserted");
                    let log = fs::read_to_string(node.log_path()).unwrap_or_default();
                    let port_taken = log
                        .lines()
                        .last()
                        .is_some_and(|l| l.contains("binding the"));
                    if !port_taken || attempt == PORT_ATTEMPTS {
                        print_tail(id, &node.log_path());
                        panic!("node {id} exited during startup ({status})");
                    }
                    (node.spec.client_addr, node.spec.peer_addr) = free_addr_pair_on(&host);
                }
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// `POST /cluster/init` with every node, sent to the lowest id.
    pub async fn init(&self) {
        let first = *self.nodes.keys().next().expect("an empty cluster");
        let nodes = self.nodes.values().map(|n| n.spec.clone()).collect();
        // Init appends and fsyncs the first entries: on a loaded disk that can outlast the
        // client's default 10 s timeout, and a retry would only hear "already initialized".
        let endpoint = self.endpoint(first);
        let client = Client::builder(vec![endpoint.clone()])
            .request_timeout(START_TIMEOUT)
            .build();
        let answer = client
            .and_then(|c| c.pinned(&endpoint))
            .expect("init client")
            .init(InitRequest { nodes, auth: None })
            .await
            .expect("POST /cluster/init");
        assert_eq!(answer.voters, self.ids(), "voters after init");
    }

    /// `POST /cluster/init` with every node and `auth: {admin}`, sent to the lowest id;
    /// keeps the admin token of the answer for the fixture's status polls and returns it.
    pub async fn init_with_auth(&mut self, admin: &str) -> String {
        let first = *self.nodes.keys().next().expect("an empty cluster");
        let nodes = self.nodes.values().map(|n| n.spec.clone()).collect();
        let endpoint = self.endpoint(first);
        let client = Client::builder(vec![endpoint.clone()])
            .request_timeout(START_TIMEOUT)
            .build();
        let answer = client
            .and_then(|c| c.pinned(&endpoint))
            .expect("init client")
            .init(InitRequest {
                nodes,
                auth: Some(cairn_api::EnableAuthRequest {
                    admin: admin.to_string(),
                }),
            })
            .await
            .expect("POST /cluster/init with auth");
        assert_eq!(answer.voters, self.ids(), "voters after init");
        let enabled = answer.auth.expect("init with auth answers the admin token");
        assert_eq!(enabled.admin, admin, "the admin of init's answer");
        self.use_token(&enabled.token);
        enabled.token
    }

    /// From now on the fixture's status polls send `token` (the admin token after auth
    /// was turned on by `POST /v1/auth/enable`), and [`Cluster::admin_client`] uses it.
    pub fn use_token(&mut self, token: &str) {
        self.status_client = status_client(Some(token));
        self.admin_token = Some(token.to_string());
    }

    /// The admin token of an auth-on cluster.
    pub fn admin_token(&self) -> String {
        self.admin_token
            .clone()
            .expect("no admin token: the cluster was made without auth")
    }

    /// SIGKILL (no chance to flush or say goodbye), then reap.
    pub fn kill9(&mut self, id: u64) {
        let node = self.node_mut(id);
        node.signal(libc::SIGKILL);
        let status = node.reap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "node {id}: {status}"
        );
    }

    /// SIGTERM (clean shutdown), then reap; returns the exit status.
    pub fn terminate(&mut self, id: u64) -> ExitStatus {
        let node = self.node_mut(id);
        if node.run == Run::Stopped {
            node.signal(libc::SIGCONT);
        }
        node.signal(libc::SIGTERM);
        node.reap()
    }

    /// Freezes the process: it holds its ports and locks but answers nothing. Returns once
    /// every thread has stopped: `kill` only queues the signal, and until the thread chosen
    /// to take it gets a CPU the others keep serving requests (seen on a loaded machine).
    pub fn sigstop(&mut self, id: u64) {
        let node = self.node_mut(id);
        assert_eq!(node.run, Run::Running, "node {id} is not running");
        node.signal(libc::SIGSTOP);
        node.run = Run::Stopped;
        let pid = node.pid().expect("a stopped node has a process");
        let deadline = Instant::now() + EXIT_TIMEOUT;
        while !all_threads_stopped(pid) {
            assert!(
                Instant::now() < deadline,
                "node {id} did not stop within {EXIT_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn sigcont(&mut self, id: u64) {
        let node = self.node_mut(id);
        assert_eq!(node.run, Run::Stopped, "node {id} is not stopped");
        node.signal(libc::SIGCONT);
        node.run = Run::Running;
    }

    /// Starts a dead node again with the same data dir, ports and config, and waits until
    /// it serves `/healthz`.
    pub async fn restart(&mut self, id: u64) {
        let with_config = self.config.is_some();
        let node = self.node_mut(id);
        assert_eq!(node.run, Run::Dead, "node {id} must be dead to restart");
        node.spawn(with_config);
        if let Err(status) = self.wait_healthy(id).await {
            print_tail(id, &self.log_path(id));
            panic!("node {id} exited during restart ({status})");
        }
    }

    /// Waits until node `id` answers `/healthz`; `Err` if its process exits first.
    async fn wait_healthy(&mut self, id: u64) -> Result<(), ExitStatus> {
        let deadline = Instant::now() + START_TIMEOUT;
        let endpoint = self.endpoint(id);
        loop {
            if let Some(status) = self.node_mut(id).exited() {
                return Err(status);
            }
            if self.status_client.healthz(&endpoint).await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                print_tail(id, &self.log_path(id));
                panic!("node {id} did not serve /healthz within {START_TIMEOUT:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    // -- observation -------------------------------------------------------------------

    /// `GET /cluster/status` of node `id`, one attempt. Every answer is checked for what
    /// holds at any moment: only committed entries are applied.
    pub async fn status(&self, id: u64) -> Result<ClusterStatus, ClientError> {
        let status = self.status_client.status(&self.endpoint(id)).await?;
        assert!(
            status.applied_index <= status.commit_index,
            "node {id} reports an applied index above its commit index: {status:?}"
        );
        Ok(status)
    }

    /// Status of every running node that answers.
    pub async fn statuses(&self) -> BTreeMap<u64, ClusterStatus> {
        let mut out = BTreeMap::new();
        for id in self.running_ids() {
            if let Ok(status) = self.status(id).await {
                out.insert(id, status);
            }
        }
        out
    }

    /// The running node that says it leads, at the highest term if a deposed leader has
    /// not noticed yet.
    pub async fn leader_id(&self) -> Option<u64> {
        self.statuses()
            .await
            .values()
            .filter(|s| s.role == "leader")
            .max_by_key(|s| s.term)
            .map(|s| s.node_id)
    }

    /// Waits (bounded) for a leader; returns its id.
    pub async fn wait_leader(&self, timeout: Duration) -> u64 {
        wait_for(timeout, "a leader", async || self.leader_id().await).await
    }

    /// Waits (bounded) until every running node follows one leader and has applied what
    /// that leader committed. Right after an election the leader may not have heard from a
    /// follower yet, and operations that judge followers by their replication progress
    /// (e.g. the quorum check of `POST /cluster/remove`) would see it as down.
    pub async fn wait_settled(&self, timeout: Duration) -> u64 {
        let running = self.running_ids();
        wait_for(
            timeout,
            &format!("nodes {running:?} to settle on one leader"),
            async || {
                let statuses = self.statuses().await;
                let leader = statuses.values().find(|s| s.role == "leader")?;
                let settled = statuses.len() == running.len()
                    && statuses.values().all(|s| {
                        s.leader_id == Some(leader.node_id)
                            && s.term == leader.term
                            && s.applied_index >= leader.commit_index
                    });
                settled.then_some(leader.node_id)
            },
        )
        .await
    }

    /// Waits (bounded) until a leader other than `old` is elected among running nodes.
    pub async fn wait_new_leader(&self, old: u64, timeout: Duration) -> u64 {
        wait_for(
            timeout,
            &format!("a leader other than node {old}"),
            async || self.leader_id().await.filter(|l| *l != old),
        )
        .await
    }

    /// Waits (bounded) until node `id` has applied `index`.
    pub async fn wait_applied(&self, id: u64, index: u64, timeout: Duration) {
        let what = format!("node {id} to apply index {index}");
        wait_until(timeout, &what, async || {
            self.status(id)
                .await
                .is_ok_and(|s| s.applied_index >= index)
        })
        .await;
    }

    // -- clients -----------------------------------------------------------------------

    /// A client over every node's endpoint (leader discovery, retries).
    pub fn client(&self) -> Client {
        Client::new(self.nodes.values().map(Node::endpoint).collect()).expect("client")
    }

    /// A client pinned to node `id`: every call goes there (followers relay).
    pub fn client_for(&self, id: u64) -> Client {
        let endpoint = self.endpoint(id);
        Client::new(vec![endpoint.clone()])
            .and_then(|c| c.pinned(&endpoint))
            .expect("pinned client")
    }

    /// A client over every node's endpoint that sends `token`.
    pub fn client_with_token(&self, token: &str) -> Client {
        Client::builder(self.nodes.values().map(Node::endpoint).collect())
            .token(token)
            .build()
            .expect("client with a token")
    }

    /// A client pinned to node `id` that sends `token`.
    pub fn client_for_with_token(&self, id: u64, token: &str) -> Client {
        let endpoint = self.endpoint(id);
        Client::builder(vec![endpoint.clone()])
            .token(token)
            .build()
            .and_then(|c| c.pinned(&endpoint))
            .expect("pinned client with a token")
    }

    /// [`Cluster::client_with_token`] with the admin token.
    pub fn admin_client(&self) -> Client {
        self.client_with_token(&self.admin_token())
    }

    /// Prints the tail of every node's log to stderr (shown by the test harness).
    pub fn print_logs(&self) {
        for node in self.nodes.values() {
            print_tail(node.spec.id, &node.log_path());
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            node.kill_now();
        }
        if std::thread::panicking() {
            for node in self.nodes.values_mut() {
                node.dir.disable_cleanup(true);
                print_tail(node.spec.id, &node.log_path());
                eprintln!(
                    "--- node {} kept in {}",
                    node.spec.id,
                    node.dir.path().display()
                );
            }
        }
    }
}

/// The fixture's status client: one attempt per call, short timeouts, `token` if any.
fn status_client(token: Option<&str>) -> Client {
    let mut builder = Client::builder(vec!["127.0.0.1:1".into()])
        .request_timeout(STATUS_TIMEOUT)
        .connect_timeout(STATUS_TIMEOUT);
    if let Some(token) = token {
        builder = builder.token(token);
    }
    builder.build().expect("status client")
}

/// Whether every thread of `pid` is in state `T` (stopped) per `/proc/PID/task/*/stat`.
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        let stat = fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesized command name, which may itself hold spaces.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        state == Some('T')
    })
}

fn print_tail(id: u64, log: &Path) {
    let text =
        fs::read_to_string(log).unwrap_or_else(|e| format!("(cannot read {}: {e})", log.display()));
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(LOG_TAIL_LINES);
    eprintln!(
        "--- node {id}: last {} lines of {}",
        lines.len() - from,
        log.display()
    );
    for line in &lines[from..] {
        eprintln!("  {line}");
    }
}

/// Polls `condition` every [`POLL`] until it holds; panics naming `what` after `timeout`.
pub async fn wait_until(timeout: Duration, what: &str, mut condition: impl AsyncFnMut() -> bool) {
    wait_for(timeout, what, async || condition().await.then_some(())).await
}

/// Polls `probe` every [`POLL`] until it yields a value; panics naming `what` after
/// `timeout`. A probe that hangs is cut off at the deadline too.
pub async fn wait_for<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(value)) = tokio::time::timeout_at(deadline, probe()).await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Runs `cairn-node ARGS` in `dir` to completion (for startup failures), at most
/// `timeout`; returns the exit status and stderr. A node that keeps running past the
/// timeout is killed and the call panics.
pub async fn run_node_to_exit(
    dir: &Path,
    args: &[&str],
    timeout: Duration,
) -> (ExitStatus, String) {
    let mut cmd = tokio::process::Command::from(node_command(dir));
    cmd.args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().expect("spawning cairn-node");
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(output) => {
            let output = output.expect("waiting for cairn-node");
            (output.status, String::from_utf8_lossy(&output.stderr).into_owned())
        }
        Err(_) => panic!("cairn-node {args:?} was still running after {timeout:?}; expected it to refuse to start"),
    }
}

/// Read options: `any` after the node applied `min_revision` (a per-node read).
pub fn any_at(min_revision: u64) -> cairn_api::ReadOptions {
    cairn_api::ReadOptions {
        consistency: Some(cairn_api::Consistency::Any),
        max_staleness_ms: None,
        min_revision: Some(min_revision),
    }
}

/// Read options: linearizable (served by the leader).
pub fn linearizable() -> cairn_api::ReadOptions {
    cairn_api::ReadOptions {
        consistency: Some(cairn_api::Consistency::Linearizable),
        ..cairn_api::ReadOptions::default()
    }
}
