//! Relaying a request to the leader (followers accept every request, SPEC §5).

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::App;
use crate::consensus::NodeId;

/// Marks a relayed request: a node that receives one and is not the leader answers
/// `no_leader` instead of relaying again, so a stale view of the leader never loops.
pub const FORWARDED_BY: &str = "x-cairn-forwarded-by";

/// Time a relay allows beyond the leader's own deadline for the request, so that a
/// leader that answers at its deadline (a 504 at the commit timeout) is heard, not cut off.
const RELAY_MARGIN: Duration = Duration::from_millis(1000);

/// What relaying a request means for its outcome if the connection fails mid-way, and
/// how long the leader may take to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A mutation: once sent, a failure is `outcome_unknown`. The leader answers within
    /// the commit timeout.
    Mutation,
    /// A read or admin query: safe to fail plainly. The leader answers within its
    /// ReadIndex round and the wait for the applied index.
    Query,
    /// A join or a removal: safe to fail plainly. The leader may wait for a learner to
    /// catch up, then for the membership change to commit.
    Membership,
}

impl Kind {
    /// How long a relay waits for the leader's answer: the longest the leader itself
    /// takes for this kind of request, plus [`RELAY_MARGIN`]. A leader that stopped
    /// answering (paused, cut off) is given up on then at the latest, not after a fixed
    /// 30 s: a write relayed to it is 504 `outcome_unknown` close to the commit timeout,
    /// as one sent to the leader directly would be (SPEC §5 Extension), or sooner, once
    /// this node follows another leader ([`leader_moved_off`]).
    pub fn relay_timeout(self, config: &cairn_config::NodeConfig) -> Duration {
        let ms = Duration::from_millis;
        let commit = ms(config.batching.commit_timeout_ms);
        let leader_time = match self {
            Kind::Mutation => commit,
            // The ReadIndex round (two RPC timeouts at most) and two applied-index waits
            // (the round's index, then `min_revision`).
            Kind::Query => {
                ms(config.raft.rpc_timeout_ms) * 2 + ms(config.reads.min_revision_wait_ms) * 2
            }
            Kind::Membership => ms(config.raft.join_catch_up_timeout_ms) + commit,
        };
        leader_time + RELAY_MARGIN
    }
}

/// Relays `raw` to the same path on the leader (GET when `raw` is empty and `kind` is a
/// query, POST otherwise) and returns the leader's answer unchanged.
pub async fn to_leader(
    app: &App,
    headers: &HeaderMap,
    path: &str,
    raw: Bytes,
    kind: Kind,
    request_id: Option<&str>,
) -> Result<Response, ApiError> {
    let method = if raw.is_empty() && kind == Kind::Query {
        Method::GET
    } else {
        Method::POST
    };
    to_leader_as(app, method, headers, path, raw, kind, request_id).await
}

/// [`to_leader`] with the request's own method (DELETE, PUT of the auth endpoints).
///
/// The client's `Authorization` header travels with the request: the leader
/// authenticates it again (SPEC §8). Nothing else of the client's headers does.
pub async fn to_leader_as(
    app: &App,
    method: Method,
    headers: &HeaderMap,
    path: &str,
    raw: Bytes,
    kind: Kind,
    request_id: Option<&str>,
) -> Result<Response, ApiError> {
    if headers.contains_key(FORWARDED_BY) {
        return Err(ApiError::no_leader(
            "relayed here as to the leader, but this node is not the leader",
            app.leader().map(|(leader_id, _)| leader_id),
        ));
    }
    let Some((leader_id, leader)) = app.leader().filter(|(id, _)| *id != app.node_id) else {
        return Err(ApiError::no_leader("no leader is known", None));
    };
    let url = format!(
        "{}://{}{path}",
        app.config.client_scheme(),
        leader.client_addr
    );
    let timeout = kind.relay_timeout(&app.config);
    let mut request = app.forwarder.request(method, url).timeout(timeout);
    if let Some(token) = headers.get(header::AUTHORIZATION) {
        let mut token = token.clone();
        token.set_sensitive(true);
        request = request.header(header::AUTHORIZATION, token);
    }
    let request = request
        .header(FORWARDED_BY, app.node_id.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(raw);
    let failed = |e: reqwest::Error, doing: &str| {
        let why = if e.is_timeout() {
            format!(
                "{doing} leader {leader_id}: no answer within {} ms",
                timeout.as_millis()
            )
        } else {
            format!("{doing} leader {leader_id}: {}", with_causes(&e))
        };
        if kind == Kind::Mutation && !e.is_connect() {
            ApiError::outcome_unknown(why, request_id)
        } else {
            ApiError::no_leader(why, Some(leader_id))
        }
    };
    let relay = async {
        let resp = request.send().await.map_err(|e| failed(e, "relaying to"))?;
        let status =
            StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let body = resp
            .bytes()
            .await
            .map_err(|e| failed(e, "reading the answer of"))?;
        Ok((status, [(header::CONTENT_TYPE, "application/json")], body).into_response())
    };
    tokio::select! {
        answer = relay => answer,
        () = leader_moved_off(app, leader_id) => Err(relay_abandoned(app, kind, leader_id, request_id)),
    }
}

/// `err` with its causes: reqwest's own words ("error sending request for url …") say
/// nothing of why; the causes do (refused, reset, a certificate not valid for the
/// leader's address), and are what an operator needs to mend a relay that fails.
fn with_causes(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(current) = cause {
        text.push_str(": ");
        text.push_str(&current.to_string());
        cause = current.source();
    }
    text
}

/// The error of a relay to `leader_id` given up on because this node no longer takes it
/// for the leader: `outcome_unknown` for a mutation, else `no_leader` naming the leader
/// this node follows now, if any (never the one it gave up on).
fn relay_abandoned(app: &App, kind: Kind, leader_id: NodeId, request_id: Option<&str>) -> ApiError {
    let why =
        format!("relaying to leader {leader_id}: this node no longer takes it for the leader");
    if kind == Kind::Mutation {
        return ApiError::outcome_unknown(why, request_id);
    }
    let now = app.leader().map(|(id, _)| id).filter(|id| *id != leader_id);
    ApiError::no_leader(why, now)
}

/// Completes once this node no longer takes `leader_id` for the leader: it stands for
/// election or follows another. A relay to a leader that stopped answering (paused, cut
/// off) is given up on then, as soon as the followers notice, rather than at its timeout;
/// a client retries it at the leader the nodes name by then. Never completes if Raft
/// stopped (the relay's own timeout ends it). Watches openraft's server metrics, which
/// change only with the vote, the role, the leader or the membership, not with every
/// applied entry: a relay waiting under load is not woken per entry to look again.
async fn leader_moved_off(app: &App, leader_id: NodeId) {
    let mut metrics = app.raft.server_metrics();
    let raft_stopped = metrics
        .wait_for(|m| m.current_leader != Some(leader_id))
        .await
        .is_err();
    if raft_stopped {
        std::future::pending::<()>().await;
    }
}
