//! [`Gateway`]: the server's way into the cluster. It builds one [`Client`] per caller
//! token (each with its own session, so a caller reads its own writes), knows whether
//! the cluster has auth on, and picks the `actor` mutations carry.
//!
//! Whether auth is on is asked of the cluster, never configured: `GET /v1/auth/whoami`
//! without a token answers 401 `unauthenticated` when auth is on, and 409
//! `invalid_transition` ("auth is off") when it is off. Auth cannot be turned off again,
//! so "on" is remembered; "off" is believed for [`AUTH_OFF_RECHECK`] and then asked
//! again, so a cluster whose auth is enabled later is noticed within that bound, without
//! an extra round trip on every call of an auth-off cluster.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cairn_client::api::WhoAmI;
use cairn_client::client::ClientBuilder;
use cairn_client::{BearerToken, Client, ClientError, Session};

use crate::args::Args;
use crate::tools::budget::Budget;
use crate::tools::overridden::OverriddenNotes;

/// Cluster clients kept for HTTP callers' tokens. A full cache is emptied and refilled:
/// callers beyond this many distinct tokens only pay a client rebuild.
const CLIENTS_MAX: usize = 256;
/// How long an "auth is off" answer is believed. A call in the window after auth is
/// enabled goes out as an auth-off call and is refused by the node (unauthenticated, or
/// actor_mismatch), never applied under the wrong identity.
const AUTH_OFF_RECHECK: Duration = Duration::from_secs(1);

/// One caller's handle on the cluster: a client sending that caller's token (or none),
/// and the principal the cluster named for that token (`None`: no token, or auth off).
#[derive(Debug, Clone)]
pub struct Caller {
    client: Client,
    principal: Option<String>,
}

impl Caller {
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The principal this caller acts as, as the cluster named it when the request came.
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }
}

/// How clients reach the cluster: endpoints, TLS files and timeouts.
#[derive(Debug, Clone)]
struct ClientSettings {
    endpoints: Vec<String>,
    cacert: Option<PathBuf>,
    identity: Option<(PathBuf, PathBuf)>,
    timeout: Duration,
    retries: u32,
    call_timeout: Duration,
}

/// Shared by every MCP session of the process.
pub struct Gateway {
    settings: ClientSettings,
    /// No token: asks whether auth is on, and serves tokenless callers of an auth-off
    /// cluster.
    anonymous: Caller,
    auth_on: AtomicBool,
    /// When the cluster last said auth is off.
    auth_off_seen: Mutex<Option<Instant>>,
    /// Actor of mutations while auth is off.
    actor: String,
    /// The stdio caller (CAIRN_TOKEN); `None` over HTTP, where every request brings its
    /// own token.
    fixed: Option<Caller>,
    /// HTTP callers' clients by token. The map is never printed (`Debug` below).
    by_token: Mutex<HashMap<String, Caller>>,
    /// Whether the cluster could not check tokens when last asked ([`Gateway::caller_for`]).
    undecided: Arc<Undecided>,
    /// Revoked notes overridden by writes, for their repeats (every session's).
    overridden: OverriddenNotes,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("endpoints", &self.settings.endpoints)
            .field("auth_on", &self.auth_on)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// The gateway of `args`; `stdio_token` is the caller of stdio mode (`None` over HTTP
    /// or without a token).
    pub fn new(args: &Args, stdio_token: Option<BearerToken>) -> Result<Gateway, ClientError> {
        let settings = ClientSettings {
            endpoints: args.endpoints.clone(),
            cacert: args.cacert.clone(),
            identity: args.cert.clone().zip(args.key.clone()),
            timeout: Duration::from_millis(args.timeout_ms),
            retries: args.retries,
            call_timeout: Duration::from_millis(args.call_timeout_ms),
        };
        let anonymous = settings.caller(None)?;
        let fixed = match (args.listen, stdio_token) {
            (Some(_), _) => None,
            (None, token) => Some(settings.caller(token)?),
        };
        Ok(Gateway {
            settings,
            anonymous,
            auth_on: AtomicBool::new(false),
            auth_off_seen: Mutex::new(None),
            actor: args.actor.clone(),
            fixed,
            by_token: Mutex::new(HashMap::new()),
            undecided: Arc::default(),
            overridden: OverriddenNotes::default(),
        })
    }

    /// The stdio caller, if this is stdio mode.
    pub fn fixed_caller(&self) -> Option<Caller> {
        self.fixed.clone()
    }

    /// The time a tool call starting now has for the cluster (`--call-timeout-ms`).
    pub fn budget(&self) -> Budget {
        Budget::start(self.settings.call_timeout)
    }

    /// The revoked notes that writes with `override_revocation` met, by caller and
    /// `request_id`.
    pub fn overridden(&self) -> &OverriddenNotes {
        &self.overridden
    }

    /// The caller of a tokenless HTTP request (an auth-off cluster only).
    pub fn anonymous(&self) -> Caller {
        self.anonymous.clone()
    }

    /// The client of `token`, checked with the cluster on every request (`whoami`) and
    /// kept, with the principal the cluster named, for the token's next request.
    ///
    /// - A token the cluster does not know, or no longer knows (rotated, its principal
    ///   deleted), is refused (`unauthenticated`) and its client dropped: SPEC §9 answers
    ///   such a request 401 at once, so a token that was good once cannot be believed
    ///   from memory while the cluster can answer. Evicting a kept token only when a
    ///   cluster call answers `unauthenticated` would not do: `initialize`, `tools/list`,
    ///   pings and notifications never call the cluster, and a tool's refusal is a result
    ///   inside HTTP 200.
    /// - When the cluster cannot decide (no leader, no majority to confirm one, no node
    ///   reachable), a kept token acts as the principal last confirmed for it: a token
    ///   names one principal for its whole life, and every cluster call is authenticated
    ///   again by the node, so the tool call itself gets the cluster's answer (an `any`
    ///   read served by a survivor, `no_leader`, or the protocol error of an unreachable
    ///   cluster), as over stdio. A token never confirmed gets the undecided error.
    /// - The check is one round trip (`whoami`, routed to the leader), small beside what
    ///   an MCP request does, and comes out of the request's `budget`: a check that waits
    ///   for a lost majority leaves the tool call less time, never more in all.
    /// - Once a check found the cluster undecided, kept tokens act as their principals at
    ///   once, and one check at a time runs in the background until the cluster decides
    ///   again: otherwise every request would spend its budget on a check that cannot
    ///   end (an `any` read, the read meant to stay available, took 6 s instead of 0.2).
    pub async fn caller_for(
        &self,
        token: BearerToken,
        budget: &Budget,
    ) -> Result<Caller, ClientError> {
        let key = token.expose().to_string();
        let kept = self.clients().get(&key).cloned();
        let is_kept = kept.is_some();
        let caller = match kept {
            Some(caller) => caller,
            None => self.settings.caller(Some(token.clone()))?,
        };
        if is_kept && self.undecided.is_set() {
            self.undecided
                .recheck_in_background(|| self.settings.checker(token));
            return Ok(caller);
        }
        let answer = budget.client(caller.client()).whoami().await;
        self.undecided.set(!decides(&answer));
        let principal = match answer {
            Ok(who) => Some(who.name),
            // InvalidTransition: auth is off, so any token is as good as none.
            Err(ClientError::InvalidTransition { .. }) => None,
            Err(err @ ClientError::Unauthenticated { .. }) => {
                self.clients().remove(&key);
                return Err(err);
            }
            Err(err) if is_kept => {
                tracing::debug!(
                    error = err.name(),
                    "the cluster could not check a token: acting as its last confirmed principal"
                );
                return Ok(caller);
            }
            Err(err) => return Err(err),
        };
        let caller = Caller {
            principal,
            ..caller
        };
        // Stored again even when kept: a token kept while auth was off has no principal
        // until auth is on, and the undecided path above acts as the stored one.
        let mut clients = self.clients();
        if !is_kept && clients.len() >= CLIENTS_MAX {
            clients.clear();
        }
        clients.insert(key, caller.clone());
        Ok(caller)
    }

    fn auth_off_seen(&self) -> Option<Instant> {
        *self
            .auth_off_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn clients(&self) -> MutexGuard<'_, HashMap<String, Caller>> {
        self.by_token.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the cluster has auth on (see the module doc for how it is known), asked
    /// within `budget` when it must be asked.
    pub async fn auth_on(&self, budget: &Budget) -> Result<bool, ClientError> {
        if self.auth_on.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let off_recently = self
            .auth_off_seen()
            .is_some_and(|at| at.elapsed() < AUTH_OFF_RECHECK);
        if off_recently {
            return Ok(false);
        }
        match budget.client(self.anonymous.client()).whoami().await {
            Err(ClientError::Unauthenticated { .. }) => {
                self.auth_on.store(true, Ordering::Relaxed);
                Ok(true)
            }
            Err(ClientError::InvalidTransition { .. }) => {
                *self
                    .auth_off_seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
                Ok(false)
            }
            Ok(_) => Err(ClientError::Decode {
                message: "whoami without a token named a principal".into(),
            }),
            Err(err) => Err(err),
        }
    }

    /// The `actor` of a mutation: empty with auth on, so the node records the token's
    /// principal (an actor is never taken from a tool argument); `--actor` with auth off,
    /// where the node requires one.
    pub async fn actor(&self, budget: &Budget) -> Result<String, ClientError> {
        Ok(if self.auth_on(budget).await? {
            String::new()
        } else {
            self.actor.clone()
        })
    }
}

/// Whether a token check got the cluster's decision: a principal, "unknown token", or
/// "auth is off". Anything else (no leader, no majority, no node reachable) leaves the
/// token undecided.
fn decides(answer: &Result<WhoAmI, ClientError>) -> bool {
    matches!(
        answer,
        Ok(_) | Err(ClientError::Unauthenticated { .. } | ClientError::InvalidTransition { .. })
    )
}

/// That the cluster could not check tokens when last asked, and whether a check runs in
/// the background to learn when it can again.
#[derive(Debug, Default)]
struct Undecided {
    set: AtomicBool,
    rechecking: AtomicBool,
}

impl Undecided {
    fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    fn set(&self, undecided: bool) {
        self.set.store(undecided, Ordering::Release);
    }

    /// Checks a token in the background with the client `checker` builds (built only when
    /// no check runs already); clears the flag once the cluster decides.
    fn recheck_in_background(
        self: &Arc<Self>,
        checker: impl FnOnce() -> Result<Client, ClientError>,
    ) {
        if self.rechecking.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(checker) = checker() else {
            self.rechecking.store(false, Ordering::Release);
            return;
        };
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let answer = checker.whoami().await;
            if decides(&answer) {
                tracing::info!("the cluster checks tokens again");
                this.set(false);
            }
            this.rechecking.store(false, Ordering::Release);
        });
    }
}

/// Bounds of a background token check ([`Undecided`]): short, so a check stuck on a node
/// that accepts connections and never answers (a paused process) ends soon and the next
/// request starts another, and a token rotated once the cluster answers again is refused
/// within about this long, not after a whole `--timeout-ms` (10 s).
const RECHECK_ATTEMPT: Duration = Duration::from_millis(500);
const RECHECK_CALL: Duration = Duration::from_millis(1500);

impl ClientSettings {
    /// A client for one background check of `token` ([`RECHECK_ATTEMPT`]).
    fn checker(&self, token: BearerToken) -> Result<Client, ClientError> {
        self.builder(Some(token))
            .request_timeout(RECHECK_ATTEMPT)
            .call_timeout(RECHECK_CALL)
            .build()
    }

    /// A client of the cluster with `token` (or none), its TLS files and nothing else.
    fn builder(&self, token: Option<BearerToken>) -> ClientBuilder {
        let mut builder = Client::builder(self.endpoints.clone());
        if let Some(token) = token {
            builder = builder.bearer_token(token);
        }
        if let Some(ca) = &self.cacert {
            builder = builder.ca_cert_file(ca);
        }
        if let Some((cert, key)) = &self.identity {
            builder = builder.client_identity_files(cert, key);
        }
        builder
    }

    fn caller(&self, token: Option<BearerToken>) -> Result<Caller, ClientError> {
        let client = self
            .builder(token)
            .request_timeout(self.timeout)
            .retries_max(self.retries)
            .call_timeout(self.call_timeout)
            .session(Session::new())
            .build()?;
        Ok(Caller {
            client,
            principal: None,
        })
    }
}
