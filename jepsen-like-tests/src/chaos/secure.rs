//! `cairn-jepsen run --secure`: the same chaos run with SPEC §8 switched on. Certificates
//! come from the node binary itself (`cairn-node certs`, one CA, a certificate per node
//! naming its loopback address 127.0.0.(10+id)); every node serves HTTPS on its client
//! port and mutual TLS on its peer port; the cluster is initialized with
//! `auth: {admin: "chaos"}` and every client of the harness (workloads, probes, nemeses,
//! final state) presents the admin's token and trusts only that CA.
//!
//! The mode is process-wide ([`install`] at the start of a run, [`clear`] at its end):
//! chaos runs are serialized machine-wide by the run lock, and every endpoint, client
//! and raw HTTP request of the run goes through [`endpoint_scheme`], [`configure`] and
//! [`reqwest_client`]. The token lives only in memory here; it is never printed, logged
//! or written to the run's report (`results.json` records `secure: true` only).

use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use cairn_client::ClientBuilder;

use super::net::node_ip;
use crate::certs::ClusterCerts;

/// The first principal of a secure run; mutations leave `actor` empty, so the node
/// records this name (SPEC §8: an omitted actor is the principal's).
pub const ADMIN: &str = "chaos";

/// Certificates of a secure run and, once the cluster is initialized, the admin token.
pub struct Security {
    certs: ClusterCerts,
    token: RwLock<Option<String>>,
}

static CURRENT: RwLock<Option<Arc<Security>>> = RwLock::new(None);

fn current() -> Option<Arc<Security>> {
    CURRENT.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Whether the run in progress is a secure one.
pub fn is_on() -> bool {
    current().is_some()
}

/// `https` during a secure run, else `http`.
pub fn endpoint_scheme() -> &'static str {
    if is_on() {
        "https"
    } else {
        "http"
    }
}

/// Generates the run's certificates with `cairn-node certs` into `dir` (nodes
/// `1..=nodes + 1`: the membership nemesis joins an extra node n+1; each also named by
/// its chaos address) and makes the mode current.
pub fn install(node_bin: &Path, dir: &Path, nodes: u64) -> Result<()> {
    let certs = ClusterCerts::generate(node_bin, dir, 1..=nodes + 1, |id| Some(node_ip(id)))?;
    *CURRENT.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(Security {
        certs,
        token: RwLock::new(None),
    }));
    Ok(())
}

/// Ends the secure mode (the run is over).
pub fn clear() {
    *CURRENT.write().unwrap_or_else(|p| p.into_inner()) = None;
}

/// Records the admin token from the init answer.
pub fn set_token(token: String) {
    if let Some(s) = current() {
        *s.token.write().unwrap_or_else(|p| p.into_inner()) = Some(token);
    }
}

fn token() -> Option<String> {
    current().and_then(|s| s.token.read().unwrap_or_else(|p| p.into_inner()).clone())
}

/// The node flags of a secure run: HTTPS on the client port (and the CA to relay to
/// another node's), mutual TLS on the peer port.
pub fn node_args(id: u64) -> Vec<OsString> {
    current().map_or_else(Vec::new, |s| s.certs.node_args(id))
}

/// Adds the CA and, once known, the admin token to a client of the harness.
pub fn configure(builder: ClientBuilder) -> ClientBuilder {
    let Some(s) = current() else {
        return builder;
    };
    let builder = builder.ca_cert_pem(s.certs.ca_pem());
    match token() {
        Some(t) => builder.token(t),
        None => builder,
    }
}

/// A raw HTTP client (for the calls the client library does not make) with the run's
/// CA and token.
pub fn reqwest_client(timeout: Duration) -> Result<reqwest::Client> {
    let mut b = reqwest::Client::builder().no_proxy().timeout(timeout);
    if let Some(s) = current() {
        let ca =
            reqwest::Certificate::from_pem(s.certs.ca_pem()).context("the run's CA certificate")?;
        b = b.add_root_certificate(ca);
        if let Some(t) = token() {
            // The token's alphabet (cairn_ + base64url) always makes a valid header; the
            // error names the header only, never the token.
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {t}"))
                .context("the admin token as an Authorization header")?;
            value.set_sensitive(true);
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::AUTHORIZATION, value);
            b = b.default_headers(headers);
        }
    }
    b.build().context("building an HTTP client")
}
