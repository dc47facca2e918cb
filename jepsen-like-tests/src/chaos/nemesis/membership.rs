//! Membership changes under load.
//!
//! `membership`, two shapes chosen at random:
//! - remove a voter (`POST /cluster/remove`), stop it and wipe its data dir; at heal,
//!   start it empty and `POST /cluster/join` it back (learner, caught up by snapshot or
//!   log, then promoted);
//! - join an extra node (id n+1, its own loopback address) and, at heal, remove it,
//!   stop it and delete its data.
//!
//! `membership-paused`: SIGSTOP one voter (the leader half the time), then join the extra
//! node, so the joint configuration commits without the stopped voter; at heal the voter
//! continues into a membership it never saw (a stopped leader wakes deposed), then the
//! extra node is removed. The woken voter learns the new member from the leader's log
//! before the new member speaks to it, so runs with mutual TLS do not reach the peers'
//! vouching (`node/tests/t80_transport.rs` does).
//!
//! Only the harness changes membership, and only during these faults.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use rand::seq::SliceRandom;
use rand::Rng;

use super::{Active, Nemesis, START_TIMEOUT};

/// A join waits for the learner to catch up; a removal for a membership commit.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn inject(n: &mut Nemesis, nodes: &[u64]) -> Result<(Active, String)> {
    if n.rng.gen_bool(0.5) {
        let mut candidates = nodes.to_vec();
        candidates.shuffle(&mut n.rng);
        let id = candidates[0];
        n.cluster.remove(id, CHANGE_TIMEOUT).await?;
        let sup = n.cluster.supervisor.clone();
        sup.kill9(id)?;
        sup.wipe(id)?;
        n.wipes.push((id, n.rec.clock.now()));
        Ok((
            Active::Removed(id),
            format!("removed voter {id}, stopped and wiped it"),
        ))
    } else {
        let id = join_extra(n).await?;
        Ok((Active::Added(id), format!("joined extra node {id}")))
    }
}

/// Stops a voter, waits until the others agree on a leader among themselves (a new one
/// when the leader was stopped), then joins the extra node without the stopped voter; on
/// failure the voter continues.
pub async fn inject_while_paused(n: &mut Nemesis, nodes: &[u64]) -> Result<(Active, String)> {
    let leader = n.cluster.leader().await;
    let paused = match leader {
        Some(leader) if n.rng.gen_bool(0.5) => leader,
        _ => *nodes.choose(&mut n.rng).context("no member to stop")?,
    };
    let role = if Some(paused) == leader {
        "the leader"
    } else {
        "a voter"
    };
    let sup = n.cluster.supervisor.clone();
    sup.pause(paused, true)?;
    let awake: Vec<u64> = nodes.iter().copied().filter(|id| *id != paused).collect();
    let joined = async {
        n.cluster.wait_leader_among(&awake, CHANGE_TIMEOUT).await?;
        join_extra(n).await
    };
    match joined.await {
        Ok(added) => Ok((
            Active::PausedAcrossJoin { paused, added },
            format!("SIGSTOP {paused} ({role}), then joined extra node {added} without it"),
        )),
        Err(e) => {
            sup.pause(paused, false)?;
            Err(e)
        }
    }
}

/// Starts the extra node (id n+1) empty and joins it as a voter; returns its id.
///
/// Refuses while the extra node is still a member (a heal that could not remove it):
/// wiping a voter's log and vote is not a fault Raft tolerates, and what it broke would be
/// blamed on the cluster.
async fn join_extra(n: &mut Nemesis) -> Result<u64> {
    let id = n.cluster.base.iter().max().copied().unwrap_or(0) + 1;
    if n.cluster.members().contains(&id) {
        bail!("extra node {id} is still a member: not wiping a voter");
    }
    n.start_wiped(id).await?;
    n.cluster
        .join(id, CHANGE_TIMEOUT)
        .await
        .with_context(|| format!("joining extra node {id}"))?;
    Ok(id)
}

/// Continues the stopped voter, then removes the extra node.
pub async fn continue_and_drop(n: &mut Nemesis, paused: u64, added: u64) -> Result<String> {
    n.cluster.supervisor.pause(paused, false)?;
    let dropped = drop_extra(n, added).await?;
    Ok(format!("continued {paused}; {dropped}"))
}

/// Starts a removed node empty (unless a failed attempt left it running) and joins it back.
pub async fn rejoin(n: &mut Nemesis, id: u64) -> Result<String> {
    let sup = n.cluster.supervisor.clone();
    if !sup.is_running(id) {
        sup.start(id)?;
    }
    n.cluster.wait_healthy(id, START_TIMEOUT).await?;
    n.cluster.join(id, CHANGE_TIMEOUT).await?;
    Ok(format!("node {id} joined back with a fresh data dir"))
}

/// Brings the membership back to the base voters after a heal failed: an extra node still
/// a member is removed, a base node still removed is joined back.
pub async fn restore_base(n: &mut Nemesis) -> Result<()> {
    let base = n.cluster.base.clone();
    let members = n.cluster.members();
    for id in members.iter().filter(|id| !base.contains(id)) {
        drop_extra(n, *id).await?;
    }
    for id in base.iter().filter(|id| !members.contains(id)) {
        rejoin(n, *id).await?;
    }
    Ok(())
}

/// Removes the extra node, stops it and deletes its data.
pub async fn drop_extra(n: &mut Nemesis, id: u64) -> Result<String> {
    n.cluster.remove(id, CHANGE_TIMEOUT).await?;
    let sup = n.cluster.supervisor.clone();
    sup.kill9(id)?;
    sup.wipe(id)?;
    Ok(format!("extra node {id} removed and stopped"))
}
