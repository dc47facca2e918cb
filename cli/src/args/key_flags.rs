//! The flags of the key commands (everything but `cairn cluster`).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use cairn_client::api::State;

use super::{parse_actor, parse_listed_state, parse_recalled_state};
use crate::help::{FORGET_HELP, READ_HELP, RECALL_HELP, REVOKE_HELP, WATCH_HELP, WRITE_HELP};

/// The commands on keys, run by [`crate::keys`].
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
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
}

/// Flags every mutation takes.
#[derive(Debug, Args)]
pub struct Common {
    /// Who makes the change, 1-128 bytes [default: with a token, the principal's name
    /// (any other name is refused); without one, `cli`]. An empty one is refused.
    #[arg(long, env = "CAIRN_ACTOR", value_parser = parse_actor)]
    pub actor: Option<String>,
    /// Apply only if the key is at this version (0: only if absent).
    #[arg(long)]
    pub expected_version: Option<u64>,
    /// Reject if the key was forgotten, revoked or re-created after this revision.
    #[arg(long)]
    pub based_on_revision: Option<u64>,
    /// Idempotency id; reuse it to retry after an unknown outcome [default: a new 128-bit
    /// hex id, the time in ms then 80 random bits].
    #[arg(long)]
    pub request_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct WriteArgs {
    pub key: String,
    /// JSON if it parses (42, -1, true, {"a":1}, '"quoted"'), else taken as a string;
    /// - reads it from stdin, as it is (a final newline included), for a large value.
    #[arg(allow_negative_numbers = true)]
    pub value: String,
    #[command(flatten)]
    pub common: Common,
    /// Where the value came from.
    #[arg(long)]
    pub source: Option<String>,
    /// Anchor kind:value (path, symbol, tag, topic, url); repeatable.
    #[arg(long = "anchor")]
    pub anchors: Vec<String>,
    /// Tag; repeatable.
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Re-create a forgotten key (starts a new generation).
    #[arg(long)]
    pub clear_tombstone: bool,
    /// Overwrite a revoked key.
    #[arg(long)]
    pub override_revocation: bool,
    /// Why (recorded in the history; expected with --clear-tombstone/--override-revocation).
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReasonArgs {
    pub key: String,
    /// Why (required, kept with the tombstone or revocation).
    #[arg(long)]
    pub reason: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct OptionalReasonArgs {
    pub key: String,
    /// Why (optional, kept in the history event).
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct FlagStaleArgs {
    pub key: String,
    /// The anchor that changed (kind:value).
    #[arg(long)]
    pub anchor: String,
    /// Hash of the anchor's content as observed now.
    #[arg(long)]
    pub observed_hash: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct SupersedeArgs {
    pub key: String,
    /// The key that replaces KEY.
    #[arg(long)]
    pub by: String,
    /// Why (optional, kept in the history event).
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct BatchArgs {
    /// JSON file, or - for stdin.
    pub file: PathBuf,
}

/// Flags every read takes besides the global `--consistency` and `--max-staleness-ms`.
#[derive(Debug, Args)]
pub struct ReadFlags {
    /// Served only once the node has applied this revision (e.g. a write's `revision`);
    /// it waits a bounded time for it, else 503 stale_read.
    #[arg(long, value_name = "REVISION")]
    pub min_revision: Option<u64>,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    pub key: String,
    #[command(flatten)]
    pub read: ReadFlags,
}

#[derive(Debug, Args)]
pub struct TombstoneArgs {
    pub id: String,
    #[command(flatten)]
    pub read: ReadFlags,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only keys that start with this [default: every key].
    #[arg(default_value = "", hide_default_value = true)]
    pub prefix: String,
    /// Only keys in this state (active, revoked, forgotten); repeatable.
    #[arg(long = "state", value_parser = parse_listed_state)]
    pub states: Vec<State>,
    /// Most items on the page, 1 to 1000 [default: 100].
    #[arg(long)]
    pub limit: Option<u64>,
    /// Continue after this key (the `next_after` of the previous page).
    #[arg(long)]
    pub after: Option<String>,
    #[command(flatten)]
    pub read: ReadFlags,
}

#[derive(Debug, Args)]
pub struct RecallArgs {
    /// Cues kind:value.
    #[arg(required = true)]
    pub cues: Vec<String>,
    /// Only notes whose key starts with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Only notes in this state (active, revoked); repeatable [default: active and
    /// revoked].
    #[arg(long = "include", value_name = "STATE", value_parser = parse_recalled_state)]
    pub include: Vec<State>,
    /// Most notes, 1 to 1000 [default: 100].
    #[arg(long)]
    pub limit: Option<u64>,
    #[command(flatten)]
    pub read: ReadFlags,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Only changes of keys that start with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// First revision to deliver (inclusive) [default: the next one].
    #[arg(long)]
    pub from_revision: Option<u64>,
}
