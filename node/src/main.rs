//! `cairn-node --id N --data-dir DIR --client-addr HOST:PORT --peer-addr HOST:PORT [--config FILE]`

use std::path::PathBuf;
use std::process::ExitCode;

use cairn_config::{NodeConfig, Overrides};
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// A cairn node. Flags override the config file; environment variables override nothing
/// but stand in for missing flags.
#[derive(Debug, Parser)]
#[command(name = "cairn-node", version, about, after_help = EXAMPLES)]
struct Args {
    /// TOML config file (see config/node1.toml).
    #[arg(long, env = "CAIRN_CONFIG")]
    config: Option<PathBuf>,
    /// Node id (>= 1), unique in the cluster.
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
}

const EXAMPLES: &str = "Examples:
  cairn-node --id 1 --data-dir /var/lib/cairn/1 --client-addr 127.0.0.1:7401 --peer-addr 127.0.0.1:7501
  cairn-node --config config/node1.toml
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
    let overrides = Overrides {
        id: args.id,
        data_dir: args.data_dir,
        client_addr: args.client_addr,
        peer_addr: args.peer_addr,
    };
    let config = match NodeConfig::load(args.config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cairn-node: config: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config.log_level);
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
        Err(e) => {
            eprintln!("cairn-node: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(default_level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default_level},openraft=warn")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
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
