//! The cairn side: a local cluster of `cairn-node` processes, and the load-generator
//! workers that talk to it from outside (raw HTTP, one keep-alive connection per worker
//! and target, by default; or the public `cairn_client` library with `--cairn-driver
//! client`).
//!
//! A `cairn-secure` cluster (`secure: true` in [`Cluster::start`]) is the same cluster with
//! SPEC §8 on: certificates from `cairn-node certs`, HTTPS client ports, mutual TLS between
//! peers, init with `auth: {admin: "bench"}` (the benchmark's actor, so mutations name
//! their own principal), and every request of the harness and the load generator with the
//! admin token (never printed) over TLS to that CA.
//!
//! Diagnostic split of that cost: `CAIRN_BENCH_SECURE_PARTS=tls` (TLS and peer mTLS, no
//! auth) or `=auth` (auth over plain HTTP, peers plain) changes what `cairn-secure` turns
//! on; unset or `tls,auth` is the whole of SPEC §8.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use cairn_api::{
    BatchOp, BatchRequest, Consistency, EnableAuthRequest, ForgetRequest, InitRequest, NodeSpec,
    ReadOptions, RevokeRequest, WriteRequest,
};
use cairn_client::{Client, ClientError};
use cairn_jepsen::certs::ClusterCerts;
use serde::Serialize;

use super::http1::Http1;
use super::procs::{self, Procs};
use super::workload::{key_name, Op, OpKind, Outcome, Workload};

pub const ACTOR: &str = "bench";
/// Longest a node may take to answer /healthz after it was started.
const HEALTH_WAIT: Duration = Duration::from_secs(60);
/// Longest a fresh cluster may take to elect a leader and apply a first write.
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// Bounded-staleness reads of the benchmark (SPEC §3).
pub const MAX_STALENESS_MS: u64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverKind {
    /// JSON over one HTTP/1.1 connection per worker and target ([`Http1`]); the answer's
    /// status code decides.
    Raw,
    /// `cairn_client::Client::pinned` per target node, retries off (typed request and
    /// response, error decoding): what an agent embedding the library pays.
    Client,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub id: u64,
    /// Process name in the registry: `{prefix}-{id}`.
    pub name: String,
    pub client_addr: String,
    pub peer_addr: String,
    pub data_dir: PathBuf,
    /// `http`, or `https` on a `cairn-secure` cluster.
    pub scheme: &'static str,
}

impl Node {
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.client_addr)
    }

    pub fn spec(&self) -> NodeSpec {
        NodeSpec {
            id: self.id,
            client_addr: self.client_addr.clone(),
            peer_addr: self.peer_addr.clone(),
        }
    }
}

pub struct Cluster {
    procs: Arc<Procs>,
    bin: PathBuf,
    /// Passed as `--config` to every node (operator tuning experiments).
    config: Option<PathBuf>,
    logs: PathBuf,
    pub nodes: Vec<Node>,
    /// Administration and discovery (public client library, default retries).
    pub admin: Client,
    /// Longest a load-generator request may take.
    op_timeout: Duration,
    /// `--cairn-driver client`: the library client (retries off) every worker pins.
    lib: Client,
    /// `cairn-secure`: certificates and token.
    security: Option<Security>,
    /// `cairn-secure`: what the raw driver's connections use.
    http_secure: Option<super::http1::Secure>,
}

/// Node `id` of a cluster whose node i listens on `client_base + i` / `peer_base + i`.
pub fn node_layout(prefix: &str, work: &Path, id: u64, client_base: u16, peer_base: u16) -> Node {
    Node {
        id,
        name: format!("{prefix}-{id}"),
        client_addr: format!("127.0.0.1:{}", client_base + id as u16),
        peer_addr: format!("127.0.0.1:{}", peer_base + id as u16),
        data_dir: work.join(format!("{prefix}-{id}")),
        scheme: "http",
    }
}

/// What a `cairn-secure` cluster turns on: certificates for TLS (`None`: the `auth` part
/// alone), auth, and after init the admin token.
struct Security {
    certs: Option<ClusterCerts>,
    auth: bool,
    token: Option<String>,
}

/// (TLS, auth) of `cairn-secure`, from `CAIRN_BENCH_SECURE_PARTS` (default both).
fn secure_parts() -> (bool, bool) {
    match std::env::var("CAIRN_BENCH_SECURE_PARTS") {
        Ok(parts) if !parts.trim().is_empty() => {
            let has = |p: &str| parts.split(',').any(|x| x.trim() == p);
            (has("tls"), has("auth"))
        }
        _ => (true, true),
    }
}

impl Security {
    fn generate(bin: &Path, dir: &Path, n: u64) -> Result<Security> {
        let (tls, auth) = secure_parts();
        let certs = match tls {
            true => Some(ClusterCerts::generate(bin, dir, 1..=n, |_| None)?),
            false => None,
        };
        Ok(Security {
            certs,
            auth,
            token: None,
        })
    }

    fn scheme(&self) -> &'static str {
        if self.certs.is_some() {
            "https"
        } else {
            "http"
        }
    }

    fn node_args(&self, id: u64) -> Vec<OsString> {
        self.certs
            .as_ref()
            .map_or_else(Vec::new, |certs| certs.node_args(id))
    }

    fn configure(&self, builder: cairn_client::ClientBuilder) -> cairn_client::ClientBuilder {
        let builder = match &self.certs {
            Some(certs) => builder.ca_cert_pem(certs.ca_pem()),
            None => builder,
        };
        match &self.token {
            Some(t) => builder.token(t),
            None => builder,
        }
    }
}

/// (admin, lib) clients of a cluster.
fn clients(
    endpoints: Vec<String>,
    security: Option<&Security>,
    op_timeout: Duration,
) -> Result<(Client, Client)> {
    let configure = |b: cairn_client::ClientBuilder| match security {
        Some(security) => security.configure(b),
        None => b,
    };
    let admin = configure(Client::builder(endpoints.clone()))
        .request_timeout(Duration::from_secs(20))
        .build()
        .map_err(|e| anyhow!("cairn client: {e}"))?;
    let lib = configure(Client::builder(endpoints))
        .retries_max(0)
        .request_timeout(op_timeout)
        .build()
        .map_err(|e| anyhow!("cairn client: {e}"))?;
    Ok((admin, lib))
}

impl Cluster {
    /// Starts nodes 1..=n, initializes them as one cluster and waits until a write
    /// succeeds. With `secure`, auth + TLS + peer mTLS (see the module doc).
    #[allow(clippy::too_many_arguments)] // one call site per cluster; a struct adds nothing
    pub async fn start(
        procs: Arc<Procs>,
        bin: &Path,
        work: &Path,
        prefix: &str,
        n: u64,
        ports: (u16, u16),
        op_timeout: Duration,
        config: Option<&Path>,
        secure: bool,
    ) -> Result<Cluster> {
        let security = match secure {
            true => Some(Security::generate(
                bin,
                &work.join(format!("{prefix}-certs")),
                n,
            )?),
            false => None,
        };
        let nodes: Vec<Node> = (1..=n)
            .map(|id| Node {
                scheme: security.as_ref().map_or("http", Security::scheme),
                ..node_layout(prefix, work, id, ports.0, ports.1)
            })
            .collect();
        let (admin, lib) = clients(endpoints_of(&nodes), security.as_ref(), op_timeout)?;
        let mut cluster = Cluster {
            procs,
            bin: bin.to_path_buf(),
            config: config.map(Path::to_path_buf),
            logs: work.join("logs"),
            nodes,
            admin,
            op_timeout,
            lib,
            security,
            http_secure: None,
        };
        std::fs::create_dir_all(&cluster.logs)?;
        for node in &cluster.nodes {
            cluster.spawn_node(node)?;
        }
        for node in &cluster.nodes {
            cluster.wait_healthy(node, HEALTH_WAIT).await?;
        }
        let init =
            InitRequest {
                nodes: cluster.nodes.iter().map(Node::spec).collect(),
                auth: cluster.security.as_ref().is_some_and(|t| t.auth).then(|| {
                    EnableAuthRequest {
                        admin: ACTOR.to_string(),
                    }
                }),
            };
        let answer = cluster
            .admin
            .pinned(&cluster.nodes[0].url())
            .map_err(|e| anyhow!("{e}"))?
            .init(init)
            .await
            .map_err(|e| anyhow!("POST /cluster/init: {e}"))?;
        if let Some(security) = cluster.security.as_mut() {
            if security.auth {
                let token = answer
                    .auth
                    .ok_or_else(|| anyhow!("init with auth answered without the admin token"))?
                    .token;
                security.token = Some(token);
            }
            let ca_pem = security.certs.as_ref().map(ClusterCerts::ca_pem);
            cluster.http_secure = Some(
                super::http1::Secure::new(ca_pem, security.token.as_deref())
                    .map_err(|e| anyhow!("{e}"))?,
            );
            (cluster.admin, cluster.lib) = clients(
                endpoints_of(&cluster.nodes),
                cluster.security.as_ref(),
                op_timeout,
            )?;
        }
        cluster.wait_writable().await?;
        Ok(cluster)
    }

    /// Starts `node`'s process (its data dir is created if missing).
    pub fn spawn_node(&self, node: &Node) -> Result<()> {
        procs::ensure_port_free(port_of(&node.client_addr)?)?;
        procs::ensure_port_free(port_of(&node.peer_addr)?)?;
        std::fs::create_dir_all(&node.data_dir)?;
        let mut cmd = Command::new(&self.bin);
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        cmd.arg("--id")
            .arg(node.id.to_string())
            .arg("--data-dir")
            .arg(&node.data_dir)
            .arg("--client-addr")
            .arg(&node.client_addr)
            .arg("--peer-addr")
            .arg(&node.peer_addr);
        if let Some(security) = &self.security {
            cmd.args(security.node_args(node.id));
        }
        let log = self.logs.join(format!("{}.log", node.name));
        self.procs.spawn(&node.name, cmd, &log)?;
        Ok(())
    }

    /// Waits for `GET /healthz` to answer; returns how long that took.
    pub async fn wait_healthy(&self, node: &Node, limit: Duration) -> Result<Duration> {
        let started = Instant::now();
        loop {
            self.procs.check_alive(&node.name)?;
            if self.admin.healthz(&node.url()).await.is_ok() {
                return Ok(started.elapsed());
            }
            if started.elapsed() > limit {
                bail!(
                    "{} not healthy after {limit:?}; log tail:\n{}",
                    node.name,
                    self.procs.log_tail(&node.name, 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn wait_writable(&self) -> Result<()> {
        let started = Instant::now();
        let probe = WriteRequest::new("bench/ready", "ready".into(), ACTOR);
        let mut last = String::new();
        while started.elapsed() < LEADER_WAIT {
            match self.admin.write(probe.clone()).await {
                Ok(_) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
            for node in &self.nodes {
                self.procs.check_alive(&node.name)?;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("no cairn write succeeded within {LEADER_WAIT:?}: {last}")
    }

    /// The node every member agrees leads (its own status says `leader`).
    pub async fn leader(&self) -> Result<Node> {
        let started = Instant::now();
        loop {
            let mut votes: HashMap<u64, usize> = HashMap::new();
            for node in &self.nodes {
                if let Ok(status) = self.admin.status(&node.url()).await {
                    if let Some(id) = status.leader_id {
                        *votes.entry(id).or_default() += 1;
                    }
                }
            }
            if let Some((&id, _)) = votes.iter().max_by_key(|(_, v)| **v) {
                if let Some(node) = self.nodes.iter().find(|n| n.id == id) {
                    if let Ok(s) = self.admin.status(&node.url()).await {
                        if s.role == "leader" {
                            return Ok(node.clone());
                        }
                    }
                }
            }
            if started.elapsed() > LEADER_WAIT {
                bail!("no cairn leader within {LEADER_WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Counters and gauges of `GET /metrics` on `node`.
    pub async fn metrics(&self, node: &Node) -> Result<BTreeMap<String, f64>> {
        let text = self
            .admin
            .metrics(&node.url())
            .await
            .map_err(|e| anyhow!("GET /metrics: {e}"))?;
        Ok(parse_prometheus(&text))
    }

    /// Writes keys `range` (values of `value_bytes`) in `POST /v1/batch` requests of
    /// `batch` writes, `concurrency` at a time, at the leader. Returns ops/s.
    pub async fn load(
        &self,
        range: std::ops::Range<u64>,
        value_bytes: usize,
        batch: u64,
        concurrency: usize,
    ) -> Result<f64> {
        let leader = self
            .admin
            .pinned(&self.leader().await?.url())
            .map_err(|e| anyhow!("{e}"))?;
        let value = serde_json::Value::String("v".repeat(value_bytes));
        let started = Instant::now();
        let chunks: Vec<std::ops::Range<u64>> = (range.start..range.end)
            .step_by(batch as usize)
            .map(|s| s..(s + batch).min(range.end))
            .collect();
        let total = range.end - range.start;
        let results = futures::StreamExt::collect::<Vec<_>>(futures::StreamExt::buffer_unordered(
            futures::stream::iter(chunks.into_iter().map(|chunk| {
                let leader = leader.clone();
                let value = value.clone();
                async move {
                    let ops = chunk
                        .map(|i| {
                            BatchOp::Write(WriteRequest::new(key_name(i), value.clone(), ACTOR))
                        })
                        .collect();
                    leader
                        .batch(BatchRequest {
                            ops,
                            request_id: None,
                        })
                        .await
                        .map(drop)
                }
            })),
            concurrency,
        ))
        .await;
        if let Some(err) = results.into_iter().find_map(Result::err) {
            bail!("cairn batch load failed: {err}");
        }
        Ok(total as f64 / started.elapsed().as_secs_f64())
    }

    /// One load-generator worker for client `index` of a point.
    pub fn worker(
        &self,
        kind: DriverKind,
        workload: Workload,
        index: usize,
        leader: &Node,
    ) -> Result<Worker> {
        let read_node = match workload {
            Workload::ReadBounded => &self.nodes[index % self.nodes.len()],
            _ => leader,
        };
        let (consistency, max_staleness_ms) = match workload {
            Workload::ReadBounded => ("bounded", Some(MAX_STALENESS_MS)),
            _ => ("linearizable", None),
        };
        let lib = match kind {
            DriverKind::Raw => None,
            DriverKind::Client => Some((
                self.lib.pinned(&leader.url()).map_err(|e| anyhow!("{e}"))?,
                self.lib
                    .pinned(&read_node.url())
                    .map_err(|e| anyhow!("{e}"))?,
            )),
        };
        Ok(Worker {
            leader: Http1::new(&leader.url(), self.op_timeout).secure(self.http_secure.clone()),
            reader: (read_node.id != leader.id).then(|| {
                Http1::new(&read_node.url(), self.op_timeout).secure(self.http_secure.clone())
            }),
            consistency,
            max_staleness_ms,
            reestablish: true,
            lib,
        })
    }
}

fn endpoints_of(nodes: &[Node]) -> Vec<String> {
    nodes.iter().map(Node::url).collect()
}

fn port_of(addr: &str) -> Result<u16> {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| anyhow!("no port in {addr}"))
}

pub fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

#[derive(Serialize)]
struct WriteBody<'a> {
    key: &'a str,
    value: &'a str,
    actor: &'a str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    clear_tombstone: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    override_revocation: bool,
    request_id: &'a str,
}

#[derive(Serialize)]
struct ReadBody<'a> {
    key: &'a str,
    consistency: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_staleness_ms: Option<u64>,
}

#[derive(Serialize)]
struct RetireBody<'a> {
    key: &'a str,
    actor: &'a str,
    reason: &'a str,
    request_id: &'a str,
}

/// One client task's view of the cluster.
pub struct Worker {
    /// Mutations, and reads when they go to the leader too (linearizable, mixed).
    leader: Http1,
    /// Bounded reads at a node other than the leader; `None`: reads use `leader`'s
    /// connection (one connection per client and node, as with any HTTP/1.1 client).
    reader: Option<Http1>,
    consistency: &'static str,
    max_staleness_ms: Option<u64>,
    /// Writes re-establish forgotten/revoked keys (`clear_tombstone`, `override_revocation`;
    /// both are no-ops on a live key), as an agent that decided to re-learn a fact would,
    /// so write points that follow the mixed one meet no 409s (etcd puts recreate deleted
    /// keys alike).
    reestablish: bool,
    /// `--cairn-driver client`: (leader, read node) clients of the public library.
    lib: Option<(Client, Client)>,
}

impl Worker {
    /// A raw worker whose every request goes to `base` (the load generator's self-check).
    pub fn stub(base: &str, op_timeout: Duration) -> Worker {
        Worker {
            leader: Http1::new(base, op_timeout),
            reader: None,
            consistency: "linearizable",
            max_staleness_ms: None,
            reestablish: true,
            lib: None,
        }
    }

    pub async fn exec(&mut self, op: Op, value: &str) -> Outcome {
        let key = key_name(op.key);
        if self.lib.is_some() {
            return self.exec_lib(op.kind, &key, value).await;
        }
        // Every mutation carries a request_id, made as the public client makes them: the
        // node's exactly-once bookkeeping is part of the cost of a write. Reads carry none.
        let (target, path, body) = match op.kind {
            OpKind::Read => (
                match &mut self.reader {
                    Some(reader) => reader,
                    None => &mut self.leader,
                },
                "/v1/read",
                serde_json::to_vec(&ReadBody {
                    key: &key,
                    consistency: self.consistency,
                    max_staleness_ms: self.max_staleness_ms,
                }),
            ),
            OpKind::Write => (
                &mut self.leader,
                "/v1/write",
                serde_json::to_vec(&WriteBody {
                    key: &key,
                    value,
                    actor: ACTOR,
                    clear_tombstone: self.reestablish,
                    override_revocation: self.reestablish,
                    request_id: &cairn_client::new_request_id(),
                }),
            ),
            OpKind::Forget | OpKind::Revoke => (
                &mut self.leader,
                if op.kind == OpKind::Forget {
                    "/v1/forget"
                } else {
                    "/v1/revoke"
                },
                serde_json::to_vec(&RetireBody {
                    key: &key,
                    actor: ACTOR,
                    reason: "bench: superseded belief",
                    request_id: &cairn_client::new_request_id(),
                }),
            ),
        };
        let body = match body {
            Ok(b) => b,
            Err(e) => return Outcome::Error(format!("encode: {e}")),
        };
        // The whole body is read: it is part of the request's cost.
        match target.post_json(path, body).await {
            Ok((status, bytes)) => classify(status, &bytes),
            Err(e) => Outcome::Error(e),
        }
    }

    async fn exec_lib(&mut self, kind: OpKind, key: &str, value: &str) -> Outcome {
        let (leader, reader) = self.lib.as_ref().expect("lib driver");
        let result = match kind {
            OpKind::Read => {
                let options = ReadOptions {
                    consistency: Some(if self.consistency == "bounded" {
                        Consistency::Bounded
                    } else {
                        Consistency::Linearizable
                    }),
                    max_staleness_ms: self.max_staleness_ms,
                    min_revision: None,
                };
                reader.read(key, options).await.map(drop)
            }
            OpKind::Write => {
                let mut w = WriteRequest::new(key, value.into(), ACTOR);
                w.clear_tombstone = self.reestablish;
                w.override_revocation = self.reestablish;
                leader.write(w).await.map(drop)
            }
            OpKind::Forget => leader
                .forget(ForgetRequest::new(key, ACTOR, "bench: superseded belief"))
                .await
                .map(drop),
            OpKind::Revoke => leader
                .revoke(RevokeRequest::new(key, ACTOR, "bench: superseded belief"))
                .await
                .map(drop),
        };
        match result {
            Ok(()) => Outcome::Ok,
            Err(e) => classify_client_error(e),
        }
    }
}

fn classify(status: u16, body: &[u8]) -> Outcome {
    if status == 200 {
        return Outcome::Ok;
    }
    let code = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned());
    if (400..500).contains(&status) {
        Outcome::Rejected(code)
    } else {
        Outcome::Error(format!("HTTP {status} {code}"))
    }
}

fn classify_client_error(e: ClientError) -> Outcome {
    match e.code() {
        Some(code) if (400..500).contains(&code.http_status()) => {
            Outcome::Rejected(code.to_string())
        }
        _ => Outcome::Error(e.to_string()),
    }
}
