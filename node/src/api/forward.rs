//! Relaying a request to the leader (followers accept every request, SPEC §5).

use axum::body::Bytes;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use cairn_api::ErrorCode;
use serde_json::json;

use super::error::ApiError;
use super::App;

/// Marks a relayed request: a node that receives one and is not the leader answers
/// `no_leader` instead of relaying again, so a stale view of the leader never loops.
pub const FORWARDED_BY: &str = "x-cairn-forwarded-by";

/// What relaying a request means for its outcome if the connection fails mid-way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A mutation: once sent, a failure is `outcome_unknown`.
    Mutation,
    /// A read or admin query: safe to fail plainly.
    Query,
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
        return Err(ApiError::new(
            ErrorCode::NoLeader,
            "relayed here as to the leader, but this node is not the leader",
        ));
    }
    let Some((leader_id, leader)) = app.leader().filter(|(id, _)| *id != app.node_id) else {
        return Err(ApiError::new(ErrorCode::NoLeader, "no leader is known"));
    };
    let url = format!(
        "{}://{}{path}",
        app.config.client_scheme(),
        leader.client_addr
    );
    let mut request = app.forwarder.request(method, url);
    if let Some(token) = headers.get(header::AUTHORIZATION) {
        let mut token = token.clone();
        token.set_sensitive(true);
        request = request.header(header::AUTHORIZATION, token);
    }
    let sent = request
        .header(FORWARDED_BY, app.node_id.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(raw)
        .send()
        .await;
    let resp = match sent {
        Ok(resp) => resp,
        Err(e) if e.is_connect() => {
            return Err(ApiError::new(
                ErrorCode::NoLeader,
                format!("leader {leader_id} unreachable: {e}"),
            )
            .with("leader_id", json!(leader_id)))
        }
        Err(e) if kind == Kind::Mutation => {
            return Err(ApiError::outcome_unknown(
                format!("relay to leader {leader_id}: {e}"),
                request_id,
            ))
        }
        Err(e) => {
            return Err(ApiError::new(
                ErrorCode::NoLeader,
                format!("relay to leader {leader_id}: {e}"),
            )
            .with("leader_id", json!(leader_id)))
        }
    };
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    match resp.bytes().await {
        Ok(body) => {
            Ok((status, [(header::CONTENT_TYPE, "application/json")], body).into_response())
        }
        Err(e) if kind == Kind::Mutation => Err(ApiError::outcome_unknown(
            format!("reading the leader's answer: {e}"),
            request_id,
        )),
        Err(e) => Err(ApiError::new(
            ErrorCode::NoLeader,
            format!("reading the leader's answer: {e}"),
        )
        .with("leader_id", json!(leader_id))),
    }
}
