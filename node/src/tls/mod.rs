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
//!
//! Every configuration is built on the ring provider given explicitly ([`provider`]), so
//! nothing depends on which provider some other crate installed as the process default.

pub mod certs;
pub mod configs;
pub mod pem;
pub mod presented;
pub mod stream;

use std::path::PathBuf;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;

pub use presented::{PeerCertificate, PresentedCertificate};

/// The crypto provider of every TLS configuration the node builds: ring (aws-lc-rs would
/// add a second C build beside RocksDB's).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
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
    #[error("{what}: {source}")]
    Rustls {
        what: &'static str,
        #[source]
        source: rustls::Error,
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
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
