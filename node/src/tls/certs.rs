//! A local cluster CA and certificates signed by it, for `cairn-node certs`,
//! `scripts/cluster up --tls` and the tests.
//!
//! In `out`: `ca.pem` (the CA certificate every node and client trusts), `ca.key` (its
//! key: keep it offline; `generate` reuses it when it is already there, so nodes can be
//! added to an existing cluster later), `node-<ID>.pem`/`.key` per node and
//! `client.pem`/`.key` (a client certificate, for `tls_client_ca` mode). Keys are written
//! with mode 0600.
//!
//! A node certificate serves both ports and both directions (server and client
//! authentication): its subject alternative names are `node-<ID>` (what peers verify),
//! `localhost`, `127.0.0.1`, and any extra host names or IPs given for it — a node's
//! client port is reached by the IP in its `client_addr` (relays, clients), so a
//! multi-host cluster lists each node's IP.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::configs::node_dns_name;
use super::TlsError;

/// The CA's subject. Fixed, so that a CA loaded back from `ca.key` issues certificates
/// whose issuer matches `ca.pem` (rcgen cannot parse the certificate itself without
/// x509-parser, which the build leaves out).
const CA_COMMON_NAME: &str = "cairn cluster CA";

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct Generated {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    /// Per node id: its certificate and key.
    pub nodes: BTreeMap<u64, (PathBuf, PathBuf)>,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Writes (or reuses) the CA in `out`, then a certificate and key for each of `nodes`
/// (with `extra_names[id]` added to its names) and one client certificate. Creates `out`.
pub fn generate(
    out: &Path,
    nodes: &[u64],
    extra_names: &BTreeMap<u64, Vec<String>>,
) -> Result<Generated, TlsError> {
    fs::create_dir_all(out).map_err(write_error(out))?;
    let ca_cert = out.join("ca.pem");
    let ca_key = out.join("ca.key");
    let issuer = ca(&ca_cert, &ca_key)?;
    let mut written = BTreeMap::new();
    for &id in nodes {
        let mut names = vec![
            node_dns_name(id),
            "localhost".to_string(),
            "127.0.0.1".to_string(),
        ];
        names.extend(extra_names.get(&id).into_iter().flatten().cloned());
        let files = (
            out.join(format!("node-{id}.pem")),
            out.join(format!("node-{id}.key")),
        );
        leaf(&issuer, names, &node_dns_name(id), &files.0, &files.1)?;
        written.insert(id, files);
    }
    let client_cert = out.join("client.pem");
    let client_key = out.join("client.key");
    leaf(
        &issuer,
        vec!["cairn-client".to_string()],
        "cairn client",
        &client_cert,
        &client_key,
    )?;
    Ok(Generated {
        ca_cert,
        ca_key,
        nodes: written,
        client_cert,
        client_key,
    })
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    params.distinguished_name = dn;
    params
}

/// The CA from `key_path` if it exists (with `cert_path` beside it), else a new one.
fn ca(cert_path: &Path, key_path: &Path) -> Result<Issuer<'static, KeyPair>, TlsError> {
    if key_path.exists() && cert_path.exists() {
        let pem = fs::read_to_string(key_path).map_err(|source| TlsError::Read {
            path: key_path.to_path_buf(),
            source,
        })?;
        return Ok(Issuer::new(ca_params(), KeyPair::from_pem(&pem)?));
    }
    let key = KeyPair::generate()?;
    let cert = ca_params().self_signed(&key)?;
    write_file(cert_path, cert.pem().as_bytes(), 0o644)?;
    write_file(key_path, key.serialize_pem().as_bytes(), 0o600)?;
    Ok(Issuer::new(ca_params(), key))
}

/// A certificate for `names`, for both server and client authentication.
fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    names: Vec<String>,
    common_name: &str,
    cert_path: &Path,
    key_path: &Path,
) -> Result<(), TlsError> {
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    write_file(cert_path, cert.pem().as_bytes(), 0o644)?;
    write_file(key_path, key.serialize_pem().as_bytes(), 0o600)
}

/// Writes `bytes` to `path` with `mode` (a key is never readable by others, not even for
/// an instant: the mode is set at creation, and an existing file is replaced).
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let _ = fs::remove_file(path);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(write_error(path))?;
    file.write_all(bytes).map_err(write_error(path))
}

fn write_error(path: &Path) -> impl Fn(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use rustls_pki_types::ServerName;

    use super::*;
    use crate::tls::pem;

    fn valid_for(cert: &Path, name: &str) -> bool {
        let der = pem::certs(cert).unwrap().remove(0);
        let cert = webpki::EndEntityCert::try_from(&der).unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        cert.verify_is_valid_for_subject_name(&name).is_ok()
    }

    #[test]
    fn node_certificates_carry_their_names_and_keys_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let extra = BTreeMap::from([(2, vec!["10.0.0.2".to_string(), "db2.example".to_string()])]);
        let g = generate(dir.path(), &[1, 2], &extra).unwrap();
        let (cert1, key1) = &g.nodes[&1];
        assert!(valid_for(cert1, "node-1"));
        assert!(valid_for(cert1, "localhost"));
        assert!(valid_for(cert1, "127.0.0.1"));
        assert!(!valid_for(cert1, "node-2"));
        assert!(!valid_for(cert1, "node-11"));
        let (cert2, _) = &g.nodes[&2];
        assert!(valid_for(cert2, "10.0.0.2"));
        assert!(valid_for(cert2, "db2.example"));
        for key in [key1, &g.ca_key, &g.client_key] {
            let mode = fs::metadata(key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", key.display());
        }
        pem::key(key1).unwrap();
        assert_eq!(pem::roots(&g.ca_cert).unwrap().len(), 1);
        // Files swapped (a certificate given as a key, a key as a certificate) are named
        // by what they lack.
        let swapped_key = pem::key(cert1).unwrap_err().to_string();
        assert!(
            swapped_key.ends_with("holds no private key (PKCS#8, PKCS#1 or SEC1)"),
            "{swapped_key}"
        );
        let swapped_cert = pem::certs(key1).unwrap_err().to_string();
        assert!(
            swapped_cert.ends_with("holds no certificate"),
            "{swapped_cert}"
        );
    }

    #[test]
    fn a_second_run_reuses_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let first = generate(dir.path(), &[1], &BTreeMap::new()).unwrap();
        let ca_before = fs::read(&first.ca_cert).unwrap();
        let second = generate(dir.path(), &[4], &BTreeMap::new()).unwrap();
        assert_eq!(fs::read(&second.ca_cert).unwrap(), ca_before);
        // The new node's certificate chains to the unchanged CA.
        let roots = pem::roots(&second.ca_cert).unwrap();
        let anchors = roots.roots.to_vec();
        let der = pem::certs(&second.nodes[&4].0).unwrap().remove(0);
        let cert = webpki::EndEntityCert::try_from(&der).unwrap();
        cert.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &[],
            rustls_pki_types::UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .expect("the node certificate chains to the reused CA");
    }
}
