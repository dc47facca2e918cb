//! Certificates of a TLS cluster, from the node binary itself (`cairn-node certs`: one
//! CA, a certificate and key per node naming `node-<id>`), and the node flags that use
//! them: HTTPS on the client port (with the CA to relay to another node's) and mutual TLS
//! on the peer port. Shared by the secure chaos run and the `cairn-secure` benchmark
//! system, so both test the same setup.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The paths of one node's certificate (valid for server and client authentication), its
/// key, and the cluster CA.
pub struct NodeFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A generated CA and node certificates in one directory.
pub struct ClusterCerts {
    dir: PathBuf,
    ca_pem: Vec<u8>,
}

impl ClusterCerts {
    /// Runs `node_bin certs` into `dir` for nodes `ids`; `host_of(id)` names an extra host
    /// (an address) a node's certificate must also be valid for.
    pub fn generate(
        node_bin: &Path,
        dir: &Path,
        ids: impl IntoIterator<Item = u64>,
        host_of: impl Fn(u64) -> Option<String>,
    ) -> Result<ClusterCerts> {
        let ids: Vec<u64> = ids.into_iter().collect();
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        let mut cmd = Command::new(node_bin);
        cmd.arg("certs")
            .arg("--out")
            .arg(dir)
            .arg("--nodes")
            .arg(list.join(","));
        for id in ids {
            if let Some(host) = host_of(id) {
                cmd.arg("--host").arg(format!("{id}={host}"));
            }
        }
        let out = cmd
            .output()
            .with_context(|| format!("running {} certs", node_bin.display()))?;
        if !out.status.success() {
            bail!(
                "{} certs failed ({}): {}",
                node_bin.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let ca = dir.join("ca.pem");
        let ca_pem = std::fs::read(&ca).with_context(|| format!("reading {}", ca.display()))?;
        Ok(ClusterCerts {
            dir: dir.to_path_buf(),
            ca_pem,
        })
    }

    /// The CA certificate (PEM) clients trust.
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca_pem
    }

    /// Node `id`'s certificate and key, and the CA that signed it (files in the directory).
    pub fn node_files(&self, id: u64) -> NodeFiles {
        NodeFiles {
            cert: self.dir.join(format!("node-{id}.pem")),
            key: self.dir.join(format!("node-{id}.key")),
            ca: self.dir.join("ca.pem"),
        }
    }

    /// The flags of node `id`: HTTPS on its client port, the CA for its relays, and
    /// mutual TLS on its peer port, all with the node's one certificate.
    pub fn node_args(&self, id: u64) -> Vec<OsString> {
        let NodeFiles { cert, key, ca } = self.node_files(id);
        [
            ("--tls-cert", &cert),
            ("--tls-key", &key),
            ("--tls-ca", &ca),
            ("--peer-tls-cert", &cert),
            ("--peer-tls-key", &key),
            ("--peer-tls-ca", &ca),
        ]
        .into_iter()
        .flat_map(|(flag, path)| [OsString::from(flag), path.clone().into_os_string()])
        .collect()
    }
}
