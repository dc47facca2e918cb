//! Peer proof (SPEC §8): who may call the peer port.
//!
//! - **Mutual TLS**: the handshake already checked that the caller's certificate chains
//!   to the cluster CA. [`require`] then checks that the certificate is valid for
//!   `node-<ID>`, the id the caller claims in [`PEER_ID_HEADER`], and, once this node
//!   knows a membership, that the id is one of its voters or learners, or that a member
//!   vouched for it ([`super::vouch`]). The name check runs once per connection and id
//!   ([`valid_for_node`](crate::tls::PresentedCertificate::valid_for_node)); the
//!   membership check runs on every request, so a removed node is refused at once.
//! - **Shared secret** (loopback only): [`PEER_SECRET_HEADER`] must carry the secret;
//!   compared as SHA-256 digests in constant time, so neither its bytes nor its length
//!   leak through timing.
//! - **Open**: a loopback development node without either accepts every caller.
//!
//! Whatever the proof, a request names the node it is meant for in [`PEER_TARGET_HEADER`]
//! and any other node refuses it. Without that check a membership that gives a new id the
//! addresses of an existing node (a join under a follower's or the leader's own
//! addresses) had that node answer for two ids: one process counted twice toward quorum,
//! or a leader appended to itself as a follower and openraft stopped on an assertion.
//!
//! [`require`] runs as middleware before any handler, so a request without proof is
//! refused before its body is read or decoded and before Raft sees it: term, vote and log
//! stay as they were.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cairn_api::ErrorCode;
use cairn_config::PeerProof;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::api::error::ApiError;
use crate::consensus::{NodeId, Raft};
use crate::log_throttle::LogThrottle;
use crate::metrics::Metrics;
use crate::tls::configs::{names_node, node_dns_name};
use crate::tls::PeerCertificate;

use super::vouch::Vouches;

/// The node id a peer request is sent by (its certificate must name `node-<ID>`).
pub const PEER_ID_HEADER: &str = "x-cairn-peer-id";
/// The node id a peer request is meant for: a node with another id refuses it.
pub const PEER_TARGET_HEADER: &str = "x-cairn-peer-target";
/// The shared peer secret, hex-encoded.
pub const PEER_SECRET_HEADER: &str = "x-cairn-peer-secret";

/// The shared peer secret. Its `Debug` is redacted and it has no `Display`, so it cannot
/// reach a log line, an error or a metric by accident. The header a caller sends and the
/// digest a server compares are derived once, not per peer request.
#[derive(Clone)]
pub struct PeerSecret(Arc<SecretForms>);

struct SecretForms {
    /// Hex, so any secret bytes make a valid header; marked sensitive so HTTP libraries
    /// keep it out of their debug output.
    header: HeaderValue,
    /// sha256 of the header value, compared in constant time with the given header's.
    digest: [u8; 32],
}

impl std::fmt::Debug for PeerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerSecret(<redacted>)")
    }
}

impl PeerSecret {
    pub fn new(bytes: Vec<u8>) -> PeerSecret {
        let hex = hex::encode(bytes);
        let mut header = HeaderValue::from_str(&hex).expect("hex is a valid header");
        header.set_sensitive(true);
        let digest = Sha256::digest(hex.as_bytes()).into();
        PeerSecret(Arc::new(SecretForms { header, digest }))
    }

    /// The header value a caller sends.
    pub fn header_value(&self) -> HeaderValue {
        self.0.header.clone()
    }

    fn digest(&self) -> &[u8; 32] {
        &self.0.digest
    }
}

/// What the peer port demands of a caller.
#[derive(Debug, Clone)]
pub enum ServerProof {
    Open,
    /// Mutual TLS: the listener requires a certificate from the cluster CA.
    Tls,
    Secret(PeerSecret),
}

impl ServerProof {
    /// How this port admits callers, as [`super::PROOF_MODE_PATH`] answers it (never the
    /// secret itself).
    pub fn mode(&self) -> PeerProof {
        match self {
            ServerProof::Open => PeerProof::None,
            ServerProof::Tls => PeerProof::Tls,
            ServerProof::Secret(_) => PeerProof::Secret,
        }
    }
}

/// What a node presents when it calls a peer, besides its TLS certificate.
#[derive(Debug, Clone)]
pub struct ClientProof {
    pub own_id: NodeId,
    pub secret: Option<PeerSecret>,
}

impl ClientProof {
    /// Headers every peer request carries.
    pub fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(PEER_ID_HEADER, HeaderValue::from(self.own_id));
        if let Some(secret) = &self.secret {
            headers.insert(PEER_SECRET_HEADER, secret.header_value());
        }
        headers
    }
}

/// The middleware's state: the proof demanded, Raft for the membership, the vouches for
/// nodes it does not list yet, and the node's counters (a refusal counts in
/// `cairn_peer_requests_refused_total`).
#[derive(Clone)]
pub struct PeerGate {
    pub proof: ServerProof,
    pub raft: Raft,
    pub vouches: Vouches,
    pub metrics: Arc<Metrics>,
    /// One `peer request refused` line per reason a minute: a removed node left running
    /// is refused about twice a second for as long as it runs.
    pub refusals_logged: LogThrottle,
}

/// How often one reason of refusal is logged at most (every refusal is counted).
pub const REFUSAL_LOG_PERIOD: Duration = Duration::from_secs(60);

/// Refuses a request without proof (401 `unauthenticated` when none is given, 403
/// `permission_denied` when it is wrong, in the error body of SPEC §5), else passes it on.
pub async fn require(State(gate): State<PeerGate>, request: Request, next: Next) -> Response {
    match check(&gate, &request) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            Metrics::inc(&gate.metrics.peer_refused);
            if let Some(unlogged) = gate.refusals_logged.admit(&refusal.message, Instant::now()) {
                tracing::warn!(
                    path = %request.uri().path(),
                    reason = %refusal.message,
                    since_last_line = unlogged,
                    "peer request refused"
                );
            }
            refusal.into_response()
        }
    }
}

/// A refusal: the error body of SPEC §5 (the client port's [`ApiError`]), whose message
/// names what was wrong, never the secret.
type Refusal = ApiError;

fn missing(header: &str) -> Refusal {
    ApiError::new(ErrorCode::Unauthenticated, format!("missing {header}"))
}

fn check(gate: &PeerGate, request: &Request) -> Result<(), Refusal> {
    check_proof(gate, request)?;
    check_target(&gate.raft, request.headers())
}

fn check_proof(gate: &PeerGate, request: &Request) -> Result<(), Refusal> {
    match &gate.proof {
        ServerProof::Open => Ok(()),
        ServerProof::Secret(secret) => check_secret(secret, request.headers()),
        ServerProof::Tls => {
            let id = claimed_id(request.headers())?;
            let cert = request
                .extensions()
                .get::<PeerCertificate>()
                .map(|c| &c.0)
                .ok_or_else(|| forbidden("no client certificate".to_string()))?;
            if cert.valid_for_node.get() != Some(&id) {
                check_certificate_names(&cert.der, id)?;
                let _ = cert.valid_for_node.set(id);
            }
            let from_leader = request.uri().path() != super::VOTE_PATH;
            check_member(gate, id, from_leader)
        }
    }
}

/// A request meant for another node id, or for none, is refused (SPEC §6: "peer requests
/// name the node they are meant for"): this node is not that member, whatever address
/// the membership gives it. Every node names the target of what it sends.
fn check_target(raft: &Raft, headers: &HeaderMap) -> Result<(), Refusal> {
    let value = single(headers, PEER_TARGET_HEADER)?.ok_or_else(|| {
        forbidden(format!(
            "missing {PEER_TARGET_HEADER}: a peer request names the node it is meant for"
        ))
    })?;
    let own_id = raft.metrics().borrow().id;
    let target = value.to_str().ok().and_then(|v| v.parse::<NodeId>().ok());
    match target {
        Some(target) if target == own_id => Ok(()),
        Some(target) => Err(forbidden(format!(
            "this is node {own_id}, not node {target}: the request reached node \
             {own_id}'s peer port"
        ))),
        None => Err(forbidden(format!("{PEER_TARGET_HEADER} is not a node id"))),
    }
}

fn forbidden(reason: String) -> Refusal {
    ApiError::new(ErrorCode::PermissionDenied, reason)
}

/// The value of header `name`, if given once. Given twice it is refused: which of the two
/// the proof stands for is not the node's to guess (the client port refuses two
/// `Authorization` headers alike).
fn single<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a HeaderValue>, Refusal> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    match values.next() {
        Some(_) => Err(forbidden(format!("{name} given more than once"))),
        None => Ok(first),
    }
}

fn claimed_id(headers: &HeaderMap) -> Result<NodeId, Refusal> {
    let value = single(headers, PEER_ID_HEADER)?.ok_or_else(|| missing(PEER_ID_HEADER))?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.parse::<NodeId>().ok())
        .ok_or_else(|| forbidden(format!("{PEER_ID_HEADER} is not a node id")))
}

fn check_secret(secret: &PeerSecret, headers: &HeaderMap) -> Result<(), Refusal> {
    let given = single(headers, PEER_SECRET_HEADER)?.ok_or_else(|| missing(PEER_SECRET_HEADER))?;
    let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
    if bool::from(given.ct_eq(secret.digest())) {
        Ok(())
    } else {
        Err(forbidden("wrong peer secret".to_string()))
    }
}

/// The certificate (already verified against the cluster CA by the handshake) must name
/// `node-<id>`: a node's valid certificate cannot speak for another node.
fn check_certificate_names(
    cert: &rustls_pki_types::CertificateDer<'_>,
    id: NodeId,
) -> Result<(), Refusal> {
    let valid = names_node(cert, id)
        .map_err(|e| forbidden(format!("unreadable client certificate: {e}")))?;
    if !valid {
        return Err(forbidden(format!(
            "the client certificate is not valid for {}",
            node_dns_name(id)
        )));
    }
    Ok(())
}

/// Once this node knows a membership (any voter), only its voters and learners may call.
/// A node that was never initialized knows none, and must accept the first leader.
///
/// Two more pass:
/// - except for a vote request, the node this one last voted for or followed: it was a
///   member (or no membership was known) when this node accepted it, and a learner that
///   installs an older snapshot from that leader takes the snapshot's older membership,
///   which may not list the leader yet (it joined later). Refusing its entries then would
///   leave the learner stuck on that snapshot (found by a secure chaos campaign, seed
///   1205). Vote requests get no such pass: a node removed after this one followed it
///   must not move this node's term by campaigning;
/// - a node that a member this node knows vouched for ([`Vouches`]): this node missed
///   its join. The first refusal starts the lookup; a later request passes.
fn check_member(gate: &PeerGate, id: NodeId, from_leader: bool) -> Result<(), Refusal> {
    let listed_or_followed = {
        let metrics = gate.raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        let known = membership.voter_ids().next().is_some();
        let followed = from_leader && metrics.vote.leader_id.voted_for() == Some(id);
        !known || followed || membership.get_node(&id).is_some()
    };
    if listed_or_followed || gate.vouches.vouched(id) {
        return Ok(());
    }
    Err(forbidden(format!(
        "node {id} is not a cluster member (no member this node knows has vouched for it \
         yet)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_never_shows_in_debug() {
        let secret = PeerSecret::new(b"correct horse battery staple 0123456789".to_vec());
        let shown = format!("{secret:?} {:?}", ServerProof::Secret(secret.clone()));
        assert!(!shown.contains("horse"), "{shown}");
        assert!(!shown.contains(&hex::encode("horse")), "{shown}");
        let client = ClientProof {
            own_id: 1,
            secret: Some(secret),
        };
        let shown = format!("{client:?} {:?}", client.headers());
        assert!(!shown.contains(&hex::encode("horse")), "{shown}");
    }

    #[test]
    fn secrets_compare_by_value() {
        let secret = PeerSecret::new(vec![7; 32]);
        let mut headers = HeaderMap::new();
        assert_eq!(
            check_secret(&secret, &headers).unwrap_err().code,
            ErrorCode::Unauthenticated
        );
        headers.insert(
            PEER_SECRET_HEADER,
            PeerSecret::new(vec![8; 32]).header_value(),
        );
        assert_eq!(
            check_secret(&secret, &headers).unwrap_err().code,
            ErrorCode::PermissionDenied
        );
        headers.insert(PEER_SECRET_HEADER, secret.header_value());
        assert!(check_secret(&secret, &headers).is_ok());
        // The right secret beside another one is no proof.
        headers.append(
            PEER_SECRET_HEADER,
            PeerSecret::new(vec![8; 32]).header_value(),
        );
        let twice = check_secret(&secret, &headers).unwrap_err();
        assert_eq!(twice.code, ErrorCode::PermissionDenied);
    }

    #[test]
    fn a_claimed_id_given_twice_is_refused_whichever_comes_first() {
        for ids in [["9", "1"], ["1", "9"]] {
            let mut headers = HeaderMap::new();
            for id in ids {
                headers.append(PEER_ID_HEADER, HeaderValue::from_static(id));
            }
            let refused = claimed_id(&headers).unwrap_err();
            assert_eq!(refused.code, ErrorCode::PermissionDenied, "{ids:?}");
            assert!(
                refused.message.contains("more than once"),
                "{}",
                refused.message
            );
        }
        let mut headers = HeaderMap::new();
        headers.insert(PEER_ID_HEADER, HeaderValue::from_static("3"));
        assert_eq!(claimed_id(&headers).unwrap(), 3);
    }
}
