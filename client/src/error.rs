//! [`ClientError`]: every way a cairn call can fail, with the server's details parsed.
//!
//! One variant per SPEC §5 error code (built from the `{"error": {"code", "message", …}}`
//! body by [`ClientError::from_response`]), plus the failures only a client can see:
//! transport, undecodable answers, a session regression, bad local input.
//!
//! `OutcomeUnknown` is its own variant and is never folded into a failure: the mutation may
//! or may not have been applied, and retrying with the same `request_id` is the only safe
//! way to find out.
//!
//! Large details (tombstone, revocation) are boxed to keep `Result<_, ClientError>` small.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::api::{ErrorBody, ErrorCode, Revocation, Served, Tombstone};

/// CLI exit code for failures that fit no other class (decode errors, 500s, local I/O).
pub const EXIT_OTHER: u8 = 1;
/// CLI exit code for input the server or client rejected (400, 413, 422, bad token).
pub const EXIT_INVALID_INPUT: u8 = 2;
/// CLI exit code for 404 `not_found`.
pub const EXIT_NOT_FOUND: u8 = 3;
/// CLI exit code for the 409 conflicts (`version_conflict`, `key_forgotten`, …).
pub const EXIT_CONFLICT: u8 = 4;
/// CLI exit code when the cluster could not serve the call (503, unreachable nodes).
pub const EXIT_UNAVAILABLE: u8 = 5;
/// CLI exit code for a mutation whose outcome is unknown (504, connection lost after send).
pub const EXIT_OUTCOME_UNKNOWN: u8 = 6;
/// CLI exit code when the caller is not authenticated or not permitted (401, 403).
pub const EXIT_DENIED: u8 = 7;

/// Longest slice of a non-JSON error body kept in [`ClientError::Http`].
const HTTP_BODY_EXCERPT_MAX: usize = 512;

/// The fields of a node's error object besides `code` and `message`, all of them as sent
/// (those a variant parses too), so that nothing the node said is lost: `replayed`,
/// `field`, `limit`, `size`, `fence_revision`, `after_op_index`, .... Empty for errors the
/// client made itself (a give-up after retries included).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeDetails(Option<Box<Map<String, Value>>>);

impl NodeDetails {
    fn of(fields: &Map<String, Value>) -> NodeDetails {
        NodeDetails((!fields.is_empty()).then(|| Box::new(fields.clone())))
    }
}

/// Every failure of a cairn call. `Display` is `<code>: <message>`; an error of a batch op
/// names the op first, as the node's own batch refusals do: `<code>: ops[1]: <message>`.
/// It serializes as the node's error object, `{"code", "message", …details}` with the
/// code of [`ClientError::name`] (see [`ClientError::to_json`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum ClientError {
    /// 400: the request was malformed or violated a limit.
    #[error("invalid_request: {message}")]
    InvalidRequest {
        message: String,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 404: the key (or tombstone id) does not exist.
    #[error("not_found: {}", at_op(.op_index, .message))]
    NotFound {
        message: String,
        /// How the read that found the key absent was served (`read` and `history`): an
        /// absence on a follower is only as recent as its `applied_index`.
        served: Option<Served>,
        /// The batch operation whose key does not exist.
        op_index: Option<usize>,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 409: `expected_version` did not match.
    #[error("version_conflict: {}", at_op(.op_index, .message))]
    VersionConflict {
        message: String,
        current_version: Option<u64>,
        /// Index of the failing operation when the request was a batch.
        op_index: Option<usize>,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 409: the key is forgotten; writing needs `clear_tombstone`.
    #[error("key_forgotten: {}", at_op(.op_index, .message))]
    KeyForgotten {
        message: String,
        tombstone: Option<Box<Tombstone>>,
        op_index: Option<usize>,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 409: the key is revoked; writing needs `override_revocation`.
    #[error("key_revoked: {}", at_op(.op_index, .message))]
    KeyRevoked {
        message: String,
        revocation: Option<Box<Revocation>>,
        /// The deterrent line (SPEC §4), so a caller can show why the belief was revoked.
        rendered: Option<String>,
        op_index: Option<usize>,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 409: the key changed (forgotten, revoked, re-created) after `based_on_revision`.
    #[error("stale_write: {}", at_op(.op_index, .message))]
    StaleWrite {
        message: String,
        op_index: Option<usize>,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 409: the operation is not allowed in the key's state.
    #[error("invalid_transition: {}", at_op(.op_index, .message))]
    InvalidTransition {
        message: String,
        op_index: Option<usize>,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 413: a value or request body over its limit, or a key's 65th stale flag (a key,
    /// reason or list over its limit is 400 `invalid_request`, with `field`, `limit`, `size`).
    #[error("too_large: {message}")]
    TooLarge {
        message: String,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 422: the `request_id` was already used for a different payload.
    #[error("request_id_reused: {message}")]
    RequestIdReused {
        message: String,
        request_id: Option<String>,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 503: no leader is known (election in progress, or no quorum).
    #[error("no_leader: {message}")]
    NoLeader {
        message: String,
        leader_id: Option<u64>,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 503: the node could not serve the read at the requested freshness.
    #[error("stale_read: {message}")]
    StaleRead {
        message: String,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 503: the node's write queue is full; nothing was proposed.
    #[error("overloaded: {message}")]
    Overloaded {
        message: String,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// The mutation may or may not have been applied. Retry with this `request_id`.
    /// `None`: a request that carried none (membership and principal changes), whose
    /// outcome only the state can tell.
    #[error("outcome_unknown: {}", with_request_id(.message, .request_id))]
    OutcomeUnknown {
        request_id: Option<String>,
        message: String,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 401: a missing, malformed, unknown or deleted token.
    #[error("unauthenticated: {message}")]
    Unauthenticated {
        message: String,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 403: no grant of the principal covers `permission` on `key` (or on the batch's
    /// operation `op_index`).
    #[error("permission_denied: {}", at_op(.op_index, .message))]
    PermissionDenied {
        message: String,
        permission: Option<cairn_api::Permission>,
        key: Option<String>,
        op_index: Option<usize>,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 403: the request's `actor` is not the authenticated principal.
    #[error("actor_mismatch: {message}")]
    ActorMismatch {
        message: String,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// 500: the node failed internally.
    #[error("internal: {message}")]
    Internal {
        message: String,
        /// Every detail the node sent ([`ClientError::details`]).
        #[serde(skip)]
        details: NodeDetails,
    },
    /// The node could not be reached, or the connection broke.
    #[error("transport: {endpoint}: {message}")]
    Transport {
        endpoint: String,
        message: String,
        /// `true` when the request may have reached the node before the failure.
        sent: bool,
    },
    /// A non-success HTTP answer without a cairn error body (e.g. an unknown path).
    #[error("http_status: {status}: {body}")]
    #[serde(rename = "http_status")]
    Http { status: u16, body: String },
    /// A success answer that does not decode as the expected type.
    #[error("decode: {message}")]
    Decode { message: String },
    /// Every answer was older than what the session already saw, even after retrying
    /// linearizably against the leader.
    #[error("session_regression: {message}")]
    SessionRegression {
        key: Option<String>,
        message: String,
    },
    /// Local input rejected before anything was sent (bad endpoint, malformed token, …).
    #[error("invalid_input: {message}")]
    InvalidInput { message: String },
    /// A local file could not be read or written (CLI batch and session files).
    #[error("io: {message}")]
    Io { message: String },
}

impl ClientError {
    /// Builds the error for a non-success HTTP answer from its status and body.
    pub fn from_response(status: u16, body: &[u8]) -> ClientError {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(parsed) => {
                let detail = parsed.error;
                Self::from_code(detail.code, detail.message, &detail.details)
            }
            Err(_) => ClientError::Http {
                status,
                body: excerpt(body),
            },
        }
    }

    /// Builds the variant for `code`, parsing the details that code carries.
    pub fn from_code(code: ErrorCode, message: String, fields: &Map<String, Value>) -> Self {
        let op_index = detail::<usize>(fields, "op_index");
        let details = NodeDetails::of(fields);
        match code {
            ErrorCode::InvalidRequest => ClientError::InvalidRequest { message, details },
            ErrorCode::NotFound => ClientError::NotFound {
                message,
                served: detail(fields, "served"),
                op_index,
                details,
            },
            ErrorCode::VersionConflict => ClientError::VersionConflict {
                message,
                current_version: detail(fields, "current_version"),
                op_index,
                details,
            },
            ErrorCode::KeyForgotten => ClientError::KeyForgotten {
                message,
                tombstone: detail(fields, "tombstone"),
                op_index,
                details,
            },
            ErrorCode::KeyRevoked => ClientError::KeyRevoked {
                message,
                revocation: detail(fields, "revocation"),
                rendered: detail(fields, "rendered"),
                op_index,
                details,
            },
            ErrorCode::StaleWrite => ClientError::StaleWrite {
                message,
                op_index,
                details,
            },
            ErrorCode::InvalidTransition => ClientError::InvalidTransition {
                message,
                op_index,
                details,
            },
            ErrorCode::TooLarge => ClientError::TooLarge { message, details },
            ErrorCode::RequestIdReused => ClientError::RequestIdReused {
                message,
                request_id: detail(fields, "request_id"),
                details,
            },
            ErrorCode::NoLeader => ClientError::NoLeader {
                message,
                leader_id: detail(fields, "leader_id"),
                details,
            },
            ErrorCode::StaleRead => ClientError::StaleRead { message, details },
            ErrorCode::Overloaded => ClientError::Overloaded { message, details },
            ErrorCode::OutcomeUnknown => ClientError::OutcomeUnknown {
                request_id: detail(fields, "request_id"),
                message,
                details,
            },
            ErrorCode::Unauthenticated => ClientError::Unauthenticated { message, details },
            ErrorCode::PermissionDenied => ClientError::PermissionDenied {
                message,
                permission: detail(fields, "permission"),
                key: detail(fields, "key"),
                op_index,
                details,
            },
            ErrorCode::ActorMismatch => ClientError::ActorMismatch { message, details },
            ErrorCode::Internal => ClientError::Internal { message, details },
        }
    }

    /// The details of the node's error object (`{"error": {"code", "message", …details}}`)
    /// as it sent them; `None` for client-side failures and errors without any.
    pub fn details(&self) -> Option<&Map<String, Value>> {
        let details = match self {
            ClientError::InvalidRequest { details, .. }
            | ClientError::NotFound { details, .. }
            | ClientError::VersionConflict { details, .. }
            | ClientError::KeyForgotten { details, .. }
            | ClientError::KeyRevoked { details, .. }
            | ClientError::StaleWrite { details, .. }
            | ClientError::InvalidTransition { details, .. }
            | ClientError::TooLarge { details, .. }
            | ClientError::RequestIdReused { details, .. }
            | ClientError::NoLeader { details, .. }
            | ClientError::StaleRead { details, .. }
            | ClientError::Overloaded { details, .. }
            | ClientError::OutcomeUnknown { details, .. }
            | ClientError::Unauthenticated { details, .. }
            | ClientError::PermissionDenied { details, .. }
            | ClientError::ActorMismatch { details, .. }
            | ClientError::Internal { details, .. } => details,
            ClientError::Transport { .. }
            | ClientError::Http { .. }
            | ClientError::Decode { .. }
            | ClientError::SessionRegression { .. }
            | ClientError::InvalidInput { .. }
            | ClientError::Io { .. } => return None,
        };
        details.0.as_deref()
    }

    /// The SPEC §5 code of a server-reported error; `None` for client-side failures.
    pub fn code(&self) -> Option<ErrorCode> {
        Some(match self {
            ClientError::InvalidRequest { .. } => ErrorCode::InvalidRequest,
            ClientError::NotFound { .. } => ErrorCode::NotFound,
            ClientError::Unauthenticated { .. } => ErrorCode::Unauthenticated,
            ClientError::PermissionDenied { .. } => ErrorCode::PermissionDenied,
            ClientError::ActorMismatch { .. } => ErrorCode::ActorMismatch,
            ClientError::VersionConflict { .. } => ErrorCode::VersionConflict,
            ClientError::KeyForgotten { .. } => ErrorCode::KeyForgotten,
            ClientError::KeyRevoked { .. } => ErrorCode::KeyRevoked,
            ClientError::StaleWrite { .. } => ErrorCode::StaleWrite,
            ClientError::InvalidTransition { .. } => ErrorCode::InvalidTransition,
            ClientError::TooLarge { .. } => ErrorCode::TooLarge,
            ClientError::RequestIdReused { .. } => ErrorCode::RequestIdReused,
            ClientError::NoLeader { .. } => ErrorCode::NoLeader,
            ClientError::StaleRead { .. } => ErrorCode::StaleRead,
            ClientError::Overloaded { .. } => ErrorCode::Overloaded,
            ClientError::OutcomeUnknown { .. } => ErrorCode::OutcomeUnknown,
            ClientError::Internal { .. } => ErrorCode::Internal,
            ClientError::Transport { .. }
            | ClientError::Http { .. }
            | ClientError::Decode { .. }
            | ClientError::SessionRegression { .. }
            | ClientError::InvalidInput { .. }
            | ClientError::Io { .. } => return None,
        })
    }

    /// The code printed before the message: the SPEC code of server errors, else
    /// `transport`, `http_status`, `decode`, `session_regression`, `invalid_input` or `io`.
    pub fn name(&self) -> &'static str {
        if let Some(code) = self.code() {
            return code.as_str();
        }
        match self {
            ClientError::Transport { .. } => "transport",
            ClientError::Http { .. } => "http_status",
            ClientError::Decode { .. } => "decode",
            ClientError::SessionRegression { .. } => "session_regression",
            ClientError::InvalidInput { .. } => "invalid_input",
            ClientError::Io { .. } => "io",
            // Every other variant is a server error and has a code.
            _ => ErrorCode::Internal.as_str(),
        }
    }

    /// `{"error": {"code", "message", …details}}`, the shape of the node's own error
    /// bodies: every detail the node sent, and those the client knows of its own errors
    /// (absent ones left out).
    pub fn to_json(&self) -> Value {
        let mut error = match serde_json::to_value(self) {
            Ok(Value::Object(fields)) => fields,
            _ => Map::new(),
        };
        error.retain(|_, value| !value.is_null());
        for (name, value) in self.details().into_iter().flatten() {
            error.entry(name.as_str()).or_insert_with(|| value.clone());
        }
        // Every error object has a message; an HTTP status without a cairn body has none.
        let shown = self.to_string();
        let message = shown.strip_prefix(self.name()).unwrap_or(&shown);
        error
            .entry("message")
            .or_insert_with(|| message.trim_start_matches(": ").into());
        serde_json::json!({ "error": error })
    }

    /// The CLI exit code of this error's class (see the `EXIT_*` constants).
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::InvalidRequest { .. }
            | ClientError::TooLarge { .. }
            | ClientError::RequestIdReused { .. }
            | ClientError::InvalidInput { .. } => EXIT_INVALID_INPUT,
            ClientError::NotFound { .. } => EXIT_NOT_FOUND,
            ClientError::VersionConflict { .. }
            | ClientError::KeyForgotten { .. }
            | ClientError::KeyRevoked { .. }
            | ClientError::StaleWrite { .. }
            | ClientError::InvalidTransition { .. } => EXIT_CONFLICT,
            ClientError::NoLeader { .. }
            | ClientError::StaleRead { .. }
            | ClientError::Overloaded { .. }
            | ClientError::Transport { .. }
            | ClientError::SessionRegression { .. } => EXIT_UNAVAILABLE,
            ClientError::OutcomeUnknown { .. } => EXIT_OUTCOME_UNKNOWN,
            ClientError::Unauthenticated { .. }
            | ClientError::PermissionDenied { .. }
            | ClientError::ActorMismatch { .. } => EXIT_DENIED,
            ClientError::Internal { .. }
            | ClientError::Http { .. }
            | ClientError::Decode { .. }
            | ClientError::Io { .. } => EXIT_OTHER,
        }
    }

    /// `true` when trying again (elsewhere, or later) may succeed: the node was unreachable,
    /// had no leader, was overloaded, could not serve the read fresh enough, or lost track
    /// of the outcome.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Transport { .. }
            | ClientError::NoLeader { .. }
            | ClientError::StaleRead { .. }
            | ClientError::Overloaded { .. }
            | ClientError::OutcomeUnknown { .. } => true,
            // A gateway-style failure without a cairn body: the node process is not answering.
            ClientError::Http { status, .. } => matches!(status, 502..=504),
            _ => false,
        }
    }

    /// `true` when the request may have been applied although no answer arrived.
    pub fn may_have_applied(&self) -> bool {
        match self {
            ClientError::Transport { sent, .. } => *sent,
            ClientError::OutcomeUnknown { .. } => true,
            ClientError::Http { status, .. } => *status == 504,
            _ => false,
        }
    }

    pub(crate) fn transport(endpoint: &str, err: &reqwest::Error) -> Self {
        Self::transport_with(endpoint, err, protocol_mismatch(err))
    }

    /// [`ClientError::transport`] of a request whose connection the node closed with
    /// `alert` (seen by the client's own probe, [`closed_unexplained`]'s case): a refused client
    /// certificate is named although reqwest's error does not show it.
    pub(crate) fn transport_after_alert(
        endpoint: &str,
        err: &reqwest::Error,
        alert: rustls::AlertDescription,
    ) -> Self {
        let mismatch = client_certificate_alert(alert).or_else(|| protocol_mismatch(err));
        Self::transport_with(endpoint, err, mismatch)
    }

    fn transport_with(
        endpoint: &str,
        err: &reqwest::Error,
        mismatch: Option<ProtocolMismatch>,
    ) -> Self {
        let message = match mismatch {
            Some(mismatch) => format!("{}; {}", error_chain(err), mismatch.hint()),
            None => error_chain(err),
        };
        let unapplied = err.is_connect()
            || never_sent(err)
            || mismatch.is_some_and(ProtocolMismatch::proves_unapplied);
        ClientError::Transport {
            endpoint: endpoint.to_string(),
            message,
            sent: !unapplied,
        }
    }

    pub(crate) fn decode(what: &str, err: impl std::fmt::Display) -> Self {
        ClientError::Decode {
            message: format!("{what}: {err}"),
        }
    }

    pub(crate) fn invalid_input(message: impl Into<String>) -> Self {
        ClientError::InvalidInput {
            message: message.into(),
        }
    }
}

/// `message`, after `ops[I]: ` when the error is that of batch op I (unless the node's
/// message already names it, as its `invalid_request` refusals do).
fn with_request_id(message: &str, request_id: &Option<String>) -> String {
    match request_id {
        None => message.to_string(),
        Some(id) => format!("{message} (request_id {id})"),
    }
}

fn at_op(op_index: &Option<usize>, message: &str) -> String {
    match op_index {
        Some(index) if !message.starts_with("ops[") => format!("ops[{index}]: {message}"),
        _ => message.to_string(),
    }
}

/// Parses one optional detail field; a missing or mistyped field is `None`, because the
/// error itself (code and message) is still meaningful without it.
fn detail<T: DeserializeOwned>(details: &Map<String, Value>, name: &str) -> Option<T> {
    details
        .get(name)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// The causes of an error on one line. reqwest's top-level message ("error sending request
/// for url (…)") is generic and repeats the endpoint; the causes say what happened
/// (refused, reset, timed out), so the top level is shown only when it has no cause.
/// An endpoint that speaks another protocol than the client expects: a mistake of the
/// configuration (scheme, CA), which no retry mends, named so the user can fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProtocolMismatch {
    /// The answer was not HTTP: a plain `http://` request to a node serving HTTPS.
    NotHttp,
    /// The answer to the TLS handshake was not TLS: `https://` to a node serving plain HTTP.
    NotTls,
    /// The node's certificate does not verify against the CA the client was given.
    Certificate,
    /// The node asks for a client certificate (`--tls-client-ca`) and none was given.
    ClientCertificateMissing,
    /// The node did not accept the client certificate given.
    ClientCertificateRefused,
}

impl ProtocolMismatch {
    /// Whether this mismatch, seen after the request may have left this process, still
    /// proves nothing was applied. An answer that is not HTTP came from something other
    /// than a cairn node's HTTP server, which answers every request it reads in HTTP; a
    /// handshake the node ended over the client's certificate never let it read a request
    /// (under TLS 1.3 the client may send one before the node's verdict arrives).
    fn proves_unapplied(self) -> bool {
        matches!(
            self,
            ProtocolMismatch::NotHttp
                | ProtocolMismatch::ClientCertificateMissing
                | ProtocolMismatch::ClientCertificateRefused
        )
    }

    fn hint(self) -> &'static str {
        match self {
            ProtocolMismatch::NotHttp => {
                "the node did not answer in HTTP: if it serves HTTPS, give an https:// \
                 endpoint and the cluster's CA (--cacert or CAIRN_CACERT); nothing was applied"
            }
            ProtocolMismatch::NotTls => {
                "the node did not answer the TLS handshake: if it serves plain HTTP, give \
                 an http:// endpoint"
            }
            ProtocolMismatch::Certificate => {
                "the node's certificate does not verify against the CA given (--cacert or \
                 CAIRN_CACERT): is it this cluster's CA, and does the certificate name this \
                 host?"
            }
            ProtocolMismatch::ClientCertificateMissing => {
                "the node asks for a client certificate: give --cert and --key (CAIRN_CERT \
                 and CAIRN_KEY); nothing was applied"
            }
            ProtocolMismatch::ClientCertificateRefused => {
                "the node refused the client certificate: is it signed by the CA the node \
                 trusts for clients (--tls-client-ca), and still valid? nothing was applied"
            }
        }
    }
}

/// The protocol mismatch `err` shows, if any: hyper's parse error of an answer, or the
/// rustls error inside an `io::Error` (whose `source` skips the error it wraps).
fn protocol_mismatch(err: &reqwest::Error) -> Option<ProtocolMismatch> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(current) = cause {
        if current
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_parse)
        {
            return Some(ProtocolMismatch::NotHttp);
        }
        match rustls_error_in(current) {
            Some(rustls::Error::InvalidCertificate(_)) => {
                return Some(ProtocolMismatch::Certificate)
            }
            Some(rustls::Error::InvalidMessage(_)) => return Some(ProtocolMismatch::NotTls),
            Some(rustls::Error::AlertReceived(alert)) => {
                if let Some(mismatch) = client_certificate_alert(*alert) {
                    return Some(mismatch);
                }
            }
            _ => {}
        }
        cause = current.source();
    }
    None
}

/// What the node's alert during the handshake says of the client's certificate, if
/// anything: the alerts a TLS server sends when it asks for one and gets none, or cannot
/// verify the one it got (as a client's own CA or name mistake is a local error, an alert
/// received about a certificate is about the client's).
pub(crate) fn client_certificate_alert(
    alert: rustls::AlertDescription,
) -> Option<ProtocolMismatch> {
    use rustls::AlertDescription as Alert;
    match alert {
        Alert::CertificateRequired => Some(ProtocolMismatch::ClientCertificateMissing),
        Alert::BadCertificate
        | Alert::UnsupportedCertificate
        | Alert::CertificateRevoked
        | Alert::CertificateExpired
        | Alert::CertificateUnknown
        | Alert::UnknownCA
        // A certificate from another CA of the same name fails the check of its signature.
        | Alert::DecryptError => Some(ProtocolMismatch::ClientCertificateRefused),
        _ => None,
    }
}

/// `true` when hyper gave the request back unsent: the connection closed (or failed)
/// before the request was written to it. hyper reports exactly that case as canceled.
fn never_sent(err: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(current) = cause {
        if current
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        cause = current.source();
    }
    false
}

/// `true` when the request never went out and `err` does not say why: the case the
/// client's own TLS probe is for.
pub(crate) fn closed_unexplained(err: &reqwest::Error) -> bool {
    never_sent(err) && protocol_mismatch(err).is_none()
}

/// The rustls error `err` wraps, through any number of `io::Error`s (tokio-rustls wraps
/// it in one, hyper-util's connector that in another).
pub(crate) fn rustls_error_in<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    let mut inner: &'a (dyn std::error::Error + 'static) = err.downcast_ref::<std::io::Error>()?;
    while let Some(io) = inner.downcast_ref::<std::io::Error>() {
        inner = io.get_ref()?;
    }
    inner.downcast_ref::<rustls::Error>()
}

pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut causes = Vec::new();
    let mut source = err.source();
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    match causes.is_empty() {
        true => err.to_string(),
        false => causes.join(": "),
    }
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(HTTP_BODY_EXCERPT_MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(status: u16, body: &str) -> ClientError {
        ClientError::from_response(status, body.as_bytes())
    }

    #[test]
    fn the_json_form_is_the_nodes_error_object_under_the_printed_code() {
        let conflict = parse(
            409,
            r#"{"error":{"code":"version_conflict","message":"at 3","current_version":3,
                "op_index":1}}"#,
        );
        assert_eq!(
            conflict.to_json(),
            serde_json::json!({"error": {"code": "version_conflict", "message": "at 3",
                "current_version": 3, "op_index": 1}})
        );
        // Details no variant parses are kept as the node sent them.
        let replayed = parse(
            409,
            r#"{"error":{"code":"stale_write","message":"changed","based_on_revision":4,
                "fence_revision":9,"replayed":true}}"#,
        );
        let expected = serde_json::json!({"code": "stale_write", "message": "changed",
            "based_on_revision": 4, "fence_revision": 9, "replayed": true});
        assert_eq!(replayed.to_json(), serde_json::json!({ "error": expected }));
        assert_eq!(replayed.details().unwrap()["fence_revision"], 9);
        let too_large = parse(
            413,
            r#"{"error":{"code":"too_large","message":"key","field":"key","limit":512,
                "size":600}}"#,
        );
        assert_eq!(too_large.to_json()["error"]["limit"], 512);
        let local = [
            ClientError::Http {
                status: 502,
                body: "bad gateway".into(),
            },
            ClientError::Transport {
                endpoint: "http://127.0.0.1:1".into(),
                message: "refused".into(),
                sent: false,
            },
            ClientError::OutcomeUnknown {
                request_id: Some("r1".into()),
                message: "cut off".into(),
                details: NodeDetails::default(),
            },
            ClientError::InvalidInput {
                message: "endpoint".into(),
            },
            ClientError::Io {
                message: "disk".into(),
            },
        ];
        for err in local {
            assert_eq!(err.details(), None);
            let json = err.to_json();
            assert_eq!(json["error"]["code"], err.name(), "{json}");
            assert!(json["error"]["message"].is_string(), "{json}");
        }
    }

    #[test]
    fn a_batch_op_whose_key_is_absent_is_named() {
        let err = parse(
            404,
            r#"{"error":{"code":"not_found","message":"key \"b\" does not exist",
                "key":"b","op_index":1}}"#,
        );
        assert!(
            matches!(
                err,
                ClientError::NotFound {
                    op_index: Some(1),
                    served: None,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            r#"not_found: ops[1]: key "b" does not exist"#
        );
    }

    #[test]
    fn version_conflict_carries_current_version_and_op_index() {
        let err = parse(
            409,
            r#"{"error":{"code":"version_conflict","message":"expected 2, at 5",
                "current_version":5,"op_index":1}}"#,
        );
        let ClientError::VersionConflict {
            message,
            current_version,
            op_index,
            ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(
            (message.as_str(), *current_version, *op_index),
            ("expected 2, at 5", Some(5), Some(1))
        );
        assert_eq!(err.code(), Some(ErrorCode::VersionConflict));
        assert_eq!(err.exit_code(), EXIT_CONFLICT);
        assert_eq!(
            err.to_string(),
            "version_conflict: ops[1]: expected 2, at 5"
        );
        let named = parse(
            409,
            r#"{"error":{"code":"stale_write","message":"ops[2]: fenced","op_index":2}}"#,
        );
        assert_eq!(named.to_string(), "stale_write: ops[2]: fenced");
        let single = parse(
            409,
            r#"{"error":{"code":"stale_write","message":"fenced"}}"#,
        );
        assert_eq!(single.to_string(), "stale_write: fenced");
    }

    #[test]
    fn key_forgotten_parses_the_tombstone() {
        let err = parse(
            409,
            r#"{"error":{"code":"key_forgotten","message":"forgotten","tombstone":
                {"id":"t1","key":"k","actor":"a","reason":"wrong","value_hash":null,
                 "forgotten_at":10,"version":3,"generation":1,"revision":42}}}"#,
        );
        let ClientError::KeyForgotten { tombstone, .. } = err else {
            panic!("{err:?}")
        };
        let tombstone = tombstone.expect("tombstone parsed");
        assert_eq!((tombstone.id.as_str(), tombstone.revision), ("t1", 42));
        assert_eq!(tombstone.value_hash, None);
    }

    #[test]
    fn key_revoked_parses_revocation_and_rendered() {
        let err = parse(
            409,
            r#"{"error":{"code":"key_revoked","message":"revoked",
                "revocation":{"actor":"a","reason":"r","revoked_at":7,"version":2},
                "rendered":"[k] [REVOKED] Previously believed: v."}}"#,
        );
        let ClientError::KeyRevoked {
            revocation,
            rendered,
            op_index,
            ..
        } = err
        else {
            panic!("{err:?}")
        };
        assert_eq!(revocation.map(|r| r.version), Some(2));
        assert!(rendered.unwrap().contains("[REVOKED]"));
        assert_eq!(op_index, None);
    }

    #[test]
    fn outcome_unknown_is_its_own_class() {
        let err = parse(
            504,
            r#"{"error":{"code":"outcome_unknown","message":"leader lost","request_id":"r1"}}"#,
        );
        let ClientError::OutcomeUnknown {
            request_id,
            message,
            ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(
            (request_id.as_deref(), message.as_str()),
            (Some("r1"), "leader lost")
        );
        assert_eq!(err.exit_code(), EXIT_OUTCOME_UNKNOWN);
        assert!(err.is_transient() && err.may_have_applied());
    }

    #[test]
    fn exit_codes_per_class() {
        let cases = [
            (r#"{"error":{"code":"invalid_request","message":"m"}}"#, 2),
            (r#"{"error":{"code":"too_large","message":"m"}}"#, 2),
            (
                r#"{"error":{"code":"request_id_reused","message":"m","request_id":"x"}}"#,
                2,
            ),
            (r#"{"error":{"code":"not_found","message":"m"}}"#, 3),
            (r#"{"error":{"code":"stale_write","message":"m"}}"#, 4),
            (
                r#"{"error":{"code":"invalid_transition","message":"m"}}"#,
                4,
            ),
            (
                r#"{"error":{"code":"no_leader","message":"m","leader_id":null}}"#,
                5,
            ),
            (r#"{"error":{"code":"stale_read","message":"m"}}"#, 5),
            (r#"{"error":{"code":"overloaded","message":"m"}}"#, 5),
            (r#"{"error":{"code":"internal","message":"m"}}"#, 1),
        ];
        for (body, exit) in cases {
            assert_eq!(parse(400, body).exit_code(), exit, "{body}");
        }
    }

    #[test]
    fn display_starts_with_the_name() {
        let errors = [
            parse(409, r#"{"error":{"code":"stale_write","message":"m"}}"#),
            parse(503, r#"{"error":{"code":"overloaded","message":"m"}}"#),
            parse(500, "oops"),
            ClientError::invalid_input("bad"),
            ClientError::SessionRegression {
                key: None,
                message: "m".into(),
            },
            ClientError::Transport {
                endpoint: "e".into(),
                message: "m".into(),
                sent: false,
            },
        ];
        let names = ["stale_write", "overloaded", "http_status", "invalid_input"];
        for (err, name) in errors.iter().zip(names) {
            assert_eq!(err.name(), name);
        }
        for err in &errors {
            assert!(
                err.to_string().starts_with(&format!("{}: ", err.name())),
                "{err}"
            );
        }
    }

    #[test]
    fn mistyped_details_do_not_hide_the_error() {
        let err = parse(
            409,
            r#"{"error":{"code":"version_conflict","message":"m","current_version":"five"}}"#,
        );
        assert!(matches!(
            err,
            ClientError::VersionConflict {
                current_version: None,
                ..
            }
        ));
    }

    #[test]
    fn non_cairn_bodies_become_http_errors() {
        let err = parse(502, "<html>Bad Gateway</html>");
        assert_eq!(
            err,
            ClientError::Http {
                status: 502,
                body: "<html>Bad Gateway</html>".into()
            }
        );
        assert!(err.is_transient() && !err.may_have_applied());
        assert_eq!(err.code(), None);
        assert_eq!(err.exit_code(), EXIT_OTHER);
        let long = "x".repeat(HTTP_BODY_EXCERPT_MAX * 2);
        let ClientError::Http { body, .. } = parse(404, &long) else {
            panic!()
        };
        assert!(body.chars().count() <= HTTP_BODY_EXCERPT_MAX + 1);
    }
}
