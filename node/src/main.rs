//! `cairn-node --id N --data-dir DIR --client-addr HOST:PORT --peer-addr HOST:PORT [--config FILE]`
//! `cairn-node certs --out DIR --nodes 1,2,3 [--host ID=NAME]...`

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use cairn_config::{NodeConfig, Overrides};
use cairn_node::node::{RunError, START_WARNINGS};
use clap::Parser;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;

/// A cairn node. Flags override the config file; environment variables override nothing
/// but stand in for missing flags.
#[derive(Debug, Parser)]
#[command(name = "cairn-node", version, about, after_help = EXAMPLES, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// TOML config file (see config/node1.toml).
    #[arg(long, env = "CAIRN_CONFIG")]
    config: Option<PathBuf>,
    /// Node id (1 to 2^53 - 1), unique in the cluster.
    #[arg(long, env = "CAIRN_ID")]
    id: Option<u64>,
    /// Data directory (locked exclusively while the node runs).
    #[arg(long, env = "CAIRN_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Client API address, default 127.0.0.1:(7400+id).
    #[arg(long, env = "CAIRN_CLIENT_ADDR")]
    client_addr: Option<String>,
    /// Peer (Raft) address, default 127.0.0.1:(7500+id).
    #[arg(long, env = "CAIRN_PEER_ADDR")]
    peer_addr: Option<String>,
    /// Client-port certificate chain (PEM); with --tls-key the client port serves HTTPS.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// Private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA on the client port.
    #[arg(long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// CA trusted when relaying to another node's HTTPS client port (default:
    /// --peer-tls-ca, then --tls-client-ca).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Peer-port certificate naming node-<ID> (mutual TLS between nodes).
    #[arg(long, value_name = "FILE")]
    peer_tls_cert: Option<PathBuf>,
    /// Private key of --peer-tls-cert.
    #[arg(long, value_name = "FILE")]
    peer_tls_key: Option<PathBuf>,
    /// The cluster CA: peers must present a certificate it signed.
    #[arg(long, value_name = "FILE")]
    peer_tls_ca: Option<PathBuf>,
    /// File holding a shared peer secret (>= 32 bytes; loopback peers only).
    #[arg(long, value_name = "FILE")]
    peer_secret_file: Option<PathBuf>,
    /// Allow ports beyond loopback without TLS (warned about at every start).
    #[arg(long)]
    insecure: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Writes a local CA (ca.pem, ca.key; reused if present) and, per node, node-<ID>.pem
    /// and node-<ID>.key (names: node-<ID>, localhost, 127.0.0.1, and --host ones), plus
    /// client.pem/client.key. Keys are written 0600.
    Certs {
        /// Output directory (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Node ids, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        nodes: Vec<u64>,
        /// An extra DNS name or IP for a node's certificate, e.g. --host 2=10.0.0.2
        /// (repeatable): the address its client port is reached by.
        #[arg(long = "host", value_name = "ID=NAME")]
        hosts: Vec<String>,
    },
}

const EXAMPLES: &str = "Examples:
  cairn-node --id 1 --data-dir /var/lib/cairn/1 --client-addr 127.0.0.1:7401 --peer-addr 127.0.0.1:7501
  cairn-node --config config/node1.toml
  cairn-node certs --out certs --nodes 1,2,3 --host 1=10.0.0.1
  cairn-node --id 1 --client-addr 10.0.0.1:7401 --peer-addr 10.0.0.1:7501 \\
    --tls-cert certs/node-1.pem --tls-key certs/node-1.key \\
    --peer-tls-cert certs/node-1.pem --peer-tls-key certs/node-1.key --peer-tls-ca certs/ca.pem
Then initialize the cluster once:
  curl -X POST 127.0.0.1:7401/cluster/init -H 'content-type: application/json' \\
    -d '{\"nodes\":[{\"id\":1,\"client_addr\":\"127.0.0.1:7401\",\"peer_addr\":\"127.0.0.1:7501\"}]}'";

/// mimalloc instead of glibc malloc: a write-heavy node spent ~20% of its CPU in glibc's
/// `malloc`/`free` (profiled under 64 concurrent writers), mostly small short-lived
/// buffers of HTTP, JSON and RocksDB batches, which mimalloc's per-thread pages serve
/// far more cheaply.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(missing) = missing_cpu_features() {
        eprintln!(
            "cairn-node: this build needs the CPU features {missing}, which this CPU lacks \
             (.cargo/config.toml enables them for RocksDB's hardware CRC32C); rebuild \
             without that file's rustflags to run here"
        );
        return ExitCode::FAILURE;
    }
    if let Some(Command::Certs { out, nodes, hosts }) = args.command {
        return certs(&out, &nodes, &hosts);
    }
    let overrides = Overrides {
        id: args.id,
        data_dir: args.data_dir,
        client_addr: args.client_addr,
        peer_addr: args.peer_addr,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        tls_client_ca: args.tls_client_ca,
        tls_ca: args.tls_ca,
        peer_tls_cert: args.peer_tls_cert,
        peer_tls_key: args.peer_tls_key,
        peer_tls_ca: args.peer_tls_ca,
        peer_secret_file: args.peer_secret_file,
        insecure: args.insecure,
    };
    let config = match NodeConfig::load(args.config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cairn-node: config: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = init_logging(&config.log_level) {
        eprintln!("cairn-node: config: {e}");
        return ExitCode::from(2);
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if config.worker_threads > 0 {
        builder.worker_threads(config.worker_threads as usize);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cairn-node: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cairn_node::node::run(config, stop_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(RunError::Config(e)) => {
            // A certificate, key or secret that does not load is a config error too.
            eprintln!("cairn-node: config: {}", said_once(&e));
            ExitCode::from(2)
        }
        Err(RunError::Failed(e)) => {
            eprintln!("cairn-node: {}", said_once(&e));
            ExitCode::FAILURE
        }
    }
}

/// `error` and its causes on one line, each said once: a message that already quotes its
/// cause (`cannot read: No such file or directory (os error 2)`) is not followed by the
/// cause again, as anyhow's `{:#}` would.
fn said_once(error: &anyhow::Error) -> String {
    let mut line = error.to_string();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

/// The target features this binary was compiled with (`.cargo/config.toml`) that the CPU
/// running it does not have, if any. Without this check such a CPU dies of an illegal
/// instruction somewhere inside RocksDB, with no word of why.
fn missing_cpu_features() -> Option<String> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut missing = Vec::new();
        if cfg!(target_feature = "sse4.2") && !std::arch::is_x86_feature_detected!("sse4.2") {
            missing.push("sse4.2");
        }
        if cfg!(target_feature = "pclmulqdq") && !std::arch::is_x86_feature_detected!("pclmulqdq") {
            missing.push("pclmulqdq");
        }
        (!missing.is_empty()).then(|| missing.join(", "))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// `cairn-node certs`: exit code 2 for bad arguments, 1 when writing fails.
fn certs(out: &std::path::Path, nodes: &[u64], hosts: &[String]) -> ExitCode {
    let max = cairn_config::NODE_ID_MAX;
    if let Some(id) = nodes.iter().find(|id| !(1..=max).contains(*id)) {
        eprintln!("cairn-node certs: --nodes: node ids are 1 to {max} (2^53 - 1), not {id}");
        return ExitCode::from(2);
    }
    let mut extra: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for host in hosts {
        let parsed = host
            .split_once('=')
            .and_then(|(id, name)| Some((id.parse::<u64>().ok()?, name)));
        match parsed {
            Some((id, name)) if nodes.contains(&id) && !name.is_empty() => {
                extra.entry(id).or_default().push(name.to_string())
            }
            _ => {
                eprintln!("cairn-node certs: --host {host:?}: expected ID=NAME for one of --nodes");
                return ExitCode::from(2);
            }
        }
    }
    match cairn_node::tls::certs::generate(out, nodes, &extra) {
        Ok(written) => {
            println!("CA:     {}", written.ca_cert.display());
            for (id, (cert, key)) in &written.nodes {
                println!("node {id}: {} {}", cert.display(), key.display());
            }
            println!(
                "client: {} {}",
                written.client_cert.display(),
                written.client_key.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cairn-node certs: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr at the config's `log_level`, or at `RUST_LOG` when that is set. Either
/// one that is not a tracing filter is a config error: a node that silently logged at
/// some other level than asked would hide what the operator wanted to see. Whatever the
/// filter, the start-up warnings of SPEC §8 are logged ([`START_WARNINGS`]).
fn init_logging(log_level: &str) -> Result<(), String> {
    let configured = log_filter("log_level", log_level, "info")?
        .add_directive("openraft=warn".parse().expect("a target and a level"));
    let filter = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(directives) => log_filter("RUST_LOG", &directives, "debug,openraft=info")?,
        Err(_) => configured,
    };
    let start_warnings = format!("{START_WARNINGS}=warn")
        .parse()
        .expect("a target and a level");
    let filter = filter.add_directive(start_warnings);
    // Colour only for a terminal: a log file or a collector gets plain text to grep.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    Ok(())
}

/// `directives` as a log filter, or why they are not one. A directive that names a target
/// without a level (`warning`, `inf`) is refused although `EnvFilter` takes it, as "every
/// line of that target": a misspelt level would silently turn every other line off.
fn log_filter(what: &str, directives: &str, example: &str) -> Result<EnvFilter, String> {
    let refused = |problem: String| {
        format!(
            "{what}: must be a tracing filter like \"{example}\" (got {directives:?}: {problem})"
        )
    };
    if let Some(bare) = directives
        .split(',')
        .map(str::trim)
        .find(|d| !d.is_empty() && !d.contains(['=', '[']) && d.parse::<LevelFilter>().is_err())
    {
        return Err(refused(format!(
            "{bare:?} is no level (off, error, warn, info, debug, trace); a target takes one \
             as TARGET=LEVEL"
        )));
    }
    EnvFilter::builder()
        .parse(directives)
        .map_err(|e| refused(e.to_string()))
}

/// Resolves on SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
    }
}
