//! The certificate a TLS client presented, handed to each request of its connection.

use std::sync::{Arc, OnceLock};

use rustls_pki_types::CertificateDer;

/// The end-entity certificate the client presented in the TLS handshake (already verified
/// against the configured CA), as a request extension. Absent on plain-HTTP connections
/// and on TLS connections without a client certificate: those requests carry no extension
/// at all, since inserting one builds a map per request (about 0.2 µs of a linearizable
/// read's CPU in the profile of `docs/security.md`). Shared by every request of the
/// connection: each request gets a reference count, not a copy of the DER bytes.
#[derive(Debug, Clone)]
pub struct PeerCertificate(pub Arc<PresentedCertificate>);

/// A connection's client certificate, and what its first requests proved with it.
#[derive(Debug)]
pub struct PresentedCertificate {
    pub der: CertificateDer<'static>,
    /// The node id this certificate was found valid for, set only after that check passed
    /// (`raft_rpc::proof`): the certificate cannot change within a connection, so later
    /// requests claiming the same id are not parsed again. A peer sends a request per
    /// heartbeat, append and ReadIndex round; parsing its certificate each time cost
    /// about 2% of a node's CPU under linearizable reads.
    pub valid_for_node: OnceLock<u64>,
}

impl PeerCertificate {
    pub fn new(der: CertificateDer<'static>) -> Self {
        PeerCertificate(Arc::new(PresentedCertificate {
            der,
            valid_for_node: OnceLock::new(),
        }))
    }
}
