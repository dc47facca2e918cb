//! The etcd side: a local 3-member etcd cluster (default durability: every commit is
//! fdatasynced by the WAL) driven through its native gRPC API with `etcd-client`.
//!
//! Each member gets a small set of gRPC connections (HTTP/2, multiplexed); client task i
//! uses connection `i % min(clients, conns)`, so one client is one connection and many
//! clients share a few, as etcd's own benchmark tool does.
//!
//! `etcd-secure` is the counterpart of `cairn-secure` ([`Security`]): HTTPS client URLs
//! (a server certificate, no client certificates, as cairn-secure's client port), mutual
//! TLS between members, and auth on, every request carrying the root user's token. Its
//! metrics are served over plain HTTP on a port of their own, so the harness reads them
//! as it reads the plain cluster's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use cairn_jepsen::certs::ClusterCerts;
use etcd_client::{Certificate, ConnectOptions, GetOptions, KvClient, TlsOptions, Txn, TxnOp};

use super::cairn::parse_prometheus;
use super::procs::{self, Procs};
use super::workload::{key_name, Op, OpKind, Outcome, Workload};

const READY_WAIT: Duration = Duration::from_secs(60);
/// Backend quota of every member (see `Cluster::start`).
pub const QUOTA_BACKEND_BYTES: u64 = 8 << 30;
/// The root user of `etcd-secure` (etcd's auth needs one before it can be enabled).
const ROOT: &str = "root";
const ROOT_PASSWORD: &str = "bench";
/// Lifetime of an auth token: longer than any run, so no request pays for a renewal
/// (etcd's default is 300 s, and the client renews only on request).
const AUTH_TOKEN_TTL_SECS: u64 = 7 * 24 * 3600;
/// Where a secure member's plain-HTTP metrics listen: peer port + this.
const SECURE_METRICS_PORT_OFFSET: u16 = 10;

/// What makes a cluster `etcd-secure`: the certificates of its members (from `cairn-node
/// certs`, the files cairn-secure uses) and so TLS and auth on.
pub struct Security {
    pub certs: ClusterCerts,
}

impl Security {
    fn tls(&self) -> TlsOptions {
        TlsOptions::new().ca_certificate(Certificate::from_pem(self.certs.ca_pem()))
    }
}

#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub metrics_url: String,
    pub data_dir: PathBuf,
}

pub struct Cluster {
    pub members: Vec<Member>,
    /// `conns[m]`: the gRPC connections to member m.
    conns: Vec<Vec<etcd_client::Client>>,
    http: reqwest::Client,
    /// TLS and the root user's credentials on a secure cluster; nothing on a plain one.
    access: Access,
    pub version: String,
}

/// How the harness connects to a cluster.
#[derive(Clone, Default)]
struct Access {
    tls: Option<TlsOptions>,
    root: bool,
}

impl Access {
    fn options(&self, connect_timeout: Duration, timeout: Duration) -> ConnectOptions {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_timeout(timeout);
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.clone());
        }
        if self.root {
            options = options.with_user(ROOT, ROOT_PASSWORD);
        }
        options
    }
}

impl Cluster {
    /// Starts `n` members named `{name}-{i}`, waits for a leader, turns auth on if
    /// `security` is given, connects and proves a write commits.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        procs: Arc<Procs>,
        bin: &Path,
        work: &Path,
        name: &str,
        n: usize,
        ports: (u16, u16),
        conns_per_member: usize,
        op_timeout: Duration,
        security: Option<&Security>,
    ) -> Result<Cluster> {
        let scheme = if security.is_some() { "https" } else { "http" };
        let members: Vec<Member> = (1..=n)
            .map(|i| {
                let client_url = format!("{scheme}://127.0.0.1:{}", ports.0 + i as u16);
                Member {
                    name: format!("{name}-{i}"),
                    metrics_url: match security {
                        Some(_) => format!(
                            "http://127.0.0.1:{}",
                            ports.1 + SECURE_METRICS_PORT_OFFSET + i as u16
                        ),
                        None => client_url.clone(),
                    },
                    client_url,
                    peer_url: format!("{scheme}://127.0.0.1:{}", ports.1 + i as u16),
                    data_dir: work.join(format!("{name}-{i}")),
                }
            })
            .collect();
        spawn_members(&procs, bin, work, &members, security)?;
        let mut access = Access {
            tls: security.map(Security::tls),
            root: false,
        };
        let version = wait_for_leader(&procs, &members, &access).await?;
        if security.is_some() {
            enable_auth(&members, &access).await?;
            refuses_anonymous_writes(&members, &access).await?;
            access.root = true;
        }
        let options = access.options(Duration::from_secs(2), op_timeout);
        let conns = connect(&members, conns_per_member, &options).await?;
        let cluster = Cluster {
            members,
            conns,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()?,
            access,
            version,
        };
        // The first write also proves a leader can commit.
        let mut kv = cluster.conns[0][0].kv_client();
        let write_started = Instant::now();
        loop {
            match kv.put("bench/ready", "ready", None).await {
                Ok(_) => break,
                Err(e) if write_started.elapsed() > READY_WAIT => bail!("etcd put failed: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        Ok(cluster)
    }

    /// Index of the member that leads.
    pub async fn leader(&self) -> Result<usize> {
        let started = Instant::now();
        loop {
            if let Ok((leader_id, _)) = status_all(&self.members, &self.access).await {
                for (i, conn) in self.conns.iter().enumerate() {
                    let mut c = conn[0].clone();
                    if let Ok(s) = c.status().await {
                        if s.header().map(|h| h.member_id()) == Some(leader_id) {
                            return Ok(i);
                        }
                    }
                }
            }
            if started.elapsed() > READY_WAIT {
                bail!("no etcd leader within {READY_WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn metrics(&self, member: usize) -> Result<BTreeMap<String, f64>> {
        let url = format!("{}/metrics", self.members[member].metrics_url);
        let text = self.http.get(&url).send().await?.text().await?;
        Ok(parse_prometheus(&text))
    }

    /// Puts keys `range` in transactions of `txn_ops` puts (etcd's default --max-txn-ops is
    /// 128), `concurrency` at a time, at the leader. Returns ops/s.
    pub async fn load(
        &self,
        range: std::ops::Range<u64>,
        value_bytes: usize,
        txn_ops: u64,
        concurrency: usize,
    ) -> Result<f64> {
        let leader = self.leader().await?;
        let value = "v".repeat(value_bytes);
        let started = Instant::now();
        let chunks: Vec<std::ops::Range<u64>> = (range.start..range.end)
            .step_by(txn_ops as usize)
            .map(|s| s..(s + txn_ops).min(range.end))
            .collect();
        let conns = &self.conns[leader];
        let results = futures::StreamExt::collect::<Vec<_>>(futures::StreamExt::buffer_unordered(
            futures::stream::iter(chunks.into_iter().enumerate().map(|(i, chunk)| {
                let mut kv = conns[i % conns.len()].kv_client();
                let value = value.clone();
                async move {
                    let ops: Vec<TxnOp> = chunk
                        .map(|k| TxnOp::put(key_name(k), value.clone(), None))
                        .collect();
                    kv.txn(Txn::new().and_then(ops)).await.map(drop)
                }
            })),
            concurrency,
        ))
        .await;
        if let Some(err) = results.into_iter().find_map(Result::err) {
            bail!("etcd txn load failed: {err}");
        }
        Ok((range.end - range.start) as f64 / started.elapsed().as_secs_f64())
    }

    pub fn worker(
        &self,
        workload: Workload,
        index: usize,
        clients: usize,
        leader: usize,
    ) -> Worker {
        let per_member = self.conns[leader].len().min(clients.max(1));
        let conn = index % per_member;
        let read_member = match workload {
            Workload::ReadBounded => index % self.members.len(),
            _ => leader,
        };
        Worker {
            write: self.conns[leader][conn].kv_client(),
            read: self.conns[read_member][conn].kv_client(),
            serializable: workload == Workload::ReadBounded,
        }
    }
}

/// Starts every member's process (ports checked free first), logs in `work/logs`.
fn spawn_members(
    procs: &Procs,
    bin: &Path,
    work: &Path,
    members: &[Member],
    security: Option<&Security>,
) -> Result<()> {
    let initial_cluster = members
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url))
        .collect::<Vec<_>>()
        .join(",");
    let logs = work.join("logs");
    std::fs::create_dir_all(&logs)?;
    for (i, m) in members.iter().enumerate() {
        let mut urls = vec![&m.client_url, &m.peer_url];
        if m.metrics_url != m.client_url {
            urls.push(&m.metrics_url);
        }
        for url in urls {
            procs::ensure_port_free(url.rsplit(':').next().unwrap_or("0").parse()?)?;
        }
        std::fs::create_dir_all(&m.data_dir)?;
        let mut cmd = member_command(bin, m, &initial_cluster);
        if let Some(security) = security {
            cmd.args(secure_args(security, i as u64 + 1, m));
        }
        procs.spawn(&m.name, cmd, &logs.join(format!("{}.log", m.name)))?;
    }
    Ok(())
}

fn member_command(bin: &Path, m: &Member, initial_cluster: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("--name")
        .arg(&m.name)
        .arg("--data-dir")
        .arg(&m.data_dir)
        .arg("--listen-client-urls")
        .arg(&m.client_url)
        .arg("--advertise-client-urls")
        .arg(&m.client_url)
        .arg("--listen-peer-urls")
        .arg(&m.peer_url)
        .arg("--initial-advertise-peer-urls")
        .arg(&m.peer_url)
        .arg("--initial-cluster")
        .arg(initial_cluster)
        .arg("--initial-cluster-token")
        .arg("cairn-bench")
        .arg("--initial-cluster-state")
        .arg("new")
        // etcd's 2 GiB default backend quota fills up during a --scale run (64 KiB
        // writes, no compaction by default) and then refuses every write with
        // "database space exceeded"; 8 GiB is etcd's documented maximum.
        .arg("--quota-backend-bytes")
        .arg(QUOTA_BACKEND_BYTES.to_string())
        .arg("--logger")
        .arg("zap")
        .arg("--log-outputs")
        .arg("stderr");
    cmd
}

/// The flags of secure member `id`: its certificate for clients and peers (etcd checks
/// a peer's against the CA), plain-HTTP metrics, and auth tokens that outlive the run.
/// No `--trusted-ca-file`: etcd 3.4 then asks every client for a certificate, and
/// cairn-secure's client port does not.
fn secure_args(security: &Security, id: u64, m: &Member) -> Vec<std::ffi::OsString> {
    let files = security.certs.node_files(id);
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    for (flag, path) in [
        ("--cert-file", &files.cert),
        ("--key-file", &files.key),
        ("--peer-cert-file", &files.cert),
        ("--peer-key-file", &files.key),
        ("--peer-trusted-ca-file", &files.ca),
    ] {
        args.push(flag.into());
        args.push(path.into());
    }
    args.extend(
        [
            "--peer-client-cert-auth".to_string(),
            "--listen-metrics-urls".into(),
            m.metrics_url.clone(),
            "--auth-token-ttl".into(),
            AUTH_TOKEN_TTL_SECS.to_string(),
        ]
        .map(Into::into),
    );
    args
}

/// Makes the root user (with etcd's root role) and enables auth, as `etcdctl user add
/// root`, `user grant-role root root` and `auth enable` would.
async fn enable_auth(members: &[Member], access: &Access) -> Result<()> {
    let options = access.options(Duration::from_secs(2), Duration::from_secs(10));
    let urls: Vec<&str> = members.iter().map(|m| m.client_url.as_str()).collect();
    let client = etcd_client::Client::connect(urls, Some(options))
        .await
        .context("connecting to etcd-secure")?;
    let mut auth = client.auth_client();
    auth.role_add(ROOT).await.context("etcd role add root")?;
    auth.user_add(ROOT, ROOT_PASSWORD, None)
        .await
        .context("etcd user add root")?;
    auth.user_grant_role(ROOT, ROOT)
        .await
        .context("etcd user grant-role root root")?;
    auth.auth_enable().await.context("etcd auth enable")?;
    Ok(())
}

/// Proof that auth is on before anything is measured: a put without credentials must fail.
async fn refuses_anonymous_writes(members: &[Member], access: &Access) -> Result<()> {
    let options = access.options(Duration::from_secs(2), Duration::from_secs(10));
    let urls: Vec<&str> = members.iter().map(|m| m.client_url.as_str()).collect();
    let mut client = etcd_client::Client::connect(urls, Some(options)).await?;
    match client.put("bench/anonymous", "x", None).await {
        Ok(_) => bail!("etcd-secure accepted a put without credentials: auth is not on"),
        Err(_) => Ok(()),
    }
}

/// Waits until the members agree on a leader; returns etcd's version.
async fn wait_for_leader(procs: &Procs, members: &[Member], access: &Access) -> Result<String> {
    let started = Instant::now();
    loop {
        for m in members {
            procs.check_alive(&m.name)?;
        }
        match status_all(members, access).await {
            Ok((leader, version)) if leader != 0 => return Ok(version),
            _ if started.elapsed() > READY_WAIT => {
                bail!(
                    "{} not ready after {READY_WAIT:?}; its log tail:\n{}",
                    members[0].name,
                    procs.log_tail(&members[0].name, 30)
                )
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// `conns_per_member` (at least one) gRPC connections to every member.
async fn connect(
    members: &[Member],
    conns_per_member: usize,
    options: &ConnectOptions,
) -> Result<Vec<Vec<etcd_client::Client>>> {
    let mut conns = Vec::new();
    for m in members {
        let mut per = Vec::new();
        for _ in 0..conns_per_member.max(1) {
            per.push(
                etcd_client::Client::connect([m.client_url.as_str()], Some(options.clone()))
                    .await
                    .with_context(|| format!("connecting to {}", m.client_url))?,
            );
        }
        conns.push(per);
    }
    Ok(conns)
}

/// (leader member id, version) as reported by the first member that answers.
async fn status_all(members: &[Member], access: &Access) -> Result<(u64, String)> {
    let options = access.options(Duration::from_millis(500), Duration::from_secs(2));
    let mut last = anyhow!("no member answered");
    for m in members {
        match etcd_client::Client::connect([m.client_url.as_str()], Some(options.clone())).await {
            Ok(mut c) => match c.status().await {
                Ok(s) => return Ok((s.leader(), s.version().to_string())),
                Err(e) => last = e.into(),
            },
            Err(e) => last = e.into(),
        }
    }
    Err(last)
}

/// One client task's connections.
pub struct Worker {
    write: KvClient,
    read: KvClient,
    /// Serializable (member-local, no staleness bound) rather than linearizable gets.
    serializable: bool,
}

impl Worker {
    pub async fn exec(&mut self, op: Op, value: &str) -> Outcome {
        let key = key_name(op.key);
        let result = match op.kind {
            OpKind::Read => {
                let options = self
                    .serializable
                    .then(|| GetOptions::new().with_serializable());
                self.read.get(key, options).await.map(drop)
            }
            OpKind::Write => self.write.put(key, value, None).await.map(drop),
            OpKind::Forget | OpKind::Revoke => self.write.delete(key, None).await.map(drop),
        };
        match result {
            Ok(()) => Outcome::Ok,
            Err(e) => Outcome::Error(e.to_string()),
        }
    }
}
