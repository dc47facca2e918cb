//! `--scale`: how cairn behaves as the key space grows (cairn only, its own fresh cluster).
//!
//! For each level (cumulative: 10k, then up to 100k, then up to 1M keys of 256 B, loaded
//! with `POST /v1/batch` of 500 writes, 16 in flight):
//! - RSS (VmRSS) and on-disk size of every node;
//! - restart-to-ready of a follower: SIGTERM, restart, time to `/healthz` and to caught up
//!   (applied index ≥ the leader's commit index at the restart, and an `any` read of the
//!   newest key answers on that node);
//! - a 4th node joining: `POST /cluster/compact` on the leader first (so the log cannot
//!   serve it), then `POST /cluster/join`, time until it is caught up the same way; it is
//!   removed again (`POST /cluster/remove`) before the next level.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use cairn_api::{Consistency, ReadOptions};
use serde::{Deserialize, Serialize};

use super::cairn::{node_layout, Cluster, Node};
use super::procs::Procs;
use super::sysinfo;
use super::workload::key_name;

const BATCH_OPS: u64 = 500;
const LOAD_CONCURRENCY: usize = 16;
const VALUE_BYTES: usize = 256;
const CATCH_UP_LIMIT: Duration = Duration::from_secs(300);
const STOP_GRACE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeResources {
    pub node: String,
    pub rss_mib: f64,
    pub data_dir_mib: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Restart {
    pub node: String,
    pub stop_s: f64,
    pub healthz_s: f64,
    pub caught_up_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Join {
    pub compact_s: f64,
    pub snapshot_index: u64,
    pub join_call_s: f64,
    pub caught_up_s: f64,
    pub rss_mib: f64,
    pub data_dir_mib: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Level {
    pub keys: u64,
    pub load_s: f64,
    pub load_keys_per_s: f64,
    pub nodes: Vec<NodeResources>,
    pub restart: Option<Restart>,
    pub restart_error: Option<String>,
    pub join: Option<Join>,
    pub join_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleResults {
    pub value_bytes: usize,
    pub batch_ops: u64,
    pub load_concurrency: usize,
    pub levels: Vec<Level>,
}

pub async fn run(
    procs: Arc<Procs>,
    bin: &Path,
    work: &Path,
    ports: (u16, u16),
    levels: &[u64],
    op_timeout: Duration,
    config: Option<&Path>,
) -> Result<ScaleResults> {
    println!(
        "scale: starting a fresh 3-node cairn cluster (127.0.0.1:{}-{})",
        ports.0 + 1,
        ports.0 + 3
    );
    let cluster = Cluster::start(
        procs.clone(),
        bin,
        work,
        "scale",
        3,
        ports,
        op_timeout,
        config,
        false,
    )
    .await?;
    let mut out = ScaleResults {
        value_bytes: VALUE_BYTES,
        batch_ops: BATCH_OPS,
        load_concurrency: LOAD_CONCURRENCY,
        levels: Vec::new(),
    };
    let mut loaded = 0u64;
    let mut join_possible = true;
    for &target in levels {
        if target <= loaded {
            continue;
        }
        let level = level(
            &cluster,
            &procs,
            work,
            ports,
            loaded,
            target,
            &mut join_possible,
        )
        .await?;
        loaded = target;
        out.levels.push(level);
    }
    for (name, _) in procs.pids("scale-") {
        procs.stop(&name, STOP_GRACE).await?;
    }
    Ok(out)
}

/// One level: load keys `loaded..target`, wait for convergence, record RSS and disk, then
/// restart a follower and join a fourth node (once a join failed, later levels skip it).
async fn level(
    cluster: &Cluster,
    procs: &Arc<Procs>,
    work: &Path,
    ports: (u16, u16),
    loaded: u64,
    target: u64,
    join_possible: &mut bool,
) -> Result<Level> {
    let t = Instant::now();
    let rate = cluster
        .load(loaded..target, VALUE_BYTES, BATCH_OPS, LOAD_CONCURRENCY)
        .await?;
    let load_s = t.elapsed().as_secs_f64();
    println!("scale: {target} keys loaded ({load_s:.1} s for this step, {rate:.0} keys/s)");
    wait_converged(cluster, &cluster.nodes).await?;
    let nodes = cluster
        .nodes
        .iter()
        .map(|n| NodeResources {
            node: n.name.clone(),
            rss_mib: procs.pid(&n.name).and_then(sysinfo::rss_mib).unwrap_or(0.0),
            data_dir_mib: sysinfo::disk_usage_bytes(&n.data_dir) as f64 / (1 << 20) as f64,
        })
        .collect();
    let last_key = key_name(target - 1);
    let (restart, restart_error) = match restart_follower(cluster, procs, &last_key).await {
        Ok(r) => {
            println!(
                "scale: restart of {}: stop {:.2} s, healthz {:.2} s, caught up {:.2} s",
                r.node, r.stop_s, r.healthz_s, r.caught_up_s
            );
            (Some(r), None)
        }
        Err(e) => {
            println!("scale: restart failed: {e:#}");
            (None, Some(format!("{e:#}")))
        }
    };
    let (join, join_error) = if *join_possible {
        match join_fourth(cluster, procs, work, ports, &last_key).await {
            Ok(j) => {
                println!(
                    "scale: node 4 joined after compaction: join call {:.2} s, caught up {:.2} s",
                    j.join_call_s, j.caught_up_s
                );
                (Some(j), None)
            }
            Err(e) => {
                println!("scale: join failed: {e:#}");
                *join_possible = false;
                (None, Some(format!("{e:#}")))
            }
        }
    } else {
        (None, Some("skipped: an earlier join/remove failed".into()))
    };
    Ok(Level {
        keys: target,
        load_s,
        load_keys_per_s: rate,
        nodes,
        restart,
        restart_error,
        join,
        join_error,
    })
}

/// Waits until every node in `nodes` has applied the leader's commit index.
async fn wait_converged(cluster: &Cluster, nodes: &[Node]) -> Result<()> {
    let leader = cluster.leader().await?;
    let target = cluster
        .admin
        .status(&leader.url())
        .await
        .map_err(|e| anyhow!("{e}"))?
        .commit_index;
    let started = Instant::now();
    for n in nodes {
        loop {
            if let Ok(s) = cluster.admin.status(&n.url()).await {
                if s.applied_index >= target {
                    break;
                }
            }
            if started.elapsed() > CATCH_UP_LIMIT {
                bail!(
                    "{} did not apply index {target} within {CATCH_UP_LIMIT:?}",
                    n.name
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

/// Polls `node` until it has applied `index` and serves an `any` read of `key`; returns
/// the time since `since`.
async fn wait_caught_up(
    cluster: &Cluster,
    node: &Node,
    index: u64,
    key: &str,
    since: Instant,
) -> Result<f64> {
    let pinned = cluster
        .admin
        .pinned(&node.url())
        .map_err(|e| anyhow!("{e}"))?;
    let options = ReadOptions {
        consistency: Some(Consistency::Any),
        max_staleness_ms: None,
        min_revision: None,
    };
    loop {
        if let Ok(s) = cluster.admin.status(&node.url()).await {
            if s.applied_index >= index && pinned.read(key, options).await.is_ok() {
                return Ok(since.elapsed().as_secs_f64());
            }
        }
        if since.elapsed() > CATCH_UP_LIMIT {
            bail!(
                "{} not caught up to index {index} within {CATCH_UP_LIMIT:?}",
                node.name
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn restart_follower(cluster: &Cluster, procs: &Procs, last_key: &str) -> Result<Restart> {
    let leader = cluster.leader().await?;
    let node = cluster
        .nodes
        .iter()
        .find(|n| n.id != leader.id)
        .cloned()
        .ok_or_else(|| anyhow!("no follower"))?;
    let commit = cluster
        .admin
        .status(&leader.url())
        .await
        .map_err(|e| anyhow!("{e}"))?
        .commit_index;
    let stop = procs.stop(&node.name, STOP_GRACE).await?;
    let started = Instant::now();
    cluster.spawn_node(&node)?;
    let healthz = cluster.wait_healthy(&node, CATCH_UP_LIMIT).await?;
    let caught_up = wait_caught_up(cluster, &node, commit, last_key, started).await?;
    Ok(Restart {
        node: node.name,
        stop_s: stop.as_secs_f64(),
        healthz_s: healthz.as_secs_f64(),
        caught_up_s: caught_up,
    })
}

async fn join_fourth(
    cluster: &Cluster,
    procs: &Procs,
    work: &Path,
    ports: (u16, u16),
    last_key: &str,
) -> Result<Join> {
    let leader = cluster.leader().await?;
    let t = Instant::now();
    let compacted = cluster
        .admin
        .compact(&leader.url())
        .await
        .map_err(|e| anyhow!("POST /cluster/compact: {e}"))?;
    let compact_s = t.elapsed().as_secs_f64();
    let commit = cluster
        .admin
        .status(&leader.url())
        .await
        .map_err(|e| anyhow!("{e}"))?
        .commit_index;
    let node = node_layout("scale", work, 4, ports.0, ports.1);
    let _ = std::fs::remove_dir_all(&node.data_dir);
    cluster.spawn_node(&node)?;
    cluster.wait_healthy(&node, Duration::from_secs(60)).await?;
    let started = Instant::now();
    let result = async {
        cluster
            .admin
            .join(node.spec())
            .await
            .map_err(|e| anyhow!("POST /cluster/join: {e}"))?;
        let join_call_s = started.elapsed().as_secs_f64();
        let caught_up_s = wait_caught_up(cluster, &node, commit, last_key, started).await?;
        Ok::<_, anyhow::Error>((join_call_s, caught_up_s))
    }
    .await;
    let rss_mib = procs
        .pid(&node.name)
        .and_then(sysinfo::rss_mib)
        .unwrap_or(0.0);
    let data_dir_mib = sysinfo::disk_usage_bytes(&node.data_dir) as f64 / (1 << 20) as f64;
    // Leave the cluster as it was: 3 voters.
    let removed = cluster
        .admin
        .remove(node.id)
        .await
        .map_err(|e| anyhow!("POST /cluster/remove: {e}"));
    procs.stop(&node.name, STOP_GRACE).await?;
    let _ = std::fs::remove_dir_all(&node.data_dir);
    let (join_call_s, caught_up_s) = result?;
    removed?;
    Ok(Join {
        compact_s,
        snapshot_index: compacted.snapshot_index,
        join_call_s,
        caught_up_s,
        rss_mib,
        data_dir_mib,
    })
}

pub fn markdown(sc: &ScaleResults) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n## Scale (cairn only; separate fresh cluster)\n\nKeys loaded cumulatively with `POST /v1/batch` ({} writes of {} B per batch, {} in flight). Restart: SIGTERM a follower, restart it, time to `/healthz` and until it has applied the leader's commit index and answers an `any` read of the newest key. Join: `POST /cluster/compact` on the leader, start an empty node 4, `POST /cluster/join`, time until it is caught up the same way (it must install a snapshot); then it is removed again.\n",
        sc.batch_ops, sc.value_bytes, sc.load_concurrency
    );
    s.push_str("| keys | load step s | load keys/s | RSS MiB (per node) | data dir MiB (per node) | restart: stop / healthz / caught up s | join: compact s / join call s / caught up s | new node RSS / disk MiB |\n");
    s.push_str("|---:|---:|---:|---|---|---|---|---|\n");
    for l in &sc.levels {
        let rss: Vec<String> = l
            .nodes
            .iter()
            .map(|n| format!("{:.0}", n.rss_mib))
            .collect();
        let disk: Vec<String> = l
            .nodes
            .iter()
            .map(|n| format!("{:.0}", n.data_dir_mib))
            .collect();
        let restart = match (&l.restart, &l.restart_error) {
            (Some(r), _) => format!(
                "{:.2} / {:.2} / {:.2}",
                r.stop_s, r.healthz_s, r.caught_up_s
            ),
            (None, Some(e)) => format!(
                "failed: {}",
                e.replace('|', "/").chars().take(120).collect::<String>()
            ),
            _ => "–".into(),
        };
        let (join, joined) = match (&l.join, &l.join_error) {
            (Some(j), _) => (
                format!(
                    "{:.2} / {:.2} / {:.2}",
                    j.compact_s, j.join_call_s, j.caught_up_s
                ),
                format!("{:.0} / {:.0}", j.rss_mib, j.data_dir_mib),
            ),
            (None, Some(e)) => (
                format!(
                    "failed: {}",
                    e.replace('|', "/").chars().take(120).collect::<String>()
                ),
                "–".into(),
            ),
            _ => ("–".into(), "–".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.0} | {} | {} | {} | {} | {} |",
            l.keys,
            l.load_s,
            l.load_keys_per_s,
            rss.join(" / "),
            disk.join(" / "),
            restart,
            join,
            joined
        );
    }
    s
}
