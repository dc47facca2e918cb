//! The server side of the peer transport: bincode in, bincode out, behind the peer proof
//! ([`super::proof`]), which refuses a caller before its body is read, and the node's
//! admission ([`super::admission`]), which refuses a vote, append or snapshot that this
//! node may not answer before Raft sees it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use cairn_api::ErrorCode;
use cairn_config::PeerProof;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::admission::{Admission, AdmissionState, AdmitRequest};
use super::proof::{self, PeerGate, ServerProof, REFUSAL_LOG_PERIOD};
use super::vouch::Vouches;
use super::{
    ADMIT_PATH, APPEND_PATH, APPLIED_PATH, CONTENT_TYPE, MEMBER_PATH, PROOF_MODE_PATH,
    READ_INDEX_PATH, SNAPSHOT_PATH, VOTE_PATH,
};
use crate::api::error::ApiError;
use crate::consensus::{NodeId, Raft, TypeConfig, Vote};
use crate::log_throttle::LogThrottle;
use crate::metrics::Metrics;
use crate::store::codec;

/// Largest peer request body: an append payload (at most `raft.max_payload_bytes`, itself
/// at most 64 MiB, or one larger entry of up to `batching.bytes_max`) or one snapshot chunk
/// (at most 64 MiB) fits well within it. Enforced while the body streams in (axum's
/// `Bytes` extractor reads through a length-limited body and stops past it; the answer is
/// 413 `too_large`), so a larger body is never buffered whole, whatever its
/// `content-length` says.
pub const PEER_BODY_BYTES_MAX: usize = 256 << 20;
/// A ReadIndex round must finish within this, or the follower's token request fails.
const READ_INDEX_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a `POST /raft/applied` waits for its index before answering `false`.
pub const APPLIED_WAIT: Duration = Duration::from_millis(400);

/// The three requests that carry a vote and pass the admission check.
type Append = AppendEntriesRequest<TypeConfig>;
type Ballot = VoteRequest<NodeId>;
type Snapshot = InstallSnapshotRequest<TypeConfig>;

/// What the peer handlers share.
#[derive(Clone)]
struct Peer {
    raft: Raft,
    admission: Arc<Admission>,
    metrics: Arc<Metrics>,
}

/// The peer routes. `proof` runs first on every route: a request without it never
/// reaches a handler, so its body is neither read nor decoded and Raft never sees it.
pub fn router(
    raft: Raft,
    proof: ServerProof,
    admission: Arc<Admission>,
    vouches: Vouches,
    metrics: Arc<Metrics>,
) -> Router {
    let mode = proof.mode();
    let gate = PeerGate {
        proof,
        raft: raft.clone(),
        vouches,
        metrics: metrics.clone(),
        refusals_logged: LogThrottle::new(REFUSAL_LOG_PERIOD),
    };
    let peer = Peer {
        raft,
        admission,
        metrics,
    };
    Router::new()
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(READ_INDEX_PATH, post(read_index))
        .route(ADMIT_PATH, post(admit))
        .route(MEMBER_PATH, post(member))
        .route(APPLIED_PATH, post(applied))
        .route(
            PROOF_MODE_PATH,
            post(move || {
                let answer: Result<PeerProof, String> = Ok(mode);
                async move { reply(&answer) }
            }),
        )
        .route_layer(axum::middleware::from_fn_with_state(gate, proof::require))
        .fallback(unknown_peer_route)
        .method_not_allowed_fallback(crate::api::error::method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(PEER_BODY_BYTES_MAX))
        .with_state(peer)
}

/// An unknown path on the peer port: 404 `not_found` in the client port's error body, as
/// every other peer refusal (an unknown method on a known path is 405 the same way).
async fn unknown_peer_route(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no such peer endpoint: {}", uri.path()),
    )
}

/// The request body, or the refusal in the client port's error body (SPEC §5): 413
/// `too_large` with `field: "body"` and `limit` past [`PEER_BODY_BYTES_MAX`], 400
/// `invalid_request` for a body that cannot be read. The message names no header, so
/// never the peer secret.
// The error is the answer itself, returned at once by the handler: boxing it would only
// add an allocation to a path that ends the request anyway.
#[allow(clippy::result_large_err)]
fn peer_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, Response> {
    body.map_err(|rejection| {
        let error = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                ErrorCode::TooLarge,
                format!("peer request body over {PEER_BODY_BYTES_MAX} bytes"),
            )
            .with("field", "body")
            .with("limit", PEER_BODY_BYTES_MAX)
        } else {
            ApiError::invalid("unreadable peer request body").with("field", "body")
        };
        error.into_response()
    })
}

/// The decoded request, or 400 `invalid_request` (`field: "body"`) in the client port's
/// error body.
#[allow(clippy::result_large_err)]
fn decode_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, Response> {
    let body = peer_body(body)?;
    codec::decode(&body).map_err(|e| {
        ApiError::invalid(format!("undecodable peer request: {e}"))
            .with("field", "body")
            .into_response()
    })
}

fn reply<T: Serialize>(value: &T) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], codec::encode(value)).into_response()
}

async fn append(State(peer): State<Peer>, body: Result<Bytes, BytesRejection>) -> Response {
    let admitted = peer.decode_admitted(body, Admission::check_leader, |r: &Append| &r.vote);
    match admitted {
        Ok(req) => reply(&peer.raft.append_entries(req).await),
        Err(refusal) => refusal,
    }
}

async fn vote(State(peer): State<Peer>, body: Result<Bytes, BytesRejection>) -> Response {
    let admitted = peer.decode_admitted(body, Admission::check_candidate, |r: &Ballot| &r.vote);
    match admitted {
        Ok(req) => reply(&peer.raft.vote(req).await),
        Err(refusal) => refusal,
    }
}

async fn snapshot(State(peer): State<Peer>, body: Result<Bytes, BytesRejection>) -> Response {
    let admitted = peer.decode_admitted(body, Admission::check_leader, |r: &Snapshot| &r.vote);
    match admitted {
        Ok(req) => reply(&peer.raft.install_snapshot(req).await),
        Err(refusal) => refusal,
    }
}

impl Peer {
    /// The decoded request if this node's admission allows the `vote` it carries, else the
    /// refusal: 400 for a body that does not decode ([`decode_body`]), 409
    /// `invalid_transition` for a vote the admission rules out, both before Raft sees it,
    /// so term, vote and log stay as they were. An admission refusal is counted in
    /// `cairn_peer_requests_not_admitted_total` and logged at debug only, since a leader
    /// retries a refused node several times a second.
    #[allow(clippy::result_large_err)]
    fn decode_admitted<Req: DeserializeOwned>(
        &self,
        body: Result<Bytes, BytesRejection>,
        check: fn(&Admission, &Vote) -> Result<(), String>,
        vote: fn(&Req) -> &Vote,
    ) -> Result<Req, Response> {
        let req = decode_body::<Req>(body)?;
        check(&self.admission, vote(&req)).map_err(|reason| {
            Metrics::inc(&self.metrics.peer_not_admitted);
            tracing::debug!(%reason, "peer request refused by admission");
            ApiError::new(ErrorCode::InvalidTransition, reason).into_response()
        })?;
        Ok(req)
    }
}

/// `POST /raft/member`: whether this node's membership (its latest, committed or not)
/// lists the node id in the body as a voter or learner; the answer a node asks for before
/// it lets in a node its own membership does not list yet ([`super::vouch`]).
async fn member(State(peer): State<Peer>, body: Result<Bytes, BytesRejection>) -> Response {
    let id = match decode_body::<NodeId>(body) {
        Ok(id) => id,
        Err(refusal) => return refusal,
    };
    let metrics = peer.raft.metrics();
    let listed = metrics
        .borrow()
        .membership_config
        .membership()
        .get_node(&id)
        .is_some();
    reply(&Ok::<bool, String>(listed))
}

/// `POST /raft/admit`: answers this node's [`AdmissionState`], after admitting it if
/// asked ([`AdmitRequest::Admit`]; a node admitted once keeps its first admission). A
/// failed write of the admission file is an `Err` answer, and the node stays as it was.
async fn admit(State(peer): State<Peer>, body: Result<Bytes, BytesRejection>) -> Response {
    let req = match decode_body::<AdmitRequest>(body) {
        Ok(req) => req,
        Err(r) => return r,
    };
    let answer: Result<AdmissionState, String> = match req {
        AdmitRequest::Ask => Ok(peer.admission.state()),
        AdmitRequest::Claim(floor) => peer
            .admission
            .claim(floor)
            .map(AdmissionState::AdmittedBy)
            .map_err(|e| {
                tracing::error!(error = %e, "could not write the admission file");
                format!("could not write the admission file: {e}")
            }),
        AdmitRequest::Admit(floor) => peer.admission.admit(floor).map_err(|e| {
            tracing::error!(error = %e, "could not write the admission file");
            format!("could not write the admission file: {e}")
        }),
    };
    reply(&answer)
}

/// `POST /raft/applied`: `true` once this node has applied the log index in the body,
/// `false` if it has not within [`APPLIED_WAIT`].
async fn applied(State(peer): State<Peer>, body: Result<Bytes, BytesRejection>) -> Response {
    let index = match decode_body::<u64>(body) {
        Ok(index) => index,
        Err(refusal) => return refusal,
    };
    let reached = peer
        .raft
        .wait(Some(APPLIED_WAIT))
        .applied_index_at_least(Some(index), "an index a leader asked about")
        .await
        .is_ok();
    reply(&Ok::<bool, String>(reached))
}

/// ReadIndex for a follower's bounded-read token: confirms leadership with a quorum and
/// answers the index every read must have applied. Only a leader answers `Ok`.
async fn read_index(State(peer): State<Peer>) -> Response {
    let raft = peer.raft;
    let answer: Result<u64, String> =
        match tokio::time::timeout(READ_INDEX_TIMEOUT, raft.get_read_log_id()).await {
            Ok(Ok((read_log_id, _applied))) => Ok(read_log_id.map(|id| id.index).unwrap_or(0)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("read index timed out".to_string()),
        };
    reply(&answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The answer of a route that reads its body like the peer routes, behind `limit`
    /// (served on loopback: the body limit is enforced by the server's body stream).
    async fn answer(limit: usize, body: &'static [u8]) -> (u16, Value) {
        let router = Router::new()
            .route(
                "/",
                post(|body: Result<Bytes, BytesRejection>| async move {
                    match decode_body::<u64>(body) {
                        Ok(n) => n.to_string().into_response(),
                        Err(refusal) => refusal,
                    }
                }),
            )
            .layer(axum::extract::DefaultBodyLimit::max(limit));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let response = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(format!("http://{addr}/"))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let bytes = response.bytes().await.unwrap();
        server.abort();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    #[tokio::test]
    async fn refusals_are_the_json_error_body() {
        let (status, body) = answer(4, &[0; 5]).await;
        assert_eq!(status, 413);
        assert_eq!(body["error"]["code"], "too_large", "{body}");
        assert_eq!(
            (&body["error"]["field"], &body["error"]["limit"]),
            (&json!("body"), &json!(PEER_BODY_BYTES_MAX)),
            "{body}"
        );
        let (status, body) = answer(64, &[]).await;
        assert_eq!(status, 400);
        assert_eq!(body["error"]["code"], "invalid_request", "{body}");
        assert_eq!(body["error"]["field"], "body", "{body}");
    }
}
