//! The node's rustls configurations, each from the paths in its [`NodeConfig`].
//!
//! Certificates are used exactly as the cluster CA issued them: the peer port requires a
//! client certificate chaining to `peer_tls_ca` in the handshake, and the client side
//! accepts a peer's server certificate only for the DNS name `node-<id>` of the node it
//! meant to reach, so a valid certificate of one node cannot impersonate another.

use std::path::Path;
use std::sync::Arc;

use cairn_config::{Host, NodeConfig};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ServerConfig};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::{pem, provider, validity, TlsError};

/// Both ends speak HTTP/1.1 only (no HTTP/2 anywhere in the build).
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// The DNS name every node's peer certificate carries among its subject alternative
/// names, and the name its peers verify it by.
pub fn node_dns_name(id: u64) -> String {
    format!("node-{id}")
}

/// The client port's server: `tls_cert`/`tls_key`, and client certificates from
/// `tls_client_ca` required when it is set. `None` without client TLS.
pub fn client_port_server(config: &NodeConfig) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls("client port TLS"))?;
    let builder = match &config.tls_client_ca {
        Some(ca) => builder.with_client_cert_verifier(client_verifier(ca)?),
        None => builder.with_no_client_auth(),
    };
    let mut server = builder
        .with_single_cert(pem::certs(cert)?, pem::key(key)?)
        .map_err(rustls("tls_cert and tls_key"))?;
    server.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    super::prefer_own_order(&mut server);
    Ok(Some(Arc::new(server)))
}

/// The TLS of a node's own peer port and peer calls: both configurations share the node's
/// certificate and the cluster CA.
#[derive(Clone)]
pub struct PeerTls {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
    /// The node certificate's notAfter (unix seconds; [`validity::not_after`]).
    pub not_after: Option<u64>,
}

impl PeerTls {
    /// From `peer_tls_cert`, `peer_tls_key` and `peer_tls_ca`; `None` without peer TLS.
    pub fn from_config(config: &NodeConfig) -> Result<Option<PeerTls>, TlsError> {
        let (Some(cert), Some(key), Some(ca)) = (
            &config.peer_tls_cert,
            &config.peer_tls_key,
            &config.peer_tls_ca,
        ) else {
            return Ok(None);
        };
        let (chain, key) = (pem::certs(cert)?, pem::key(key)?);
        check_names_node(cert, &chain[0], config.id)?;
        let not_after = validity::not_after(cert, &chain, (ca, &pem::roots(ca)?), UnixTime::now())?;
        let mut server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(rustls("peer TLS"))?
            .with_client_cert_verifier(client_verifier(ca)?)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(rustls("peer_tls_cert and peer_tls_key"))?;
        server.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        super::prefer_own_order(&mut server);
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(rustls("peer TLS"))?
            .with_root_certificates(pem::roots(ca)?)
            .with_client_auth_cert(chain, key)
            .map_err(rustls("peer_tls_cert and peer_tls_key"))?;
        client.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        Ok(Some(PeerTls {
            server: Arc::new(server),
            client: Arc::new(client),
            not_after,
        }))
    }

    /// The name a peer's server certificate must carry: `node-<id>`.
    pub fn server_name(id: u64) -> ServerName<'static> {
        ServerName::try_from(node_dns_name(id)).expect("node-<digits> is a valid DNS name")
    }
}

/// Whether `cert` is valid for `node-<id>`, the name a node's peers verify it by; `Err`
/// when it does not parse as a certificate.
pub fn names_node(cert: &CertificateDer<'_>, id: u64) -> Result<bool, webpki::Error> {
    let cert = webpki::EndEntityCert::try_from(cert)?;
    Ok(cert
        .verify_is_valid_for_subject_name(&PeerTls::server_name(id))
        .is_ok())
}

/// This node's peer certificate carries `node-<id>`: one for another id (or none) would
/// get past every check here and be refused by each peer at run time, so it is refused
/// at start as a configuration error.
fn check_names_node(path: &Path, cert: &CertificateDer<'_>, id: u64) -> Result<(), TlsError> {
    match names_node(cert, id) {
        Ok(true) => Ok(()),
        _ => Err(TlsError::NotThisNode {
            path: path.to_path_buf(),
            id,
            name: node_dns_name(id),
        }),
    }
}

/// The host of `client_addr` when the client port's certificate does not name it (as an
/// IP address or a DNS name): nodes relay to the leader's `client_addr` and verify its
/// certificate by that host, so relays to this node would fail while clients that use
/// another name succeed. `None` without client TLS, for an unspecified address (a bind to
/// every interface names no host), or when the certificate names the host.
pub fn client_cert_misses_addr(config: &NodeConfig) -> Result<Option<String>, TlsError> {
    let Some(cert) = &config.tls_cert else {
        return Ok(None);
    };
    let (host, name) = match cairn_config::host_of(&config.client_addr) {
        Some(Host::Ip(ip)) if ip.is_unspecified() => return Ok(None),
        Some(Host::Ip(ip)) => (ip.to_string(), ServerName::IpAddress(ip.into())),
        Some(Host::Name(name)) => match ServerName::try_from(name.to_string()) {
            Ok(server_name) => (name.to_string(), server_name),
            Err(_) => return Ok(None),
        },
        None => return Ok(None),
    };
    let certs = pem::certs(cert)?;
    let Some(leaf) = certs.first() else {
        return Ok(None);
    };
    let named = webpki::EndEntityCert::try_from(leaf)
        .is_ok_and(|leaf| leaf.verify_is_valid_for_subject_name(&name).is_ok());
    Ok((!named).then_some(host))
}

/// The notAfter (unix seconds) of the client port's certificate, checked valid now
/// ([`validity::not_after`]) against [`NodeConfig::client_port_ca`]; `None` without
/// client TLS, without a CA to check it against, or when it does not chain to that CA.
///
/// A certificate of another CA only warns: clients may trust its issuer (a public CA),
/// while a node relaying to this one, which trusts the CA it relays with alone, cannot.
pub fn client_cert_not_after(config: &NodeConfig) -> Result<Option<u64>, TlsError> {
    let (Some(cert), Some(ca)) = (&config.tls_cert, config.client_port_ca()) else {
        return Ok(None);
    };
    match validity::not_after(
        cert,
        &pem::certs(cert)?,
        (ca, &pem::roots(ca)?),
        UnixTime::now(),
    ) {
        Err(e @ TlsError::NotFromCa { .. }) => {
            tracing::warn!(
                "{e}; relays from other nodes to this one will fail (set tls_ca to the CA \
                 of every node's client certificate)"
            );
            Ok(None)
        }
        answer => answer,
    }
}

/// The client a node relays with to another node's HTTPS client port (followers relay
/// mutations to the leader): trusts [`NodeConfig::client_port_ca`] and presents this
/// node's client-port certificate, which a leader requiring client certificates
/// (`tls_client_ca`) checks like any client's. `None` without client TLS. Without any CA
/// it trusts nothing: the node serves HTTPS (SPEC §8 asks only a certificate and key) and
/// a relay answers 503 `no_leader` naming the certificate error (warned at start).
pub fn relay_client(config: &NodeConfig) -> Result<Option<ClientConfig>, TlsError> {
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let roots = match config.client_port_ca() {
        Some(ca) => pem::roots(ca)?,
        None => rustls::RootCertStore::empty(),
    };
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls("relay TLS"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(pem::certs(cert)?, pem::key(key)?)
        .map_err(rustls("tls_cert and tls_key"))?;
    client.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Some(client))
}

fn client_verifier(
    ca: &Path,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    Ok(
        WebPkiClientVerifier::builder_with_provider(Arc::new(pem::roots(ca)?), provider())
            .build()?,
    )
}

fn rustls(what: &'static str) -> impl FnOnce(rustls::Error) -> TlsError {
    move |error| TlsError::Rustls { what, error }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rustls::{CipherSuite, ClientConnection, ServerConnection};

    use super::*;
    use crate::tls::certs;

    /// A client that offers ring's default order (AES-256-GCM first, as OpenSSL and curl
    /// do), trusting `ca`, presenting `identity` if given.
    fn client_preferring_aes_256(ca: &Path, identity: Option<(&Path, &Path)>) -> Arc<ClientConfig> {
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(pem::roots(ca).unwrap());
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(pem::certs(cert).unwrap(), pem::key(key).unwrap())
                .unwrap(),
        };
        Arc::new(config)
    }

    /// A whole TLS handshake between `client` and `server` in memory; the suite the
    /// server chose.
    fn handshake(client: Arc<ClientConfig>, server: Arc<ServerConfig>, name: &str) -> CipherSuite {
        let name = ServerName::try_from(name.to_string()).unwrap();
        let mut client = ClientConnection::new(client, name).unwrap();
        let mut server = ServerConnection::new(server).unwrap();
        for _ in 0..10 {
            if !client.is_handshaking() && !server.is_handshaking() {
                break;
            }
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut wire.as_slice()).unwrap();
            server.process_new_packets().unwrap();
            wire.clear();
            server.write_tls(&mut wire).unwrap();
            client.read_tls(&mut wire.as_slice()).unwrap();
            client.process_new_packets().unwrap();
        }
        assert!(!client.is_handshaking() && !server.is_handshaking());
        server.negotiated_cipher_suite().unwrap().suite()
    }

    #[test]
    fn a_client_certificate_that_does_not_name_the_client_addr_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = BTreeMap::from([(2, vec!["10.0.0.2".to_string(), "db2.example".to_string()])]);
        let g = certs::generate(dir.path(), &[1, 2], &hosts).unwrap();
        let mut config = NodeConfig::local(1).unwrap();
        assert_eq!(
            client_cert_misses_addr(&config).unwrap(),
            None,
            "no client TLS"
        );
        config.tls_cert = Some(g.nodes[&1].0.clone());
        let misses = |config: &mut NodeConfig, addr: &str| {
            config.client_addr = addr.to_string();
            client_cert_misses_addr(config).unwrap()
        };
        // node-1's certificate names 127.0.0.1 and localhost, as `certs` issues them.
        assert_eq!(misses(&mut config, "127.0.0.1:7401"), None);
        assert_eq!(misses(&mut config, "localhost:7401"), None);
        assert_eq!(
            misses(&mut config, "0.0.0.0:7401"),
            None,
            "a bind names no host"
        );
        assert_eq!(
            misses(&mut config, "[::]:7401"),
            None,
            "a bind names no host"
        );
        assert_eq!(
            misses(&mut config, "127.0.0.7:7401").as_deref(),
            Some("127.0.0.7")
        );
        config.tls_cert = Some(g.nodes[&2].0.clone());
        assert_eq!(misses(&mut config, "10.0.0.2:7401"), None);
        assert_eq!(misses(&mut config, "db2.example:7401"), None);
        assert_eq!(
            misses(&mut config, "10.0.0.3:7401").as_deref(),
            Some("10.0.0.3")
        );
    }

    #[test]
    fn both_ports_choose_aes_128_gcm_whatever_the_client_prefers() {
        let dir = tempfile::tempdir().unwrap();
        let g = certs::generate(dir.path(), &[1], &BTreeMap::new()).unwrap();
        let (cert, key) = &g.nodes[&1];
        let mut config = NodeConfig::local(1).unwrap();
        config.tls_cert = Some(cert.clone());
        config.tls_key = Some(key.clone());
        config.peer_tls_cert = Some(cert.clone());
        config.peer_tls_key = Some(key.clone());
        config.peer_tls_ca = Some(g.ca_cert.clone());

        let client_port = client_port_server(&config).unwrap().unwrap();
        let offered = client_preferring_aes_256(&g.ca_cert, None);
        assert_eq!(
            offered.crypto_provider().cipher_suites[0].suite(),
            CipherSuite::TLS13_AES_256_GCM_SHA384,
            "the client must prefer another suite for this test to mean anything"
        );
        assert_eq!(
            handshake(offered, client_port, "localhost"),
            CipherSuite::TLS13_AES_128_GCM_SHA256
        );

        let peer = PeerTls::from_config(&config).unwrap().unwrap();
        let identity = Some((cert.as_path(), key.as_path()));
        assert_eq!(
            handshake(
                client_preferring_aes_256(&g.ca_cert, identity),
                peer.server,
                "node-1"
            ),
            CipherSuite::TLS13_AES_128_GCM_SHA256
        );
        // A server that follows the client's order: the node's own clients offer
        // AES-128-GCM first.
        let follows_client =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_client_cert_verifier(client_verifier(&g.ca_cert).unwrap())
                .with_single_cert(pem::certs(cert).unwrap(), pem::key(key).unwrap())
                .unwrap();
        assert!(!follows_client.ignore_client_order);
        assert_eq!(
            handshake(peer.client, Arc::new(follows_client), "node-1"),
            CipherSuite::TLS13_AES_128_GCM_SHA256
        );
    }
}
