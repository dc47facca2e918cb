//! [`ClientBuilder`]: endpoints, timeouts, retry policy, read defaults and session of a
//! [`Client`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::routing::{normalize_endpoint, Nodes};
use super::{Client, Result, RetryPolicy};
use crate::api::{Consistency, ReadOptions};
use crate::error::ClientError;
use crate::session::Session;

const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);
/// Covers a leader's commit plus the node's bounded `min_revision` wait (2 s by default).
const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// `GET /cluster/status` is local to the node: a node slower than this is not a useful
/// leader hint.
const DISCOVERY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    pub(super) connect: Duration,
    pub(super) request: Duration,
    pub(super) discovery: Duration,
}

/// Configures a [`Client`]; start with [`Client::builder`].
#[derive(Debug)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    retry: RetryPolicy,
    timeouts: Timeouts,
    defaults: ReadOptions,
    session: Option<Session>,
}

impl Client {
    pub fn builder(endpoints: Vec<String>) -> ClientBuilder {
        ClientBuilder {
            endpoints,
            retry: RetryPolicy::default(),
            timeouts: Timeouts {
                connect: CONNECT_TIMEOUT_DEFAULT,
                request: REQUEST_TIMEOUT_DEFAULT,
                discovery: DISCOVERY_TIMEOUT_DEFAULT,
            },
            defaults: ReadOptions::default(),
            session: None,
        }
    }
}

impl ClientBuilder {
    /// Time to establish a TCP connection (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

    /// Time for one whole attempt, answer included (default 10 s). Watches have none.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.request = timeout;
        self
    }

    /// Time for one `GET /cluster/status` during leader discovery (default 2 s).
    pub fn discovery_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.discovery = timeout;
        self
    }

    /// Default consistency of reads that do not name one.
    pub fn consistency(mut self, consistency: Consistency) -> Self {
        self.defaults.consistency = Some(consistency);
        self
    }

    /// Default `max_staleness_ms` of `bounded` reads that do not name one.
    pub fn max_staleness_ms(mut self, ms: u64) -> Self {
        self.defaults.max_staleness_ms = Some(ms);
        self
    }

    /// Retries after the first attempt of every call (default 5).
    pub fn retries_max(mut self, retries_max: u32) -> Self {
        self.retry.retries_max = retries_max;
        self
    }

    /// Backoff bounds between retries (defaults 50 ms and 2 s).
    pub fn backoff_ms(mut self, min: u64, max: u64) -> Self {
        self.retry.backoff_ms_min = min;
        self.retry.backoff_ms_max = max.max(min);
        self
    }

    /// Tracks what this client sees in `session` (SPEC §3).
    pub fn session(mut self, session: Session) -> Self {
        self.session = Some(session);
        self
    }

    pub fn build(self) -> Result<Client> {
        if self.endpoints.is_empty() {
            return Err(ClientError::invalid_input("no endpoints given"));
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| normalize_endpoint(e))
            .collect::<Result<Vec<_>>>()?;
        let http = reqwest::Client::builder()
            .connect_timeout(self.timeouts.connect)
            // Nodes are direct peers; an HTTP_PROXY meant for the internet must not sit
            // between an agent and its cluster.
            .no_proxy()
            .build()
            .map_err(|e| ClientError::invalid_input(format!("http client: {e}")))?;
        Ok(Client {
            http,
            nodes: Arc::new(Nodes::new(endpoints, false)),
            retry: self.retry,
            timeouts: self.timeouts,
            defaults: self.defaults,
            session: self.session.map(|s| Arc::new(Mutex::new(s))),
        })
    }
}
