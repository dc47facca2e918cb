//! When the node's own certificates stop being valid: checked at start (an expired or
//! not yet valid certificate is a configuration error, exit 2), warned about when the
//! end is near, and shown on `/metrics` (`cairn_*_tls_cert_not_after_seconds`) so an
//! operator can alert before peers and clients start refusing the node.
//!
//! The dates are read by webpki, the verifier rustls itself uses, rather than by a second
//! X.509 parser: the chain is verified to its CA at the present time, then at the end of
//! time, whose `CertExpired` error names the certificate's notAfter.

use std::path::Path;
use std::time::Duration;

use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, UnixTime};

use super::TlsError;

/// A certificate this close to its notAfter is warned about at every start.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 24 * 3600);

/// 10000-01-01T00:00:00Z: after the latest notAfter X.509 can express (year 9999).
const END_OF_TIME: Duration = Duration::from_secs(253_402_300_800);

/// The notAfter (unix seconds) of `chain[0]`, a certificate of this node that chains to
/// `ca` (loaded from `ca_path`), checked to be valid at `now`.
///
/// - An expired or not yet valid certificate is [`TlsError::NotValidNow`], naming `path`.
/// - One that no CA of `ca_path` issued is [`TlsError::NotFromCa`]: whoever verifies the
///   node with that CA (its peers, a relaying node) refuses it.
/// - `Ok(None)` when webpki does not accept the chain for another reason (a usage it does
///   not allow): what that costs is the TLS layer's to report, not a date.
pub fn not_after(
    path: &Path,
    chain: &[CertificateDer<'_>],
    (ca_path, ca): (&Path, &RootCertStore),
    now: UnixTime,
) -> Result<Option<u64>, TlsError> {
    match verify_at(chain, ca, now) {
        Ok(()) => {}
        // No CA of the file has the issuer's name, or one has it but not the key that
        // signed the certificate (two CAs made alike, such as two `cairn-node certs` runs).
        Err(webpki::Error::UnknownIssuer | webpki::Error::InvalidSignatureForPublicKey) => {
            return Err(TlsError::NotFromCa {
                path: path.to_path_buf(),
                ca: ca_path.to_path_buf(),
            });
        }
        Err(webpki::Error::CertExpired { not_after, .. }) => {
            return Err(not_valid(
                path,
                format!("expired at {}", rfc3339(not_after)),
            ));
        }
        Err(webpki::Error::CertNotValidYet { not_before, .. }) => {
            return Err(not_valid(
                path,
                format!("not valid before {}", rfc3339(not_before)),
            ));
        }
        Err(_) => return Ok(None),
    }
    match verify_at(chain, ca, UnixTime::since_unix_epoch(END_OF_TIME)) {
        Err(webpki::Error::CertExpired { not_after, .. }) => Ok(Some(not_after.as_secs())),
        _ => Ok(None),
    }
}

/// Whether a certificate ending at `not_after` ends within [`EXPIRY_WARNING`] of `now`.
pub fn ends_soon(not_after: u64, now: UnixTime) -> bool {
    not_after.saturating_sub(now.as_secs()) < EXPIRY_WARNING.as_secs()
}

/// `time` as RFC 3339 UTC to the second, for messages.
pub fn rfc3339(time: UnixTime) -> String {
    cairn_memory::render::rfc3339(time.as_secs().saturating_mul(1000))
}

/// Verifies `chain` to `ca` at `time` as a certificate for either end of a connection
/// (a node's certificates serve both; webpki accepts a certificate without extended key
/// usages for any).
fn verify_at(
    chain: &[CertificateDer<'_>],
    ca: &RootCertStore,
    time: UnixTime,
) -> Result<(), webpki::Error> {
    let (leaf, intermediates) = chain.split_first().ok_or(webpki::Error::BadDer)?;
    let cert = webpki::EndEntityCert::try_from(leaf)?;
    cert.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &ca.roots,
        intermediates,
        time,
        webpki::KeyUsage::server_auth(),
        None,
        None,
    )
    .map(drop)
}

fn not_valid(path: &Path, reason: String) -> TlsError {
    TlsError::NotValidNow {
        path: path.to_path_buf(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{
        date_time_ymd, BasicConstraints, CertificateParams, DistinguishedName, IsCa, Issuer,
        KeyPair,
    };

    use super::*;

    const DAY: u64 = 24 * 3600;
    /// 2026-12-05T00:00:00Z, the present of these tests.
    const NOW: u64 = 1_796_428_800;

    fn at(secs: u64) -> UnixTime {
        UnixTime::since_unix_epoch(Duration::from_secs(secs))
    }

    /// A CA and one certificate it signed, valid from the start of year `from` to the
    /// start of year `to`.
    fn issued(from: i32, to: i32) -> (Vec<CertificateDer<'static>>, RootCertStore) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name = DistinguishedName::new();
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(ca_cert.der().clone()).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let mut params = CertificateParams::new(vec!["node-1".to_string()]).unwrap();
        params.not_before = date_time_ymd(from, 1, 1);
        params.not_after = date_time_ymd(to, 1, 1);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        (vec![cert.der().clone()], roots)
    }

    #[test]
    fn a_valid_certificate_gives_its_not_after() {
        let (chain, ca) = issued(2020, 2030);
        let end = not_after(
            Path::new("c.pem"),
            &chain,
            (Path::new("ca.pem"), &ca),
            at(NOW),
        )
        .unwrap();
        // 2030-01-01T00:00:00Z: the leaf's end, not its CA's (rcgen's default, 4096).
        assert_eq!(end, Some(1_893_456_000));
        assert_eq!(rfc3339(at(1_893_456_000)), "2030-01-01T00:00:00Z");
        assert!(!ends_soon(NOW + 31 * DAY, at(NOW)));
        assert!(ends_soon(NOW + 29 * DAY, at(NOW)));
        assert!(ends_soon(NOW - DAY, at(NOW)));
    }

    #[test]
    fn expired_and_future_certificates_are_refused_naming_the_file_and_date() {
        let (chain, ca) = issued(2000, 2001);
        let e = not_after(
            Path::new("old.pem"),
            &chain,
            (Path::new("ca.pem"), &ca),
            at(NOW),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "old.pem: expired at 2001-01-01T00:00:00Z");
        let (chain, ca) = issued(2090, 2099);
        let e = not_after(
            Path::new("new.pem"),
            &chain,
            (Path::new("ca.pem"), &ca),
            at(NOW),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "new.pem: not valid before 2090-01-01T00:00:00Z"
        );
    }

    #[test]
    fn a_certificate_of_another_ca_is_refused_naming_both_files() {
        let (chain, _) = issued(2020, 2030);
        let (_, other_ca) = issued(2020, 2030);
        let e = not_after(
            Path::new("c.pem"),
            &chain,
            (Path::new("other-ca.pem"), &other_ca),
            at(NOW),
        )
        .unwrap_err();
        assert!(matches!(e, TlsError::NotFromCa { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("c.pem: not issued by a CA of other-ca.pem"),
            "{e}"
        );
    }
}
