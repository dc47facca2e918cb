//! `/v1/auth/*` (SPEC §8): turning auth on, principals, grants, whoami.
//!
//! Changes are Raft entries proposed by the leader (a follower relays the request with
//! its token). A new token is generated on the leader, only its sha256 enters the log,
//! and the token itself is in exactly one answer.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairn_access::{validate, wire, AccessChange, AccessError, Token};
use cairn_api::{
    AclChanged, AuthEnabled, CreatePrincipalRequest, CreatedPrincipal, EnableAuthRequest,
    RotatedToken, SetGrantsRequest, WhoAmI,
};

use super::{caller, caller_with, catch_up, presented, Caller};
use crate::api::body::{JsonBody, NoFields, StrictPath};
use crate::api::error::{write_failure, ApiError};
use crate::api::forward::{self, Kind};
use crate::api::{App, SharedApp};
use crate::consensus::access::propose;
use crate::consensus::NodeId;

type Result<T> = std::result::Result<T, ApiError>;

/// Proposes `change` and waits for its verdict on this node (the leader).
///
/// The change is first applied to a copy of the leader's applied state: one that state
/// refuses (auth already on, a name taken, the last admin) is answered without touching
/// the log. The state machine still judges it at apply, for a change that raced another.
async fn apply(app: &App, change: AccessChange) -> Result<u64> {
    let mut dry_run = (*app.view.access()).clone();
    cairn_access::change::apply(&mut dry_run, &change, 0).map_err(ApiError::from)?;
    let (kind, subject) = (change.kind(), change.subject().to_string());
    let by = change.author().unwrap_or("-").to_string();
    let verdict = propose(&app.raft, change, app.config.dedup_retention_ms)
        .await
        .map_err(|e| write_failure(e, None))?;
    let acl_revision = verdict.map_err(ApiError::from)?;
    tracing::info!(change = %kind, principal = %subject, %by, acl_revision, "access changed");
    spread(app).await;
    Ok(acl_revision)
}

/// Longest an access change's answer waits for the other members to apply it. A healthy
/// member applies it within a heartbeat's round trip (one is sent at once); the bound is
/// what a member that is stopped or cut off costs each change.
const SPREAD_WAIT: Duration = Duration::from_millis(500);

/// Waits until every other member has applied what this leader has (the access change
/// just applied here), at most [`SPREAD_WAIT`], so the change holds on every reachable
/// node by the time its request returns.
///
/// - Why: mutations, linearizable reads, whoami and opening a watch meet the change at
///   once anyway (the leader checks, or the node catches up first), but an `any` read
///   and `GET /cluster/status` authenticate against their own node's applied grants, so
///   a rotated token still passed on a follower for the milliseconds until it applied the
///   change. SPEC §8: the old token "stops at once".
/// - A heartbeat carries the new commit index to the followers at once, not at the next
///   tick.
/// - A member that cannot confirm in time (down, cut off, far behind) is logged and
///   skipped: the change is committed, and that node enforces it once it applies it
///   (docs/security.md, "Where each check runs").
async fn spread(app: &App) {
    let index = app.reads.applied_index();
    let _ = app.raft.trigger().heartbeat().await;
    let members: Vec<(NodeId, String)> = {
        let metrics = app.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let others = membership
            .nodes()
            .filter(|(id, _)| **id != app.node_id)
            .map(|(id, node)| (*id, node.peer_addr.clone()))
            .collect();
        others
    };
    let asked = members.iter().map(|(id, peer_addr)| async move {
        let answer = app.peers.applied(*id, peer_addr, index, SPREAD_WAIT).await;
        (*id, answer)
    });
    for (id, answer) in futures::future::join_all(asked).await {
        match answer {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                node = id,
                index,
                "an access change is not applied on a member yet: it answers with the old \
                 grants until it is"
            ),
            Err(error) => tracing::warn!(
                node = id,
                index,
                %error,
                "could not learn whether a member applied an access change"
            ),
        }
    }
}

/// Relays an access request to the leader (its route's gate refused a missing or
/// malformed token already).
async fn relay(
    app: &App,
    method: Method,
    headers: &HeaderMap,
    path: &str,
    raw: Bytes,
) -> Result<Response> {
    let kind = if method == Method::GET {
        Kind::Query
    } else {
        Kind::Mutation
    };
    forward::to_leader_as(app, method, headers, path, raw, kind, None).await
}

/// The caller of an admin request on the leader: authenticated, and holding `admin`.
fn admin(app: &App, headers: &HeaderMap) -> Result<String> {
    match caller(app, headers)? {
        Caller::Open => Err(AccessError::NotEnabled.into()),
        principal => {
            principal.require_admin()?;
            Ok(principal.name().unwrap_or_default().to_string())
        }
    }
}

/// Turns auth on for this cluster with `admin` as its first principal (the leader's
/// half of `POST /v1/auth/enable` and of `POST /cluster/init` with `auth`).
pub async fn enable_here(app: &App, admin: &str) -> Result<AuthEnabled> {
    validate::new_name("admin", admin)?;
    let token = Token::generate();
    let change = AccessChange::Enable {
        admin: admin.to_string(),
        token_hash: token.hash(),
    };
    let acl_revision = apply(app, change).await?;
    Ok(AuthEnabled {
        admin: admin.to_string(),
        token: token.reveal().to_string(),
        acl_revision,
    })
}

/// `POST /v1/auth/enable {admin}`: allowed while auth is off, by anyone who can reach
/// the port (the first admin's token is in the answer, once). Once auth is on, the
/// caller is authenticated as on every endpoint (401, then 403 without `admin`) before
/// the 409 that says auth is on already, on every node alike.
pub async fn enable(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<EnableAuthRequest>,
) -> Result<Response> {
    if !app.is_leader() {
        return relay(
            &app,
            Method::POST,
            &headers,
            "/v1/auth/enable",
            body.raw.clone(),
        )
        .await;
    }
    if app.view.access().enabled() {
        admin(&app, &headers)?;
    }
    Ok(Json(enable_here(&app, &body.value.admin).await?).into_response())
}

/// `POST /v1/auth/principals {name, grants}` → `{name, token}`.
pub async fn create(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<CreatePrincipalRequest>,
) -> Result<Response> {
    let req = &body.value;
    validate::new_name("name", &req.name)?;
    let grants = validate::grants(&req.grants)?;
    if !app.is_leader() {
        return relay(
            &app,
            Method::POST,
            &headers,
            "/v1/auth/principals",
            body.raw.clone(),
        )
        .await;
    }
    let by = admin(&app, &headers)?;
    let token = Token::generate();
    let change = AccessChange::AddPrincipal {
        by,
        name: req.name.clone(),
        grants,
        token_hash: token.hash(),
    };
    apply(&app, change).await?;
    Ok(Json(CreatedPrincipal {
        name: req.name.clone(),
        token: token.reveal().to_string(),
    })
    .into_response())
}

/// `POST /v1/auth/principals/{name}/rotate` → `{token}`; the old token stops at once.
pub async fn rotate(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    StrictPath(name): StrictPath<String>,
    _: NoFields,
) -> Result<Response> {
    validate::name("name", &name)?;
    if !app.is_leader() {
        let path = format!("/v1/auth/principals/{name}/rotate");
        return relay(&app, Method::POST, &headers, &path, Bytes::new()).await;
    }
    let by = admin(&app, &headers)?;
    let token = Token::generate();
    let change = AccessChange::RotateToken {
        by,
        name,
        token_hash: token.hash(),
    };
    apply(&app, change).await?;
    Ok(Json(RotatedToken {
        token: token.reveal().to_string(),
    })
    .into_response())
}

/// `DELETE /v1/auth/principals/{name}`: its token stops at once.
pub async fn delete(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    StrictPath(name): StrictPath<String>,
    _: NoFields,
) -> Result<Response> {
    validate::name("name", &name)?;
    if !app.is_leader() {
        let path = format!("/v1/auth/principals/{name}");
        return relay(&app, Method::DELETE, &headers, &path, Bytes::new()).await;
    }
    let by = admin(&app, &headers)?;
    let change = AccessChange::DeletePrincipal {
        by,
        name: name.clone(),
    };
    let acl_revision = apply(&app, change).await?;
    Ok(Json(AclChanged { name, acl_revision }).into_response())
}

/// `PUT /v1/auth/principals/{name}/grants {grants}`: replaces every grant.
pub async fn set_grants(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    StrictPath(name): StrictPath<String>,
    body: JsonBody<SetGrantsRequest>,
) -> Result<Response> {
    validate::name("name", &name)?;
    let grants = validate::grants(&body.value.grants)?;
    if !app.is_leader() {
        let path = format!("/v1/auth/principals/{name}/grants");
        return relay(&app, Method::PUT, &headers, &path, body.raw.clone()).await;
    }
    let by = admin(&app, &headers)?;
    let change = AccessChange::SetGrants {
        by,
        name: name.clone(),
        grants,
    };
    let acl_revision = apply(&app, change).await?;
    Ok(Json(AclChanged { name, acl_revision }).into_response())
}

/// `GET /v1/auth/principals`: every principal and its grants, from the leader.
pub async fn list(State(app): State<SharedApp>, headers: HeaderMap) -> Result<Response> {
    if !app.is_leader() {
        return relay(
            &app,
            Method::GET,
            &headers,
            "/v1/auth/principals",
            Bytes::new(),
        )
        .await;
    }
    admin(&app, &headers)?;
    Ok(Json(wire::principal_list(&app.view.access())).into_response())
}

/// `GET /v1/auth/whoami` → `{name, grants, acl_revision}`, once this node caught up with
/// the leader ([`catch_up`]): a rotated or deleted token is 401 on every node as soon as
/// its rotation or deletion returned, and a principal made a moment ago is known.
pub async fn whoami(State(app): State<SharedApp>, headers: HeaderMap) -> Result<Response> {
    let presented = presented(&app, &headers)?;
    catch_up(&app).await?;
    let Caller::Principal { name, access } = caller_with(&app, presented, &headers)? else {
        return Err(AccessError::NotEnabled.into());
    };
    let grants = access
        .principal(&name)
        .map(|p| wire::grants(&p.grants))
        .unwrap_or_default();
    Ok(Json(WhoAmI {
        name,
        grants,
        acl_revision: access.acl_revision(),
    })
    .into_response())
}
