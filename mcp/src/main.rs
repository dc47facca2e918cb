//! `cairn-mcp`: the MCP server of a cairn cluster (SPEC §9). It is a client of the
//! cluster's public HTTP API only (through `cairn-client`: leader discovery, failover,
//! exactly-once retries, sessions, bearer tokens, TLS), and offers agents eleven tools,
//! the resource template `cairn://key/{key}` with change notifications, and instructions
//! on when to recall and what revoked and forgotten knowledge means.
//!
//! Two modes: stdio (the MCP client starts the process; it acts with `CAIRN_TOKEN`), and
//! streamable HTTP with `--listen` (each request acts with its own bearer token).
//!
//! # Layout
//!
//! - this file: `main`, logging (stderr only: in stdio mode stdout is the protocol), the
//!   choice of mode, clean shutdown on SIGINT/SIGTERM or end of input.
//! - [`args`]: the command line and its `--help`.
//! - [`gateway`]: the cluster clients (one per caller token), whether the cluster has
//!   auth on, and the `actor` mutations carry.
//! - [`server`]: the MCP handler: callers, tool routing, resources, subscriptions,
//!   instructions (`instructions.md`).
//! - [`tools`]: the tools' arguments and the two shared paths (mutations, reads);
//!   [`tools::mutations`] and [`tools::reads`] hold the `#[tool]` methods.
//! - [`outcome`]: tool results: structured output, text with warnings first, errors.
//! - [`resources`]: `cairn://key/{key}` URIs, resource reads, the change feed.
//! - [`http`]: the streamable HTTP endpoint in axum and its bearer-token layer.
//! - [`stdio`]: stdio mode's transport, which answers every request it cannot decode;
//!   [`framing`]: how such a request is recognised and answered (both transports).

mod args;
mod framing;
mod gateway;
mod http;
mod outcome;
mod resources;
mod server;
mod stdio;
mod tools;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use rmcp::service::ServerInitializeError;
use rmcp::ServiceExt;

use cairn_client::{BearerToken, ClientError};

use crate::args::{Args, MCP_PATH};
use crate::gateway::Gateway;
use crate::server::CairnMcp;

/// The log filter without `RUST_LOG`: the server's own lines from `info`, rmcp's from
/// `warn`, and none of rmcp's request loop (`rmcp::service`). That loop logs every request
/// answered with an error as `WARN rmcp::service: response error`, a key never written or
/// beyond the caller's grants as much as a cluster that cannot be reached, and the server
/// logs those answers itself (`server::log_error`: a caller's refusal at `debug`, a
/// failure at `warn`). Its ERROR lines are all of a peer that went away before its answer
/// could be sent: `failed to send pending response during drain` ends every
/// `subscriptions/listen` stream its client closes over HTTP. A handler that panics still
/// prints through the panic hook.
const DEFAULT_LOG_FILTER: &str = "cairn_mcp=info,rmcp=warn,rmcp::service=off";

/// Exit code for a configuration error (bad flag, token file, certificate, address).
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    // Before the runtime starts its threads: the environment is process-wide.
    cairn_client::env::unset_empty_variables();
    let args = Args::parse();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(run(args)),
        Err(e) => {
            eprintln!("cairn-mcp: starting the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| DEFAULT_LOG_FILTER.into()),
        )
        .init();
    let gateway = match configure(&args) {
        Ok(gateway) => Arc::new(gateway),
        Err(message) => {
            eprintln!("cairn-mcp: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let outcome = match args.listen {
        Some(address) => serve_http(address, gateway).await,
        None => serve_stdio(gateway).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("cairn-mcp: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The gateway of `args`, or why the configuration is refused.
fn configure(args: &Args) -> Result<Gateway, String> {
    if let Some(address) = args.listen {
        if !address.ip().is_loopback() {
            if !args.insecure {
                return Err(format!(
                    "--listen {address} is beyond loopback: the endpoint is plain HTTP and \
                     bearer tokens would cross the network in clear (put a TLS proxy in front \
                     and pass --insecure, or listen on 127.0.0.1)"
                ));
            }
            tracing::warn!(
                "--insecure: --listen {address} is beyond loopback over plain HTTP; bearer \
                 tokens cross the network in clear unless a TLS proxy is in front"
            );
        }
        for ignored in ["CAIRN_TOKEN", "CAIRN_TOKEN_FILE"] {
            if std::env::var_os(ignored).is_some() {
                tracing::warn!(
                    "{ignored} is ignored with --listen: each request acts with its own bearer token"
                );
            }
        }
    }
    let token = match args.listen {
        Some(_) => None,
        None => stdio_token(args).map_err(|err| err.to_string())?,
    };
    Gateway::new(args, token).map_err(|err| err.to_string())
}

/// The token of stdio mode, first found: `--token-file`, `CAIRN_TOKEN`,
/// `CAIRN_TOKEN_FILE` (the cairn CLI's order). Errors name the source, never the token.
fn stdio_token(args: &Args) -> Result<Option<BearerToken>, ClientError> {
    if let Some(path) = &args.token_file {
        return BearerToken::from_file(path).map(Some);
    }
    if let Some(token) = std::env::var("CAIRN_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        return BearerToken::new(token).map(Some).map_err(|err| match err {
            ClientError::InvalidInput { message } => ClientError::InvalidInput {
                message: format!("CAIRN_TOKEN: {message}"),
            },
            other => other,
        });
    }
    std::env::var_os("CAIRN_TOKEN_FILE")
        .filter(|path| !path.is_empty())
        .map(|path| BearerToken::from_file(path.as_ref()))
        .transpose()
}

async fn serve_stdio(gateway: Arc<Gateway>) -> anyhow::Result<()> {
    tracing::info!(cluster = %cluster_of(&gateway), "serving MCP over stdio");
    let transport = stdio::stdio(gateway.fixed_caller());
    let serving = CairnMcp::new(gateway).serve(transport);
    let running = tokio::select! {
        running = serving => match running {
            Ok(running) => running,
            // The client went away before it initialized: input closed, a clean stop.
            Err(ServerInitializeError::ConnectionClosed(_)) => {
                tracing::info!("stdio closed before initialize, stopping");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        },
        () = shutdown_signal() => return Ok(()),
    };
    let stop = running.cancellation_token();
    tokio::spawn(async move {
        shutdown_signal().await;
        stop.cancel();
    });
    running.waiting().await?;
    tracing::info!("stdio closed, stopping");
    Ok(())
}

async fn serve_http(address: std::net::SocketAddr, gateway: Arc<Gateway>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!(
        cluster = %cluster_of(&gateway),
        "serving MCP over streamable HTTP at http://{}{MCP_PATH}",
        listener.local_addr()?
    );
    http::serve(listener, gateway, shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

/// The endpoints the server reaches the cluster at, for its first log line: a server
/// started without `CAIRN_ENDPOINTS` says it uses the local defaults before a call fails.
fn cluster_of(gateway: &Gateway) -> String {
    gateway.anonymous().client().endpoints().join(",")
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(err) => {
            tracing::warn!(error = %err, "cannot watch SIGTERM; only Ctrl-C stops the server");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
