//! Cluster administration: per-node status, metrics, health and compaction (one attempt
//! at the node named), and membership changes (retried only when they cannot have reached
//! the node: they are not deduplicated).

use std::time::Duration;

use reqwest::Method;

use super::retry::Mode;
use super::routing::Route;
use super::transport::{encode, read_body, read_json, Call};
use super::{Client, Result};
use crate::api::{
    ClusterStatus, CompactResponse, Health, InitRequest, MembershipResponse, NodeSpec,
    RemoveRequest,
};
use crate::error::ClientError;

/// Compaction snapshots and rewrites RocksDB files; it may take minutes on a big store.
const COMPACT_TIMEOUT: Duration = Duration::from_secs(300);
/// A join waits for the new node to catch up (the node's `raft.join_catch_up_timeout_ms`,
/// 60 s by default) and then for its promotion to commit; a removal sent meanwhile waits
/// for the join, since the leader makes one membership change at a time.
const MEMBERSHIP_CHANGE_TIMEOUT: Duration = Duration::from_secs(120);

impl Client {
    /// `GET /cluster/status` of one node (one attempt).
    pub async fn status(&self, endpoint: &str) -> Result<ClusterStatus> {
        let endpoint = self.endpoint(endpoint)?;
        self.status_at(&endpoint, self.timeouts.request).await
    }

    /// `POST /cluster/init`, sent to the next endpoint (any member can initialize). With
    /// `request.auth` set, auth is on from the first entry and the answer's `auth` carries
    /// the admin's token, shown this once (SPEC §8).
    pub async fn init(&self, request: InitRequest) -> Result<MembershipResponse> {
        let timeout = self.timeouts.request;
        self.admin(Route::Spread, "init", encode(&request)?, timeout)
            .await
    }

    /// `POST /cluster/join` at the leader the nodes name now (not a cached one: the call
    /// may wait [`MEMBERSHIP_CHANGE_TIMEOUT`] there): the node joins as a learner, then is promoted.
    pub async fn join(&self, node: NodeSpec) -> Result<MembershipResponse> {
        self.admin(
            Route::CurrentLeader,
            "join",
            encode(&node)?,
            MEMBERSHIP_CHANGE_TIMEOUT,
        )
        .await
    }

    /// `POST /cluster/remove` at the leader the nodes name now; it may wait
    /// [`MEMBERSHIP_CHANGE_TIMEOUT`] there behind a join under way.
    pub async fn remove(&self, id: u64) -> Result<MembershipResponse> {
        let body = encode(&RemoveRequest { id })?;
        self.admin(
            Route::CurrentLeader,
            "remove",
            body,
            MEMBERSHIP_CHANGE_TIMEOUT,
        )
        .await
    }

    /// `POST /cluster/compact` on one node: snapshot, purge its log, compact its store.
    pub async fn compact(&self, endpoint: &str) -> Result<CompactResponse> {
        let endpoint = self.endpoint(endpoint)?;
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
        let endpoint = self.endpoint(endpoint)?;
        let body = self.get_once(&endpoint, &["metrics"]).await?;
        String::from_utf8(body).map_err(|e| ClientError::decode("metrics", e))
    }

    /// `GET /healthz` of one node (one attempt): its id and role once it serves its ports
    /// with Raft running; an error otherwise (the node answers 503 once Raft has stopped).
    pub async fn healthz(&self, endpoint: &str) -> Result<Health> {
        let endpoint = self.endpoint(endpoint)?;
        let body = self.get_once(&endpoint, &["healthz"]).await?;
        serde_json::from_slice(&body).map_err(|e| ClientError::decode("healthz", e))
    }

    async fn admin(
        &self,
        route: Route<'_>,
        operation: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<MembershipResponse> {
        let call = Call {
            method: Method::POST,
            route,
            path: &["cluster", operation],
            query: Vec::new(),
            body: Some(body),
            mode: Mode::Admin,
            timeout: Some(timeout),
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
}
