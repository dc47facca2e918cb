//! Where a call goes: the endpoints and the cached leader ([`Nodes`]), the [`Route`] of a
//! call, leader discovery through `GET /cluster/status`, endpoint normalization.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::{Method, Url};

use super::retry::Mode;
use super::transport::{read_json, Call};
use super::{lock, Client, Result};
use crate::api::{ClusterStatus, Consistency};
use crate::error::ClientError;

/// How long an endpoint that failed to answer is passed over by spread calls and leader
/// discovery while another may answer: a paused node accepts connections and holds each
/// request for a whole attempt timeout, so without this every call would try it in turn.
const FAILED_ENDPOINT_COOLDOWN: Duration = Duration::from_secs(5);

/// The endpoints of a client and what it learned about them.
#[derive(Debug)]
pub(super) struct Nodes {
    pub(super) endpoints: Vec<String>,
    /// Scheme of an endpoint given as bare `host:port`: `https` once a CA is configured.
    pub(super) scheme: Scheme,
    leader: Mutex<Option<String>>,
    cursor: AtomicUsize,
    /// When each endpoint last failed to answer (a transport failure), until it answers.
    silent: Mutex<Vec<(String, Instant)>>,
    /// Whether `silent` may hold an endpoint: lets every successful call skip its lock.
    any_silent: AtomicBool,
    /// Every call goes to `endpoints[0]`; no discovery.
    pinned: bool,
}

impl Nodes {
    pub(super) fn new(endpoints: Vec<String>, scheme: Scheme, pinned: bool) -> Self {
        Nodes {
            endpoints,
            scheme,
            leader: Mutex::new(None),
            cursor: AtomicUsize::new(0),
            silent: Mutex::new(Vec::new()),
            any_silent: AtomicBool::new(false),
            pinned,
        }
    }

    /// The next endpoint in round-robin order that has not failed lately (the next one
    /// whatever its state when all have).
    pub(super) fn next_endpoint(&self) -> String {
        let i = self.cursor.fetch_add(1, Ordering::Relaxed);
        self.answering_from(i % self.endpoints.len())
    }

    /// The endpoint after `endpoint` in the list (from the first one if it is not
    /// listed), passing over those that failed lately as [`Nodes::next_endpoint`] does.
    fn endpoint_after(&self, endpoint: &str) -> String {
        let at = self.endpoints.iter().position(|e| e == endpoint);
        self.answering_from(at.map_or(0, |i| (i + 1) % self.endpoints.len()))
    }

    /// The first endpoint from index `start` on, in circular order, that has not failed
    /// within [`FAILED_ENDPOINT_COOLDOWN`]; `endpoints[start]` when every one has.
    fn answering_from(&self, start: usize) -> String {
        if !self.any_silent.load(Ordering::Acquire) {
            return self.endpoints[start].clone();
        }
        let silent = lock(&self.silent);
        let n = self.endpoints.len();
        (0..n)
            .map(|k| &self.endpoints[(start + k) % n])
            .find(|endpoint| !failed_within_cooldown(&silent, endpoint))
            .unwrap_or(&self.endpoints[start])
            .clone()
    }

    /// Whether `endpoint` failed to answer within [`FAILED_ENDPOINT_COOLDOWN`].
    fn failed_lately(&self, endpoint: &str) -> bool {
        self.any_silent.load(Ordering::Acquire)
            && failed_within_cooldown(&lock(&self.silent), endpoint)
    }

    /// Records that `endpoint` did not answer (a transport failure).
    pub(super) fn failed(&self, endpoint: &str) {
        let mut silent = lock(&self.silent);
        silent.retain(|(e, _)| e != endpoint);
        silent.push((endpoint.to_string(), Instant::now()));
        self.any_silent.store(true, Ordering::Release);
    }

    /// Records that `endpoint` answered: on the common path (no endpoint marked) without
    /// taking the lock, since every successful call says so.
    pub(super) fn answered(&self, endpoint: &str) {
        if !self.any_silent.load(Ordering::Acquire) {
            return;
        }
        let mut silent = lock(&self.silent);
        silent.retain(|(e, _)| e != endpoint);
        self.any_silent.store(!silent.is_empty(), Ordering::Release);
    }

    pub(super) fn cached_leader(&self) -> Option<String> {
        lock(&self.leader).clone()
    }

    pub(super) fn set_leader(&self, base: &str) {
        *lock(&self.leader) = Some(base.to_string());
    }

    /// Drops the cached leader if it is still `base` (a concurrent call may have found a
    /// newer one already).
    pub(super) fn forget_leader(&self, base: &str) {
        let mut leader = lock(&self.leader);
        if leader.as_deref() == Some(base) {
            *leader = None;
        }
    }
}

/// The scheme of an endpoint named without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Where a call goes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Route<'a> {
    Leader,
    /// The leader the nodes name now, discovered afresh for every attempt, never the cached
    /// one: for membership changes, which wait long at the node they reach, so a cached
    /// leader that stopped answering (a paused or cut-off process whose kernel still
    /// accepts connections) must not hold them for their whole timeout; and for reopening
    /// a watch that broke or fell silent, often because its leader went.
    CurrentLeader,
    /// Round-robin over the endpoints.
    Spread,
    At(&'a str),
}

impl Client {
    /// One status request, straight to `endpoint`: leader discovery runs inside
    /// [`Client::call`], so this must not go through it.
    pub(super) async fn status_at(
        &self,
        endpoint: &str,
        timeout: Duration,
    ) -> Result<ClusterStatus> {
        let call = Call {
            method: Method::GET,
            route: Route::At(endpoint),
            path: &["cluster", "status"],
            query: Vec::new(),
            body: None,
            mode: Mode::Once,
            timeout: Some(timeout),
        };
        read_json(self.attempt(endpoint, &call).await?).await
    }

    /// The leader's status, retried like a read (a watch started during an election or
    /// a restart waits for a leader as other calls do, instead of failing at once). Asked
    /// of the leader the nodes name now, and an answer from a node that is not the leader
    /// (one that stepped down since it was named) is retried as `no_leader`.
    pub(super) async fn leader_status(&self) -> Result<ClusterStatus> {
        let call = Call {
            method: Method::GET,
            route: Route::CurrentLeader,
            path: &["cluster", "status"],
            query: Vec::new(),
            body: None,
            mode: Mode::Read,
            timeout: Some(self.timeouts.request),
        };
        self.call(&call, |response| async move {
            let status: ClusterStatus = read_json(response).await?;
            match status.leader_id == Some(status.node_id) {
                true => Ok(status),
                false => Err(ClientError::NoLeader {
                    message: format!(
                        "node {} answered as {}, not the leader",
                        status.node_id, status.role
                    ),
                    leader_id: status.leader_id,
                    details: Default::default(),
                }),
            }
        })
        .await
    }

    /// One pass over the endpoints asking each for the leader; caches and returns the
    /// first leader endpoint reported.
    ///
    /// - Each node gets at most the discovery timeout, and before `deadline` (a call's),
    ///   at most half the time left: a node that holds the question without answering (a
    ///   paused process) leaves the other half to the nodes after it.
    pub(super) async fn discover_leader(&self, deadline: Option<Instant>) -> Option<String> {
        for _ in 0..self.nodes.endpoints.len() {
            let endpoint = self.nodes.next_endpoint();
            let timeout = match deadline {
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    self.timeouts.discovery.min(left / 2)
                }
                None => self.timeouts.discovery,
            };
            let status = match self.status_at(&endpoint, timeout).await {
                Ok(status) => status,
                Err(ClientError::Transport { .. }) => {
                    self.nodes.failed(&endpoint);
                    continue;
                }
                Err(_) => continue,
            };
            self.nodes.answered(&endpoint);
            match leader_endpoint(&status, &endpoint) {
                // A leader that did not answer lately, named by a node that has not yet
                // noticed (a follower trusts its leader's lease for a while): calls sent
                // there would wait a whole attempt for a node that may be paused. With no
                // other leader named, a call goes to a node that relays it or says
                // `no_leader`, and is retried.
                Some(leader) if leader != endpoint && self.nodes.failed_lately(&leader) => {}
                Some(leader) => {
                    self.nodes.set_leader(&leader);
                    return Some(leader);
                }
                None => {}
            }
        }
        None
    }

    /// [`Client::base_for`], except that a spread call whose last attempt failed at
    /// `failed_at` goes to the next endpoint after it: the shared round-robin cursor alone
    /// could hand a call's every retry a dead node while concurrent calls take the live
    /// ones (an `any` read beside a leader discovery on the same client ended in
    /// "connection refused" after 5 s of retries, with one node of three up).
    pub(super) async fn base_after(
        &self,
        route: Route<'_>,
        failed_at: Option<&str>,
        deadline: Option<Instant>,
    ) -> String {
        match (route, failed_at) {
            (Route::Spread, Some(failed)) if !self.nodes.pinned => {
                self.nodes.endpoint_after(failed)
            }
            _ => self.base_for(route, deadline).await,
        }
    }

    /// The endpoint a call on `route` goes to now (a leader discovery ends by `deadline`).
    pub(super) async fn base_for(&self, route: Route<'_>, deadline: Option<Instant>) -> String {
        match route {
            Route::At(endpoint) => endpoint.to_string(),
            _ if self.nodes.pinned => self.nodes.endpoints[0].clone(),
            Route::Spread => self.nodes.next_endpoint(),
            Route::Leader => match self.nodes.cached_leader() {
                Some(leader) => leader,
                None => self.discovered_or_any(deadline).await,
            },
            Route::CurrentLeader => self.discovered_or_any(deadline).await,
        }
    }

    /// The leader the nodes name now; with none named, any node, which forwards or says
    /// `no_leader` (retried).
    async fn discovered_or_any(&self, deadline: Option<Instant>) -> String {
        match self.discover_leader(deadline).await {
            Some(leader) => leader,
            None => self.nodes.next_endpoint(),
        }
    }
}

/// Whether `silent` has `endpoint` failing within [`FAILED_ENDPOINT_COOLDOWN`].
fn failed_within_cooldown(silent: &[(String, Instant)], endpoint: &str) -> bool {
    silent
        .iter()
        .any(|(e, at)| e == endpoint && at.elapsed() < FAILED_ENDPOINT_COOLDOWN)
}

/// Where a read goes: linearizable reads to the leader, the others to any node.
pub(super) fn read_route(consistency: Option<Consistency>) -> Route<'static> {
    match consistency {
        Some(Consistency::Bounded | Consistency::Any) => Route::Spread,
        Some(Consistency::Linearizable) | None => Route::Leader,
    }
}

/// The endpoint of the leader `status` names: the asked endpoint itself when it is the
/// leader (its advertised address may be a bind address), else the leader's `client_addr`
/// with the scheme of the asked endpoint (a cluster serves HTTPS on every node or none).
fn leader_endpoint(status: &ClusterStatus, asked: &str) -> Option<String> {
    let leader_id = status.leader_id?;
    if leader_id == status.node_id {
        return Some(asked.to_string());
    }
    let node = status.nodes.iter().find(|n| n.id == leader_id)?;
    let scheme = match asked.starts_with("https://") {
        true => Scheme::Https,
        false => Scheme::Http,
    };
    normalize_endpoint(&node.client_addr, scheme).ok()
}

/// `host:port` or `http[s]://host[:port][/]` → `http[s]://host[:port]`; a bare `host:port`
/// gets `scheme`.
///
/// - A path (`/v1`), a query or a fragment is refused: the client adds the API's paths
///   itself, so `http://host:7401/v1` would ask for `/v1/v1/read` and every key would
///   look absent (404 `not_found` for an unknown path).
/// - A bare host needs its port (`127.0.0.1` alone would mean port 80).
pub(crate) fn normalize_endpoint(endpoint: &str, scheme: Scheme) -> Result<String> {
    let endpoint = endpoint.trim();
    let bare = !endpoint.contains("://");
    let with_scheme = if bare {
        format!("{}://{endpoint}", scheme.as_str())
    } else {
        endpoint.to_string()
    };
    let url = Url::parse(&with_scheme)
        .map_err(|e| ClientError::invalid_input(format!("endpoint {endpoint:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ClientError::invalid_input(format!(
            "endpoint {endpoint:?}: expected http:// or https://"
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ClientError::invalid_input(format!(
            "endpoint {endpoint:?}: no host"
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Never echoed: the message names the host only.
        return Err(ClientError::invalid_input(format!(
            "endpoint for {}: credentials in the address are not used (a token goes in \
             CAIRN_TOKEN or --token-file)",
            url.host_str().unwrap_or_default()
        )));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(ClientError::invalid_input(format!(
            "endpoint {endpoint:?}: a node's address takes no path, query or fragment \
             (give http[s]://host:port)"
        )));
    }
    if bare && url.port().is_none() {
        return Err(ClientError::invalid_input(format!(
            "endpoint {endpoint:?}: no port (give host:port)"
        )));
    }
    Ok(with_scheme.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::NodeSpec;
    use crate::client::test_support::*;
    use crate::client::transport::endpoint_url;
    use crate::fake_node::{FakeNode, Reply};

    #[test]
    fn endpoints_are_normalized() {
        assert_eq!(
            normalize_endpoint("127.0.0.1:7401", Scheme::Http).unwrap(),
            "http://127.0.0.1:7401"
        );
        assert_eq!(
            normalize_endpoint("127.0.0.1:7401", Scheme::Https).unwrap(),
            "https://127.0.0.1:7401"
        );
        assert_eq!(
            normalize_endpoint(" http://h:1/ ", Scheme::Https).unwrap(),
            "http://h:1"
        );
        assert_eq!(
            normalize_endpoint("https://h:1/", Scheme::Http).unwrap(),
            "https://h:1"
        );
        assert!(normalize_endpoint("ftp://h:1", Scheme::Http).is_err());
        for refused in [
            "http://h:1/v1",
            "h:1/v1",
            "http://h:1/?a=b",
            "http://h:1#x",
            "h",
            "http://u:secret@h:1",
        ] {
            let err = normalize_endpoint(refused, Scheme::Http).unwrap_err();
            assert!(
                matches!(err, ClientError::InvalidInput { .. }),
                "{refused}: {err}"
            );
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        assert_eq!(
            normalize_endpoint("http://h", Scheme::Http).unwrap(),
            "http://h"
        );
        assert!(normalize_endpoint("", Scheme::Http).is_err());
        assert!(Client::new(Vec::new()).is_err());
        let url = endpoint_url("http://h:1", &["v1", "tombstones", "a/b c"], &[]).unwrap();
        assert_eq!(url.as_str(), "http://h:1/v1/tombstones/a%2Fb%20c");
    }

    #[test]
    fn a_discovered_leader_keeps_the_scheme_of_the_node_that_named_it() {
        let status: ClusterStatus = serde_json::from_value(json!({
            "node_id": 1, "role": "follower", "leader_id": 2, "term": 3,
            "last_log_index": 5, "commit_index": 5, "applied_index": 5,
            "ms_since_leader_contact": 10, "voters": [1, 2], "learners": [],
            "nodes": [{"id": 1, "client_addr": "10.0.0.1:7401", "peer_addr": "x:1"},
                      {"id": 2, "client_addr": "10.0.0.2:7401", "peer_addr": "x:2"}],
            "snapshot_index": 0, "log_purged_through": 0}))
        .unwrap();
        assert_eq!(
            leader_endpoint(&status, "https://10.0.0.1:7401").as_deref(),
            Some("https://10.0.0.2:7401")
        );
        assert_eq!(
            leader_endpoint(&status, "http://10.0.0.1:7401").as_deref(),
            Some("http://10.0.0.2:7401")
        );
    }

    /// A caller that bounds an attempt bounds the leader lookup with it: a node that holds
    /// the question without answering cost the discovery's own 2 s on top of `--timeout-ms`.
    #[tokio::test]
    async fn a_short_request_timeout_bounds_leader_discovery_too() {
        let silent = FakeNode::start(|_, _| Reply::Hang).await;
        let client = fast(vec![silent.addr.clone()])
            .retries_max(0)
            .request_timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let started = std::time::Instant::now();
        let err = client.read("k", Default::default()).await.unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, ClientError::Transport { .. }), "{err:?}");
        // Discovery (200 ms) and the attempt itself (200 ms), not 2 s + 200 ms.
        assert!(took < Duration::from_millis(1500), "{took:?}");
    }

    /// A node that holds requests without answering (paused) is passed over by the next
    /// spread calls: each would otherwise spend a whole attempt timeout on it in turn.
    #[tokio::test]
    async fn spread_calls_pass_over_a_node_that_did_not_answer_lately() {
        let paused = FakeNode::start(|_, _| Reply::Hang).await;
        let record = json!({"key": "k", "state": "active", "version": 1, "generation": 1,
            "forget_epoch": 0, "revision": 3, "create_revision": 3, "value": 1,
            "meta": {"actor": "a", "anchors": [], "tags": [], "updated_at": 1},
            "stale": [], "rendered": "[k] 1",
            "served": {"node_id": 2, "role": "follower", "consistency": "any",
                "applied_index": 3, "leader_commit_index": 3, "ms_since_leader_contact": 0}});
        let live = FakeNode::start(move |_, _| ok(record.clone())).await;
        let client = fast(vec![paused.addr.clone(), live.addr.clone()])
            .request_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let any = crate::api::ReadOptions {
            consistency: Some(Consistency::Any),
            ..Default::default()
        };
        for _ in 0..4 {
            client
                .read("k", any)
                .await
                .expect("served by the live node");
        }
        assert_eq!(paused.seen().len(), 1, "the paused node was tried again");
        assert_eq!(live.seen().len(), 4);

        // Under a call timeout shorter than one attempt's, the paused node gets half of
        // it, and the live one the rest: the first read is served, not cut off.
        let bounded = fast(vec![paused.addr.clone(), live.addr.clone()])
            .call_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let read = bounded.read("k", any).await;
        assert!(read.is_ok(), "{read:?}");
        assert_eq!(paused.seen().len(), 2);
    }

    /// A spread call's retry goes to the endpoint after the one that failed, wherever
    /// concurrent calls moved the shared cursor.
    #[tokio::test]
    async fn a_spread_retry_goes_to_the_next_endpoint_after_the_failed_one() {
        let endpoints: Vec<String> = (1..=3).map(|i| format!("http://127.0.0.1:{i}")).collect();
        let client = fast(endpoints.clone()).build().unwrap();
        for (failed, next) in [(0, 1), (1, 2), (2, 0)] {
            for _ in 0..failed + 1 {
                client.nodes.next_endpoint(); // another call's turn
            }
            let chosen = client
                .base_after(Route::Spread, Some(&endpoints[failed]), None)
                .await;
            assert_eq!(chosen, endpoints[next]);
        }
        let unlisted = client
            .base_after(Route::Spread, Some("http://h:9"), None)
            .await;
        assert_eq!(unlisted, endpoints[0]);
        let pinned = client.pinned(&endpoints[2]).unwrap();
        let stays = pinned
            .base_after(Route::Spread, Some(&endpoints[2]), None)
            .await;
        assert_eq!(stays, endpoints[2]);
    }

    #[tokio::test]
    async fn membership_changes_pass_over_a_cached_leader_that_stopped_answering() {
        let stopped = FakeNode::start(|_, _| Reply::Hang).await;
        let leader = FakeNode::start(|seen, _| match seen.path.as_str() {
            "/cluster/status" => ok(json!({"node_id": 2, "role": "leader", "leader_id": 2,
                "term": 4, "last_log_index": 9, "commit_index": 9, "applied_index": 9,
                "ms_since_leader_contact": 0, "voters": [1, 2, 3], "learners": [],
                "nodes": [], "snapshot_index": 0, "log_purged_through": 0})),
            _ => ok(json!({"voters": [1, 2, 3, 4], "learners": [], "nodes": []})),
        })
        .await;
        let client = fast(vec![stopped.addr.clone(), leader.addr.clone()])
            .discovery_timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        client.nodes.set_leader(&stopped.addr);
        let node = NodeSpec {
            id: 4,
            client_addr: "127.0.0.1:7404".into(),
            peer_addr: "127.0.0.1:7504".into(),
        };
        let joined = tokio::time::timeout(Duration::from_secs(10), client.join(node))
            .await
            .expect("the join waited on the stopped node")
            .unwrap();
        assert_eq!(joined.voters, [1, 2, 3, 4]);
        let at_leader: Vec<String> = leader.seen().into_iter().map(|s| s.path).collect();
        assert_eq!(at_leader.last().map(String::as_str), Some("/cluster/join"));
        let removed = tokio::time::timeout(Duration::from_secs(10), client.remove(4))
            .await
            .expect("the remove waited on the stopped node");
        assert!(removed.is_ok(), "{removed:?}");
        let joins_at_stopped = stopped.seen().iter().filter(|s| s.method == "POST").count();
        assert_eq!(
            joins_at_stopped, 0,
            "a membership change went to the stopped node"
        );
    }

    /// `GET /cluster/status` of node 1, a follower of node 2 at `leader_addr`.
    fn status_of_a_follower_of(leader_addr: &str) -> serde_json::Value {
        json!({"node_id": 1, "role": "follower", "leader_id": 2, "term": 3,
               "last_log_index": 5, "commit_index": 5, "applied_index": 5,
               "ms_since_leader_contact": 10, "voters": [1, 2], "learners": [],
               "nodes": [{"id": 1, "client_addr": "127.0.0.1:1", "peer_addr": "x:1"},
                         {"id": 2, "client_addr": leader_addr, "peer_addr": "x:2"}],
               "snapshot_index": 0, "log_purged_through": 0})
    }

    /// A node that holds every request without answering (a paused leader), and a
    /// follower that names it leader and relays writes (answering them itself).
    async fn a_paused_leader_and_its_follower() -> (FakeNode, FakeNode) {
        let paused = FakeNode::start(|_, _| Reply::Hang).await;
        let paused_addr = paused.addr.clone();
        let follower = FakeNode::start(move |seen, _| match seen.method.as_str() {
            "GET" => ok(status_of_a_follower_of(&paused_addr)),
            _ => ok(mutation_result(1, 5)),
        })
        .await;
        (paused, follower)
    }

    /// A paused leader, still named by a follower that trusts its lease: discovery does
    /// not take it from the follower once it failed to answer, so the write goes to the
    /// follower (which relays it) instead of waiting on the paused node attempt after
    /// attempt.
    #[tokio::test]
    async fn a_leader_that_did_not_answer_lately_is_not_taken_from_a_follower() {
        let (paused, follower) = a_paused_leader_and_its_follower().await;
        let client = fast(vec![paused.addr.clone(), follower.addr.clone()])
            .request_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        client
            .write(write_request())
            .await
            .expect("relayed by the follower");
        let writes_at_paused = paused.seen().iter().filter(|s| s.method == "POST").count();
        assert_eq!(writes_at_paused, 0, "the write waited on the paused leader");
        let at_follower: Vec<String> = follower.seen().into_iter().map(|s| s.path).collect();
        assert_eq!(at_follower.last().map(String::as_str), Some("/v1/write"));
    }

    /// Under a call timeout, a cached leader that holds a write without answering (a
    /// paused leader, which an election replaces) gets half the time: the retry, under
    /// the same `request_id`, goes to a follower that relays it, and the write is
    /// answered instead of ending `outcome_unknown` on the paused node.
    #[tokio::test]
    async fn a_paused_leader_gets_half_of_a_bounded_writes_time() {
        let (paused, follower) = a_paused_leader_and_its_follower().await;
        let client = fast(vec![paused.addr.clone(), follower.addr.clone()])
            .call_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        client.nodes.set_leader(&paused.addr);
        let written = client.write(write_request()).await;
        assert!(written.is_ok(), "{written:?}");
        let request_id = |node: &FakeNode| -> Vec<String> {
            node.seen()
                .into_iter()
                .filter(|s| s.method == "POST")
                .map(|s| serde_json::from_str::<serde_json::Value>(&s.body).unwrap())
                .map(|body| body["request_id"].as_str().unwrap().to_string())
                .collect()
        };
        let (first, relayed) = (request_id(&paused), request_id(&follower));
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(relayed, first, "the retry carried another request_id");
    }

    /// Under a call timeout, leader discovery gives a node that holds the question at
    /// most half the time left (not the 2 s discovery timeout), so a node that answers
    /// after it is still asked in time.
    #[tokio::test]
    async fn a_silent_node_gets_half_of_a_bounded_calls_discovery() {
        let silent = FakeNode::start(|_, _| Reply::Hang).await;
        let leader = FakeNode::start(|seen, _| match seen.method.as_str() {
            "GET" => ok(
                json!({"node_id": 2, "role": "leader", "leader_id": 2, "term": 4,
                "last_log_index": 9, "commit_index": 9, "applied_index": 9,
                "ms_since_leader_contact": 0, "voters": [1, 2], "learners": [], "nodes": [],
                "snapshot_index": 0, "log_purged_through": 0}),
            ),
            _ => ok(mutation_result(1, 5)),
        })
        .await;
        let client = fast(vec![silent.addr.clone(), leader.addr.clone()])
            .call_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let written = client.write(write_request()).await;
        assert!(written.is_ok(), "{written:?}");
        assert_eq!(
            silent.seen().len(),
            1,
            "the silent node was not asked first"
        );
    }

    #[tokio::test]
    async fn mutations_go_to_the_discovered_leader() {
        let leader = FakeNode::start(|_, _| ok(mutation_result(1, 5))).await;
        let leader_addr = leader.addr.clone();
        let follower = FakeNode::start(move |_, _| ok(status_of_a_follower_of(&leader_addr))).await;
        let client = fast(vec![follower.addr.clone()]).build().unwrap();
        client.write(write_request()).await.unwrap();
        let asked = |node: &FakeNode| -> Vec<(String, String)> {
            node.seen()
                .into_iter()
                .map(|s| (s.method, s.path))
                .collect()
        };
        let status = || ("GET".to_string(), "/cluster/status".to_string());
        assert_eq!(asked(&follower), vec![status()]);
        // `leader()` asks the nodes now, not the cache: the leader may have changed.
        assert_eq!(client.leader().await.unwrap(), leader.addr);
        assert_eq!(asked(&follower), vec![status(), status()]);
        let written = &leader.seen()[0];
        assert_eq!(
            (written.method.as_str(), written.path.as_str()),
            ("POST", "/v1/write")
        );
    }
}
