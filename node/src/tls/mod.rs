//! Transport security (SPEC §8): TLS on the client port, mutual TLS on the peer port, and
//! certificates for local clusters and tests.
//!
//! - [`pem`]: certificates, keys and CA bundles from PEM files.
//! - [`configs`]: the rustls configurations: the client port's server, the peer port's
//!   server (client certificates required) and client (presents this node's certificate,
//!   verifies the peer as `node-<id>`), and the relay client to another node's client port.
//! - [`presented`]: the certificate a TLS client presented ([`PeerCertificate`]), which
//!   the accept loop (`crate::serve`) hands to each request of its connection.
//! - [`stream`]: a peer connection's byte stream, plain or TLS.
//! - [`certs`]: a local CA and node certificates (`cairn-node certs`).
//! - [`validity`]: when the node's own certificates stop being valid.
//!
//! Every configuration is built on the ring provider given explicitly ([`provider`]), so
//! nothing depends on which provider some other crate installed as the process default.

pub mod certs;
pub mod configs;
pub mod pem;
pub mod presented;
pub mod stream;
pub mod validity;

use std::path::PathBuf;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;

pub use presented::{PeerCertificate, PresentedCertificate};

/// The crypto provider of every TLS configuration the node builds: ring (aws-lc-rs would
/// add a second C build beside RocksDB's), with TLS 1.3's AES-128-GCM first.
///
/// - ring lists AES-256-GCM first. AES-128-GCM is TLS 1.3's mandatory suite, as safe for
///   this use, and cheaper per record (10 AES rounds instead of 14): a read is one small
///   record each way, so the per-record cost is what TLS adds to it (docs/security.md,
///   Performance). Go's TLS, and so etcd, prefers it too on CPUs with AES instructions.
/// - The servers choose by this order ([`prefer_own_order`]), not the client's (OpenSSL
///   and curl offer AES-256-GCM first).
pub fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|suite| suite.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(provider)
}

/// A server picks the first suite of [`provider`]'s order that the client offers.
pub fn prefer_own_order(server: &mut rustls::ServerConfig) {
    server.ignore_client_order = true;
}

/// Why a certificate, key or TLS configuration could not be set up. Messages name the
/// file; none ever contains key material.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not PEM of the expected kind: {reason}", path.display())]
    Pem { path: PathBuf, reason: String },
    #[error("{}: holds no {what}", path.display())]
    Empty { path: PathBuf, what: &'static str },
    /// rustls's error is part of the message, not a source: printed as a chain (`{:#}`) it
    /// would be said twice.
    #[error("{what}: {error}")]
    Rustls {
        what: &'static str,
        error: rustls::Error,
    },
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error(
        "{}: not valid for {name}, the name node {id}'s peers verify it by: issue it \
         for {name} (cairn-node certs --nodes {id})",
        path.display()
    )]
    NotThisNode {
        path: PathBuf,
        id: u64,
        name: String,
    },
    #[error("{}: {reason}", path.display())]
    NotValidNow { path: PathBuf, reason: String },
    #[error(
        "{}: not issued by a CA of {}, which the nodes verify it with: issue it from that \
         CA (cairn-node certs), or name the CA that issued it",
        path.display(),
        ca.display()
    )]
    NotFromCa { path: PathBuf, ca: PathBuf },
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
