//! One HTTP exchange: a [`Call`] (method, route, path, body, retry mode, deadline) sent
//! to one endpoint with the client's bearer token, and the decoding of its answer.

use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::retry::Mode;
use super::routing::Route;
use super::{Client, Result};
use crate::error::{closed_unexplained, ClientError};
use crate::watch::ChunkStream;

/// One request as the retry loop sends it, attempt after attempt.
pub(super) struct Call<'a> {
    pub(super) method: Method,
    pub(super) route: Route<'a>,
    pub(super) path: &'a [&'a str],
    pub(super) query: Vec<(&'static str, String)>,
    /// Serialized once, so every retry sends the identical payload (the node compares
    /// payload hashes under one `request_id`).
    pub(super) body: Option<Vec<u8>>,
    pub(super) mode: Mode,
    /// `None`: no overall deadline (watch streams).
    pub(super) timeout: Option<Duration>,
}

impl Client {
    /// One HTTP exchange: `Ok` for a 2xx response, the parsed error otherwise.
    pub(super) async fn attempt(&self, base: &str, call: &Call<'_>) -> Result<reqwest::Response> {
        let url = endpoint_url(base, call.path, &call.query)?;
        let mut request = self.http.request(call.method.clone(), url);
        // Every attempt, retry and discovery request carries the token: a follower relays
        // it to the leader, which authenticates the request again (SPEC §8).
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, token.header_value());
        }
        if let Some(timeout) = call.timeout {
            request = request.timeout(timeout);
        }
        if let Some(body) = &call.body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(err) => return Err(self.send_error(base, &err).await),
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| ClientError::transport(base, &e))?;
        Err(ClientError::from_response(status.as_u16(), &body))
    }
}

impl Client {
    /// The error of a request that got no answer. When the connection closed before the
    /// request went out on HTTPS, hyper's error does not say why; the node may have
    /// refused the client's certificate (TLS 1.3 ends the client's handshake before the
    /// node's verdict), so a handshake of the client's own asks, within the connect
    /// timeout.
    async fn send_error(&self, base: &str, err: &reqwest::Error) -> ClientError {
        if let Some(tls) = self.tls.as_ref().filter(|_| closed_unexplained(err)) {
            if let Some(alert) = tls.refusal_alert(base, self.timeouts.connect).await {
                return ClientError::transport_after_alert(base, err, alert);
            }
        }
        ClientError::transport(base, err)
    }
}

/// `base` with the path segments (each percent-encoded) and the query appended.
pub(super) fn endpoint_url(base: &str, path: &[&str], query: &[(&str, String)]) -> Result<Url> {
    let mut url = Url::parse(base)
        .map_err(|e| ClientError::invalid_input(format!("endpoint {base:?}: {e}")))?;
    url.path_segments_mut()
        .map_err(|()| ClientError::invalid_input(format!("endpoint {base:?}: not a base URL")))?
        .pop_if_empty()
        .extend(path);
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(query);
    }
    Ok(url)
}

pub(super) fn encode(value: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(value)
        .map_err(|e| ClientError::invalid_input(format!("encode request: {e}")))
}

pub(super) async fn read_body(response: reqwest::Response) -> Result<Vec<u8>> {
    let endpoint = response.url().to_string();
    response
        .bytes()
        .await
        .map(|b| b.to_vec())
        .map_err(|e| ClientError::transport(&endpoint, &e))
}

/// The body of a 2xx answer as `T`.
pub(super) async fn read_json<T: DeserializeOwned>(response: reqwest::Response) -> Result<T> {
    let body = read_body(response).await?;
    serde_json::from_slice(&body).map_err(|e| ClientError::decode(std::any::type_name::<T>(), e))
}

/// The body of a 2xx answer as it arrives (watch streams).
pub(super) fn chunk_stream(response: reqwest::Response) -> ChunkStream {
    let endpoint = response.url().to_string();
    Box::pin(response.bytes_stream().map(move |chunk| {
        chunk
            .map(|b| b.to_vec())
            .map_err(|e| ClientError::transport(&endpoint, &e))
    }))
}
