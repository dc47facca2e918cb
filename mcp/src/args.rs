//! The command line (clap derive) and the help printed after `--help`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use clap::Parser;

/// Where the streamable HTTP endpoint is mounted.
pub const MCP_PATH: &str = "/mcp";

const AFTER_HELP: &str = "\
Modes:
  stdio (default)   the MCP client starts cairn-mcp and talks over stdin/stdout; every
                    call acts with one token (see Token below). Logs go to stderr only:
                    stdout is the protocol.
  HTTP (--listen)   streamable HTTP at http://ADDR/mcp; every request acts with its own
                    Authorization: Bearer token (one cluster client per token, never
                    shared between tokens). Without a token the answer is HTTP 401 when
                    the cluster has auth on. CAIRN_TOKEN is not used in this mode.

Identity: tools never take an actor. With auth on, the node records the token's
  principal as the actor of every event and tombstone; with auth off, mutations carry
  --actor.

Token (stdio mode), the first found wins, as for the cairn CLI:
  1. --token-file FILE on the command line
  2. CAIRN_TOKEN, the token itself (there is no --token flag: ps shows command lines)
  3. CAIRN_TOKEN_FILE, a file holding it
  Without one, calls go without a token: on a cluster with auth on, every tool answers
  the unauthenticated error.

Exactly-once: every mutation runs under one request_id (the caller's `request_id`
  argument, else a fresh one), resent unchanged on every retry across leader failover.
  A call whose outcome stays unknown answers outcome_unknown with that id: call again
  with the same request_id to learn what happened.

Examples:
  CAIRN_ENDPOINTS=http://127.0.0.1:7401,http://127.0.0.1:7402 CAIRN_TOKEN=cairn_... cairn-mcp
  cairn-mcp --endpoints 127.0.0.1:7401 --listen 127.0.0.1:7390
  cairn-mcp --endpoints https://10.0.0.1:7401 --cacert certs/ca.pem --token-file agent.token

Docs: docs/mcp.md (tools, identity, delivery of warnings, client configuration).";

/// The client ports of the local 3-node cluster (`scripts/cluster up`), the cairn CLI's
/// and the Python client's default too.
const LOCAL_ENDPOINTS: &str = "http://127.0.0.1:7401,http://127.0.0.1:7402,http://127.0.0.1:7403";

/// `--listen`: `IP:PORT`, or a host name and port, bound at the first address it resolves
/// to (`localhost:7390` is 127.0.0.1:7390 here).
fn listen_address(value: &str) -> Result<SocketAddr, String> {
    value
        .to_socket_addrs()
        .map_err(|e| format!("{value:?} is not HOST:PORT: {e}"))?
        .next()
        .ok_or_else(|| format!("{value:?} resolves to no address"))
}

#[derive(Parser, Debug)]
#[command(
    name = "cairn-mcp",
    version,
    about = "MCP server of a cairn cluster: memory tools for agents over stdio or streamable HTTP",
    after_help = AFTER_HELP
)]
pub struct Args {
    /// Node client endpoints, comma separated (http[s]://host:port or host:port); by
    /// default the local cluster of `scripts/cluster up`, as for the cairn CLI.
    #[arg(
        long,
        env = "CAIRN_ENDPOINTS",
        value_delimiter = ',',
        default_value = LOCAL_ENDPOINTS,
        value_name = "URLS"
    )]
    pub endpoints: Vec<String>,
    /// Serve streamable HTTP on this HOST:PORT (path /mcp) instead of stdio.
    #[arg(long, value_name = "HOST:PORT", value_parser = listen_address)]
    pub listen: Option<SocketAddr>,
    /// Allow --listen beyond loopback. The endpoint speaks plain HTTP, so bearer tokens
    /// cross the network in clear: put a TLS proxy in front of it.
    #[arg(long)]
    pub insecure: bool,
    /// File holding the bearer token (stdio mode); beats CAIRN_TOKEN and CAIRN_TOKEN_FILE.
    /// Not with --listen, where each request brings its own token.
    #[arg(long, value_name = "FILE", conflicts_with = "listen")]
    pub token_file: Option<PathBuf>,
    /// CA certificate (PEM) of an HTTPS cluster; endpoints without a scheme are then https.
    #[arg(long, env = "CAIRN_CACERT", value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Client certificate (PEM) for nodes that require one (mutual TLS); needs --key.
    #[arg(long, env = "CAIRN_CERT", value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, env = "CAIRN_KEY", value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Actor of mutations on a cluster with auth off (with auth on, the principal is);
    /// 1-128 bytes, an empty one is refused.
    #[arg(long, env = "CAIRN_ACTOR", default_value = "cairn-mcp", value_parser = parse_actor)]
    pub actor: String,
    /// Deadline of one request attempt to a node, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Retries of a failed cluster call (unreachable node, no leader, ...); the client's
    /// default spans a leader failover, so a call outlives one instead of failing in it.
    #[arg(long, default_value_t = cairn_client::client::RETRIES_MAX_DEFAULT)]
    pub retries: u32,
    /// Bound on one tool call's cluster call, its retries included, in milliseconds. MCP
    /// hosts give up on a tool call after their own timeout (60 s in the official
    /// TypeScript SDK); a mutation still unsettled then answers `outcome_unknown` with its
    /// request_id while the host still listens.
    #[arg(long, default_value_t = CALL_TIMEOUT_MS_DEFAULT, value_parser = clap::value_parser!(u64).range(1..))]
    pub call_timeout_ms: u64,
}

/// Half the official TypeScript SDK's request timeout: room for a leader failover (the
/// client's retries span 3.6-7.2 s of backoff) and for several 5 s apply waits.
pub const CALL_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// `--actor`: an empty one would make every mutation fail later (the node refuses an empty
/// actor), so it is a configuration error at start (exit code 2).
fn parse_actor(raw: &str) -> Result<String, String> {
    match raw.is_empty() {
        true => Err("must not be empty (1 to 128 bytes)".into()),
        false => Ok(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_default_to_the_local_cluster_and_listen_takes_host_names() {
        let args = Args::try_parse_from(["cairn-mcp", "--listen", "localhost:7390"]).unwrap();
        assert_eq!(
            args.endpoints,
            [
                "http://127.0.0.1:7401",
                "http://127.0.0.1:7402",
                "http://127.0.0.1:7403"
            ]
        );
        let listen = args.listen.expect("--listen");
        assert!(
            listen.ip().is_loopback() && listen.port() == 7390,
            "{listen}"
        );
        let bad = Args::try_parse_from(["cairn-mcp", "--listen", "7390"]).unwrap_err();
        assert!(bad.to_string().contains("HOST:PORT"), "{bad}");
    }

    #[test]
    fn a_token_file_is_refused_with_listen() {
        let both = [
            "cairn-mcp",
            "--listen",
            "127.0.0.1:7390",
            "--token-file",
            "t",
        ];
        let err = Args::try_parse_from(both).expect_err("--token-file with --listen");
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        assert!(Args::try_parse_from(["cairn-mcp", "--token-file", "t"]).is_ok());
    }

    #[test]
    fn an_empty_actor_is_a_configuration_error() {
        let err = Args::try_parse_from(["cairn-mcp", "--actor", ""]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let args = Args::try_parse_from(["cairn-mcp", "--actor", "bot"]).unwrap();
        assert_eq!(args.actor, "bot");
    }
}
