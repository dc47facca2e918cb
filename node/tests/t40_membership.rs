//! Membership changes on a live cluster: join (through a snapshot after the leader purged
//! its log), a join of a node that does not catch up (it stays a learner), removal of a
//! follower, removal of the leader itself, and the refusal of a removal that would leave no
//! live quorum.

mod support;

use std::time::{Duration, Instant};

use cairn_api::{ClusterStatus, NodeSpec, WriteRequest};
use cairn_client::{Client, ClientError};
use serde_json::json;
use support::load::{self, Load};
use support::{any_at, linearizable, wait_until, Cluster, LEADER_TIMEOUT};

const WRITERS: u64 = 3;
/// Written before compaction, so the snapshot carries real data.
const KEYS_BEFORE_JOIN: u64 = 200;
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(60);
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);
/// A join returns once the learner caught up (snapshot install included) and was promoted.
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound on a membership change to settle (joint config committed, leader stepped down).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A refusal needs no commit: the liveness probes take 1 s at most.
const REFUSAL_MAX: Duration = Duration::from_secs(10);

/// A client that waits as long as a join may take (the default request timeout is 10 s).
fn patient_client(cluster: &Cluster) -> Client {
    let endpoints = cluster
        .ids()
        .into_iter()
        .map(|id| cluster.endpoint(id))
        .collect();
    Client::builder(endpoints)
        .request_timeout(JOIN_TIMEOUT)
        .build()
        .expect("client")
}

async fn write_keys(client: &Client, prefix: &str, count: u64) -> u64 {
    let mut revision = 0;
    for i in 0..count {
        revision = client
            .write(WriteRequest::new(
                format!("{prefix}/{i}"),
                json!({"i": i}),
                "t40",
            ))
            .await
            .expect("write")
            .revision;
    }
    revision
}

/// Waits until node `id` reports `voters` and a leader among them.
async fn wait_voters(cluster: &Cluster, id: u64, voters: &[u64]) -> ClusterStatus {
    let what = format!("node {id} to report voters {voters:?} and a leader among them");
    support::wait_for(SETTLE_TIMEOUT, &what, async || {
        let status = cluster.status(id).await.ok()?;
        let settled =
            status.voters == voters && status.leader_id.is_some_and(|l| voters.contains(&l));
        settled.then_some(status)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_joining_under_load_catches_up_from_a_snapshot_after_compaction() {
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client();
    let seeded = write_keys(&client, "seed", KEYS_BEFORE_JOIN).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let compacted = client
        .compact(&cluster.endpoint(leader))
        .await
        .expect("compact");
    assert!(compacted.snapshot_index >= seeded, "{compacted:?}");
    assert_eq!(
        compacted.log_purged_through, compacted.snapshot_index,
        "{compacted:?}"
    );

    let load = Load::start(&client, WRITERS, "join");
    load.wait_progress(100, PROGRESS_TIMEOUT).await;
    let spec = cluster.add_node(4).await;
    let joined = patient_client(&cluster).join(spec).await.expect("join");
    assert_eq!(joined.voters, vec![1, 2, 3, 4], "{joined:?}");
    assert!(joined.learners.is_empty(), "{joined:?}");
    // The cluster kept serving while node 4 caught up, and still does with 4 voters.
    load.wait_progress(100, PROGRESS_TIMEOUT).await;
    let report = load.stop().await;

    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let target = cluster
        .status(leader)
        .await
        .expect("leader status")
        .applied_index;
    cluster.wait_applied(4, target, CATCH_UP_TIMEOUT).await;
    let status = cluster.status(4).await.expect("node 4 status");
    // The entries up to the purge point no longer exist anywhere in the leader's log, so
    // node 4 can only have them from a snapshot.
    assert!(
        status.snapshot_index >= compacted.snapshot_index,
        "node 4 installed no snapshot: {status:?}"
    );
    assert_eq!(status.role, "follower", "{status:?}");

    let node4 = cluster.client_for(4);
    for i in 0..KEYS_BEFORE_JOIN {
        let read = node4
            .read(&format!("seed/{i}"), any_at(seeded))
            .await
            .expect("seed key on node 4");
        assert_eq!(read.record.value, Some(json!({"i": i})));
        assert_eq!(read.served.node_id, 4);
    }
    load::verify(
        &node4,
        &report,
        any_at(report.max_revision()),
        "node 4, any",
    )
    .await;
    println!(
        "join: snapshot at {}, node 4 applied {} (leader {}), {} writes acknowledged during the join",
        compacted.snapshot_index, status.applied_index, target, report.acked_writes
    );
}

/// SPEC §6: a joining node is a learner first, promoted once caught up. One that never
/// answers (nothing runs at its address) must not become a voter: on a one-voter cluster
/// that would need it for every commit from then on. A join is idempotent under a member's
/// own addresses (a learner left behind is promoted by the next join once it runs) and
/// refused under others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_does_not_catch_up_stays_a_learner_and_the_join_is_refused() {
    let mut cluster = Cluster::builder(1)
        .config("[raft]\njoin_catch_up_timeout_ms = 1500\n")
        .start()
        .await;
    let client = cluster.client();
    write_keys(&client, "before", 3).await;

    let (client_addr, peer_addr) = support::free_addr_pair();
    let dead = NodeSpec {
        id: 2,
        client_addr,
        peer_addr,
    };
    match patient_client(&cluster).join(dead.clone()).await {
        Err(ClientError::InvalidTransition { message, .. }) => {
            assert!(message.contains("did not catch up"), "{message}")
        }
        other => panic!("join of a node that is not running: {other:?}"),
    }
    let status = cluster.status(1).await.expect("status");
    assert_eq!(
        (status.voters.clone(), status.learners.clone()),
        (vec![1], vec![2]),
        "{status:?}"
    );
    // The one voter still commits alone.
    write_keys(&client, "after", 3).await;
    // A member joins again only under the addresses it has (idempotent for a voter).
    let again = client
        .join(cluster.spec(1))
        .await
        .expect("join of a voter again");
    assert_eq!(again.voters, vec![1], "{again:?}");
    // Its own addresses spelled another way are its own addresses.
    let respelled = NodeSpec {
        client_addr: cluster
            .spec(1)
            .client_addr
            .replace("127.0.0.1", "localhost"),
        ..cluster.spec(1)
    };
    let again = client
        .join(respelled)
        .await
        .expect("join of a voter again, its address spelled by name");
    assert_eq!(again.voters, vec![1], "{again:?}");
    // A new id under the voter's own addresses would have the leader replicate to itself
    // as a follower: refused before any membership change.
    match client
        .join(NodeSpec {
            id: 9,
            ..cluster.spec(1)
        })
        .await
    {
        Err(ClientError::InvalidTransition { message, .. }) => {
            assert!(message.contains("an address of node 1"), "{message}")
        }
        other => panic!("join under a member's addresses: {other:?}"),
    }
    // The same address spelled another way is the same address; a host that does not
    // resolve is no address at all (400, nothing changes).
    let spelled = NodeSpec {
        id: 9,
        client_addr: support::free_addr(),
        peer_addr: cluster.spec(1).peer_addr.replace("127.0.0.1", "localhost"),
    };
    match client.join(spelled).await {
        Err(ClientError::InvalidTransition { message, .. }) => {
            assert!(message.contains("an address of node 1"), "{message}")
        }
        other => panic!("join under a member's address, spelled by name: {other:?}"),
    }
    let nowhere = NodeSpec {
        id: 9,
        client_addr: "nosuch.invalid:7409".into(),
        peer_addr: support::free_addr(),
    };
    match client.join(nowhere).await {
        Err(err @ ClientError::InvalidRequest { .. }) => {
            assert_eq!(err.details().unwrap()["field"], "client_addr", "{err}")
        }
        other => panic!("join at a host that does not resolve: {other:?}"),
    }
    let moved = NodeSpec {
        peer_addr: support::free_addr(),
        ..dead
    };
    match client.join(moved).await {
        Err(ClientError::InvalidTransition { message, .. }) => {
            assert!(message.contains("already a member"), "{message}")
        }
        other => panic!("join of a member under other addresses: {other:?}"),
    }

    let removed = client.remove(2).await.expect("remove the learner");
    assert_eq!((removed.voters, removed.learners), (vec![1], vec![]));
    let spec = cluster.add_node(3).await;
    let joined = patient_client(&cluster).join(spec).await.expect("join");
    assert_eq!((joined.voters, joined.learners), (vec![1, 3], vec![]));
    cluster
        .wait_applied(3, status.applied_index, CATCH_UP_TIMEOUT)
        .await;
    // The new node's first read: it has held no read token yet, and says so with null
    // (or a real age), never a sentinel.
    let first = cluster
        .client_for(3)
        .read("after/0", any_at(status.applied_index))
        .await
        .expect("any read at node 3");
    let age = first.served.ms_since_leader_contact;
    assert!(age.is_none_or(|ms| ms < 60_000), "{:?}", first.served);

    // A learner left by a join that timed out is promoted by the next join once it runs.
    let spec = cluster.add_node(4).await;
    cluster.kill9(4);
    match patient_client(&cluster).join(spec.clone()).await {
        Err(ClientError::InvalidTransition { .. }) => {}
        other => panic!("join of a stopped node: {other:?}"),
    }
    cluster.restart(4).await;
    let joined = patient_client(&cluster)
        .join(spec)
        .await
        .expect("join again");
    assert_eq!((joined.voters, joined.learners), (vec![1, 3, 4], vec![]));
}

/// A client that sent a join and lost the answer sends it again; both may be in flight
/// at once. The second waits for the first (openraft takes one membership change at a
/// time), then finds the node a voter: both answer the same membership.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_join_sent_twice_at_once_succeeds_both_times() {
    let mut cluster = Cluster::builder(1).start().await;
    let spec = cluster.add_node(2).await;
    // Stopped, so the first join waits for its learner while the second arrives.
    cluster.kill9(2);
    let join =
        |client: Client, spec: NodeSpec| tokio::spawn(async move { client.join(spec).await });
    let first = join(patient_client(&cluster), spec.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = join(patient_client(&cluster), spec);
    tokio::time::sleep(Duration::from_millis(700)).await;
    cluster.restart(2).await;
    for (which, answer) in [("first", first.await), ("second", second.await)] {
        let joined = answer
            .expect("join task")
            .unwrap_or_else(|e| panic!("the {which} join: {e:?}"));
        assert_eq!(
            (joined.voters, joined.learners),
            (vec![1, 2], vec![]),
            "{which}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removing_a_follower_leaves_a_working_two_voter_cluster() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let removed = cluster.others(leader)[0];
    let rest = cluster.others(removed);

    let answer = cluster.client().remove(removed).await.expect("remove");
    assert_eq!(answer.voters, rest, "{answer:?}");
    assert!(
        answer.nodes.iter().all(|n| n.id != removed),
        "still a member: {answer:?}"
    );
    for id in &rest {
        wait_voters(&cluster, *id, &rest).await;
    }
    // The removed node gets no more entries: stop it, and the two voters that remain
    // still commit (they are a full quorum of the new configuration).
    cluster.kill9(removed);
    let revision = write_keys(&cluster.client(), "after-remove", 20).await;
    for id in &rest {
        cluster.wait_applied(*id, revision, CATCH_UP_TIMEOUT).await;
    }
    let again = cluster.client().remove(removed).await;
    assert!(
        matches!(again, Err(ClientError::NotFound { .. })),
        "removing a non-member: {again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removing_the_leader_elects_a_new_leader_among_the_rest() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client();
    let before = write_keys(&client, "before", 10).await;
    let old = cluster.wait_leader(LEADER_TIMEOUT).await;
    let rest = cluster.others(old);

    let answer = cluster
        .client_for(old)
        .remove(old)
        .await
        .expect("remove the leader");
    assert_eq!(answer.voters, rest, "{answer:?}");
    let status = wait_voters(&cluster, rest[0], &rest).await;
    let new = status.leader_id.expect("a leader");
    assert_ne!(new, old);
    wait_voters(&cluster, rest[1], &rest).await;
    let old_status = cluster.status(old).await.expect("old leader status");
    assert_ne!(
        old_status.role, "leader",
        "the removed leader stepped down: {old_status:?}"
    );
    // It names no leader it does not know: openraft keeps its own old vote, and status
    // would report it as leader while its writes answer `no_leader`.
    assert!(
        old_status
            .leader_id
            .is_none_or(|id| id != old && rest.contains(&id)),
        "the removed leader names a leader outside the cluster: {old_status:?}"
    );

    // The remaining two serve reads and writes; nothing written before was lost.
    let read = client.read("before/9", linearizable()).await.expect("read");
    assert_eq!(read.record.value, Some(json!({"i": 9})));
    assert!(read.record.revision <= before);
    assert!(
        rest.contains(&read.served.node_id),
        "served by {}",
        read.served.node_id
    );
    let after = write_keys(&client, "after", 10).await;
    assert!(after > before);
}

/// Raft changes membership by joint consensus: removing a voter commits only with a
/// majority of the current voters as well as of the remaining ones. Removing the dead
/// voter of two (the remaining one live) could never commit; it is refused at once
/// instead of hanging with the change half-made, which blocked every later change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removing_the_dead_voter_of_two_is_refused_until_it_is_back() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let [gone, dead] = cluster.others(leader)[..] else {
        panic!("two followers")
    };
    cluster
        .client()
        .remove(gone)
        .await
        .expect("remove a follower");
    cluster.kill9(gone);
    let pair = {
        let mut pair = vec![leader, dead];
        pair.sort();
        pair
    };
    wait_voters(&cluster, leader, &pair).await;
    cluster.kill9(dead);

    let asked = Instant::now();
    let answer = cluster.client_for(leader).remove(dead).await;
    let Err(ClientError::InvalidTransition { message, .. }) = &answer else {
        panic!("removing the dead voter of two: {answer:?}");
    };
    assert!(message.contains("current voters"), "{message}");
    assert!(
        asked.elapsed() < REFUSAL_MAX,
        "refused after {:?}",
        asked.elapsed()
    );
    let status = cluster.status(leader).await.expect("leader status");
    assert_eq!(status.voters, pair, "membership changed: {status:?}");
    assert_eq!(
        status.last_log_index, status.commit_index,
        "an uncommitted change was left behind: {status:?}"
    );

    // Back, it can be removed: the change commits.
    cluster.restart(dead).await;
    let answer = cluster
        .client_for(leader)
        .remove(dead)
        .await
        .expect("remove");
    assert_eq!(answer.voters, vec![leader], "{answer:?}");
}

/// Fault injected on followers before asking the leader to remove one of them.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGSTOP the follower that would remain: it holds its ports but answers nothing.
    StopOther,
    /// kill -9 both followers: the leader alone cannot commit anything.
    KillBoth,
}

async fn removal_without_live_quorum_is_refused(fault: Fault) {
    let mut cluster = Cluster::start(3).await;
    write_keys(&cluster.client(), "quorum", 5).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let followers = cluster.others(leader);
    let (target, other) = (followers[0], followers[1]);
    match fault {
        Fault::StopOther => cluster.sigstop(other),
        Fault::KillBoth => {
            cluster.kill9(target);
            cluster.kill9(other);
        }
    }
    // Removing `target` would leave {leader, other} with `other` unreachable: one live
    // voter of two is no quorum, so the new configuration could never commit.
    let answer = cluster.client_for(leader).remove(target).await;
    assert!(
        matches!(answer, Err(ClientError::InvalidTransition { .. })),
        "{fault:?}: {answer:?}"
    );
    let status = cluster.status(leader).await.expect("leader status");
    assert_eq!(
        status.voters,
        vec![1, 2, 3],
        "{fault:?}: membership changed: {status:?}"
    );

    // Once the fault heals the cluster is whole and writable again.
    match fault {
        Fault::StopOther => cluster.sigcont(other),
        Fault::KillBoth => {
            cluster.restart(target).await;
            cluster.restart(other).await;
        }
    }
    let revision = write_keys(&cluster.client(), "healed", 5).await;
    wait_until(
        CATCH_UP_TIMEOUT,
        "every node to apply the writes after healing",
        async || {
            let statuses = cluster.statuses().await;
            statuses.len() == 3
                && statuses
                    .values()
                    .all(|s| s.applied_index >= revision && s.voters == [1, 2, 3])
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removal_is_refused_when_the_remaining_voter_is_frozen() {
    removal_without_live_quorum_is_refused(Fault::StopOther).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn removal_is_refused_when_both_followers_are_dead() {
    removal_without_live_quorum_is_refused(Fault::KillBoth).await;
}

/// A voter whose data dir is wiped and that comes back under its old id has forgotten its
/// vote and the entries it acknowledged. Here it holds the only other copy of an
/// acknowledged write (the third node was frozen while it was written); with the leader
/// dead, its empty log would grant the lagging node's vote, and the write would be lost.
/// It is not admitted, so it refuses: no leader until the old leader is back, and the
/// write survives. A join of it as a voter says what happened; removed and joined again,
/// it is admitted and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_wiped_in_place_is_refused_until_removed_and_joined_again() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let followers = cluster.others(leader);
    let (lagging, wiped) = (followers[0], followers[1]);
    let client = cluster.client();
    let write = |value: &'static str| WriteRequest::new("wiped/k", json!(value), "t40");
    client.write(write("v1")).await.expect("write v1");

    cluster.sigstop(lagging);
    let acknowledged = client.write(write("v2")).await.expect("write v2").revision;
    cluster.kill9(wiped);
    std::fs::remove_dir_all(cluster.data_dir(wiped)).expect("wipe");
    cluster.restart(wiped).await;
    cluster.kill9(leader);
    cluster.sigcont(lagging);

    // Several election timeouts: the lagging node campaigns, the wiped one refuses.
    let watched = std::time::Instant::now();
    while watched.elapsed() < Duration::from_secs(4) {
        for id in [lagging, wiped] {
            if let Ok(status) = cluster.status(id).await {
                assert_ne!(status.role, "leader", "node {id} leads: {status:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = client
        .metrics(&cluster.endpoint(wiped))
        .await
        .expect("metrics");
    let refused: u64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("cairn_peer_requests_not_admitted_total ")?
                .parse()
                .ok()
        })
        .expect("the refusal counter");
    assert!(refused > 0, "the wiped node was never asked:\n{metrics}");

    cluster.restart(leader).await;
    let read = client
        .read("wiped/k", linearizable())
        .await
        .expect("read after the leader is back");
    assert_eq!(read.record.value, Some(json!("v2")), "{read:?}");

    match patient_client(&cluster).join(cluster.spec(wiped)).await {
        Err(ClientError::InvalidTransition { message, .. }) => {
            assert!(message.contains("holds no Raft state"), "{message}")
        }
        other => panic!("join of a wiped voter: {other:?}"),
    }
    client.remove(wiped).await.expect("remove the wiped voter");
    let joined = patient_client(&cluster)
        .join(cluster.spec(wiped))
        .await
        .expect("join it again");
    assert_eq!(joined.voters, cluster.ids(), "{joined:?}");
    cluster
        .wait_applied(wiped, acknowledged, CATCH_UP_TIMEOUT)
        .await;
    let on_wiped = cluster
        .client_for(wiped)
        .read("wiped/k", any_at(acknowledged))
        .await
        .expect("read on the rejoined node");
    assert_eq!(on_wiped.record.value, Some(json!("v2")), "{on_wiped:?}");
}

/// A join under a wrong id (here node 4's addresses under id 5) is refused at once, before
/// anything changes: the node at that address refuses peer requests meant for another id,
/// so the learner would never catch up, and it would hold node 4's addresses. The join
/// under the right id then succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_join_under_another_nodes_id_is_refused_at_once() {
    let mut cluster = Cluster::start(3).await;
    let client = patient_client(&cluster);
    let spec = cluster.add_node(4).await;
    let wrong_id = NodeSpec {
        id: 5,
        ..spec.clone()
    };
    let started = Instant::now();
    let refused = client.join(wrong_id).await;
    assert!(started.elapsed() < REFUSAL_MAX, "{:?}", started.elapsed());
    match &refused {
        Err(ClientError::InvalidTransition { message, .. }) => assert!(
            message.contains("this is node 4, not node 5") && message.contains("nothing changed"),
            "{message}"
        ),
        other => panic!("expected 409 invalid_transition: {other:?}"),
    }
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let status = cluster.status(leader).await.expect("status");
    assert_eq!((status.voters, status.learners), (vec![1, 2, 3], vec![]));

    let joined = client
        .join(spec)
        .await
        .expect("the join under node 4's own id");
    assert_eq!(joined.voters, vec![1, 2, 3, 4]);
}

/// A join on a leader without a live majority cannot commit the entry that adds the
/// learner: it answers 504 `outcome_unknown` with the id once `batching.commit_timeout_ms`
/// (5 s) has passed, and so does the join sent again while that entry stays uncommitted,
/// instead of waiting out the catch-up timeout (60 s) and blaming the new node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_join_without_a_live_majority_is_outcome_unknown_after_the_commit_timeout() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    for follower in cluster.others(leader) {
        cluster.kill9(follower);
    }
    let (client_addr, peer_addr) = support::free_addr_pair();
    let spec = NodeSpec {
        id: 4,
        client_addr,
        peer_addr,
    };
    let http = reqwest::Client::new();
    for attempt in ["first", "again"] {
        let started = Instant::now();
        let answer = http
            .post(format!("{}/cluster/join", cluster.endpoint(leader)))
            .json(&spec)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{attempt} join: no answer within 30 s: {e}"));
        assert_eq!(answer.status().as_u16(), 504, "{attempt} join");
        let body: serde_json::Value = answer.json().await.expect("an error body");
        assert_eq!(body["error"]["code"], "outcome_unknown", "{body}");
        assert_eq!(body["error"]["id"], 4, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("the addition of node 4 as a learner")),
            "{body}"
        );
        assert!(
            started.elapsed() < REFUSAL_MAX,
            "{attempt}: {:?}",
            started.elapsed()
        );
    }
}
