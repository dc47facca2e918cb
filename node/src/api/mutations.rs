//! Mutation endpoints: validate before the log, propose through the batcher, answer.
//!
//! Every handler is the same steps: know the caller ([`sender`]) and bind `actor` to it
//! (SPEC §8); turn the wire request into a logged [`Command`] (all limits checked here,
//! nothing reaches the log otherwise); on a follower, relay the request to the leader,
//! which does all of it again against its own state; on the leader, authorize each of its
//! operations, submit it, and shape the answer.
//!
//! A follower checks what it can before relaying, so bad input is 400 or 413 on every node
//! whether or not a leader answers, not 503 `no_leader` or a 504 `outcome_unknown` that
//! invites retrying a request that can never apply. It leaves the grants to the leader:
//! its own may be older.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairn_api::{
    BatchRequest, BatchResult, ErrorCode, FlagStaleRequest, ForgetRequest, Permission,
    ReinstateRequest, RevokeRequest, SupersedeRequest, WriteRequest,
};
use cairn_config::Limits;
use cairn_memory::{admit, Command, CommandResponse, Mutation, OpError};
use serde_json::Value;

use super::auth::{self, Caller, Unauthenticated};
use super::body::JsonBody;
use super::error::{write_failure, ApiError};
use super::forward::{self, Kind};
use super::{App, SharedApp};
use crate::consensus::batcher::WriteError;
use crate::metrics::Metrics;

type Result<T> = std::result::Result<T, ApiError>;

/// A single-operation mutation request: its path, its `actor` (bound to the caller), its
/// `request_id`, and how it becomes a logged [`Mutation`].
pub trait SingleOp: serde::de::DeserializeOwned + Send + 'static {
    const PATH: &'static str;
    fn actor_mut(&mut self) -> &mut String;
    fn request_id(&self) -> Option<&str>;
    fn admit(&self, limits: &Limits) -> std::result::Result<Mutation, OpError>;
}

macro_rules! single_op {
    ($request:ty, $path:literal, $admit:path) => {
        impl SingleOp for $request {
            const PATH: &'static str = $path;
            fn actor_mut(&mut self) -> &mut String {
                &mut self.actor
            }
            fn request_id(&self) -> Option<&str> {
                self.request_id.as_deref()
            }
            fn admit(&self, limits: &Limits) -> std::result::Result<Mutation, OpError> {
                $admit(self, limits)
            }
        }
    };
}

single_op!(WriteRequest, "/v1/write", admit::write);
single_op!(ForgetRequest, "/v1/forget", admit::forget);
single_op!(RevokeRequest, "/v1/revoke", admit::revoke);
single_op!(ReinstateRequest, "/v1/reinstate", admit::reinstate);
single_op!(FlagStaleRequest, "/v1/flag-stale", admit::flag_stale);
single_op!(SupersedeRequest, "/v1/supersede", admit::supersede);

/// `POST` of write, forget, revoke, reinstate, flag-stale and supersede.
pub async fn single<R: SingleOp>(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<R>,
) -> Result<Response> {
    let JsonBody {
        value: mut req,
        raw,
    } = body;
    let request_id = req.request_id().map(str::to_string);
    let Some((caller, leading)) = sender(&app, &headers)? else {
        return relay(&app, &headers, R::PATH, raw, request_id.as_deref()).await;
    };
    caller.bind_actor(req.actor_mut(), &app.config.limits)?;
    let mutation = req.admit(&app.config.limits)?;
    if leading {
        caller.require_op(&mutation.op)?;
    }
    let keys = [mutation.op.key().to_string()];
    let command = admit::single(mutation, request_id.clone(), &app.config.limits)?;
    if !leading {
        return relay(&app, &headers, R::PATH, raw, request_id.as_deref()).await;
    }
    match submit(&app, &headers, R::PATH, raw, command, request_id.as_deref())
        .await
        .map_err(|e| as_caller_sees(&app, e, &caller, &keys))?
    {
        Submitted::Relayed(resp) => Ok(resp),
        Submitted::Applied { mut results, .. } => {
            conceal_unreadable_results(&mut results, &caller);
            let result = results
                .pop()
                .ok_or_else(|| ApiError::internal("state machine returned no result"))?;
            Ok(Json(result).into_response())
        }
    }
}

pub async fn batch(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<BatchRequest>,
) -> Result<Response> {
    let JsonBody {
        value: mut req,
        raw,
    } = body;
    let request_id = req.request_id.clone();
    let Some((caller, leading)) = sender(&app, &headers)? else {
        return relay(&app, &headers, "/v1/batch", raw, request_id.as_deref()).await;
    };
    for (i, op) in req.ops.iter_mut().enumerate() {
        caller
            .bind_actor(op.actor_mut(), &app.config.limits)
            .map_err(|e| e.in_op(i))?;
    }
    let command = admit::batch(&req, &app.config.limits)?;
    if !leading {
        return relay(&app, &headers, "/v1/batch", raw, request_id.as_deref()).await;
    }
    for (i, m) in command.mutations.iter().enumerate() {
        caller.require_op(&m.op).map_err(|e| e.in_op(i))?;
    }
    let keys: Vec<String> = command
        .mutations
        .iter()
        .map(|m| m.op.key().to_string())
        .collect();
    match submit(
        &app,
        &headers,
        "/v1/batch",
        raw,
        command,
        request_id.as_deref(),
    )
    .await
    .map_err(|e| as_caller_sees(&app, e, &caller, &keys))?
    {
        Submitted::Relayed(resp) => Ok(resp),
        Submitted::Applied {
            mut results,
            revision,
            replayed,
        } => {
            conceal_unreadable_results(&mut results, &caller);
            Ok(Json(BatchResult {
                results,
                revision,
                replayed,
            })
            .into_response())
        }
    }
}

/// The caller of a mutation as far as this node can tell, and whether this node leads.
///
/// - The leader authenticates: 401 for a missing, malformed or unknown token.
/// - A follower refuses a missing or malformed token (malformed on every node), and knows
///   the caller when its applied state knows the token. `None` when it does not: the
///   principal may be newer than this node's state, so the leader decides, and the
///   request is relayed unchecked. So is a request with a token sent to a follower that
///   has not applied the entry turning auth on yet: its `actor` may rightly be left out.
fn sender(app: &App, headers: &HeaderMap) -> Result<Option<(Caller, bool)>> {
    let leading = app.is_leader();
    match auth::caller(app, headers) {
        Ok(Caller::Open) if !leading && headers.contains_key(header::AUTHORIZATION) => Ok(None),
        Ok(caller) => Ok(Some((caller, leading))),
        Err(Unauthenticated::Unknown(_)) if !leading => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Relays the request as it came (token and `actor` as sent) to the leader, which checks
/// it again against its own state, and answers what the leader answers.
async fn relay(
    app: &SharedApp,
    headers: &HeaderMap,
    path: &str,
    raw: Bytes,
    request_id: Option<&str>,
) -> Result<Response> {
    Metrics::inc(&app.metrics.mutations_forwarded);
    forward::to_leader(app, headers, path, raw, Kind::Mutation, request_id).await
}

/// An apply-time refusal as `caller` sees it. The state machine refuses a command whose
/// author is no principal when applied; a request that met that carried no usable token
/// by then, so it is 401 `unauthenticated`, as it would be if sent now (nothing was
/// applied either way):
/// - admitted while auth was off (`Caller::Open`): auth was turned on while it was in
///   flight, and it carried no token;
/// - admitted as a principal that is gone from the applied state: it was deleted while
///   the request was in flight (SPEC §8: a deleted token is 401).
///
/// A principal that only lost a grant stays 403. Otherwise [`conceal_unreadable`].
fn as_caller_sees(app: &App, e: ApiError, caller: &Caller, keys: &[String]) -> ApiError {
    if e.code == ErrorCode::PermissionDenied {
        match caller {
            Caller::Open => {
                return ApiError::new(
                    ErrorCode::Unauthenticated,
                    "auth was turned on while this request, sent without a token, was in \
                     flight: nothing was done; send a token (Authorization: Bearer TOKEN)",
                )
            }
            Caller::Principal { name, .. } if app.view.access().principal(name).is_none() => {
                return ApiError::new(
                    ErrorCode::Unauthenticated,
                    "the principal was deleted while this request was in flight: nothing \
                     was done",
                )
            }
            Caller::Principal { .. } => {}
        }
    }
    conceal_unreadable(e, caller, keys)
}

/// The details of a refusal that show a key's content: the revoked value's warning and
/// its revocation (`key_revoked`), the tombstone (`key_forgotten`).
const CONTENT_DETAILS: [&str; 3] = ["rendered", "revocation", "tombstone"];

/// A `key_revoked` or `key_forgotten` refusal as `caller` may see it: its code, status and
/// message always, the details that show the key's content ([`CONTENT_DETAILS`]) only when
/// the caller may `read` the key (SPEC §8: reading a value, a revocation or a tombstone
/// needs `read`; `write` alone does not). `keys` are the request's keys, by op index.
fn conceal_unreadable(mut e: ApiError, caller: &Caller, keys: &[String]) -> ApiError {
    if !matches!(e.code, ErrorCode::KeyRevoked | ErrorCode::KeyForgotten) {
        return e;
    }
    let op = e
        .details
        .get("op_index")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let key = usize::try_from(op).ok().and_then(|i| keys.get(i));
    if !key.is_some_and(|key| caller.may(Permission::Read, key)) {
        for detail in CONTENT_DETAILS {
            e.details.remove(detail);
        }
    }
    e
}

/// Results as `caller` may see them: a forget's tombstone (who forgot the key, why, and
/// the hash of the value it held, which confirms a guessed value) only when the caller
/// may `read` the key, as for refusals ([`conceal_unreadable`]). Forgetting needs
/// `forget`, which shows no content: a key forgotten before (`already`) may carry
/// another principal's reason.
fn conceal_unreadable_results(results: &mut [cairn_api::MutationResult], caller: &Caller) {
    // Only a forget's result carries one: a write pays no grant lookup for this.
    for result in results.iter_mut().filter(|r| r.tombstone.is_some()) {
        if !caller.may(Permission::Read, &result.key) {
            result.tombstone = None;
        }
    }
}

enum Submitted {
    Applied {
        results: Vec<cairn_api::MutationResult>,
        revision: u64,
        replayed: bool,
    },
    Relayed(Response),
}

/// Proposes on the leader, or relays the raw request to it.
async fn submit(
    app: &SharedApp,
    headers: &HeaderMap,
    path: &str,
    raw: Bytes,
    command: Command,
    request_id: Option<&str>,
) -> Result<Submitted> {
    let started = Instant::now();
    match app.batcher.submit(command).await {
        Ok(CommandResponse::Applied {
            results,
            revision,
            replayed,
        }) => {
            Metrics::inc(&app.metrics.mutations_ok);
            app.metrics
                .mutation_latency
                .observe(started.elapsed().as_micros() as u64);
            Ok(Submitted::Applied {
                results: results.into_iter().map(Into::into).collect(),
                revision,
                replayed,
            })
        }
        Ok(CommandResponse::Rejected { error, op_index }) => {
            Metrics::inc(&app.metrics.mutations_rejected);
            let error = ApiError::from(error);
            Err(match op_index {
                Some(i) => error.refusing_batch_op(i),
                None => error,
            })
        }
        // Provably not appended anywhere that can commit it: safe to relay.
        Err(WriteError::NotLeader { .. }) => relay(app, headers, path, raw, request_id)
            .await
            .map(Submitted::Relayed),
        Err(e) => {
            if matches!(e, WriteError::OutcomeUnknown(_)) {
                Metrics::inc(&app.metrics.mutations_unknown);
            }
            Err(write_failure(e, request_id))
        }
    }
}
