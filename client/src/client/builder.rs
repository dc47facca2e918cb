//! [`ClientBuilder`]: endpoints, timeouts, retry policy, read defaults, session, bearer
//! token and TLS settings of a [`Client`].

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::routing::{normalize_endpoint, Nodes, Scheme};
use super::tls::{parse_ca, parse_identity, read_file, TlsSettings};
use super::{Client, Result, RetryPolicy};
use crate::api::{Consistency, ReadOptions};
use crate::bearer::BearerToken;
use crate::error::{error_chain, ClientError};
use crate::session::Session;

/// How long an idle pooled connection is kept: under a node's 30 s idle close.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(20);

const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);
/// Covers a leader's commit plus the node's bounded `min_revision` wait (2 s by default).
const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// `GET /cluster/status` is local to the node: a node slower than this is not a useful
/// leader hint.
const DISCOVERY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);
/// Three of the node's 5 s keep-alive comments on an idle watch stream (docs/api.md).
const WATCH_SILENCE_DEFAULT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    pub(super) connect: Duration,
    pub(super) request: Duration,
    pub(super) discovery: Duration,
    pub(super) watch_silence: Duration,
    /// A whole call, retries included; `None`: the retry count alone bounds it.
    pub(super) call: Option<Duration>,
    /// When every call ends at the latest, whatever `call` ([`Client::until`]).
    pub(super) deadline: Option<Instant>,
}

/// Configures a [`Client`]; start with [`Client::builder`].
///
/// ```no_run
/// # fn demo() -> Result<(), cairn_client::ClientError> {
/// use cairn_client::Client;
/// let client = Client::builder(vec!["https://10.0.0.1:7401".into()])
///     .token_file("agent.token".as_ref())
///     .ca_cert_file("certs/ca.pem".as_ref())
///     .build()?;
/// # Ok(()) }
/// ```
///
/// A setter that reads or parses something (token, certificate, key) keeps its first
/// failure and [`ClientBuilder::build`] returns it. `Debug` shows neither the token nor
/// the key.
#[derive(Debug)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    retry: RetryPolicy,
    timeouts: Timeouts,
    defaults: ReadOptions,
    session: Option<Session>,
    token: Option<BearerToken>,
    tls: TlsSettings,
    /// The first failure of a setter, returned by `build`.
    error: Option<ClientError>,
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
                watch_silence: WATCH_SILENCE_DEFAULT,
                call: None,
                deadline: None,
            },
            defaults: ReadOptions::default(),
            session: None,
            token: None,
            tls: TlsSettings::default(),
            error: None,
        }
    }
}

impl ClientBuilder {
    /// Time to establish a TCP connection (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

    /// Time for one whole attempt, answer included (default 10 s). Watches have none; see
    /// [`ClientBuilder::watch_silence_timeout`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.request = timeout;
        self
    }

    /// Time for a whole call: its attempts, leader discovery and the backoff between them
    /// (default none: [`ClientBuilder::retries_max`] bounds it). A call that runs out of it
    /// ends like one that ran out of retries: a mutation that may have reached a node is
    /// [`ClientError::OutcomeUnknown`] with its `request_id`, anything else ends with the
    /// last answer a node gave, or a transport error when none did. For callers that are
    /// themselves waited on with a deadline (an MCP host gives up on a tool call after its
    /// own timeout), so the answer comes while someone still listens.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.call = Some(timeout);
        self
    }

    /// Time for one `GET /cluster/status` during leader discovery (default 2 s, and never
    /// more than [`ClientBuilder::request_timeout`]: a caller that bounds an attempt at a
    /// node bounds the question which node leads too).
    pub fn discovery_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.discovery = timeout;
        self
    }

    /// How long an open watch may go without a byte, the node's keep-alive comments
    /// included, before it is taken as broken and reopened at the leader the nodes name
    /// then (default 15 s: three keep-alives). A stopped or cut-off leader keeps the
    /// connection open without sending anything; this is how a watch leaves it.
    pub fn watch_silence_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.watch_silence = timeout;
        self
    }

    /// Default consistency of reads that do not name one.
    pub fn consistency(mut self, consistency: Consistency) -> Self {
        self.defaults.consistency = Some(consistency);
        self
    }

    /// Default `max_staleness_ms` of `bounded` reads that do not name one. Without a
    /// default consistency, reads that name none are then `bounded`.
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

    /// Sends `Authorization: Bearer TOKEN` on every request (SPEC §8). Surrounding
    /// whitespace is dropped; a token that cannot travel in a header fails `build`.
    pub fn token(self, token: impl AsRef<str>) -> Self {
        let token = BearerToken::new(token);
        self.try_set(token, |b, token| b.token = Some(token))
    }

    /// Like [`ClientBuilder::token`], with a token already checked.
    pub fn bearer_token(mut self, token: BearerToken) -> Self {
        self.token = Some(token);
        self
    }

    /// The token in the file at `path` (its trailing newline dropped).
    pub fn token_file(self, path: &Path) -> Self {
        let token = BearerToken::from_file(path);
        self.try_set(token, |b, token| b.token = Some(token))
    }

    /// Trusts the CA certificate(s) of this PEM bundle for `https://` endpoints, and no
    /// other root. With a CA set, a bare `host:port` endpoint means `https://`.
    pub fn ca_cert_pem(self, pem: &[u8]) -> Self {
        let roots = parse_ca(pem, "CA certificate");
        self.try_set(roots, |b, roots| b.tls.roots.extend(roots))
    }

    /// [`ClientBuilder::ca_cert_pem`] from a file.
    pub fn ca_cert_file(self, path: &Path) -> Self {
        let what = format!("CA certificate {}", path.display());
        let roots = read_file(path, "CA certificate").and_then(|pem| parse_ca(&pem, &what));
        self.try_set(roots, |b, roots| b.tls.roots.extend(roots))
    }

    /// Presents this certificate chain and private key (both PEM) to client ports that
    /// require client certificates (mutual TLS).
    pub fn client_identity_pem(self, cert_pem: &[u8], key_pem: &[u8]) -> Self {
        let identity = parse_identity((cert_pem, "client certificate"), (key_pem, "client key"));
        self.try_set(identity, |b, identity| b.tls.identity = Some(identity))
    }

    /// [`ClientBuilder::client_identity_pem`] from files.
    pub fn client_identity_files(self, cert: &Path, key: &Path) -> Self {
        let identity = read_file(cert, "client certificate").and_then(|cert_pem| {
            let key_pem = read_file(key, "client key")?;
            let cert_name = format!("client certificate {}", cert.display());
            let key_name = format!("client key {}", key.display());
            parse_identity((&cert_pem, &cert_name), (&key_pem, &key_name))
        });
        self.try_set(identity, |b, identity| b.tls.identity = Some(identity))
    }

    fn try_set<T>(mut self, value: Result<T>, set: impl FnOnce(&mut Self, T)) -> Self {
        match value {
            Ok(value) => set(&mut self, value),
            Err(err) => {
                self.error.get_or_insert(err);
            }
        }
        self
    }

    pub fn build(self) -> Result<Client> {
        if let Some(err) = self.error {
            return Err(err);
        }
        if self.endpoints.is_empty() {
            return Err(ClientError::invalid_input("no endpoints given"));
        }
        let scheme = match self.tls.has_roots() {
            true => Scheme::Https,
            false => Scheme::Http,
        };
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| normalize_endpoint(e, scheme))
            .collect::<Result<Vec<_>>>()?;
        if let Some(https) = endpoints.iter().find(|e| e.starts_with("https://")) {
            if !self.tls.has_roots() {
                return Err(ClientError::invalid_input(format!(
                    "endpoint {https}: HTTPS needs the cluster's CA certificate (the CLI: \
                     --cacert FILE or CAIRN_CACERT)"
                )));
            }
        }
        let http = reqwest::Client::builder()
            .connect_timeout(self.timeouts.connect)
            // A node closes a connection idle for 30 s (its `limits.request_head_timeout_ms`);
            // the pool lets go first, so no request goes out on a connection being closed.
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            // Nodes are direct peers; an HTTP_PROXY meant for the internet must not sit
            // between an agent and its cluster.
            .no_proxy();
        let tls = self.tls.config()?;
        let http = match &tls {
            Some(tls) => tls.apply(http),
            None => http,
        };
        let http = http
            .build()
            .map_err(|e| ClientError::invalid_input(format!("http client: {}", error_chain(&e))))?;
        let timeouts = Timeouts {
            discovery: self.timeouts.discovery.min(self.timeouts.request),
            ..self.timeouts
        };
        Ok(Client {
            http,
            nodes: Arc::new(Nodes::new(endpoints, scheme, false)),
            retry: self.retry,
            timeouts,
            defaults: self.defaults,
            session: self.session.map(|s| Arc::new(Mutex::new(s))),
            token: self.token,
            tls,
        })
    }
}
