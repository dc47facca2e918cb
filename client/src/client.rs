//! [`Client`]: the async client of a cairn cluster.
//!
//! - **Leader discovery.** Mutations and linearizable reads go to the leader, found with
//!   `GET /cluster/status` (`leader_id` → that node's `client_addr`) and cached until a call
//!   to it fails. Without a known leader a call goes to the next endpoint: followers forward
//!   mutations, or answer 503 `no_leader`, which is retried.
//! - **Bounded retries.** Every call makes at most `retries_max + 1` attempts with jittered
//!   exponential backoff between `backoff_ms_min` and `backoff_ms_max`, rotating endpoints.
//!   Only transient failures are retried (unreachable node, `no_leader`, `stale_read`,
//!   `outcome_unknown`); a definite answer (404, 409, …) is returned at once.
//! - **Exactly-once mutations.** Every mutation carries a `request_id` (a time-ordered
//!   128-bit hex id, see [`new_request_id`], unless the caller set one) and every retry
//!   resends the identical body. If any attempt may have reached the node without an
//!   answer coming back and no later attempt got a definite one, the call returns
//!   [`ClientError::OutcomeUnknown`] with that id.
//! - **Reads.** Linearizable reads go to the leader; `bounded` and `any` reads are spread
//!   round-robin over the endpoints. With a [`Session`], every read sends the session
//!   revision as `min_revision` and is checked against it; a stale answer is retried
//!   linearizably at the leader (at most [`SESSION_RETRIES_MAX`] times), else the call fails
//!   with [`ClientError::SessionRegression`].
//! - [`Client::pinned`] sends everything to one node (per-replica checks, forwarding tests).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::{
    BatchRequest, BatchResult, ClusterStatus, CompactResponse, Consistency, FlagStaleRequest,
    ForgetRequest, HistoryRequest, HistoryResponse, InitRequest, ListRequest, ListResponse,
    MembershipResponse, MutationResult, NodeSpec, ProbeRequest, ProbeResponse, ReadOptions,
    ReadRequest, ReadResponse, RecallRequest, RecallResponse, ReinstateRequest, RemoveRequest,
    RevokeRequest, SupersedeRequest, Tombstone, WriteRequest,
};
use crate::error::ClientError;
use crate::requests::{Mutation, ReadQuery};
use crate::session::{Observable, Session};
use crate::watch::{self, ChunkStream, WatchStream};

/// Default number of retries after the first attempt of a call.
pub const RETRIES_MAX_DEFAULT: u32 = 5;
/// Default first backoff; each retry doubles it up to the maximum.
pub const BACKOFF_MS_MIN_DEFAULT: u64 = 50;
/// Default backoff ceiling: long enough to span a Raft election.
pub const BACKOFF_MS_MAX_DEFAULT: u64 = 2_000;
/// Linearizable re-reads after a stale answer, before giving up with `SessionRegression`.
pub const SESSION_RETRIES_MAX: u32 = 2;
const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);
/// Covers a leader's commit plus the node's bounded `min_revision` wait (2 s by default).
const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// `GET /cluster/status` is local to the node: a node slower than this is not a useful
/// leader hint.
const DISCOVERY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);
/// Compaction snapshots and rewrites RocksDB files; it may take minutes on a big store.
const COMPACT_TIMEOUT: Duration = Duration::from_secs(300);
/// Doublings of the backoff before the ceiling applies anyway (keeps the shift in range).
const BACKOFF_DOUBLINGS_MAX: u32 = 20;

type Result<T> = std::result::Result<T, ClientError>;

/// How often and how patiently a call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub retries_max: u32,
    pub backoff_ms_min: u64,
    pub backoff_ms_max: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries_max: RETRIES_MAX_DEFAULT,
            backoff_ms_min: BACKOFF_MS_MIN_DEFAULT,
            backoff_ms_max: BACKOFF_MS_MAX_DEFAULT,
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `attempt` (1-based): exponential, capped, and jittered to
    /// between half and all of it so clients that failed together do not retry together.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(BACKOFF_DOUBLINGS_MAX);
        let ceiling = self
            .backoff_ms_min
            .saturating_mul(1 << doublings)
            .min(self.backoff_ms_max)
            .max(1);
        Duration::from_millis(rand::thread_rng().gen_range(ceiling / 2..=ceiling))
    }
}

#[derive(Debug, Clone, Copy)]
struct Timeouts {
    connect: Duration,
    request: Duration,
    discovery: Duration,
}

/// Configures a [`Client`]; start with [`Client::builder`].
#[derive(Debug)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    retry: RetryPolicy,
    timeouts: Timeouts,
    defaults: ReadOptions,
    session: Option<Session>,
}

impl ClientBuilder {
    /// Time to establish a TCP connection (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

    /// Time for one whole attempt, answer included (default 10 s). Watches have none.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.request = timeout;
        self
    }

    /// Time for one `GET /cluster/status` during leader discovery (default 2 s).
    pub fn discovery_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.discovery = timeout;
        self
    }

    /// Default consistency of reads that do not name one.
    pub fn consistency(mut self, consistency: Consistency) -> Self {
        self.defaults.consistency = Some(consistency);
        self
    }

    /// Default `max_staleness_ms` of `bounded` reads that do not name one.
    pub fn max_staleness_ms(mut self, ms: u64) -> Self {
        self.defaults.max_staleness_ms = Some(ms);
        self
    }

    /// Retries after the first attempt of every call (default 5).
    pub fn retries_max(mut self, retries_max: u32) -> Self {
        self.retry.retries_max = retries_max;
        self
    }

    /// Backoff bounds between retries (defaults 50 ms and 2 s).
    pub fn backoff_ms(mut self, min: u64, max: u64) -> Self {
        self.retry.backoff_ms_min = min;
        self.retry.backoff_ms_max = max.max(min);
        self
    }

    /// Tracks what this client sees in `session` (SPEC §3).
    pub fn session(mut self, session: Session) -> Self {
        self.session = Some(session);
        self
    }

    pub fn build(self) -> Result<Client> {
        if self.endpoints.is_empty() {
            return Err(ClientError::invalid_input("no endpoints given"));
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| normalize_endpoint(e))
            .collect::<Result<Vec<_>>>()?;
        let http = reqwest::Client::builder()
            .connect_timeout(self.timeouts.connect)
            // Nodes are direct peers; an HTTP_PROXY meant for the internet must not sit
            // between an agent and its cluster.
            .no_proxy()
            .build()
            .map_err(|e| ClientError::invalid_input(format!("http client: {e}")))?;
        Ok(Client {
            http,
            nodes: Arc::new(Nodes::new(endpoints, false)),
            retry: self.retry,
            timeouts: self.timeouts,
            defaults: self.defaults,
            session: self.session.map(|s| Arc::new(Mutex::new(s))),
        })
    }
}

/// The endpoints of a client and what it learned about them.
#[derive(Debug)]
struct Nodes {
    endpoints: Vec<String>,
    leader: Mutex<Option<String>>,
    cursor: AtomicUsize,
    /// Every call goes to `endpoints[0]`; no discovery.
    pinned: bool,
}

impl Nodes {
    fn new(endpoints: Vec<String>, pinned: bool) -> Self {
        Nodes {
            endpoints,
            leader: Mutex::new(None),
            cursor: AtomicUsize::new(0),
            pinned,
        }
    }

    fn next_endpoint(&self) -> String {
        let i = self.cursor.fetch_add(1, Ordering::Relaxed);
        self.endpoints[i % self.endpoints.len()].clone()
    }

    fn cached_leader(&self) -> Option<String> {
        lock(&self.leader).clone()
    }

    fn set_leader(&self, base: &str) {
        *lock(&self.leader) = Some(base.to_string());
    }

    /// Drops the cached leader if it is still `base` (a concurrent call may have found a
    /// newer one already).
    fn forget_leader(&self, base: &str) {
        let mut leader = lock(&self.leader);
        if leader.as_deref() == Some(base) {
            *leader = None;
        }
    }
}

/// Where a call goes.
#[derive(Debug, Clone, Copy)]
enum Route<'a> {
    Leader,
    /// Round-robin over the endpoints.
    Spread,
    At(&'a str),
}

/// Which failures a call may retry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Side-effect free: retry every transient failure.
    Read,
    /// Deduplicated by this `request_id`: retry every transient failure; report an unknown
    /// outcome as `OutcomeUnknown`.
    Mutation(String),
    /// Not deduplicated (membership changes): retry only failures that cannot have
    /// reached the node.
    Admin,
    /// One attempt at one node (per-node status, metrics, compaction).
    Once,
}

struct Call<'a> {
    method: Method,
    route: Route<'a>,
    path: &'a [&'a str],
    query: Vec<(&'static str, String)>,
    /// Serialized once, so every retry sends the identical payload (the node compares
    /// payload hashes under one `request_id`).
    body: Option<Vec<u8>>,
    mode: Mode,
    /// `None`: no overall deadline (watch streams).
    timeout: Option<Duration>,
}

/// A cairn client. Cheap to clone; clones share connections, leader cache and session.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    nodes: Arc<Nodes>,
    retry: RetryPolicy,
    timeouts: Timeouts,
    defaults: ReadOptions,
    session: Option<Arc<Mutex<Session>>>,
}

impl Client {
    /// A client with default settings. Endpoints are `http://host:port` or `host:port`.
    pub fn new(endpoints: Vec<String>) -> Result<Client> {
        Client::builder(endpoints).build()
    }

    pub fn builder(endpoints: Vec<String>) -> ClientBuilder {
        ClientBuilder {
            endpoints,
            retry: RetryPolicy::default(),
            timeouts: Timeouts {
                connect: CONNECT_TIMEOUT_DEFAULT,
                request: REQUEST_TIMEOUT_DEFAULT,
                discovery: DISCOVERY_TIMEOUT_DEFAULT,
            },
            defaults: ReadOptions::default(),
            session: None,
        }
    }

    /// This client, tracking what it sees in `session` from now on.
    pub fn with_session(mut self, session: Session) -> Client {
        self.session = Some(Arc::new(Mutex::new(session)));
        self
    }

    /// A snapshot of the session, if this client has one.
    pub fn session(&self) -> Option<Session> {
        self.session.as_ref().map(|s| lock(s).clone())
    }

    /// The normalized endpoints (`http://host:port`).
    pub fn endpoints(&self) -> &[String] {
        &self.nodes.endpoints
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// A client that sends every call to `endpoint` (followers forward what they cannot
    /// serve). Shares this client's connections and session.
    pub fn pinned(&self, endpoint: &str) -> Result<Client> {
        let endpoint = normalize_endpoint(endpoint)?;
        Ok(Client {
            nodes: Arc::new(Nodes::new(vec![endpoint], true)),
            ..self.clone()
        })
    }

    /// The leader's endpoint, from the cache or by asking the endpoints.
    pub async fn leader(&self) -> Result<String> {
        if let Some(leader) = self.nodes.cached_leader() {
            return Ok(leader);
        }
        self.discover_leader()
            .await
            .ok_or_else(|| ClientError::NoLeader {
                message: "no endpoint reported a reachable leader".into(),
                leader_id: None,
            })
    }

    // -- mutations ---------------------------------------------------------------------

    pub async fn write(&self, request: WriteRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn forget(&self, request: ForgetRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn revoke(&self, request: RevokeRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn reinstate(&self, request: ReinstateRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn flag_stale(&self, request: FlagStaleRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn supersede(&self, request: SupersedeRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    /// All operations in one entry, or none (a 409 names the failing `op_index`).
    pub async fn batch(&self, request: BatchRequest) -> Result<BatchResult> {
        self.mutate(request).await
    }

    /// Sends any mutation: assigns a `request_id` if missing, retries under it, and
    /// records the result in the session.
    pub async fn mutate<M: Mutation>(&self, mut request: M) -> Result<M::Output> {
        let request_id = request
            .request_id_mut()
            .get_or_insert_with(new_request_id)
            .clone();
        let call = Call {
            method: Method::POST,
            route: Route::Leader,
            path: &["v1", M::PATH],
            query: Vec::new(),
            body: Some(encode(&request)?),
            mode: Mode::Mutation(request_id),
            timeout: Some(self.timeouts.request),
        };
        let answer: M::Output = self.call(&call, read_json).await?;
        self.observe(&answer);
        Ok(answer)
    }

    // -- reads -------------------------------------------------------------------------

    /// Reads `key`. Options left `None` take the client defaults. 404 `not_found` for a
    /// key that was never written.
    pub async fn read(&self, key: &str, options: ReadOptions) -> Result<ReadResponse> {
        self.session_read(ReadRequest::new(key, options), Some(key))
            .await
    }

    /// Lists keys under a prefix; the request's read options default to the client's.
    pub async fn list(&self, request: ListRequest) -> Result<ListResponse> {
        self.session_read(request, None).await
    }

    /// Notes whose anchors match the cues; the request's read options default to the
    /// client's.
    pub async fn recall(&self, request: RecallRequest) -> Result<RecallResponse> {
        self.session_read(request, None).await
    }

    /// Value record vs retention record of `key` on the node that serves the read (pin the
    /// client to a node to probe that replica).
    pub async fn probe(&self, key: &str, options: ReadOptions) -> Result<ProbeResponse> {
        self.session_read(ProbeRequest::new(key, options), Some(key))
            .await
    }

    /// The key's events, oldest first.
    pub async fn history(&self, key: &str, options: ReadOptions) -> Result<HistoryResponse> {
        self.session_read(HistoryRequest::new(key, options), Some(key))
            .await
    }

    /// A tombstone by id; tombstones are kept forever. The read options (defaulting to the
    /// client's) go as query parameters; `bounded`/`any` reads spread over the nodes.
    pub async fn tombstone(&self, id: &str, options: ReadOptions) -> Result<Tombstone> {
        let options = self.effective(options);
        let mut query = Vec::new();
        if let Some(consistency) = options.consistency {
            query.push(("consistency", consistency.as_str().to_string()));
        }
        if let Some(ms) = options.max_staleness_ms {
            query.push(("max_staleness_ms", ms.to_string()));
        }
        if let Some(revision) = options.min_revision {
            query.push(("min_revision", revision.to_string()));
        }
        let call = Call {
            method: Method::GET,
            route: read_route(options.consistency),
            path: &["v1", "tombstones", id],
            query,
            body: None,
            mode: Mode::Read,
            timeout: Some(self.timeouts.request),
        };
        self.call(&call, read_json).await
    }

    /// Changes under `prefix` from `from_revision` (inclusive) on, in revision order.
    /// Without `from_revision` the watch starts after the leader's applied index, so even
    /// the first reconnect leaves no gap. See [`crate::watch`] for resumption.
    pub async fn watch(
        &self,
        prefix: Option<&str>,
        from_revision: Option<u64>,
    ) -> Result<WatchStream> {
        let from_revision = match from_revision {
            Some(revision) => revision,
            None => self.leader_status().await?.applied_index + 1,
        };
        watch::open(self.clone(), prefix.map(str::to_string), from_revision).await
    }

    pub(crate) async fn open_watch(
        &self,
        prefix: Option<&str>,
        from_revision: u64,
    ) -> Result<ChunkStream> {
        let mut query = vec![("from_revision", from_revision.to_string())];
        query.extend(prefix.map(|p| ("prefix", p.to_string())));
        let call = Call {
            method: Method::GET,
            route: Route::Leader,
            path: &["v1", "watch"],
            query,
            body: None,
            mode: Mode::Read,
            timeout: None,
        };
        self.call(&call, |response| {
            futures::future::ready(Ok(chunk_stream(response)))
        })
        .await
    }

    // -- cluster -----------------------------------------------------------------------

    /// `GET /cluster/status` of one node (one attempt).
    pub async fn status(&self, endpoint: &str) -> Result<ClusterStatus> {
        let endpoint = normalize_endpoint(endpoint)?;
        self.status_at(&endpoint, self.timeouts.request).await
    }

    /// `POST /cluster/init`, sent to the next endpoint (any member can initialize).
    pub async fn init(&self, request: InitRequest) -> Result<MembershipResponse> {
        self.admin(Route::Spread, "init", encode(&request)?).await
    }

    /// `POST /cluster/join` at the leader: the node joins as a learner, then is promoted.
    pub async fn join(&self, node: NodeSpec) -> Result<MembershipResponse> {
        self.admin(Route::Leader, "join", encode(&node)?).await
    }

    /// `POST /cluster/remove` at the leader.
    pub async fn remove(&self, id: u64) -> Result<MembershipResponse> {
        self.admin(Route::Leader, "remove", encode(&RemoveRequest { id })?)
            .await
    }

    /// `POST /cluster/compact` on one node: snapshot, purge its log, compact its store.
    pub async fn compact(&self, endpoint: &str) -> Result<CompactResponse> {
        let endpoint = normalize_endpoint(endpoint)?;
        let call = Call {
            method: Method::POST,
            route: Route::At(&endpoint),
            path: &["cluster", "compact"],
            query: Vec::new(),
            body: None,
            mode: Mode::Once,
            timeout: Some(COMPACT_TIMEOUT),
        };
        self.call(&call, read_json).await
    }

    /// `GET /metrics` of one node (Prometheus text).
    pub async fn metrics(&self, endpoint: &str) -> Result<String> {
        let endpoint = normalize_endpoint(endpoint)?;
        let body = self.get_once(&endpoint, &["metrics"]).await?;
        String::from_utf8(body).map_err(|e| ClientError::decode("metrics", e))
    }

    /// `GET /healthz` of one node: `Ok` once it serves its ports.
    pub async fn healthz(&self, endpoint: &str) -> Result<()> {
        let endpoint = normalize_endpoint(endpoint)?;
        self.get_once(&endpoint, &["healthz"]).await.map(drop)
    }

    // -- internals ---------------------------------------------------------------------

    /// A consistency-carrying read with the session rules of SPEC §3: send the session
    /// revision as `min_revision`, check the answer against the session, and on a stale
    /// answer (or a node that cannot serve that fresh) re-read linearizably at the leader.
    async fn session_read<Q: ReadQuery>(
        &self,
        mut request: Q,
        absent_key: Option<&str>,
    ) -> Result<Q::Output> {
        let mut options = self.effective(request.options());
        let mut retries = 0;
        loop {
            options.min_revision = options.min_revision.max(self.session_revision());
            request.set_options(options);
            let stale = match self.query(&request, options.consistency).await {
                Ok(answer) => match self.check(&answer) {
                    Ok(()) => {
                        self.observe(&answer);
                        return Ok(answer);
                    }
                    Err(regression) => regression,
                },
                Err(err) => self.stale_or_fail(err, absent_key)?,
            };
            if retries >= SESSION_RETRIES_MAX {
                return Err(stale);
            }
            retries += 1;
            options = ReadOptions {
                consistency: Some(Consistency::Linearizable),
                max_staleness_ms: None,
                min_revision: options.min_revision,
            };
        }
    }

    /// `Ok(err)` when a failed read should be retried at the leader under the session
    /// rules; `Err(err)` when it is the answer.
    fn stale_or_fail(
        &self,
        err: ClientError,
        absent_key: Option<&str>,
    ) -> std::result::Result<ClientError, ClientError> {
        let Some(session) = &self.session else {
            return Err(err);
        };
        match (&err, absent_key) {
            (ClientError::NotFound { .. }, Some(key)) => lock(session)
                .check_absent(key)
                .map_or_else(Ok, |()| Err(err)),
            (ClientError::StaleRead { .. }, _) => Ok(err),
            _ => Err(err),
        }
    }

    async fn query<Q: ReadQuery>(
        &self,
        request: &Q,
        consistency: Option<Consistency>,
    ) -> Result<Q::Output> {
        let call = Call {
            method: Method::POST,
            route: read_route(consistency),
            path: &["v1", Q::PATH],
            query: Vec::new(),
            body: Some(encode(request)?),
            mode: Mode::Read,
            timeout: Some(self.timeouts.request),
        };
        self.call(&call, read_json).await
    }

    async fn admin(
        &self,
        route: Route<'_>,
        operation: &str,
        body: Vec<u8>,
    ) -> Result<MembershipResponse> {
        let call = Call {
            method: Method::POST,
            route,
            path: &["cluster", operation],
            query: Vec::new(),
            body: Some(body),
            mode: Mode::Admin,
            timeout: Some(self.timeouts.request),
        };
        self.call(&call, read_json).await
    }

    async fn get_once(&self, endpoint: &str, path: &[&str]) -> Result<Vec<u8>> {
        let call = Call {
            method: Method::GET,
            route: Route::At(endpoint),
            path,
            query: Vec::new(),
            body: None,
            mode: Mode::Once,
            timeout: Some(self.timeouts.request),
        };
        self.call(&call, read_body).await
    }

    /// One status request, straight to `endpoint`: leader discovery runs inside
    /// [`Client::call`], so this must not go through it.
    async fn status_at(&self, endpoint: &str, timeout: Duration) -> Result<ClusterStatus> {
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

    async fn leader_status(&self) -> Result<ClusterStatus> {
        let leader = self.base_for(Route::Leader).await;
        self.status_at(&leader, self.timeouts.request).await
    }

    /// One pass over the endpoints asking each for the leader; caches and returns the
    /// first leader endpoint reported.
    async fn discover_leader(&self) -> Option<String> {
        for _ in 0..self.nodes.endpoints.len() {
            let endpoint = self.nodes.next_endpoint();
            let Ok(status) = self.status_at(&endpoint, self.timeouts.discovery).await else {
                continue;
            };
            if let Some(leader) = leader_endpoint(&status, &endpoint) {
                self.nodes.set_leader(&leader);
                return Some(leader);
            }
        }
        None
    }

    async fn base_for(&self, route: Route<'_>) -> String {
        match route {
            Route::At(endpoint) => endpoint.to_string(),
            _ if self.nodes.pinned => self.nodes.endpoints[0].clone(),
            Route::Spread => self.nodes.next_endpoint(),
            Route::Leader => match self.nodes.cached_leader() {
                Some(leader) => leader,
                // No leader known: any node will forward, or say `no_leader` (retried).
                None => match self.discover_leader().await {
                    Some(leader) => leader,
                    None => self.nodes.next_endpoint(),
                },
            },
        }
    }

    /// Runs `call` with the retry rules of its mode; `finish` turns a success response
    /// into the result (its failures are retried like the request's own).
    async fn call<T, F, Fut>(&self, call: &Call<'_>, finish: F) -> Result<T>
    where
        F: Fn(reqwest::Response) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let retries_max = match call.mode {
            Mode::Once => 0,
            _ => self.retry.retries_max,
        };
        let mut may_have_applied = false;
        let mut retries = 0;
        loop {
            let base = self.base_for(call.route).await;
            let err = match self.attempt(&base, call).await {
                Ok(response) => match finish(response).await {
                    Ok(value) => return Ok(value),
                    Err(err) => err,
                },
                Err(err) => err,
            };
            // A definite answer is authoritative even after an attempt with an unknown
            // outcome: the retry carried the same request_id, so the node replayed it.
            if !err.is_transient() {
                return Err(err);
            }
            if matches!(call.route, Route::Leader) {
                self.nodes.forget_leader(&base);
            }
            may_have_applied |= err.may_have_applied();
            let unsafe_to_retry = call.mode == Mode::Admin && err.may_have_applied();
            if unsafe_to_retry || retries >= retries_max {
                return Err(give_up(&call.mode, err, may_have_applied));
            }
            retries += 1;
            tokio::time::sleep(self.retry.backoff(retries)).await;
        }
    }

    /// One HTTP exchange: `Ok` for a 2xx response, the parsed error otherwise.
    async fn attempt(&self, base: &str, call: &Call<'_>) -> Result<reqwest::Response> {
        let url = endpoint_url(base, call.path, &call.query)?;
        let mut request = self.http.request(call.method.clone(), url);
        if let Some(timeout) = call.timeout {
            request = request.timeout(timeout);
        }
        if let Some(body) = &call.body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let response = request
            .send()
            .await
            .map_err(|e| ClientError::transport(base, &e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| ClientError::transport(base, &e))?;
        Err(ClientError::from_response(status.as_u16(), &body))
    }

    fn effective(&self, options: ReadOptions) -> ReadOptions {
        ReadOptions {
            consistency: options.consistency.or(self.defaults.consistency),
            max_staleness_ms: options.max_staleness_ms.or(self.defaults.max_staleness_ms),
            min_revision: options.min_revision,
        }
    }

    /// The session revision, if there is one worth sending (0 asks for nothing).
    fn session_revision(&self) -> Option<u64> {
        let session = self.session.as_ref()?;
        Some(lock(session).revision()).filter(|revision| *revision > 0)
    }

    fn observe(&self, answer: &impl Observable) {
        if let Some(session) = &self.session {
            lock(session).observe(answer);
        }
    }

    fn check(&self, answer: &impl Observable) -> Result<()> {
        match &self.session {
            Some(session) => lock(session).check(answer),
            None => Ok(()),
        }
    }
}

/// Where a read goes: linearizable reads to the leader, the others to any node.
fn read_route(consistency: Option<Consistency>) -> Route<'static> {
    match consistency {
        Some(Consistency::Bounded | Consistency::Any) => Route::Spread,
        Some(Consistency::Linearizable) | None => Route::Leader,
    }
}

/// The error a call ends with once it stops retrying.
fn give_up(mode: &Mode, last: ClientError, may_have_applied: bool) -> ClientError {
    match mode {
        Mode::Mutation(request_id) if may_have_applied => ClientError::OutcomeUnknown {
            request_id: request_id.clone(),
            message: last.to_string(),
        },
        _ => last,
    }
}

/// The endpoint of the leader `status` names: the asked endpoint itself when it is the
/// leader (its advertised address may be a bind address), else the leader's `client_addr`.
fn leader_endpoint(status: &ClusterStatus, asked: &str) -> Option<String> {
    let leader_id = status.leader_id?;
    if leader_id == status.node_id {
        return Some(asked.to_string());
    }
    let node = status.nodes.iter().find(|n| n.id == leader_id)?;
    normalize_endpoint(&node.client_addr).ok()
}

/// `host:port` or `http://host:port[/]` → `http://host:port`.
pub(crate) fn normalize_endpoint(endpoint: &str) -> Result<String> {
    let endpoint = endpoint.trim();
    let with_scheme = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    let url = Url::parse(&with_scheme)
        .map_err(|e| ClientError::invalid_input(format!("endpoint {endpoint:?}: {e}")))?;
    if url.scheme() != "http" {
        return Err(ClientError::invalid_input(format!(
            "endpoint {endpoint:?}: only http:// is supported (this build has no TLS)"
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ClientError::invalid_input(format!(
            "endpoint {endpoint:?}: no host"
        )));
    }
    Ok(with_scheme.trim_end_matches('/').to_string())
}

fn endpoint_url(base: &str, path: &[&str], query: &[(&str, String)]) -> Result<Url> {
    let mut url = Url::parse(base)
        .map_err(|e| ClientError::invalid_input(format!("endpoint {base:?}: {e}")))?;
    url.path_segments_mut()
        .map_err(|()| ClientError::invalid_input(format!("endpoint {base:?}: not a base URL")))?
        .pop_if_empty()
        .extend(path);
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(query);
    }
    Ok(url)
}

/// A fresh 128-bit `request_id`, 32 hex characters: the Unix time in milliseconds (48 bits)
/// followed by 80 random bits.
///
/// Why time first: every replica keeps one dedup record per id in a sorted store (a
/// RocksDB skiplist, then SST files), and ids that arrive in increasing order are inserted
/// next to the previous ones instead of at a random place, and expire from one end. With
/// uniformly random ids the dedup insert was one of three random-position inserts per
/// write on every node; `node/examples/apply_bench` (100k keys, 32 upserts per entry,
/// three interleaved runs of a build that switched between the two formats) measured 12.8 /
/// 14.2 / 11.8 µs per upsert with random ids and 11.0 / 11.5 / 10.6 with time-ordered ones. Uniqueness rests on the 80 random bits
/// within one millisecond; a clock that steps back costs locality, never correctness.
pub fn new_request_id() -> String {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let random: [u8; 10] = rand::random();
    format!("{:012x}{}", unix_ms & 0xffff_ffff_ffff, hex::encode(random))
}

fn encode(value: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(value)
        .map_err(|e| ClientError::invalid_input(format!("encode request: {e}")))
}

async fn read_body(response: reqwest::Response) -> Result<Vec<u8>> {
    let endpoint = response.url().to_string();
    response
        .bytes()
        .await
        .map(|b| b.to_vec())
        .map_err(|e| ClientError::transport(&endpoint, &e))
}

async fn read_json<T: DeserializeOwned>(response: reqwest::Response) -> Result<T> {
    let body = read_body(response).await?;
    serde_json::from_slice(&body).map_err(|e| ClientError::decode(std::any::type_name::<T>(), e))
}

fn chunk_stream(response: reqwest::Response) -> ChunkStream {
    let endpoint = response.url().to_string();
    Box::pin(response.bytes_stream().map(move |chunk| {
        chunk
            .map(|b| b.to_vec())
            .map_err(|e| ClientError::transport(&endpoint, &e))
    }))
}

/// Locks a mutex, ignoring poisoning: the guarded data (leader hint, session marks) is
/// valid after any panic, since every update is a single assignment or max.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::fake_node::{FakeNode, Reply, Seen};
    use crate::session::KeyMark;

    const RETRIES: u32 = 3;

    fn fast(endpoints: Vec<String>) -> ClientBuilder {
        Client::builder(endpoints)
            .retries_max(RETRIES)
            .backoff_ms(1, 5)
            .request_timeout(Duration::from_secs(5))
    }

    fn pinned(node: &FakeNode) -> Client {
        let client = fast(vec![node.addr.clone()]).build().unwrap();
        client.pinned(&node.addr).unwrap()
    }

    fn ok(value: Value) -> Reply {
        Reply::Json(200, value.to_string())
    }

    fn mutation_result(version: u64, revision: u64) -> Value {
        json!({"key": "k", "state": "active", "version": version, "generation": 1,
               "forget_epoch": 0, "revision": revision, "replayed": false})
    }

    fn read_answer(version: u64, applied: u64) -> Value {
        json!({"key": "k", "state": "active", "version": version, "generation": 1,
               "forget_epoch": 0, "revision": version, "create_revision": 1, "value": "v",
               "meta": {"actor": "a", "source": null, "anchors": [], "tags": [], "updated_at": 1},
               "rendered": "[k] v",
               "served": {"node_id": 1, "role": "follower", "consistency": "any",
                          "applied_index": applied, "leader_commit_index": applied,
                          "ms_since_leader_contact": 1}})
    }

    fn body(seen: &Seen) -> Value {
        serde_json::from_str(&seen.body).unwrap()
    }

    fn write_request() -> WriteRequest {
        WriteRequest::new("k", json!("v"), "agent")
    }

    #[test]
    fn endpoints_are_normalized() {
        assert_eq!(
            normalize_endpoint("127.0.0.1:7401").unwrap(),
            "http://127.0.0.1:7401"
        );
        assert_eq!(normalize_endpoint(" http://h:1/ ").unwrap(), "http://h:1");
        assert!(normalize_endpoint("https://h:1").is_err());
        assert!(normalize_endpoint("").is_err());
        assert!(Client::new(Vec::new()).is_err());
        let url = endpoint_url("http://h:1", &["v1", "tombstones", "a/b c"], &[]).unwrap();
        assert_eq!(url.as_str(), "http://h:1/v1/tombstones/a%2Fb%20c");
    }

    #[test]
    fn backoff_stays_within_bounds() {
        let policy = RetryPolicy {
            retries_max: 9,
            backoff_ms_min: 10,
            backoff_ms_max: 100,
        };
        for attempt in 1..=64 {
            let ms = policy.backoff(attempt).as_millis() as u64;
            let ceiling = (10u64 << (attempt - 1).min(20)).min(100);
            assert!(
                ms >= ceiling / 2 && ms <= ceiling,
                "attempt {attempt}: {ms}"
            );
        }
    }

    #[test]
    fn request_ids_are_128_bit_hex_led_by_the_time_in_milliseconds() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let (a, b) = (new_request_id(), new_request_id());
        for id in [&a, &b] {
            assert_eq!(id.len(), 32, "{id}");
            assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
            let ms = u64::from_str_radix(&id[..12], 16).unwrap();
            assert!(
                ms >= before && ms < before + 60_000,
                "{id}: {ms} vs {before}"
            );
        }
        assert_ne!(a, b);
        assert!(a[..12] <= b[..12], "time prefix went back: {a} then {b}");
    }

    #[tokio::test]
    async fn a_lost_answer_is_retried_with_the_same_request_id_and_payload() {
        let node = FakeNode::start(|_, i| match i {
            0 => Reply::Drop,
            _ => ok(mutation_result(1, 5)),
        })
        .await;
        let result = pinned(&node).write(write_request()).await.unwrap();
        assert_eq!(result.revision, 5);
        let seen = node.seen();
        assert_eq!(seen.len(), 2);
        assert_eq!(
            seen[0].body, seen[1].body,
            "retry resends the identical payload"
        );
        let request_id = body(&seen[0])["request_id"].as_str().unwrap().to_string();
        assert_eq!(request_id.len(), 32);
    }

    #[tokio::test]
    async fn a_caller_request_id_is_kept() {
        let node = FakeNode::start(|_, _| ok(mutation_result(1, 5))).await;
        let mut request = write_request();
        request.request_id = Some("mine".into());
        pinned(&node).write(request).await.unwrap();
        assert_eq!(body(&node.seen()[0])["request_id"], "mine");
    }

    #[tokio::test]
    async fn never_answered_mutations_are_outcome_unknown() {
        let node = FakeNode::start(|_, _| Reply::Drop).await;
        let err = pinned(&node).write(write_request()).await.unwrap_err();
        let seen = node.seen();
        assert_eq!(seen.len(), RETRIES as usize + 1);
        let sent_id = body(&seen[0])["request_id"].as_str().unwrap().to_string();
        assert!(seen
            .iter()
            .all(|s| body(s)["request_id"] == sent_id.as_str()));
        assert!(
            matches!(&err, ClientError::OutcomeUnknown { request_id, .. } if *request_id == sent_id),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn unreachable_nodes_are_a_transport_failure_not_an_unknown_outcome() {
        let client = fast(vec!["127.0.0.1:1".into()]).build().unwrap();
        let err = client
            .pinned("127.0.0.1:1")
            .unwrap()
            .write(write_request())
            .await;
        assert!(
            matches!(err, Err(ClientError::Transport { sent: false, .. })),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn definite_errors_are_not_retried() {
        let node = FakeNode::start(|_, _| {
            Reply::Json(
                409,
                r#"{"error":{"code":"version_conflict","message":"m","current_version":4}}"#.into(),
            )
        })
        .await;
        let err = pinned(&node).write(write_request()).await.unwrap_err();
        assert!(matches!(
            err,
            ClientError::VersionConflict {
                current_version: Some(4),
                ..
            }
        ));
        assert_eq!(node.seen().len(), 1);
    }

    #[tokio::test]
    async fn no_leader_is_retried_then_succeeds() {
        let node = FakeNode::start(|_, i| match i {
            0 => Reply::Json(
                503,
                r#"{"error":{"code":"no_leader","message":"election"}}"#.into(),
            ),
            _ => ok(mutation_result(1, 5)),
        })
        .await;
        assert!(pinned(&node).write(write_request()).await.is_ok());
        assert_eq!(node.seen().len(), 2);
    }

    #[tokio::test]
    async fn mutations_go_to_the_discovered_leader() {
        let leader = FakeNode::start(|_, _| ok(mutation_result(1, 5))).await;
        let leader_addr = leader.addr.clone();
        let follower = FakeNode::start(move |_, _| {
            ok(
                json!({"node_id": 1, "role": "follower", "leader_id": 2, "term": 3,
                      "last_log_index": 5, "commit_index": 5, "applied_index": 5,
                      "ms_since_leader_contact": 10, "voters": [1, 2], "learners": [],
                      "nodes": [{"id": 1, "client_addr": "127.0.0.1:1", "peer_addr": "x:1"},
                                {"id": 2, "client_addr": leader_addr, "peer_addr": "x:2"}],
                      "snapshot_index": 0, "log_purged_through": 0}),
            )
        })
        .await;
        let client = fast(vec![follower.addr.clone()]).build().unwrap();
        client.write(write_request()).await.unwrap();
        assert_eq!(client.leader().await.unwrap(), leader.addr);
        let asked: Vec<(String, String)> = follower
            .seen()
            .into_iter()
            .map(|s| (s.method, s.path))
            .collect();
        assert_eq!(asked, vec![("GET".into(), "/cluster/status".into())]);
        let written = &leader.seen()[0];
        assert_eq!(
            (written.method.as_str(), written.path.as_str()),
            ("POST", "/v1/write")
        );
    }

    #[tokio::test]
    async fn stale_session_reads_are_retried_linearizably() {
        let node = FakeNode::start(|_, i| match i {
            0 => ok(read_answer(2, 10)),
            _ => ok(read_answer(3, 10)),
        })
        .await;
        let mut session = Session::new();
        let known = KeyMark {
            generation: 1,
            forget_epoch: 0,
            version: 3,
            revision: 9,
        };
        session.observe_key("k", known);
        let client = pinned(&node).with_session(session);
        let options = ReadOptions {
            consistency: Some(Consistency::Any),
            ..ReadOptions::default()
        };
        let read = client.read("k", options).await.unwrap();
        assert_eq!(read.record.version, 3);
        let seen = node.seen();
        assert_eq!(body(&seen[0])["consistency"], "any");
        assert_eq!(body(&seen[0])["min_revision"], 9);
        assert_eq!(body(&seen[1])["consistency"], "linearizable");
        assert_eq!(body(&seen[1])["min_revision"], 9);
    }

    #[tokio::test]
    async fn persistent_regressions_fail_after_bounded_retries() {
        let node = FakeNode::start(|_, _| ok(read_answer(1, 10))).await;
        let mut session = Session::new();
        session.observe_key(
            "k",
            KeyMark {
                generation: 1,
                forget_epoch: 1,
                version: 2,
                revision: 8,
            },
        );
        let client = pinned(&node).with_session(session);
        let err = client.read("k", ReadOptions::default()).await.unwrap_err();
        assert!(
            matches!(err, ClientError::SessionRegression { .. }),
            "{err:?}"
        );
        assert_eq!(node.seen().len(), SESSION_RETRIES_MAX as usize + 1);
    }

    #[tokio::test]
    async fn reads_and_mutations_feed_the_session() {
        let node = FakeNode::start(|seen, _| match seen.path.as_str() {
            "/v1/write" => ok(mutation_result(4, 20)),
            _ => ok(read_answer(4, 25)),
        })
        .await;
        let client = pinned(&node).with_session(Session::new());
        client.write(write_request()).await.unwrap();
        assert_eq!(client.session().unwrap().revision(), 20);
        client.read("k", ReadOptions::default()).await.unwrap();
        assert_eq!(body(&node.seen()[1])["min_revision"], 20);
    }

    #[tokio::test]
    async fn not_found_for_a_key_the_session_saw_is_retried() {
        let node = FakeNode::start(|_, i| match i {
            0 => Reply::Json(
                404,
                r#"{"error":{"code":"not_found","message":"absent"}}"#.into(),
            ),
            _ => ok(read_answer(3, 10)),
        })
        .await;
        let mut session = Session::new();
        let mark = KeyMark {
            generation: 1,
            forget_epoch: 0,
            version: 3,
            revision: 3,
        };
        session.observe_key("k", mark);
        let client = pinned(&node).with_session(session);
        assert!(client.read("k", ReadOptions::default()).await.is_ok());
        // Without a session a 404 is the answer.
        let node = FakeNode::start(|_, _| {
            Reply::Json(
                404,
                r#"{"error":{"code":"not_found","message":"absent"}}"#.into(),
            )
        })
        .await;
        let err = pinned(&node).read("k", ReadOptions::default()).await;
        assert!(matches!(err, Err(ClientError::NotFound { .. })));
        assert_eq!(node.seen().len(), 1);
    }
}
