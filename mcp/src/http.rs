//! Streamable HTTP mode: the MCP endpoint at `/mcp` (rmcp's `StreamableHttpService`
//! mounted in axum), behind a layer that finds each request's [`Caller`] from its
//! `Authorization: Bearer` token.
//!
//! - A token is checked with the cluster on every request (`whoami`); one the cluster
//!   does not know, or no longer knows (rotated, deleted), is answered HTTP 401, and its
//!   client is not kept.
//! - No token: HTTP 401 when the cluster has auth on (asked of the cluster, see
//!   [`crate::gateway`]); with auth off the request goes on without a token.
//! - The layer attaches the caller to the HTTP request; the handler reads it from there
//!   ([`crate::server`]). A request only ever acts with its own token.
//! - The layer also attaches the request's [`Budget`], started on arrival: a tool call
//!   answers within `--call-timeout-ms` of its request, the token check included.
//! - An MCP session belongs to the principal that opened it ([`SessionOwners`]): a
//!   request naming another principal's `Mcp-Session-Id` is answered 404, as an unknown
//!   session is, so a session id that leaked gives no one else the session's
//!   notifications (which carry key names) nor a way to close it.
//! - Behind it, [`guard_message`] answers a posted message that cannot be decoded (too
//!   long, nested too deep, not JSON-RPC) as stdio mode does ([`crate::framing`]): a
//!   refused `tools/call` is a tool result with `isError`, not a bare HTTP error.
//! - A `DELETE` that closes a session is answered 204 ([`closed_session_as_no_content`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use cairn_client::{BearerToken, ClientError};
use futures::StreamExt;
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

use crate::args::MCP_PATH;
use crate::framing::{Incoming, MESSAGE_BYTES_MAX};
use crate::gateway::{Caller, Gateway};
use crate::server::{refuse_listen, CairnMcp};
use crate::tools::budget::Budget;

/// Serves MCP on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts(address))
        .with_max_request_body_bytes(MESSAGE_BYTES_MAX);
    let stop_sessions = config.cancellation_token.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    let layer = Arc::new(Layer {
        gateway: gateway.clone(),
        owners: SessionOwners::new(sessions.clone()),
    });
    let service =
        StreamableHttpService::new(move || Ok(CairnMcp::new(gateway.clone())), sessions, config);
    // Route layers: a path other than `/mcp` is 404 before any of them reads the request
    // (a client pointed at the wrong URL learns so, rather than getting a JSON-RPC error).
    let router = Router::new()
        .route_service(MCP_PATH, service)
        .route_layer(axum::middleware::from_fn(closed_session_as_no_content))
        .route_layer(axum::middleware::from_fn(guard_message))
        .route_layer(axum::middleware::from_fn_with_state(layer, authenticate));
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            stop_sessions.cancel();
        })
        .await
}

/// `Host` headers accepted (rmcp refuses others, against DNS rebinding): loopback names
/// and the listening address itself.
fn allowed_hosts(address: SocketAddr) -> Vec<String> {
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    hosts.push(address.ip().to_string());
    hosts
}

/// What the layer in front of `/mcp` needs.
struct Layer {
    gateway: Arc<Gateway>,
    owners: SessionOwners,
}

/// Attaches the request's [`Caller`] and admits it to its session, or answers 401/503
/// (the caller) or 404 (a session of another principal).
async fn authenticate(
    State(layer): State<Arc<Layer>>,
    mut request: Request,
    next: Next,
) -> Response {
    // Marked sensitive: anything that prints the request's headers later shows no token.
    for (name, value) in request.headers_mut().iter_mut() {
        if name == AUTHORIZATION {
            value.set_sensitive(true);
        }
    }
    let header = match single_authorization(request.headers()) {
        Ok(header) => header,
        Err(err) => return refusal(&err),
    };
    // A tool call's time counts from here, so the token check comes out of it.
    let budget = layer.gateway.budget();
    match caller_of(&layer.gateway, header, &budget).await {
        Ok(caller) => {
            request.extensions_mut().insert(budget);
            layer.owners.admit(caller, request, next).await
        }
        Err(err) => refusal(&err),
    }
}

/// Most bytes of a posted message read to find whom to answer; a longer body is refused
/// with a bare 413 (only its first [`MESSAGE_BYTES_MAX`] bytes are ever kept).
const BODY_SCAN_BYTES_MAX: usize = 4 * MESSAGE_BYTES_MAX;

/// Reads a posted message as it arrives; one that cannot be decoded is answered here
/// (JSON, 200; 202 for a notification), and so is a `subscriptions/listen` request naming
/// a key the caller may not read (before rmcp could acknowledge it, [`refuse_listen`]);
/// any other goes on to rmcp.
async fn guard_message(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let mut chunks = body.into_data_stream();
    let mut message = Incoming::default();
    while let Some(chunk) = chunks.next().await {
        let Ok(chunk) = chunk else {
            return (StatusCode::BAD_REQUEST, "the request body broke off").into_response();
        };
        message.push(&chunk);
        if message.bytes() > BODY_SCAN_BYTES_MAX {
            let refusal = format!("request body: more than {BODY_SCAN_BYTES_MAX} bytes");
            return (StatusCode::PAYLOAD_TOO_LARGE, refusal).into_response();
        }
    }
    match message.decode(message.kept()) {
        Ok(decoded) => match refuse_listen(&decoded, parts.extensions.get::<Caller>()).await {
            Some(refusal) => axum::Json(refusal).into_response(),
            None => {
                next.run(Request::from_parts(parts, message.into_kept().into()))
                    .await
            }
        },
        Err(Some(answer)) => axum::Json(answer).into_response(),
        Err(None) => StatusCode::ACCEPTED.into_response(),
    }
}

/// Answers a session's `DELETE` that closed it (rmcp's 202 Accepted) with 204 No Content:
/// the Python MCP SDK takes only 200 and 204 for a closed session and logs `Session
/// termination failed: 202` at every close otherwise. Other answers pass unchanged.
async fn closed_session_as_no_content(request: Request, next: Next) -> Response {
    let closing = request.method() == Method::DELETE;
    let response = next.run(request).await;
    if closing && response.status() == StatusCode::ACCEPTED {
        return StatusCode::NO_CONTENT.into_response();
    }
    response
}

/// Open MCP sessions a server keeps owners for; past it, a new session closes the
/// oldest (its client gets 404 and opens another, as after a restart).
const SESSIONS_MAX: usize = 1024;

/// Which principal opened each MCP session (`None`: no principal, auth off).
///
/// - A session is recorded when the answer to a request without `Mcp-Session-Id` (an
///   `initialize`) carries a new one, under that request's caller.
/// - A request naming a recorded session of another principal is 404, the answer to an
///   unknown session, before rmcp sees it. A session not recorded here is unknown to
///   rmcp too (every session is opened through this layer), and rmcp answers it.
/// - At most [`SESSIONS_MAX`] are kept: sessions rmcp no longer has are dropped first,
///   then the oldest is closed.
struct SessionOwners {
    manager: Arc<LocalSessionManager>,
    owners: Mutex<OwnerTable>,
}

#[derive(Default)]
struct OwnerTable {
    /// Session id → (owner, the order it was opened in).
    by_session: HashMap<String, (Option<String>, u64)>,
    opened: u64,
}

impl SessionOwners {
    fn new(manager: Arc<LocalSessionManager>) -> SessionOwners {
        SessionOwners {
            manager,
            owners: Mutex::default(),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, OwnerTable> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn admit(&self, caller: Caller, mut request: Request, next: Next) -> Response {
        let principal = caller.principal().map(str::to_string);
        request.extensions_mut().insert(caller);
        let session = request
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        let Some(session) = session else {
            let response = next.run(request).await;
            if let Some(opened) = response.headers().get(HEADER_SESSION_ID) {
                if let Ok(opened) = opened.to_str() {
                    self.record(opened, principal).await;
                }
            }
            return response;
        };
        let owner = self
            .table()
            .by_session
            .get(&session)
            .map(|(owner, _)| owner.clone());
        if owner.is_some_and(|owner| owner != principal) {
            tracing::info!("refused a request on another principal's MCP session");
            return (StatusCode::NOT_FOUND, "Session not found").into_response();
        }
        let closing = request.method() == Method::DELETE;
        let response = next.run(request).await;
        if closing && response.status().is_success() {
            self.table().by_session.remove(&session);
        }
        response
    }

    async fn record(&self, session: &str, principal: Option<String>) {
        if self.table().by_session.len() >= SESSIONS_MAX {
            self.make_room().await;
        }
        let mut table = self.table();
        table.opened += 1;
        let order = table.opened;
        table
            .by_session
            .insert(session.to_string(), (principal, order));
    }

    /// Drops the sessions rmcp no longer has; closes the oldest if that freed nothing.
    async fn make_room(&self) {
        let ids: Vec<String> = self.table().by_session.keys().cloned().collect();
        for id in ids {
            if !self
                .manager
                .has_session(&id.as_str().into())
                .await
                .unwrap_or(false)
            {
                self.table().by_session.remove(&id);
            }
        }
        let oldest = {
            let table = self.table();
            if table.by_session.len() < SESSIONS_MAX {
                return;
            }
            table
                .by_session
                .iter()
                .min_by_key(|(_, (_, order))| *order)
                .map(|(id, _)| id.clone())
        };
        if let Some(id) = oldest {
            self.table().by_session.remove(&id);
            if let Err(err) = self.manager.close_session(&id.as_str().into()).await {
                tracing::warn!(error = %err, "closing the oldest MCP session failed");
            }
        }
    }
}

async fn caller_of(
    gateway: &Gateway,
    header: Option<HeaderValue>,
    budget: &Budget,
) -> Result<Caller, ClientError> {
    let Some(header) = header else {
        return match gateway.auth_on(budget).await? {
            true => Err(ClientError::Unauthenticated {
                message: "this cairn cluster has auth on: send Authorization: Bearer TOKEN".into(),
                details: Default::default(),
            }),
            false => Ok(gateway.anonymous()),
        };
    };
    let token = header.to_str().ok().and_then(bearer_token).ok_or_else(|| {
        ClientError::Unauthenticated {
            message: "the Authorization header is not `Bearer TOKEN`".into(),
            details: Default::default(),
        }
    })?;
    let token = BearerToken::new(token).map_err(|_| ClientError::Unauthenticated {
        message: "the bearer token is malformed".into(),
        details: Default::default(),
    })?;
    gateway.caller_for(token, budget).await
}

/// The request's `Authorization` header, if it has one. Two are refused, as the nodes
/// refuse them (docs/security.md, "Headers"): a proxy in front of this server might read
/// the other one, and the two would disagree about who the caller is.
fn single_authorization(headers: &HeaderMap) -> Result<Option<HeaderValue>, ClientError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let first = values.next().cloned();
    match values.next() {
        None => Ok(first),
        Some(_) => Err(ClientError::Unauthenticated {
            message: "more than one Authorization header: send exactly one".into(),
            details: Default::default(),
        }),
    }
}

/// The token of an `Authorization` value of the `Bearer` scheme, whose name is matched in
/// any case (RFC 9110 §11.1), as the nodes match it.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The HTTP answer to a request that cannot proceed: 401 for a missing or refused
/// token, 503 when the cluster could not tell about a token it never confirmed. The body
/// has the cluster's error shape.
fn refusal(err: &ClientError) -> Response {
    let status = match err {
        ClientError::Unauthenticated { .. } => StatusCode::UNAUTHORIZED,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let shown = err.to_string();
    let message = shown
        .strip_prefix(&format!("{}: ", err.name()))
        .unwrap_or(&shown);
    let body = json!({"error": {"code": err.name(), "message": message}});
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn open(owners: &SessionOwners, principal: &str) -> String {
        let (id, _transport) = owners.manager.create_session().await.expect("session");
        owners.record(&id, Some(principal.to_string())).await;
        id.to_string()
    }

    async fn exists(owners: &SessionOwners, id: &str) -> bool {
        owners
            .manager
            .has_session(&id.into())
            .await
            .expect("lookup")
    }

    #[tokio::test]
    async fn past_the_bound_sessions_rmcp_dropped_go_first_then_the_oldest_is_closed() {
        let owners = SessionOwners::new(Arc::new(LocalSessionManager::default()));
        let mut ids = Vec::new();
        for _ in 0..SESSIONS_MAX {
            ids.push(open(&owners, "agent").await);
        }
        owners
            .manager
            .close_session(&ids[5].as_str().into())
            .await
            .expect("close");
        let newer = open(&owners, "agent").await;
        assert_eq!(owners.table().by_session.len(), SESSIONS_MAX);
        assert!(
            exists(&owners, &ids[0]).await,
            "a dropped session made the room"
        );
        assert!(!owners.table().by_session.contains_key(&ids[5]));

        let newest = open(&owners, "other").await;
        assert_eq!(owners.table().by_session.len(), SESSIONS_MAX);
        assert!(!exists(&owners, &ids[0]).await, "the oldest was closed");
        assert!(!owners.table().by_session.contains_key(&ids[0]));
        for id in [&ids[1], &newer, &newest] {
            assert!(exists(&owners, id).await && owners.table().by_session.contains_key(id));
        }
        assert_eq!(
            owners.table().by_session[&newest].0.as_deref(),
            Some("other")
        );
    }
}
