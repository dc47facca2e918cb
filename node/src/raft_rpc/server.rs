//! The server side of the peer transport: bincode in, bincode out, behind the peer proof
//! ([`super::proof`]), which refuses a caller before its body is read.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::proof::{self, PeerGate, ServerProof};
use super::{APPEND_PATH, CONTENT_TYPE, READ_INDEX_PATH, SNAPSHOT_PATH, VOTE_PATH};
use crate::consensus::{NodeId, Raft, TypeConfig};
use crate::store::codec;

/// Largest peer request body: an append payload (at most `raft.max_payload_bytes`, itself
/// at most 64 MiB, or one larger entry of up to `batching.bytes_max`) or one snapshot chunk
/// (at most 64 MiB) fits well within it. Enforced while the body streams in (axum's
/// `Bytes` extractor reads through a length-limited body and answers 413 past it), so a
/// larger body is never buffered whole, whatever its `content-length` says.
pub const PEER_BODY_BYTES_MAX: usize = 256 << 20;
/// A ReadIndex round must finish within this, or the follower's token request fails.
const READ_INDEX_TIMEOUT: Duration = Duration::from_secs(2);

/// The peer routes. `proof` runs first on every route: a request without it never
/// reaches a handler, so its body is neither read nor decoded and Raft never sees it.
pub fn router(raft: Raft, proof: ServerProof) -> Router {
    let gate = PeerGate {
        proof,
        raft: raft.clone(),
    };
    Router::new()
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(READ_INDEX_PATH, post(read_index))
        .route_layer(axum::middleware::from_fn_with_state(gate, proof::require))
        .layer(axum::extract::DefaultBodyLimit::max(PEER_BODY_BYTES_MAX))
        .with_state(raft)
}

// The error is the 400 answer itself, returned at once by the handler: boxing it would
// only add an allocation to a path that ends the request anyway.
#[allow(clippy::result_large_err)]
fn decode_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, Response> {
    codec::decode(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("undecodable peer request: {e}"),
        )
            .into_response()
    })
}

fn reply<T: Serialize>(value: &T) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], codec::encode(value)).into_response()
}

async fn append(State(raft): State<Raft>, body: Bytes) -> Response {
    match decode_body::<AppendEntriesRequest<TypeConfig>>(&body) {
        Ok(req) => reply(&raft.append_entries(req).await),
        Err(r) => r,
    }
}

async fn vote(State(raft): State<Raft>, body: Bytes) -> Response {
    match decode_body::<VoteRequest<NodeId>>(&body) {
        Ok(req) => reply(&raft.vote(req).await),
        Err(r) => r,
    }
}

async fn snapshot(State(raft): State<Raft>, body: Bytes) -> Response {
    match decode_body::<InstallSnapshotRequest<TypeConfig>>(&body) {
        Ok(req) => reply(&raft.install_snapshot(req).await),
        Err(r) => r,
    }
}

/// ReadIndex for a follower's bounded-read token: confirms leadership with a quorum and
/// answers the index every read must have applied. Only a leader answers `Ok`.
async fn read_index(State(raft): State<Raft>) -> Response {
    let answer: Result<u64, String> =
        match tokio::time::timeout(READ_INDEX_TIMEOUT, raft.get_read_log_id()).await {
            Ok(Ok((read_log_id, _applied))) => Ok(read_log_id.map(|id| id.index).unwrap_or(0)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("read index timed out".to_string()),
        };
    reply(&answer)
}
