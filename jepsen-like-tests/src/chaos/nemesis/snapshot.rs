//! A follower wiped, and the leader killed. Two shapes:
//!
//! - `snapshot-kill` (in place): kill -9 a follower, wipe its data dir, start it empty
//!   under the same id, and kill -9 the leader. The wiped node is still a voter in the
//!   membership but has forgotten its vote and the entries it acknowledged; cairn refuses
//!   to let it answer Raft until it is removed and joined again (it was not admitted), so
//!   the one other voter cannot be elected with its vote and lose what only the dead
//!   leader and the wiped node held. At heal the leader restarts, and the wiped node is
//!   removed and joined again, as docs/operations.md tells an operator to, catching up
//!   from the leader's compacted snapshot.
//! - `snapshot-rejoin`: remove a follower, wipe it, start it empty and `POST
//!   /cluster/join` it again (learner first, so the join itself waits for the snapshot),
//!   and kill the leader as soon as the snapshot is in flight: a `*.partial` file shows
//!   up in the follower's data dir (watched from outside, as an operator could), or the
//!   follower already applied something. At heal the leader restarts and the join is
//!   completed.
//!
//! Both first make the snapshot worth streaming (once per run, a few MiB of filler
//! under `fill/`, several 1 MiB chunks) and `POST /cluster/compact` the leader, so the
//! log the follower needs is gone.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use cairn_api::{BatchOp, BatchRequest, WriteRequest};
use rand::seq::SliceRandom;
use serde_json::json;

use super::{Active, Nemesis};
use crate::chaos::workload::client_for;

const FILL_BATCHES: usize = 4;
const FILL_OPS: usize = 200;
const FILL_VALUE_BYTES: usize = 4_000;
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(8);
const CATCH_UP_POLL: Duration = Duration::from_millis(3);
const CHANGE_TIMEOUT: Duration = Duration::from_secs(30);

async fn fill(n: &mut Nemesis) -> Result<()> {
    let client = client_for(n.cluster.endpoints());
    let value = json!("x".repeat(FILL_VALUE_BYTES));
    // A secure run binds the actor to the token's principal: empty names it.
    let actor = if crate::chaos::secure::is_on() {
        ""
    } else {
        "chaos-fill"
    };
    for b in 0..FILL_BATCHES {
        let ops = (0..FILL_OPS)
            .map(|i| {
                BatchOp::Write(WriteRequest::new(
                    format!("fill/{b}/{i}"),
                    value.clone(),
                    actor,
                ))
            })
            .collect();
        client
            .batch(BatchRequest {
                ops,
                request_id: None,
            })
            .await?;
    }
    n.filled = true;
    Ok(())
}

/// Filler, compaction, and a follower picked, stopped and wiped. Returns (leader,
/// follower, snapshot index).
async fn prepare(n: &mut Nemesis, remove_first: bool) -> Result<(u64, u64, u64)> {
    if !n.filled {
        fill(n).await?;
    }
    let leader = n
        .cluster
        .leader()
        .await
        .ok_or_else(|| anyhow!("no leader"))?;
    let compacted = n.cluster.compact(leader).await?;
    let mut followers: Vec<u64> = n
        .cluster
        .members()
        .into_iter()
        .filter(|m| *m != leader)
        .collect();
    followers.shuffle(&mut n.rng);
    let follower = *followers.first().ok_or_else(|| anyhow!("no follower"))?;
    if remove_first {
        n.cluster.remove(follower, CHANGE_TIMEOUT).await?;
    }
    n.start_wiped(follower).await?;
    Ok((leader, follower, compacted.snapshot_index))
}

/// Waits until the snapshot is in flight (or done); `None` after the timeout.
async fn snapshot_moment(n: &Nemesis, leader: u64, follower: u64) -> Option<&'static str> {
    let data = n.cluster.supervisor.data_dir(follower);
    let started = Instant::now();
    while started.elapsed() < CATCH_UP_TIMEOUT {
        if has_partial(&data, 3) {
            return Some("while the snapshot was being received");
        }
        let status = n.cluster.status(follower).await;
        if status.is_ok_and(|s| s.leader_id == Some(leader) && s.applied_index > 0) {
            return Some("after the follower had caught up");
        }
        tokio::time::sleep(CATCH_UP_POLL).await;
    }
    None
}

/// Voters needed for an in-place wipe: without the wiped voter the rest must still be a
/// majority once the leader is back, or no leader could ever remove it (a wiped voter of
/// two is a lost quorum, which no operator procedure short of rebuilding recovers).
const IN_PLACE_VOTERS_MIN: usize = 3;

pub async fn in_place(n: &mut Nemesis) -> Result<(Active, String)> {
    let voters = n.cluster.members().len();
    if voters < IN_PLACE_VOTERS_MIN {
        return Ok((
            Active::Crashed(Vec::new()),
            format!("skipped: {voters} voters, and a wiped one of them would leave no majority"),
        ));
    }
    let (leader, follower, snapshot) = prepare(n, false).await?;
    n.cluster.supervisor.kill9(leader)?;
    Ok((
        Active::WipedInPlace {
            killed: leader,
            wiped: follower,
        },
        format!(
            "leader {leader} compacted (snapshot {snapshot}), follower {follower} wiped in \
             place and started under its old id; leader killed"
        ),
    ))
}

/// Restarts the killed leader, then removes the wiped node and joins it again.
pub async fn finish_in_place(n: &mut Nemesis, killed: u64, wiped: u64) -> Result<String> {
    super::process::restart(n, &[killed]).await?;
    n.cluster.remove(wiped, CHANGE_TIMEOUT).await?;
    n.cluster.join(wiped, CHANGE_TIMEOUT).await?;
    Ok(format!(
        "restarted [{killed}]; wiped node {wiped} removed and joined again"
    ))
}

pub async fn rejoin(n: &mut Nemesis) -> Result<(Active, String)> {
    let (leader, follower, snapshot) = prepare(n, true).await?;
    let cluster = Arc::clone(&n.cluster);
    let join = tokio::spawn(async move { cluster.join(follower, CHANGE_TIMEOUT).await });
    let moment = snapshot_moment(n, leader, follower).await;
    if moment.is_some() {
        n.cluster.supervisor.kill9(leader)?;
    }
    let killed: Vec<u64> = moment.iter().map(|_| leader).collect();
    Ok((
        Active::Rejoining { killed, joining: follower, join },
        format!(
            "leader {leader} compacted (snapshot {snapshot}), follower {follower} removed, wiped and \
             joining again; leader {}",
            moment.map_or("spared: no snapshot seen".to_string(), |m| format!("killed {m}"))
        ),
    ))
}

/// Restarts the killed leader and completes the join.
pub async fn finish_rejoin(
    n: &mut Nemesis,
    killed: Vec<u64>,
    joining: u64,
    join: tokio::task::JoinHandle<Result<()>>,
) -> Result<String> {
    super::process::restart(n, &killed).await?;
    let first = tokio::time::timeout(CHANGE_TIMEOUT, join).await;
    let joined_first_time = matches!(first, Ok(Ok(Ok(()))));
    if !joined_first_time {
        // The leader died under the join: ask the new leader.
        n.cluster.join(joining, CHANGE_TIMEOUT).await?;
    }
    Ok(format!(
        "restarted {killed:?}; node {joining} is a voter again{}",
        if joined_first_time {
            ""
        } else {
            " (join retried)"
        }
    ))
}

/// Whether a `*.partial` file (a snapshot being received) exists under `dir`.
fn has_partial(dir: &Path, depth: usize) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "partial") {
            return true;
        }
        depth > 0 && path.is_dir() && has_partial(&path, depth - 1)
    })
}
