//! Transport security settings (SPEC §8): TLS on the client port, peer proof on the peer
//! port, and `insecure`. Top-level keys of the file, named like the flags
//! (`--tls-cert` is `tls_cert`).
//!
//! Only paths are kept here; the node loads certificates and keys when it starts. The peer
//! secret is read (and its length checked) by [`read_peer_secret`], so a short secret fails
//! as a config error and its bytes never sit in [`crate::NodeConfig`] (which is `Debug`
//! and serialized by `--print-config`-like tools).

use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::NodeConfig;

/// A shared peer secret shorter than this is refused (SPEC §8).
pub const PEER_SECRET_BYTES_MIN: usize = 32;

/// How the peer port's callers prove they are cluster members (a joining node is asked
/// for its own, so it crosses the peer port too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PeerProof {
    /// Mutual TLS against `peer_tls_ca`; certificates name `node-<ID>`.
    Tls,
    /// A shared secret in a header, loopback peer addresses only.
    Secret,
    /// Nothing: a loopback development node, or `insecure`.
    None,
}

impl NodeConfig {
    /// Whether the client port serves HTTPS.
    pub fn client_tls(&self) -> bool {
        self.tls_cert.is_some()
    }

    /// `https` when the client port serves TLS, else `http`: the scheme a node uses to
    /// reach another node's client port (relays to the leader, health probes).
    pub fn client_scheme(&self) -> &'static str {
        if self.client_tls() {
            "https"
        } else {
            "http"
        }
    }

    /// The CA a node trusts when it calls another node's client port over HTTPS:
    /// `tls_ca`, else `peer_tls_ca`, else `tls_client_ca` (a single cluster CA usually
    /// signs all three). `None` without client TLS.
    pub fn client_port_ca(&self) -> Option<&Path> {
        self.tls_cert.as_ref()?;
        self.tls_ca
            .as_deref()
            .or(self.peer_tls_ca.as_deref())
            .or(self.tls_client_ca.as_deref())
    }

    pub fn peer_proof(&self) -> PeerProof {
        if self.peer_tls_cert.is_some() {
            PeerProof::Tls
        } else if self.peer_secret_file.is_some() {
            PeerProof::Secret
        } else {
            PeerProof::None
        }
    }

    /// The ports that listen beyond loopback without TLS (`client_addr`, `peer_addr`):
    /// refused unless `insecure`, and warned about at every start when it is.
    pub fn exposed_without_tls(&self) -> Vec<&'static str> {
        let mut exposed = Vec::new();
        if !self.client_tls() && !is_loopback(&self.client_addr) {
            exposed.push("client_addr");
        }
        if self.peer_proof() != PeerProof::Tls && !is_loopback(&self.peer_addr) {
            exposed.push("peer_addr");
        }
        exposed
    }

    /// The transport checks of [`NodeConfig::validate`]:
    /// - `tls_cert` and `tls_key` come together; `tls_client_ca` and `tls_ca` need them;
    /// - with `tls_cert`, some CA for the client port is known ([`Self::client_port_ca`]),
    ///   since followers relay to the leader over HTTPS;
    /// - `peer_tls_cert`, `peer_tls_key` and `peer_tls_ca` come together;
    /// - `peer_secret_file` excludes peer TLS and needs a loopback `peer_addr`;
    /// - no port beyond loopback without TLS, unless `insecure`.
    pub(crate) fn validate_transport(&self) -> Result<(), ConfigError> {
        require_with("tls_key", &self.tls_key, "tls_cert", &self.tls_cert)?;
        require_with("tls_cert", &self.tls_cert, "tls_key", &self.tls_key)?;
        require_with(
            "tls_cert",
            &self.tls_cert,
            "tls_client_ca",
            &self.tls_client_ca,
        )?;
        require_with("tls_cert", &self.tls_cert, "tls_ca", &self.tls_ca)?;
        let peer = [
            ("peer_tls_cert", &self.peer_tls_cert),
            ("peer_tls_key", &self.peer_tls_key),
            ("peer_tls_ca", &self.peer_tls_ca),
        ];
        for (field, value) in peer {
            for (other, other_value) in peer {
                require_with(field, value, other, other_value)?;
            }
        }
        if self.peer_secret_file.is_some() {
            if self.peer_tls_cert.is_some() {
                return Err(ConfigError::invalid(
                    "peer_secret_file",
                    "give either peer TLS (peer_tls_cert, peer_tls_key, peer_tls_ca) or a \
                     peer secret, not both",
                ));
            }
            if !is_loopback(&self.peer_addr) {
                return Err(ConfigError::invalid(
                    "peer_secret_file",
                    format!(
                        "a peer secret is for loopback peers only (peer_addr is {}); use peer \
                         TLS between hosts",
                        self.peer_addr
                    ),
                ));
            }
        }
        let exposed = self.exposed_without_tls();
        if let (Some(first), false) = (exposed.first(), self.insecure) {
            let addr = if *first == "client_addr" {
                &self.client_addr
            } else {
                &self.peer_addr
            };
            let needs = if *first == "client_addr" {
                "tls_cert and tls_key"
            } else {
                "peer_tls_cert, peer_tls_key and peer_tls_ca"
            };
            return Err(ConfigError::invalid(
                first,
                format!(
                    "{addr} listens beyond loopback without TLS; give {needs}, or pass \
                     --insecure (insecure = true) to run unprotected"
                ),
            ));
        }
        Ok(())
    }
}

/// `value` must be set when `with` is: else an error naming `field`.
fn require_with(
    field: &'static str,
    value: &Option<PathBuf>,
    with: &'static str,
    with_value: &Option<PathBuf>,
) -> Result<(), ConfigError> {
    if with_value.is_some() && value.is_none() {
        return Err(ConfigError::invalid(field, format!("required with {with}")));
    }
    Ok(())
}

/// Whether every address `addr` names is on loopback (a host name may name several).
/// `0.0.0.0` and `::` listen on every interface, so they are not. A host name is looked
/// up (blocking).
pub fn is_loopback(addr: &str) -> bool {
    crate::node::socket_addrs("addr", addr)
        .is_ok_and(|all| all.iter().all(|a| a.ip().is_loopback()))
}

/// Opens every certificate, key and CA file the config names, so that one that cannot be
/// read is an error naming its key (`tls_key /etc/cairn/node.key: cannot read: …`); the
/// PEM loader's own errors name only the path, and a cert and its key are often side by
/// side. Nothing is read beyond the open.
pub fn check_tls_files_open(config: &NodeConfig) -> Result<(), ConfigError> {
    let files = [
        ("tls_cert", &config.tls_cert),
        ("tls_key", &config.tls_key),
        ("tls_ca", &config.tls_ca),
        ("tls_client_ca", &config.tls_client_ca),
        ("peer_tls_cert", &config.peer_tls_cert),
        ("peer_tls_key", &config.peer_tls_key),
        ("peer_tls_ca", &config.peer_tls_ca),
    ];
    for (field, path) in files {
        let Some(path) = path else { continue };
        std::fs::File::open(path).map_err(|cause| ConfigError::Read {
            what: field,
            path: path.clone(),
            cause,
        })?;
    }
    Ok(())
}

/// The peer secret in `path`: the file's bytes without trailing line breaks (an editor's
/// final newline is not part of the secret), at least [`PEER_SECRET_BYTES_MIN`] long.
/// Errors name the file, never its content.
pub fn read_peer_secret(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let mut bytes = std::fs::read(path).map_err(|cause| ConfigError::Read {
        what: "peer secret file",
        path: path.to_path_buf(),
        cause,
    })?;
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    if bytes.len() < PEER_SECRET_BYTES_MIN {
        return Err(ConfigError::invalid(
            "peer_secret_file",
            format!(
                "{} must hold at least {PEER_SECRET_BYTES_MIN} bytes (it holds {})",
                path.display(),
                bytes.len()
            ),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::Overrides;

    fn load(toml: &str) -> Result<NodeConfig, ConfigError> {
        let ov = Overrides {
            id: Some(1),
            ..Overrides::default()
        };
        NodeConfig::from_toml_str(toml, &ov)
    }

    fn field(toml: &str) -> Option<&'static str> {
        load(toml).unwrap_err().field()
    }

    #[test]
    fn loopback_without_tls_is_plain_and_open() {
        let c = load("").unwrap();
        assert!(!c.client_tls());
        assert_eq!(c.client_scheme(), "http");
        assert_eq!(c.peer_proof(), PeerProof::None);
        assert!(c.exposed_without_tls().is_empty());
    }

    #[test]
    fn cert_and_key_come_together() {
        assert_eq!(field("tls_cert = \"c.pem\""), Some("tls_key"));
        assert_eq!(field("tls_key = \"k.pem\""), Some("tls_cert"));
        assert_eq!(field("tls_client_ca = \"ca.pem\""), Some("tls_cert"));
        assert_eq!(field("peer_tls_cert = \"c.pem\""), Some("peer_tls_key"));
        assert_eq!(
            field("peer_tls_cert = \"c\"\npeer_tls_key = \"k\""),
            Some("peer_tls_ca")
        );
        assert_eq!(field("peer_tls_ca = \"ca\""), Some("peer_tls_cert"));
    }

    #[test]
    fn client_tls_needs_only_a_certificate_and_key() {
        let c = load("tls_cert = \"c\"\ntls_key = \"k\"").unwrap();
        assert_eq!(c.client_port_ca(), None);
        assert_eq!(c.client_scheme(), "https");
        let c = load("tls_cert = \"c\"\ntls_key = \"k\"\ntls_client_ca = \"cca\"").unwrap();
        assert_eq!(c.client_port_ca(), Some(Path::new("cca")));
        assert_eq!(c.client_scheme(), "https");
        let c = load(
            "tls_cert = \"c\"\ntls_key = \"k\"\ntls_client_ca = \"cca\"\ntls_ca = \"ca\"\n\
             peer_tls_cert = \"pc\"\npeer_tls_key = \"pk\"\npeer_tls_ca = \"pca\"",
        )
        .unwrap();
        assert_eq!(c.client_port_ca(), Some(Path::new("ca")));
        assert_eq!(c.peer_proof(), PeerProof::Tls);
    }

    #[test]
    fn beyond_loopback_needs_tls_or_insecure() {
        let err = load("client_addr = \"0.0.0.0:7401\"").unwrap_err();
        assert_eq!(err.field(), Some("client_addr"));
        assert!(err.to_string().contains("--insecure"), "{err}");
        assert_eq!(field("peer_addr = \"10.0.0.5:7501\""), Some("peer_addr"));
        let c = load("client_addr = \"0.0.0.0:7401\"\ninsecure = true").unwrap();
        assert_eq!(c.exposed_without_tls(), vec!["client_addr"]);
        let c = load(
            "client_addr = \"0.0.0.0:7401\"\ntls_cert = \"c\"\ntls_key = \"k\"\ntls_ca = \"ca\"",
        )
        .unwrap();
        assert!(c.exposed_without_tls().is_empty());
        // A peer secret does not make a non-loopback peer port safe.
        assert_eq!(
            field("peer_addr = \"10.0.0.5:7501\"\npeer_secret_file = \"s\"\ninsecure = true"),
            Some("peer_secret_file")
        );
    }

    #[test]
    fn secret_excludes_peer_tls() {
        let toml = "peer_secret_file = \"s\"\npeer_tls_cert = \"c\"\npeer_tls_key = \"k\"\n\
                    peer_tls_ca = \"ca\"";
        assert_eq!(field(toml), Some("peer_secret_file"));
        let c = load("peer_secret_file = \"s\"").unwrap();
        assert_eq!(c.peer_proof(), PeerProof::Secret);
    }

    #[test]
    fn secret_file_is_read_without_its_final_newline_and_must_be_long_enough() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "{}", "s".repeat(32)).unwrap();
        assert_eq!(read_peer_secret(f.path()).unwrap(), vec![b's'; 32]);
        let mut short = tempfile::NamedTempFile::new().unwrap();
        writeln!(short, "{}", "x".repeat(31)).unwrap();
        let err = read_peer_secret(short.path()).unwrap_err();
        assert_eq!(err.field(), Some("peer_secret_file"));
        assert!(
            !err.to_string().contains("xxxx"),
            "the secret leaked: {err}"
        );
        let missing = read_peer_secret(Path::new("/nonexistent/secret")).unwrap_err();
        assert!(matches!(missing, ConfigError::Read { .. }));
        let message = missing.to_string();
        assert!(
            message.starts_with("peer secret file /nonexistent/secret: cannot read: "),
            "{message}"
        );
        // The cause is in the message once, and no error source repeats it in a chain.
        assert!(std::error::Error::source(&missing).is_none());
    }

    #[test]
    fn a_tls_file_that_cannot_be_opened_is_named_by_its_key() {
        let cert = tempfile::NamedTempFile::new().unwrap();
        let toml = format!(
            "tls_cert = {:?}\ntls_key = \"/nonexistent/node.key\"\ntls_ca = {:?}",
            cert.path(),
            cert.path()
        );
        let config = load(&toml).unwrap();
        let err = check_tls_files_open(&config).unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("tls_key /nonexistent/node.key: cannot read: "),
            "{message}"
        );
        let readable = load(&format!(
            "tls_cert = {:?}\ntls_key = {:?}\ntls_ca = {:?}",
            cert.path(),
            cert.path(),
            cert.path()
        ))
        .unwrap();
        check_tls_files_open(&readable).unwrap();
    }

    #[test]
    fn overrides_beat_the_file() {
        let ov = Overrides {
            id: Some(1),
            client_addr: Some("0.0.0.0:7401".into()),
            insecure: true,
            ..Overrides::default()
        };
        let c = NodeConfig::from_toml_str("", &ov).unwrap();
        assert!(c.insecure);
        let ov = Overrides {
            id: Some(1),
            tls_cert: Some("flag.pem".into()),
            tls_key: Some("flag.key".into()),
            ..Overrides::default()
        };
        let c = NodeConfig::from_toml_str(
            "tls_cert = \"file.pem\"\ntls_key = \"file.key\"\ntls_ca = \"ca\"",
            &ov,
        )
        .unwrap();
        assert_eq!(c.tls_cert.as_deref(), Some(Path::new("flag.pem")));
        assert_eq!(c.tls_ca.as_deref(), Some(Path::new("ca")));
    }

    #[test]
    fn transport_keys_round_trip_through_toml() {
        let c = load(
            "tls_cert = \"c\"\ntls_key = \"k\"\ntls_client_ca = \"cca\"\n\
             peer_secret_file = \"s\"\ninsecure = true",
        )
        .unwrap();
        let back =
            NodeConfig::from_toml_str(&c.to_toml_string().unwrap(), &Overrides::default()).unwrap();
        assert_eq!(back, c);
    }
}
