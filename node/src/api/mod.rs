//! The client-facing HTTP API (SPEC §5, §6): JSON in, JSON out, unknown fields rejected.
//!
//! - `auth`: who is asking (bearer token → principal), what it may do, `/v1/auth/*`.
//! - `error`: the `{"error": {...}}` body and the mapping of every internal error to it.
//! - `body`: the JSON extractor (strict, size-limited, keeps the raw bytes for forwarding).
//! - `forward`: relays a request to the leader.
//! - `mutations`: write, forget, revoke, reinstate, flag-stale, supersede, batch.
//! - `reads`: read, probe, history, tombstones, list, recall, with consistency barriers.
//! - `watch`: the change feed as Server-Sent Events.
//! - `cluster`: init, join, remove, status, compact, healthz, metrics.
//! - `routes`: the route table, which builds both the router and the OpenAPI document.
//! - `openapi`: `GET /openapi.json`, generated from the route table and the wire types.

mod addresses;
mod admit;
pub mod auth;
pub mod body;
pub mod cluster;
pub mod error;
pub mod forward;
pub mod mutations;
pub mod openapi;
pub mod reads;
pub mod routes;
pub mod watch;

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::Router;
use cairn_config::NodeConfig;
use openraft::ServerState;
use tokio::sync::watch as tokio_watch;

use crate::consensus::batcher::Batcher;
use crate::consensus::reads::ReadGate;
use crate::consensus::snapshot_trigger::SnapshotTrigger;
use crate::consensus::view::StateView;
use crate::consensus::{NodeId, NodeInfo, Raft};
use crate::metrics::Metrics;
use crate::raft_rpc::admission::Admission;
use crate::raft_rpc::network::PeerClient;
use crate::serve::ConnectionBound;

/// Everything a handler may touch. Cloned cheaply (`Arc`).
pub struct App {
    pub node_id: NodeId,
    pub config: NodeConfig,
    pub raft: Raft,
    pub batcher: Batcher,
    pub reads: Arc<ReadGate>,
    /// Storage, through consensus: the applied state's reads, the feed, log positions,
    /// store statistics. Handlers never hold a store handle.
    pub view: StateView,
    pub forwarder: reqwest::Client,
    /// Peer RPCs of this node's own (a joining node's proof mode and admission).
    pub peers: PeerClient,
    /// Whether this node may answer Raft; cluster routes admit the nodes they add.
    pub admission: Arc<Admission>,
    pub metrics: Arc<Metrics>,
    /// Snapshots requested because the log grew by `raft.snapshot_log_bytes`.
    pub snapshot_trigger: SnapshotTrigger,
    /// One compaction at a time per node.
    pub compacting: tokio::sync::Mutex<()>,
    /// One membership change (join or remove) at a time on the leader: openraft refuses a
    /// change while another is uncommitted, so a second join of the same node, sent while
    /// the first waits for its learner, would be refused though the join succeeds. Held,
    /// it waits and then finds the node a member (a join of a member is idempotent).
    pub changing_membership: tokio::sync::Mutex<()>,
    /// The client port's open connections (`limits.connections_max`).
    pub connections: Arc<ConnectionBound>,
    /// One permit per open `GET /v1/watch` stream (`limits.watchers_max`).
    pub watchers: Arc<tokio::sync::Semaphore>,
    pub shutdown: tokio_watch::Receiver<bool>,
}

pub type SharedApp = Arc<App>;

impl App {
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    pub fn role(&self) -> &'static str {
        role_name(self.raft.metrics().borrow().state)
    }

    /// `ms_since_leader_contact` (SPEC §3), the same in `served` and `/cluster/status`:
    /// the age of the node's newest quorum-confirmed read token; a leader that never had
    /// one falls back to openraft's time since a quorum last acknowledged it.
    pub fn ms_since_leader_contact(&self) -> Option<u64> {
        self.reads.token_age_ms().or_else(|| {
            let metrics = self.raft.metrics().borrow().clone();
            (metrics.state == ServerState::Leader)
                .then_some(metrics.millis_since_quorum_ack)
                .flatten()
        })
    }

    /// The highest index this node knows committed, the same in `served`, status and
    /// metrics: its log's saved commit index, and never below what it has applied (only
    /// committed entries are applied, and a snapshot installed or a restart can leave the
    /// saved index behind the applied one until the next commit).
    pub fn commit_index(&self) -> u64 {
        self.view.committed_index().max(self.reads.applied_index())
    }

    /// The current leader's id and addresses, as this node knows them
    /// ([`known_leader_node`](crate::consensus::known_leader_node)).
    pub fn leader(&self) -> Option<(NodeId, NodeInfo)> {
        crate::consensus::known_leader_node(&self.raft.metrics().borrow())
    }
}

pub fn role_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// Counts every 401 and 403 this node answers in `cairn_auth_refused_total`, and every 400
/// and 413 in `cairn_bad_requests_total`, whichever check refused it (one place, so no
/// refusal path, a body that does not decode included, can forget to count). A 401 names
/// the scheme it wants (`WWW-Authenticate: Bearer`, which RFC 9110 §11.6.1 requires of
/// every 401), relayed ones included.
async fn count_refusals(State(app): State<SharedApp>, mut response: Response) -> Response {
    match response.status().as_u16() {
        401 => {
            Metrics::inc(&app.metrics.auth_refused);
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        403 => Metrics::inc(&app.metrics.auth_refused),
        400 | 413 => Metrics::inc(&app.metrics.bad_requests),
        _ => {}
    }
    response
}

/// The client port's router: every route of the table ([`routes::routes`]), then the
/// typed 404 and 405 answers, the refusal counter and the body limit.
pub fn router(app: SharedApp) -> Router {
    openapi::build();
    let body_max = body::body_bytes_max(&app.config.limits);
    let served = routes::routes()
        .into_iter()
        .fold(Router::new(), |router, route| {
            router.route(route.path, route.gated(&app))
        });
    served
        .fallback(error::unknown_route)
        .layer(axum::middleware::map_response_with_state(
            app.clone(),
            count_refusals,
        ))
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(body_max))
        .with_state(app)
}
