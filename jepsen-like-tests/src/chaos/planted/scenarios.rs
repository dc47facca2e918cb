//! One short scenario per planted bug, each built to make a specific checker fail if the
//! bug is there, and to pass on a correct node.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use cairn_api::Consistency;
use cairn_client::new_request_id;

use crate::chaos::harness::Harness;
use crate::chaos::history::{Input, Workload};
use crate::chaos::nemesis::{partition, Nemesis, START_TIMEOUT};
use crate::chaos::supervisor::endpoint;
use crate::chaos::workload::{self, client_for, exec, Ctx, Mix};

const P: u64 = 500;
const STOP_GRACE: Duration = Duration::from_secs(20);

/// A scenario: name of the bug it targets, and the checkers expected to catch it.
pub struct Scenario {
    pub bug: &'static str,
    pub expect: &'static [&'static str],
}

pub const ALL: [Scenario; 5] = [
    Scenario {
        bug: "forget-no-tombstone-check",
        expect: &["forget-invariants", "linearizability"],
    },
    Scenario {
        bug: "bounded-skips-token",
        expect: &["bounded-staleness-exactly-once"],
    },
    Scenario {
        bug: "ack-before-fsync",
        expect: &["durability-convergence", "linearizability"],
    },
    Scenario {
        bug: "dedup-applies-twice",
        expect: &["bounded-staleness-exactly-once", "linearizability"],
    },
    Scenario {
        bug: "stale-leader-read",
        expect: &["linearizability", "forget-invariants"],
    },
];

/// The scenario of the planted bug `name`, or an error that names every known bug.
pub fn find(name: &str) -> Result<&'static Scenario, String> {
    ALL.iter().find(|s| s.bug == name).ok_or_else(|| {
        let names: Vec<&str> = ALL.iter().map(|s| s.bug).collect();
        format!("unknown bug {name:?} (known: {})", names.join(", "))
    })
}

fn write(h: &Harness, key: &str) -> Input {
    Input::Write {
        key: key.into(),
        value: h.rec.unique_value(),
        expected_version: None,
        based_on_revision: None,
        clear_tombstone: false,
        override_revocation: false,
        request_id: new_request_id(),
    }
}

fn forget(key: &str) -> Input {
    Input::Forget {
        key: key.into(),
        expected_version: None,
        request_id: new_request_id(),
    }
}

fn read(key: &str, consistency: Consistency, staleness: Option<u64>, node: Option<u64>) -> Input {
    Input::Read {
        key: key.into(),
        consistency,
        max_staleness_ms: staleness,
        session: false,
        node,
        known: None,
        handoff_forget_version: None,
    }
}

/// Runs the scenario for `bug` on a started harness.
pub async fn run(bug: &str, h: &Harness, n: &mut Nemesis) -> Result<()> {
    match bug {
        "forget-no-tombstone-check" => write_through_tombstone(h).await,
        "bounded-skips-token" => bounded_on_a_cut_off_follower(h, n).await,
        "ack-before-fsync" => crash_all_under_load(h, n).await,
        "dedup-applies-twice" => dropped_responses(h).await,
        "stale-leader-read" => deposed_leader_read(h, n).await,
        other => Err(anyhow!("no scenario for {other:?}")),
    }
}

/// write, forget, plain write: the last must be refused (`key_forgotten`).
async fn write_through_tombstone(h: &Harness) -> Result<()> {
    let client = client_for(h.cluster.endpoints());
    for i in 0..3 {
        let key = format!("sc/tomb{i}");
        for input in [write(h, &key), forget(&key), write(h, &key)] {
            exec::mutate(&h.rec, P, Workload::Scenario, &client, input).await;
        }
    }
    Ok(())
}

/// Cut a follower off, write through the majority, then ask the cut-off follower for a
/// bounded read after the bound: it must refuse (`stale_read`), not answer stale.
async fn bounded_on_a_cut_off_follower(h: &Harness, n: &mut Nemesis) -> Result<()> {
    let client = client_for(h.cluster.endpoints());
    let key = "sc/bounded";
    exec::mutate(&h.rec, P, Workload::Scenario, &client, write(h, key)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leader = h
        .cluster
        .leader()
        .await
        .ok_or_else(|| anyhow!("no leader"))?;
    let members = h.cluster.members();
    let follower = *members
        .iter()
        .find(|m| **m != leader)
        .ok_or_else(|| anyhow!("no follower"))?;
    let interval = h
        .rec
        .nemesis_start("isolate", &format!("follower {follower} cut off"));
    n.net.apply(&partition::isolate(follower, &members))?;
    let to_leader = client.pinned(&endpoint(leader))?;
    for _ in 0..3 {
        exec::mutate(&h.rec, P, Workload::Scenario, &to_leader, write(h, key)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let on_follower = client.pinned(&endpoint(follower))?;
    for _ in 0..5 {
        let input = read(key, Consistency::Bounded, Some(500), Some(follower));
        exec::read(&h.rec, P, Workload::Scenario, &on_follower, input).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    n.net.heal()?;
    h.rec.nemesis_stop(interval, "healed");
    Ok(())
}

/// Register load, then kill -9 every node at once; the followers restart first and elect
/// a leader among themselves before the old leader comes back. Three times.
async fn crash_all_under_load(h: &Harness, n: &mut Nemesis) -> Result<()> {
    let ctx = Ctx {
        rec: h.rec.clone(),
        nodes: h.cluster.base.clone(),
        stop: Arc::new(AtomicBool::new(false)),
        deadline: Instant::now() + Duration::from_secs(90),
        seed: 7,
        pace: Duration::from_millis(2),
    };
    let mix = Mix {
        register: 4,
        forget_race_writers: 0,
        handoff: 0,
        retries: 1,
    };
    let tasks = workload::start(&ctx, mix);
    let sup = h.supervisor.clone();
    for round in 0..3 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let leader = h.cluster.leader().await;
        let members = h.cluster.members();
        let interval = h
            .rec
            .nemesis_start("crash", &format!("round {round}: kill -9 {members:?}"));
        for id in &members {
            sup.kill9(*id)?;
        }
        let followers: Vec<u64> = members
            .iter()
            .copied()
            .filter(|m| Some(*m) != leader)
            .collect();
        for id in &followers {
            sup.start(*id)?;
        }
        for id in &followers {
            h.cluster.wait_healthy(*id, START_TIMEOUT).await?;
        }
        let _ = h
            .cluster
            .wait_leader_among(&followers, Duration::from_secs(10))
            .await;
        for id in members.iter().filter(|m| !followers.contains(m)) {
            sup.start(*id)?;
            h.cluster.wait_healthy(*id, START_TIMEOUT).await?;
        }
        h.rec.nemesis_stop(interval, "restarted");
        *n.counts.entry("crash".into()).or_default() += 1;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    tasks.stop(STOP_GRACE).await
}

/// The retries workload alone: dropped responses, resends, duplicate deliveries.
async fn dropped_responses(h: &Harness) -> Result<()> {
    let ctx = Ctx {
        rec: h.rec.clone(),
        nodes: h.cluster.base.clone(),
        stop: Arc::new(AtomicBool::new(false)),
        deadline: Instant::now() + Duration::from_secs(8),
        seed: 11,
        pace: Duration::from_millis(5),
    };
    let mix = Mix {
        register: 0,
        forget_race_writers: 0,
        handoff: 0,
        retries: 2,
    };
    let tasks = workload::start(&ctx, mix);
    tokio::time::sleep(Duration::from_secs(8)).await;
    tasks.stop(STOP_GRACE).await
}

/// Cut the leader off; write and forget through the majority's new leader; read
/// linearizably from the old leader, which must not answer from its stale state.
async fn deposed_leader_read(h: &Harness, n: &mut Nemesis) -> Result<()> {
    let client = client_for(h.cluster.endpoints());
    let (a, b) = ("sc/stale-a", "sc/stale-b");
    for key in [a, b] {
        exec::mutate(&h.rec, P, Workload::Scenario, &client, write(h, key)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old = h
        .cluster
        .leader()
        .await
        .ok_or_else(|| anyhow!("no leader"))?;
    let members = h.cluster.members();
    let rest: Vec<u64> = members.iter().copied().filter(|m| *m != old).collect();
    let interval = h
        .rec
        .nemesis_start("isolate-leader", &format!("leader {old} cut off"));
    n.net.apply(&partition::isolate(old, &members))?;
    let new = h
        .cluster
        .wait_leader_among(&rest, Duration::from_secs(15))
        .await?;
    let to_new = client.pinned(&endpoint(new))?;
    exec::mutate(&h.rec, P, Workload::Scenario, &to_new, write(h, a)).await;
    exec::mutate(&h.rec, P, Workload::Scenario, &to_new, forget(b)).await;
    let to_old = client.pinned(&endpoint(old))?;
    for key in [a, b] {
        let input = read(key, Consistency::Linearizable, None, Some(old));
        exec::read(&h.rec, P, Workload::Scenario, &to_old, input).await;
    }
    n.net.heal()?;
    h.rec.nemesis_stop(interval, "healed");
    Ok(())
}
