//! Certificates, private keys and CA bundles from PEM files, through rustls-pki-types'
//! `PemObject` (the one PEM parser in the dependency tree).

use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;

/// Every certificate in `path`, leaf first (a chain), at least one.
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| pem_error(path, e))?;
    let certs = iter
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: path.to_path_buf(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// The private key in `path` (PKCS#8, PKCS#1 or SEC1). A file without one (a
/// certificate given for its key) is named as such, as [`certs`] names a file without a
/// certificate.
pub fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            path: path.to_path_buf(),
            what: "private key (PKCS#8, PKCS#1 or SEC1)",
        },
        other => pem_error(path, other),
    })
}

/// The CA certificates in `path` as a trust store.
pub fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certs(path)? {
        store.add(cert).map_err(|error| TlsError::Rustls {
            what: "adding a CA certificate",
            error,
        })?;
    }
    Ok(store)
}

/// Maps a PEM error; an I/O error (missing file, no permission) keeps its kind. The PEM
/// error's text describes the structure found, never key bytes.
fn pem_error(path: &Path, e: rustls_pki_types::pem::Error) -> TlsError {
    match e {
        rustls_pki_types::pem::Error::Io(source) => TlsError::Read {
            path: path.to_path_buf(),
            source,
        },
        other => TlsError::Pem {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    }
}
