//! The command line (clap derive): global flags, the command tree, the flags of `cairn
//! cluster` and the parsers of flag values. The key commands' flags are in [`key_flags`],
//! those of `cairn auth` in [`auth_flags`]. What a command does with its flags is in
//! [`crate::keys`], [`crate::cluster`] and [`crate::auth`].

mod auth_flags;
mod key_flags;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::LazyLock;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use cairn_client::api::{Consistency, NodeSpec, State};
use cairn_client::client::RETRIES_MAX_DEFAULT;

pub use auth_flags::*;
pub use key_flags::*;

use crate::cluster::local_nodes;
use crate::help::{AUTH_HELP, CLUSTER_HELP, MAIN_HELP};

/// `--endpoints` by default: the client endpoints of the local nodes of `scripts/cluster up`.
static DEFAULT_ENDPOINTS: LazyLock<String> = LazyLock::new(|| {
    let endpoints: Vec<String> = local_nodes()
        .iter()
        .map(|node| format!("http://{}", node.client_addr))
        .collect();
    endpoints.join(",")
});

#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "Client of a cairn replicated memory cluster",
    after_help = MAIN_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Node client endpoints, comma separated.
    #[arg(
        long,
        global = true,
        env = "CAIRN_ENDPOINTS",
        // `--help` does not print the variable's value: an endpoint may carry what
        // should not be on screen, even though one with credentials is refused.
        hide_env_values = true,
        value_delimiter = ',',
        default_value = DEFAULT_ENDPOINTS.as_str()
    )]
    pub endpoints: Vec<String>,
    /// Print response JSON (one document per line) instead of human output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Read consistency: linearizable (default), bounded or any.
    #[arg(long, global = true, value_parser = parse_consistency)]
    pub consistency: Option<Consistency>,
    /// Staleness bound of `bounded` reads; without --consistency it means bounded.
    #[arg(long, global = true)]
    pub max_staleness_ms: Option<u64>,
    /// Session token file: read before the command, written after it.
    #[arg(long, global = true, env = "CAIRN_SESSION_FILE")]
    pub session_file: Option<PathBuf>,
    /// Deadline of one request attempt.
    #[arg(long, global = true, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Retries of a failed call (unreachable node, no leader, …).
    #[arg(long, global = true, default_value_t = RETRIES_MAX_DEFAULT)]
    pub retries: u32,
    /// Bound on a whole call, its retries included (default: --retries alone bounds it);
    /// a mutation cut off by it is outcome_unknown with its request_id.
    #[arg(long, global = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub call_timeout_ms: Option<u64>,
    /// File holding the bearer token; beats CAIRN_TOKEN and CAIRN_TOKEN_FILE (lookup
    /// order: cairn --help).
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// CA certificate (PEM) of an HTTPS cluster; endpoints without a scheme are then https.
    #[arg(long, global = true, env = "CAIRN_CACERT", value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Client certificate (PEM) for nodes that require one (mutual TLS); needs --key.
    #[arg(
        id = "client_cert",
        long = "cert",
        global = true,
        env = "CAIRN_CERT",
        value_name = "FILE",
        requires = "client_key"
    )]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(
        id = "client_key",
        long = "key",
        global = true,
        env = "CAIRN_KEY",
        value_name = "FILE",
        requires = "client_cert"
    )]
    pub key: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    // The key commands, listed before `cluster` in `--help`.
    #[command(flatten)]
    Key(KeyCommand),
    /// Operate the cluster.
    #[command(subcommand, after_help = CLUSTER_HELP)]
    Cluster(ClusterCommand),
    /// Principals, tokens and grants (SPEC §8).
    #[command(subcommand, after_help = AUTH_HELP)]
    Auth(AuthCommand),
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Status of every endpoint, as a table.
    Status,
    /// `GET /healthz` of each node: id and role [default: every endpoint]; fails unless
    /// every node is healthy.
    Health {
        // An argument id of its own: one named `endpoints` would shadow the global
        // `--endpoints` in this subcommand.
        /// The nodes to ask [default: every endpoint].
        #[arg(id = "targets", value_name = "ENDPOINTS")]
        endpoints: Vec<String>,
    },
    /// Initialize the cluster [default: the 3 local nodes].
    Init {
        /// ID=CLIENT_ADDR,PEER_ADDR; repeatable.
        #[arg(long = "node", value_parser = parse_node_spec)]
        nodes: Vec<NodeSpec>,
        /// Turn auth on at init, right after the first election, with this admin; prints
        /// its token once.
        #[arg(long, value_name = "NAME")]
        auth_admin: Option<String>,
    },
    /// Add a node (as a learner, promoted once caught up).
    Join(JoinArgs),
    /// Remove a node.
    Remove {
        /// The id of the member to remove.
        #[arg(long)]
        id: u64,
    },
    /// Snapshot, purge the log and compact storage on each node [default: every endpoint].
    Compact {
        // As `health`'s: an id of its own, so the global `--endpoints` works here too.
        /// The nodes to compact [default: every endpoint].
        #[arg(id = "targets", value_name = "ENDPOINTS")]
        endpoints: Vec<String>,
    },
    /// Prometheus metrics of one node [default: the first endpoint].
    Metrics { endpoint: Option<String> },
}

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The new node's id, one no member has.
    #[arg(long)]
    pub id: u64,
    /// Where the new node serves clients, HOST:PORT.
    #[arg(long)]
    pub client_addr: String,
    /// Where the new node serves peers, HOST:PORT.
    #[arg(long)]
    pub peer_addr: String,
}

/// The message of a usage error on one line (`invalid value 'abc' for '--expected-version
/// <EXPECTED_VERSION>': …`), without clap's `error:` prefix, usage and tips; None for
/// what clap prints that is no error: `--help`, `--version`, and the help of a bare `cairn`
/// or command group.
pub fn usage_error_message(err: &clap::Error) -> Option<String> {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return None;
    }
    let rendered = err.render().to_string();
    let first_paragraph = rendered.split("\n\n").next().unwrap_or_default();
    let lines: Vec<&str> = first_paragraph.lines().map(str::trim).collect();
    let message = lines.join(" ");
    Some(
        message
            .strip_prefix("error: ")
            .unwrap_or(&message)
            .to_string(),
    )
}

/// Whether `--json` is among the arguments before any `--`: asked when clap refused them,
/// so its own answer is not there.
pub fn json_requested(args: impl IntoIterator<Item = OsString>) -> bool {
    args.into_iter()
        .take_while(|arg| arg != "--")
        .any(|arg| arg == "--json")
}

/// A repeatable flag given no times is absent from the request.
pub fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

fn parse_consistency(raw: &str) -> Result<Consistency, String> {
    serde_json::from_value(Value::String(raw.to_string()))
        .map_err(|_| "expected linearizable, bounded or any".to_string())
}

/// `--actor`: given, it is sent as given, never replaced by a default; an empty one is
/// refused here (the node would refuse it as `invalid_request`, and without a token the
/// request could not carry it at all).
fn parse_actor(raw: &str) -> Result<String, String> {
    match raw.is_empty() {
        true => Err("must not be empty (1 to 128 bytes); leave --actor out for the default".into()),
        false => Ok(raw.to_string()),
    }
}

/// A `--state` of `cairn list`: the states a listed key can be in (an absent key has no
/// record to list, and the node refuses `absent`).
fn parse_listed_state(raw: &str) -> Result<State, String> {
    parse_state_among(raw, &[State::Active, State::Revoked, State::Forgotten])
}

/// An `--include` of `cairn recall`: forgotten notes are never recalled (SPEC §4).
fn parse_recalled_state(raw: &str) -> Result<State, String> {
    parse_state_among(raw, &[State::Active, State::Revoked])
}

fn parse_state_among(raw: &str, allowed: &[State]) -> Result<State, String> {
    let names: Vec<&str> = allowed.iter().map(|s| s.as_str()).collect();
    allowed
        .iter()
        .find(|s| s.as_str() == raw)
        .copied()
        .ok_or_else(|| format!("expected one of: {}", names.join(", ")))
}

/// `ID=CLIENT_ADDR,PEER_ADDR`
fn parse_node_spec(raw: &str) -> Result<NodeSpec, String> {
    let usage = || format!("{raw:?}: expected ID=CLIENT_ADDR,PEER_ADDR");
    let (id, addrs) = raw.split_once('=').ok_or_else(usage)?;
    let (client_addr, peer_addr) = addrs.split_once(',').ok_or_else(usage)?;
    let id = id.trim().parse().map_err(|_| usage())?;
    if client_addr.trim().is_empty() || peer_addr.trim().is_empty() {
        return Err(usage());
    }
    Ok(NodeSpec {
        id,
        client_addr: client_addr.trim().to_string(),
        peer_addr: peer_addr.trim().to_string(),
    })
}

/// `cairn ARGS…` parsed, for the tests of every module.
#[cfg(test)]
pub fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("cairn").chain(args.iter().copied()))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_to_the_three_local_endpoints() {
        let cli = parse(&["read", "k"]).unwrap();
        if std::env::var_os("CAIRN_ENDPOINTS").is_none() {
            assert_eq!(cli.global.endpoints.len(), 3);
            assert_eq!(cli.global.endpoints[0], "http://127.0.0.1:7401");
        }
        assert!(!cli.global.json);
        let cli = parse(&["read", "k", "--endpoints", "a:1,b:2", "--json"]).unwrap();
        assert_eq!(cli.global.endpoints, vec!["a:1", "b:2"]);
        assert!(cli.global.json);
    }

    #[test]
    fn the_global_endpoints_flag_works_after_cluster_health_and_compact() {
        for command in ["health", "compact"] {
            let cli = parse(&["cluster", command, "--endpoints", "a:1,b:2"]).unwrap();
            assert_eq!(cli.global.endpoints, vec!["a:1", "b:2"], "{command}");
            let Command::Cluster(
                ClusterCommand::Health { endpoints } | ClusterCommand::Compact { endpoints },
            ) = parse(&["cluster", command, "c:3"]).unwrap().command
            else {
                panic!("{command}: another command");
            };
            assert_eq!(endpoints, vec!["c:3"], "{command}");
        }
    }

    #[test]
    fn global_flags_work_after_the_subcommand() {
        let cli = parse(&[
            "read",
            "k",
            "--consistency",
            "bounded",
            "--max-staleness-ms",
            "500",
        ])
        .unwrap();
        assert_eq!(cli.global.consistency, Some(Consistency::Bounded));
        assert_eq!(cli.global.max_staleness_ms, Some(500));
        assert!(parse(&["read", "k", "--consistency", "eventual"]).is_err());
    }

    #[test]
    fn an_empty_actor_is_refused_not_defaulted() {
        let err = parse(&["write", "k", "1", "--actor", ""]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("must not be empty"), "{err}");
        assert!(parse(&["forget", "k", "--reason", "r", "--actor", ""]).is_err());
        assert!(parse(&["write", "k", "1", "--actor", "a"]).is_ok());
    }

    #[test]
    fn a_usage_error_is_one_line_and_help_is_no_error() {
        let message = |args: &[&str]| usage_error_message(&parse(args).unwrap_err());
        assert_eq!(
            message(&["write", "k", "v", "--expected-version", "abc"]).as_deref(),
            Some(
                "invalid value 'abc' for '--expected-version <EXPECTED_VERSION>': invalid \
                 digit found in string"
            )
        );
        assert_eq!(
            message(&["write", "onlykey"]).as_deref(),
            Some("the following required arguments were not provided: <VALUE>")
        );
        for help in [
            &["--help"][..],
            &["--version"],
            &["auth"],
            &["write", "--help"],
        ] {
            assert_eq!(message(help), None, "{help:?}");
        }
    }

    #[test]
    fn list_help_names_the_default_prefix_once() {
        let mut cli = Cli::command();
        let help = cli
            .find_subcommand_mut("list")
            .unwrap()
            .render_help()
            .to_string();
        let prefix = help
            .lines()
            .find(|l| l.trim_start().starts_with("[PREFIX]"));
        assert_eq!(
            prefix.map(str::trim),
            Some("[PREFIX]  Only keys that start with this [default: every key]"),
            "{help}"
        );
    }

    #[test]
    fn the_cluster_and_auth_help_show_examples() {
        let mut cli = Cli::command();
        for group in ["cluster", "auth"] {
            let help = cli
                .find_subcommand_mut(group)
                .unwrap()
                .render_help()
                .to_string();
            assert!(
                help.contains(&format!("Examples:\n  cairn {group} ")),
                "{help}"
            );
        }
    }

    #[test]
    fn json_is_requested_only_before_a_double_dash() {
        let requested = |args: &[&str]| json_requested(args.iter().map(OsString::from));
        assert!(requested(&["cairn", "write", "k", "--json"]));
        assert!(!requested(&["cairn", "write", "k", "--", "--json"]));
        assert!(!requested(&["cairn", "write", "k", "--jsonx"]));
    }

    #[test]
    fn list_and_recall_take_only_the_states_the_node_accepts() {
        let err = parse(&["list", "p/", "--state", "absent"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(
            err.to_string()
                .contains("expected one of: active, revoked, forgotten"),
            "{err}"
        );
        assert!(parse(&["list", "p/", "--state", "forgotten"]).is_ok());
        let err = parse(&["recall", "tag:x", "--include", "forgotten"]).unwrap_err();
        assert!(
            err.to_string().contains("expected one of: active, revoked"),
            "{err}"
        );
        assert!(parse(&["recall", "tag:x", "--include", "revoked"]).is_ok());
    }

    #[test]
    fn cluster_init_node_specs() {
        assert_eq!(
            parse_node_spec("4=10.0.0.4:7401, 10.0.0.4:7501").unwrap(),
            NodeSpec {
                id: 4,
                client_addr: "10.0.0.4:7401".into(),
                peer_addr: "10.0.0.4:7501".into()
            }
        );
        for bad in ["4", "x=a,b", "4=a", "4=,b"] {
            assert!(parse_node_spec(bad).is_err(), "{bad}");
        }
        let cli = parse(&["cluster", "init"]).unwrap();
        let Command::Cluster(ClusterCommand::Init { nodes, auth_admin }) = cli.command else {
            panic!()
        };
        assert!(nodes.is_empty() && auth_admin.is_none());
        let cli = parse(&["cluster", "init", "--auth-admin", "root"]).unwrap();
        let Command::Cluster(ClusterCommand::Init { auth_admin, .. }) = cli.command else {
            panic!()
        };
        assert_eq!(auth_admin.as_deref(), Some("root"));
        assert!(parse(&["cluster", "join", "--id", "4", "--client-addr", "a:1"]).is_err());
    }
}
