//! The `cairn` CLI end to end against a real 3-node cluster: every call below is a `cairn`
//! process, from `cluster init` to `cluster compact`, in human and `--json` form, with
//! the exit codes of SPEC §6 / `cairn --help`; and a cluster with auth on (SPEC §8): the
//! token from CAIRN_TOKEN, --token-file and `.cluster/admin.token`, principals confined
//! to their grants (exit code 7), rotation, grants replaced, deletion.
//!
//! The nodes are the `cairn-node` binary of the same target directory (`cargo test
//! --workspace`, which `scripts/test` runs, builds every binary before any test runs).
//! This crate cannot use the node's test fixture, so a minimal starter lives here: free
//! ports, a temporary directory per node, SIGKILL on drop (and from the kernel if the test
//! process dies).

use std::cell::RefCell;
use std::fs::{self, File};
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_client::api::{
    AclChanged, ClusterStatus, CompactResponse, Consistency, CreatedPrincipal, EventKind, Health,
    HistoryResponse, ListResponse, MembershipResponse, MutationResult, PrincipalList,
    ProbeResponse, ReadResponse, RecallResponse, RotatedToken, State, Tombstone, WhoAmI,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tempfile::TempDir;

const CLI: &str = env!("CARGO_BIN_EXE_cairn");
/// Until a started node answers `cluster status`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Until the cluster has one leader that every node follows.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);
/// Variables that would override the flags the test passes.
const CLEARED_ENV: [&str; 14] = [
    "CAIRN_ENDPOINTS",
    "CAIRN_ACTOR",
    "CAIRN_SESSION_FILE",
    "CAIRN_TOKEN",
    "CAIRN_TOKEN_FILE",
    "CAIRN_CACERT",
    "CAIRN_CERT",
    "CAIRN_KEY",
    "CAIRN_CONFIG",
    "CAIRN_ID",
    "CAIRN_DATA_DIR",
    "CAIRN_CLIENT_ADDR",
    "CAIRN_PEER_ADDR",
    "CAIRN_PLANTED_BUG",
];
/// Exit codes of `cairn --help`.
const EXIT_INVALID_INPUT: i32 = 2;
const EXIT_NOT_FOUND: i32 = 3;
const EXIT_CONFLICT: i32 = 4;
const EXIT_UNAVAILABLE: i32 = 5;
const EXIT_DENIED: i32 = 7;

// -- a minimal cluster of real nodes --------------------------------------------------------

fn node_bin() -> PathBuf {
    let bin = Path::new(CLI).with_file_name("cairn-node");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` first (scripts/test builds the \
         whole workspace before testing)",
        bin.display()
    );
    bin
}

/// Two different ports that were free a moment ago, for a node's client and peer
/// addresses. Both listeners are held until both ports are known: bound one after the
/// other, the kernel can hand out the same port twice (seen in CI), and the node refuses
/// a peer address equal to its client address.
fn free_addr_pair() -> (String, String) {
    let bind = || TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
    let (a, b) = (bind(), bind());
    let addr = |l: &TcpListener| l.local_addr().expect("local_addr").to_string();
    (addr(&a), addr(&b))
}

extern "C" {
    fn prctl(option: i32, ...) -> i32;
}
const PR_SET_PDEATHSIG: i32 = 1;
const SIGKILL: i32 = 9;

struct Node {
    id: u64,
    client_addr: String,
    peer_addr: String,
    dir: PathBuf,
    /// Flags after the addresses (TLS files).
    extra_args: Vec<String>,
    child: Option<Child>,
}

impl Node {
    fn log(&self) -> PathBuf {
        self.dir.join("node.log")
    }

    fn spawn(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log())
            .expect("node log");
        let mut cmd = Command::new(node_bin());
        for var in CLEARED_ENV {
            cmd.env_remove(var);
        }
        cmd.env("NO_COLOR", "1")
            .current_dir(&self.dir)
            .arg("--id")
            .arg(self.id.to_string())
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("--client-addr")
            .arg(&self.client_addr)
            .arg("--peer-addr")
            .arg(&self.peer_addr)
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        // Without it a test process killed by a timeout would leave its nodes running.
        unsafe {
            cmd.pre_exec(|| match prctl(PR_SET_PDEATHSIG, SIGKILL) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            });
        }
        self.child = Some(cmd.spawn().expect("spawning cairn-node"));
    }

    fn exited(&mut self) -> bool {
        let child = self.child.as_mut().expect("a spawned node");
        child.try_wait().expect("polling cairn-node").is_some()
    }
}

struct Cluster {
    dir: TempDir,
    nodes: Vec<Node>,
    /// Sent as CAIRN_TOKEN by [`Cluster::cairn`] (the admin's, once auth is on).
    token: RefCell<Option<String>>,
    /// HTTPS client ports requiring client certificates: the directory of `cairn-node
    /// certs` (ca.pem, node-ID.pem/key, client.pem/key).
    certs: Option<PathBuf>,
}

impl Cluster {
    /// Three nodes, each serving; not initialized (the test does that with the CLI).
    fn start() -> Cluster {
        Cluster::start_with(false)
    }

    /// [`Cluster::start`], with `tls`: HTTPS client ports that require a client
    /// certificate, from a CA made by `cairn-node certs`.
    fn start_with(tls: bool) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("cairn-cli-e2e-")
            .tempdir()
            .expect("tempdir");
        let certs = tls.then(|| dir.path().join("certs"));
        if let Some(certs) = &certs {
            let made = Command::new(node_bin())
                .args(["certs", "--out"])
                .arg(certs)
                .args(["--nodes", "1,2,3"])
                .output()
                .expect("cairn-node certs");
            assert!(made.status.success(), "cairn-node certs: {made:?}");
        }
        let mut cluster = Cluster {
            dir,
            nodes: Vec::new(),
            token: RefCell::new(None),
            certs,
        };
        for id in 1..=3 {
            let node_dir = cluster.dir.path().join(format!("node{id}"));
            fs::create_dir_all(&node_dir).expect("node dir");
            let (client_addr, peer_addr) = free_addr_pair();
            let extra_args = match &cluster.certs {
                Some(certs) => {
                    let file = |name: String| certs.join(name).to_string_lossy().into_owned();
                    vec![
                        "--tls-cert".into(),
                        file(format!("node-{id}.pem")),
                        "--tls-key".into(),
                        file(format!("node-{id}.key")),
                        "--tls-client-ca".into(),
                        file("ca.pem".into()),
                    ]
                }
                None => Vec::new(),
            };
            cluster.nodes.push(Node {
                id,
                client_addr,
                peer_addr,
                dir: node_dir,
                extra_args,
                child: None,
            });
            cluster.start_node(cluster.nodes.len() - 1);
        }
        cluster
    }

    /// Spawns node `i` and waits until it answers; new ports if another process took one.
    fn start_node(&mut self, i: usize) {
        for _attempt in 0..5 {
            self.nodes[i].spawn();
            let deadline = Instant::now() + START_TIMEOUT;
            loop {
                let endpoint = format!("{}://{}", self.scheme(), self.nodes[i].client_addr);
                let env = self.tls_env();
                let probe = run_cli(
                    self.dir.path(),
                    &pairs(&env),
                    &endpoint,
                    &["--retries", "0", "--timeout-ms", "1000"],
                    &["cluster", "status"],
                );
                if probe.code == 0 {
                    return;
                }
                if self.nodes[i].exited() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {} did not serve within {START_TIMEOUT:?}\n{}",
                    self.nodes[i].id,
                    self.logs()
                );
                std::thread::sleep(POLL);
            }
            let log = fs::read_to_string(self.nodes[i].log()).unwrap_or_default();
            assert!(
                log.contains("binding"),
                "node {} exited during startup:\n{log}",
                self.nodes[i].id
            );
            self.nodes[i].child = None;
            (self.nodes[i].client_addr, self.nodes[i].peer_addr) = free_addr_pair();
        }
        panic!("node {} found no free ports", self.nodes[i].id);
    }

    fn endpoints(&self) -> String {
        let endpoints: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}://{}", self.scheme(), n.client_addr))
            .collect();
        endpoints.join(",")
    }

    /// `--node ID=CLIENT,PEER` for each node.
    fn node_flags(&self) -> Vec<String> {
        self.nodes
            .iter()
            .flat_map(|n| {
                [
                    "--node".to_string(),
                    format!("{}={},{}", n.id, n.client_addr, n.peer_addr),
                ]
            })
            .collect()
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let log = fs::read_to_string(node.log()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            out.push_str(&format!(
                "--- node {} log tail:\n{}\n",
                node.id,
                tail.join("\n")
            ));
        }
        out
    }

    fn scheme(&self) -> &'static str {
        match self.certs {
            Some(_) => "https",
            None => "http",
        }
    }

    /// CAIRN_CACERT, CAIRN_CERT and CAIRN_KEY of an HTTPS cluster.
    fn tls_env(&self) -> Vec<(&'static str, String)> {
        let Some(certs) = &self.certs else {
            return Vec::new();
        };
        let file = |name: &str| certs.join(name).to_string_lossy().into_owned();
        vec![
            ("CAIRN_CACERT", file("ca.pem")),
            ("CAIRN_CERT", file("client.pem")),
            ("CAIRN_KEY", file("client.key")),
        ]
    }

    /// `cairn --endpoints ALL ARGS...`, run in the cluster's directory (no `.cluster/`
    /// above it), with CAIRN_TOKEN set to [`Cluster::token`] if there is one.
    fn cairn(&self, args: &[&str]) -> Run {
        let token = self.token.borrow().clone();
        let env: Vec<(&str, &str)> = token.iter().map(|t| ("CAIRN_TOKEN", t.as_str())).collect();
        self.cairn_with(self.dir.path(), &env, args)
    }

    /// `cairn ARGS...` in `cwd` with the TLS variables and `env` (no [`Cluster::token`]).
    fn cairn_with(&self, cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
        let tls = self.tls_env();
        let mut all = pairs(&tls);
        all.extend_from_slice(env);
        run_cli(cwd, &all, &self.endpoints(), &[], args)
    }

    /// `cairn ARGS...` as [`Cluster::cairn_with`] runs it (no token), `input` on stdin.
    fn cairn_fed(&self, args: &[&str], input: &[u8]) -> Run {
        let tls = self.tls_env();
        let mut cmd = cli_command(self.dir.path(), &pairs(&tls), &self.endpoints(), &[], args);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running cairn");
        // All of it before reading the output: cairn reads its stdin to the end first.
        let mut stdin = child.stdin.take().expect("a piped stdin");
        stdin.write_all(input).expect("writing cairn's stdin");
        drop(stdin);
        Run::of(child.wait_with_output().expect("running cairn"))
    }

    /// `cairn --json ARGS...` as the holder of `token`: exit 0, one JSON document.
    fn json_as<T: DeserializeOwned>(&self, token: &str, args: &[&str]) -> T {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let run = self.cairn_with(self.dir.path(), &[("CAIRN_TOKEN", token)], &all);
        assert_eq!(run.code, 0, "cairn {all:?}: {run:?}");
        serde_json::from_str(run.stdout.trim())
            .unwrap_or_else(|e| panic!("cairn {all:?}: {e}: {run:?}"))
    }

    /// `cairn ARGS...` as the holder of `token` (None: no token at all) fails with exit
    /// code `code` and names `error_code`.
    fn fails_as(&self, token: Option<&str>, args: &[&str], code: i32, error_code: &str) {
        let env: Vec<(&str, &str)> = token.iter().map(|t| ("CAIRN_TOKEN", *t)).collect();
        let run = self.cairn_with(self.dir.path(), &env, args);
        assert_eq!(run.code, code, "cairn {args:?}: {run:?}");
        assert!(
            run.stderr.starts_with(&format!("error: {error_code}: ")),
            "cairn {args:?}: {run:?}"
        );
        if let Some(token) = token {
            assert!(!run.stderr.contains(token), "the token leaked: {run:?}");
        }
    }

    /// Exit 0 expected; the stdout.
    fn ok(&self, args: &[&str]) -> String {
        let run = self.cairn(args);
        assert_eq!(run.code, 0, "cairn {args:?}: {run:?}");
        run.stdout
    }

    /// `cairn --json ARGS...`: exit 0, exactly one line of JSON, parsed as `T`.
    fn json<T: DeserializeOwned>(&self, args: &[&str]) -> T {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let stdout = self.ok(&all);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 1, "cairn {all:?}: one JSON document: {stdout}");
        serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("cairn {all:?}: {e}: {stdout}"))
    }

    /// Exit `code` expected; the stderr names `error_code` (with `--json`, in one error
    /// object).
    fn fails(&self, args: &[&str], code: i32, error_code: &str) -> Run {
        let run = self.cairn(args);
        assert_eq!(run.code, code, "cairn {args:?}: {run:?}");
        if args.contains(&"--json") {
            let error: Value = serde_json::from_str(run.stderr.trim_end())
                .unwrap_or_else(|e| panic!("cairn {args:?}: {e}: {run:?}"));
            assert_eq!(
                error["error"]["code"], error_code,
                "cairn {args:?}: {run:?}"
            );
        } else {
            assert!(
                run.stderr.starts_with(&format!("error: {error_code}: ")),
                "cairn {args:?}: {run:?}"
            );
        }
        assert!(run.stdout.is_empty(), "cairn {args:?}: {run:?}");
        run
    }

    /// Waits until every node follows one leader and has applied what it committed.
    fn wait_settled(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let rows: Vec<Value> = self.json(&["cluster", "status"]);
            let statuses: Vec<ClusterStatus> = rows
                .iter()
                .filter_map(|row| serde_json::from_value(row["status"].clone()).ok())
                .collect();
            let leader = statuses.iter().find(|s| s.role == "leader");
            let settled = statuses.len() == 3
                && leader.is_some_and(|l| {
                    statuses.iter().all(|s| {
                        s.leader_id == Some(l.node_id)
                            && s.term == l.term
                            && s.applied_index >= l.commit_index
                    })
                });
            if settled {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no settled leader within {SETTLE_TIMEOUT:?}: {rows:#?}\n{}",
                self.logs()
            );
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
            self.dir.disable_cleanup(true);
            eprintln!("--- nodes kept in {}", self.dir.path().display());
        }
    }
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `cairn --endpoints ENDPOINTS GLOBAL... ARGS...` in `cwd`, with a clean environment
/// plus `env`, and nothing on stdin.
fn run_cli(
    cwd: &Path,
    env: &[(&str, &str)],
    endpoints: &str,
    global: &[&str],
    args: &[&str],
) -> Run {
    let mut cmd = cli_command(cwd, env, endpoints, global, args);
    let output = cmd.stdin(Stdio::null()).output().expect("running cairn");
    Run::of(output)
}

/// The `cairn` process [`run_cli`] runs, before its stdin is chosen.
fn cli_command(
    cwd: &Path,
    env: &[(&str, &str)],
    endpoints: &str,
    global: &[&str],
    args: &[&str],
) -> Command {
    let mut cmd = Command::new(CLI);
    for var in CLEARED_ENV {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied())
        .current_dir(cwd)
        .arg("--endpoints")
        .arg(endpoints)
        .args(global)
        .args(args);
    cmd
}

impl Run {
    fn of(output: std::process::Output) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

// -- the test ---------------------------------------------------------------------------------

#[test]
fn the_cli_drives_a_cluster_through_the_whole_key_model() {
    let cluster = Cluster::start();
    let key = "cli/project/db";

    // 1. cluster init / status.
    let mut init = vec!["cluster", "init"];
    let flags = cluster.node_flags();
    init.extend(flags.iter().map(String::as_str));
    let membership: MembershipResponse = cluster.json(&init);
    assert_eq!(membership.voters, [1, 2, 3]);
    assert!(membership.learners.is_empty());
    cluster.wait_settled();
    let table = cluster.ok(&["cluster", "status"]);
    assert!(first_line(&table).starts_with("ENDPOINT"), "{table}");
    assert_eq!(
        table.lines().count(),
        4,
        "a header and a row per node: {table}"
    );
    assert_eq!(
        table.lines().filter(|l| l.contains(" leader ")).count(),
        1,
        "{table}"
    );

    // 2. write (a string value and a JSON value) and read back.
    let written: MutationResult = cluster.json(&[
        "write",
        key,
        "postgres 16",
        "--anchor",
        "path:src/db/",
        "--tag",
        "infra",
        "--actor",
        "cli-test",
    ]);
    assert_eq!(
        (written.state, written.version, written.generation),
        (State::Active, 1, 1)
    );
    let number: MutationResult = cluster.json(&["write", "cli/limits/max_conns", "200"]);
    assert_eq!(number.version, 1);
    let read: ReadResponse = cluster.json(&["read", "cli/limits/max_conns"]);
    assert_eq!(
        read.record.value,
        Some(json!(200)),
        "VALUE is JSON if it parses"
    );
    let read: ReadResponse = cluster.json(&["read", key]);
    assert_eq!(read.record.value, Some(json!("postgres 16")));
    assert_eq!(read.record.meta.actor, "cli-test");
    assert_eq!(read.record.meta.anchors, ["path:src/db/"]);
    assert_eq!(read.record.meta.tags, ["infra"]);
    let human = cluster.ok(&["read", key]);
    assert_eq!(
        first_line(&human),
        format!("[{key}] postgres 16"),
        "{human}"
    );
    assert!(human.lines().any(|l| l.starts_with("version:")), "{human}");

    // 3. recall by a file under the anchored directory.
    let recalled: RecallResponse = cluster.json(&["recall", "path:src/db/schema.rs"]);
    let keys: Vec<&str> = recalled.notes.iter().map(|n| n.key.as_str()).collect();
    assert_eq!(keys, [key]);

    // 4. a retried request id applies once.
    let first: MutationResult = cluster.json(&[
        "write",
        "cli/retry",
        "once",
        "--request-id",
        "cli-e2e-request-1",
    ]);
    let again: MutationResult = cluster.json(&[
        "write",
        "cli/retry",
        "once",
        "--request-id",
        "cli-e2e-request-1",
    ]);
    assert!(!first.replayed && again.replayed, "{first:?} / {again:?}");
    assert_eq!(again.version, first.version);
    cluster.fails(
        &[
            "write",
            "cli/retry",
            "twice",
            "--request-id",
            "cli-e2e-request-1",
        ],
        EXIT_INVALID_INPUT,
        "request_id_reused",
    );

    // 5. forget; a write after it fails with exit code 4 (conflict).
    let forgot: MutationResult = cluster.json(&[
        "forget",
        key,
        "--reason",
        "moved to sqlite",
        "--actor",
        "dpo",
    ]);
    assert_eq!((forgot.state, forgot.version), (State::Forgotten, 2));
    let tombstone = forgot.tombstone.clone().expect("a tombstone");
    assert_eq!(
        (tombstone.reason.as_str(), tombstone.actor.as_str()),
        ("moved to sqlite", "dpo")
    );
    cluster.fails(
        &["write", key, "postgres 16"],
        EXIT_CONFLICT,
        "key_forgotten",
    );
    cluster.fails(
        &["--json", "write", key, "postgres 16"],
        EXIT_CONFLICT,
        "key_forgotten",
    );
    // A retried refusal is the original one, and `--json` says so as the node does.
    let retry = [
        "--json",
        "write",
        key,
        "postgres 16",
        "--request-id",
        "cli-refused-1",
    ];
    let first = cluster.fails(&retry, EXIT_CONFLICT, "key_forgotten");
    let again = cluster.fails(&retry, EXIT_CONFLICT, "key_forgotten");
    let first: Value = serde_json::from_str(&first.stderr).unwrap();
    let again: Value = serde_json::from_str(&again.stderr).unwrap();
    assert_eq!(first["error"].get("replayed"), None, "{first}");
    assert_eq!(again["error"]["replayed"], true, "{again}");
    let human = cluster.ok(&["read", key]);
    assert!(
        first_line(&human).starts_with(&format!("[{key}] [FORGOTTEN]")),
        "{human}"
    );
    assert!(!human.contains("postgres"), "the value is gone: {human}");
    let by_id: Tombstone = cluster.json(&["tombstone", &tombstone.id]);
    assert_eq!(by_id, tombstone);
    let human = cluster.ok(&["tombstone", &tombstone.id]);
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("reason:") && l.ends_with("moved to sqlite")),
        "{human}"
    );

    // 6. re-create with --clear-tombstone: a new generation.
    let reopened: MutationResult = cluster.json(&[
        "write",
        key,
        "sqlite",
        "--clear-tombstone",
        "--reason",
        "verified",
        "--anchor",
        "path:src/db/",
    ]);
    assert_eq!(
        (reopened.state, reopened.version, reopened.generation),
        (State::Active, 3, 2)
    );

    // 7. revoke: read and recall deliver the deterrent; a plain write is a conflict.
    let reason = "sqlite was only the test database";
    let revoked: MutationResult =
        cluster.json(&["revoke", key, "--reason", reason, "--actor", "reviewer"]);
    assert_eq!((revoked.state, revoked.version), (State::Revoked, 4));
    let human = cluster.ok(&["read", key]);
    let deterrent = first_line(&human);
    assert!(
        deterrent.starts_with(&format!(
            "[{key}] [REVOKED] Previously believed: sqlite. Revoked "
        )) && deterrent.contains(&format!("by reviewer: {reason}.")),
        "{human}"
    );
    let human = cluster.ok(&["recall", "path:src/db/schema.rs"]);
    let lines: Vec<&str> = human.lines().collect();
    assert_eq!(
        lines,
        [deterrent, "    matched: path:src/db/schema.rs"],
        "{human}"
    );
    let run = cluster.fails(&["write", key, "sqlite"], EXIT_CONFLICT, "key_revoked");
    assert!(run.stderr.contains("override_revocation"), "{run:?}");

    // 8. reinstate.
    let reinstated: MutationResult = cluster.json(&[
        "reinstate",
        key,
        "--reason",
        "it is sqlite after all",
        "--actor",
        "agent-b",
    ]);
    assert_eq!((reinstated.state, reinstated.version), (State::Active, 5));
    let human = cluster.ok(&["read", key]);
    assert_eq!(first_line(&human), format!("[{key}] sqlite"), "{human}");

    // 9. history, in both forms.
    let history: HistoryResponse = cluster.json(&["history", key]);
    let summary: Vec<(EventKind, u64, &str)> = history
        .events
        .iter()
        .map(|e| (e.kind, e.version, e.actor.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (EventKind::Written, 1, "cli-test"),
            (EventKind::Forgotten, 2, "dpo"),
            (EventKind::TombstoneCleared, 3, "cli"),
            (EventKind::Revoked, 4, "reviewer"),
            (EventKind::Reinstated, 5, "agent-b"),
        ]
    );
    let human = cluster.ok(&["history", key]);
    let kinds: Vec<&str> = human
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert_eq!(
        kinds,
        [
            "written",
            "forgotten",
            "tombstone_cleared",
            "revoked",
            "reinstated"
        ],
        "{human}"
    );

    // 10. probe.
    let probe: ProbeResponse = cluster.json(&["probe", key]);
    assert_eq!(
        (
            probe.state,
            probe.value_present,
            probe.retention_present,
            probe.version,
            probe.generation,
            probe.forget_epoch,
            probe.tombstone_id.as_deref(),
            probe.value_revision,
        ),
        (State::Active, true, true, 5, 2, 2, None, reopened.revision)
    );
    let human = cluster.ok(&["probe", key]);
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("value_present:") && l.ends_with("true")),
        "{human}"
    );

    // 11. list, with a state filter.
    let listed: ListResponse = cluster.json(&["list", "cli/"]);
    let keys: Vec<&str> = listed.items.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["cli/limits/max_conns", key, "cli/retry"]);
    cluster.json::<MutationResult>(&["forget", "cli/retry", "--reason", "done"]);
    let listed: ListResponse = cluster.json(&["list", "cli/", "--state", "forgotten"]);
    let keys: Vec<&str> = listed.items.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["cli/retry"]);
    let human = cluster.ok(&["list", "cli/"]);
    assert!(first_line(&human).starts_with("KEY"), "{human}");
    assert_eq!(human.lines().count(), 4, "{human}");

    // 12. other exit codes: not found, invalid input.
    cluster.fails(&["read", "cli/never"], EXIT_NOT_FOUND, "not_found");
    cluster.fails(
        &["forget", "cli/limits/max_conns", "--reason", ""],
        EXIT_INVALID_INPUT,
        "invalid_request",
    );
    // A given empty actor is refused, never replaced by the default `cli`.
    let run = cluster.cairn(&["write", "cli/actor", "1", "--actor", ""]);
    assert_eq!(run.code, EXIT_INVALID_INPUT, "{run:?}");
    assert!(run.stderr.contains("--actor"), "{run:?}");
    cluster.fails(&["read", "cli/actor"], EXIT_NOT_FOUND, "not_found");

    // A failed batch names its failing op, on stderr: as a line, or with --json as the
    // node's error object with its details; nothing of it was applied.
    let ops = cluster.dir.path().join("ops.json");
    fs::write(
        &ops,
        r#"{"ops":[{"op":"write","key":"cli/batch/1","value":1,"actor":"a"},
                   {"op":"write","key":"cli/retry","value":2,"actor":"a"}]}"#,
    )
    .unwrap();
    let ops = ops.to_string_lossy();
    let run = cluster.fails(&["batch", &*ops], EXIT_CONFLICT, "key_forgotten");
    assert!(
        run.stderr
            .starts_with("error: key_forgotten: ops[1]: key \"cli/retry\""),
        "{run:?}"
    );
    let run = cluster.fails(&["--json", "batch", &*ops], EXIT_CONFLICT, "key_forgotten");
    let error: Value = serde_json::from_str(&run.stderr).expect("one JSON error object");
    assert_eq!(error["error"]["op_index"], 1, "{error}");
    assert_eq!(error["error"]["tombstone"]["key"], "cli/retry", "{error}");
    cluster.fails(&["read", "cli/batch/1"], EXIT_NOT_FOUND, "not_found");

    // 13. a staleness bound alone means a bounded read; a named consistency wins.
    let bounded: ReadResponse = cluster.json(&["read", key, "--max-staleness-ms", "100"]);
    assert_eq!(bounded.served.consistency, Consistency::Bounded);
    let named: ReadResponse = cluster.json(&[
        "read",
        key,
        "--max-staleness-ms",
        "100",
        "--consistency",
        "linearizable",
    ]);
    assert_eq!(named.served.consistency, Consistency::Linearizable);

    // recall --include: the states of notes to recall.
    let active: RecallResponse = cluster.json(&["recall", "path:src/db/", "--include", "active"]);
    let keys: Vec<&str> = active.notes.iter().map(|n| n.key.as_str()).collect();
    assert_eq!(keys, [key]);
    let revoked: RecallResponse = cluster.json(&["recall", "path:src/db/", "--include", "revoked"]);
    assert!(revoked.notes.is_empty(), "{revoked:?}");
    // Forgotten notes are never recalled: refused before any request, naming the choices.
    let refused = cluster.cairn(&["recall", "path:src/db/", "--include", "forgotten"]);
    assert_eq!(refused.code, EXIT_INVALID_INPUT, "{refused:?}");
    assert!(
        refused.stderr.contains("expected one of: active, revoked"),
        "{refused:?}"
    );

    // --min-revision on every read: served once applied, else stale_read after the wait.
    let applied = bounded.record.revision.to_string();
    let applied = applied.as_str();
    for read in [
        &["read", key][..],
        &["probe", key],
        &["history", key],
        &["tombstone", &tombstone.id],
        &["list", "cli/"],
        &["recall", "path:src/db/"],
    ] {
        let args = [read, &["--min-revision", applied, "--consistency", "any"]].concat();
        cluster.ok(&args);
    }
    cluster.fails(
        &[
            "read",
            key,
            "--min-revision",
            "1000000000",
            "--retries",
            "0",
        ],
        EXIT_UNAVAILABLE,
        "stale_read",
    );

    // 14. cluster status, health and compact as JSON, one row per endpoint.
    let rows: Vec<Value> = cluster.json(&["cluster", "status"]);
    assert_eq!(rows.len(), 3);
    let mut roles = Vec::new();
    for row in &rows {
        let status: ClusterStatus =
            serde_json::from_value(row["status"].clone()).expect("a status per endpoint");
        assert_eq!(status.voters, [1, 2, 3], "{row}");
        roles.push((status.node_id, status.role));
    }
    let rows: Vec<Value> = cluster.json(&["cluster", "health"]);
    let healths: Vec<(u64, String)> = rows
        .iter()
        .map(|row| {
            let health: Health =
                serde_json::from_value(row["health"].clone()).expect("a health per endpoint");
            assert!(health.ok, "{row}");
            (health.node_id, health.role)
        })
        .collect();
    assert_eq!(
        healths, roles,
        "health names each node and role as status does"
    );
    let table = cluster.ok(&["cluster", "health"]);
    assert!(table.starts_with("ENDPOINT"), "{table}");
    assert_eq!(table.lines().count(), 4, "{table}");
    // One endpoint that does not answer fails the whole check (exit 5, unreachable).
    let (_, silent) = free_addr_pair();
    let first = cluster.endpoints();
    let first = first.split(',').next().unwrap();
    let silent = format!("{}://{silent}", cluster.scheme());
    let run = cluster.cairn(&["cluster", "health", first, &silent]);
    assert_eq!(run.code, EXIT_UNAVAILABLE, "{run:?}");
    assert!(run.stdout.contains(first), "{run:?}");
    let rows: Vec<Value> = cluster.json(&["cluster", "compact"]);
    assert_eq!(rows.len(), 3);
    for row in &rows {
        let compacted: CompactResponse =
            serde_json::from_value(row["compact"].clone()).expect("a compact answer");
        assert!(compacted.snapshot_index >= reinstated.revision, "{row}");
    }
    // Still served after compaction.
    let read: ReadResponse = cluster.json(&["read", key]);
    assert_eq!(read.record.value, Some(json!("sqlite")));

    // A value and a reason written by another agent cannot command the terminal or forge a
    // line: a revoked key's value that ends in a fake `state: active` line stays one line.
    let hostile = "ok\u{1b}]0;title\u{7}\u{9b}2J\nstate:           active";
    cluster.ok(&["write", "cli/hostile", hostile]);
    let reason = "wrong\nstate:           active";
    cluster.ok(&["revoke", "cli/hostile", "--reason", reason]);
    let human = cluster.ok(&["read", "cli/hostile"]);
    let states: Vec<&str> = human.lines().filter(|l| l.starts_with("state:")).collect();
    assert_eq!(states, ["state:           revoked"], "{human}");
    assert!(
        human.contains("\\u{1b}]0;title\\u{7}\\u{9b}2J\\nstate:"),
        "{human}"
    );
    assert!(human.contains("wrong\\nstate:"), "{human}");
    for shown in [&human, &cluster.ok(&["--json", "read", "cli/hostile"])] {
        assert!(
            !shown.chars().any(|c| c.is_control() && c != '\n'),
            "{shown:?}"
        );
    }
    let read: ReadResponse = cluster.json(&["read", "cli/hostile"]);
    assert_eq!(read.record.value, Some(json!(hostile)));

    // A mutation whose answer cannot be printed (stdout on a full disk) was still applied:
    // the session file records it, and the failure is an I/O error (exit 1).
    let session = cluster.dir.path().join("full.session");
    let full = Command::new(CLI)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(cluster.dir.path())
        .args(["--endpoints", &cluster.endpoints(), "--session-file"])
        .arg(&session)
        .args(["write", "cli/full", "1"])
        .stdin(Stdio::null())
        .stdout(File::create("/dev/full").expect("/dev/full"))
        .output()
        .expect("running cairn");
    let stderr = String::from_utf8_lossy(&full.stderr);
    assert_eq!(full.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: io: stdout: "), "{stderr}");
    let saved = fs::read_to_string(&session).expect("the session file was written");
    assert!(!saved.trim().is_empty(), "{saved:?}");
    let read: ReadResponse = cluster.json(&["read", "cli/full"]);
    assert_eq!(read.record.value, Some(json!(1)));

    // Empty variables count as unset (the default actor, no CA), as in the Python client.
    let empty: Vec<(&str, &str)> = ["CAIRN_ACTOR", "CAIRN_CACERT", "CAIRN_SESSION_FILE"]
        .into_iter()
        .map(|name| (name, ""))
        .collect();
    let run = cluster.cairn_with(cluster.dir.path(), &empty, &["write", "cli/env", "1"]);
    assert_eq!(run.code, 0, "{run:?}");
    let read: ReadResponse = cluster.json(&["read", "cli/env"]);
    assert_eq!(read.record.meta.actor, "cli");
}

#[test]
fn a_command_line_error_with_json_is_one_line_of_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cairn = |args: &[&str]| run_cli(dir.path(), &[], "127.0.0.1:1", &[], args);
    for args in [
        &["--json", "write", "k", "v", "--expected-version", "abc"][..],
        &["write", "k", "v", "--actor", "", "--json"],
        &["--json", "write", "onlykey"],
        &["--json", "auth", "grant", "p1"],
    ] {
        let run = cairn(args);
        assert_eq!(run.code, EXIT_INVALID_INPUT, "cairn {args:?}: {run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "cairn {args:?}: {run:?}");
        let error: Value = serde_json::from_str(&run.stderr)
            .unwrap_or_else(|e| panic!("cairn {args:?}: {e}: {run:?}"));
        assert_eq!(error["error"]["code"], "invalid_input", "{error}");
        assert!(run.stdout.is_empty(), "cairn {args:?}: {run:?}");
    }
    // `auth grant` without either names both choices.
    let run = cairn(&["--json", "auth", "grant", "p1"]);
    assert!(
        run.stderr.contains("--grant <PREFIX=PERMS>") && run.stderr.contains("--none"),
        "{run:?}"
    );
    // Help is no error, and without --json clap's text stays as it is.
    let run = cairn(&["--json", "write", "--help"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("Write a value"), "{run:?}");
    let run = cairn(&["write", "--", "--json"]);
    assert_eq!(run.code, EXIT_INVALID_INPUT, "{run:?}");
    assert!(run.stderr.starts_with("error: "), "{run:?}");
}

#[test]
fn large_values_odd_keys_and_session_files_that_cannot_be_saved() {
    let cluster = Cluster::start();
    let mut init = vec!["cluster", "init"];
    let flags = cluster.node_flags();
    init.extend(flags.iter().map(String::as_str));
    cluster.json::<MembershipResponse>(&init);
    cluster.wait_settled();

    // VALUE `-` is stdin: a value bigger than one argument may be, parsed as VALUE is.
    let big: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    assert!(big.len() > 200_000);
    let run = cluster.cairn_fed(&["write", "big/text", "-"], big.as_bytes());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let read: ReadResponse = cluster.json(&["read", "big/text"]);
    assert_eq!(
        read.record.value,
        Some(json!(big)),
        "as it is, final newline too"
    );
    let run = cluster.cairn_fed(&["write", "big/json", "-"], b"{\"n\": [1, 2]}\n");
    assert_eq!(run.code, 0, "{run:?}");
    let read: ReadResponse = cluster.json(&["read", "big/json"]);
    assert_eq!(read.record.value, Some(json!({"n": [1, 2]})));

    // The `more:` line of a page is a shell word: pasted, it gets the next page.
    cluster.ok(&["write", "odd/a b", "1"]);
    cluster.ok(&["write", "odd/a c", "2"]);
    let page = cluster.ok(&["list", "odd/a ", "--limit", "1"]);
    let more = page.lines().last().and_then(|l| l.strip_prefix("more: "));
    assert_eq!(more, Some("--after 'odd/a b'"), "{page}");
    let words = Command::new("sh")
        .arg("-c")
        .arg(format!("printf '%s\\n' {}", more.unwrap()))
        .output()
        .expect("sh");
    let words = String::from_utf8(words.stdout).expect("UTF-8");
    let mut next = vec!["list", "odd/a "];
    next.extend(words.lines());
    let page = cluster.ok(&next);
    let keys: Vec<&str> = page.lines().skip(1).filter_map(|l| l.get(..7)).collect();
    assert_eq!(keys, ["odd/a c"], "{page}");
    assert!(cluster
        .ok(&["list", "big/", "--limit", "1"])
        .ends_with("more: --after big/json\n"));
    // A key that starts with `-` follows an `=`, or the CLI would read it as a flag.
    cluster.ok(&["write", "--", "-a", "1"]);
    cluster.ok(&["write", "--", "-b", "2"]);
    let page = cluster.ok(&["list", "-", "--limit", "1"]);
    let more = page.lines().last().and_then(|l| l.strip_prefix("more: "));
    assert_eq!(more, Some("--after=-a"), "{page}");
    let page = cluster.ok(&["list", "-", more.unwrap()]);
    let keys: Vec<&str> = page.lines().skip(1).filter_map(|l| l.get(..2)).collect();
    assert_eq!(keys, ["-b"], "{page}");

    // A session file that could not be saved afterwards (a directory that takes no new
    // file) fails the command before anything is sent.
    let run = cluster.cairn(&[
        "--session-file",
        "/proc/self/cairn.session",
        "write",
        "cli/unsaved",
        "1",
    ]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .starts_with("error: io: /proc/self/cairn.session: ")
            && run.stderr.contains("nothing was sent"),
        "{run:?}"
    );
    assert!(run.stdout.is_empty(), "{run:?}");
    cluster.fails(&["read", "cli/unsaved"], EXIT_NOT_FOUND, "not_found");
}

fn pairs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// A file only its owner can read, as a token file should be.
fn write_private(path: &Path, text: &str) {
    fs::write(path, text).expect("writing a token file");
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).expect("chmod 600");
}

#[test]
fn an_auth_on_cluster_admits_principals_only_within_their_grants() {
    let cluster = Cluster::start();

    // 1. init with an admin: the token comes back once, in the answer.
    let mut init = vec!["cluster", "init", "--auth-admin", "admin"];
    let flags = cluster.node_flags();
    init.extend(flags.iter().map(String::as_str));
    let membership: MembershipResponse = cluster.json(&init);
    let enabled = membership
        .auth
        .expect("init with --auth-admin answers the admin token");
    assert_eq!(enabled.admin, "admin");
    assert!(enabled.token.starts_with("cairn_"), "token format");
    let admin = enabled.token.clone();
    *cluster.token.borrow_mut() = Some(admin.clone());
    cluster.wait_settled();

    // 2. the admin's token from CAIRN_TOKEN, --token-file and .cluster/admin.token.
    let whoami: WhoAmI = cluster.json_as(&admin, &["auth", "whoami"]);
    assert_eq!(whoami.name, "admin");
    let token_file = cluster.dir.path().join("admin.token");
    write_private(&token_file, &format!("{admin}\n"));
    let run = cluster.cairn_with(
        cluster.dir.path(),
        &[],
        &[
            "--json",
            "--token-file",
            token_file.to_str().unwrap(),
            "auth",
            "whoami",
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        serde_json::from_str::<WhoAmI>(run.stdout.trim())
            .unwrap()
            .name,
        "admin"
    );
    let project = cluster.dir.path().join("project");
    fs::create_dir_all(project.join(".cluster")).unwrap();
    fs::create_dir_all(project.join("src/deep")).unwrap();
    write_private(&project.join(".cluster/admin.token"), &format!("{admin}\n"));
    let run = cluster.cairn_with(&project.join("src/deep"), &[], &["auth", "whoami"]);
    assert_eq!(run.code, 0, "found by walking up: {run:?}");
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("principal:") && l.ends_with("admin")),
        "{run:?}"
    );
    cluster.fails_as(
        None,
        &["write", "notes/x", "v"],
        EXIT_DENIED,
        "unauthenticated",
    );
    cluster.fails_as(
        Some("cairn_bm90LWEtdG9rZW4tbm90LWEtdG9rZW4tbm90LWEtdG9rZW4"),
        &["read", "notes/x"],
        EXIT_DENIED,
        "unauthenticated",
    );

    // 3. a principal confined to its prefix; the token shown once, with the note.
    let run = cluster.cairn(&["auth", "principal", "add", "scratch"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("it is not shown again"), "{run:?}");
    let created: CreatedPrincipal = cluster.json(&[
        "auth",
        "principal",
        "add",
        "agent-7",
        "--grant",
        "notes/agent-7/=read,write",
    ]);
    assert_eq!(created.name, "agent-7");
    let agent = created.token;
    let written: MutationResult =
        cluster.json_as(&agent, &["write", "notes/agent-7/todo", "ship it"]);
    assert_eq!(written.version, 1);
    let read: ReadResponse = cluster.json_as(&agent, &["read", "notes/agent-7/todo"]);
    assert_eq!(
        read.record.meta.actor, "agent-7",
        "the actor is the principal"
    );
    cluster.fails_as(
        Some(&agent),
        &["write", "notes/other/todo", "not mine"],
        EXIT_DENIED,
        "permission_denied",
    );
    cluster.fails_as(
        Some(&agent),
        &[
            "forget",
            "notes/agent-7/todo",
            "--reason",
            "no forget grant",
        ],
        EXIT_DENIED,
        "permission_denied",
    );
    cluster.fails_as(
        Some(&agent),
        &[
            "write",
            "notes/agent-7/todo",
            "v2",
            "--actor",
            "someone-else",
        ],
        EXIT_DENIED,
        "actor_mismatch",
    );
    let whoami: WhoAmI = cluster.json_as(&agent, &["auth", "whoami"]);
    assert_eq!((whoami.name.as_str(), whoami.grants.len()), ("agent-7", 1));
    cluster.fails_as(
        Some(&agent),
        &["auth", "principal", "list"],
        EXIT_DENIED,
        "permission_denied",
    );

    // 4. list; grants replaced.
    let list: PrincipalList = cluster.json(&["auth", "principal", "list"]);
    let names: Vec<&str> = list.principals.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains(&"admin") && names.contains(&"agent-7"),
        "{names:?}"
    );
    let human = cluster.ok(&["auth", "principal", "list"]);
    assert!(first_line(&human).starts_with("NAME"), "{human}");
    assert!(human.contains("notes/agent-7/=read,write"), "{human}");
    let changed: AclChanged = cluster.json(&["auth", "grant", "agent-7", "--grant", "=read"]);
    assert!(changed.acl_revision > list.acl_revision, "{changed:?}");
    cluster.fails_as(
        Some(&agent),
        &["write", "notes/agent-7/todo", "v2"],
        EXIT_DENIED,
        "permission_denied",
    );
    let read: ReadResponse = cluster.json_as(&agent, &["read", "notes/agent-7/todo"]);
    assert_eq!(read.record.value, Some(json!("ship it")));

    // 5. rotation stops the old token at once; the new one works.
    let rotated: RotatedToken = cluster.json(&["auth", "principal", "rotate", "agent-7"]);
    assert_ne!(rotated.token, agent);
    cluster.fails_as(
        Some(&agent),
        &["read", "notes/agent-7/todo"],
        EXIT_DENIED,
        "unauthenticated",
    );
    let whoami: WhoAmI = cluster.json_as(&rotated.token, &["auth", "whoami"]);
    assert_eq!(whoami.name, "agent-7");

    // 6. deletion stops it too.
    cluster.json::<AclChanged>(&["auth", "principal", "delete", "agent-7"]);
    cluster.fails_as(
        Some(&rotated.token),
        &["auth", "whoami"],
        EXIT_DENIED,
        "unauthenticated",
    );
}

#[test]
fn the_cli_reaches_an_https_cluster_with_its_ca_and_a_client_certificate() {
    let cluster = Cluster::start_with(true);
    let mut init = vec!["cluster", "init"];
    let flags = cluster.node_flags();
    init.extend(flags.iter().map(String::as_str));
    let membership: MembershipResponse = cluster.json(&init);
    assert_eq!(membership.voters, [1, 2, 3]);
    cluster.wait_settled();
    assert!(cluster.endpoints().starts_with("https://"));

    // Writes follow the leader over HTTPS (discovery names host:port, kept as https).
    let written: MutationResult = cluster.json(&["write", "tls/x", "over https"]);
    assert_eq!(written.version, 1);
    let read: ReadResponse = cluster.json(&["read", "tls/x"]);
    assert_eq!(read.record.value, Some(json!("over https")));

    // Without a CA the https endpoints are refused before anything is sent.
    let certs = cluster.certs.clone().unwrap();
    let run = run_cli(
        cluster.dir.path(),
        &[],
        &cluster.endpoints(),
        &[],
        &["read", "tls/x"],
    );
    assert_eq!(run.code, EXIT_INVALID_INPUT, "{run:?}");
    assert!(run.stderr.contains("CA"), "{run:?}");
    // With the CA but no client certificate, the node refuses the handshake.
    let ca = certs.join("ca.pem");
    let run = run_cli(
        cluster.dir.path(),
        &[("CAIRN_CACERT", ca.to_str().unwrap())],
        &cluster.endpoints(),
        &["--retries", "0"],
        &["read", "tls/x"],
    );
    assert_eq!(run.code, 5, "transport failure: {run:?}");
    // Bare host:port endpoints are https once a CA is given.
    let bare: Vec<&str> = cluster
        .nodes
        .iter()
        .map(|n| n.client_addr.as_str())
        .collect();
    let tls = cluster.tls_env();
    let run = run_cli(
        cluster.dir.path(),
        &pairs(&tls),
        &bare.join(","),
        &[],
        &["read", "tls/x"],
    );
    assert_eq!(run.code, 0, "{run:?}");
}
