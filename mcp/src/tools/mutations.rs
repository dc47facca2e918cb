//! The mutation tools: `write`, `forget`, `revoke`, `reinstate`, `supersede`,
//! `flag_stale`. Each is one Raft entry on the cluster, applied exactly once.

use cairn_client::api::{
    FlagStaleRequest, ForgetRequest, ReinstateRequest, RevokeRequest, SupersedeRequest,
    WriteRequest,
};
use rmcp::handler::server::tool::{schema_for_output, Extension};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Call, MutationArgs};
use crate::outcome::{MutationOutput, ToolAnswer};
use crate::server::CairnMcp;

/// Arguments of `write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The memory key: 1-512 bytes of UTF-8, e.g. `project/db/engine`.
    #[schemars(length(min = 1, max = 512))]
    pub key: String,
    /// The note: any JSON value (a string for plain text).
    pub value: Value,
    /// What the note is about, as `kind:value` anchors (kinds `path`, `symbol`, `topic`,
    /// `tag`, `url`; a `path:` ending in `/` covers everything under it), e.g.
    /// `path:src/db.rs`, `symbol:Db::open`, `topic:migrations`. `recall` finds notes by
    /// them, and revoked notes sharing one come back with this write.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub anchors: Option<Vec<String>>,
    /// Free labels.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Where the knowledge comes from (a file, a URL, a conversation).
    #[serde(default)]
    pub source: Option<String>,
    /// Write only if the key is at this version (0: only if it was never written).
    #[serde(default)]
    pub expected_version: Option<u64>,
    /// The revision the data was derived from: refused (`stale_write`) if the key was
    /// forgotten, revoked or re-created after it.
    #[serde(default)]
    pub based_on_revision: Option<u64>,
    /// Re-establish a forgotten key. Only with verified new knowledge: forgotten
    /// knowledge must not be re-derived without verification.
    #[serde(default)]
    pub clear_tombstone: bool,
    /// Write over a revoked belief. Only with new evidence that it is right after all.
    #[serde(default)]
    pub override_revocation: bool,
    /// Why, recorded in the key's history (expected with `clear_tombstone` or
    /// `override_revocation`).
    #[serde(default)]
    pub reason: Option<String>,
    /// Idempotency key (at most 128 bytes): a call repeated with the same request_id and
    /// arguments is applied once. Omit it and the server makes one per call.
    #[schemars(length(min = 1, max = 128))]
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Arguments of `forget`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetArgs {
    /// The memory key.
    #[schemars(length(min = 1, max = 512))]
    pub key: String,
    /// Why it is forgotten (required): kept forever in the tombstone.
    pub reason: String,
    /// Forget only if the key is at this version.
    #[serde(default)]
    pub expected_version: Option<u64>,
    /// Refused (`stale_write`) if the key was forgotten, revoked or re-created after
    /// this revision.
    #[serde(default)]
    pub based_on_revision: Option<u64>,
    /// Idempotency key (at most 128 bytes); omit it and the server makes one per call.
    #[schemars(length(min = 1, max = 128))]
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Arguments of `revoke`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RevokeArgs {
    /// The memory key.
    #[schemars(length(min = 1, max = 512))]
    pub key: String,
    /// Why the belief is wrong (required): delivered with its warning.
    pub reason: String,
    /// Revoke only if the key is at this version.
    #[serde(default)]
    pub expected_version: Option<u64>,
    /// Refused (`stale_write`) if the key was forgotten, revoked or re-created after
    /// this revision.
    #[serde(default)]
    pub based_on_revision: Option<u64>,
    /// Idempotency key (at most 128 bytes); omit it and the server makes one per call.
    #[schemars(length(min = 1, max = 128))]
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Arguments of `reinstate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReinstateArgs {
    /// The memory key.
    #[schemars(length(min = 1, max = 512))]
    pub key: String,
    /// Why the revoked belief holds after all.
    #[serde(default)]
    pub reason: Option<String>,
    /// Reinstate only if the key is at this version.
    #[serde(default)]
    pub expected_version: Option<u64>,
    /// Refused (`stale_write`) if the key was forgotten, revoked or re-created after
    /// this revision.
    #[serde(default)]
    pub based_on_revision: Option<u64>,
    /// Idempotency key (at most 128 bytes); omit it and the server makes one per call.
    #[schemars(length(min = 1, max = 128))]
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Arguments of `supersede`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SupersedeArgs {
    /// The key being replaced.
    #[schemars(length(min = 1, max = 512))]
    pub key: String,
    /// The key that replaces it.
    #[schemars(length(min = 1, max = 512))]
    pub by: String,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
    /// Supersede only if the key is at this version.
    #[serde(default)]
    pub expected_version: Option<u64>,
    /// Refused (`stale_write`) if the key was forgotten, revoked or re-created after
    /// this revision.
    #[serde(default)]
    pub based_on_revision: Option<u64>,
    /// Idempotency key (at most 128 bytes); omit it and the server makes one per call.
    #[schemars(length(min = 1, max = 128))]
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Arguments of `flag_stale`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FlagStaleArgs {
    /// The memory key.
    #[schemars(length(min = 1, max = 512))]
    pub key: String,
    /// The anchor that changed since the note was written, e.g. `path:src/db.rs`.
    pub anchor: String,
    /// A hash of what the anchor holds now (e.g. the file's sha256).
    pub observed_hash: String,
    /// Flag only if the key is at this version.
    #[serde(default)]
    pub expected_version: Option<u64>,
    /// Refused (`stale_write`) if the key was forgotten, revoked or re-created after
    /// this revision.
    #[serde(default)]
    pub based_on_revision: Option<u64>,
    /// Idempotency key (at most 128 bytes); omit it and the server makes one per call.
    #[schemars(length(min = 1, max = 128))]
    #[serde(default)]
    pub request_id: Option<String>,
}

impl MutationArgs for WriteArgs {
    type Request = WriteRequest;
    fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }
    fn anchors(&self) -> &[String] {
        self.anchors.as_deref().unwrap_or_default()
    }
    fn written_key(&self) -> Option<&str> {
        Some(&self.key)
    }
    fn overrides_revocation(&self) -> bool {
        self.override_revocation
    }
    fn into_request(self, actor: String, request_id: String) -> WriteRequest {
        WriteRequest {
            key: self.key,
            value: self.value,
            actor,
            source: self.source,
            anchors: self.anchors,
            tags: self.tags,
            expected_version: self.expected_version,
            based_on_revision: self.based_on_revision,
            clear_tombstone: self.clear_tombstone,
            override_revocation: self.override_revocation,
            reason: self.reason,
            request_id: Some(request_id),
        }
    }
}

impl MutationArgs for ForgetArgs {
    type Request = ForgetRequest;
    fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }
    fn into_request(self, actor: String, request_id: String) -> ForgetRequest {
        ForgetRequest {
            key: self.key,
            actor,
            reason: self.reason,
            expected_version: self.expected_version,
            based_on_revision: self.based_on_revision,
            request_id: Some(request_id),
        }
    }
}

impl MutationArgs for RevokeArgs {
    type Request = RevokeRequest;
    fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }
    fn into_request(self, actor: String, request_id: String) -> RevokeRequest {
        RevokeRequest {
            key: self.key,
            actor,
            reason: self.reason,
            expected_version: self.expected_version,
            based_on_revision: self.based_on_revision,
            request_id: Some(request_id),
        }
    }
}

impl MutationArgs for ReinstateArgs {
    type Request = ReinstateRequest;
    fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }
    fn into_request(self, actor: String, request_id: String) -> ReinstateRequest {
        ReinstateRequest {
            key: self.key,
            actor,
            reason: self.reason,
            expected_version: self.expected_version,
            based_on_revision: self.based_on_revision,
            request_id: Some(request_id),
        }
    }
}

impl MutationArgs for SupersedeArgs {
    type Request = SupersedeRequest;
    fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }
    fn into_request(self, actor: String, request_id: String) -> SupersedeRequest {
        SupersedeRequest {
            key: self.key,
            by: self.by,
            actor,
            reason: self.reason,
            expected_version: self.expected_version,
            based_on_revision: self.based_on_revision,
            request_id: Some(request_id),
        }
    }
}

impl MutationArgs for FlagStaleArgs {
    type Request = FlagStaleRequest;
    fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }
    fn into_request(self, actor: String, request_id: String) -> FlagStaleRequest {
        FlagStaleRequest {
            key: self.key,
            actor,
            anchor: self.anchor,
            observed_hash: self.observed_hash,
            expected_version: self.expected_version,
            based_on_revision: self.based_on_revision,
            request_id: Some(request_id),
        }
    }
}

#[tool_router(router = mutation_tools, vis = "pub(crate)")]
impl CairnMcp {
    /// Store a note under a key (a new key, or the next version of an active one).
    /// Anchor it to what it is about so `recall` finds it. The answer also carries the
    /// warnings of revoked notes sharing an anchor with it: read them before relying on
    /// what you wrote. A forgotten key refuses (`key_forgotten`), a revoked one too
    /// (`key_revoked`, with its warning).
    #[tool(
        name = "write",
        output_schema = schema_for_output::<MutationOutput>(),
        annotations(
            title = "Write a note",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn write(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<WriteArgs>,
    ) -> ToolAnswer {
        self.mutation(&call, args).await
    }

    /// Forget a key: its value is erased from every replica and a tombstone with your
    /// reason is kept forever. Use it for what must not be remembered (wrong, private,
    /// obsolete). Forgetting again changes nothing (`already: true`).
    #[tool(
        name = "forget",
        output_schema = schema_for_output::<MutationOutput>(),
        annotations(
            title = "Forget a key",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn forget(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<ForgetArgs>,
    ) -> ToolAnswer {
        self.mutation(&call, args).await
    }

    /// Revoke a belief found wrong: the note stays, marked [REVOKED] with your reason, and
    /// is delivered as a warning to whoever approaches the same topic, so the mistake is
    /// not derived again. `reinstate` undoes it.
    #[tool(
        name = "revoke",
        output_schema = schema_for_output::<MutationOutput>(),
        annotations(
            title = "Revoke a wrong belief",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn revoke(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<RevokeArgs>,
    ) -> ToolAnswer {
        self.mutation(&call, args).await
    }

    /// Reinstate a revoked note: it is active again. Reinstating an active note changes
    /// nothing (`already: true`).
    #[tool(
        name = "reinstate",
        output_schema = schema_for_output::<MutationOutput>(),
        annotations(
            title = "Reinstate a revoked note",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn reinstate(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<ReinstateArgs>,
    ) -> ToolAnswer {
        self.mutation(&call, args).await
    }

    /// Mark a note as replaced by another key: it renders [SUPERSEDED by KEY2].
    #[tool(
        name = "supersede",
        output_schema = schema_for_output::<MutationOutput>(),
        annotations(
            title = "Supersede a note",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn supersede(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<SupersedeArgs>,
    ) -> ToolAnswer {
        self.mutation(&call, args).await
    }

    /// Flag a note as stale: an anchor it depends on (e.g. a file) changed since it was
    /// written. It renders [STALE: ANCHOR changed since written; verify] until the next
    /// write of the key.
    #[tool(
        name = "flag_stale",
        output_schema = schema_for_output::<MutationOutput>(),
        annotations(
            title = "Flag a note as stale",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn flag_stale(
        &self,
        Extension(call): Extension<Call>,
        Parameters(args): Parameters<FlagStaleArgs>,
    ) -> ToolAnswer {
        self.mutation(&call, args).await
    }
}
