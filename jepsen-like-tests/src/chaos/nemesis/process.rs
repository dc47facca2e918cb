//! Process faults: kill -9 (restarted at heal, same data dir) and SIGSTOP (SIGCONT at
//! heal). Targets: a random minority, the leader, or (crash only) every node at once,
//! which a 200 must survive too (SPEC §7).

use anyhow::Result;
use rand::seq::SliceRandom;
use rand::Rng;

use super::{Active, Nemesis, START_TIMEOUT};

/// Who a process fault hits.
async fn targets(
    n: &mut Nemesis,
    nodes: &[u64],
    allow_all: bool,
) -> Result<(Vec<u64>, &'static str)> {
    let roll = n.rng.gen_range(0..100);
    if allow_all && roll < 20 {
        return Ok((nodes.to_vec(), "every node"));
    }
    if roll < 50 {
        if let Some(leader) = n.cluster.leader().await {
            return Ok((vec![leader], "the leader"));
        }
    }
    let mut shuffled = nodes.to_vec();
    shuffled.shuffle(&mut n.rng);
    let minority = ((nodes.len() - 1) / 2).max(1);
    let count = n.rng.gen_range(1..=minority);
    shuffled.truncate(count);
    shuffled.sort_unstable();
    Ok((shuffled, "a minority"))
}

pub async fn crash(n: &mut Nemesis, nodes: &[u64]) -> Result<(Active, String)> {
    let (ids, what) = targets(n, nodes, true).await?;
    for id in &ids {
        n.cluster.supervisor.kill9(*id)?;
    }
    Ok((
        Active::Crashed(ids.clone()),
        format!("kill -9 {ids:?} ({what})"),
    ))
}

pub async fn pause(n: &mut Nemesis, nodes: &[u64]) -> Result<(Active, String)> {
    let (ids, what) = targets(n, nodes, false).await?;
    for id in &ids {
        n.cluster.supervisor.pause(*id, true)?;
    }
    Ok((
        Active::Paused(ids.clone()),
        format!("SIGSTOP {ids:?} ({what})"),
    ))
}

/// Restarts killed nodes on their data dirs and waits until each serves again.
pub async fn restart(n: &mut Nemesis, ids: &[u64]) -> Result<String> {
    for id in ids {
        n.cluster.supervisor.start(*id)?;
    }
    for id in ids {
        n.cluster.wait_healthy(*id, START_TIMEOUT).await?;
    }
    Ok(format!("restarted {ids:?}"))
}
