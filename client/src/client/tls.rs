//! HTTPS to a cluster: the CA that signed the nodes' certificates and, for client ports
//! that require one (mutual TLS), this client's certificate and key. rustls on the ring
//! provider; no built-in roots, so a node is trusted only through the CA given here.

use std::path::Path;

use crate::error::ClientError;

type Result<T> = std::result::Result<T, ClientError>;

/// The TLS settings of a [`super::ClientBuilder`]. `Debug` shows neither certificates
/// nor the key (reqwest's types print only their names).
#[derive(Debug, Default)]
pub(super) struct TlsSettings {
    pub(super) roots: Vec<reqwest::Certificate>,
    pub(super) identity: Option<reqwest::Identity>,
}

impl TlsSettings {
    /// `true` once a CA was given: `https://` endpoints can be verified.
    pub(super) fn has_roots(&self) -> bool {
        !self.roots.is_empty()
    }

    /// Applies the settings to reqwest's builder.
    pub(super) fn apply(self, mut http: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        if self.roots.is_empty() && self.identity.is_none() {
            return http;
        }
        http = http.use_rustls_tls().tls_built_in_root_certs(false);
        for root in self.roots {
            http = http.add_root_certificate(root);
        }
        if let Some(identity) = self.identity {
            http = http.identity(identity);
        }
        http
    }
}

/// Every certificate of a PEM bundle (the cluster CA, possibly several).
pub(super) fn parse_ca(pem: &[u8], what: &str) -> Result<Vec<reqwest::Certificate>> {
    let certs = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|e| ClientError::invalid_input(format!("{what}: not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(ClientError::invalid_input(format!(
            "{what}: no certificate (expected -----BEGIN CERTIFICATE-----)"
        )));
    }
    Ok(certs)
}

/// A client identity from its certificate chain and private key (both PEM). Errors never
/// quote the key.
pub(super) fn parse_identity(cert_pem: &[u8], key_pem: &[u8]) -> Result<reqwest::Identity> {
    let mut both = Vec::with_capacity(cert_pem.len() + key_pem.len() + 1);
    both.extend_from_slice(cert_pem);
    both.push(b'\n');
    both.extend_from_slice(key_pem);
    reqwest::Identity::from_pem(&both).map_err(|_| {
        ClientError::invalid_input(
            "client certificate: expected a PEM certificate and a PEM private key \
             (PKCS#8, PKCS#1 or SEC1)",
        )
    })
}

pub(super) fn read_file(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| ClientError::Io {
        message: format!("{what} {}: {e}", path.display()),
    })
}
