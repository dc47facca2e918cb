//! What a tool call answers: its structured output, its text for the model, and the
//! error results.
//!
//! A success carries the output twice: as `structuredContent` (validated by clients
//! against the tool's output schema) and as text. The text has two blocks: first the
//! lines a model should read, every revoked note's rendered warning before anything else
//! (SPEC §4: warning first, so truncation cannot drop it), then the JSON.
//!
//! A failure the model should see and act on (a 4xx of SPEC §5, `outcome_unknown`, a
//! refused token) is a result with `isError: true` whose text names the error code and
//! explains it; a `key_revoked` refusal starts with the note's rendered warning. A
//! cluster that could not be reached at all is a protocol error.

use cairn_client::api::{
    HistoryResponse, ListResponse, MutationResult, ProbeResponse, ReadResponse, RecallNote,
    RecallResponse, State,
};
use cairn_client::text::printable;
use cairn_client::ClientError;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::ErrorData;
use schemars::JsonSchema;
use serde::Serialize;

/// What a tool answers, or the protocol error that stops it.
pub type ToolAnswer = Result<CallToolResult, ErrorData>;

/// The output of the mutation tools (`write`, `forget`, `revoke`, `reinstate`,
/// `supersede`, `flag_stale`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct MutationOutput {
    #[serde(flatten)]
    pub result: MutationResult,
    /// The request_id the mutation ran under. Calling again with the same arguments and
    /// this request_id applies nothing twice: the answer is the original, `replayed: true`.
    pub request_id: String,
    /// Revoked notes the written note meets: the key's own, when the write overrode its
    /// revocation, then those sharing an anchor, ranked as recall ranks them. Beliefs
    /// found wrong before: do not re-derive them without verification.
    pub warnings: Vec<RecallNote>,
}

/// A tool output's lines for the model, warnings first.
pub trait Present: Serialize + JsonSchema {
    fn lines(&self) -> Vec<String>;
}

/// The success result of `output`.
pub fn success(output: &impl Present) -> ToolAnswer {
    let json = serde_json::to_value(output)
        .map_err(|e| ErrorData::internal_error(format!("encode the tool output: {e}"), None))?;
    let mut result = CallToolResult::success(vec![
        ContentBlock::text(shown(&output.lines())),
        ContentBlock::text(json.to_string()),
    ]);
    result.structured_content = Some(json);
    Ok(result)
}

/// The answer to a failed cluster call: a tool error result the model reads, or a
/// protocol error when no node answered at all.
pub fn failure(err: ClientError) -> ToolAnswer {
    failure_with_warnings(err, Vec::new())
}

/// Whether `err` means no node answered at all (a protocol error, not a tool result).
pub fn unreachable(err: &ClientError) -> bool {
    matches!(
        err,
        ClientError::Transport { .. }
            | ClientError::Http { .. }
            | ClientError::Decode { .. }
            | ClientError::Io { .. }
    )
}

/// [`failure`], with the rendered warnings of revoked notes the refused mutation met
/// first (a refused write still reached the derivation site; SPEC §9). Each warning is
/// given once, also one already in the error (the key's own, for `key_revoked`).
pub fn failure_with_warnings(err: ClientError, mut warnings: Vec<String>) -> ToolAnswer {
    if unreachable(&err) {
        return Err(ErrorData::internal_error(
            format!("cairn cluster unavailable: {err}"),
            None,
        ));
    }
    let own = match &err {
        ClientError::KeyRevoked { rendered, .. } => rendered.as_deref(),
        _ => None,
    };
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|rendered| Some(rendered.as_str()) != own && seen.insert(rendered.clone()));
    let mut lines = warnings;
    lines.extend(error_lines(&err));
    Ok(CallToolResult::error(vec![ContentBlock::text(shown(
        &lines,
    ))]))
}

/// The lines of a text block, one per line: a value or reason that holds a line break or
/// another control character shows it as an escape ([`printable`]), so it cannot pose as a
/// note of its own (an active `[KEY] …` line under a revoked one).
fn shown(lines: &[String]) -> String {
    let shown: Vec<_> = lines.iter().map(|line| printable(line)).collect();
    shown.join("\n")
}

/// `code: message`, with the rendered warning of a revoked key before it and the details
/// that tell the model what to do after it.
fn error_lines(err: &ClientError) -> Vec<String> {
    let mut lines = Vec::new();
    if let ClientError::KeyRevoked {
        rendered: Some(rendered),
        ..
    } = err
    {
        lines.push(rendered.clone());
    }
    lines.push(err.to_string());
    let hint = match err {
        ClientError::KeyRevoked { .. } => Some(
            "The belief was revoked as wrong; write it again only with new evidence \
             (override_revocation: true and a reason)."
                .to_string(),
        ),
        ClientError::KeyForgotten {
            tombstone: Some(t), ..
        } => Some(format!(
            "Forgotten by {} (tombstone {}): {}. It must not be re-derived without \
             verification; writing it again needs clear_tombstone: true.",
            t.actor, t.id, t.reason
        )),
        ClientError::VersionConflict {
            current_version: Some(version),
            ..
        } => Some(format!(
            "The key is at version {version}: read it again before deciding."
        )),
        ClientError::StaleWrite { .. } => Some(
            "The key was forgotten, revoked or re-created after the revision your data is \
             based on: read it again."
                .to_string(),
        ),
        ClientError::OutcomeUnknown {
            request_id: Some(request_id),
            ..
        } => Some(format!(
            "The mutation may or may not have been applied. Call the tool again with \
             request_id {request_id:?} and the same arguments to learn its outcome; it is \
             never applied twice."
        )),
        ClientError::Unauthenticated { .. } => Some(
            "The cluster has auth on and this server's caller has no valid token \
             (stdio: --token-file, CAIRN_TOKEN or CAIRN_TOKEN_FILE; HTTP: Authorization: \
             Bearer)."
                .to_string(),
        ),
        _ => None,
    };
    lines.extend(hint);
    lines
}

/// The notes' rendered lines, revoked notes first, each group in its given order.
fn rendered_revoked_first<'a>(
    notes: impl Iterator<Item = (State, &'a str)> + Clone,
) -> Vec<String> {
    let revoked = notes.clone().filter(|(state, _)| *state == State::Revoked);
    let others = notes.filter(|(state, _)| *state != State::Revoked);
    revoked
        .chain(others)
        .map(|(_, line)| line.to_string())
        .collect()
}

impl Present for MutationOutput {
    fn lines(&self) -> Vec<String> {
        let r = &self.result;
        let mut lines: Vec<String> = self.warnings.iter().map(|w| w.rendered.clone()).collect();
        let mut summary = format!(
            "{}: {} at version {} (generation {}, revision {})",
            r.key, r.state, r.version, r.generation, r.revision
        );
        if r.already == Some(true) {
            summary.push_str(", already so: nothing changed");
        }
        if r.replayed {
            summary.push_str(
                ", replayed: applied once already under this request_id (by an earlier call \
                 with it, or by this call's own retry after a lost answer), not again",
            );
        }
        lines.push(summary);
        if let Some(tombstone) = &r.tombstone {
            lines.push(format!("tombstone {}", tombstone.id));
        }
        lines.push(format!("request_id {}", self.request_id));
        lines
    }
}

/// A read tool's output about one key, with the key's rendered warning when it is
/// revoked: the warning is the first line for the model; the structured output is the
/// wrapped answer alone, as the tool's output schema says.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Warned<T> {
    #[serde(flatten)]
    pub output: T,
    #[serde(skip)]
    pub warning: Option<String>,
}

impl<T: Present> Present for Warned<T> {
    fn lines(&self) -> Vec<String> {
        self.warning
            .iter()
            .cloned()
            .chain(self.output.lines())
            .collect()
    }
}

impl Present for ReadResponse {
    fn lines(&self) -> Vec<String> {
        vec![self.record.rendered.clone()]
    }
}

impl Present for RecallResponse {
    fn lines(&self) -> Vec<String> {
        if self.notes.is_empty() {
            return vec!["no note matches these cues".into()];
        }
        rendered_revoked_first(
            self.notes
                .iter()
                .map(|note| (note.state, note.rendered.as_str())),
        )
    }
}

impl Present for ListResponse {
    fn lines(&self) -> Vec<String> {
        let mut lines = rendered_revoked_first(
            self.items
                .iter()
                .map(|record| (record.state, record.rendered.as_str())),
        );
        if lines.is_empty() {
            // A page filtered by state may be empty with more keys after it.
            lines.push(match self.next_after {
                None => "no key under this prefix".into(),
                Some(_) => "no key in these states on this page".into(),
            });
        }
        if let Some(after) = &self.next_after {
            lines.push(format!("more: list again with after {after:?}"));
        }
        lines
    }
}

impl Present for HistoryResponse {
    fn lines(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|event| {
                let kind = serde_json::to_value(event.kind)
                    .ok()
                    .and_then(|kind| kind.as_str().map(str::to_string))
                    .unwrap_or_default();
                let mut line = format!(
                    "{} v{} {} by {} (revision {})",
                    self.key, event.version, kind, event.actor, event.revision
                );
                // What the operation acted on, as the structured event says it.
                if let Some(by) = &event.by {
                    line.push_str(&format!(", replaced by {by}"));
                }
                if let Some(anchor) = &event.anchor {
                    line.push_str(&format!(", {anchor} changed"));
                }
                if let Some(reason) = &event.reason {
                    line.push_str(&format!(": {reason}"));
                }
                line
            })
            .collect()
    }
}

impl Present for ProbeResponse {
    fn lines(&self) -> Vec<String> {
        let mut line = format!(
            "{}: {} at version {} (generation {}, forget_epoch {}), value {}, retention \
             record {}",
            self.key,
            self.state,
            self.version,
            self.generation,
            self.forget_epoch,
            present(self.value_present),
            present(self.retention_present)
        );
        if let Some(id) = &self.tombstone_id {
            line.push_str(&format!(", tombstone {id}"));
        }
        vec![line]
    }
}

fn present(yes: bool) -> &'static str {
    if yes {
        "present"
    } else {
        "absent"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_client::api::{Consistency, EventKind, HistoryEvent, Served};

    fn served() -> Served {
        Served {
            node_id: 1,
            role: "leader".into(),
            consistency: Consistency::Linearizable,
            applied_index: 9,
            leader_commit_index: 9,
            ms_since_leader_contact: Some(0),
        }
    }

    fn page(next_after: Option<&str>) -> ListResponse {
        ListResponse {
            items: vec![],
            next_after: next_after.map(str::to_string),
            served: served(),
        }
    }

    #[test]
    fn history_lines_name_what_a_supersede_or_a_stale_flag_acted_on() {
        let event = |kind, version, by: Option<&str>, anchor: Option<&str>| HistoryEvent {
            kind,
            version,
            revision: version + 10,
            actor: "agent".into(),
            reason: None,
            at: 0,
            value_hash: None,
            by: by.map(str::to_string),
            anchor: anchor.map(str::to_string),
            observed_hash: anchor.map(|_| "h".to_string()),
        };
        let history = HistoryResponse {
            key: "facts/db".into(),
            events: vec![
                event(EventKind::Superseded, 2, Some("facts/db2"), None),
                event(EventKind::StaleFlagged, 3, None, Some("path:src/db.rs")),
            ],
            served: served(),
        };
        assert_eq!(
            history.lines(),
            [
                "facts/db v2 superseded by agent (revision 12), replaced by facts/db2",
                "facts/db v3 stale_flagged by agent (revision 13), path:src/db.rs changed",
            ]
        );
    }

    #[test]
    fn an_empty_page_with_a_cursor_does_not_say_the_prefix_is_empty() {
        assert_eq!(page(None).lines(), ["no key under this prefix"]);
        assert_eq!(
            page(Some("facts/9")).lines(),
            [
                "no key in these states on this page",
                "more: list again with after \"facts/9\""
            ]
        );
    }
}
