//! The strict JSON body extractor.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use cairn_client::api::ErrorCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Room for everything in a request besides the value itself.
pub const ENVELOPE_BYTES_MAX: usize = 1 << 20;

/// A parsed JSON body plus its raw bytes (relayed verbatim when forwarding to the leader).
/// Unknown fields, wrong types and oversize bodies are typed errors, never partial parses.
pub struct JsonBody<T> {
    pub value: T,
    pub raw: Bytes,
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let raw = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(ErrorCode::TooLarge, "request body exceeds the size limit")
            } else {
                ApiError::invalid(format!("unreadable body: {rejection}"))
            }
        })?;
        let value = serde_json::from_slice(&raw)
            .map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))?;
        Ok(JsonBody { value, raw })
    }
}

/// A query string parsed strictly; unknown parameters are a typed 400, like body fields.
pub struct StrictQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for StrictQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| StrictQuery(q.0))
            .map_err(|rejection| {
                ApiError::invalid(format!("invalid query string: {}", rejection.body_text()))
            })
    }
}
