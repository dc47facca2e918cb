//! HTTPS to a cluster: the CA that signed the nodes' certificates and, for client ports
//! that require one (mutual TLS), this client's certificate and key. rustls on the ring
//! provider; no built-in roots, so a node is trusted only through the CA given here.
//!
//! The client builds the rustls configuration itself and hands reqwest a copy, so that
//! it can also open a connection of its own with the very same settings: the
//! [`TlsConfig::refusal_alert`] probe that asks a node why it closed a connection before
//! reqwest could send anything on it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{rustls_error_in, ClientError};

type Result<T> = std::result::Result<T, ClientError>;

/// The TLS settings of a [`super::ClientBuilder`]. `Debug` shows neither certificates
/// nor the key.
#[derive(Default)]
pub(super) struct TlsSettings {
    pub(super) roots: Vec<CertificateDer<'static>>,
    pub(super) identity: Option<Identity>,
}

/// A client certificate chain and its private key.
pub(super) struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("roots", &self.roots.len())
            .field("identity", &self.identity.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

impl TlsSettings {
    /// `true` once a CA was given: `https://` endpoints can be verified.
    pub(super) fn has_roots(&self) -> bool {
        !self.roots.is_empty()
    }

    /// The rustls configuration of these settings; `None` when none was given (plain
    /// HTTP only).
    pub(super) fn config(self) -> Result<Option<TlsConfig>> {
        if self.roots.is_empty() && self.identity.is_none() {
            return Ok(None);
        }
        let mut roots = rustls::RootCertStore::empty();
        for root in self.roots {
            roots
                .add(root)
                .map_err(|e| ClientError::invalid_input(format!("CA certificate: {e}")))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::invalid_input(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let mut config = match self.identity {
            None => builder.with_no_client_auth(),
            Some(Identity { chain, key }) => builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| identity_error(&e))?,
        };
        // The client speaks HTTP/1.1 only (reqwest is built without HTTP/2).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(TlsConfig(Arc::new(config))))
    }
}

/// Why a certificate and key given together cannot be used; never quotes the key.
fn identity_error(err: &rustls::Error) -> ClientError {
    match err {
        rustls::Error::InconsistentKeys(_) => ClientError::invalid_input(
            "client certificate: the private key is not the certificate's (--cert and \
             --key, or CAIRN_CERT and CAIRN_KEY, must be one pair)",
        ),
        other => ClientError::invalid_input(format!("client certificate: {other}")),
    }
}

/// The client's rustls configuration, shared by reqwest's connections and the probe.
/// `Debug` names it only: rustls's own would print the certificate chain.
#[derive(Clone)]
pub(super) struct TlsConfig(Arc<rustls::ClientConfig>);

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig")
    }
}

/// What the probe sends once its handshake is done: a node that accepted the client's
/// certificate answers it at once, one that refused it has already sent its alert.
const PROBE_REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: cairn\r\nConnection: close\r\n\r\n";

impl TlsConfig {
    /// Applies the configuration to reqwest's builder.
    pub(super) fn apply(&self, http: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        http.use_preconfigured_tls(rustls::ClientConfig::clone(&self.0))
    }

    /// The alert with which the node at `endpoint` ends a handshake of this client's own,
    /// if it does so within `timeout`.
    ///
    /// Under TLS 1.3 a client's handshake is done before the node has judged the client's
    /// certificate, and the node's verdict (an alert, then close) can reach reqwest's
    /// connection before reqwest hands it the request: hyper then reports the request as
    /// canceled (never sent) and the alert is lost with the connection. This probe
    /// repeats the handshake on a connection the client reads itself, so the mistake
    /// can still be named.
    pub(super) async fn refusal_alert(
        &self,
        endpoint: &str,
        timeout: Duration,
    ) -> Option<rustls::AlertDescription> {
        let url = reqwest::Url::parse(endpoint).ok()?;
        let port = url.port_or_known_default()?;
        // An IPv6 host comes bracketed; both the connect and the name want it bare.
        let host = url
            .host_str()?
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host).ok()?.to_owned();
        let address = host.to_string();
        let connector = tokio_rustls::TlsConnector::from(self.0.clone());
        let probe = async move {
            let tcp = TcpStream::connect((address.as_str(), port)).await.ok()?;
            let mut tls = match connector.connect(name, tcp).await {
                Ok(tls) => tls,
                Err(err) => return alert_in(&err),
            };
            // A node that closed after its alert may reset this write; the alert is
            // read all the same (it arrived first).
            let _ = tls.write_all(PROBE_REQUEST).await;
            let mut first = [0u8; 1];
            match tls.read(&mut first).await {
                Ok(_) => None,
                Err(err) => alert_in(&err),
            }
        };
        tokio::time::timeout(timeout, probe).await.ok().flatten()
    }
}

fn alert_in(err: &std::io::Error) -> Option<rustls::AlertDescription> {
    match rustls_error_in(err)? {
        rustls::Error::AlertReceived(alert) => Some(*alert),
        _ => None,
    }
}

/// Every certificate of a PEM bundle (the cluster CA, possibly several).
pub(super) fn parse_ca(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| ClientError::invalid_input(format!("{what}: not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(ClientError::invalid_input(format!(
            "{what}: no certificate (expected -----BEGIN CERTIFICATE-----)"
        )));
    }
    Ok(certs)
}

/// A client identity from its certificate chain and private key (both PEM), named in
/// errors as `cert_name` and `key_name` (a file's path, when read from one), so that files
/// given the wrong way round are told apart. Errors never quote the key.
pub(super) fn parse_identity(
    (cert_pem, cert_name): (&[u8], &str),
    (key_pem, key_name): (&[u8], &str),
) -> Result<Identity> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .ok()
        .filter(|chain| !chain.is_empty())
        .ok_or_else(|| {
            ClientError::invalid_input(format!(
                "{cert_name}: no PEM certificate (expected -----BEGIN CERTIFICATE-----)"
            ))
        })?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| {
        ClientError::invalid_input(format!(
            "{key_name}: no PEM private key (PKCS#8, PKCS#1 or SEC1)"
        ))
    })?;
    Ok(Identity { chain, key })
}

pub(super) fn read_file(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| ClientError::Io {
        message: format!("{what} {}: {e}", path.display()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use tokio::net::TcpListener;

    /// A CA, and certificates it signs: PEM, as files would hold them.
    struct Ca {
        cert_pem: String,
        issuer: Issuer<'static, KeyPair>,
    }

    impl Ca {
        fn new() -> Ca {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let key = KeyPair::generate().unwrap();
            let cert_pem = params.self_signed(&key).unwrap().pem();
            Ca {
                cert_pem,
                issuer: Issuer::new(params, key),
            }
        }

        /// A certificate for `name` and its key.
        fn issue(&self, name: &str) -> (String, String) {
            let params = CertificateParams::new(vec![name.to_string()]).unwrap();
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &self.issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        }

        fn roots(&self) -> Vec<CertificateDer<'static>> {
            parse_ca(self.cert_pem.as_bytes(), "CA").unwrap()
        }
    }

    /// A TLS server on loopback that asks every client for a certificate signed by
    /// `clients`, answers each accepted connection's request and closes, and refuses
    /// every other handshake with rustls's alert. Returns its `https://` endpoint.
    async fn server_requiring_client_certificates(nodes: &Ca, clients: &Ca) -> String {
        let mut client_roots = rustls::RootCertStore::empty();
        client_roots.add_parsable_certificates(clients.roots());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(client_roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let (cert, key) = nodes.issue("localhost");
        let identity = parse_identity((cert.as_bytes(), "cert"), (key.as_bytes(), "key")).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(identity.chain, identity.key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let mut request = [0u8; 512];
                        let _ = tls.read(&mut request).await;
                        let _ = tls.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
                    }
                });
            }
        });
        format!("https://localhost:{port}")
    }

    fn config(
        roots: Vec<CertificateDer<'static>>,
        identity: Option<(String, String)>,
    ) -> TlsConfig {
        let identity = identity.map(|(cert, key)| {
            parse_identity((cert.as_bytes(), "cert"), (key.as_bytes(), "key")).unwrap()
        });
        TlsSettings { roots, identity }.config().unwrap().unwrap()
    }

    #[tokio::test]
    async fn the_probe_reads_the_alert_that_refuses_the_clients_certificate() {
        let (nodes, clients, strangers) = (Ca::new(), Ca::new(), Ca::new());
        let endpoint = server_requiring_client_certificates(&nodes, &clients).await;
        let timeout = Duration::from_secs(5);
        let anonymous = config(nodes.roots(), None);
        assert_eq!(
            anonymous.refusal_alert(&endpoint, timeout).await,
            Some(rustls::AlertDescription::CertificateRequired)
        );
        let stranger = config(nodes.roots(), Some(strangers.issue("agent")));
        let alert = stranger.refusal_alert(&endpoint, timeout).await;
        let mismatch = alert.and_then(crate::error::client_certificate_alert);
        assert!(mismatch.is_some(), "{alert:?} names no refused certificate");
        // An accepted certificate: the probe's request is answered, no alert, at once.
        let member = config(nodes.roots(), Some(clients.issue("agent")));
        let started = std::time::Instant::now();
        assert_eq!(member.refusal_alert(&endpoint, timeout).await, None);
        assert!(
            started.elapsed() < timeout,
            "the probe waited out its timeout"
        );
    }

    #[test]
    fn files_given_the_wrong_way_round_are_named() {
        let (cert, key) = Ca::new().issue("agent");
        let both_keys = parse_identity(
            (key.as_bytes(), "client certificate k.pem"),
            (key.as_bytes(), "client key k.pem"),
        );
        let shown = both_keys.err().expect("two keys taken").to_string();
        assert!(
            shown.contains("client certificate k.pem: no PEM certificate"),
            "{shown}"
        );
        let both_certs = parse_identity(
            (cert.as_bytes(), "client certificate c.pem"),
            (cert.as_bytes(), "client key c.pem"),
        );
        let shown = both_certs
            .err()
            .expect("two certificates taken")
            .to_string();
        assert!(
            shown.contains("client key c.pem: no PEM private key"),
            "{shown}"
        );
    }

    #[test]
    fn debug_output_shows_neither_certificate_nor_key() {
        let ca = Ca::new();
        let (cert, key) = ca.issue("agent");
        let settings = TlsSettings {
            roots: ca.roots(),
            identity: Some(
                parse_identity((cert.as_bytes(), "cert"), (key.as_bytes(), "key")).unwrap(),
            ),
        };
        let settings_shown = format!("{settings:?}");
        let shown = format!("{settings_shown} {:?}", settings.config().unwrap().unwrap());
        assert_eq!(
            shown,
            "TlsSettings { roots: 1, identity: Some(\"[redacted]\") } TlsConfig"
        );
    }
}
