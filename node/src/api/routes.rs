//! The route table: every endpoint of the client port, listed once with what it takes,
//! what it answers and which errors it can give.
//!
//! The same table builds the axum router ([`super::router`]) and the OpenAPI document
//! ([`super::openapi`]), so a route cannot be served without being documented, nor
//! documented without being served. What the table says about bodies and errors is
//! checked against live nodes by `scripts/fuzz-api` (schemathesis).

use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use axum::http::{Method, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use cairn_api::ErrorCode::{self, *};
use cairn_api::*;
use schemars::{JsonSchema, Schema, SchemaGenerator};

use super::error::ApiError;
use super::mutations::{self, SingleOp};
use super::{auth, cluster, openapi, reads, watch, SharedApp};

/// Adds a type's schema to the document's components and answers a `$ref` to it.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// The full object schema of a type (not a `$ref`): query parameters are its properties.
fn object_schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    T::json_schema(generator)
}

/// What a successful request answers.
#[derive(Clone, Copy)]
pub enum Answer {
    /// 200 with a JSON body.
    Json(SchemaFn),
    /// The same JSON body at 200 and at 503 (`/healthz`: 503 once Raft has stopped).
    JsonAlso503(SchemaFn),
    /// 200 `text/event-stream`, each event's `data` one JSON value of this schema.
    EventStream(SchemaFn),
    /// 200 `text/plain` (Prometheus text format).
    Text,
}

/// A parameter outside the body and the query: a path segment (always given) or a
/// header (optional). Its name, what it is, and the pattern the node accepts (anything
/// else is 400 `invalid_request`).
#[derive(Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub place: ParamPlace,
    pub description: &'static str,
    pub pattern: &'static str,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ParamPlace {
    Path,
    Header,
}

const TOMBSTONE_ID: Param = Param {
    name: "id",
    place: ParamPlace::Path,
    description: "Tombstone id: 1-128 hex digits, either case (ids are 32 lowercase).",
    pattern: "^[0-9a-fA-F]{1,128}$",
};

const PRINCIPAL_NAME: Param = Param {
    name: "name",
    place: ParamPlace::Path,
    description: "Principal name: 1-128 ASCII letters, digits and _ - . @ :",
    pattern: "^[A-Za-z0-9_.@:-]{1,128}$",
};

/// The standard SSE resume header, read only without `from_revision` (SPEC §5).
const LAST_EVENT_ID: Param = Param {
    name: "Last-Event-ID",
    place: ParamPlace::Header,
    description: "Resume right after the event with this id (REVISION or REVISION:SEQ), as \
                  SSE clients send it on reconnect. from_revision wins when both are given; \
                  a header of another form, or given twice, is 400 all the same.",
    pattern: "^[0-9]+(:[0-9]+)?$",
};

/// Whether an operation needs `Authorization: Bearer` (SPEC §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenUse {
    /// While the cluster has auth on.
    WhileAuthIsOn,
    /// The same, but the operation's purpose is the time before auth is on (init,
    /// enable): documented as optional.
    Bootstrap,
    /// Never (health, metrics, the document).
    Never,
}

/// One documented operation.
pub struct Operation {
    pub id: &'static str,
    pub summary: &'static str,
    pub tag: &'static str,
    /// When the operation needs `Authorization: Bearer`.
    pub token: TokenUse,
    pub params: Vec<Param>,
    pub query: Option<SchemaFn>,
    pub body: Option<SchemaFn>,
    pub answer: Answer,
    /// Every error code the operation can answer, in table order, without repeats.
    pub errors: Vec<ErrorCode>,
}

impl Operation {
    fn new(id: &'static str, tag: &'static str, summary: &'static str, answer: Answer) -> Self {
        Operation {
            id,
            summary,
            tag,
            token: TokenUse::WhileAuthIsOn,
            params: Vec::new(),
            query: None,
            body: None,
            answer,
            errors: vec![Unauthenticated],
        }
    }

    /// An operation that answers `T` as JSON.
    fn json<T: JsonSchema>(id: &'static str, tag: &'static str, summary: &'static str) -> Self {
        Operation::new(id, tag, summary, Answer::Json(schema_of::<T>))
    }

    /// Takes no token, whether or not auth is on.
    fn public(mut self) -> Self {
        self.token = TokenUse::Never;
        self.errors.retain(|c| *c != Unauthenticated);
        self
    }

    /// Made to be called before any principal exists, so documented with the token
    /// optional; once auth is on it needs the admin's, as every other route does.
    fn bootstrap(mut self) -> Self {
        self.token = TokenUse::Bootstrap;
        self
    }

    /// A JSON body of type `T`: a body that does not decode is 400, one over the size
    /// limit 413.
    fn body<T: JsonSchema>(mut self) -> Self {
        self.body = Some(schema_of::<T>);
        self.errors(&[BODY])
    }

    fn query<T: JsonSchema>(mut self) -> Self {
        self.query = Some(object_schema_of::<T>);
        self.errors(&[&[InvalidRequest]])
    }

    fn param(mut self, param: Param) -> Self {
        self.params.push(param);
        self.errors(&[&[InvalidRequest]])
    }

    fn errors(mut self, groups: &[&[ErrorCode]]) -> Self {
        for code in groups.iter().flat_map(|g| g.iter()) {
            if !self.errors.contains(code) {
                self.errors.push(*code);
            }
        }
        self
    }
}

/// A body that does not decode, or is too large.
const BODY: &[ErrorCode] = &[InvalidRequest, TooLarge];
/// A grant does not cover the operation.
const DENIED: &[ErrorCode] = &[PermissionDenied];
/// A mutation's identity checks (SPEC §8).
const ACTOR: &[ErrorCode] = &[PermissionDenied, ActorMismatch];
/// A request relayed to the leader, or a read's consistency barrier.
const RELAYED: &[ErrorCode] = &[NoLeader, Internal];
const BARRIER: &[ErrorCode] = &[NoLeader, StaleRead, Internal];
/// A Raft entry proposed and awaited.
const PROPOSED: &[ErrorCode] = &[NoLeader, Overloaded, OutcomeUnknown, Internal];
/// Rules every key-model mutation is checked against at apply (SPEC §2).
const CONDITIONS: &[ErrorCode] = &[VersionConflict, StaleWrite, RequestIdReused];
/// An access change the applied access state refuses (auth off, a name taken, the last
/// admin).
const ACCESS_REFUSED: &[ErrorCode] = &[InvalidTransition];

/// A route: method, path, its documentation and its handler.
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub operation: Operation,
    pub(super) handler: MethodRouter<SharedApp>,
}

fn route<H, T>(method: Method, path: &'static str, handler: H, operation: Operation) -> Route
where
    H: Handler<T, SharedApp>,
    T: 'static,
{
    let filter = MethodFilter::try_from(method.clone()).expect("a routable method");
    let mut operation = operation;
    if operation.query.is_none() {
        operation = operation.errors(&[&[InvalidRequest]]);
    }
    Route {
        method,
        path,
        operation,
        handler: on(filter, handler),
    }
}

impl Route {
    /// The handler behind its [`Gate`], when the route has one.
    pub(super) fn gated(self, app: &SharedApp) -> MethodRouter<SharedApp> {
        let gate = Gate {
            takes_token: self.operation.token != TokenUse::Never,
            takes_query: self.operation.query.is_some(),
            takes_body: self.method != Method::GET,
        };
        if !gate.takes_token && gate.takes_query && gate.takes_body {
            return self.handler;
        }
        self.handler
            .route_layer(from_fn_with_state((app.clone(), gate), admit))
    }
}

/// The checks a route makes before its handler sees the request.
#[derive(Clone, Copy)]
struct Gate {
    takes_token: bool,
    takes_query: bool,
    /// False on a `GET`: every other route reads its body itself (a JSON object, or none
    /// where it takes no fields).
    takes_body: bool,
}

/// Runs a route's [`Gate`], in this order:
///
/// - While auth is on, a request without a token or with a malformed one is 401 before
///   its query or body is looked at (SPEC §8): a client that proved nothing learns nothing
///   of what the node would accept, and the node decodes nothing for it (the body is read
///   and dropped, so that the client reads the 401 rather than a reset). A well-formed
///   token the node does not know waits for the handler: a follower relays it to the
///   leader, which may know it already. The handler parses the token again for its own
///   authentication, since auth may be turned on between the two (the base64 check is
///   about 650 instructions by the callgrind count in docs/security.md).
/// - A route that takes no query parameters refuses any it is given (SPEC §5 extension:
///   an unknown query parameter is 400 `invalid_request` naming it), as the routes that
///   take some refuse those they do not know. A bare `?` carries none.
/// - A `GET` refuses a body (SPEC §5 extension: 400 `invalid_request`, `field: "body"`),
///   as a route that takes no fields refuses any: a request that means more than the
///   route reads is refused, not half-served. The body is read and dropped first, as for
///   a 401.
/// - A refusal of the request's shape (400, 413) to a well-formed token is 401 when no
///   principal holds that token ([`auth::unless_unknown`]): an unknown token is 401 on
///   every request, as a missing one is. Judged on that error path only, so a request
///   that passes pays for one authentication, its handler's.
async fn admit(
    State((app, gate)): State<(SharedApp, Gate)>,
    request: Request,
    next: Next,
) -> Response {
    let presented = if gate.takes_token {
        match auth::presented(&app, request.headers()) {
            Ok(presented) => Some(presented),
            Err(refused) => {
                super::body::discard(request, &app.config.limits).await;
                return refused.into_response();
            }
        }
    } else {
        None
    };
    let answer = match refused_by_gate(gate, &request) {
        Some(refused) => {
            super::body::discard(request, &app.config.limits).await;
            refused.into_response()
        }
        None => next.run(request).await,
    };
    match presented {
        Some(presented) if refused_for_shape(&answer) => {
            auth::unless_unknown(&app, presented, answer).await
        }
        _ => answer,
    }
}

/// A query or a body the route does not take.
fn refused_by_gate(gate: Gate, request: &Request) -> Option<ApiError> {
    if let Some(refused) = dot_segment(request) {
        return Some(refused);
    }
    if !gate.takes_query {
        if let Some(refused) = unknown_query(request) {
            return Some(refused);
        }
    }
    if !gate.takes_body {
        return unexpected_body(request);
    }
    None
}

/// 404 for a path with a `.` or `..` segment, escaped or not (`%2e%2e`). No route has
/// one and no path parameter may be one (a principal's name, a tombstone id), but a URL
/// library resolves them: a follower relaying `/v1/auth/principals/%2e%2e/rotate` would
/// send the leader `/v1/auth/rotate`, another request than the one it routed. Refused
/// alike on every node.
fn dot_segment(request: &Request) -> Option<ApiError> {
    const DOTS: [&str; 6] = [".", "..", "%2e", "%2e%2e", ".%2e", "%2e."];
    let path = request.uri().path();
    let dotted = path
        .split('/')
        .any(|segment| DOTS.iter().any(|dots| segment.eq_ignore_ascii_case(dots)));
    dotted.then(|| {
        ApiError::new(
            ErrorCode::NotFound,
            format!("no such endpoint: {path} (a path has no . or .. segment)"),
        )
    })
}

/// Whether `answer` refuses the request's shape: a body, query or path that does not
/// decode or breaks a limit.
fn refused_for_shape(answer: &Response) -> bool {
    matches!(
        answer.status(),
        StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE
    )
}

/// 400 naming the first query parameter of a request to a route that takes none.
fn unknown_query(request: &Request) -> Option<ApiError> {
    let pair = request
        .uri()
        .query()
        .and_then(|q| q.split('&').find(|pair| !pair.is_empty()))?;
    let name = pair.split_once('=').map_or(pair, |(name, _)| name);
    Some(
        ApiError::invalid(format!(
            "invalid query string: unknown parameter {name:?}; this endpoint takes none"
        ))
        .with("field", name),
    )
}

/// 400 for a request to a `GET` route that carries a body: a `Content-Length` other
/// than 0, or any `Transfer-Encoding`.
fn unexpected_body(request: &Request) -> Option<ApiError> {
    let headers = request.headers();
    let declared = headers
        .get(CONTENT_LENGTH)
        .is_some_and(|length| length.as_bytes() != b"0");
    if !declared && !headers.contains_key(TRANSFER_ENCODING) {
        return None;
    }
    let path = request.uri().path();
    Some(ApiError::invalid(format!("GET {path} takes no body")).with("field", "body"))
}

/// A single-operation mutation: its path comes from its request type ([`SingleOp`]).
fn mutation<R: SingleOp + JsonSchema>(
    id: &'static str,
    summary: &'static str,
    rules: &[ErrorCode],
) -> Route {
    let operation = Operation::json::<MutationResult>(id, "mutations", summary)
        .body::<R>()
        .errors(&[ACTOR, CONDITIONS, rules, PROPOSED]);
    route(Method::POST, R::PATH, mutations::single::<R>, operation)
}

/// Every route of the client port (SPEC §5, §6, §8).
pub fn routes() -> Vec<Route> {
    let mut all = mutation_routes();
    all.extend(read_routes());
    all.extend(auth_routes());
    all.extend(cluster_routes());
    all
}

fn mutation_routes() -> Vec<Route> {
    // A key that was never written is 404 for the ops that act on an existing value; a
    // forgotten one is 409 `key_forgotten` for all but forget (idempotent there).
    let existing: &[ErrorCode] = &[NotFound, KeyForgotten];
    vec![
        mutation::<WriteRequest>("write", "Write a key's value", &[KeyForgotten, KeyRevoked]),
        mutation::<ForgetRequest>("forget", "Forget a key behind a durable tombstone", &[]),
        mutation::<RevokeRequest>(
            "revoke",
            "Revoke a wrong belief, keeping its reason",
            existing,
        ),
        mutation::<ReinstateRequest>("reinstate", "Reinstate a revoked key", existing),
        mutation::<FlagStaleRequest>("flag_stale", "Flag an anchor as changed", existing),
        mutation::<SupersedeRequest>(
            "supersede",
            "Record the key that replaces this one",
            existing,
        ),
        route(
            Method::POST,
            "/v1/batch",
            mutations::batch,
            Operation::json::<BatchResult>("batch", "mutations", "Apply mutations all or none")
                .body::<BatchRequest>()
                .errors(&[
                    ACTOR,
                    CONDITIONS,
                    // An op that alone would be 404 is 409 `invalid_transition` in a batch.
                    &[InvalidTransition, KeyForgotten, KeyRevoked],
                    PROPOSED,
                ]),
        ),
    ]
}

fn read_routes() -> Vec<Route> {
    vec![
        route(
            Method::POST,
            "/v1/read",
            reads::read,
            Operation::json::<ReadResponse>("read", "reads", "A key's record and rendered note")
                .body::<ReadRequest>()
                .errors(&[DENIED, &[NotFound], BARRIER]),
        ),
        route(
            Method::POST,
            "/v1/probe",
            reads::probe,
            Operation::json::<ProbeResponse>(
                "probe",
                "reads",
                "A key's value and retention records",
            )
            .body::<ProbeRequest>()
            .errors(&[DENIED, BARRIER]),
        ),
        route(
            Method::POST,
            "/v1/history",
            reads::history,
            Operation::json::<HistoryResponse>("history", "reads", "A key's events, oldest first")
                .body::<HistoryRequest>()
                .errors(&[DENIED, &[NotFound], BARRIER]),
        ),
        route(
            Method::GET,
            "/v1/tombstones/{id}",
            reads::tombstone,
            Operation::json::<Tombstone>("tombstone", "reads", "A tombstone by id")
                .param(TOMBSTONE_ID)
                .query::<ReadOptions>()
                .errors(&[&[NotFound], BARRIER]),
        ),
        route(
            Method::POST,
            "/v1/list",
            reads::list,
            Operation::json::<ListResponse>(
                "list",
                "reads",
                "Keys under a prefix, a page at a time",
            )
            .body::<ListRequest>()
            .errors(&[BARRIER]),
        ),
        route(
            Method::POST,
            "/v1/recall",
            reads::recall,
            Operation::json::<RecallResponse>("recall", "reads", "Notes whose anchors match cues")
                .body::<RecallRequest>()
                .errors(&[BARRIER]),
        ),
        route(
            Method::GET,
            "/v1/watch",
            watch::watch,
            Operation::new(
                "watch",
                "reads",
                "The change feed as Server-Sent Events",
                Answer::EventStream(schema_of::<WatchEvent>),
            )
            .query::<watch::WatchQuery>()
            .param(LAST_EVENT_ID)
            // The leader's grants are read behind a barrier, as every read's; overloaded: a
            // node serves at most `limits.watchers_max` streams.
            .errors(&[BARRIER, &[Overloaded]]),
        ),
    ]
}

fn auth_routes() -> Vec<Route> {
    use auth::endpoints;
    let admin: &[&[ErrorCode]] = &[DENIED, ACCESS_REFUSED, PROPOSED];
    let of_principal = |op: Operation| {
        op.param(PRINCIPAL_NAME)
            .errors(&[BODY, &[NotFound]])
            .errors(admin)
    };
    vec![
        route(
            Method::POST,
            "/v1/auth/enable",
            endpoints::enable,
            Operation::json::<AuthEnabled>("auth_enable", "auth", "Turn auth on (while it is off)")
                .bootstrap()
                .body::<EnableAuthRequest>()
                // Once auth is on the caller is authenticated before the 409.
                .errors(&[DENIED, ACCESS_REFUSED, PROPOSED]),
        ),
        route(
            Method::POST,
            "/v1/auth/principals",
            endpoints::create,
            Operation::json::<CreatedPrincipal>(
                "auth_create_principal",
                "auth",
                "Make a principal",
            )
            .body::<CreatePrincipalRequest>()
            .errors(admin),
        ),
        route(
            Method::GET,
            "/v1/auth/principals",
            endpoints::list,
            Operation::json::<PrincipalList>("auth_list_principals", "auth", "Every principal")
                .errors(&[DENIED, ACCESS_REFUSED, RELAYED]),
        ),
        route(
            Method::DELETE,
            "/v1/auth/principals/{name}",
            endpoints::delete,
            of_principal(Operation::json::<AclChanged>(
                "auth_delete_principal",
                "auth",
                "Delete a principal",
            )),
        ),
        route(
            Method::POST,
            "/v1/auth/principals/{name}/rotate",
            endpoints::rotate,
            of_principal(Operation::json::<RotatedToken>(
                "auth_rotate_token",
                "auth",
                "Give a principal a new token",
            )),
        ),
        route(
            Method::PUT,
            "/v1/auth/principals/{name}/grants",
            endpoints::set_grants,
            of_principal(
                Operation::json::<AclChanged>(
                    "auth_set_grants",
                    "auth",
                    "Replace a principal's grants",
                )
                .body::<SetGrantsRequest>(),
            ),
        ),
        route(
            Method::GET,
            "/v1/auth/whoami",
            endpoints::whoami,
            Operation::json::<WhoAmI>("auth_whoami", "auth", "The caller's name and grants")
                .errors(&[ACCESS_REFUSED, BARRIER]),
        ),
    ]
}

fn cluster_routes() -> Vec<Route> {
    let membership: &[&[ErrorCode]] = &[DENIED, &[InvalidTransition], PROPOSED];
    vec![
        route(
            Method::POST,
            "/cluster/init",
            cluster::init,
            Operation::json::<MembershipResponse>(
                "cluster_init",
                "cluster",
                "Initialize the cluster",
            )
            .bootstrap()
            .body::<InitRequest>()
            .errors(&[DENIED, &[InvalidTransition], PROPOSED]),
        ),
        route(
            Method::POST,
            "/cluster/join",
            cluster::join,
            Operation::json::<MembershipResponse>("cluster_join", "cluster", "Add a node")
                .body::<NodeSpec>()
                .errors(membership),
        ),
        route(
            Method::POST,
            "/cluster/remove",
            cluster::remove,
            Operation::json::<MembershipResponse>("cluster_remove", "cluster", "Remove a node")
                .body::<RemoveRequest>()
                .errors(&[&[NotFound]])
                .errors(membership),
        ),
        route(
            Method::GET,
            "/cluster/status",
            cluster::status,
            Operation::json::<ClusterStatus>(
                "cluster_status",
                "cluster",
                "This node's Raft status",
            ),
        ),
        route(
            Method::POST,
            "/cluster/compact",
            cluster::compact,
            Operation::json::<CompactResponse>(
                "cluster_compact",
                "cluster",
                "Snapshot, purge, compact",
            )
            // The caller's admin grant is checked at the leader, behind a barrier.
            .errors(&[DENIED, BODY, BARRIER]),
        ),
        route(
            Method::GET,
            "/healthz",
            cluster::healthz,
            Operation::new(
                "healthz",
                "meta",
                "200 while the node serves and Raft runs",
                Answer::JsonAlso503(schema_of::<cairn_api::Health>),
            )
            .public(),
        ),
        route(
            Method::GET,
            "/metrics",
            cluster::metrics,
            Operation::new(
                "metrics",
                "meta",
                "Counters and gauges (Prometheus)",
                Answer::Text,
            )
            .public(),
        ),
        route(
            Method::GET,
            "/openapi.json",
            openapi::serve,
            Operation::json::<openapi::Document>("openapi", "meta", "This document").public(),
        ),
    ]
}
