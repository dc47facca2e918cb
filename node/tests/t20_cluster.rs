//! A replicated cluster of real `cairn-node` processes: leader election, replication,
//! relaying by followers, catch-up after downtime (a node listed at init but started
//! later included), the data-dir lock, and startup errors.

mod support;

use std::time::Duration;

use cairn_api::{BatchOp, BatchRequest, InitRequest, MembershipResponse, NodeSpec, WriteRequest};
use cairn_client::ClientError;
use serde_json::json;
use support::{
    any_at, free_addr, free_addr_pair, linearizable, run_node_to_exit, wait_until, Cluster,
    LEADER_TIMEOUT,
};

/// Bound on replication and catch-up waits.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);
/// A node that refuses to start does so at once; this only bounds a hang.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Writes `count` keys `PREFIX/i` = `{"i": i}`; returns the highest revision.
async fn write_keys(cluster: &Cluster, prefix: &str, count: u64) -> u64 {
    let client = cluster.client();
    let mut revision = 0;
    for i in 0..count {
        let result = client
            .write(WriteRequest::new(
                format!("{prefix}/{i}"),
                json!({"i": i}),
                "t20",
            ))
            .await
            .expect("write");
        assert!(
            result.revision > revision,
            "revisions rise: {} after {revision}",
            result.revision
        );
        revision = result.revision;
    }
    revision
}

/// Checks, on node `id` alone (consistency any), that every key of [`write_keys`] is there.
async fn assert_keys_on(cluster: &Cluster, id: u64, prefix: &str, count: u64, revision: u64) {
    let client = cluster.client_for(id);
    for i in 0..count {
        let key = format!("{prefix}/{i}");
        let read = client
            .read(&key, any_at(revision))
            .await
            .unwrap_or_else(|e| panic!("node {id}: read {key}: {e}"));
        assert_eq!(read.record.value, Some(json!({"i": i})), "node {id}: {key}");
        assert_eq!(read.served.node_id, id, "an `any` read is served locally");
        assert!(
            read.served.applied_index >= revision,
            "node {id} served before applying {revision}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_elect_exactly_one_leader_and_agree_on_it() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    // Followers learn the leader from its first heartbeat; wait until all three agree.
    wait_until(
        CATCH_UP_TIMEOUT,
        "every node to know the leader",
        async || {
            let statuses = cluster.statuses().await;
            statuses.len() == 3 && statuses.values().all(|s| s.leader_id == Some(leader))
        },
    )
    .await;
    let statuses = cluster.statuses().await;
    let leaders: Vec<u64> = statuses
        .values()
        .filter(|s| s.role == "leader")
        .map(|s| s.node_id)
        .collect();
    assert_eq!(leaders, vec![leader], "exactly one leader: {statuses:#?}");
    let term = statuses[&leader].term;
    for status in statuses.values() {
        assert_eq!(status.term, term, "one term: {status:?}");
        assert_eq!(status.voters, vec![1, 2, 3], "voters: {status:?}");
        assert!(status.learners.is_empty(), "learners: {status:?}");
        assert_eq!(status.nodes.len(), 3, "nodes: {status:?}");
        if status.node_id != leader {
            assert_eq!(status.role, "follower", "{status:?}");
        }
    }
    // The leader's own reads need no relay: `served` says it answered itself.
    cluster
        .client()
        .write(WriteRequest::new("probe", json!(1), "t20"))
        .await
        .expect("write");
    let read = cluster
        .client_for(leader)
        .read("probe", linearizable())
        .await
        .expect("read");
    assert_eq!(
        (read.served.node_id, read.served.role.as_str()),
        (leader, "leader")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_are_on_every_node() {
    let cluster = Cluster::start(3).await;
    let revision = write_keys(&cluster, "rep", 50).await;
    for id in cluster.ids() {
        // A 200 means committed on a majority and applied on the leader; the third node
        // may lag a little, so wait for it before reading its local state.
        cluster.wait_applied(id, revision, CATCH_UP_TIMEOUT).await;
        assert_keys_on(&cluster, id, "rep", 50, revision).await;
        let status = cluster.status(id).await.expect("status");
        assert!(
            status.commit_index >= revision && status.last_log_index >= revision,
            "{status:?}"
        );
    }
}

/// `GET /metrics` of node `id` as `name -> value` (Prometheus text, no labels).
async fn metrics_of(cluster: &Cluster, id: u64) -> std::collections::BTreeMap<String, u64> {
    let url = format!("{}/metrics", cluster.endpoint(id));
    let text = reqwest::get(&url)
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body");
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (name, value) = line.split_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_report_raft_store_and_read_gate_gauges() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let revision = write_keys(&cluster, "metrics", 20).await;
    for id in cluster.ids() {
        cluster.wait_applied(id, revision, CATCH_UP_TIMEOUT).await;
        let m = metrics_of(&cluster, id).await;
        let get = |name: &str| *m.get(name).unwrap_or_else(|| panic!("no {name} in {m:?}"));
        assert_eq!(get("cairn_is_leader"), u64::from(id == leader), "node {id}");
        assert!(get("cairn_term") >= 1, "{m:?}");
        assert!(get("cairn_last_log_index") >= revision, "{m:?}");
        assert!(get("cairn_applied_index") >= revision, "{m:?}");
        // Every replica applies the 20 writes, each looking its slot up once.
        let lookups = get("cairn_slot_cache_hits_total") + get("cairn_slot_cache_misses_total");
        assert!(lookups >= 20, "{m:?}");
        for gauge in [
            "cairn_commit_index",
            "cairn_snapshot_index",
            "cairn_log_purged_through",
            "cairn_state_unflushed_records",
            "cairn_slot_cache_bytes",
            "cairn_blob_file_bytes",
            "cairn_blob_garbage_bytes",
            "cairn_blob_gc_collecting",
            "cairn_read_token_age_ms",
            "cairn_read_index_rounds_total",
            "cairn_rocksdb_table_readers_bytes",
            "cairn_rocksdb_block_cache_bytes",
        ] {
            get(gauge);
        }
        // A running node is resident, and its memtables hold the writes' records (each
        // gauge's floor also shows it is not a constant 0).
        assert!(get("cairn_process_resident_bytes") > 1 << 20, "{m:?}");
        assert!(get("cairn_rocksdb_memtable_bytes") > 0, "{m:?}");
        // The writes are in the log's segment files.
        assert!(get("cairn_log_segments") >= 1, "{m:?}");
        assert!(get("cairn_log_segment_bytes") > 20 * 100, "{m:?}");
    }
    let on_leader = metrics_of(&cluster, leader).await;
    assert!(on_leader["cairn_commit_index"] >= revision, "{on_leader:?}");
    assert!(on_leader["cairn_mutations_ok_total"] >= 20, "{on_leader:?}");
    // Every applied mutation is one observation of the latency histogram.
    let latencies = on_leader["cairn_mutation_latency_us_count"];
    assert_eq!(
        latencies, on_leader["cairn_mutations_ok_total"],
        "{on_leader:?}"
    );
    assert_eq!(
        on_leader[r#"cairn_mutation_latency_us_bucket{le="+Inf"}"#],
        latencies
    );
    assert!(
        on_leader["cairn_mutation_latency_us_sum"] > 0,
        "{on_leader:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn followers_relay_writes_and_linearizable_reads_to_the_leader() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let followers = cluster.others(leader);
    let written = cluster
        .client_for(followers[0])
        .write(WriteRequest::new("relayed", json!("via follower"), "t20"))
        .await;
    let written = written.expect("a follower relays the write");
    assert_eq!(written.version, 1);
    // A linearizable read at the other follower is answered by the leader (relayed), and
    // sees the write at once: no wait for replication to that follower.
    let read = cluster
        .client_for(followers[1])
        .read("relayed", linearizable())
        .await
        .expect("read");
    assert_eq!(read.record.value, Some(json!("via follower")));
    assert_eq!(read.record.revision, written.revision);
    assert_eq!(
        read.served.node_id, leader,
        "linearizable reads are served by the leader"
    );
}

/// Writes `key` through `endpoint` with `request_id` (raw HTTP: no client retry or
/// failover), expects 504 `outcome_unknown` naming that id, and returns how long the
/// answer took.
async fn write_outcome_unknown(endpoint: &str, key: &str, request_id: &str) -> Duration {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("http client");
    let body = json!({"key": key, "value": 1, "actor": "t20", "request_id": request_id});
    let started = std::time::Instant::now();
    let answer = http
        .post(format!("{endpoint}/v1/write"))
        .json(&body)
        .send()
        .await
        .expect("an answer before the client gives up");
    let waited = started.elapsed();
    let status = answer.status().as_u16();
    let body: serde_json::Value = answer.json().await.expect("JSON error body");
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["error"]["code"], "outcome_unknown", "{body}");
    assert_eq!(body["error"]["request_id"], request_id, "{body}");
    waited
}

/// SPEC §2: a mutation whose outcome is unknown is answered 504 `outcome_unknown` with its
/// `request_id`. A leader whose followers are gone cannot commit; without a bound on the
/// wait, a client with no timeout of its own (curl) never got an answer at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_without_its_majority_answers_a_write_504_outcome_unknown() {
    const COMMIT_TIMEOUT: Duration = Duration::from_millis(1500);
    let mut cluster = Cluster::builder(3)
        .config(&format!(
            "[batching]\ncommit_timeout_ms = {}\n",
            COMMIT_TIMEOUT.as_millis()
        ))
        .start()
        .await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    for id in cluster.ids().into_iter().filter(|id| *id != leader) {
        cluster.kill9(id);
    }
    let waited = write_outcome_unknown(&cluster.endpoint(leader), "cut/1", "t20-cut-1").await;
    assert!(
        waited >= COMMIT_TIMEOUT && waited < COMMIT_TIMEOUT * 4,
        "answered after {waited:?}, commit timeout {COMMIT_TIMEOUT:?}"
    );
}

/// Writes `key` through a follower while the leader is paused, on a cluster with
/// `config`; expects 504 `outcome_unknown` from the relay, then checks that the retry
/// under the same request id, once the leader is resumed, applies the write once. Returns
/// how long the relay took to answer.
async fn relay_to_a_paused_leader(config: &str, key: &str) -> Duration {
    let mut cluster = Cluster::builder(3).config(config).start().await;
    let leader = cluster.wait_settled(LEADER_TIMEOUT).await;
    let follower = cluster.others(leader)[0];
    let request_id = format!("t20-{}", key.replace('/', "-"));
    cluster.sigstop(leader);
    let waited = write_outcome_unknown(&cluster.endpoint(follower), key, &request_id).await;
    cluster.sigcont(leader);
    let retried = cluster
        .client()
        .write(WriteRequest {
            request_id: Some(request_id),
            ..WriteRequest::new(key, json!(1), "t20")
        })
        .await
        .expect("the retry");
    assert_eq!(retried.version, 1, "applied once: {retried:?}");
    waited
}

/// SPEC §5 Extension: a mutation not applied within the commit timeout is 504
/// `outcome_unknown`, also when a follower relays it. A relay to a leader that stopped
/// answering (paused here, before the others elect a new one) waited a fixed 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_gives_up_on_a_paused_leader_within_the_commit_timeout() {
    const COMMIT_TIMEOUT: Duration = Duration::from_millis(2000);
    // Slow elections keep the followers pointing at the paused leader while the write is
    // relayed to it (the commit timeout must exceed their upper end).
    let config = format!(
        "[batching]\ncommit_timeout_ms = {}\n[raft]\nelection_timeout_min_ms = 1400\n\
         election_timeout_max_ms = 1500\n",
        COMMIT_TIMEOUT.as_millis()
    );
    let waited = relay_to_a_paused_leader(&config, "paused/1").await;
    assert!(
        waited < COMMIT_TIMEOUT * 4,
        "answered after {waited:?}, commit timeout {COMMIT_TIMEOUT:?}"
    );
}

/// A relay to a leader that stopped answering is given up on as soon as the relaying node
/// no longer takes it for the leader (it stands for election or follows another), not at
/// the commit timeout: a client's retry then finds the new leader. With a 20 s commit
/// timeout, the relay used to hold the write 21 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_gives_up_on_a_paused_leader_once_it_stops_following_it() {
    const COMMIT_TIMEOUT: Duration = Duration::from_secs(20);
    let config = format!(
        "[batching]\ncommit_timeout_ms = {}\n",
        COMMIT_TIMEOUT.as_millis()
    );
    let waited = relay_to_a_paused_leader(&config, "moved/1").await;
    assert!(
        waited < COMMIT_TIMEOUT / 4,
        "answered after {waited:?}; elections take under a second here"
    );
}

/// A read relayed to a paused leader is given up on once the follower stops following it,
/// with 503 `no_leader`, whose `leader_id` never names the node given up on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_given_up_on_does_not_name_the_paused_leader() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_settled(LEADER_TIMEOUT).await;
    let follower = cluster.others(leader)[0];
    cluster.sigstop(leader);
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/read", cluster.endpoint(follower)))
        .json(&json!({"key": "moved/read"}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("an answer");
    cluster.sigcont(leader);
    let status = answer.status().as_u16();
    let body: serde_json::Value = answer.json().await.expect("JSON error body");
    assert_eq!(
        (status, &body["error"]["code"]),
        (503, &json!("no_leader")),
        "{body}"
    );
    assert_ne!(body["error"]["leader_id"], json!(leader), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_that_was_down_catches_up_after_restart() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let down = cluster.others(leader)[0];
    cluster.kill9(down);
    // Two of three are enough for a quorum: writes go on while it is down.
    let revision = write_keys(&cluster, "while-down", 100).await;
    let status = cluster.status(leader).await.expect("leader status");
    assert!(status.applied_index >= revision, "{status:?}");
    cluster.restart(down).await;
    cluster.wait_applied(down, revision, CATCH_UP_TIMEOUT).await;
    assert_keys_on(&cluster, down, "while-down", 100, revision).await;
}

/// A node listed at init answers Raft only once admitted; one that was not running at
/// the init is admitted by the init's node as soon as it starts, and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_listed_at_init_but_started_later_is_admitted_and_catches_up() {
    let mut cluster = Cluster::builder(3).uninitialized().start().await;
    cluster.kill9(3);
    cluster.init().await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let revision = write_keys(&cluster, "late", 20).await;
    cluster.restart(3).await;
    cluster.wait_applied(3, revision, CATCH_UP_TIMEOUT).await;
    assert_keys_on(&cluster, 3, "late", 20, revision).await;
    let log = cluster.log_text(1);
    assert!(
        log.contains("admitted a first member that started after the init"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_far_behind_catches_up_in_payloads_cut_to_max_payload_bytes() {
    // Entries of ~20 KiB against a 64 KiB budget: a few entries per append-entries RPC.
    let mut cluster = Cluster::builder(3)
        .config("[raft]\nmax_payload_bytes = 65536\n")
        .start()
        .await;
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let down = cluster.others(leader)[0];
    cluster.kill9(down);
    let value = |i: u64| json!({"i": i, "pad": "x".repeat(20_000)});
    let client = cluster.client();
    let mut revision = 0;
    for i in 0..40 {
        let request = WriteRequest::new(format!("big/{i}"), value(i), "t20");
        revision = client.write(request).await.expect("write").revision;
    }
    let cut_before = metrics_of(&cluster, leader).await["cairn_raft_payloads_cut_total"];

    cluster.restart(down).await;
    cluster.wait_applied(down, revision, CATCH_UP_TIMEOUT).await;

    let cut = metrics_of(&cluster, leader).await["cairn_raft_payloads_cut_total"] - cut_before;
    assert!(
        cut >= 2,
        "40 entries of ~20 KiB need several 64 KiB payloads; cut {cut}"
    );
    let follower = cluster.client_for(down);
    for i in 0..40 {
        let read = follower
            .read(&format!("big/{i}"), any_at(revision))
            .await
            .expect("read");
        assert_eq!(read.record.value, Some(value(i)), "node {down}: big/{i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_snapshots_and_purges_once_its_log_grows_by_snapshot_log_bytes() {
    // An entry count that 600 writes never reach, and a byte budget that their ~1.3 MB
    // of entries pass up to five times: only the byte trigger can take a snapshot here,
    // and the last snapshot passes openraft's purge batch (256 entries), so the log is
    // purged.
    let cluster = Cluster::builder(3)
        .config(
            "[raft]\nsnapshot_logs_since_last = 1000000\nsnapshot_log_bytes = 262144\n\
             purge_keep_logs = 0\n",
        )
        .start()
        .await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    let mut revision = 0;
    for i in 0..600 {
        let value = json!({"i": i, "pad": "x".repeat(2_000)});
        let request = WriteRequest::new(format!("big/{i}"), value, "t20");
        revision = client.write(request).await.expect("write").revision;
    }
    for id in cluster.ids() {
        cluster.wait_applied(id, revision, CATCH_UP_TIMEOUT).await;
        let deadline = tokio::time::Instant::now() + CATCH_UP_TIMEOUT;
        loop {
            let m = metrics_of(&cluster, id).await;
            let fired = m["cairn_snapshots_by_log_bytes_total"];
            let (snapshot, purged) = (m["cairn_snapshot_index"], m["cairn_log_purged_through"]);
            if fired >= 1 && snapshot > 0 && purged > 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {id}: requested {fired}, snapshot index {snapshot}, purged through {purged}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compaction_covers_what_was_applied_while_openraft_snapshots_on_its_own() {
    // openraft snapshots every 20 entries here, and a 24 MiB state takes a while to write
    // out, so one of those builds is often running when a compaction asks for a snapshot;
    // openraft drops such a request, and that build ends below what the compaction must
    // cover.
    let cluster = Cluster::builder(1)
        .config("[raft]\nsnapshot_logs_since_last = 20\n")
        .start()
        .await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    let pad = "x".repeat(16_000);
    for chunk in 0..48 {
        let ops = (0..32)
            .map(|i| {
                let key = format!("state/{chunk}/{i}");
                BatchOp::Write(WriteRequest::new(key, json!({"pad": pad}), "t20"))
            })
            .collect();
        let batch = BatchRequest {
            ops,
            request_id: None,
        };
        client.batch(batch).await.expect("preload");
    }
    let endpoint = cluster.endpoint(1);
    for round in 0..10 {
        // Writes keep openraft building; the compaction comes right after they stop, so
        // no later entry-count snapshot covers what the dropped request had to.
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let client = client.clone();
                tokio::spawn(async move {
                    let until = tokio::time::Instant::now() + Duration::from_millis(300);
                    let mut i = 0u64;
                    while tokio::time::Instant::now() < until {
                        let key = format!("busy/{w}/{}", i % 50);
                        let request = WriteRequest::new(key, json!(i), "t20");
                        client.write(request).await.expect("write");
                        i += 1;
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.expect("writer");
        }
        let applied = cluster.status(1).await.expect("status").applied_index;
        let compacted = tokio::time::timeout(Duration::from_secs(20), client.compact(&endpoint))
            .await
            .unwrap_or_else(|_| panic!("round {round}: compaction waited for a snapshot"))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(
            compacted.snapshot_index >= applied,
            "round {round}: snapshot {} below {applied}, applied before compacting",
            compacted.snapshot_index
        );
    }
}

/// The flags that start node `id` on `data_dir` and the two addresses.
fn node_flags<'a>(id: &'a str, data_dir: &'a str, client: &'a str, peer: &'a str) -> [&'a str; 8] {
    [
        "--id",
        id,
        "--data-dir",
        data_dir,
        "--client-addr",
        client,
        "--peer-addr",
        peer,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_process_on_a_locked_data_dir_is_refused() {
    let mut cluster = Cluster::start(3).await;
    let data_dir = cluster.data_dir(2);
    let (client_addr, peer_addr) = free_addr_pair();
    let args = node_flags("2", data_dir.to_str().unwrap(), &client_addr, &peer_addr);
    let scratch = tempfile::tempdir().unwrap();
    let (status, stderr) = run_node_to_exit(scratch.path(), &args, REFUSAL_TIMEOUT).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is in use by another cairn-node process"),
        "{stderr}"
    );
    // The node that holds the lock is untouched and keeps replicating.
    let revision = write_keys(&cluster, "locked", 5).await;
    cluster.wait_applied(2, revision, CATCH_UP_TIMEOUT).await;
    // The lock is an flock: it dies with its process, so kill -9 leaves no stale lock.
    cluster.kill9(2);
    cluster.restart(2).await;
    assert_keys_on(&cluster, 2, "locked", 5, revision).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_data_dir_of_another_node_is_refused() {
    let mut cluster = Cluster::builder(1).uninitialized().start().await;
    cluster.terminate(1);
    let data_dir = cluster.data_dir(1);
    let (client_addr, peer_addr) = free_addr_pair();
    let args = node_flags("7", data_dir.to_str().unwrap(), &client_addr, &peer_addr);
    let scratch = tempfile::tempdir().unwrap();
    let (status, stderr) = run_node_to_exit(scratch.path(), &args, REFUSAL_TIMEOUT).await;
    // The operator named the wrong dir or id: a configuration error.
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cairn-node: config:") && stderr.contains("belongs to node 1, not node 7"),
        "{stderr}"
    );
    // Refusing did not rewrite the owner.
    let owner = std::fs::read_to_string(data_dir.join("node_id")).expect("node_id file");
    assert_eq!(owner.trim(), "1");
}

/// A data dir path that names a file is a configuration error (exit code 2), and the file
/// is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_data_dir_that_is_a_file_exits_with_code_2() {
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("data");
    std::fs::write(&file, b"notes").unwrap();
    let (client_addr, peer_addr) = free_addr_pair();
    let args = node_flags("1", file.to_str().unwrap(), &client_addr, &peer_addr);
    let (status, stderr) = run_node_to_exit(scratch.path(), &args, REFUSAL_TIMEOUT).await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cairn-node: config:") && stderr.contains("exists and is not a directory"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"notes");
    // Under a file, too: the system's reason is said once.
    let below = file.join("sub");
    let args = node_flags("1", below.to_str().unwrap(), &client_addr, &peer_addr);
    let (status, stderr) = run_node_to_exit(scratch.path(), &args, REFUSAL_TIMEOUT).await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.matches("Not a directory").count(),
        1,
        "said once: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_taken_port_stops_the_node_before_it_touches_anything_else() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    let scratch = tempfile::tempdir().unwrap();
    let data_dir = scratch.path().join("data");
    let peer_addr = free_addr();
    let args = node_flags("1", data_dir.to_str().unwrap(), &taken_addr, &peer_addr);
    let (status, stderr) = run_node_to_exit(scratch.path(), &args, REFUSAL_TIMEOUT).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("binding the client address {taken_addr}")),
        "{stderr}"
    );
    assert!(
        !data_dir.exists(),
        "the data dir was made (and tied to id 1) although the port was taken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_config_file_applies_to_every_node() {
    let cluster = Cluster::builder(3)
        .config("[limits]\nkey_bytes_max = 8\n")
        .start()
        .await;
    for id in cluster.ids() {
        // Every node checks limits itself, before relaying anything to the leader.
        let client = cluster.client_for(id);
        let long = client
            .write(WriteRequest::new(format!("key-{id}-long"), json!(1), "t20"))
            .await;
        assert!(
            matches!(long, Err(ClientError::InvalidRequest { .. })),
            "node {id}: {long:?}"
        );
        client
            .write(WriteRequest::new(format!("key-{id}"), json!(1), "t20"))
            .await
            .expect("a 5-byte key");
    }
}

/// One startup that must fail with a configuration error.
struct BadConfig {
    name: &'static str,
    args: Vec<String>,
    toml: Option<&'static str>,
    expected: &'static str,
}

fn bad_configs(data_dir: &str) -> Vec<BadConfig> {
    let (a, b) = free_addr_pair();
    let flags = |id: &str, client: &str, peer: &str| {
        node_flags(id, data_dir, client, peer)
            .map(String::from)
            .to_vec()
    };
    let with_file = |id: &str| {
        [
            flags(id, &a, &b),
            vec!["--config".into(), "node.toml".into()],
        ]
        .concat()
    };
    vec![
        BadConfig {
            name: "no id",
            args: [
                "--data-dir",
                data_dir,
                "--client-addr",
                &a,
                "--peer-addr",
                &b,
            ]
            .map(String::from)
            .to_vec(),
            toml: None,
            expected: "id: missing",
        },
        BadConfig {
            name: "id 0",
            args: flags("0", &a, &b),
            toml: None,
            expected: "id: must be from 1 to 9007199254740991",
        },
        BadConfig {
            name: "an id past 2^53 - 1 (and past what a default port can add)",
            args: [
                "--id",
                "18446744073709551615",
                "--data-dir",
                data_dir,
            ]
            .map(String::from)
            .to_vec(),
            toml: None,
            expected: "id: must be from 1 to 9007199254740991 (2^53 - 1; got 18446744073709551615)",
        },
        BadConfig {
            name: "same address twice",
            args: flags("1", &a, &a),
            toml: None,
            expected: "peer_addr: must differ from client_addr",
        },
        BadConfig {
            name: "not HOST:PORT",
            args: flags("1", "localhost", &b),
            toml: None,
            expected: "client_addr: must be HOST:PORT",
        },
        BadConfig {
            name: "port 0",
            args: flags("1", &a, "127.0.0.1:0"),
            toml: None,
            expected: "peer_addr: must be HOST:PORT with a port from 1 to 65535",
        },
        BadConfig {
            name: "election timeout above 3 s",
            args: with_file("1"),
            toml: Some("[raft]\nelection_timeout_max_ms = 5000\n"),
            expected: "raft.election_timeout_max_ms: must be <= 1500",
        },
        BadConfig {
            name: "heartbeat not below the election timeout",
            args: with_file("1"),
            toml: Some("[raft]\nheartbeat_interval_ms = 500\nelection_timeout_min_ms = 400\n"),
            expected: "raft.election_timeout_min_ms",
        },
        BadConfig {
            name: "log_level not a filter",
            args: with_file("1"),
            toml: Some("log_level = \"info,cairn=loud\"\n"),
            expected: "log_level: must be a tracing filter",
        },
        BadConfig {
            name: "log_level a misspelt level, which tracing takes as a target",
            args: with_file("1"),
            toml: Some("log_level = \"warning\"\n"),
            expected: "log_level: must be a tracing filter like \"info\" (got \"warning\": \"warning\" is no level",
        },
        BadConfig {
            name: "unknown field",
            args: with_file("1"),
            toml: Some("[raft]\nelection_timeout = 5\n"),
            expected: "unknown field",
        },
        BadConfig {
            name: "missing file",
            args: [
                flags("1", &a, &b),
                vec!["--config".into(), "absent.toml".into()],
            ]
            .concat(),
            toml: None,
            expected: "cannot read",
        },
        BadConfig {
            name: "a TLS file that cannot be read, named by its key",
            args: with_file("1"),
            toml: Some("tls_cert = \"absent.pem\"\ntls_key = \"absent.key\"\ntls_ca = \"absent.pem\"\n"),
            expected: "config: tls_cert absent.pem: cannot read",
        },
    ]
}

/// `RUST_LOG` stands in for `log_level`, and one that does not parse is refused the same
/// way, before the data dir is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_log_that_does_not_parse_exits_with_code_2() {
    let scratch = tempfile::tempdir().unwrap();
    let (client, peer) = free_addr_pair();
    let mut cmd = tokio::process::Command::from(support::node_command(scratch.path()));
    cmd.args(["--id", "1", "--data-dir", "data", "--client-addr", &client])
        .args(["--peer-addr", &peer])
        .env("RUST_LOG", "info,cairn=loud")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(REFUSAL_TIMEOUT, cmd.output())
        .await
        .expect("the node refused to start at once")
        .expect("running cairn-node");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cairn-node: config: RUST_LOG: must be a tracing filter"),
        "{stderr}"
    );
    assert!(!scratch.path().join("data").exists(), "data dir created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn config_errors_exit_with_code_2_and_name_the_field() {
    for case in bad_configs("data") {
        let scratch = tempfile::tempdir().unwrap();
        if let Some(toml) = case.toml {
            std::fs::write(scratch.path().join("node.toml"), toml).unwrap();
        }
        let args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        let (status, stderr) = run_node_to_exit(scratch.path(), &args, REFUSAL_TIMEOUT).await;
        assert_eq!(status.code(), Some(2), "{}: {stderr}", case.name);
        assert!(
            stderr.contains("cairn-node: config:"),
            "{}: {stderr}",
            case.name
        );
        assert!(
            stderr.contains(case.expected),
            "{}: expected {:?} in {stderr}",
            case.name,
            case.expected
        );
        // Rejected before anything touched the disk.
        assert!(
            !scratch.path().join("data").exists(),
            "{}: data dir created",
            case.name
        );
    }
}

/// `cairn-node certs` issues certificates only for ids a node can have (1 to 2^53 - 1),
/// and writes nothing for a list with another one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certs_refuses_node_ids_no_node_can_have() {
    for nodes in ["0", "1,9007199254740992", "18446744073709551615"] {
        let scratch = tempfile::tempdir().unwrap();
        let args = ["certs", "--out", "certs", "--nodes", nodes];
        let (status, stderr) = run_node_to_exit(scratch.path(), &args, REFUSAL_TIMEOUT).await;
        assert_eq!(status.code(), Some(2), "{nodes}: {stderr}");
        assert!(
            stderr.contains("--nodes: node ids are 1 to 9007199254740991"),
            "{nodes}: {stderr}"
        );
        assert!(
            !scratch.path().join("certs").exists(),
            "{nodes}: wrote certs"
        );
    }
}

/// SPEC §6: `--client-addr HOST:PORT --peer-addr HOST:PORT`. A node started with host
/// names serves on them, is initialized with them and takes a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_takes_host_names_for_its_addresses() {
    let scratch = tempfile::tempdir().unwrap();
    let named = |addr: String| addr.replace("127.0.0.1", "localhost");
    let (client_addr, peer_addr) = free_addr_pair();
    let (client_addr, peer_addr) = (named(client_addr), named(peer_addr));
    let mut node = tokio::process::Command::from(support::node_command(scratch.path()));
    node.args(node_flags("1", "data", &client_addr, &peer_addr))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let _node = node.spawn().expect("spawning cairn-node");
    let base = format!("http://{client_addr}");
    let http = reqwest::Client::new();
    wait_until(LEADER_TIMEOUT, "the node serves /healthz", async || {
        http.get(format!("{base}/healthz")).send().await.is_ok()
    })
    .await;
    let init = json!({"nodes": [{"id": 1, "client_addr": client_addr, "peer_addr": peer_addr}]});
    let answer = http
        .post(format!("{base}/cluster/init"))
        .json(&init)
        .send()
        .await
        .expect("init");
    assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
    let write = json!({"key": "named/1", "value": 1, "actor": "t20"});
    wait_until(LEADER_TIMEOUT, "a write is applied", async || {
        let sent = http
            .post(format!("{base}/v1/write"))
            .json(&write)
            .send()
            .await;
        sent.is_ok_and(|r| r.status() == 200)
    })
    .await;
    let status: serde_json::Value = http
        .get(format!("{base}/cluster/status"))
        .send()
        .await
        .expect("status")
        .json()
        .await
        .expect("status JSON");
    assert_eq!(status["leader_id"], json!(1), "{status}");
}

/// Init happens once: on an initialized node every well-formed init is 409
/// `invalid_transition`, whatever nodes it names (SPEC §6: "before looking at the
/// addresses"); one of the wrong shape (a node twice, an address that is no host:port) is
/// the same 400 as on any node (the shape checks themselves are t61's).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn init_happens_once_whatever_it_names() {
    let cluster = Cluster::start(3).await;
    let specs: Vec<NodeSpec> = cluster
        .ids()
        .into_iter()
        .map(|id| cluster.spec(id))
        .collect();
    let mut bad_addr = specs.clone();
    bad_addr[0].peer_addr = "nowhere".into();
    let inits = [
        ("the same nodes", specs.clone()),
        ("a node twice", vec![specs[0].clone(), specs[0].clone()]),
        ("without this node", specs[1..].to_vec()),
        ("a bad address", bad_addr),
    ];
    let node1 = cluster.client_for(1);
    for (what, nodes) in inits {
        let again = node1.init(InitRequest { nodes, auth: None }).await;
        let shape = matches!(what, "a node twice" | "a bad address");
        assert!(
            match shape {
                true => matches!(again, Err(ClientError::InvalidRequest { .. })),
                false => matches!(again, Err(ClientError::InvalidTransition { .. })),
            },
            "{what}: {again:?}"
        );
    }
    // None of that changed the membership.
    let status = cluster.status(1).await.expect("status");
    assert_eq!((status.voters, status.learners), (vec![1, 2, 3], vec![]));
}

/// An init names only nodes that hold no cluster: one initialized before (here alone)
/// makes a second init that names it 409 with its id, before anything is written. Taken
/// in, it would have met a second leader of a term it led itself, and openraft stopped on
/// an assertion at every start of it. The node and the refused initializer stay as they
/// were, and an init without it then succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_init_naming_a_node_of_another_cluster_is_refused() {
    let cluster = Cluster::builder(3).uninitialized().start().await;
    let alone = vec![cluster.spec(2)];
    let answer = init_through(&cluster, 2, alone)
        .await
        .expect("node 2 initialized alone");
    assert_eq!(answer.voters, vec![2]);

    let all = every_spec(&cluster);
    let refused = init_through(&cluster, 1, all).await;
    match &refused {
        Err(ClientError::InvalidTransition { message, .. }) => assert!(
            message.contains("node 2 already belongs to a cluster")
                && message.contains("nothing changed"),
            "{message}"
        ),
        other => panic!("expected 409 invalid_transition: {other:?}"),
    }
    let node1 = cluster.status(1).await.expect("node 1's status");
    assert!(node1.voters.is_empty(), "node 1 was initialized: {node1:?}");
    let node2 = cluster.status(2).await.expect("node 2's status");
    assert_eq!((node2.voters, node2.leader_id), (vec![2], Some(2)));

    let without_2 = vec![cluster.spec(1), cluster.spec(3)];
    let answer = init_through(&cluster, 1, without_2)
        .await
        .expect("an init without node 2");
    assert_eq!(answer.voters, vec![1, 3]);
}

/// Two inits sent at once through two nodes that name each other (node 1 naming all
/// three, node 2 naming itself alone) never both make a cluster: each init claims its
/// first members, a node keeps the first claim, and the init that meets another's claim
/// is 409 with nothing initialized. Without the claim both answered 200, and node 2 could
/// meet node 1's leader in a term it led itself and stop on openraft's assertion.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_inits_at_once_never_make_two_clusters() {
    for round in 0..3 {
        let cluster = Cluster::builder(3).uninitialized().start().await;
        let (first, second) = tokio::join!(
            init_through(&cluster, 1, every_spec(&cluster)),
            init_through(&cluster, 2, vec![cluster.spec(2)]),
        );
        let answers = [&first, &second];
        let made = answers.iter().filter(|answer| answer.is_ok()).count();
        assert_eq!(made, 1, "round {round}: {first:?} / {second:?}");
        for answer in answers {
            if let Err(refused) = answer {
                assert!(
                    matches!(refused, ClientError::InvalidTransition { .. }),
                    "round {round}: {refused:?}"
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        for id in cluster.ids() {
            let log = cluster.log_text(id);
            assert!(!log.contains("panicked"), "round {round}, node {id}: {log}");
        }
    }
}

/// `POST /cluster/init` of `nodes`, sent to node `id` only.
async fn init_through(
    cluster: &Cluster,
    id: u64,
    nodes: Vec<NodeSpec>,
) -> Result<MembershipResponse, ClientError> {
    let request = InitRequest { nodes, auth: None };
    cluster.client_for(id).init(request).await
}

fn every_spec(cluster: &Cluster) -> Vec<NodeSpec> {
    cluster
        .ids()
        .into_iter()
        .map(|id| cluster.spec(id))
        .collect()
}
