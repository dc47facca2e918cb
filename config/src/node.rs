//! [`NodeConfig`]: the top-level fields, the sections, and loading a file with overrides.

use std::fs;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{check_at_most, check_less, check_positive, ConfigError};
use crate::{BatchingConfig, Limits, RaftConfig, ReadsConfig};

/// The host of the default addresses below (SPEC §6).
pub const DEFAULT_HOST: &str = "127.0.0.1";
/// The largest node id: 2^53 - 1, the largest integer every JSON reader (JavaScript,
/// jq) holds exactly, so an id in `/cluster/status` reads back as the id it is.
pub const NODE_ID_MAX: u64 = (1 << 53) - 1;
/// Node `i` serves clients on `127.0.0.1:(CLIENT_PORT_BASE + i)` by default (SPEC §6).
pub const CLIENT_PORT_BASE: u16 = 7400;
/// Node `i` talks to its peers on `127.0.0.1:(PEER_PORT_BASE + i)` by default (SPEC §6).
pub const PEER_PORT_BASE: u16 = 7500;
/// How long a `request_id` is remembered for exactly-once retries: 24 h.
pub const DEDUP_RETENTION_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;
pub const LOG_LEVEL_DEFAULT: &str = "info";
/// 0: one async worker thread per CPU core.
pub const WORKER_THREADS_DEFAULT: u64 = 0;
/// More workers than this is a typo, not a machine.
pub const WORKER_THREADS_MAX: u64 = 1024;
/// Memory for the encoded slots kept in front of RocksDB (see `slot_cache_mib`).
pub const SLOT_CACHE_MIB_DEFAULT: u64 = 64;
/// 1 TiB: more is a typo.
pub const SLOT_CACHE_MIB_MAX: u64 = 1 << 20;
/// Slot records at least this big live in RocksDB blob files (see `blob_min_bytes`): a
/// 4 KiB document and up.
pub const BLOB_MIN_BYTES_DEFAULT: u64 = 4096;
/// 1 GiB: more is a typo (no record is that big).
pub const BLOB_MIN_BYTES_MAX: u64 = 1 << 30;

/// Everything one `cairn-node` process needs. Build it with [`NodeConfig::load`] (or
/// [`NodeConfig::local`]), which fills defaults and validates; a `NodeConfig` obtained that
/// way always satisfies [`NodeConfig::validate`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeConfig {
    /// Raft node id, >= 1, unique in the cluster.
    pub id: u64,
    /// RocksDB directory (state machine, Raft log, snapshots). Default `./data/node-{id}`.
    pub data_dir: PathBuf,
    /// `HOST:PORT` of the client HTTP API. Default `127.0.0.1:(7400+id)`.
    pub client_addr: String,
    /// `HOST:PORT` of the peer (Raft RPC) listener. Default `127.0.0.1:(7500+id)`.
    pub peer_addr: String,
    /// How long a `request_id` is remembered so a retried mutation is not applied twice.
    pub dedup_retention_ms: u64,
    /// `tracing` filter directive, e.g. `info` or `info,openraft=warn`.
    pub log_level: String,
    /// Async worker threads; 0 = one per CPU core. Several nodes sharing a few cores
    /// spend less CPU per write with 1 each (fewer cross-thread wake-ups), but the
    /// leader's one thread then caps throughput (lower at 64 writers; docs/design.md, Performance notes).
    pub worker_threads: u64,
    /// MiB of encoded slots kept in memory in front of RocksDB (0 disables the cache).
    /// Every mutation reads its key's slot on every replica; a cached one skips the RocksDB
    /// lookup. It holds what was written or read by mutations most recently (about 600
    /// bytes per key with a 256-byte value), and counts toward the node's RSS.
    pub slot_cache_mib: u64,
    /// Slot records (a key's current record, value included) of at least this many bytes
    /// keep their bytes in RocksDB blob files, written once at flush, instead of being
    /// rewritten by every compaction of the LSM tree; 0 keeps everything inline. Large
    /// values are where this pays (docs/design.md#storage).
    pub blob_min_bytes: u64,
    /// Client-port certificate chain (PEM); with `tls_key`, the client port serves HTTPS.
    pub tls_cert: Option<PathBuf>,
    /// Private key of `tls_cert` (PEM).
    pub tls_key: Option<PathBuf>,
    /// With it, the client port requires client certificates signed by this CA (PEM).
    pub tls_client_ca: Option<PathBuf>,
    /// The CA a node trusts when it relays to another node's HTTPS client port; defaults
    /// to `peer_tls_ca`, then `tls_client_ca` (see `NodeConfig::client_port_ca`).
    pub tls_ca: Option<PathBuf>,
    /// Peer-port certificate (PEM) with the DNS name `node-<id>`; mutual TLS with the three
    /// `peer_tls_*` keys.
    pub peer_tls_cert: Option<PathBuf>,
    pub peer_tls_key: Option<PathBuf>,
    /// The cluster CA: peers must present a certificate it signed.
    pub peer_tls_ca: Option<PathBuf>,
    /// A file holding a shared peer secret of at least 32 bytes (loopback peers only).
    pub peer_secret_file: Option<PathBuf>,
    /// Lets a port listen beyond loopback without TLS (warned about at every start).
    pub insecure: bool,
    pub raft: RaftConfig,
    pub batching: BatchingConfig,
    pub reads: ReadsConfig,
    pub limits: Limits,
}

/// Values given on the command line or in the environment; each one that is `Some` beats
/// the file. The node binary fills this from its clap flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub id: Option<u64>,
    pub data_dir: Option<PathBuf>,
    pub client_addr: Option<String>,
    pub peer_addr: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub peer_tls_cert: Option<PathBuf>,
    pub peer_tls_key: Option<PathBuf>,
    pub peer_tls_ca: Option<PathBuf>,
    pub peer_secret_file: Option<PathBuf>,
    /// `--insecure`: `true` beats the file; `false` leaves the file's value.
    pub insecure: bool,
}

/// The file as written: every field optional, sections default per field.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeFile {
    id: Option<u64>,
    data_dir: Option<PathBuf>,
    client_addr: Option<String>,
    peer_addr: Option<String>,
    dedup_retention_ms: Option<u64>,
    log_level: Option<String>,
    worker_threads: Option<u64>,
    slot_cache_mib: Option<u64>,
    blob_min_bytes: Option<u64>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    peer_tls_cert: Option<PathBuf>,
    peer_tls_key: Option<PathBuf>,
    peer_tls_ca: Option<PathBuf>,
    peer_secret_file: Option<PathBuf>,
    insecure: Option<bool>,
    #[serde(default)]
    raft: RaftConfig,
    #[serde(default)]
    batching: BatchingConfig,
    #[serde(default)]
    reads: ReadsConfig,
    #[serde(default)]
    limits: Limits,
}

impl NodeConfig {
    /// Reads the TOML `file` if given, applies `ov`, fills the rest with defaults derived
    /// from the id, and validates.
    ///
    /// Precedence, per field: override > file > default. The id must come from the file
    /// or the override ([`ConfigError::MissingId`] otherwise); defaults for `data_dir`,
    /// `client_addr` and `peer_addr` are derived from the final id.
    pub fn load(file: Option<&Path>, ov: &Overrides) -> Result<NodeConfig, ConfigError> {
        let parsed = match file {
            None => NodeFile::default(),
            Some(path) => {
                let text = fs::read_to_string(path).map_err(|cause| ConfigError::Read {
                    what: "config file",
                    path: path.to_path_buf(),
                    cause,
                })?;
                parse(&text, &path.display().to_string())?
            }
        };
        assemble(parsed, ov)
    }

    /// Like [`NodeConfig::load`] for TOML text that is not in a file (errors say `<string>`).
    pub fn from_toml_str(text: &str, ov: &Overrides) -> Result<NodeConfig, ConfigError> {
        assemble(parse(text, "<string>")?, ov)
    }

    /// All defaults for node `id`: `./data/node-{id}`, 127.0.0.1:(7400+id), 127.0.0.1:(7500+id).
    pub fn local(id: u64) -> Result<NodeConfig, ConfigError> {
        let ov = Overrides {
            id: Some(id),
            ..Overrides::default()
        };
        NodeConfig::load(None, &ov)
    }

    /// Checks every section, then the top-level fields and the bounds that tie sections:
    /// - `1 <= id <= NODE_ID_MAX`; `data_dir` not empty; `log_level` not empty, without whitespace;
    /// - `client_addr` and `peer_addr` are `HOST:PORT` whose host resolves, and differ
    ///   (a port from 1 to 65535: a member's address is where peers and clients reach
    ///   it, and port 0 would bind another port at every start);
    /// - `dedup_retention_ms > 0`; `worker_threads <= WORKER_THREADS_MAX`;
    ///   `slot_cache_mib <= SLOT_CACHE_MIB_MAX`; `blob_min_bytes <= BLOB_MIN_BYTES_MAX`;
    /// - `batching.ops_max >= limits.batch_ops_max` (a client batch is one Raft entry);
    /// - `batching.bytes_max >= limits.value_bytes_max` (the largest write fits in one);
    /// - the transport keys (see `validate_transport` in `transport.rs`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=NODE_ID_MAX).contains(&self.id) {
            return Err(ConfigError::invalid(
                "id",
                format!(
                    "must be from 1 to {NODE_ID_MAX} (2^53 - 1; got {})",
                    self.id
                ),
            ));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::invalid("data_dir", "must not be empty"));
        }
        let client = parse_addr("client_addr", &self.client_addr)?;
        let peer = parse_addr("peer_addr", &self.peer_addr)?;
        if client == peer {
            return Err(ConfigError::invalid(
                "peer_addr",
                format!("must differ from client_addr (both {client})"),
            ));
        }
        check_positive("dedup_retention_ms", self.dedup_retention_ms)?;
        check_at_most("worker_threads", self.worker_threads, WORKER_THREADS_MAX)?;
        check_at_most("slot_cache_mib", self.slot_cache_mib, SLOT_CACHE_MIB_MAX)?;
        check_at_most("blob_min_bytes", self.blob_min_bytes, BLOB_MIN_BYTES_MAX)?;
        if self.log_level.trim().is_empty() || self.log_level.contains(char::is_whitespace) {
            return Err(ConfigError::invalid(
                "log_level",
                format!(
                    "must be a tracing filter like \"info\" or \"info,openraft=warn\" (got {:?})",
                    self.log_level
                ),
            ));
        }
        self.raft.validate()?;
        self.batching.validate()?;
        self.reads.validate()?;
        self.limits.validate()?;
        self.validate_cross_section()?;
        self.validate_transport()
    }

    fn validate_cross_section(&self) -> Result<(), ConfigError> {
        let batch_ops_max = self.limits.batch_ops_max as u64;
        if self.batching.ops_max < batch_ops_max {
            return Err(ConfigError::invalid(
                "batching.ops_max",
                format!(
                    "must be >= limits.batch_ops_max ({batch_ops_max}), a client batch is one \
                     Raft entry (got {})",
                    self.batching.ops_max
                ),
            ));
        }
        check_less(
            "raft.election_timeout_max_ms",
            self.raft.election_timeout_max_ms,
            "batching.commit_timeout_ms",
            self.batching.commit_timeout_ms,
        )?;
        let value_bytes_max = self.limits.value_bytes_max as u64;
        if self.batching.bytes_max < value_bytes_max {
            return Err(ConfigError::invalid(
                "batching.bytes_max",
                format!(
                    "must be >= limits.value_bytes_max ({value_bytes_max}) so the largest \
                     write fits in one Raft entry (got {})",
                    self.batching.bytes_max
                ),
            ));
        }
        Ok(())
    }

    /// `client_addr` as a socket address (cannot fail on a validated config).
    pub fn client_socket_addr(&self) -> Result<SocketAddr, ConfigError> {
        parse_addr("client_addr", &self.client_addr)
    }

    /// `peer_addr` as a socket address (cannot fail on a validated config).
    pub fn peer_socket_addr(&self) -> Result<SocketAddr, ConfigError> {
        parse_addr("peer_addr", &self.peer_addr)
    }

    /// The effective configuration as TOML; loading it back yields the same config.
    pub fn to_toml_string(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }
}

fn parse(text: &str, origin: &str) -> Result<NodeFile, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse {
        origin: origin.to_string(),
        message: e.to_string().trim_end().to_string(),
    })
}

fn assemble(file: NodeFile, ov: &Overrides) -> Result<NodeConfig, ConfigError> {
    let id = ov.id.or(file.id).ok_or(ConfigError::MissingId)?;
    // Before the defaults, which derive ports and paths from it.
    check_id(id)?;
    let data_dir = ov
        .data_dir
        .clone()
        .or(file.data_dir)
        .unwrap_or_else(|| default_data_dir(id));
    let client_addr = match ov.client_addr.clone().or(file.client_addr) {
        Some(addr) => addr,
        None => default_addr("client_addr", CLIENT_PORT_BASE, id)?,
    };
    let peer_addr = match ov.peer_addr.clone().or(file.peer_addr) {
        Some(addr) => addr,
        None => default_addr("peer_addr", PEER_PORT_BASE, id)?,
    };
    let config = NodeConfig {
        id,
        data_dir,
        client_addr,
        peer_addr,
        dedup_retention_ms: file
            .dedup_retention_ms
            .unwrap_or(DEDUP_RETENTION_MS_DEFAULT),
        log_level: file
            .log_level
            .unwrap_or_else(|| LOG_LEVEL_DEFAULT.to_string()),
        worker_threads: file.worker_threads.unwrap_or(WORKER_THREADS_DEFAULT),
        slot_cache_mib: file.slot_cache_mib.unwrap_or(SLOT_CACHE_MIB_DEFAULT),
        blob_min_bytes: file.blob_min_bytes.unwrap_or(BLOB_MIN_BYTES_DEFAULT),
        tls_cert: ov.tls_cert.clone().or(file.tls_cert),
        tls_key: ov.tls_key.clone().or(file.tls_key),
        tls_client_ca: ov.tls_client_ca.clone().or(file.tls_client_ca),
        tls_ca: ov.tls_ca.clone().or(file.tls_ca),
        peer_tls_cert: ov.peer_tls_cert.clone().or(file.peer_tls_cert),
        peer_tls_key: ov.peer_tls_key.clone().or(file.peer_tls_key),
        peer_tls_ca: ov.peer_tls_ca.clone().or(file.peer_tls_ca),
        peer_secret_file: ov.peer_secret_file.clone().or(file.peer_secret_file),
        insecure: ov.insecure || file.insecure.unwrap_or(false),
        raft: file.raft,
        batching: file.batching,
        reads: file.reads,
        limits: file.limits,
    };
    config.validate()?;
    Ok(config)
}

/// `./data/node-{id}`, relative to the node's working directory.
pub fn default_data_dir(id: u64) -> PathBuf {
    PathBuf::from(format!("./data/node-{id}"))
}

/// `127.0.0.1:(base + id)`, or an error naming `field` when that port does not exist.
fn check_id(id: u64) -> Result<(), ConfigError> {
    if (1..=NODE_ID_MAX).contains(&id) {
        return Ok(());
    }
    Err(ConfigError::invalid(
        "id",
        format!("must be from 1 to {NODE_ID_MAX} (2^53 - 1; got {id})"),
    ))
}

fn default_addr(field: &'static str, base: u16, id: u64) -> Result<String, ConfigError> {
    let port = u64::from(base) + id;
    if port > u64::from(u16::MAX) {
        return Err(ConfigError::invalid(
            field,
            format!("no default for id {id} (port {base}+{id} > 65535); set it explicitly"),
        ));
    }
    Ok(format!("{DEFAULT_HOST}:{port}"))
}

/// Whether `addr` has the form of a node address (SPEC §6 `HOST:PORT`): `IP:PORT`
/// (`[::1]:PORT`), or a DNS name and a port, the port from 1 to 65535. The form only: a
/// name is resolved where it is used ([`socket_addrs`]).
pub fn is_host_port(addr: &str) -> bool {
    ip_and_port(addr).is_some() || name_and_port(addr).is_some()
}

/// The host of a node address ([`is_host_port`]'s forms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host<'a> {
    Ip(std::net::IpAddr),
    Name(&'a str),
}

/// The host of `addr` (`IP:PORT`, `[IPv6]:PORT` or `NAME:PORT`); `None` when malformed.
pub fn host_of(addr: &str) -> Option<Host<'_>> {
    ip_and_port(addr)
        .map(|a| Host::Ip(a.ip()))
        .or_else(|| name_and_port(addr).map(|(name, _)| Host::Name(name)))
}

/// An IP address and a port other than 0.
fn ip_and_port(addr: &str) -> Option<SocketAddr> {
    addr.parse::<SocketAddr>().ok().filter(|a| a.port() != 0)
}

/// A DNS name (letters, digits, `-`, `.`) and a port other than 0.
fn name_and_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    let port = port.parse().ok().filter(|&port| port != 0)?;
    (!host.is_empty() && host.chars().all(name_char)).then_some((host, port))
}

/// The first address [`socket_addrs`] gives: the one a listener binds.
fn parse_addr(field: &'static str, addr: &str) -> Result<SocketAddr, ConfigError> {
    Ok(socket_addrs(field, addr)?[0])
}

/// The socket addresses `addr` names: `IP:PORT` (`[::1]:PORT` for IPv6) as it is,
/// `HOST:PORT` through the system resolver (`/etc/hosts`, DNS) in its order, which is the
/// order binding a port and peers' connections use. Never empty.
/// The socket addresses `addr` (`HOST:PORT`) names, looked up (blocking) when HOST is a
/// name; `None` when it is malformed or does not resolve.
pub fn resolve(addr: &str) -> Option<Vec<SocketAddr>> {
    socket_addrs("addr", addr).ok()
}

pub(crate) fn socket_addrs(
    field: &'static str,
    addr: &str,
) -> Result<Vec<SocketAddr>, ConfigError> {
    if let Some(ip_port) = ip_and_port(addr) {
        return Ok(vec![ip_port]);
    }
    let malformed = || {
        ConfigError::invalid(
            field,
            format!(
                "must be HOST:PORT with a port from 1 to 65535, e.g. 127.0.0.1:7401 or \
                 localhost:7401 (got {addr:?})"
            ),
        )
    };
    let (host, port) = name_and_port(addr).ok_or_else(malformed)?;
    let resolved: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| ConfigError::invalid(field, format!("host {host:?} does not resolve: {e}")))?
        .collect();
    if resolved.is_empty() {
        return Err(ConfigError::invalid(
            field,
            format!("host {host:?} resolves to no address"),
        ));
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_defaults_follow_the_id() {
        let c = NodeConfig::local(3).unwrap();
        assert_eq!(c.client_addr, "127.0.0.1:7403");
        assert_eq!(c.peer_addr, "127.0.0.1:7503");
        assert_eq!(c.data_dir, PathBuf::from("./data/node-3"));
        assert_eq!(c.dedup_retention_ms, 86_400_000);
        assert_eq!(c.log_level, "info");
        assert_eq!(c.worker_threads, 0, "one per core");
    }

    #[test]
    fn worker_threads_is_read_and_bounded() {
        let ov = Overrides {
            id: Some(1),
            ..Overrides::default()
        };
        let c = NodeConfig::from_toml_str("worker_threads = 1", &ov).unwrap();
        assert_eq!(c.worker_threads, 1);
        let err = NodeConfig::from_toml_str("worker_threads = 5000", &ov).unwrap_err();
        assert_eq!(err.field(), Some("worker_threads"));
    }

    #[test]
    fn default_port_overflow_names_the_field() {
        let err = NodeConfig::local(60_000).unwrap_err();
        assert_eq!(err.field(), Some("client_addr"));
    }

    #[test]
    fn toml_round_trip() {
        let c = NodeConfig::local(2).unwrap();
        let text = c.to_toml_string().unwrap();
        let back = NodeConfig::from_toml_str(&text, &Overrides::default()).unwrap();
        assert_eq!(back, c);
    }
}
