//! Operator view of the cluster under test, through HTTP only: status, leader, init,
//! join, remove, compact, and the bounded waits built on them.
//!
//! The harness tracks which node ids are members ([`Cluster::members`]); nemeses that
//! change membership update it, and everything that iterates "all nodes" uses it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use cairn_api::{ClusterStatus, CompactResponse, EnableAuthRequest, InitRequest, NodeSpec};
use cairn_client::Client;

use super::secure;
use super::supervisor::{client_addr, endpoint, peer_addr, Supervisor};

/// One status request; a node slower than this counts as not answering.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);
/// Membership changes wait for a learner to catch up; compaction rewrites files.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

pub fn spec(id: u64) -> NodeSpec {
    NodeSpec {
        id,
        client_addr: client_addr(id),
        peer_addr: peer_addr(id),
    }
}

pub struct Cluster {
    pub supervisor: Arc<Supervisor>,
    /// Nodes 1..=n, the ones clients know about.
    pub base: Vec<u64>,
    members: Mutex<BTreeSet<u64>>,
    /// One attempt, short timeout: for status polling. Rebuilt with the admin token
    /// after a `--secure` init.
    probe: RwLock<Client>,
    /// Patient: for membership changes and compaction.
    admin: RwLock<Client>,
}

/// (probe, admin) clients over `endpoints`, with the run's CA and token if secure.
fn clients(endpoints: Vec<String>) -> Result<(Client, Client)> {
    let probe = secure::configure(Client::builder(endpoints.clone()))
        .request_timeout(STATUS_TIMEOUT)
        .connect_timeout(STATUS_TIMEOUT)
        .retries_max(0)
        .build()?;
    let admin = secure::configure(Client::builder(endpoints))
        .request_timeout(ADMIN_TIMEOUT)
        .connect_timeout(Duration::from_secs(1))
        .retries_max(4)
        .backoff_ms(200, 2_000)
        .build()?;
    Ok((probe, admin))
}

impl Cluster {
    pub fn new(supervisor: Arc<Supervisor>, n: u64) -> Result<Arc<Cluster>> {
        let base: Vec<u64> = (1..=n).collect();
        let endpoints: Vec<String> = base.iter().map(|id| endpoint(*id)).collect();
        let (probe, admin) = clients(endpoints)?;
        Ok(Arc::new(Cluster {
            supervisor,
            members: Mutex::new(base.iter().copied().collect()),
            base,
            probe: RwLock::new(probe),
            admin: RwLock::new(admin),
        }))
    }

    fn probe(&self) -> Client {
        self.probe.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn admin(&self) -> Client {
        self.admin.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn members(&self) -> Vec<u64> {
        self.members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect()
    }

    fn set_member(&self, id: u64, member: bool) {
        let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
        if member {
            m.insert(id);
        } else {
            m.remove(&id);
        }
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.base.iter().map(|id| endpoint(*id)).collect()
    }

    pub async fn status(&self, id: u64) -> Result<ClusterStatus> {
        Ok(self.probe().status(&endpoint(id)).await?)
    }

    /// Statuses of the given nodes, concurrently; `None` for nodes that did not answer.
    pub async fn statuses(&self, ids: &[u64]) -> Vec<(u64, Option<ClusterStatus>)> {
        let asks = ids
            .iter()
            .map(|&id| async move { (id, self.status(id).await.ok()) });
        futures::future::join_all(asks).await
    }

    /// The node that says it leads, with the highest term among those that do.
    pub async fn leader(&self) -> Option<u64> {
        let ids = self.supervisor.running();
        self.statuses(&ids)
            .await
            .into_iter()
            .filter_map(|(id, s)| s.filter(|s| s.role == "leader").map(|s| (s.term, id)))
            .max()
            .map(|(_, id)| id)
    }

    /// A leader that `among` all agree on (each reports it as leader_id, the leader
    /// itself included), within `timeout`.
    pub async fn wait_leader_among(&self, among: &[u64], timeout: Duration) -> Result<u64> {
        let started = Instant::now();
        loop {
            let statuses = self.statuses(among).await;
            let leaders: BTreeSet<Option<u64>> = statuses
                .iter()
                .map(|(_, s)| s.as_ref().and_then(|s| s.leader_id))
                .collect();
            if let [Some(leader)] = leaders.into_iter().collect::<Vec<_>>()[..] {
                if among.contains(&leader) {
                    return Ok(leader);
                }
            }
            if started.elapsed() > timeout {
                bail!("no leader agreed on by nodes {among:?} within {timeout:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub async fn wait_healthy(&self, id: u64, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            if self.probe().healthz(&endpoint(id)).await.is_ok() {
                return Ok(());
            }
            if !self.supervisor.is_running(id) {
                bail!("node {id} is not running");
            }
            if started.elapsed() > timeout {
                bail!("node {id} not healthy within {timeout:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `POST /cluster/init` with the base nodes, sent to node 1. In a `--secure` run
    /// auth is turned on with admin [`secure::ADMIN`]; its token (shown once, in the
    /// answer) goes to every client built from then on, these two included.
    pub async fn init(&self) -> Result<()> {
        let request = InitRequest {
            nodes: self.base.iter().map(|id| spec(*id)).collect(),
            auth: secure::is_on().then(|| EnableAuthRequest {
                admin: secure::ADMIN.to_string(),
            }),
        };
        let one = self.admin().pinned(&endpoint(self.base[0]))?;
        let answer = one.init(request).await?;
        if secure::is_on() {
            let Some(auth) = answer.auth else {
                bail!("init with auth answered without the admin token");
            };
            secure::set_token(auth.token);
            let (probe, admin) = clients(self.endpoints())?;
            *self.probe.write().unwrap_or_else(|p| p.into_inner()) = probe;
            *self.admin.write().unwrap_or_else(|p| p.into_inner()) = admin;
        }
        Ok(())
    }

    /// `POST /cluster/join` for `id` (learner, then voter), then waits until a leader
    /// lists it as a voter.
    pub async fn join(&self, id: u64, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < timeout {
            match self.admin().join(spec(id)).await {
                Ok(m) if m.voters.contains(&id) => {
                    self.set_member(id, true);
                    return Ok(());
                }
                Ok(m) => last = format!("joined but voters are {:?}", m.voters),
                Err(e) => last = e.to_string(),
            }
            if self.is_voter(id).await {
                self.set_member(id, true);
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!("node {id} did not become a voter within {timeout:?}: {last}")
    }

    /// `POST /cluster/remove` for `id`, retried until the leader no longer lists it.
    pub async fn remove(&self, id: u64, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < timeout {
            match self.admin().remove(id).await {
                Ok(m) if !m.voters.contains(&id) && !m.learners.contains(&id) => {
                    self.set_member(id, false);
                    return Ok(());
                }
                Ok(m) => last = format!("still listed: voters {:?}", m.voters),
                Err(cairn_client::ClientError::NotFound { .. }) => {
                    self.set_member(id, false);
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        bail!("node {id} not removed within {timeout:?}: {last}")
    }

    async fn is_voter(&self, id: u64) -> bool {
        match self.leader().await {
            Some(l) => self.status(l).await.is_ok_and(|s| s.voters.contains(&id)),
            None => false,
        }
    }

    pub async fn compact(&self, id: u64) -> Result<CompactResponse> {
        Ok(self.admin().compact(&endpoint(id)).await?)
    }

    /// Waits until every node in `ids` answers with the same applied index, equal to
    /// the last log index of a leader among them, twice in a row (quiescent: nothing
    /// left to replicate or apply). Returns that index.
    pub async fn wait_converged(&self, ids: &[u64], timeout: Duration) -> Result<u64> {
        let started = Instant::now();
        let mut previous = None;
        loop {
            let statuses = self.statuses(ids).await;
            let applied: Vec<Option<u64>> = statuses
                .iter()
                .map(|(_, s)| s.as_ref().map(|s| s.applied_index))
                .collect();
            let leader_last = statuses
                .iter()
                .filter_map(|(_, s)| s.as_ref().filter(|s| s.role == "leader"))
                .map(|s| s.last_log_index)
                .max();
            if leader_last.is_some() && applied.iter().all(|a| *a == leader_last) {
                if previous == leader_last {
                    return Ok(leader_last.unwrap_or_default());
                }
                previous = leader_last;
            } else {
                previous = None;
            }
            if started.elapsed() > timeout {
                let last: Vec<String> = statuses
                    .iter()
                    .map(|(id, s)| match s {
                        Some(s) => format!(
                            "node {id}: {} term {} last log {} commit {} applied {}",
                            s.role, s.term, s.last_log_index, s.commit_index, s.applied_index
                        ),
                        None => format!("node {id}: no answer"),
                    })
                    .collect();
                bail!(
                    "nodes {ids:?} did not converge within {timeout:?}: {}",
                    last.join("; ")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
