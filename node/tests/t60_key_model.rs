//! The key model (SPEC §1, §2, §4, §5) against a real 3-node cluster: the four failures
//! the design closes, physical erasure, exactly-once retries, all-or-nothing batches and
//! bad input that never reaches the log.
//!
//! 1. Write-after-forget resurrection: a stale writer is refused, on every node.
//! 2. Forgotten with provenance: one tombstone, with the value's hash, readable by id.
//! 3. Half-reclaimed slots: only `clear_tombstone` reopens a key, as a new generation.
//! 4. Deletion keeps the trap: a revoked belief is delivered as a deterrent, then reinstated.
//! 5. Physical erasure: after a forget and `POST /cluster/compact`, no data file holds it.
//! 6. Retries: one `request_id` applies once, whichever node it is sent to.
//! 7. Batches: a failing op applies nothing, and names its index.
//! 8. Bad input changes nothing.
//! 9. `based_on_revision` fences for ever: a lifted revoke still refuses older data.
//! 10. History events carry the given reason verbatim; what an operation acted on has its
//!     own fields.
//! 11. Answers and records are bounded: a list or recall page stops at its value bytes, a
//!     key holds at most 64 stale flags.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_api::{
    BatchOp, BatchRequest, ClusterStatus, Consistency, EventKind, ForgetRequest, HistoryEvent,
    ListRequest, ProbeResponse, RecallRequest, Record, ReinstateRequest, RevokeRequest, State,
    Tombstone, WriteRequest,
};
use cairn_client::{new_request_id, Client, ClientError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use support::{any_at, linearizable, Cluster, LEADER_TIMEOUT};

/// Bound on replication waits.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);
/// One raw HTTP exchange.
const RAW_TIMEOUT: Duration = Duration::from_secs(30);

// -- helpers --------------------------------------------------------------------------------

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// The leader and the other nodes.
async fn roles(cluster: &Cluster) -> (u64, Vec<u64>) {
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let followers = cluster.others(leader);
    (leader, followers)
}

/// Attempts of a raw request that met a 503 (`no_leader`, `stale_read`, `overloaded`:
/// nothing was applied, so resending is safe), e.g. a ReadIndex round that timed out on
/// a loaded machine.
const RAW_ATTEMPTS: u32 = 10;

/// One HTTP request outside the client library (no request_id, no typing), resent only
/// after a 503: the status and the JSON body.
async fn raw(method: reqwest::Method, url: &str, body: Option<String>) -> (u16, Value) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(RAW_TIMEOUT)
        .build()
        .expect("http client");
    for attempt in 1.. {
        let mut request = http.request(method.clone(), url);
        if let Some(body) = &body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let status = response.status().as_u16();
        let bytes = response.bytes().await.expect("response body");
        let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{url}: answer {status} is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        if status != 503 || attempt == RAW_ATTEMPTS {
            return (status, value);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    unreachable!("the loop returns")
}

/// `POST path` with a raw body to node `id`.
async fn post_raw(cluster: &Cluster, id: u64, path: &str, body: &str) -> (u16, Value) {
    let url = format!("{}{path}", cluster.endpoint(id));
    raw(reqwest::Method::POST, &url, Some(body.to_string())).await
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("(no error code)")
}

/// The key's record (linearizable) and its history: what "unchanged" compares.
async fn key_snapshot(client: &Client, key: &str) -> (Record, Vec<HistoryEvent>) {
    let record = client
        .read(key, linearizable())
        .await
        .unwrap_or_else(|e| panic!("read {key}: {e}"))
        .record;
    let events = client
        .history(key, linearizable())
        .await
        .unwrap_or_else(|e| panic!("history {key}: {e}"))
        .events;
    (record, events)
}

fn kinds(events: &[HistoryEvent]) -> Vec<EventKind> {
    events.iter().map(|e| e.kind).collect()
}

/// Canonical JSON, written independently of the node's: compact, object keys sorted
/// bytewise at every depth.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let members: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        scalar => scalar.to_string(),
    }
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// What a probe must say about a key (everything but `served` and `log_purged_through`).
#[derive(Debug, PartialEq, Eq)]
struct Expect {
    state: State,
    value_present: bool,
    retention_present: bool,
    version: u64,
    generation: u64,
    forget_epoch: u64,
    tombstone_id: Option<String>,
    value_revision: u64,
}

impl From<&ProbeResponse> for Expect {
    fn from(p: &ProbeResponse) -> Self {
        Expect {
            state: p.state,
            value_present: p.value_present,
            retention_present: p.retention_present,
            version: p.version,
            generation: p.generation,
            forget_epoch: p.forget_epoch,
            tombstone_id: p.tombstone_id.clone(),
            value_revision: p.value_revision,
        }
    }
}

/// Probes `key` linearizably and on every node locally (`any` at `revision`); each must
/// match `expect`. Returns the per-node answers.
async fn assert_probe_everywhere(
    cluster: &Cluster,
    key: &str,
    revision: u64,
    expect: &Expect,
    step: &str,
) -> Vec<ProbeResponse> {
    let probe = cluster
        .client()
        .probe(key, linearizable())
        .await
        .unwrap_or_else(|e| panic!("{step}: probe {key}: {e}"));
    assert_eq!(&Expect::from(&probe), expect, "{step}: linearizable probe");
    let mut answers = Vec::new();
    for id in cluster.ids() {
        let probe = cluster
            .client_for(id)
            .probe(key, any_at(revision))
            .await
            .unwrap_or_else(|e| panic!("{step}: probe {key} on node {id}: {e}"));
        assert_eq!(probe.served.node_id, id, "{step}: an `any` probe is local");
        assert_eq!(&Expect::from(&probe), expect, "{step}: probe on node {id}");
        answers.push(probe);
    }
    answers
}

/// Every regular file under `dir` (recursively) whose bytes contain any of `needles`, and
/// the number of files and bytes scanned. A snapshot file is searched decoded too (its
/// records are in an LZ4 frame, which may store part of a needle as a back-reference).
/// Files that vanish mid-scan (RocksDB deletes obsolete files at any time) are skipped.
fn files_containing(dir: &Path, needles: &[String]) -> (Vec<PathBuf>, usize, usize) {
    let (mut found, mut files, mut bytes) = (Vec::new(), 0, 0);
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("listing {}: {e}", dir.display()),
        };
        for entry in entries {
            let entry = entry.expect("directory entry");
            let path = entry.path();
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            if file_type.is_dir() {
                dirs.push(path);
                continue;
            }
            if !file_type.is_file() {
                continue;
            }
            let content = match fs::read(&path) {
                Ok(content) => content,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => panic!("reading {}: {e}", path.display()),
            };
            files += 1;
            bytes += content.len();
            let content = with_snapshot_records(content);
            let holds = |needle: &String| {
                let needle = needle.as_bytes();
                content.windows(needle.len()).any(|w| w == needle)
            };
            if needles.iter().any(holds) {
                found.push(path);
            }
        }
    }
    (found, files, bytes)
}

/// `content`, followed by what its LZ4 frame decodes to if it is a snapshot file.
fn with_snapshot_records(mut content: Vec<u8>) -> Vec<u8> {
    if let Some(records) = support::snapshot_file::frame_content(&content) {
        let records = records.expect("a snapshot file's LZ4 frame decodes");
        content.extend_from_slice(&records);
    }
    content
}

// -- 1. write-after-forget resurrection -------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_after_forget_never_resurrects_the_value_on_any_node() {
    let cluster = Cluster::start(3).await;
    let (_, followers) = roles(&cluster).await;
    let key = "t60/facts/db-engine";
    let old_value = "postgres-16-on-db1";
    // The writer (a batching summarizer) and the forgetter talk to different followers.
    let writer = cluster.client_for(followers[0]);
    let forgetter = cluster.client_for(followers[1]);

    // 1.1 The writer writes and reads version v.
    writer
        .write(WriteRequest::new(key, json!("postgres-15"), "summarizer"))
        .await
        .expect("first write");
    writer
        .write(WriteRequest::new(key, json!(old_value), "summarizer"))
        .await
        .expect("second write");
    let seen = writer.read(key, linearizable()).await.expect("read v");
    let v = seen.record.version;
    assert_eq!((v, seen.record.state), (2, State::Active));
    assert_eq!(seen.record.value, Some(json!(old_value)));

    // 1.2 A forget lands (through the other follower).
    let forgot = forgetter
        .forget(ForgetRequest::new(key, "alice", "moved to sqlite"))
        .await
        .expect("forget");
    assert_eq!(forgot.state, State::Forgotten);
    assert_eq!((forgot.version, forgot.forget_epoch), (v + 1, v + 1));
    assert!(!forgot.replayed);
    let tombstone = forgot
        .tombstone
        .clone()
        .expect("forget returns the tombstone");
    assert_eq!(
        (tombstone.version, tombstone.revision),
        (forgot.version, forgot.revision)
    );

    // 1.3 The writer's in-flight write, conditioned on what it read: version_conflict.
    let mut conditional = WriteRequest::new(key, json!(old_value), "summarizer");
    conditional.expected_version = Some(v);
    match writer.write(conditional).await {
        Err(ClientError::VersionConflict {
            current_version, ..
        }) => assert_eq!(current_version, Some(forgot.version)),
        other => panic!("a write at the pre-forget version must conflict: {other:?}"),
    }

    // 1.4 The same write without conditions, retried through every node (a retry queue, a
    // lagging replica): key_forgotten, carrying the tombstone.
    for id in cluster.ids() {
        let retry = cluster
            .client_for(id)
            .write(WriteRequest::new(key, json!(old_value), "retry-queue"))
            .await;
        match retry {
            Err(ClientError::KeyForgotten { tombstone: t, .. }) => {
                assert_eq!(t.as_deref(), Some(&tombstone), "via node {id}")
            }
            other => panic!("a plain write after forget (via node {id}): {other:?}"),
        }
    }

    // 1.5 Even a writer that always sends clear_tombstone is fenced off when it says what
    // its data is based on: the forget came after the revision it read.
    let mut fenced = WriteRequest::new(key, json!(old_value), "summarizer");
    fenced.clear_tombstone = true;
    fenced.based_on_revision = Some(seen.record.revision);
    let fenced = writer.write(fenced).await;
    assert!(
        matches!(fenced, Err(ClientError::StaleWrite { .. })),
        "{fenced:?}"
    );

    // 1.6 Every node reports the key forgotten and never the old value: linearizable via
    // each node (served by the leader), and locally at the forget's revision.
    for id in cluster.ids() {
        let client = cluster.client_for(id);
        for (how, options) in [
            ("linearizable", linearizable()),
            ("any", any_at(forgot.revision)),
        ] {
            let read = client
                .read(key, options)
                .await
                .unwrap_or_else(|e| panic!("{how} read via node {id}: {e}"));
            let context = format!("{how} read via node {id}: {read:?}");
            if how == "any" {
                assert_eq!(read.served.node_id, id, "{context}");
            } else {
                assert_eq!(read.served.role, "leader", "{context}");
            }
            assert!(read.served.applied_index >= forgot.revision, "{context}");
            let r = &read.record;
            assert_eq!(r.state, State::Forgotten, "{context}");
            assert_eq!(r.value, None, "{context}");
            assert_eq!(
                (r.version, r.forget_epoch),
                (forgot.version, forgot.version)
            );
            assert_eq!(r.tombstone.as_ref(), Some(&tombstone), "{context}");
            assert!(r.rendered.starts_with(&format!("[{key}] [FORGOTTEN]")));
            let whole = serde_json::to_string(&read).expect("serialize");
            assert!(!whole.contains(old_value), "old value leaked: {context}");
            // A listing of the prefix tells the same.
            let mut list = ListRequest::new("t60/facts/");
            list.consistency = options.consistency;
            list.min_revision = options.min_revision;
            let listed = client.list(list).await.expect("list");
            let whole = serde_json::to_string(&listed).expect("serialize");
            assert!(!whole.contains(old_value), "old value listed: {whole}");
            assert_eq!(listed.items.len(), 1, "{whole}");
            assert_eq!(listed.items[0].state, State::Forgotten, "{whole}");
        }
    }

    // 1.7 None of the refused writes left a trace.
    let (record, events) = key_snapshot(&cluster.client(), key).await;
    assert_eq!(record.version, forgot.version);
    assert_eq!(
        kinds(&events),
        [EventKind::Written, EventKind::Written, EventKind::Forgotten]
    );
}

// -- 2. forgotten with provenance -------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forget_keeps_exactly_one_tombstone_with_the_value_hash() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client();
    let key = "t60/user/profile";
    // Unsorted keys, nesting, every scalar kind: canonical form is easy to check by eye.
    let value = json!({
        "zeta": [3, {"b": true, "a": null}],
        "alpha": "x y",
        "mid": {"k2": -2, "k1": "v"},
    });
    let canonical_text =
        r#"{"alpha":"x y","mid":{"k1":"v","k2":-2},"zeta":[3,{"a":null,"b":true}]}"#;
    assert_eq!(
        canonical(&value),
        canonical_text,
        "the test's canonicalizer"
    );
    let value_hash = sha256_hex(canonical_text);

    // 2.1 Write, then forget: the tombstone carries sha256(canonical value) and provenance.
    let written = client
        .write(WriteRequest::new(key, value.clone(), "agent-a"))
        .await
        .expect("write");
    let before = now_ms();
    let forgot = client
        .forget(ForgetRequest::new(key, "dpo", "user asked for deletion"))
        .await
        .expect("forget");
    let after = now_ms();
    let tombstone = forgot.tombstone.clone().expect("a tombstone");
    assert_eq!(tombstone.value_hash.as_deref(), Some(value_hash.as_str()));
    assert_eq!(tombstone.key, key);
    assert_eq!(tombstone.actor, "dpo");
    assert_eq!(tombstone.reason, "user asked for deletion");
    assert_eq!(tombstone.version, written.version + 1);
    assert_eq!(tombstone.version, forgot.version);
    assert_eq!(tombstone.generation, 1);
    assert_eq!(tombstone.revision, forgot.revision);
    assert!(!tombstone.id.is_empty());
    // Leader-stamped wall time; the nodes run on this machine's clock.
    assert!(
        tombstone.forgotten_at + 1_000 >= before && tombstone.forgotten_at <= after + 1_000,
        "forgotten_at {} outside [{before}, {after}]",
        tombstone.forgotten_at
    );

    // 2.2 Readable by id: linearizable by default, and on each node at the forget's revision.
    let by_id = client
        .tombstone(&tombstone.id, linearizable())
        .await
        .expect("GET tombstone");
    assert_eq!(by_id, tombstone);
    for id in cluster.ids() {
        for query in [
            format!("?consistency=any&min_revision={}", forgot.revision),
            String::new(),
        ] {
            let url = format!(
                "{}/v1/tombstones/{}{query}",
                cluster.endpoint(id),
                tombstone.id
            );
            let (status, body) = raw(reqwest::Method::GET, &url, None).await;
            assert_eq!(status, 200, "{url}: {body}");
            let got: Tombstone = serde_json::from_value(body).expect("a tombstone");
            assert_eq!(got, tombstone, "{url}");
        }
        let local = cluster
            .client_for(id)
            .tombstone(&tombstone.id, any_at(forgot.revision))
            .await
            .expect("the client library's tombstone read with options");
        assert_eq!(local, tombstone, "node {id}");
    }
    // Hex is hex in either case: the id in capitals names the same tombstone.
    let upper = format!(
        "{}/v1/tombstones/{}",
        cluster.endpoint(1),
        tombstone.id.to_ascii_uppercase()
    );
    let (status, body) = raw(reqwest::Method::GET, &upper, None).await;
    assert_eq!(status, 200, "{upper}: {body}");
    let unknown = format!("{}/v1/tombstones/{}", cluster.endpoint(1), "ab".repeat(16));
    let (status, body) = raw(reqwest::Method::GET, &unknown, None).await;
    assert_eq!((status, error_code(&body)), (404, "not_found"), "{body}");
    // Anything but 1-128 hex characters is malformed, the empty id included.
    for bad in ["", "xyz", &"a".repeat(129)] {
        let url = format!("{}/v1/tombstones/{bad}", cluster.endpoint(1));
        let (status, body) = raw(reqwest::Method::GET, &url, None).await;
        assert_eq!(
            (status, error_code(&body), &body["error"]["field"]),
            (400, "invalid_request", &serde_json::json!("id")),
            "{url}: {body}"
        );
    }

    // 2.3 A second forget with another reason: the first tombstone, unchanged.
    let again = client
        .forget(ForgetRequest::new(key, "someone-else", "a different story"))
        .await
        .expect("second forget");
    assert_eq!(again.already, Some(true));
    assert!(!again.replayed, "a new request, not a replay");
    assert_eq!(again.tombstone.as_ref(), Some(&tombstone));
    assert_eq!(
        (again.state, again.version, again.forget_epoch),
        (State::Forgotten, forgot.version, forgot.version)
    );
    assert_eq!(
        client
            .tombstone(&tombstone.id, linearizable())
            .await
            .expect("GET"),
        tombstone
    );
    let read = client.read(key, linearizable()).await.expect("read");
    assert_eq!(read.record.tombstone.as_ref(), Some(&tombstone));
    assert_eq!(read.record.version, forgot.version);

    // 2.4 History: one written and exactly one forgotten event, hashes but no values.
    let events = client
        .history(key, linearizable())
        .await
        .expect("history")
        .events;
    assert_eq!(
        kinds(&events),
        [EventKind::Written, EventKind::Forgotten],
        "{events:#?}"
    );
    let (w, f) = (&events[0], &events[1]);
    assert_eq!(w.value_hash.as_deref(), Some(value_hash.as_str()));
    assert_eq!((w.version, w.revision), (written.version, written.revision));
    assert_eq!(f.actor, "dpo");
    assert_eq!(f.reason.as_deref(), Some("user asked for deletion"));
    assert_eq!((f.version, f.revision), (forgot.version, forgot.revision));
    assert_eq!(f.value_hash.as_deref(), Some(value_hash.as_str()));
    assert_eq!(f.at, tombstone.forgotten_at);
    let whole = serde_json::to_string(&events).expect("serialize");
    assert!(!whole.contains("x y"), "history holds no values: {whole}");

    // 2.5 A pre-emptive forget of a key never written: a tombstone without a hash.
    let pre = client
        .forget(ForgetRequest::new(
            "t60/user/never",
            "dpo",
            "never store this",
        ))
        .await
        .expect("pre-emptive forget");
    let pre_tombstone = pre.tombstone.expect("tombstone");
    assert_eq!((pre.state, pre.version), (State::Forgotten, 1));
    assert_eq!(pre_tombstone.value_hash, None);
}

// -- 3. half-reclaimed slots ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_clear_tombstone_reopens_a_forgotten_key_as_a_new_generation() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client();
    let key = "t60/slots/build-cmd";

    // 3.1 Active: value and retention records present.
    let written = client
        .write(WriteRequest::new(key, json!("make all"), "agent-a"))
        .await
        .expect("write");
    assert_eq!(
        (written.version, written.generation, written.forget_epoch),
        (1, 1, 0)
    );
    let active = Expect {
        state: State::Active,
        value_present: true,
        retention_present: true,
        version: 1,
        generation: 1,
        forget_epoch: 0,
        tombstone_id: None,
        value_revision: written.revision,
    };
    assert_probe_everywhere(&cluster, key, written.revision, &active, "active").await;

    // 3.2 Forgotten: the value record is gone, the retention record (tombstone) stays;
    // value_revision still names the entry that carried the value.
    let forgot = client
        .forget(ForgetRequest::new(key, "agent-b", "wrong build system"))
        .await
        .expect("forget");
    let tombstone = forgot.tombstone.clone().expect("tombstone");
    let forgotten = Expect {
        state: State::Forgotten,
        value_present: false,
        retention_present: true,
        version: 2,
        generation: 1,
        forget_epoch: 2,
        tombstone_id: Some(tombstone.id.clone()),
        value_revision: written.revision,
    };
    assert_probe_everywhere(&cluster, key, forgot.revision, &forgotten, "forgotten").await;

    // 3.3 A write without clear_tombstone is refused and changes nothing.
    let refused = client
        .write(WriteRequest::new(key, json!("make all"), "agent-a"))
        .await;
    assert!(
        matches!(&refused, Err(ClientError::KeyForgotten { tombstone: Some(t), .. }) if **t == tombstone),
        "{refused:?}"
    );
    assert_probe_everywhere(&cluster, key, forgot.revision, &forgotten, "refused").await;

    // 3.4 With clear_tombstone: a new generation, version keeps rising, epoch stays.
    let mut reopen = WriteRequest::new(key, json!("cargo build"), "agent-b");
    reopen.clear_tombstone = true;
    reopen.reason = Some("verified: the build uses cargo".into());
    let reopened = client
        .write(reopen)
        .await
        .expect("write with clear_tombstone");
    assert_eq!(reopened.state, State::Active);
    assert_eq!(reopened.generation, forgot.generation + 1);
    assert_eq!(reopened.version, forgot.version + 1);
    assert_eq!(reopened.forget_epoch, forgot.version);
    let recreated = Expect {
        state: State::Active,
        value_present: true,
        retention_present: true,
        version: 3,
        generation: 2,
        forget_epoch: 2,
        tombstone_id: None,
        value_revision: reopened.revision,
    };
    assert_probe_everywhere(&cluster, key, reopened.revision, &recreated, "re-created").await;
    let read = client.read(key, linearizable()).await.expect("read");
    assert_eq!(read.record.value, Some(json!("cargo build")));
    assert_eq!(read.record.create_revision, reopened.revision);
    assert_eq!(read.record.tombstone, None);
    // Tombstones are kept forever, also after their key is re-created.
    assert_eq!(
        client
            .tombstone(&tombstone.id, linearizable())
            .await
            .expect("GET"),
        tombstone
    );

    // 3.5 Later writes of the new generation are plain writes; nothing sweeps them.
    let later = client
        .write(WriteRequest::new(
            key,
            json!("cargo build --release"),
            "agent-c",
        ))
        .await
        .expect("later write");
    assert_eq!(
        (later.version, later.generation, later.forget_epoch),
        (4, 2, 2)
    );
    let events = client
        .history(key, linearizable())
        .await
        .expect("history")
        .events;
    assert_eq!(
        kinds(&events),
        [
            EventKind::Written,
            EventKind::Forgotten,
            EventKind::TombstoneCleared,
            EventKind::Written
        ]
    );
    let versions: Vec<u64> = events.iter().map(|e| e.version).collect();
    assert_eq!(versions, [1, 2, 3, 4]);
    assert_eq!(
        events[2].reason.as_deref(),
        Some("verified: the build uses cargo")
    );
    assert!(events.windows(2).all(|w| w[0].revision < w[1].revision));
}

// -- 4. deletion keeps the trap: revoke, deliver the deterrent, reinstate ----------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_belief_is_recalled_as_a_deterrent_and_can_be_reinstated() {
    let cluster = Cluster::start(3).await;
    let client = cluster.client();
    let key = "t60/beliefs/client-retry";
    let belief = "the client retries 409s";
    let reason = "409 is a definite answer; retrying it double-applies";

    // 4.1 The belief, anchored to a file; an unrelated note under docs/.
    let mut write = WriteRequest::new(key, json!(belief), "agent-a");
    write.anchors = Some(vec![
        "path:src/api/client.rs".into(),
        "topic:retries".into(),
    ]);
    let written = client.write(write).await.expect("write belief");
    let mut docs = WriteRequest::new("t60/beliefs/docs", json!("docs are markdown"), "agent-a");
    docs.anchors = Some(vec!["path:docs/readme.md".into()]);
    client.write(docs).await.expect("write docs note");

    // 4.2 Revoked with a reason: the value is kept, rendered as a warning.
    let revoked = client
        .revoke(RevokeRequest::new(key, "reviewer", reason))
        .await
        .expect("revoke");
    assert_eq!(
        (revoked.state, revoked.version),
        (State::Revoked, written.version + 1)
    );
    // A later, active note on the same file: the revoked one must still rank first.
    let mut fresh = WriteRequest::new("t60/beliefs/zz-fresh", json!("client.rs has tests"), "x");
    fresh.anchors = Some(vec!["path:src/api/client.rs".into()]);
    client.write(fresh).await.expect("write fresh note");

    let read = client
        .read(key, linearizable())
        .await
        .expect("read revoked");
    let r = &read.record;
    assert_eq!(r.state, State::Revoked);
    assert_eq!(r.value, Some(json!(belief)), "a revoked belief is kept");
    let revocation = r.revocation.as_ref().expect("revocation");
    assert_eq!(
        (revocation.actor.as_str(), revocation.reason.as_str()),
        ("reviewer", reason)
    );
    assert_eq!(revocation.version, revoked.version);
    let deterrent_start = format!("[{key}] [REVOKED] Previously believed: {belief}. Revoked ");
    let deterrent_end = format!(" by reviewer: {reason}. Do not re-derive without verification.");
    assert!(
        r.rendered.starts_with(&deterrent_start) && r.rendered.ends_with(&deterrent_end),
        "{}",
        r.rendered
    );
    let deterrent = r.rendered.clone();

    // 4.3 Recall by the file and by its directory delivers the deterrent, first.
    for cue in ["path:src/api/client.rs", "path:src/api/"] {
        let recalled = client
            .recall(RecallRequest::new(vec![cue.into()]))
            .await
            .unwrap_or_else(|e| panic!("recall {cue}: {e}"));
        let keys: Vec<&str> = recalled.notes.iter().map(|n| n.key.as_str()).collect();
        assert_eq!(
            keys,
            [key, "t60/beliefs/zz-fresh"],
            "cue {cue}: revoked first, docs note absent"
        );
        let note = &recalled.notes[0];
        assert_eq!(note.state, State::Revoked, "cue {cue}");
        assert_eq!(note.rendered, deterrent, "cue {cue}");
        assert_eq!(note.matched, [cue], "cue {cue}");
        assert_eq!(note.version, revoked.version);
    }
    // 4.4 An unrelated cue does not return it (but does return what it anchors).
    let docs = client
        .recall(RecallRequest::new(vec!["path:docs/".into()]))
        .await
        .expect("recall docs");
    let keys: Vec<&str> = docs.notes.iter().map(|n| n.key.as_str()).collect();
    assert_eq!(keys, ["t60/beliefs/docs"]);

    // 4.5 Re-deriving it with a plain write is refused, with the reason and the warning.
    let rederived = client
        .write(WriteRequest::new(key, json!(belief), "agent-c"))
        .await;
    match rederived {
        Err(ClientError::KeyRevoked {
            revocation,
            rendered,
            ..
        }) => {
            let revocation = revocation.expect("the revocation in the error");
            assert_eq!(revocation.reason, reason);
            assert_eq!(rendered.as_deref(), Some(deterrent.as_str()));
        }
        other => panic!("a plain write of a revoked key: {other:?}"),
    }

    // 4.6 Reinstate: back to active, the plain note again.
    let mut reinstate = ReinstateRequest::new(key, "agent-b");
    reinstate.reason = Some("re-checked: only 503s are retried".into());
    let reinstated = client.reinstate(reinstate).await.expect("reinstate");
    assert_eq!(
        (reinstated.state, reinstated.version),
        (State::Active, revoked.version + 1)
    );
    let read = client.read(key, linearizable()).await.expect("read");
    assert_eq!(read.record.rendered, format!("[{key}] {belief}"));
    assert_eq!(read.record.revocation, None);
    let recalled = client
        .recall(RecallRequest::new(vec!["path:src/api/".into()]))
        .await
        .expect("recall");
    let note = recalled
        .notes
        .iter()
        .find(|n| n.key == key)
        .expect("recalled");
    assert_eq!(
        (note.state, note.rendered.as_str()),
        (State::Active, read.record.rendered.as_str())
    );

    // 4.7 History: written, revoked, reinstated, with actors and reasons, in order.
    let events = client
        .history(key, linearizable())
        .await
        .expect("history")
        .events;
    let summary: Vec<(EventKind, &str, Option<&str>, u64)> = events
        .iter()
        .map(|e| (e.kind, e.actor.as_str(), e.reason.as_deref(), e.version))
        .collect();
    assert_eq!(
        summary,
        [
            (EventKind::Written, "agent-a", None, 1),
            (EventKind::Revoked, "reviewer", Some(reason), 2),
            (
                EventKind::Reinstated,
                "agent-b",
                Some("re-checked: only 503s are retried"),
                3
            ),
        ]
    );
    assert!(events.windows(2).all(|w| w[0].revision < w[1].revision));

    // 4.8 override_revocation is the other explicit way back.
    client
        .revoke(RevokeRequest::new(key, "reviewer", reason))
        .await
        .expect("revoke again");
    let mut overriding = WriteRequest::new(key, json!("only 503s are retried"), "agent-c");
    overriding.override_revocation = true;
    overriding.reason = Some("corrected belief".into());
    let overridden = client.write(overriding).await.expect("override");
    assert_eq!((overridden.state, overridden.version), (State::Active, 5));
}

// -- 5. physical erasure ----------------------------------------------------------------------

/// A value to erase, and pieces of it that a scan of the data files looks for.
struct Secret {
    value: Value,
    /// Documents of the same size written to other keys after it, so that the memtables
    /// holding it are flushed while it is live (RocksDB's write buffer is 8 MiB): its
    /// bytes are then in SST or blob files, not only in the WAL and memory.
    fillers: usize,
    /// Each is unique to this value. A large value is stored in many RocksDB blocks (and,
    /// with `blob_min_bytes`, in a blob file), so several pieces are sought, not one.
    needles: Vec<String>,
}

impl Secret {
    /// A small record with a random marker: stored inline in the `slots` family.
    fn small() -> Secret {
        let marker = hex::encode(rand::random::<[u8; 16]>());
        Secret {
            value: json!({"ssn": format!("secret-{marker}")}),
            fillers: 0,
            needles: vec![marker],
        }
    }

    /// A document of `bytes` random base64 (so no compression rewrites it), big enough to
    /// live in blob files: sought as 8 pieces of 32 characters spread over it.
    fn document(bytes: usize) -> Secret {
        use base64::Engine as _;
        let random: Vec<u8> = (0..bytes * 3 / 4).map(|_| rand::random::<u8>()).collect();
        let text = base64::engine::general_purpose::STANDARD.encode(random);
        let needles = (0..8)
            .map(|i| text[i * text.len() / 8..][..32].to_string())
            .collect();
        Secret {
            value: json!({"document": text}),
            fillers: (10 << 20) / bytes,
            needles,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compaction_erases_a_forgotten_value_from_every_data_dir() {
    forget_compact_and_scan(Secret::small()).await;
}

/// The same for a 64 KiB document: its bytes were in a blob file (its slot's, besides the
/// log's files) and are gone from it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compaction_erases_a_forgotten_64_kib_document_from_every_data_dir() {
    forget_compact_and_scan(Secret::document(64 << 10)).await;
}

async fn forget_compact_and_scan(secret: Secret) {
    let cluster = Cluster::start(3).await;
    let client = cluster.client();
    let key = "t60/pii/ssn";
    let needles = &secret.needles;

    // 5.1 Written and replicated: the scan finds the value on every node.
    let written = client
        .write(WriteRequest::new(key, secret.value.clone(), "agent-a"))
        .await
        .expect("write");
    let mut last = written.revision;
    for i in 0..secret.fillers {
        let filler = Secret::document(secret.value.to_string().len());
        let request = WriteRequest::new(format!("t60/filler/{i}"), filler.value, "agent-a");
        last = client.write(request).await.expect("filler").revision;
    }
    for id in cluster.ids() {
        cluster.wait_applied(id, last, CATCH_UP_TIMEOUT).await;
        let in_log = |f: &PathBuf| f.extension().is_some_and(|e| e == "seg");
        let (found, _, _) = files_containing(&cluster.data_dir(id), needles);
        assert!(
            found.iter().any(in_log),
            "node {id}: the value is in no log segment: {found:#?}"
        );
        // A snapshot that holds the value: the forget's compaction must delete it too.
        // Its purge already erases the write's entry from the log's segment files.
        client
            .compact(&cluster.endpoint(id))
            .await
            .unwrap_or_else(|e| panic!("compact node {id} before the forget: {e}"));
        let (found, files, _) = files_containing(&cluster.data_dir(id), needles);
        assert!(
            !found.iter().any(in_log),
            "node {id}: the purged entry is still in a log segment: {found:#?}"
        );
        let in_snapshot = |f: &PathBuf| f.extension().is_some_and(|e| e == "snap");
        assert!(
            found.iter().any(in_snapshot),
            "node {id}: the value is in no snapshot file: {found:#?}"
        );
        if secret.fillers > 0 {
            let in_blob = |f: &PathBuf| f.extension().is_some_and(|e| e == "blob");
            assert!(
                found.iter().any(in_blob),
                "node {id}: the document is in no blob file: {found:#?}"
            );
        }
        assert!(
            !found.is_empty(),
            "node {id}: the scan of {files} files does not find a value just written"
        );
    }

    // 5.2 Forget, and compact every node once it has applied the forget.
    let forgot = client
        .forget(ForgetRequest::new(key, "dpo", "erasure request"))
        .await
        .expect("forget");
    for id in cluster.ids() {
        cluster
            .wait_applied(id, forgot.revision, CATCH_UP_TIMEOUT)
            .await;
    }
    for id in cluster.ids() {
        let compacted = client
            .compact(&cluster.endpoint(id))
            .await
            .unwrap_or_else(|e| panic!("compact node {id}: {e}"));
        assert!(
            compacted.snapshot_index >= forgot.revision,
            "node {id}: {compacted:?}"
        );
        assert!(
            compacted.log_purged_through >= written.revision,
            "node {id}: {compacted:?}"
        );
    }

    // 5.3 No file of any node holds the value any more; the tombstone is still served.
    for id in cluster.ids() {
        let data_dir = cluster.data_dir(id);
        let (found, files, bytes) = files_containing(&data_dir, needles);
        assert!(files > 0 && bytes > 0, "node {id}: nothing scanned");
        assert!(
            found.is_empty(),
            "node {id}: the forgotten value is still on disk in {found:#?}"
        );
    }
    // Nor did the value ever reach a node's own log output.
    for id in cluster.ids() {
        let log = cluster.log_text(id);
        assert!(
            !needles.iter().any(|needle| log.contains(needle)),
            "node {id} logged the value"
        );
    }
    let forgotten = Expect {
        state: State::Forgotten,
        value_present: false,
        retention_present: true,
        version: forgot.version,
        generation: 1,
        forget_epoch: forgot.version,
        tombstone_id: forgot.tombstone.as_ref().map(|t| t.id.clone()),
        value_revision: written.revision,
    };
    let probes =
        assert_probe_everywhere(&cluster, key, forgot.revision, &forgotten, "compacted").await;
    for probe in probes {
        assert!(
            probe.log_purged_through >= probe.value_revision,
            "node {}: the log still holds the value's entry: {probe:?}",
            probe.served.node_id
        );
    }

    // 5.4 The cluster goes on: writes after compaction replicate and apply everywhere.
    let after = client
        .write(WriteRequest::new("t60/pii/after", json!(1), "agent-a"))
        .await
        .expect("write after compaction");
    for id in cluster.ids() {
        cluster
            .wait_applied(id, after.revision, CATCH_UP_TIMEOUT)
            .await;
        let read = cluster
            .client_for(id)
            .read("t60/pii/after", any_at(after.revision))
            .await
            .expect("read after compaction");
        assert_eq!(read.record.value, Some(json!(1)));
    }
}

// -- 6. exactly-once retries ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_id_applies_once_whichever_node_receives_it() {
    let cluster = Cluster::start(3).await;
    let (leader, followers) = roles(&cluster).await;
    let key = "t60/retries/counter";
    let request_id = new_request_id();
    let mut request = WriteRequest::new(key, json!({"n": 1}), "agent-a");
    request.request_id = Some(request_id.clone());

    // 6.1 The same request through a follower, the leader and the other follower.
    let first = cluster
        .client_for(followers[0])
        .write(request.clone())
        .await
        .expect("first send");
    assert!(!first.replayed);
    assert_eq!(first.version, 1);
    for id in [leader, followers[1], followers[0]] {
        let again = cluster
            .client_for(id)
            .write(request.clone())
            .await
            .unwrap_or_else(|e| panic!("resend via node {id}: {e}"));
        assert!(again.replayed, "resend via node {id}: {again:?}");
        assert_eq!(
            (again.version, again.revision, again.generation),
            (first.version, first.revision, first.generation),
            "resend via node {id} answers the original result"
        );
    }
    let (record, events) = key_snapshot(&cluster.client(), key).await;
    assert_eq!(record.version, 1);
    assert_eq!(kinds(&events), [EventKind::Written], "applied once");

    // 6.2 A replay after the key moved on returns the original answer and applies nothing.
    let second = cluster
        .client()
        .write(WriteRequest::new(key, json!({"n": 2}), "agent-a"))
        .await
        .expect("a later write");
    assert_eq!(second.version, 2);
    let late = cluster
        .client_for(followers[1])
        .write(request.clone())
        .await
        .expect("late replay");
    assert!(late.replayed);
    assert_eq!(
        (late.version, late.revision),
        (first.version, first.revision)
    );
    let (record, events) = key_snapshot(&cluster.client(), key).await;
    assert_eq!(
        (record.version, &record.value),
        (2, &Some(json!({"n": 2}))),
        "the replay did not re-apply the old value"
    );
    assert_eq!(events.len(), 2);

    // 6.3 The same id with another payload, or for another operation: 422, nothing applied.
    let mut changed = request.clone();
    changed.value = json!({"n": 3});
    let reused = cluster.client_for(followers[0]).write(changed).await;
    assert!(
        matches!(&reused, Err(ClientError::RequestIdReused { request_id: id, .. }) if id.as_deref() == Some(request_id.as_str())),
        "{reused:?}"
    );
    let mut forget = ForgetRequest::new(key, "agent-a", "reusing an id");
    forget.request_id = Some(request_id.clone());
    let reused = cluster.client_for(leader).forget(forget).await;
    assert!(
        matches!(reused, Err(ClientError::RequestIdReused { .. })),
        "{reused:?}"
    );
    let (after, after_events) = key_snapshot(&cluster.client(), key).await;
    assert_eq!((after, after_events), (record, events));

    // 6.4 A forget retried through two nodes: one tombstone, one event.
    let forget_id = new_request_id();
    let mut forget = ForgetRequest::new(key, "agent-b", "obsolete");
    forget.request_id = Some(forget_id);
    let a = cluster
        .client_for(followers[1])
        .forget(forget.clone())
        .await
        .expect("forget");
    let b = cluster
        .client_for(leader)
        .forget(forget)
        .await
        .expect("retry");
    assert!(!a.replayed && b.replayed, "{a:?} / {b:?}");
    assert_eq!(a.tombstone, b.tombstone);
    assert_eq!(b.already, a.already, "a replay is the original answer");
    let events = cluster
        .client()
        .history(key, linearizable())
        .await
        .expect("history")
        .events;
    assert_eq!(
        kinds(&events),
        [EventKind::Written, EventKind::Written, EventKind::Forgotten]
    );

    // 6.5 A rejection is the request's answer too. A write without clear_tombstone is
    // rejected (the key is forgotten); the key is then reopened; the same request arriving
    // again (a retry, or an earlier attempt delayed in a relay) gets the original 409,
    // marked replayed, and does not land on the reopened key.
    let mut late = WriteRequest::new(key, json!({"n": "stale"}), "agent-late");
    late.request_id = Some(new_request_id());
    let first = cluster.client_for(followers[0]).write(late.clone()).await;
    assert!(
        matches!(first, Err(ClientError::KeyForgotten { .. })),
        "{first:?}"
    );
    let mut reopen = WriteRequest::new(key, json!({"n": 4}), "agent-b");
    reopen.clear_tombstone = true;
    cluster
        .client_for(leader)
        .write(reopen)
        .await
        .expect("reopen");
    let before = key_snapshot(&cluster.client(), key).await;
    let body = serde_json::to_string(&late).unwrap();
    let (status, answer) = post_raw(&cluster, followers[1], "/v1/write", &body).await;
    assert_eq!(
        (status, error_code(&answer)),
        (409, "key_forgotten"),
        "{answer}"
    );
    assert_eq!(answer["error"]["replayed"], json!(true), "{answer}");
    let after = key_snapshot(&cluster.client(), key).await;
    assert_eq!(after, before, "the stale write did not land");
}

// -- 7. batches -------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_with_a_failing_op_applies_nothing_and_names_it() {
    let cluster = Cluster::start(3).await;
    let (_, followers) = roles(&cluster).await;
    let client = cluster.client();
    let (a, b, c) = ("t60/batch/a", "t60/batch/b", "t60/batch/c");
    client
        .write(WriteRequest::new(a, json!("a1"), "agent"))
        .await
        .expect("write a");
    client
        .write(WriteRequest::new(b, json!("b1"), "agent"))
        .await
        .expect("write b");
    let before_a = key_snapshot(&client, a).await;
    let before_b = key_snapshot(&client, b).await;

    // 7.1 Op 2 is a write at a wrong expected_version: 409 version_conflict, op_index 2.
    let mut stale = WriteRequest::new(a, json!("a-stale"), "agent");
    stale.expected_version = Some(7);
    let batch = BatchRequest {
        ops: vec![
            BatchOp::Write(WriteRequest::new(a, json!("a2"), "agent")),
            BatchOp::Forget(ForgetRequest::new(b, "agent", "cleanup")),
            BatchOp::Write(stale),
        ],
        request_id: None,
    };
    match cluster.client_for(followers[0]).batch(batch).await {
        Err(ClientError::VersionConflict {
            op_index,
            current_version,
            message,
            ..
        }) => {
            assert_eq!(op_index, Some(2));
            // Evaluated after op 0, which changed the key first: the batch applied
            // nothing, so no version it would have made is reported, only op 0.
            assert_eq!(current_version, None, "{message}");
            assert!(message.contains("op 0 of this batch"), "{message}");
        }
        other => panic!("a batch with a conflicting op 2: {other:?}"),
    }

    // 7.2 Op 2 is a revoke of an absent key (404 alone): the batch is 409
    // `invalid_transition` (SPEC §5), naming op_index 2 and its key.
    let body = json!({"ops": [
        {"op": "write", "key": a, "value": "a2", "actor": "agent"},
        {"op": "forget", "key": b, "actor": "agent", "reason": "cleanup"},
        {"op": "revoke", "key": c, "actor": "agent", "reason": "never existed"},
    ]});
    let (status, answer) = post_raw(&cluster, followers[1], "/v1/batch", &body.to_string()).await;
    assert_eq!(
        (status, error_code(&answer)),
        (409, "invalid_transition"),
        "{answer}"
    );
    assert_eq!(answer["error"]["op_index"], json!(2), "{answer}");
    assert_eq!(answer["error"]["key"], json!(c), "{answer}");

    // 7.3 Nothing of ops 0..2 was applied, and op 2's key was not created.
    assert_eq!(key_snapshot(&client, a).await, before_a);
    assert_eq!(key_snapshot(&client, b).await, before_b);
    let absent = client.read(c, linearizable()).await;
    assert!(
        matches!(
            &absent,
            Err(ClientError::NotFound { served: Some(served), .. })
                if served.consistency == Consistency::Linearizable
        ),
        "{absent:?}"
    );
    let probe = client.probe(c, linearizable()).await.expect("probe c");
    assert_eq!(
        (probe.state, probe.retention_present),
        (State::Absent, false)
    );
    // The absence is reported with the `served` of the read that found it: a follower's
    // 404 says how old its applied state is.
    for path in ["/v1/read", "/v1/history"] {
        let body = json!({"key": c, "consistency": "bounded", "max_staleness_ms": 5000});
        let (status, answer) = post_raw(&cluster, followers[1], path, &body.to_string()).await;
        assert_eq!(
            (status, error_code(&answer)),
            (404, "not_found"),
            "{path}: {answer}"
        );
        let served = &answer["error"]["served"];
        assert_eq!(
            (&served["node_id"], &served["role"], &served["consistency"]),
            (&json!(followers[1]), &json!("follower"), &json!("bounded")),
            "{path}: {answer}"
        );
        assert!(
            served["applied_index"].as_u64().is_some_and(|i| i > 0),
            "{path}: {answer}"
        );
    }

    // 7.4 The same ops, all valid: applied together, in one entry.
    let ok = client
        .batch(BatchRequest {
            ops: vec![
                BatchOp::Write(WriteRequest::new(a, json!("a2"), "agent")),
                BatchOp::Forget(ForgetRequest::new(b, "agent", "cleanup")),
                BatchOp::Write(WriteRequest::new(c, json!("c1"), "agent")),
            ],
            request_id: None,
        })
        .await
        .expect("valid batch");
    assert!(!ok.replayed);
    let summary: Vec<(&str, State, u64, u64)> = ok
        .results
        .iter()
        .map(|r| (r.key.as_str(), r.state, r.version, r.revision))
        .collect();
    assert_eq!(
        summary,
        [
            (a, State::Active, 2, ok.revision),
            (b, State::Forgotten, 2, ok.revision),
            (c, State::Active, 1, ok.revision),
        ]
    );
}

// -- 8. bad input -----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_rejected_before_the_log_and_changes_nothing() {
    let cluster = Cluster::start(3).await;
    let (leader, followers) = roles(&cluster).await;
    let client = cluster.client();
    let key = "t60/input/limit";
    client
        .write(WriteRequest::new(key, json!(100), "agent"))
        .await
        .expect("write");
    let before = key_snapshot(&client, key).await;
    let status_before = cluster.status(leader).await.expect("status");

    let big = "x".repeat((1 << 20) + 16);
    let cases: Vec<(&str, &str, String, u16, &str)> = vec![
        (
            "unknown field (typo of expected_version)",
            "/v1/write",
            json!({"key": key, "value": 1, "actor": "a", "expected_vesion": 1}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "key with a control character",
            "/v1/write",
            json!({"key": format!("{key}\u{7}"), "value": 1, "actor": "a"}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "key with a newline",
            "/v1/write",
            json!({"key": format!("{key}\n"), "value": 1, "actor": "a"}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "value over 1 MiB",
            "/v1/write",
            json!({"key": key, "value": big, "actor": "a"}).to_string(),
            413,
            "too_large",
        ),
        (
            "forget without a reason",
            "/v1/forget",
            json!({"key": key, "actor": "a"}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "forget with an empty reason",
            "/v1/forget",
            json!({"key": key, "actor": "a", "reason": ""}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "revoke without a reason",
            "/v1/revoke",
            json!({"key": key, "actor": "a"}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "empty actor",
            "/v1/write",
            json!({"key": key, "value": 1, "actor": ""}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "empty key",
            "/v1/write",
            json!({"key": "", "value": 1, "actor": "a"}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "not JSON",
            "/v1/write",
            format!("{{\"key\": \"{key}\", \"value\": "),
            400,
            "invalid_request",
        ),
        (
            "a typo inside a batch op",
            "/v1/batch",
            json!({"ops": [
                {"op": "write", "key": key, "value": 1, "actor": "a"},
                {"op": "forget", "key": key, "actor": "a", "reason": "r", "expected_vesion": 2},
            ]})
            .to_string(),
            400,
            "invalid_request",
        ),
    ];
    for (what, path, body, status, code) in cases {
        // Sent to a follower and to the leader: both validate before relaying or proposing.
        for id in [followers[0], leader] {
            let (got_status, answer) = post_raw(&cluster, id, path, &body).await;
            assert_eq!(
                (got_status, error_code(&answer)),
                (status, code),
                "{what} via node {id}: {answer}"
            );
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "{what}: {answer}"
            );
            assert_eq!(
                key_snapshot(&client, key).await,
                before,
                "{what} via node {id}"
            );
        }
    }
    // The typo is named, so the caller can fix it.
    let (_, answer) = post_raw(
        &cluster,
        leader,
        "/v1/write",
        &json!({"key": key, "value": 1, "actor": "a", "expected_vesion": 1}).to_string(),
    )
    .await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("expected_vesion"), "{answer}");

    // Through the client library too: 413 and 400 come back typed.
    let too_big = client
        .write(WriteRequest::new(key, json!(big), "agent"))
        .await;
    assert!(
        matches!(too_big, Err(ClientError::TooLarge { .. })),
        "{too_big:?}"
    );
    let no_reason = client.forget(ForgetRequest::new(key, "agent", "")).await;
    assert!(
        matches!(no_reason, Err(ClientError::InvalidRequest { .. })),
        "{no_reason:?}"
    );

    // Nothing reached the log.
    assert_log_unchanged(&cluster, leader, &status_before).await;

    // The limit is inclusive: a value of exactly 1 MiB as JSON is stored and read back
    // whole; one byte more is 413.
    let limit = 1 << 20;
    let exact = json!("y".repeat(limit - 2));
    assert_eq!(canonical(&exact).len(), limit);
    let stored = client
        .write(WriteRequest::new("t60/input/exact", exact.clone(), "agent"))
        .await
        .expect("a value of exactly 1 MiB");
    let read = client
        .read("t60/input/exact", any_at(stored.revision))
        .await
        .expect("read 1 MiB");
    assert_eq!(read.record.value, Some(exact));
    let over = client
        .write(WriteRequest::new(
            "t60/input/over",
            json!("y".repeat(limit - 1)),
            "agent",
        ))
        .await;
    assert!(
        matches!(over, Err(ClientError::TooLarge { .. })),
        "{over:?}"
    );
    let status_before = cluster.status(leader).await.expect("status");
    for id in [followers[0], leader] {
        let (status, answer) = post_raw(
            &cluster,
            id,
            "/v1/write",
            &json!({"key": key, "value": big, "actor": "a"}).to_string(),
        )
        .await;
        assert_eq!(
            (status, error_code(&answer)),
            (413, "too_large"),
            "{answer}"
        );
    }

    assert_eq!(key_snapshot(&client, key).await, before);
    assert_log_unchanged(&cluster, leader, &status_before).await;
}

/// The leader's log did not grow since `before` (unless an election appended its blank
/// entry meanwhile, which the test cannot prevent on a loaded machine).
async fn assert_log_unchanged(cluster: &Cluster, leader: u64, before: &ClusterStatus) {
    let after = cluster.status(leader).await.expect("status");
    if after.term == before.term && after.role == "leader" {
        assert_eq!(
            after.last_log_index, before.last_log_index,
            "rejected input was appended to the log"
        );
    } else {
        eprintln!("leadership changed during the test; log growth not checked");
    }
}

// -- 9. based_on_revision fences for ever (SPEC §2 Conditions) --------------------------------

/// One mutation through `id`, raw: the status and the body.
async fn mutate(cluster: &Cluster, id: u64, op: &str, body: Value) -> (u16, Value) {
    post_raw(cluster, id, &format!("/v1/{op}"), &body.to_string()).await
}

/// A mutation that must apply: its revision.
async fn applied(cluster: &Cluster, id: u64, op: &str, body: Value) -> u64 {
    let (status, answer) = mutate(cluster, id, op, body.clone()).await;
    assert_eq!(status, 200, "{op} {body}: {answer}");
    answer["revision"].as_u64().expect("revision")
}

/// A mutation that must be refused with 409 `stale_write` naming `fence`.
async fn fenced(cluster: &Cluster, id: u64, op: &str, body: Value, fence: u64) {
    let (status, answer) = mutate(cluster, id, op, body.clone()).await;
    assert_eq!(
        (status, error_code(&answer)),
        (409, "stale_write"),
        "{op} {body}: {answer}"
    );
    assert_eq!(
        answer["error"]["based_on_revision"], body["based_on_revision"],
        "{answer}"
    );
    assert_eq!(answer["error"]["fence_revision"], fence, "{answer}");
}

/// A key revoked at revision R fences every `based_on_revision` < R, also once the revoke
/// is lifted by reinstate or by an `override_revocation` write, as a forget and a
/// re-creation do; data based on R or later passes. (An audit found that a lifted revoke
/// stopped fencing: write 52, revoke 53, override 54, write based on 52 → 200.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lifted_revoke_still_fences_data_older_than_it() {
    let cluster = Cluster::start(3).await;
    let (leader, followers) = roles(&cluster).await;
    let nodes = [leader, followers[0], followers[1]];
    let write = |key: &str, value: &str| json!({"key": key, "value": value, "actor": "w"});
    let based = |mut body: Value, revision: u64| {
        body["based_on_revision"] = json!(revision);
        body
    };

    // 9.1 revoke → reinstate.
    let key = "t60/fence/reinstated";
    let written = applied(&cluster, nodes[0], "write", write(key, "v1")).await;
    let revoke = json!({"key": key, "actor": "judge", "reason": "wrong"});
    let revoked = applied(&cluster, nodes[1], "revoke", revoke.clone()).await;
    let reinstate = json!({"key": key, "actor": "judge"});
    let reinstated = applied(&cluster, nodes[2], "reinstate", reinstate.clone()).await;
    assert!(written < revoked && revoked < reinstated);
    let before = key_snapshot(&cluster.client(), key).await;
    let forget = json!({"key": key, "actor": "gdpr", "reason": "erase"});
    let supersede = json!({"key": key, "by": "t60/fence/other", "actor": "editor"});
    for id in nodes {
        let old = write(key, "old");
        fenced(&cluster, id, "write", based(old, written), revoked).await;
        fenced(
            &cluster,
            id,
            "forget",
            based(forget.clone(), revoked - 1),
            revoked,
        )
        .await;
        fenced(
            &cluster,
            id,
            "revoke",
            based(revoke.clone(), written),
            revoked,
        )
        .await;
        fenced(
            &cluster,
            id,
            "reinstate",
            based(reinstate.clone(), written),
            revoked,
        )
        .await;
        fenced(
            &cluster,
            id,
            "supersede",
            based(supersede.clone(), written),
            revoked,
        )
        .await;
    }
    assert_eq!(
        key_snapshot(&cluster.client(), key).await,
        before,
        "refusals change nothing"
    );
    // Data as of the revoke, or the reinstate, is not stale.
    applied(
        &cluster,
        nodes[1],
        "write",
        based(write(key, "v2"), revoked),
    )
    .await;
    applied(
        &cluster,
        nodes[2],
        "write",
        based(write(key, "v3"), reinstated),
    )
    .await;

    // 9.2 revoke → write with override_revocation (the audit's case).
    let key = "t60/fence/overridden";
    let written = applied(&cluster, nodes[0], "write", write(key, "v1")).await;
    let revoked = applied(
        &cluster,
        nodes[0],
        "revoke",
        json!({"key": key, "actor": "judge", "reason": "wrong"}),
    )
    .await;
    let mut over = write(key, "v2");
    over["override_revocation"] = json!(true);
    let overridden = applied(&cluster, nodes[1], "write", over).await;
    for id in nodes {
        fenced(
            &cluster,
            id,
            "write",
            based(write(key, "old"), written),
            revoked,
        )
        .await;
    }
    // A plain write later does not lift the fence either.
    let later = applied(
        &cluster,
        nodes[2],
        "write",
        based(write(key, "v3"), overridden),
    )
    .await;
    fenced(
        &cluster,
        nodes[2],
        "write",
        based(write(key, "old"), written),
        revoked,
    )
    .await;
    applied(
        &cluster,
        nodes[0],
        "write",
        based(write(key, "v4"), revoked),
    )
    .await;
    assert!(later > overridden);

    // 9.3 forget → re-creation with clear_tombstone: the re-creation is the fence.
    let key = "t60/fence/re-created";
    let written = applied(&cluster, nodes[0], "write", write(key, "v1")).await;
    let forgot = applied(
        &cluster,
        nodes[1],
        "forget",
        json!({"key": key, "actor": "gdpr", "reason": "erase"}),
    )
    .await;
    for (based_on, fence) in [(written, forgot), (forgot - 1, forgot)] {
        let mut clear = based(write(key, "old"), based_on);
        clear["clear_tombstone"] = json!(true);
        fenced(&cluster, nodes[2], "write", clear, fence).await;
    }
    let mut clear = based(write(key, "v2"), forgot);
    clear["clear_tombstone"] = json!(true);
    let recreated = applied(&cluster, nodes[2], "write", clear).await;
    for id in nodes {
        for based_on in [written, forgot, recreated - 1] {
            fenced(
                &cluster,
                id,
                "write",
                based(write(key, "old"), based_on),
                recreated,
            )
            .await;
        }
    }
    applied(
        &cluster,
        nodes[0],
        "write",
        based(write(key, "v3"), recreated),
    )
    .await;
}

// -- 10. History events carry the given reason verbatim (SPEC §2) ------------------------------

/// The events of `key` as node `id` holds them once it applied `revision` (an `any` read
/// of `POST /v1/history`), raw JSON.
async fn history_json(cluster: &Cluster, id: u64, key: &str, revision: u64) -> Vec<Value> {
    let body = json!({"key": key, "consistency": "any", "min_revision": revision});
    let (status, answer) = post_raw(cluster, id, "/v1/history", &body.to_string()).await;
    assert_eq!(status, 200, "history {key}: {answer}");
    answer["events"].as_array().expect("events").clone()
}

/// A supersede's event has the given reason, verbatim (none when none is given), and names
/// the replacing key in `by`; a stale flag's event has no reason (the request takes none)
/// and names the anchor and observed hash. (An audit found both writing generated text
/// into `reason`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_reasons_are_verbatim_and_the_details_have_their_own_fields() {
    let cluster = Cluster::start(3).await;
    let (leader, followers) = roles(&cluster).await;
    let key = "t60/history/reasons";
    applied(
        &cluster,
        leader,
        "write",
        json!({"key": key, "value": "v1", "actor": "w"}),
    )
    .await;
    applied(
        &cluster,
        followers[0],
        "supersede",
        json!({"key": key, "by": "t60/history/merged", "actor": "editor", "reason": "merged"}),
    )
    .await;
    applied(
        &cluster,
        followers[1],
        "supersede",
        json!({"key": key, "by": "t60/history/other", "actor": "editor"}),
    )
    .await;
    let last = applied(
        &cluster,
        leader,
        "flag-stale",
        json!({"key": key, "actor": "ci", "anchor": "path:src/a.rs", "observed_hash": "abc"}),
    )
    .await;

    let events = history_json(&cluster, leader, key, last).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["written", "superseded", "superseded", "stale_flagged"],
        "{events:?}"
    );
    let (written, with_reason, without_reason, flagged) =
        (&events[0], &events[1], &events[2], &events[3]);
    for absent in ["by", "anchor", "observed_hash"] {
        assert!(written.get(absent).is_none(), "{written}");
    }

    assert_eq!(with_reason["reason"], "merged", "{with_reason}");
    assert_eq!(with_reason["by"], "t60/history/merged", "{with_reason}");
    assert!(with_reason.get("anchor").is_none(), "{with_reason}");

    assert!(without_reason["reason"].is_null(), "{without_reason}");
    assert_eq!(
        without_reason["by"], "t60/history/other",
        "{without_reason}"
    );

    assert!(flagged["reason"].is_null(), "{flagged}");
    assert_eq!(flagged["anchor"], "path:src/a.rs", "{flagged}");
    assert_eq!(flagged["observed_hash"], "abc", "{flagged}");
    assert!(flagged.get("by").is_none(), "{flagged}");

    // Every replica stored the same events, and the typed client reads them back.
    for id in followers {
        assert_eq!(history_json(&cluster, id, key, last).await, events);
    }
    let typed = cluster
        .client()
        .history(key, linearizable())
        .await
        .expect("history")
        .events;
    assert_eq!(typed[1].by.as_deref(), Some("t60/history/merged"));
    assert_eq!(typed[1].reason.as_deref(), Some("merged"));
    assert_eq!(
        (
            typed[3].anchor.as_deref(),
            typed[3].observed_hash.as_deref()
        ),
        (Some("path:src/a.rs"), Some("abc"))
    );
}

/// 11. A page stops once its values hold `limits.page_value_bytes_max` bytes (the item that
/// reaches it included), and a list page cut short carries `next_after`; a key takes at
/// most 64 stale flags, and a repeat on a flagged anchor still replaces its flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_stop_at_their_value_bytes_and_stale_flags_are_bounded() {
    let cluster = Cluster::builder(1)
        .config("[limits]\npage_value_bytes_max = 1000\n")
        .start()
        .await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let value = "v".repeat(398); // 400 bytes as JSON
    for i in 0..5 {
        let body = json!({"key": format!("big/{i}"), "value": value, "actor": "t60",
                          "anchors": ["tag:big"]});
        let (status, answer) = post_raw(&cluster, 1, "/v1/write", &body.to_string()).await;
        assert_eq!(status, 200, "{answer}");
    }
    let keys = |answer: &Value, list: &str| -> Vec<String> {
        answer[list]
            .as_array()
            .unwrap_or_else(|| panic!("{answer}"))
            .iter()
            .map(|item| item["key"].as_str().unwrap().to_string())
            .collect()
    };

    // 400 + 400 + 400 reaches 1000: three items, and the page says where to go on.
    let (status, first) = post_raw(&cluster, 1, "/v1/list", r#"{"prefix":"big/"}"#).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(keys(&first, "items"), ["big/0", "big/1", "big/2"]);
    assert_eq!(first["next_after"], "big/2");
    let rest = json!({"prefix": "big/", "after": "big/2"}).to_string();
    let (_, second) = post_raw(&cluster, 1, "/v1/list", &rest).await;
    assert_eq!(keys(&second, "items"), ["big/3", "big/4"]);
    assert_eq!(second["next_after"], Value::Null, "{second}");

    // Recall: the best three notes (the most recent first, all else being equal).
    let (status, recalled) = post_raw(&cluster, 1, "/v1/recall", r#"{"cues":["tag:big"]}"#).await;
    assert_eq!(status, 200, "{recalled}");
    assert_eq!(keys(&recalled, "notes"), ["big/4", "big/3", "big/2"]);

    // Stale flags: 64 anchors take, the 65th is refused and changes nothing.
    let flag = |anchor: String| {
        json!({"key": "big/0", "actor": "t60", "anchor": anchor, "observed_hash": "h"}).to_string()
    };
    for i in 0..64 {
        let (status, answer) =
            post_raw(&cluster, 1, "/v1/flag-stale", &flag(format!("path:f{i}"))).await;
        assert_eq!(status, 200, "flag {i}: {answer}");
    }
    let (_, before) = post_raw(&cluster, 1, "/v1/read", r#"{"key":"big/0"}"#).await;
    let (status, refused) =
        post_raw(&cluster, 1, "/v1/flag-stale", &flag("path:one-more".into())).await;
    assert_eq!(status, 413, "{refused}");
    assert_eq!(error_code(&refused), "too_large");
    assert_eq!(
        (
            &refused["error"]["field"],
            &refused["error"]["limit"],
            &refused["error"]["size"]
        ),
        (&json!("stale"), &json!(64), &json!(65)),
        "{refused}"
    );
    let (_, after) = post_raw(&cluster, 1, "/v1/read", r#"{"key":"big/0"}"#).await;
    assert_eq!(
        before["version"], after["version"],
        "the refusal changed nothing"
    );
    // In a batch the same refusal is a conflict with the key's state (SPEC §5: a batch
    // refused at apply is 409 naming its op), with the size details; nothing applies.
    let batch = json!({"ops": [
        {"op": "write", "key": "big/batch", "value": 1, "actor": "t60"},
        {"op": "flag_stale", "key": "big/0", "actor": "t60", "anchor": "path:one-more",
         "observed_hash": "h"},
    ]});
    let (status, refused) = post_raw(&cluster, 1, "/v1/batch", &batch.to_string()).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(error_code(&refused), "invalid_transition");
    assert_eq!(
        (
            &refused["error"]["op_index"],
            &refused["error"]["field"],
            &refused["error"]["limit"],
            &refused["error"]["size"]
        ),
        (&json!(1), &json!("ops[1].stale"), &json!(64), &json!(65)),
        "{refused}"
    );
    let (status, _) = post_raw(&cluster, 1, "/v1/read", r#"{"key":"big/batch"}"#).await;
    assert_eq!(status, 404, "the batch applied nothing");
    let (status, answer) = post_raw(&cluster, 1, "/v1/flag-stale", &flag("path:f0".into())).await;
    assert_eq!(status, 200, "a flagged anchor is replaced: {answer}");
    let (_, reread) = post_raw(&cluster, 1, "/v1/read", r#"{"key":"big/0"}"#).await;
    assert_eq!(
        reread["stale"].as_array().map(Vec::len),
        Some(64),
        "{reread}"
    );
}

/// A value at the nesting limit (120 levels) reads back through every answer that carries
/// values: a `list` page and a `recall` wrap it in 3 more levels, within the 128 a JSON
/// decoder allows (a value of 126 levels, accepted before the limit, made such pages
/// undecodable for the Rust client).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_value_at_the_nesting_limit_reads_back_in_read_list_and_recall() {
    let cluster = Cluster::start(1).await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    let text = format!("{}{}", "[".repeat(120), "]".repeat(120));
    let value: Value = serde_json::from_str(&text).expect("120 levels");
    let mut request = WriteRequest::new("deep/1", value.clone(), "t60");
    request.anchors = Some(vec!["topic:deep".into()]);
    client.write(request).await.expect("write");
    let read = client.read("deep/1", linearizable()).await.expect("read");
    assert_eq!(read.record.value.as_ref(), Some(&value));
    let page = client.list(ListRequest::new("deep/")).await.expect("list");
    assert_eq!(page.items[0].value.as_ref(), Some(&value));
    let recall = RecallRequest::new(vec!["topic:deep".into()]);
    let notes = client.recall(recall).await.expect("recall");
    assert_eq!(notes.notes[0].value.as_ref(), Some(&value));
}

/// A list filtered by state looks at most 10 keys per item asked for: a page cut short by
/// that bound names where to go on, and one that met the end of the prefix is the last
/// (`next_after` null), with no empty round trip after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_filtered_list_page_that_met_the_end_is_the_last() {
    let cluster = Cluster::start(1).await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let ops: Vec<Value> = (0..11)
        .map(|i| json!({"op": "write", "key": format!("mn/{i:03}"), "value": i, "actor": "t60"}))
        .collect();
    let (status, answer) =
        post_raw(&cluster, 1, "/v1/batch", &json!({ "ops": ops }).to_string()).await;
    assert_eq!(status, 200, "{answer}");
    let revoked_page =
        |prefix: &str| json!({"prefix": prefix, "states": ["revoked"], "limit": 1}).to_string();

    // mn/00 holds exactly the 10 keys the bound lets one page look at.
    let (status, page) = post_raw(&cluster, 1, "/v1/list", &revoked_page("mn/00")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["items"], json!([]), "{page}");
    assert_eq!(page["next_after"], Value::Null, "{page}");
    // mn/ holds an 11th: the page stopped at the bound, not at the end.
    let (_, page) = post_raw(&cluster, 1, "/v1/list", &revoked_page("mn/")).await;
    assert_eq!(page["items"], json!([]), "{page}");
    assert_eq!(page["next_after"], "mn/009", "{page}");
}
