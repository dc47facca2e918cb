//! [`Client`]: the async client of a cairn cluster.
//!
//! - **Leader discovery.** Mutations and linearizable reads go to the leader, found with
//!   `GET /cluster/status` (`leader_id` → that node's `client_addr`) and cached until a call
//!   to it fails. Without a known leader a call goes to the next endpoint: followers forward
//!   mutations, or answer 503 `no_leader`, which is retried. Membership changes (join,
//!   remove) skip the cache and ask the nodes first: a join may wait minutes at the node it
//!   reaches, and a cached leader that stopped answering would hold it for all of them.
//! - **Bounded retries.** Every call makes at most `retries_max + 1` attempts with jittered
//!   exponential backoff between `backoff_ms_min` and `backoff_ms_max`, rotating endpoints.
//!   Only transient failures are retried (unreachable node, `no_leader`, `stale_read`,
//!   `outcome_unknown`); a definite answer (404, 409, …) is returned at once.
//! - **Exactly-once mutations.** Every mutation carries a `request_id` (a time-ordered
//!   128-bit hex id, see [`new_request_id`], unless the caller set one) and every retry
//!   resends the identical body. If any attempt may have reached the node without an
//!   answer coming back and no later attempt got a definite one, the call returns
//!   [`ClientError::OutcomeUnknown`] with that id.
//! - **Reads.** Linearizable reads go to the leader; `bounded` and `any` reads are spread
//!   round-robin over the endpoints. With a [`Session`], every read sends the session
//!   revision as `min_revision` and is checked against it; a stale answer is retried
//!   linearizably at the leader (at most [`SESSION_RETRIES_MAX`] times), else the call fails
//!   with [`ClientError::SessionRegression`].
//! - [`Client::pinned`] sends everything to one node (per-replica checks, forwarding tests).
//!
//! # Layout
//!
//! - this file: [`Client`], its accessors and its session bookkeeping;
//! - `builder`: [`ClientBuilder`], timeouts and their defaults;
//! - `routing`: endpoints, the cached leader, leader discovery, endpoint normalization;
//! - `retry`: [`RetryPolicy`], the retry loop of every call, `request_id`s,
//!   `OutcomeUnknown`;
//! - `transport`: one HTTP exchange (with the bearer token) and the decoding of its
//!   answer;
//! - `tls`: the cluster CA and the client certificate of `https://` endpoints;
//! - `mutations`, `reads`, `admin`, `auth`: the calls of the API, by kind.

mod admin;
mod auth;
mod builder;
mod mutations;
mod reads;
mod retry;
mod routing;
#[cfg(test)]
mod test_support;
mod tls;
mod transport;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use builder::ClientBuilder;
pub use reads::SESSION_RETRIES_MAX;
pub use retry::{
    new_request_id, RetryPolicy, BACKOFF_MS_MAX_DEFAULT, BACKOFF_MS_MIN_DEFAULT,
    RETRIES_MAX_DEFAULT,
};

use builder::Timeouts;
use routing::{normalize_endpoint, Nodes};

use crate::api::ReadOptions;
use crate::bearer::BearerToken;
use crate::error::ClientError;
use crate::session::{Observable, Session};

type Result<T> = std::result::Result<T, ClientError>;

/// A cairn client. Cheap to clone; clones share connections, leader cache and session.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    nodes: Arc<Nodes>,
    retry: RetryPolicy,
    timeouts: Timeouts,
    defaults: ReadOptions,
    session: Option<Arc<Mutex<Session>>>,
    /// Sent as `Authorization: Bearer` on every request (`Debug` redacts it).
    token: Option<BearerToken>,
    /// The rustls configuration reqwest's connections use, kept for the probe that
    /// names a refused client certificate ([`tls::TlsConfig::refusal_alert`]).
    tls: Option<tls::TlsConfig>,
}

impl Client {
    /// A client with default settings. Endpoints are `http://host:port` or `host:port`
    /// (HTTPS and tokens: [`Client::builder`]).
    pub fn new(endpoints: Vec<String>) -> Result<Client> {
        Client::builder(endpoints).build()
    }

    /// This client, tracking what it sees in `session` from now on.
    pub fn with_session(mut self, session: Session) -> Client {
        self.session = Some(Arc::new(Mutex::new(session)));
        self
    }

    /// This client, with every call ending by `deadline` at the latest, as a call that
    /// runs out of its call timeout ends ([`ClientBuilder::call_timeout`]): for a caller
    /// whose several calls share one bound of its own (an MCP tool call). Shares this
    /// client's connections, leader cache and session.
    pub fn until(&self, deadline: std::time::Instant) -> Client {
        let mut timeouts = self.timeouts;
        timeouts.deadline = Some(deadline);
        Client {
            timeouts,
            ..self.clone()
        }
    }

    /// A snapshot of the session, if this client has one.
    pub fn session(&self) -> Option<Session> {
        self.session.as_ref().map(|s| lock(s).clone())
    }

    /// The normalized endpoints (`http[s]://host:port`).
    pub fn endpoints(&self) -> &[String] {
        &self.nodes.endpoints
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// Takes `endpoint` as the leader until a call to it fails (tests outside this module).
    #[cfg(test)]
    pub(crate) fn cache_leader(&self, endpoint: &str) {
        self.nodes.set_leader(endpoint);
    }

    /// How long an open watch may stay silent before it is reopened elsewhere.
    pub(crate) fn watch_silence(&self) -> std::time::Duration {
        self.timeouts.watch_silence
    }

    /// A client that sends every call to `endpoint` (followers forward what they cannot
    /// serve). Shares this client's connections and session.
    pub fn pinned(&self, endpoint: &str) -> Result<Client> {
        let endpoint = self.endpoint(endpoint)?;
        Ok(Client {
            nodes: Arc::new(Nodes::new(vec![endpoint], self.nodes.scheme, true)),
            ..self.clone()
        })
    }

    /// `true` when this client sends a bearer token.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// `endpoint` normalized; a bare `host:port` gets this client's default scheme.
    fn endpoint(&self, endpoint: &str) -> Result<String> {
        normalize_endpoint(endpoint, self.nodes.scheme)
    }

    /// The leader's endpoint, as the endpoints name it now (one pass of leader discovery,
    /// whose answer calls then go to): a cached leader may have stepped down or stopped
    /// since, and a long-lived client asking this wants the present one.
    pub async fn leader(&self) -> Result<String> {
        self.discover_leader(None)
            .await
            .ok_or_else(|| ClientError::NoLeader {
                message: "no endpoint reported a reachable leader".into(),
                leader_id: None,
                details: Default::default(),
            })
    }

    /// The session revision, if there is one worth sending (0 asks for nothing).
    fn session_revision(&self) -> Option<u64> {
        let session = self.session.as_ref()?;
        Some(lock(session).revision()).filter(|revision| *revision > 0)
    }

    fn observe(&self, answer: &impl Observable) {
        if let Some(session) = &self.session {
            lock(session).observe(answer);
        }
    }

    fn check(&self, answer: &impl Observable) -> Result<()> {
        match &self.session {
            Some(session) => lock(session).check(answer),
            None => Ok(()),
        }
    }
}

/// Locks a mutex, ignoring poisoning: the guarded data (leader hint, session marks) is
/// valid after any panic, since every update is a single assignment or max.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
