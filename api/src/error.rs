//! Every error code of SPEC §5 and the JSON body errors travel in.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Every error code of SPEC §5, with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    NotFound,
    VersionConflict,
    KeyForgotten,
    KeyRevoked,
    StaleWrite,
    InvalidTransition,
    TooLarge,
    RequestIdReused,
    NoLeader,
    StaleRead,
    OutcomeUnknown,
    /// 503: the node's bounded write queue is full; nothing was proposed, retry later.
    Overloaded,
    /// 401: a missing, malformed, unknown or deleted token (auth on).
    Unauthenticated,
    /// 403: no grant covers the operation; details name `permission` and `key`
    /// (or `op_index` in a batch).
    PermissionDenied,
    /// 403: `actor` names someone other than the authenticated principal.
    ActorMismatch,
    Internal,
}

impl ErrorCode {
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest => 400,
            ErrorCode::NotFound => 404,
            ErrorCode::VersionConflict
            | ErrorCode::KeyForgotten
            | ErrorCode::KeyRevoked
            | ErrorCode::StaleWrite
            | ErrorCode::InvalidTransition => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::RequestIdReused => 422,
            ErrorCode::NoLeader | ErrorCode::StaleRead | ErrorCode::Overloaded => 503,
            ErrorCode::OutcomeUnknown => 504,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied | ErrorCode::ActorMismatch => 403,
            ErrorCode::Internal => 500,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::NotFound => "not_found",
            ErrorCode::VersionConflict => "version_conflict",
            ErrorCode::KeyForgotten => "key_forgotten",
            ErrorCode::KeyRevoked => "key_revoked",
            ErrorCode::StaleWrite => "stale_write",
            ErrorCode::InvalidTransition => "invalid_transition",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::RequestIdReused => "request_id_reused",
            ErrorCode::NoLeader => "no_leader",
            ErrorCode::StaleRead => "stale_read",
            ErrorCode::OutcomeUnknown => "outcome_unknown",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::ActorMismatch => "actor_mismatch",
            ErrorCode::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{"error": {"code", "message", ...details}}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
    /// Code-specific details, e.g. `current_version`, `tombstone`, `revocation`, `op_index`,
    /// `request_id`, `leader_id`.
    #[serde(flatten)]
    pub details: serde_json::Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_serialize_as_spec_names() {
        for code in [
            ErrorCode::VersionConflict,
            ErrorCode::OutcomeUnknown,
            ErrorCode::RequestIdReused,
        ] {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, Value::String(code.as_str().to_string()));
        }
        assert_eq!(ErrorCode::StaleRead.http_status(), 503);
    }
}
