//! Membership changes under load. Two shapes, chosen at random:
//!
//! - remove a voter (`POST /cluster/remove`), stop it and wipe its data dir; at heal,
//!   start it empty and `POST /cluster/join` it back (learner, caught up by snapshot or
//!   log, then promoted);
//! - join an extra node (id n+1, its own loopback address) and, at heal, remove it,
//!   stop it and delete its data.
//!
//! Only the harness changes membership, and never during another fault.

use std::time::Duration;

use anyhow::{Context, Result};
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
        let id = n.cluster.base.iter().max().copied().unwrap_or(0) + 1;
        let sup = n.cluster.supervisor.clone();
        sup.kill9(id)?;
        sup.wipe(id)?;
        n.wipes.push((id, n.rec.clock.now()));
        sup.start(id)?;
        n.cluster.wait_healthy(id, START_TIMEOUT).await?;
        n.cluster
            .join(id, CHANGE_TIMEOUT)
            .await
            .with_context(|| format!("joining extra node {id}"))?;
        Ok((Active::Added(id), format!("joined extra node {id}")))
    }
}

/// Starts a removed node empty and joins it back.
pub async fn rejoin(n: &mut Nemesis, id: u64) -> Result<String> {
    let sup = n.cluster.supervisor.clone();
    sup.start(id)?;
    n.cluster.wait_healthy(id, START_TIMEOUT).await?;
    n.cluster.join(id, CHANGE_TIMEOUT).await?;
    Ok(format!("node {id} joined back with a fresh data dir"))
}

/// Removes the extra node, stops it and deletes its data.
pub async fn drop_extra(n: &mut Nemesis, id: u64) -> Result<String> {
    n.cluster.remove(id, CHANGE_TIMEOUT).await?;
    let sup = n.cluster.supervisor.clone();
    sup.kill9(id)?;
    sup.wipe(id)?;
    Ok(format!("extra node {id} removed and stopped"))
}
