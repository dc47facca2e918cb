//! Faults: what each nemesis does, how it is undone, and the schedule that alternates
//! fault and heal intervals.
//!
//! - [`partition`]: which links each network fault cuts (pure).
//! - [`process`]: crash (kill -9, restart at heal) and pause (SIGSTOP, SIGCONT at heal).
//! - [`membership`]: remove a voter and re-join it with a fresh data dir, or join an
//!   extra node and remove it; or join the extra node while a voter is stopped.
//! - [`snapshot`]: compact the leader, wipe a follower and kill the leader: in place
//!   (the wiped voter must stay out of Raft until removed and joined again at heal), or
//!   removed and joined again, the leader killed while the snapshot streams.
//! - [`schedule`]: the seeded schedule; liveness is probed only after heals.
//!
//! Every injected fault returns an [`Active`] that knows how to undo it; [`Nemesis::heal_all`]
//! is the safety net that restores a whole cluster whatever happened before.

pub mod membership;
pub mod partition;
pub mod process;
pub mod schedule;
pub mod snapshot;

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use rand::rngs::StdRng;
use rand::Rng;
use serde::Serialize;

use super::clock::Micros;
use super::cluster::Cluster;
use super::history::Recorder;
use super::net::{Cut, Net};

/// Until a restarted node serves `/healthz` (RocksDB open and log replay included).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    PartitionHalves,
    IsolateLeader,
    Bridge,
    Ring,
    Lossy,
    Crash,
    Pause,
    Membership,
    MembershipPaused,
    SnapshotKill,
    SnapshotRejoin,
}

impl Kind {
    pub const ALL: [Kind; 11] = [
        Kind::PartitionHalves,
        Kind::IsolateLeader,
        Kind::Bridge,
        Kind::Ring,
        Kind::Lossy,
        Kind::Crash,
        Kind::Pause,
        Kind::Membership,
        Kind::MembershipPaused,
        Kind::SnapshotKill,
        Kind::SnapshotRejoin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::PartitionHalves => "partition-halves",
            Kind::IsolateLeader => "isolate-leader",
            Kind::Bridge => "bridge",
            Kind::Ring => "ring",
            Kind::Lossy => "lossy",
            Kind::Crash => "crash",
            Kind::Pause => "pause",
            Kind::Membership => "membership",
            Kind::MembershipPaused => "membership-paused",
            Kind::SnapshotKill => "snapshot-kill",
            Kind::SnapshotRejoin => "snapshot-rejoin",
        }
    }

    pub fn is_network(self) -> bool {
        matches!(
            self,
            Kind::PartitionHalves | Kind::IsolateLeader | Kind::Bridge | Kind::Ring | Kind::Lossy
        )
    }
}

impl FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown nemesis {s:?} (known: {})", names.join(", "))
            })
    }
}

/// What an injected fault left behind, to be undone at heal.
#[derive(Debug)]
pub enum Active {
    /// iptables rules.
    Net,
    /// Killed nodes, to restart.
    Crashed(Vec<u64>),
    /// Stopped nodes, to continue.
    Paused(Vec<u64>),
    /// A voter removed, stopped and wiped: start it fresh and join it back.
    Removed(u64),
    /// An extra node joined: remove it, stop it and delete its data.
    Added(u64),
    /// A voter stopped while the extra node joined: continue it, then drop the extra node.
    PausedAcrossJoin { paused: u64, added: u64 },
    /// A killed leader to restart, and a voter wiped in place to remove and join again.
    WipedInPlace { killed: u64, wiped: u64 },
    /// Killed leader(s) to restart, and a wiped node's join to complete.
    Rejoining {
        killed: Vec<u64>,
        joining: u64,
        join: tokio::task::JoinHandle<Result<()>>,
    },
}

/// The fault injector.
pub struct Nemesis {
    pub cluster: Arc<Cluster>,
    pub net: Arc<Net>,
    pub rec: Arc<Recorder>,
    pub rng: StdRng,
    /// Faults injected, by kind name.
    pub counts: BTreeMap<String, u64>,
    /// When each node's data dir was wiped (per-node read monotonicity restarts there).
    pub wipes: Vec<(u64, Micros)>,
    /// Heals that failed: a liveness failure.
    pub errors: Vec<String>,
    /// Faults that could not be injected (e.g. no leader to isolate): reported only.
    pub skipped: Vec<String>,
    /// Whether the snapshot filler was written already.
    pub filled: bool,
}

impl Nemesis {
    pub fn new(cluster: Arc<Cluster>, net: Arc<Net>, rec: Arc<Recorder>, rng: StdRng) -> Self {
        Nemesis {
            cluster,
            net,
            rec,
            rng,
            counts: BTreeMap::new(),
            wipes: Vec::new(),
            errors: Vec::new(),
            skipped: Vec::new(),
            filled: false,
        }
    }

    fn members(&self) -> Vec<u64> {
        self.cluster.members()
    }

    async fn leader(&self) -> Result<u64> {
        match self.cluster.leader().await {
            Some(l) => Ok(l),
            None => bail!("no leader to target"),
        }
    }

    fn cut(&self, cuts: &[Cut]) -> Result<Active> {
        self.net.apply(cuts)?;
        Ok(Active::Net)
    }

    /// Injects one fault; returns what to undo and a description.
    pub async fn inject(&mut self, kind: Kind) -> Result<(Active, String)> {
        let nodes = self.members();
        let done = match kind {
            Kind::PartitionHalves => {
                let (minority, majority) = partition::halves(&nodes, &mut self.rng);
                let active = self.cut(&partition::between(&minority, &majority))?;
                (active, format!("{minority:?} | {majority:?}"))
            }
            Kind::IsolateLeader => {
                let leader = self.leader().await?;
                let active = self.cut(&partition::isolate(leader, &nodes))?;
                (active, format!("leader {leader} isolated"))
            }
            Kind::Bridge => {
                let (cuts, bridge) = partition::bridge(&nodes, &mut self.rng);
                (self.cut(&cuts)?, format!("bridge node {bridge}"))
            }
            Kind::Ring => {
                let (cuts, order) = partition::ring(&nodes, &mut self.rng);
                let pairs: Vec<(u64, u64)> = cuts.iter().map(|c| (c.from, c.to)).collect();
                (self.cut(&cuts)?, format!("ring {order:?}, cut {pairs:?}"))
            }
            Kind::Lossy => {
                let pct = 30;
                if self.rng.gen_bool(0.5) {
                    let leader = self.leader().await?;
                    let others: Vec<u64> = nodes.iter().copied().filter(|n| *n != leader).collect();
                    let active = self.cut(&partition::lossy(&[leader], &others, pct))?;
                    (active, format!("leader {leader}'s links drop {pct}%"))
                } else {
                    let active = self.cut(&partition::lossy(&nodes, &nodes, pct))?;
                    (active, format!("every link drops {pct}%"))
                }
            }
            Kind::Crash => process::crash(self, &nodes).await?,
            Kind::Pause => process::pause(self, &nodes).await?,
            Kind::Membership => membership::inject(self, &nodes).await?,
            Kind::MembershipPaused => membership::inject_while_paused(self, &nodes).await?,
            Kind::SnapshotKill => snapshot::in_place(self).await?,
            Kind::SnapshotRejoin => snapshot::rejoin(self).await?,
        };
        *self.counts.entry(kind.name().to_string()).or_default() += 1;
        Ok(done)
    }

    /// Undoes one fault.
    pub async fn heal(&mut self, active: Active) -> Result<String> {
        match active {
            Active::Net => {
                self.net.heal()?;
                Ok("network healed".into())
            }
            Active::Crashed(ids) => process::restart(self, &ids).await,
            Active::Paused(ids) => {
                for id in &ids {
                    self.cluster.supervisor.pause(*id, false)?;
                }
                Ok(format!("continued {ids:?}"))
            }
            Active::Removed(id) => membership::rejoin(self, id).await,
            Active::Added(id) => membership::drop_extra(self, id).await,
            Active::PausedAcrossJoin { paused, added } => {
                membership::continue_and_drop(self, paused, added).await
            }
            Active::Rejoining {
                killed,
                joining,
                join,
            } => snapshot::finish_rejoin(self, killed, joining, join).await,
            Active::WipedInPlace { killed, wiped } => {
                snapshot::finish_in_place(self, killed, wiped).await
            }
        }
    }

    /// Kills node `id`, wipes its data dir (recorded: per-node read monotonicity restarts
    /// there) and starts it empty, waiting until it serves.
    pub async fn start_wiped(&mut self, id: u64) -> Result<()> {
        let sup = self.cluster.supervisor.clone();
        sup.kill9(id)?;
        sup.wipe(id)?;
        self.wipes.push((id, self.rec.clock.now()));
        sup.start(id)?;
        self.cluster.wait_healthy(id, START_TIMEOUT).await
    }

    /// Restores everything: no rules, nothing stopped, every member running, the base
    /// voters the only members. Used after the schedule and whenever a heal failed.
    pub async fn heal_all(&mut self) -> Result<()> {
        self.net.heal()?;
        let sup = self.cluster.supervisor.clone();
        for id in sup.paused() {
            sup.pause(id, false)?;
        }
        for id in self.members() {
            if !sup.is_running(id) {
                sup.start(id)?;
                self.cluster.wait_healthy(id, START_TIMEOUT).await?;
            }
        }
        membership::restore_base(self).await
    }
}
