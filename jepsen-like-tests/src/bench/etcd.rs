//! The etcd side: a local 3-member etcd cluster (default durability: every commit is
//! fdatasynced by the WAL) driven through its native gRPC API with `etcd-client`.
//!
//! Each member gets a small set of gRPC connections (HTTP/2, multiplexed); client task i
//! uses connection `i % min(clients, conns)`, so one client is one connection and many
//! clients share a few, as etcd's own benchmark tool does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use etcd_client::{ConnectOptions, GetOptions, KvClient, Txn, TxnOp};

use super::cairn::parse_prometheus;
use super::procs::{self, Procs};
use super::workload::{key_name, Op, OpKind, Outcome, Workload};

const READY_WAIT: Duration = Duration::from_secs(60);
/// Backend quota of every member (see `Cluster::start`).
pub const QUOTA_BACKEND_BYTES: u64 = 8 << 30;

#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
}

pub struct Cluster {
    pub members: Vec<Member>,
    /// `conns[m]`: the gRPC connections to member m.
    conns: Vec<Vec<etcd_client::Client>>,
    http: reqwest::Client,
    pub version: String,
}

impl Cluster {
    /// Starts `n` members, waits for a leader, connects and proves a write commits.
    pub async fn start(
        procs: Arc<Procs>,
        bin: &Path,
        work: &Path,
        n: usize,
        ports: (u16, u16),
        conns_per_member: usize,
        op_timeout: Duration,
    ) -> Result<Cluster> {
        let members: Vec<Member> = (1..=n)
            .map(|i| Member {
                name: format!("etcd-{i}"),
                client_url: format!("http://127.0.0.1:{}", ports.0 + i as u16),
                peer_url: format!("http://127.0.0.1:{}", ports.1 + i as u16),
                data_dir: work.join(format!("etcd-{i}")),
            })
            .collect();
        spawn_members(&procs, bin, work, &members)?;
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(op_timeout);
        let version = wait_for_leader(&procs, &members).await?;
        let conns = connect(&members, conns_per_member, &options).await?;
        let cluster = Cluster {
            members,
            conns,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()?,
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
            if let Ok((leader_id, _)) = status_all(&self.members).await {
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
        let url = format!("{}/metrics", self.members[member].client_url);
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
fn spawn_members(procs: &Procs, bin: &Path, work: &Path, members: &[Member]) -> Result<()> {
    let initial_cluster = members
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url))
        .collect::<Vec<_>>()
        .join(",");
    let logs = work.join("logs");
    std::fs::create_dir_all(&logs)?;
    for m in members {
        for url in [&m.client_url, &m.peer_url] {
            procs::ensure_port_free(url.rsplit(':').next().unwrap_or("0").parse()?)?;
        }
        std::fs::create_dir_all(&m.data_dir)?;
        let cmd = member_command(bin, m, &initial_cluster);
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

/// Waits until the members agree on a leader; returns etcd's version.
async fn wait_for_leader(procs: &Procs, members: &[Member]) -> Result<String> {
    let started = Instant::now();
    loop {
        for m in members {
            procs.check_alive(&m.name)?;
        }
        match status_all(members).await {
            Ok((leader, version)) if leader != 0 => return Ok(version),
            _ if started.elapsed() > READY_WAIT => {
                bail!(
                    "etcd not ready after {READY_WAIT:?}; etcd-1 log tail:\n{}",
                    procs.log_tail("etcd-1", 30)
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
async fn status_all(members: &[Member]) -> Result<(u64, String)> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(2));
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
