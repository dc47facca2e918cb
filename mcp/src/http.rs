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

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use cairn_client::{BearerToken, ClientError};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

use crate::args::MCP_PATH;
use crate::gateway::{Caller, Gateway};
use crate::server::CairnMcp;

/// Serves MCP on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    gateway: Arc<Gateway>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    let config = StreamableHttpServerConfig::default().with_allowed_hosts(allowed_hosts(address));
    let stop_sessions = config.cancellation_token.clone();
    let sessions = gateway.clone();
    let service = StreamableHttpService::new(
        move || Ok(CairnMcp::new(sessions.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(gateway, authenticate));
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

/// Attaches the request's [`Caller`], or answers 401/503.
async fn authenticate(
    State(gateway): State<Arc<Gateway>>,
    mut request: Request,
    next: Next,
) -> Response {
    // Marked sensitive: anything that prints the request's headers later shows no token.
    if let Some(value) = request.headers_mut().get_mut(AUTHORIZATION) {
        value.set_sensitive(true);
    }
    let header = request.headers().get(AUTHORIZATION).cloned();
    match caller_of(&gateway, header).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(err) => refusal(&err),
    }
}

async fn caller_of(gateway: &Gateway, header: Option<HeaderValue>) -> Result<Caller, ClientError> {
    let Some(header) = header else {
        return match gateway.auth_on().await? {
            true => Err(ClientError::Unauthenticated {
                message: "this cairn cluster has auth on: send Authorization: Bearer TOKEN".into(),
            }),
            false => Ok(gateway.anonymous()),
        };
    };
    let token = header
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or_else(|| ClientError::Unauthenticated {
            message: "the Authorization header is not `Bearer TOKEN`".into(),
        })?;
    let token = BearerToken::new(token).map_err(|_| ClientError::Unauthenticated {
        message: "the bearer token is malformed".into(),
    })?;
    gateway.caller_for(token).await
}

/// The HTTP answer to a request that cannot proceed: 401 for a missing or refused
/// token, 503 when the cluster could not tell. The body has the cluster's error shape.
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
