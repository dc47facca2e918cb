//! Mutation endpoints: validate before the log, propose through the batcher, answer.
//!
//! Every handler is the same three steps: turn the wire request into a logged
//! [`Command`] (all limits checked here, nothing reaches the log otherwise), submit it
//! (relaying to the leader when this node is not it), and shape the answer.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairn_api::{
    BatchRequest, BatchResult, FlagStaleRequest, ForgetRequest, ReinstateRequest, RevokeRequest,
    SupersedeRequest, WriteRequest,
};
use cairn_memory::{admit, Command, CommandResponse, Mutation, OpError};

use super::body::JsonBody;
use super::error::{write_failure, ApiError};
use super::forward::{self, Kind};
use super::SharedApp;
use crate::consensus::batcher::WriteError;
use crate::metrics::Metrics;

type Result<T> = std::result::Result<T, ApiError>;

pub async fn write(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<WriteRequest>,
) -> Result<Response> {
    let req = &body.value;
    single(
        &app,
        &headers,
        "/v1/write",
        body.raw.clone(),
        admit::write(req, &app.config.limits),
        req.request_id.clone(),
    )
    .await
}

pub async fn forget(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<ForgetRequest>,
) -> Result<Response> {
    let req = &body.value;
    single(
        &app,
        &headers,
        "/v1/forget",
        body.raw.clone(),
        admit::forget(req, &app.config.limits),
        req.request_id.clone(),
    )
    .await
}

pub async fn revoke(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<RevokeRequest>,
) -> Result<Response> {
    let req = &body.value;
    single(
        &app,
        &headers,
        "/v1/revoke",
        body.raw.clone(),
        admit::revoke(req, &app.config.limits),
        req.request_id.clone(),
    )
    .await
}

pub async fn reinstate(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<ReinstateRequest>,
) -> Result<Response> {
    let req = &body.value;
    single(
        &app,
        &headers,
        "/v1/reinstate",
        body.raw.clone(),
        admit::reinstate(req, &app.config.limits),
        req.request_id.clone(),
    )
    .await
}

pub async fn flag_stale(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<FlagStaleRequest>,
) -> Result<Response> {
    let req = &body.value;
    single(
        &app,
        &headers,
        "/v1/flag-stale",
        body.raw.clone(),
        admit::flag_stale(req, &app.config.limits),
        req.request_id.clone(),
    )
    .await
}

pub async fn supersede(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<SupersedeRequest>,
) -> Result<Response> {
    let req = &body.value;
    single(
        &app,
        &headers,
        "/v1/supersede",
        body.raw.clone(),
        admit::supersede(req, &app.config.limits),
        req.request_id.clone(),
    )
    .await
}

pub async fn batch(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<BatchRequest>,
) -> Result<Response> {
    let command =
        admit::batch(&body.value, &app.config.limits).map_err(|e| rejected_input(&app, e))?;
    let request_id = body.value.request_id.clone();
    match submit(
        &app,
        &headers,
        "/v1/batch",
        body.raw,
        command,
        request_id.as_deref(),
    )
    .await?
    {
        Submitted::Relayed(resp) => Ok(resp),
        Submitted::Applied {
            results,
            revision,
            replayed,
        } => Ok(Json(BatchResult {
            results,
            revision,
            replayed,
        })
        .into_response()),
    }
}

async fn single(
    app: &SharedApp,
    headers: &HeaderMap,
    path: &str,
    raw: Bytes,
    mutation: std::result::Result<Mutation, OpError>,
    request_id: Option<String>,
) -> Result<Response> {
    let mutation = mutation.map_err(|e| rejected_input(app, e))?;
    let command = admit::single(mutation, request_id.clone(), &app.config.limits)
        .map_err(|e| rejected_input(app, e))?;
    match submit(app, headers, path, raw, command, request_id.as_deref()).await? {
        Submitted::Relayed(resp) => Ok(resp),
        Submitted::Applied { mut results, .. } => {
            let result = results
                .pop()
                .ok_or_else(|| ApiError::internal("state machine returned no result"))?;
            Ok(Json(result).into_response())
        }
    }
}

fn rejected_input(app: &SharedApp, e: OpError) -> ApiError {
    Metrics::inc(&app.metrics.bad_requests);
    e.into()
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
    if !app.is_leader() {
        Metrics::inc(&app.metrics.mutations_forwarded);
        return forward::to_leader(app, headers, path, raw, Kind::Mutation, request_id)
            .await
            .map(Submitted::Relayed);
    }
    let started = Instant::now();
    match app.batcher.submit(command).await {
        Ok(CommandResponse::Applied {
            results,
            revision,
            replayed,
        }) => {
            Metrics::inc(&app.metrics.mutations_ok);
            Metrics::add(
                &app.metrics.mutation_latency_us_sum,
                started.elapsed().as_micros() as u64,
            );
            Ok(Submitted::Applied {
                results: results.into_iter().map(Into::into).collect(),
                revision,
                replayed,
            })
        }
        Ok(CommandResponse::Rejected { error, op_index }) => {
            Metrics::inc(&app.metrics.mutations_rejected);
            let mut e = ApiError::from(error);
            if let Some(i) = op_index {
                e = e.with("op_index", i);
            }
            Err(e)
        }
        // Provably not appended anywhere that can commit it: safe to relay.
        Err(WriteError::NotLeader { .. }) => {
            Metrics::inc(&app.metrics.mutations_forwarded);
            forward::to_leader(app, headers, path, raw, Kind::Mutation, request_id)
                .await
                .map(Submitted::Relayed)
        }
        Err(e) => {
            if matches!(e, WriteError::OutcomeUnknown(_)) {
                Metrics::inc(&app.metrics.mutations_unknown);
            }
            Err(write_failure(e, request_id))
        }
    }
}
