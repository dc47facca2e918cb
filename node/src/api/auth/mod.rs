//! Authentication and authorization of client requests (SPEC §8).
//!
//! - [`caller`] turns the `Authorization` header into a [`Caller`] against this node's
//!   applied access state: `Open` while auth is off, a principal once it is on.
//! - [`Caller`] answers "may it do this": one permission on one key, a key-model
//!   operation, or admin; and binds a request's `actor` to the principal.
//! - `endpoints`: `/v1/auth/*`.
//!
//! Where each check runs:
//! - mutations: a follower refuses a missing or malformed token itself and relays the rest
//!   (token included) to the leader, which authenticates and authorizes against its
//!   applied state; the state machine checks every operation again at apply
//!   (`cairn_access::StatePermit`), so a grant revoked in between still refuses it;
//! - reads: after the consistency barrier, against the state the read is served from (a
//!   linearizable read sees every change that returned before it; a bounded one, grants
//!   as old as its bound; an `any` one, the node's applied grants). A token this node does
//!   not know is relayed to the leader ("asks the leader"): the principal may be newer
//!   than this node's applied state;
//! - whoami, compact and opening a watch have no bound of their own: the node first
//!   catches up with the leader ([`catch_up`]), then authenticates locally.

pub mod endpoints;

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use cairn_access::{required, AccessState, Token};
use cairn_api::{ErrorCode, Permission};
use cairn_config::Limits;
use cairn_memory::{admit, Op};
use serde_json::json;

use super::error::ApiError;
use super::forward::{self, Kind};
use super::App;

/// Who is asking.
pub enum Caller {
    /// Auth is off: every request is allowed and `actor` is what the request says.
    Open,
    /// An authenticated principal and the access state it was authenticated against.
    Principal {
        name: String,
        access: Arc<AccessState>,
    },
}

/// Why a request carries no usable identity.
pub enum Unauthenticated {
    /// No token, or not a token: refused on any node.
    Malformed(ApiError),
    /// A well-formed token this node's applied state does not know: refused on the
    /// leader, relayed to it elsewhere.
    Unknown(ApiError),
}

impl From<Unauthenticated> for ApiError {
    fn from(e: Unauthenticated) -> ApiError {
        match e {
            Unauthenticated::Malformed(e) | Unauthenticated::Unknown(e) => e,
        }
    }
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthenticated, message)
}

/// The request's bearer token, if its one `Authorization` header holds one. The scheme
/// name is matched in any case (RFC 9110 §11.1). Two or more `Authorization` headers are
/// refused as malformed: which one a proxy, this node or the leader would read is not
/// defined. Never logged, never echoed.
fn bearer(headers: &HeaderMap) -> Result<Token, ApiError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values
        .next()
        .ok_or_else(|| unauthenticated("auth is on: send Authorization: Bearer <token>"))?;
    if values.next().is_some() {
        return Err(unauthenticated(
            "malformed Authorization: more than one Authorization header; send one",
        ));
    }
    value
        .to_str()
        .ok()
        .and_then(Token::from_bearer)
        .ok_or_else(|| {
            unauthenticated(
                "malformed Authorization header: expected `Bearer cairn_` and the token's 43 \
                 more characters (A-Z, a-z, 0-9, - and _), as `cairn auth principal add` \
                 printed it",
            )
        })
}

/// The caller of a request, against this node's applied access state.
pub fn caller(app: &App, headers: &HeaderMap) -> Result<Caller, Unauthenticated> {
    caller_with(app, Presented(None), headers)
}

/// [`caller`], with the token parsed already when the request's shape was checked.
pub(super) fn caller_with(
    app: &App,
    presented: Presented,
    headers: &HeaderMap,
) -> Result<Caller, Unauthenticated> {
    let access = app.view.access();
    if !access.enabled() {
        return Ok(Caller::Open);
    }
    // Auth may have been turned on since the shape check: then there is no token yet.
    let token = match presented.0 {
        Some(token) => token,
        None => bearer(headers).map_err(Unauthenticated::Malformed)?,
    };
    match access.authenticate(&token) {
        Some((name, _)) => Ok(Caller::Principal {
            name: name.to_string(),
            access: access.clone(),
        }),
        None => Err(Unauthenticated::Unknown(unauthenticated(
            "unknown, rotated or deleted token",
        ))),
    }
}

/// A principal and the token it proved itself with, for a request that lasts (a watch):
/// [`Session::check`] asks again whether that token still names the principal.
pub struct Session {
    name: String,
    token: Token,
}

impl Session {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `Ok` while the token still authenticates the principal in `access`; 401
    /// `unauthenticated` once it was rotated away or the principal deleted.
    pub fn check(&self, access: &AccessState) -> Result<(), ApiError> {
        match access.authenticate(&self.token) {
            Some((name, _)) if name == self.name => Ok(()),
            _ if access.principal(&self.name).is_none() => {
                Err(unauthenticated("the principal was deleted"))
            }
            _ => Err(unauthenticated("the token was rotated")),
        }
    }
}

/// Brings this node's access state up to the leader's before a request that has no
/// staleness bound of its own is authenticated ([`ReadGate::caught_up`]): after it, a
/// token rotated or deleted before the request arrived is refused on this node too.
/// Nothing to wait for while auth is off here.
///
/// [`ReadGate::caught_up`]: crate::consensus::reads::ReadGate::caught_up
pub async fn catch_up(app: &App) -> Result<(), ApiError> {
    if !app.view.access().enabled() {
        return Ok(());
    }
    app.reads.caught_up().await?;
    Ok(())
}

/// The session of a request against this node's access state once it caught up with the
/// leader ([`catch_up`]): `None` while auth is off; 401 for a missing, malformed or
/// unknown token.
pub async fn session(app: &App, headers: &HeaderMap) -> Result<Option<Session>, ApiError> {
    let Presented(token) = presented(app, headers)?;
    catch_up(app).await?;
    let caller = caller_with(app, Presented(token.clone()), headers)?;
    let Caller::Principal { name, .. } = caller else {
        return Ok(None);
    };
    // Auth may have been turned on between the two looks: then the token is parsed here.
    let token = match token {
        Some(token) => token,
        None => bearer(headers)?,
    };
    Ok(Some(Session { name, token }))
}

/// The bearer token of a request whose shape was checked ([`presented`]): `None` while
/// auth was off. Never logged, never echoed.
pub struct Presented(Option<Token>);

/// A missing or malformed token while auth is on is `Err`: the check every route that
/// takes a token makes first, in its gate (`routes::admit`), on any node (a malformed
/// token is malformed on every node, so a follower relays none). `Ok` keeps the parsed
/// token: for the authentication that follows a read's barrier, so that the read does
/// not parse it again, and for the gate's [`unless_unknown`].
pub fn presented(app: &App, headers: &HeaderMap) -> Result<Presented, ApiError> {
    if !app.view.access().enabled() {
        return Ok(Presented(None));
    }
    bearer(headers).map(|token| Presented(Some(token)))
}

/// `refusal` (of a request's shape) unless no principal holds the presented token: then
/// 401 `unauthenticated`, as for a missing token (SPEC §8), and the caller learns nothing
/// of what the node accepts. A token this node's applied state does not know is looked
/// up again once the node caught up with the leader ([`catch_up`]), so a principal made
/// a moment ago keeps its refusal; if the node cannot catch up, the answer is why (503
/// `no_leader` or `stale_read`): the token could not be checked, so neither its refusal
/// nor the shape's is known to be the caller's.
pub async fn unless_unknown(app: &App, presented: Presented, refusal: Response) -> Response {
    let Presented(Some(token)) = presented else {
        return refusal;
    };
    if held_or_open(app, &token) {
        return refusal;
    }
    if let Err(unchecked) = catch_up(app).await {
        return unchecked.into_response();
    }
    if held_or_open(app, &token) {
        return refusal;
    }
    unauthenticated("unknown, rotated or deleted token").into_response()
}

/// Whether a principal holds `token` in this node's applied state, or auth is off there.
fn held_or_open(app: &App, token: &Token) -> bool {
    let access = app.view.access();
    !access.enabled() || access.authenticate(token).is_some()
}

/// The caller of a read, once its barrier passed: authenticated against the state the
/// read is served from. A token this node does not know is relayed to the leader (unless
/// this is the leader, or the request was relayed here already): `Err(answer)`.
pub async fn reader(
    app: &App,
    presented: Presented,
    headers: &HeaderMap,
    path: &str,
    raw: Bytes,
) -> Result<Result<Caller, Response>, ApiError> {
    match caller_with(app, presented, headers) {
        Ok(caller) => Ok(Ok(caller)),
        Err(Unauthenticated::Unknown(_))
            if !app.is_leader() && !headers.contains_key(forward::FORWARDED_BY) =>
        {
            forward::to_leader(app, headers, path, raw, Kind::Query, None)
                .await
                .map(Err)
        }
        Err(e) => Err(e.into()),
    }
}

/// The key ranges a list of `prefix` scans: all of `prefix` while auth is off, else the
/// caller's readable ranges under it ([`cairn_access::grants::readable_ranges`]), so no
/// unreadable name reaches a list's items or its cursor.
pub fn readable_ranges(caller: &Caller, prefix: &str) -> Vec<String> {
    match caller {
        Caller::Open => vec![prefix.to_string()],
        Caller::Principal { name, access } => access
            .principal(name)
            .map(|p| cairn_access::grants::readable_ranges(&p.grants, prefix))
            .unwrap_or_default(),
    }
}

impl Caller {
    /// The principal's name; `None` while auth is off.
    pub fn name(&self) -> Option<&str> {
        match self {
            Caller::Open => None,
            Caller::Principal { name, .. } => Some(name),
        }
    }

    /// Whether the caller may use `permission` on `key`.
    pub fn may(&self, permission: Permission, key: &str) -> bool {
        match self {
            Caller::Open => true,
            Caller::Principal { name, access } => access
                .principal(name)
                .is_some_and(|p| p.allows(permission, key)),
        }
    }

    /// 403 `permission_denied` unless the caller may use `permission` on `key`.
    pub fn require(&self, permission: Permission, key: &str) -> Result<(), ApiError> {
        if self.may(permission, key) {
            return Ok(());
        }
        Err(required::denied(permission, key).into())
    }

    /// 403 unless the caller holds `admin` (always true while auth is off).
    pub fn require_admin(&self) -> Result<(), ApiError> {
        self.require(Permission::Admin, "")
    }

    /// 403 unless the caller may do the logged operation `op`.
    pub fn require_op(&self, op: &Op) -> Result<(), ApiError> {
        match self {
            Caller::Open => Ok(()),
            Caller::Principal { name, access } => match access.principal(name) {
                Some(principal) => required::check_op(principal, op).map_err(ApiError::from),
                None => Err(unauthenticated("the principal was deleted")),
            },
        }
    }

    /// Binds a request's `actor` to the principal: an omitted (empty) actor becomes its
    /// name, any other name is 403 `actor_mismatch`. While auth is off the actor stays
    /// as sent (and must then be given).
    ///
    /// - A named actor that breaks the field's own rule (too long, control characters) is
    ///   400 `invalid_request` before it is compared with the name: malformed input is a
    ///   400 whoever sends it.
    pub fn bind_actor(&self, actor: &mut String, limits: &Limits) -> Result<(), ApiError> {
        let Some(name) = self.name() else {
            return Ok(());
        };
        if actor.is_empty() {
            *actor = name.to_string();
            return Ok(());
        }
        admit::actor(actor, limits)?;
        if actor != name {
            return Err(ApiError::new(
                ErrorCode::ActorMismatch,
                format!("actor {actor:?} is not the authenticated principal {name:?}"),
            )
            .with("actor", json!(actor))
            .with("principal", json!(name)));
        }
        Ok(())
    }
}
