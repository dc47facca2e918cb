//! `cairn`: the command-line client of a cairn cluster (SPEC §6).
//!
//! Each subcommand is a small handler over [`Ctx`]: build the request from flags, call the
//! [`Client`], print. Output is human-oriented (the `rendered` line first for reads,
//! aligned `key: value` lines, tables) unless `--json`, which prints the response JSON on one
//! line. Errors go to stderr as `error: <code>: <message>` and set the exit code of their
//! class (see `--help`).

use std::ffi::OsString;
use std::fmt::Display;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use futures::StreamExt;
use serde::Serialize;
use serde_json::{json, Value};

use cairn_client::api::{
    BatchRequest, BatchResult, ClusterStatus, Consistency, FlagStaleRequest, ForgetRequest,
    HistoryEvent, HistoryResponse, InitRequest, ListRequest, ListResponse, MembershipResponse,
    MutationResult, NodeSpec, ProbeResponse, ReadOptions, ReadResponse, RecallRequest,
    RecallResponse, ReinstateRequest, RevokeRequest, State, SupersedeRequest, Tombstone,
    WatchEvent, WriteRequest,
};
use cairn_client::client::RETRIES_MAX_DEFAULT;
use cairn_client::{Client, ClientError, Session};

type Result<T> = std::result::Result<T, ClientError>;

const DEFAULT_ENDPOINTS: &str = "http://127.0.0.1:7401,http://127.0.0.1:7402,http://127.0.0.1:7403";
/// `cluster init` without `--node`: the local nodes of `scripts/cluster up`.
const LOCAL_NODES: u64 = 3;
/// SPEC §6 default ports: node i serves clients on 7400+i and peers on 7500+i.
const CLIENT_PORT_BASE: u64 = 7400;
const PEER_PORT_BASE: u64 = 7500;
const LOCAL_HOST: &str = "127.0.0.1";

const MAIN_HELP: &str = "\
Examples:
  cairn cluster init                      # initialize the 3 local nodes
  cairn cluster status                    # one row per endpoint
  cairn write project/db 'postgres 16' --anchor path:src/db/ --tag infra
  cairn write limits/max_conns 200        # VALUE is JSON if it parses, else a string
  cairn read project/db
  cairn read project/db --consistency bounded --max-staleness-ms 500
  cairn forget project/db --reason 'moved to sqlite'
  cairn revoke facts/retry --reason 'derived from a misread log'
  cairn recall path:src/db/schema.rs topic:migrations
  cairn watch --prefix project/
  cairn --session-file ~/.cairn-session read project/db   # never older than what you saw

Exit codes:
  0 ok                1 other error          2 invalid input (400/413/422)
  3 not found (404)   4 conflict (409)       5 unavailable (503, unreachable)
  6 outcome unknown (504 / lost connection): retry with the same --request-id";

const WRITE_HELP: &str = "\
Examples:
  cairn write notes/todo 'ship the CLI'                 # a JSON string
  cairn write cfg/retries 3 --expected-version 0        # the number 3, only if absent
  cairn write cfg/label '\"3\"'                           # the string \"3\"
  cairn write cfg/db '{\"host\":\"db1\",\"port\":5432}' --anchor path:config/db.toml
  cairn write facts/x 'checked again' --clear-tombstone --reason 'verified'
  cairn write facts/y 'source fixed' --override-revocation --reason 'new evidence'";

const FORGET_HELP: &str = "\
Examples:
  cairn forget user/ssn --reason 'user asked for deletion'
  cairn forget cache/plan --reason obsolete --expected-version 4
The tombstone is kept forever: `cairn tombstone ID` shows it, `cairn history KEY` lists it.";

const REVOKE_HELP: &str = "\
Examples:
  cairn revoke facts/retry --reason 'derived from a misread log'
  cairn reinstate facts/retry --reason 'the log was right after all'
A revoked belief stays readable as a warning ([REVOKED] …) until reinstated.";

const READ_HELP: &str = "\
Examples:
  cairn read project/db
  cairn read project/db --consistency any
  cairn --json read project/db | jq .value
  cairn --session-file s.tok read project/db    # min_revision from the session";

const RECALL_HELP: &str = "\
Examples:
  cairn recall path:src/db/schema.rs topic:migrations
  cairn recall tag:infra --prefix project/ --limit 5
Cues are kind:value with kind path, symbol, tag, topic or url.";

const WATCH_HELP: &str = "\
Examples:
  cairn watch --prefix project/
  cairn --json watch --from-revision 120 | jq -c 'select(.kind == \"forgotten\")'
Resumes by itself after a lost connection; Ctrl-C ends it.";

const CLUSTER_HELP: &str = "\
Examples:
  cairn cluster init
  cairn cluster init --node 1=10.0.0.1:7401,10.0.0.1:7501 --node 2=10.0.0.2:7401,10.0.0.2:7501
  cairn cluster join --id 4 --client-addr 127.0.0.1:7404 --peer-addr 127.0.0.1:7504
  cairn cluster remove --id 4
  cairn cluster compact                 # every endpoint: forgotten bytes physically gone";

#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "Client of a cairn replicated memory cluster",
    after_help = MAIN_HELP
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
struct Global {
    /// Node client endpoints, comma separated.
    #[arg(
        long,
        global = true,
        env = "CAIRN_ENDPOINTS",
        value_delimiter = ',',
        default_value = DEFAULT_ENDPOINTS
    )]
    endpoints: Vec<String>,
    /// Print response JSON (one document per line) instead of human output.
    #[arg(long, global = true)]
    json: bool,
    /// Read consistency: linearizable (default), bounded or any.
    #[arg(long, global = true, value_parser = parse_consistency)]
    consistency: Option<Consistency>,
    /// Staleness bound of `bounded` reads.
    #[arg(long, global = true)]
    max_staleness_ms: Option<u64>,
    /// Session token file: read before the command, written after it.
    #[arg(long, global = true, env = "CAIRN_SESSION_FILE")]
    session_file: Option<PathBuf>,
    /// Deadline of one request attempt.
    #[arg(long, global = true, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Retries of a failed call (unreachable node, no leader, …).
    #[arg(long, global = true, default_value_t = RETRIES_MAX_DEFAULT)]
    retries: u32,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a value (VALUE is JSON if it parses, else a string).
    #[command(after_help = WRITE_HELP)]
    Write(WriteArgs),
    /// Forget a key: drop its value, keep a durable tombstone.
    #[command(after_help = FORGET_HELP)]
    Forget(ReasonArgs),
    /// Revoke a wrong belief: keep it, with its reason, as a warning.
    #[command(after_help = REVOKE_HELP)]
    Revoke(ReasonArgs),
    /// Reinstate a revoked key.
    Reinstate(OptionalReasonArgs),
    /// Flag a key as stale because an anchor changed.
    FlagStale(FlagStaleArgs),
    /// Record that KEY was replaced by another key.
    Supersede(SupersedeArgs),
    /// Apply a JSON BatchRequest ({"ops": [...]}) from FILE or - (stdin), all or nothing.
    Batch(BatchArgs),
    /// Read a key (the rendered note first).
    #[command(after_help = READ_HELP)]
    Read(KeyArgs),
    /// Show whether a key's value and retention records are present.
    Probe(KeyArgs),
    /// Show a key's events, oldest first.
    History(KeyArgs),
    /// Show a tombstone by id.
    Tombstone(TombstoneArgs),
    /// List keys under a prefix.
    List(ListArgs),
    /// Recall notes whose anchors match the cues.
    #[command(after_help = RECALL_HELP)]
    Recall(RecallArgs),
    /// Stream changes as they are applied.
    #[command(after_help = WATCH_HELP)]
    Watch(WatchArgs),
    /// Operate the cluster.
    #[command(subcommand, after_help = CLUSTER_HELP)]
    Cluster(ClusterCommand),
}

/// Flags every mutation takes.
#[derive(Debug, Args)]
struct Common {
    /// Who makes the change.
    #[arg(long, env = "CAIRN_ACTOR", default_value = "cli")]
    actor: String,
    /// Apply only if the key is at this version (0: only if absent).
    #[arg(long)]
    expected_version: Option<u64>,
    /// Reject if the key was forgotten, revoked or re-created after this revision.
    #[arg(long)]
    based_on_revision: Option<u64>,
    /// Idempotency id; reuse it to retry after an unknown outcome [default: random].
    #[arg(long)]
    request_id: Option<String>,
}

#[derive(Debug, Args)]
struct WriteArgs {
    key: String,
    /// JSON if it parses (42, true, {"a":1}, '"quoted"'), else taken as a string.
    value: String,
    #[command(flatten)]
    common: Common,
    /// Where the value came from.
    #[arg(long)]
    source: Option<String>,
    /// Anchor kind:value (path, symbol, tag, topic, url); repeatable.
    #[arg(long = "anchor")]
    anchors: Vec<String>,
    /// Tag; repeatable.
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// Re-create a forgotten key (starts a new generation).
    #[arg(long)]
    clear_tombstone: bool,
    /// Overwrite a revoked key.
    #[arg(long)]
    override_revocation: bool,
    /// Why (recorded in the history; expected with --clear-tombstone/--override-revocation).
    #[arg(long)]
    reason: Option<String>,
}

#[derive(Debug, Args)]
struct ReasonArgs {
    key: String,
    /// Why (required, kept with the tombstone or revocation).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct OptionalReasonArgs {
    key: String,
    #[arg(long)]
    reason: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct FlagStaleArgs {
    key: String,
    /// The anchor that changed (kind:value).
    #[arg(long)]
    anchor: String,
    /// Hash of the anchor's content as observed now.
    #[arg(long)]
    observed_hash: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct SupersedeArgs {
    key: String,
    /// The key that replaces KEY.
    #[arg(long)]
    by: String,
    #[arg(long)]
    reason: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct BatchArgs {
    /// JSON file, or - for stdin.
    file: PathBuf,
}

#[derive(Debug, Args)]
struct KeyArgs {
    key: String,
}

#[derive(Debug, Args)]
struct TombstoneArgs {
    id: String,
}

#[derive(Debug, Args)]
struct ListArgs {
    #[arg(default_value = "")]
    prefix: String,
    /// Only keys in this state (absent, active, revoked, forgotten); repeatable.
    #[arg(long = "state", value_parser = parse_state)]
    states: Vec<State>,
    #[arg(long)]
    limit: Option<u32>,
    /// Continue after this key (the `next_after` of the previous page).
    #[arg(long)]
    after: Option<String>,
}

#[derive(Debug, Args)]
struct RecallArgs {
    /// Cues kind:value.
    #[arg(required = true)]
    cues: Vec<String>,
    #[arg(long)]
    prefix: Option<String>,
    #[arg(long)]
    limit: Option<u32>,
}

#[derive(Debug, Args)]
struct WatchArgs {
    #[arg(long)]
    prefix: Option<String>,
    /// First revision to deliver (inclusive) [default: the next one].
    #[arg(long)]
    from_revision: Option<u64>,
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Status of every endpoint, as a table.
    Status,
    /// Initialize the cluster [default: the 3 local nodes].
    Init {
        /// ID=CLIENT_ADDR,PEER_ADDR; repeatable.
        #[arg(long = "node", value_parser = parse_node_spec)]
        nodes: Vec<NodeSpec>,
    },
    /// Add a node (as a learner, promoted once caught up).
    Join(JoinArgs),
    /// Remove a node.
    Remove {
        #[arg(long)]
        id: u64,
    },
    /// Snapshot, purge the log and compact storage on each node [default: every endpoint].
    Compact { endpoints: Vec<String> },
    /// Prometheus metrics of one node [default: the first endpoint].
    Metrics { endpoint: Option<String> },
}

#[derive(Debug, Args)]
struct JoinArgs {
    #[arg(long)]
    id: u64,
    #[arg(long)]
    client_addr: String,
    #[arg(long)]
    peer_addr: String,
}

// -- request building ---------------------------------------------------------------------

/// Mutation requests that carry the [`Common`] conditions.
trait Conditioned {
    fn set_conditions(&mut self, common: Common);
}

macro_rules! conditioned {
    ($($request:ty),*) => {$(
        impl Conditioned for $request {
            fn set_conditions(&mut self, common: Common) {
                self.actor = common.actor;
                self.expected_version = common.expected_version;
                self.based_on_revision = common.based_on_revision;
                self.request_id = common.request_id;
            }
        }
    )*};
}

conditioned!(
    WriteRequest,
    ForgetRequest,
    RevokeRequest,
    ReinstateRequest,
    FlagStaleRequest,
    SupersedeRequest
);

impl Common {
    fn apply<R: Conditioned>(self, mut request: R) -> R {
        request.set_conditions(self);
        request
    }
}

impl WriteArgs {
    fn request(self) -> WriteRequest {
        let mut request = WriteRequest::new(self.key, parse_value(&self.value), "");
        request.source = self.source;
        request.anchors = non_empty(self.anchors);
        request.tags = non_empty(self.tags);
        request.clear_tombstone = self.clear_tombstone;
        request.override_revocation = self.override_revocation;
        request.reason = self.reason;
        self.common.apply(request)
    }
}

impl ReasonArgs {
    fn forget(self) -> ForgetRequest {
        self.common
            .apply(ForgetRequest::new(self.key, "", self.reason))
    }

    fn revoke(self) -> RevokeRequest {
        self.common
            .apply(RevokeRequest::new(self.key, "", self.reason))
    }
}

impl OptionalReasonArgs {
    fn reinstate(self) -> ReinstateRequest {
        let mut request = ReinstateRequest::new(self.key, "");
        request.reason = self.reason;
        self.common.apply(request)
    }
}

impl FlagStaleArgs {
    fn request(self) -> FlagStaleRequest {
        let request = FlagStaleRequest::new(self.key, "", self.anchor, self.observed_hash);
        self.common.apply(request)
    }
}

impl SupersedeArgs {
    fn request(self) -> SupersedeRequest {
        let mut request = SupersedeRequest::new(self.key, self.by, "");
        request.reason = self.reason;
        self.common.apply(request)
    }
}

impl ListArgs {
    fn request(self) -> ListRequest {
        let mut request = ListRequest::new(self.prefix);
        request.states = non_empty(self.states);
        request.limit = self.limit;
        request.after = self.after;
        request
    }
}

impl RecallArgs {
    fn request(self) -> RecallRequest {
        let mut request = RecallRequest::new(self.cues);
        request.prefix = self.prefix;
        request.limit = self.limit;
        request
    }
}

/// VALUE as JSON when it parses (`42`, `true`, `{"a":1}`, `"quoted"`), else the raw string.
fn parse_value(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

fn non_empty<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

fn parse_consistency(raw: &str) -> std::result::Result<Consistency, String> {
    serde_json::from_value(Value::String(raw.to_string()))
        .map_err(|_| "expected linearizable, bounded or any".to_string())
}

fn parse_state(raw: &str) -> std::result::Result<State, String> {
    serde_json::from_value(Value::String(raw.to_string()))
        .map_err(|_| "expected absent, active, revoked or forgotten".to_string())
}

/// `ID=CLIENT_ADDR,PEER_ADDR`
fn parse_node_spec(raw: &str) -> std::result::Result<NodeSpec, String> {
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

fn local_nodes() -> Vec<NodeSpec> {
    (1..=LOCAL_NODES)
        .map(|i| NodeSpec {
            id: i,
            client_addr: format!("{LOCAL_HOST}:{}", CLIENT_PORT_BASE + i),
            peer_addr: format!("{LOCAL_HOST}:{}", PEER_PORT_BASE + i),
        })
        .collect()
}

fn read_batch(file: &Path) -> Result<BatchRequest> {
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| io_error("stdin", e))?;
        text
    } else {
        std::fs::read_to_string(file).map_err(|e| io_error(file.display(), e))?
    };
    serde_json::from_str(&text).map_err(|e| ClientError::InvalidInput {
        message: format!("batch {}: {e}", file.display()),
    })
}

// -- running ------------------------------------------------------------------------------

struct Ctx {
    client: Client,
    json: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let session_file = cli.global.session_file.clone();
    let session = session_file.as_deref().map(load_session).transpose()?;
    let ctx = Ctx {
        client: build_client(&cli.global, session)?,
        json: cli.global.json,
    };
    let outcome = dispatch(&ctx, cli.command).await;
    // The session only ever grows with observed facts, so saving after a failure is safe
    // and keeps whatever a partial run learned.
    let saved = match &session_file {
        Some(path) => save_session(path, &ctx.client),
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
    if let Some(session) = session {
        builder = builder.session(session);
    }
    builder.build()
}

async fn dispatch(ctx: &Ctx, command: Command) -> Result<()> {
    let client = &ctx.client;
    // Reads take the consistency flags through the client defaults.
    let defaults = ReadOptions::default();
    match command {
        Command::Write(a) => ctx.emit(&client.write(a.request()).await?, print_mutation),
        Command::Forget(a) => ctx.emit(&client.forget(a.forget()).await?, print_mutation),
        Command::Revoke(a) => ctx.emit(&client.revoke(a.revoke()).await?, print_mutation),
        Command::Reinstate(a) => ctx.emit(&client.reinstate(a.reinstate()).await?, print_mutation),
        Command::FlagStale(a) => ctx.emit(&client.flag_stale(a.request()).await?, print_mutation),
        Command::Supersede(a) => ctx.emit(&client.supersede(a.request()).await?, print_mutation),
        Command::Batch(a) => ctx.emit(&client.batch(read_batch(&a.file)?).await?, print_batch),
        Command::Read(a) => ctx.emit(&client.read(&a.key, defaults).await?, print_read),
        Command::Probe(a) => ctx.emit(&client.probe(&a.key, defaults).await?, print_probe),
        Command::History(a) => ctx.emit(&client.history(&a.key, defaults).await?, print_history),
        Command::Tombstone(a) => ctx.emit(
            &client.tombstone(&a.id, ReadOptions::default()).await?,
            print_tombstone,
        ),
        Command::List(a) => ctx.emit(&client.list(a.request()).await?, print_list),
        Command::Recall(a) => ctx.emit(&client.recall(a.request()).await?, print_recall),
        Command::Watch(a) => watch(ctx, a).await,
        Command::Cluster(c) => cluster(ctx, c).await,
    }
}

/// Prints events until the stream ends (Ctrl-C, or an error after bounded reconnects).
async fn watch(ctx: &Ctx, args: WatchArgs) -> Result<()> {
    let mut events = ctx
        .client
        .watch(args.prefix.as_deref(), args.from_revision)
        .await?;
    while let Some(event) = events.next().await {
        ctx.emit(&event?, print_watch_event)?;
    }
    Ok(())
}

async fn cluster(ctx: &Ctx, command: ClusterCommand) -> Result<()> {
    let client = &ctx.client;
    match command {
        ClusterCommand::Status => cluster_status(ctx).await,
        ClusterCommand::Init { nodes } => {
            let nodes = non_empty(nodes).unwrap_or_else(local_nodes);
            ctx.emit(&client.init(InitRequest { nodes }).await?, print_membership)
        }
        ClusterCommand::Join(a) => {
            let node = NodeSpec {
                id: a.id,
                client_addr: a.client_addr,
                peer_addr: a.peer_addr,
            };
            ctx.emit(&client.join(node).await?, print_membership)
        }
        ClusterCommand::Remove { id } => ctx.emit(&client.remove(id).await?, print_membership),
        ClusterCommand::Compact { endpoints } => cluster_compact(ctx, endpoints).await,
        ClusterCommand::Metrics { endpoint } => {
            let endpoint = endpoint.unwrap_or_else(|| client.endpoints()[0].clone());
            say(client.metrics(&endpoint).await?.trim_end());
            Ok(())
        }
    }
}

/// One row per endpoint; succeeds if any endpoint answered.
async fn cluster_status(ctx: &Ctx) -> Result<()> {
    let endpoints = ctx.client.endpoints().to_vec();
    let answers = futures::future::join_all(endpoints.iter().map(|e| ctx.client.status(e))).await;
    let rows: Vec<(String, Result<ClusterStatus>)> = endpoints.into_iter().zip(answers).collect();
    if ctx.json {
        say(to_json(&per_endpoint_json(&rows, "status"))?);
    } else {
        print_status_table(&rows);
    }
    match rows.iter().any(|(_, answer)| answer.is_ok()) {
        true => Ok(()),
        false => Err(first_error(rows)),
    }
}

/// Compacts each endpoint in turn (one at a time: compaction is I/O heavy); fails if any
/// node failed.
async fn cluster_compact(ctx: &Ctx, endpoints: Vec<String>) -> Result<()> {
    let endpoints = non_empty(endpoints).unwrap_or_else(|| ctx.client.endpoints().to_vec());
    let mut rows = Vec::new();
    for endpoint in endpoints {
        let answer = ctx.client.compact(&endpoint).await;
        rows.push((endpoint, answer));
    }
    if ctx.json {
        say(to_json(&per_endpoint_json(&rows, "compact"))?);
    } else {
        let table = rows.iter().map(|(endpoint, answer)| match answer {
            Ok(c) => vec![
                endpoint.clone(),
                c.snapshot_index.to_string(),
                c.log_purged_through.to_string(),
            ],
            Err(err) => vec![endpoint.clone(), format!("error: {err}")],
        });
        print_table(
            &["ENDPOINT", "SNAPSHOT", "LOG_PURGED_THROUGH"],
            table.collect(),
        );
    }
    match rows.iter().all(|(_, answer)| answer.is_ok()) {
        true => Ok(()),
        false => Err(first_error(rows)),
    }
}

fn per_endpoint_json<T: Serialize>(rows: &[(String, Result<T>)], field: &str) -> Value {
    let rows = rows.iter().map(|(endpoint, answer)| match answer {
        Ok(value) => json!({ "endpoint": endpoint, field: value }),
        Err(err) => json!({
            "endpoint": endpoint,
            "error": { "code": err.name(), "message": err.to_string() },
        }),
    });
    Value::Array(rows.collect())
}

fn first_error<T>(rows: Vec<(String, Result<T>)>) -> ClientError {
    rows.into_iter()
        .find_map(|(_, answer)| answer.err())
        .unwrap_or_else(|| ClientError::InvalidInput {
            message: "no endpoints".into(),
        })
}

fn load_session(path: &Path) -> Result<Session> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(Session::new()),
        Ok(text) => Session::import_token(&text),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Session::new()),
        Err(err) => Err(io_error(path.display(), err)),
    }
}

/// Writes the token next to the file and renames it over, so a crash never leaves half a
/// token behind.
fn save_session(path: &Path, client: &Client) -> Result<()> {
    let Some(session) = client.session() else {
        return Ok(());
    };
    let mut temporary = OsString::from(path.as_os_str());
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, session.export_token() + "\n")
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|e| io_error(path.display(), e))
}

fn io_error(what: impl Display, err: std::io::Error) -> ClientError {
    ClientError::Io {
        message: format!("{what}: {err}"),
    }
}

// -- output -------------------------------------------------------------------------------

impl Ctx {
    fn emit<T: Serialize>(&self, value: &T, human: fn(&T)) -> Result<()> {
        if self.json {
            say(to_json(value)?);
        } else {
            human(value);
        }
        Ok(())
    }
}

fn to_json(value: &impl Serialize) -> Result<String> {
    serde_json::to_string(value).map_err(|e| ClientError::Decode {
        message: format!("print JSON: {e}"),
    })
}

/// One line to stdout; a closed pipe (`cairn list | head`) ends the program quietly
/// instead of panicking like `println!`.
fn say(line: impl Display) {
    let mut out = std::io::stdout().lock();
    if let Err(err) = writeln!(out, "{line}") {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: io: stdout: {err}");
        std::process::exit(i32::from(cairn_client::error::EXIT_OTHER));
    }
}

/// `key: value` lines with the values aligned.
fn print_fields(fields: &[(&str, String)]) {
    let width = fields.iter().map(|(name, _)| name.len()).max().unwrap_or(0) + 1;
    for (name, value) in fields {
        let line = format!("{:<width$} {value}", format!("{name}:"));
        say(line.trim_end());
    }
}

/// A table with a header row; columns padded to their widest cell. A row shorter than the
/// header (an error message) does not widen the columns: its last cell runs on.
fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows.iter().filter(|row| row.len() == headers.len()) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        say(cells.join("  ").trim_end());
    }
}

/// The wire name of an enum (`tombstone_cleared`, …).
fn wire_name(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        other => format!("{other:?}"),
    }
}

fn joined<T: Display>(items: &[T]) -> String {
    items
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_mutation(result: &MutationResult) {
    print_fields(&mutation_fields(result));
}

fn mutation_fields(r: &MutationResult) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("key", r.key.clone()),
        ("state", r.state.to_string()),
        ("version", r.version.to_string()),
        ("generation", r.generation.to_string()),
        ("forget_epoch", r.forget_epoch.to_string()),
        ("revision", r.revision.to_string()),
    ];
    if r.replayed {
        fields.push((
            "replayed",
            "true (original answer of this request_id)".into(),
        ));
    }
    if r.already == Some(true) {
        fields.push(("already", "true (nothing changed)".into()));
    }
    if let Some(tombstone) = &r.tombstone {
        fields.push(("tombstone", tombstone.id.clone()));
    }
    fields
}

fn print_batch(batch: &BatchResult) {
    print_fields(&[
        ("revision", batch.revision.to_string()),
        ("replayed", batch.replayed.to_string()),
    ]);
    let rows = batch.results.iter().map(|r| {
        vec![
            r.key.clone(),
            r.state.to_string(),
            r.version.to_string(),
            r.generation.to_string(),
            r.forget_epoch.to_string(),
        ]
    });
    print_table(
        &["KEY", "STATE", "VERSION", "GENERATION", "FORGET_EPOCH"],
        rows.collect(),
    );
}

fn print_read(read: &ReadResponse) {
    let r = &read.record;
    say(&r.rendered);
    let mut fields = vec![
        ("state", r.state.to_string()),
        ("version", r.version.to_string()),
        ("generation", r.generation.to_string()),
        ("forget_epoch", r.forget_epoch.to_string()),
        ("revision", r.revision.to_string()),
        ("create_revision", r.create_revision.to_string()),
        ("actor", r.meta.actor.clone()),
        ("updated_at", r.meta.updated_at.to_string()),
    ];
    let optional = [
        ("source", r.meta.source.clone()),
        (
            "anchors",
            (!r.meta.anchors.is_empty()).then(|| joined(&r.meta.anchors)),
        ),
        (
            "tags",
            (!r.meta.tags.is_empty()).then(|| joined(&r.meta.tags)),
        ),
        (
            "tombstone",
            r.tombstone
                .as_ref()
                .map(|t| format!("{} ({})", t.id, t.reason)),
        ),
        (
            "revocation",
            r.revocation
                .as_ref()
                .map(|v| format!("by {}: {}", v.actor, v.reason)),
        ),
        (
            "stale",
            (!r.stale.is_empty()).then(|| joined(&stale_anchors(read))),
        ),
        ("superseded_by", r.superseded_by.clone()),
    ];
    fields.extend(
        optional
            .into_iter()
            .filter_map(|(name, value)| Some((name, value?))),
    );
    fields.push(("served", served_line(&read.served)));
    print_fields(&fields);
}

fn stale_anchors(read: &ReadResponse) -> Vec<String> {
    read.record.stale.iter().map(|f| f.anchor.clone()).collect()
}

fn served_line(s: &cairn_client::api::Served) -> String {
    format!(
        "node {} ({}, {}, applied {}, leader contact {} ms ago)",
        s.node_id,
        s.role,
        s.consistency.as_str(),
        s.applied_index,
        s.ms_since_leader_contact
    )
}

fn print_probe(p: &ProbeResponse) {
    print_fields(&[
        ("key", p.key.clone()),
        ("state", p.state.to_string()),
        ("value_present", p.value_present.to_string()),
        ("retention_present", p.retention_present.to_string()),
        ("version", p.version.to_string()),
        ("generation", p.generation.to_string()),
        ("forget_epoch", p.forget_epoch.to_string()),
        ("tombstone_id", p.tombstone_id.clone().unwrap_or_default()),
        ("value_revision", p.value_revision.to_string()),
        ("log_purged_through", p.log_purged_through.to_string()),
        ("served", served_line(&p.served)),
    ]);
}

fn print_history(h: &HistoryResponse) {
    let rows = h.events.iter().map(|e| {
        vec![
            e.version.to_string(),
            e.revision.to_string(),
            wire_name(&e.kind),
            e.actor.clone(),
            e.at.to_string(),
            e.value_hash.as_deref().map(short_hash).unwrap_or_default(),
            e.reason.clone().unwrap_or_default(),
            event_detail(e),
        ]
    });
    print_table(
        &[
            "VERSION",
            "REVISION",
            "KIND",
            "ACTOR",
            "AT",
            "VALUE_HASH",
            "REASON",
            "DETAIL",
        ],
        rows.collect(),
    );
}

/// What a `superseded` or `stale_flagged` event records besides its reason.
fn event_detail(e: &HistoryEvent) -> String {
    match (&e.by, &e.anchor, &e.observed_hash) {
        (Some(by), _, _) => format!("by {by}"),
        (None, Some(anchor), Some(hash)) => format!("{anchor} observed {}", short_hash(hash)),
        (None, Some(anchor), None) => anchor.clone(),
        _ => String::new(),
    }
}

/// Enough of a sha256 to tell values apart by eye; `--json` has the whole hash.
fn short_hash(hash: &str) -> String {
    hash.chars().take(12).collect()
}

fn print_tombstone(t: &Tombstone) {
    print_fields(&[
        ("id", t.id.clone()),
        ("key", t.key.clone()),
        ("actor", t.actor.clone()),
        ("reason", t.reason.clone()),
        (
            "value_hash",
            t.value_hash
                .clone()
                .unwrap_or_else(|| "none (pre-emptive)".into()),
        ),
        ("forgotten_at", t.forgotten_at.to_string()),
        ("version", t.version.to_string()),
        ("generation", t.generation.to_string()),
        ("revision", t.revision.to_string()),
    ]);
}

fn print_list(list: &ListResponse) {
    let rows = list.items.iter().map(|r| {
        vec![
            r.key.clone(),
            r.state.to_string(),
            r.version.to_string(),
            r.revision.to_string(),
            r.rendered.clone(),
        ]
    });
    print_table(
        &["KEY", "STATE", "VERSION", "REVISION", "RENDERED"],
        rows.collect(),
    );
    if let Some(after) = &list.next_after {
        say(format_args!("more: --after {after}"));
    }
}

fn print_recall(recall: &RecallResponse) {
    for note in &recall.notes {
        say(&note.rendered);
        say(format_args!("    matched: {}", joined(&note.matched)));
    }
}

fn print_watch_event(e: &WatchEvent) {
    say(format_args!(
        "{} {} {} state={} version={} generation={} forget_epoch={}",
        e.revision,
        wire_name(&e.kind),
        e.key,
        e.state,
        e.version,
        e.generation,
        e.forget_epoch
    ));
}

fn print_membership(m: &MembershipResponse) {
    print_fields(&[
        ("voters", joined(&m.voters)),
        ("learners", joined(&m.learners)),
    ]);
    let rows = m
        .nodes
        .iter()
        .map(|n| vec![n.id.to_string(), n.client_addr.clone(), n.peer_addr.clone()]);
    print_table(&["ID", "CLIENT_ADDR", "PEER_ADDR"], rows.collect());
}

fn print_status_table(rows: &[(String, Result<ClusterStatus>)]) {
    let headers = [
        "ENDPOINT",
        "ID",
        "ROLE",
        "LEADER",
        "TERM",
        "LAST_LOG",
        "COMMIT",
        "APPLIED",
        "PURGED",
        "CONTACT_MS",
    ];
    let table = rows.iter().map(|(endpoint, answer)| match answer {
        Ok(s) => vec![
            endpoint.clone(),
            s.node_id.to_string(),
            s.role.clone(),
            s.leader_id.map_or("-".into(), |id| id.to_string()),
            s.term.to_string(),
            s.last_log_index.to_string(),
            s.commit_index.to_string(),
            s.applied_index.to_string(),
            s.log_purged_through.to_string(),
            s.ms_since_leader_contact
                .map_or("-".into(), |ms| ms.to_string()),
        ],
        Err(err) => vec![endpoint.clone(), format!("error: {err}")],
    });
    print_table(&headers, table.collect());
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> std::result::Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cairn").chain(args.iter().copied()))
    }

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
    fn write_flags_build_the_request() {
        let cli = parse(&[
            "write",
            "k",
            "{\"a\":1}",
            "--actor",
            "agent",
            "--anchor",
            "path:src/",
            "--anchor",
            "tag:x",
            "--tag",
            "t",
            "--expected-version",
            "0",
            "--clear-tombstone",
            "--request-id",
            "r1",
        ])
        .unwrap();
        let Command::Write(args) = cli.command else {
            panic!()
        };
        let request = args.request();
        assert_eq!(request.value, json!({"a": 1}));
        assert_eq!(request.actor, "agent");
        assert_eq!(
            request.anchors,
            Some(vec!["path:src/".into(), "tag:x".into()])
        );
        assert_eq!(request.tags, Some(vec!["t".into()]));
        assert_eq!(request.expected_version, Some(0));
        assert!(request.clear_tombstone && !request.override_revocation);
        assert_eq!(request.request_id.as_deref(), Some("r1"));
    }

    #[test]
    fn values_are_json_when_they_parse() {
        assert_eq!(parse_value("42"), json!(42));
        assert_eq!(parse_value("\"42\""), json!("42"));
        assert_eq!(parse_value("hello world"), json!("hello world"));
        assert_eq!(parse_value("[1,"), json!("[1,"));
    }

    #[test]
    fn forget_and_revoke_require_a_reason() {
        assert!(parse(&["forget", "k"]).is_err());
        assert!(parse(&["revoke", "k"]).is_err());
        let cli = parse(&["forget", "k", "--reason", "wrong", "--actor", "a"]).unwrap();
        let Command::Forget(args) = cli.command else {
            panic!()
        };
        let request = args.forget();
        assert_eq!(
            (request.reason.as_str(), request.actor.as_str()),
            ("wrong", "a")
        );
        assert!(parse(&["reinstate", "k"]).is_ok());
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
    fn list_and_recall_arguments() {
        let cli = parse(&[
            "list", "p/", "--state", "revoked", "--state", "active", "--limit", "5",
        ])
        .unwrap();
        let Command::List(args) = cli.command else {
            panic!()
        };
        let request = args.request();
        assert_eq!(request.states, Some(vec![State::Revoked, State::Active]));
        assert_eq!((request.prefix.as_str(), request.limit), ("p/", Some(5)));
        assert!(parse(&["list", "--state", "gone"]).is_err());
        assert!(parse(&["recall"]).is_err(), "at least one cue");
        assert!(parse(&["recall", "path:a", "topic:b", "--prefix", "p"]).is_ok());
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
        let Command::Cluster(ClusterCommand::Init { nodes }) = cli.command else {
            panic!()
        };
        assert!(nodes.is_empty());
        let local = local_nodes();
        assert_eq!(local.len(), 3);
        assert_eq!(
            (
                local[2].id,
                local[2].client_addr.as_str(),
                local[2].peer_addr.as_str()
            ),
            (3, "127.0.0.1:7403", "127.0.0.1:7503")
        );
        assert!(parse(&["cluster", "join", "--id", "4", "--client-addr", "a:1"]).is_err());
    }

    #[test]
    fn session_file_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session");
        assert_eq!(load_session(&path).unwrap(), Session::new(), "missing file");
        std::fs::write(&path, "garbage!").unwrap();
        assert_eq!(load_session(&path).unwrap_err().exit_code(), 2);
        let mut session = Session::new();
        session.observe_key(
            "k",
            cairn_client::KeyMark {
                generation: 1,
                forget_epoch: 1,
                version: 2,
                revision: 9,
            },
        );
        let client = Client::new(vec!["127.0.0.1:1".into()])
            .unwrap()
            .with_session(session.clone());
        save_session(&path, &client).unwrap();
        assert_eq!(load_session(&path).unwrap(), session);
    }

    #[test]
    fn batch_files_are_strict() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("batch.json");
        std::fs::write(
            &path,
            r#"{"ops":[{"op":"forget","key":"k","actor":"a","reason":"r"}]}"#,
        )
        .unwrap();
        assert_eq!(read_batch(&path).unwrap().ops.len(), 1);
        std::fs::write(&path, r#"{"ops":[{"op":"erase","key":"k"}]}"#).unwrap();
        assert_eq!(read_batch(&path).unwrap_err().exit_code(), 2);
        assert_eq!(
            read_batch(&dir.path().join("missing"))
                .unwrap_err()
                .exit_code(),
            1
        );
    }
}
