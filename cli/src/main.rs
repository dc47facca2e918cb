//! `cairn`: the command-line client of a cairn cluster (SPEC §6).
//!
//! Each subcommand is a small handler over [`Ctx`]: build the request from flags, call the
//! [`Client`], print. Output is human-oriented (the `rendered` line first for reads,
//! aligned `key: value` lines, tables) unless `--json`, which prints the response JSON on one
//! line. Errors go to stderr as `error: <code>: <message>` and set the exit code of their
//! class (see `--help`; [`ClientError::exit_code`]).
//!
//! # Layout
//!
//! - [`args`]: the clap definitions (global flags, subcommands, their flags) and the
//!   parsers of flag values; [`help`]: the examples printed after each `--help`.
//! - [`keys`]: the key commands (mutations, reads, batch, watch): flags → request → call.
//! - [`cluster`]: `cairn cluster …`: status and compaction per endpoint, membership.
//! - [`auth`]: `cairn auth …`: turning auth on, principals, tokens, grants, whoami.
//! - [`credentials`]: where the bearer token (CAIRN_TOKEN, `--token-file`,
//!   `.cluster/admin.token`) and the TLS files come from.
//! - [`session_file`]: `--session-file`, loaded before a command and saved after it.
//! - [`output`]: stdout, `--json`, aligned fields and tables; [`render`]: the human form
//!   of each response.
//! - this file: `main`, the [`Client`] built from the global flags, dispatch, exit codes.

mod args;
mod auth;
mod cluster;
mod credentials;
mod help;
mod keys;
mod output;
mod render;
mod session_file;

use std::fmt::Display;
use std::process::ExitCode;
use std::time::Duration;

use cairn_client::{Client, ClientError, Session};
use clap::Parser;

use crate::args::{Cli, Command, Global};

type Result<T> = std::result::Result<T, ClientError>;

/// What every command runs with.
struct Ctx {
    client: Client,
    /// `--json`: print response JSON instead of human output.
    json: bool,
}

fn main() -> ExitCode {
    // Before the runtime starts any thread: the environment is process-wide.
    cairn_client::env::unset_empty_variables();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return refuse_command_line(err),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run_and_report(cli)),
        Err(e) => {
            eprintln!("error: io: starting the runtime: {e}");
            ExitCode::from(cairn_client::error::EXIT_OTHER)
        }
    }
}

/// clap's refusal of the command line. With `--json` a usage error is one line of JSON on
/// stderr like every other error (`invalid_input`, exit 2), so a script parses one form;
/// else, and for `--help` and `--version`, clap prints it as usual.
fn refuse_command_line(err: clap::Error) -> ExitCode {
    let message = args::usage_error_message(&err);
    let Some(message) = message.filter(|_| args::json_requested(std::env::args_os())) else {
        err.exit()
    };
    let err = ClientError::InvalidInput { message };
    output::report_error(&err, true);
    ExitCode::from(err.exit_code())
}

async fn run_and_report(cli: Cli) -> ExitCode {
    let json = cli.global.json;
    let outcome = run(cli).await;
    if let Some(code) = output::stdout_exit() {
        return code;
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            output::report_error(&err, json);
            ExitCode::from(err.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let session_file = cli.global.session_file.clone();
    let session = session_file
        .as_deref()
        .map(session_file::load)
        .transpose()?;
    let ctx = Ctx {
        client: build_client(&cli.global, session)?,
        json: cli.global.json,
    };
    let outcome = match cli.command {
        Command::Key(command) => keys::run(&ctx, command).await,
        Command::Cluster(command) => cluster::run(&ctx, command).await,
        Command::Auth(command) => auth::run(&ctx, command).await,
    };
    // The session only ever grows with observed facts, so saving after a failure is safe
    // and keeps whatever a partial run learned.
    let saved = match &session_file {
        Some(path) => session_file::save(path, &ctx.client),
        None => Ok(()),
    };
    outcome.and(saved)
}

fn build_client(global: &Global, session: Option<Session>) -> Result<Client> {
    let mut builder = Client::builder(global.endpoints.clone())
        .request_timeout(Duration::from_millis(global.timeout_ms))
        .retries_max(global.retries);
    if let Some(consistency) = global.consistency {
        builder = builder.consistency(consistency);
    }
    if let Some(ms) = global.max_staleness_ms {
        builder = builder.max_staleness_ms(ms);
    }
    if let Some(ms) = global.call_timeout_ms {
        builder = builder.call_timeout(Duration::from_millis(ms));
    }
    if let Some(session) = session {
        builder = builder.session(session);
    }
    let env = credentials::TokenEnv::from_process();
    let cwd = std::env::current_dir().ok();
    if let Some(token) = credentials::find_token(global, env, cwd.as_deref())? {
        builder = builder.bearer_token(token);
    }
    credentials::apply_tls(global, builder).build()
}

/// A local I/O failure (batch file, session file, stdin): exit code 1.
fn io_error(what: impl Display, err: std::io::Error) -> ClientError {
    ClientError::Io {
        message: format!("{what}: {err}"),
    }
}
