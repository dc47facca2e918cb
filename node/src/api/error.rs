//! The error body of SPEC §5 and the mapping from every internal error to it.

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairn_api::{ErrorBody, ErrorCode, ErrorDetail};
use cairn_memory::{admit, OpError};
use serde_json::{json, Map, Value};

use crate::consensus::batcher::WriteError;
use crate::consensus::reads::ReadError;
use crate::consensus::view::ViewError;

/// An error answer: a typed code, a message for people, and code-specific details.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Map<String, Value>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: Map::new(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::InvalidRequest, message)
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// This error as the answer to op `i` of a batch: `op_index: i`, and a field error
    /// (its `field` and the message that starts with it) addressed `ops[i].FIELD`, as the
    /// admission of a batch addresses its ops' fields.
    pub fn in_op(mut self, i: usize) -> Self {
        if let Some(Value::String(field)) = self.details.get_mut("field") {
            *field = admit::in_op_path(i, field);
            self.message = admit::in_op_path(i, &self.message);
        }
        self.with("op_index", i)
    }

    /// This error as the answer to a batch refused whole because its op `i` was refused
    /// when applied: SPEC §5 answers such a batch 409 naming the op. What an op meets at
    /// apply is the state of its key, which the batch's own earlier ops may have made, so
    /// a refusal that alone has another status is a conflict with that state here:
    ///
    /// - 404 `not_found` (revoke, reinstate, flag_stale or supersede of an absent key) is
    ///   409 `invalid_transition`, keeping its `key`;
    /// - 413 `too_large` (the flag that would be a key's 65th stale flag: sizes of the
    ///   request itself are refused before the log) is 409 `invalid_transition`, keeping
    ///   `field`, `limit` and `size`;
    /// - 409s keep their code, and 403 stays 403: grants changed since the batch was
    ///   proposed refuse it as they refuse a single op (SPEC §8).
    pub fn refusing_batch_op(self, i: usize) -> Self {
        let code = match self.code {
            ErrorCode::NotFound | ErrorCode::TooLarge => ErrorCode::InvalidTransition,
            code => code,
        };
        ApiError { code, ..self }.in_op(i)
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        tracing::error!(%message, "internal error");
        ApiError::new(ErrorCode::Internal, message.to_string())
    }

    /// 503 `no_leader`, with `leader_id` only when a leader is known (SPEC §5): one shape
    /// whichever path found that this node cannot serve the request itself.
    pub fn no_leader(message: impl Into<String>, leader_id: Option<u64>) -> Self {
        let error = ApiError::new(ErrorCode::NoLeader, message);
        match leader_id {
            Some(leader_id) => error.with("leader_id", json!(leader_id)),
            None => error,
        }
    }

    /// 504 `outcome_unknown` with the request's `request_id` (`null` when it had none).
    /// The message says how to learn the outcome: retry with the same `request_id`, which
    /// replays the first outcome; a request without one cannot be retried safely (a retry
    /// may apply it twice), so it says that and to read the state instead (also for the
    /// requests that take no `request_id`: principal and membership changes).
    pub fn outcome_unknown(message: impl std::fmt::Display, request_id: Option<&str>) -> Self {
        let advice = match request_id {
            Some(_) => "retry with the same request_id",
            None => {
                "the request carried no request_id, so a retry may apply it twice: read the \
                 state to learn whether it was applied"
            }
        };
        ApiError::new(
            ErrorCode::OutcomeUnknown,
            format!("outcome unknown: {message}; {advice}"),
        )
        .with(
            "request_id",
            request_id.map(Value::from).unwrap_or(Value::Null),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                details: self.details,
            },
        };
        (status, Json(body)).into_response()
    }
}

/// An error answer read back (a relayed request's), as the same error.
impl From<ErrorBody> for ApiError {
    fn from(body: ErrorBody) -> Self {
        ApiError {
            code: body.error.code,
            message: body.error.message,
            details: body.error.details,
        }
    }
}

impl From<OpError> for ApiError {
    fn from(e: OpError) -> Self {
        let details = match serde_json::from_str::<Value>(&e.details_json) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        ApiError {
            code: e.code.into(),
            message: e.message,
            details,
        }
    }
}

impl From<cairn_access::AccessError> for ApiError {
    fn from(e: cairn_access::AccessError) -> Self {
        let mut error = ApiError::new(e.code(), e.to_string());
        if let Value::Object(details) = e.details() {
            error.details = details;
        }
        error
    }
}

impl From<ViewError> for ApiError {
    fn from(e: ViewError) -> Self {
        ApiError::internal(e)
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::NotLeader {
                leader_id: None, ..
            } => ApiError::no_leader("no leader is known", None),
            ReadError::NotLeader { leader_id, .. } => {
                ApiError::no_leader("this node is not the leader", leader_id)
            }
            ReadError::StaleRead(message) => ApiError::new(ErrorCode::StaleRead, message),
            ReadError::NotApplied {
                applied, awaited, ..
            } => ApiError::new(ErrorCode::StaleRead, e.to_string())
                .with("applied_index", applied)
                .with("awaited_index", awaited),
        }
    }
}

/// Maps a batcher failure that is not "forward to the leader".
pub fn write_failure(e: WriteError, request_id: Option<&str>) -> ApiError {
    match e {
        WriteError::NotLeader { leader_id, .. } => {
            ApiError::no_leader("no leader to accept the write", leader_id)
        }
        WriteError::OutcomeUnknown(message) => ApiError::outcome_unknown(message, request_id),
        WriteError::Overloaded => ApiError::new(
            ErrorCode::Overloaded,
            "write queue full; nothing was proposed, retry later",
        ),
    }
}

pub async fn unknown_route(uri: Uri) -> ApiError {
    if uri.path() == "/v1/tombstones/" {
        return super::reads::invalid_tombstone_id();
    }
    ApiError::new(
        ErrorCode::NotFound,
        format!("no such endpoint: {}", uri.path()),
    )
}

pub async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> Response {
    let error = ApiError::invalid(format!("method {method} is not allowed on {}", uri.path()));
    let mut response = error.into_response();
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_unknown_tells_a_retry_with_the_id_only_when_there_is_one() {
        let with = ApiError::outcome_unknown("timed out", Some("r-1"));
        assert_eq!(with.details["request_id"], Value::from("r-1"));
        assert!(
            with.message.ends_with("retry with the same request_id"),
            "{with:?}"
        );
        let without = ApiError::outcome_unknown("timed out", None);
        assert_eq!(without.details["request_id"], Value::Null);
        assert!(
            without.message.contains("no request_id")
                && without.message.contains("may apply it twice")
                && !without.message.contains("retry with the same request_id"),
            "{without:?}"
        );
    }
}
