//! The cluster's final word, collected after the last heal and before teardown:
//!
//! 1. every mutation still `info` is resent under its `request_id` until it gets a
//!    definite answer (bounded), which turns most indeterminate operations into known
//!    ones (the record keeps its first invocation time);
//! 2. a last liveness probe;
//! 3. convergence: every member reports the same applied index, equal to the leader's
//!    commit index (bounded wait);
//! 4. per node: the full key listing (`POST /v1/list`, consistency `any`, paged) and a
//!    digest of it; per key: the history from the leader (linearizable) and a digest of
//!    every node's own history; every acknowledged tombstone read from every node.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use cairn_api::{Consistency, HistoryEvent, ListRequest, ReadOptions};
use cairn_client::Client;
use futures::{stream, StreamExt};
use serde::Serialize;

use super::cluster::Cluster;
use super::history::{Input, Outcome, Probe, Record, Recorder};
use super::supervisor::endpoint;
use super::workload::{client_for, exec, probe, HARNESS_PROCESS};

const LIST_PAGE: u64 = 1_000;
/// Bounds paging (keys listed per node at most PAGES_MAX * LIST_PAGE).
const PAGES_MAX: usize = 1_000;
const RESOLVE_ROUNDS: usize = 3;
const PARALLEL: usize = 8;
/// Each collection phase (resends, histories, tombstones) stops starting new requests
/// after this, so a cluster that cannot answer cannot stall the run; what was not
/// collected is reported as such (and fails the checker that needed it).
const PHASE_TIMEOUT: Duration = Duration::from_secs(60);
const NOT_COLLECTED: &str = "not collected: the collection phase ran out of time";

/// One answer per node, or the error that node gave.
pub type PerNode<T> = BTreeMap<u64, Result<T, String>>;

#[derive(Debug, Default, Serialize)]
pub struct FinalState {
    /// The converged applied index, or why convergence was not reached.
    pub converged: Option<Result<u64, String>>,
    pub final_probe: Option<Probe>,
    /// Per node: digest of its full listing, or the error.
    pub list_digests: BTreeMap<u64, Result<u64, String>>,
    /// Per node: key → (state, version) from its listing, for diagnostics.
    #[serde(skip)]
    pub listings: BTreeMap<u64, BTreeMap<String, (String, u64)>>,
    /// Per key: history from the leader, linearizable.
    #[serde(skip)]
    pub histories: BTreeMap<String, Result<Vec<HistoryEvent>, String>>,
    /// Per key, per node: digest of that node's own history of the key.
    #[serde(skip)]
    pub node_histories: BTreeMap<String, PerNode<u64>>,
    /// Per tombstone id, per node: (key, version), or the error.
    #[serde(skip)]
    pub tombstones: BTreeMap<String, PerNode<(String, u64)>>,
    /// The members the final state was collected from.
    pub members: Vec<u64>,
    /// Indeterminate mutations resent, and how many of them got a definite answer.
    pub resent: usize,
    pub resolved: usize,
}

fn digest<T: Hash>(value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// Resends every `info` mutation until it gets a definite answer (bounded rounds).
pub async fn resolve_indeterminate(rec: &Recorder, client: &Client) -> (usize, usize) {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut resent = 0;
    for round in 0..RESOLVE_ROUNDS {
        let open: Vec<_> = rec
            .records()
            .into_iter()
            .filter(|r| r.outcome == Outcome::Info && r.input.is_mutation())
            .collect();
        if open.is_empty() {
            break;
        }
        if round == 0 {
            resent = open.len();
        }
        let process = HARNESS_PROCESS * 10 + round as u64;
        stream::iter(open)
            .for_each_concurrent(PARALLEL, |r| async move {
                if Instant::now() < deadline {
                    exec::resolve(rec, &r, process, client).await;
                }
            })
            .await;
    }
    let left = rec
        .records()
        .iter()
        .filter(|r| r.outcome == Outcome::Info && r.input.is_mutation())
        .count();
    (resent, resent.saturating_sub(left))
}

async fn listing(client: &Client) -> Result<Vec<cairn_api::Record>, String> {
    let mut items = Vec::new();
    let mut after = None;
    for _ in 0..PAGES_MAX {
        let mut req = ListRequest::new("");
        req.limit = Some(LIST_PAGE);
        req.after = after.clone();
        req.consistency = Some(Consistency::Any);
        let page = client.list(req).await.map_err(|e| e.to_string())?;
        items.extend(page.items);
        match page.next_after {
            Some(next) => after = Some(next),
            None => return Ok(items),
        }
    }
    Err(format!("more than {PAGES_MAX} pages"))
}

/// Collects everything the durability and forget checkers need.
pub async fn collect(
    rec: &Recorder,
    cluster: &Cluster,
    liveness_bound: Duration,
    converge_timeout: Duration,
) -> FinalState {
    let mut fs = FinalState::default();
    let all = client_for(cluster.endpoints());
    (fs.resent, fs.resolved) = resolve_indeterminate(rec, &all).await;
    fs.final_probe =
        Some(probe::run(rec, cluster, HARNESS_PROCESS * 20, "final", liveness_bound).await);
    let members = cluster.members();
    fs.members = members.clone();
    fs.converged = Some(
        cluster
            .wait_converged(&members, converge_timeout)
            .await
            .map_err(|e| format!("{e:#}")),
    );
    let pinned: BTreeMap<u64, Client> = members
        .iter()
        .map(|id| (*id, all.pinned(&endpoint(*id)).expect("valid endpoint")))
        .collect();
    collect_listings(&pinned, &mut fs).await;
    let records = rec.records();
    for (key, leader, per_node) in collect_histories(&all, &pinned, keys_of(&records)).await {
        fs.histories.insert(key.clone(), leader);
        fs.node_histories.insert(key, per_node);
    }
    fs.tombstones = collect_tombstones(&members, acknowledged_tombstones(&records)).await;
    fs
}

/// Every node's full listing: its digest, and key → (state, version).
async fn collect_listings(pinned: &BTreeMap<u64, Client>, fs: &mut FinalState) {
    for (id, client) in pinned {
        match listing(client).await {
            Ok(items) => {
                let text: Vec<String> = items
                    .iter()
                    .map(|r| serde_json::to_string(r).unwrap_or_default())
                    .collect();
                fs.list_digests.insert(*id, Ok(digest(&text)));
                fs.listings.insert(
                    *id,
                    items
                        .iter()
                        .map(|r| (r.key.clone(), (r.state.to_string(), r.version)))
                        .collect(),
                );
            }
            Err(e) => {
                fs.list_digests.insert(*id, Err(e));
            }
        }
    }
}

/// Every key any recorded operation touched.
fn keys_of(records: &[Record]) -> BTreeSet<String> {
    records
        .iter()
        .flat_map(|r| {
            r.input
                .parts()
                .into_iter()
                .filter_map(|p| p.key().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A key's history from the leader, and the digest of every node's own history of it.
type KeyHistories = (String, Result<Vec<HistoryEvent>, String>, PerNode<u64>);

/// Per key: the leader's linearizable history and each node's own (`any`) history digest;
/// keys not reached within [`PHASE_TIMEOUT`] are marked not collected.
async fn collect_histories(
    all: &Client,
    pinned: &BTreeMap<u64, Client>,
    keys: BTreeSet<String>,
) -> Vec<KeyHistories> {
    let linearizable = ReadOptions {
        consistency: Some(Consistency::Linearizable),
        ..ReadOptions::default()
    };
    let any = ReadOptions {
        consistency: Some(Consistency::Any),
        ..ReadOptions::default()
    };
    let deadline = Instant::now() + PHASE_TIMEOUT;
    stream::iter(keys)
        .map(|key| async move {
            if Instant::now() > deadline {
                let per_node = pinned
                    .keys()
                    .map(|id| (*id, Err(NOT_COLLECTED.to_string())))
                    .collect();
                return (key, Err(NOT_COLLECTED.to_string()), per_node);
            }
            let leader = all
                .history(&key, linearizable)
                .await
                .map(|h| h.events)
                .map_err(|e| e.to_string());
            let mut per_node = BTreeMap::new();
            for (id, client) in pinned {
                let h = client.history(&key, any).await;
                per_node.insert(
                    *id,
                    h.map(|h| digest(&serde_json::to_string(&h.events).unwrap_or_default()))
                        .map_err(|e| e.to_string()),
                );
            }
            (key, leader, per_node)
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await
}

/// The tombstone ids of every acknowledged forget.
fn acknowledged_tombstones(records: &[Record]) -> BTreeSet<String> {
    records
        .iter()
        .filter(|r| r.outcome == Outcome::Ok)
        .flat_map(|r| {
            r.input
                .parts()
                .into_iter()
                .zip(r.mut_results())
                .filter(|(p, _)| matches!(p, Input::Forget { .. }))
                .filter_map(|(_, m)| m.tombstone_id.clone())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Per tombstone id, each member's own copy; ids not reached within [`PHASE_TIMEOUT`] are
/// marked not collected.
async fn collect_tombstones(
    members: &[u64],
    ids: BTreeSet<String>,
) -> BTreeMap<String, PerNode<(String, u64)>> {
    let http = match super::secure::reqwest_client(Duration::from_secs(5)) {
        Ok(http) => http,
        Err(e) => {
            let why = format!("not collected: no HTTP client: {e:#}");
            return ids
                .into_iter()
                .map(|id| (id, members.iter().map(|n| (*n, Err(why.clone()))).collect()))
                .collect();
        }
    };
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let looked_up: Vec<_> = stream::iter(ids)
        .map(|id| {
            let http = &http;
            async move {
                let mut per_node = BTreeMap::new();
                for node in members {
                    let found = if Instant::now() > deadline {
                        Err(NOT_COLLECTED.to_string())
                    } else {
                        local_tombstone(http, *node, &id).await
                    };
                    per_node.insert(*node, found);
                }
                (id, per_node)
            }
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    looked_up.into_iter().collect()
}

/// `GET /v1/tombstones/{id}?consistency=any` on one node: its own copy (the client
/// library's call is linearizable, i.e. answered by the leader).
async fn local_tombstone(
    http: &reqwest::Client,
    node: u64,
    id: &str,
) -> Result<(String, u64), String> {
    let url = format!("{}/v1/tombstones/{id}?consistency=any", endpoint(node));
    let resp = http.get(url).send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    let t: cairn_api::Tombstone = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    Ok((t.key, t.version))
}
