//! The read tools: `read`, `recall`, `list`, `history`, `probe`. Each caller's client
//! keeps a session (SPEC §3), so a read never shows less than what that caller already
//! wrote or saw, on any node.

use std::collections::HashSet;

use cairn_client::api::{
    Consistency, EventKind, HistoryEvent, HistoryResponse, ListRequest, ListResponse,
    ProbeResponse, ReadOptions, ReadResponse, RecallRequest, RecallResponse, State,
};
use cairn_client::{Client, ClientError};
use rmcp::handler::server::tool::{schema_for_output, Extension};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{revoked_warning, Call, ReadArgs};
use crate::outcome::{ToolAnswer, Warned};
use crate::server::CairnMcp;

/// Arguments of `read`, `history` and `probe`: one key.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyArgs {
    /// The memory key.
    #[schemars(length(min = 1, max = 512))]
    pub key: String,
    /// `linearizable` (default: the latest committed state), `bounded` (a nearby
    /// replica, at most `max_staleness_ms` behind) or `any` (the replica's local state).
    #[serde(default)]
    pub consistency: Option<Consistency>,
    /// With `bounded`: how far behind the replica may be, in milliseconds (default 1000).
    #[serde(default)]
    pub max_staleness_ms: Option<u64>,
}

/// Arguments of `recall`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallArgs {
    /// 1 to 64 cues in anchor form `kind:value` (kinds `path`, `symbol`, `topic`, `tag`,
    /// `url`): what you are about to act on, e.g. `path:src/db/schema.rs`,
    /// `symbol:Db::open`, `topic:migrations`. A `path:` note anchored on a directory
    /// (`path:src/db/`) matches every path under it.
    #[schemars(length(min = 1, max = 64))]
    pub cues: Vec<String>,
    /// Only keys starting with this prefix.
    #[serde(default)]
    pub prefix: Option<String>,
    /// States to include: `active` and `revoked` by default (forgotten notes are never
    /// recalled).
    #[serde(default)]
    #[schemars(with = "Option<Vec<cairn_api::RecallableState>>")]
    pub include: Option<Vec<State>>,
    /// At most this many notes, 1 to 1000 (default 100).
    #[schemars(range(min = 1, max = 1000))]
    #[serde(default)]
    pub limit: Option<u32>,
    /// `linearizable` (default), `bounded` or `any`.
    #[serde(default)]
    pub consistency: Option<Consistency>,
    /// With `bounded`: how far behind the replica may be, in milliseconds (default 1000).
    #[serde(default)]
    pub max_staleness_ms: Option<u64>,
}

/// Arguments of `list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Keys starting with this prefix (`""` for all).
    pub prefix: String,
    /// Only keys in these states (`active`, `revoked`, `forgotten`).
    #[serde(default)]
    pub states: Option<Vec<State>>,
    /// At most this many keys, 1 to 1000 (default 100).
    #[schemars(range(min = 1, max = 1000))]
    #[serde(default)]
    pub limit: Option<u32>,
    /// Continue after this key: the `next_after` of the previous page.
    #[serde(default)]
    pub after: Option<String>,
    /// `linearizable` (default), `bounded` or `any`.
    #[serde(default)]
    pub consistency: Option<Consistency>,
    /// With `bounded`: how far behind the replica may be, in milliseconds (default 1000).
    #[serde(default)]
    pub max_staleness_ms: Option<u64>,
}

/// `read`.
#[derive(Debug)]
pub struct ReadKey(KeyArgs);
/// `history`.
#[derive(Debug)]
pub struct HistoryOf(KeyArgs);
/// `probe`.
#[derive(Debug)]
pub struct ProbeKey(KeyArgs);

impl KeyArgs {
    fn options(&self) -> ReadOptions {
        ReadOptions {
            consistency: self.consistency,
            max_staleness_ms: self.max_staleness_ms,
            ..ReadOptions::default()
        }
    }
}

impl ReadArgs for ReadKey {
    type Output = ReadResponse;
    async fn run(self, client: &Client) -> Result<ReadResponse, ClientError> {
        client.read(&self.0.key, self.0.options()).await
    }
}

impl ReadArgs for HistoryOf {
    type Output = Warned<HistoryResponse>;
    async fn run(self, client: &Client) -> Result<Self::Output, ClientError> {
        let output = client.history(&self.0.key, self.0.options()).await?;
        let revoked = revoked_by_history(&output.events);
        let warning = self.0.warning_if(revoked, client).await;
        Ok(Warned { output, warning })
    }
}

impl ReadArgs for ProbeKey {
    type Output = Warned<ProbeResponse>;
    async fn run(self, client: &Client) -> Result<Self::Output, ClientError> {
        let output = client.probe(&self.0.key, self.0.options()).await?;
        let warning = self
            .0
            .warning_if(output.state == State::Revoked, client)
            .await;
        Ok(Warned { output, warning })
    }
}

impl KeyArgs {
    /// The key's rendered warning when the answer says it is `revoked`, read with the
    /// same options.
    async fn warning_if(&self, revoked: bool, client: &Client) -> Option<String> {
        match revoked {
            true => revoked_warning(client, &self.key, self.options()).await,
            false => None,
        }
    }
}

/// Whether a key's events, oldest first, leave it revoked: a revoke holds until a
/// reinstate, a write or a forget; stale flags and supersedes leave the state as it is.
fn revoked_by_history(events: &[HistoryEvent]) -> bool {
    events
        .iter()
        .fold(false, |revoked, event| match event.kind {
            EventKind::Revoked => true,
            EventKind::StaleFlagged | EventKind::Superseded => revoked,
            EventKind::Written
            | EventKind::Reinstated
            | EventKind::Forgotten
            | EventKind::TombstoneCleared => false,
        })
}

impl ReadArgs for RecallArgs {
    type Output = RecallResponse;
    async fn run(self, client: &Client) -> Result<RecallResponse, ClientError> {
        let mut request = RecallRequest::new(self.cues);
        request.prefix = self.prefix;
        request.include = self.include;
        request.limit = self.limit.map(u64::from);
        request.consistency = self.consistency;
        request.max_staleness_ms = self.max_staleness_ms;
        let answer = client.recall(request.clone()).await?;
        if !may_have_crowded_out_revoked(&request, &answer) {
            // Only revoked notes, or none asked for: nothing to reorder.
            return Ok(answer);
        }
        let mut revoked_only = request;
        revoked_only.include = Some(vec![State::Revoked]);
        let revoked = client.recall(revoked_only).await?;
        Ok(revoked_before_the_rest(answer, revoked, self.limit))
    }
}

/// Whether notes that are not revoked may have taken the place of revoked ones in an
/// answer: the node ranks by matched cues before state and then cuts at `limit` (or at
/// its byte bound for a page), so a revoked note that matched fewer cues can fall off a
/// full answer, and SPEC §9 delivers every revoked warning first.
fn may_have_crowded_out_revoked(request: &RecallRequest, answer: &RecallResponse) -> bool {
    let wants_revoked = request
        .include
        .as_ref()
        .is_none_or(|states| states.contains(&State::Revoked));
    wants_revoked && answer.notes.iter().any(|note| note.state != State::Revoked)
}

/// The revoked notes (asked for alone, so none is crowded out), then the rest of `answer`,
/// at most `limit` in all (without one, as many as the larger answer). A key in both is
/// taken from `revoked`, the later read.
fn revoked_before_the_rest(
    answer: RecallResponse,
    revoked: RecallResponse,
    limit: Option<u32>,
) -> RecallResponse {
    let cap = limit.map_or(answer.notes.len().max(revoked.notes.len()), |l| l as usize);
    let revoked_keys: HashSet<String> = revoked.notes.iter().map(|n| n.key.clone()).collect();
    let rest = answer
        .notes
        .into_iter()
        .filter(|note| note.state != State::Revoked && !revoked_keys.contains(&note.key));
    RecallResponse {
        notes: revoked.notes.into_iter().chain(rest).take(cap).collect(),
        served: revoked.served,
    }
}

impl ReadArgs for ListArgs {
    type Output = ListResponse;
    async fn run(self, client: &Client) -> Result<ListResponse, ClientError> {
        let mut request = ListRequest::new(self.prefix);
        request.states = self.states;
        request.limit = self.limit.map(u64::from);
        request.after = self.after;
        request.consistency = self.consistency;
        request.max_staleness_ms = self.max_staleness_ms;
        client.list(request).await
    }
}

#[tool_router(router = read_tools, vis = "pub(crate)")]
impl CairnMcp {
    /// Recall what is known before acting on a path, a symbol or a topic: the notes whose
    /// anchors match your cues, revoked warnings first. A [REVOKED] note is a belief
    /// found wrong: do not re-derive it without verification.
    #[tool(
        name = "recall",
        output_schema = schema_for_output::<RecallResponse>(),
        annotations(title = "Recall notes by anchor", read_only_hint = true, open_world_hint = false)
    )]
    async fn recall(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<RecallArgs>,
    ) -> ToolAnswer {
        self.read(&call, args).await
    }

    /// Read a key: its state, value, metadata and the rendered note (a revoked note reads
    /// as its warning; a forgotten one as its tombstone, never its value).
    #[tool(
        name = "read",
        output_schema = schema_for_output::<ReadResponse>(),
        annotations(title = "Read a key", read_only_hint = true, open_world_hint = false)
    )]
    async fn read_key(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<KeyArgs>,
    ) -> ToolAnswer {
        self.read(&call, ReadKey(args)).await
    }

    /// List keys under a prefix, in key order, a page at a time.
    #[tool(
        name = "list",
        output_schema = schema_for_output::<ListResponse>(),
        annotations(title = "List keys", read_only_hint = true, open_world_hint = false)
    )]
    async fn list(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<ListArgs>,
    ) -> ToolAnswer {
        self.read(&call, args).await
    }

    /// A key's history, oldest first: every write, forget, revoke, reinstate, stale flag
    /// and supersede, with its actor and reason (values are never kept there).
    #[tool(
        name = "history",
        output_schema = schema_for_output::<HistoryResponse>(),
        annotations(title = "History of a key", read_only_hint = true, open_world_hint = false)
    )]
    async fn history(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<KeyArgs>,
    ) -> ToolAnswer {
        self.read(&call, HistoryOf(args)).await
    }

    /// Probe a key on the replica that serves the read: whether its value bytes and its
    /// retention record are present (after a forget, the value is gone).
    #[tool(
        name = "probe",
        output_schema = schema_for_output::<ProbeResponse>(),
        annotations(title = "Probe a key", read_only_hint = true, open_world_hint = false)
    )]
    async fn probe(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<KeyArgs>,
    ) -> ToolAnswer {
        self.read(&call, ProbeKey(args)).await
    }
}
