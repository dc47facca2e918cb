//! The eleven tools of SPEC §9 and the two paths they share: every mutation tool goes
//! through [`CairnMcp::mutation`], every read tool through [`CairnMcp::read`]. A tool is
//! its argument type (schema from its doc comments), one conversion into the wire
//! request, and a one-line `#[tool]` method.
//!
//! - [`mutations`]: `write`, `forget`, `revoke`, `reinstate`, `supersede`, `flag_stale`.
//! - [`reads`]: `read`, `recall`, `list`, `history`, `probe`.
//!
//! No argument type has an `actor` field, and every one rejects unknown fields, so an
//! `actor` argument is refused rather than ignored: with auth on the node records the
//! caller's principal (see [`crate::gateway::Gateway::actor`]).

pub mod budget;
pub mod mutations;
pub mod overridden;
pub mod reads;

use std::future::Future;

use cairn_client::api::{MutationResult, ReadOptions, RecallNote, RecallRequest, Record, State};
use cairn_client::{new_request_id, Client, ClientError, Mutation};

use crate::gateway::Caller;
use crate::outcome::{self, MutationOutput, Present, ToolAnswer};
use crate::server::CairnMcp;
use budget::Budget;

/// One tool call: who makes it, and the time it has for the cluster.
#[derive(Debug, Clone)]
pub struct Call {
    pub caller: Caller,
    pub budget: Budget,
}

/// A mutation tool's arguments.
pub trait MutationArgs {
    type Request: Mutation<Output = MutationResult>;
    /// The caller's `request_id`, when the caller retries the call itself.
    fn request_id(&self) -> Option<&str>;
    /// The anchors of the note this mutation writes (revoked notes sharing one are
    /// delivered with the result).
    fn anchors(&self) -> &[String] {
        &[]
    }
    /// The key a `write` writes: refused, it still meets that key's revoked note.
    fn written_key(&self) -> Option<&str> {
        None
    }
    /// Whether the mutation may override the key's revocation (`write` with
    /// `override_revocation`): applied, it leaves the key active, so the key's revoked
    /// note is read before it is sent.
    fn overrides_revocation(&self) -> bool {
        false
    }
    /// The wire request, done by `actor` under `request_id`.
    fn into_request(self, actor: String, request_id: String) -> Self::Request;
}

/// A read tool's arguments.
pub trait ReadArgs {
    type Output: Present + Send;
    fn run(self, client: &Client)
        -> impl Future<Output = Result<Self::Output, ClientError>> + Send;
}

impl CairnMcp {
    /// Runs a mutation exactly once: one `request_id` (the caller's or a fresh one) for
    /// every retry the client makes across failover.
    ///
    /// - Answers within the call's [`Budget`](budget::Budget): a mutation cut off by it is
    ///   `outcome_unknown` under its `request_id`; warnings not read by then are left out.
    pub(crate) async fn mutation<A: MutationArgs>(&self, call: &Call, args: A) -> ToolAnswer {
        let Call { caller, budget } = call;
        let client = budget.client(caller.client());
        let request_id = args
            .request_id()
            .map_or_else(new_request_id, str::to_string);
        let anchors = args.anchors().to_vec();
        let written_key = args.written_key().map(str::to_string);
        let actor = match self.gateway().actor(budget).await {
            Ok(actor) => actor,
            Err(err) => return outcome::failure(err),
        };
        // A write that overrides a revocation met the key's revoked note, but once applied
        // the key is active again: read the note first.
        let overridden = match (&written_key, args.overrides_revocation()) {
            (Some(key), true) => revoked_note(&client, key, ReadOptions::default()).await,
            _ => None,
        };
        let outcome = client
            .mutate(args.into_request(actor, request_id.clone()))
            .await;
        match outcome {
            Ok(result) => {
                let overridden = self.overridden_note(caller, &request_id, &result, overridden);
                let met = revoked_met(&client, anchors).await;
                outcome::success(&MutationOutput {
                    result,
                    request_id,
                    warnings: own_note_first(overridden, met),
                })
            }
            Err(err) if outcome::unreachable(&err) => outcome::failure(err),
            Err(err) => {
                // Refused, the key is as it was: its revoked note, read before or now.
                let own = match (overridden, written_key) {
                    (Some(note), _) => Some(note),
                    (None, Some(key)) => revoked_note(&client, &key, ReadOptions::default()).await,
                    (None, None) => None,
                };
                let met = revoked_met(&client, anchors).await;
                let warnings = own_note_first(own, met)
                    .into_iter()
                    .map(|note| note.rendered)
                    .collect();
                outcome::failure_with_warnings(err, warnings)
            }
        }
    }

    /// The revoked note an applied write overrode: the one read before it was sent, kept
    /// for repeats of the write; or, for a repeat (`replayed`), which finds the key
    /// active, the one kept when the write first applied.
    fn overridden_note(
        &self,
        caller: &Caller,
        request_id: &str,
        result: &MutationResult,
        read_before: Option<RecallNote>,
    ) -> Option<RecallNote> {
        let notes = self.gateway().overridden();
        match read_before {
            Some(note) => {
                notes.keep(caller.principal(), request_id, note.clone());
                Some(note)
            }
            None if result.replayed => notes.get(caller.principal(), request_id),
            None => None,
        }
    }

    /// Runs a read, within the call's [`Budget`](budget::Budget).
    pub(crate) async fn read<A: ReadArgs>(&self, call: &Call, args: A) -> ToolAnswer {
        let client = call.budget.client(call.caller.client());
        match args.run(&client).await {
            Ok(output) => outcome::success(&output),
            Err(err) => outcome::failure(err),
        }
    }
}

/// The written key's own revoked note first (the belief the write met by its key), then
/// those its anchors meet, each note once.
fn own_note_first(own: Option<RecallNote>, met: Vec<RecallNote>) -> Vec<RecallNote> {
    let own_key = own.as_ref().map(|note| note.key.clone());
    own.into_iter()
        .chain(
            met.into_iter()
                .filter(|note| Some(&note.key) != own_key.as_ref()),
        )
        .collect()
}

/// The revoked notes that share an anchor with a note just written (or refused): the
/// warnings a `write` delivers where the derivation happens, whether or not it applied.
/// A failed lookup costs the warnings, never the write's own answer, and is logged (see
/// [`refused_for_its_input`]).
async fn revoked_met(client: &Client, mut anchors: Vec<String>) -> Vec<RecallNote> {
    // A refused write may carry a malformed anchor, which would refuse the whole lookup:
    // look up the well-formed ones.
    anchors.retain(|anchor| well_formed_anchor(anchor));
    if anchors.is_empty() {
        return Vec::new();
    }
    let mut request = RecallRequest::new(anchors);
    request.include = Some(vec![State::Revoked]);
    match client.recall(request).await {
        Ok(answer) => answer.notes,
        Err(err) if refused_for_its_input(&err) => {
            tracing::debug!(error = %err, "no revoked notes: the look-up was refused");
            Vec::new()
        }
        Err(err) => {
            tracing::warn!(error = %err, "looking up revoked notes that meet a write failed");
            Vec::new()
        }
    }
}

/// Whether `anchor` has the form `kind:value` of SPEC §4 with one of its five kinds (the
/// node checks the rest: length, control characters).
fn well_formed_anchor(anchor: &str) -> bool {
    anchor.split_once(':').is_some_and(|(kind, value)| {
        ["path", "symbol", "tag", "topic", "url"].contains(&kind) && !value.is_empty()
    })
}

/// `key`'s rendered warning when it is revoked, read with `options`: what a refused write
/// of the key met, and what `probe` and `history` of a revoked key deliver first, as `read`
/// does. A failed read costs the warning, not the tool's own answer.
pub(crate) async fn revoked_warning(
    client: &Client,
    key: &str,
    options: ReadOptions,
) -> Option<String> {
    revoked_note(client, key, options)
        .await
        .map(|note| note.rendered)
}

/// `key`'s note when it is revoked, as a `write`'s `warnings` carry it (`matched` is empty:
/// the write met it by its key, not by an anchor). A failed read is logged (see
/// [`refused_for_its_input`]) and is `None`.
async fn revoked_note(client: &Client, key: &str, options: ReadOptions) -> Option<RecallNote> {
    match client.read(key, options).await {
        Ok(read) if read.record.state == State::Revoked => Some(note_of(read.record)),
        Ok(_) => None,
        Err(err) if refused_for_its_input(&err) => {
            tracing::debug!(error = %err, key, "no revoked warning: the read was refused");
            None
        }
        Err(err) => {
            tracing::warn!(error = %err, key, "could not learn whether the key is revoked: its warning, if any, is left out");
            None
        }
    }
}

fn note_of(record: Record) -> RecallNote {
    RecallNote {
        key: record.key,
        state: record.state,
        rendered: record.rendered,
        matched: Vec::new(),
        version: record.version,
        generation: record.generation,
        forget_epoch: record.forget_epoch,
        revision: record.revision,
        value: record.value,
    }
}

/// Whether a warning look-up was refused for what the call itself carries (a key never
/// written, a malformed key or anchor, one beyond the caller's grants, no valid token,
/// which the tool's own answer reports): an expected outcome, logged at `debug`. Anything
/// else (the cluster failed) is logged at `warn`.
fn refused_for_its_input(err: &ClientError) -> bool {
    matches!(
        err,
        ClientError::NotFound { .. }
            | ClientError::InvalidRequest { .. }
            | ClientError::TooLarge { .. }
            | ClientError::PermissionDenied { .. }
            | ClientError::Unauthenticated { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_of_the_five_kinds_are_looked_up() {
        for good in [
            "path:src/",
            "symbol:Db::open",
            "tag:x",
            "topic:db",
            "url:https://a",
        ] {
            assert!(well_formed_anchor(good), "{good}");
        }
        for bad in ["bogus", "path:", "file:a", ":x", ""] {
            assert!(!well_formed_anchor(bad), "{bad:?}");
        }
    }

    #[test]
    fn refusals_for_the_call_itself_are_expected_and_cluster_failures_are_not() {
        let message = String::from("m");
        let expected = [
            ClientError::NotFound {
                message: message.clone(),
                served: None,
                op_index: None,
                details: Default::default(),
            },
            ClientError::Unauthenticated {
                message: message.clone(),
                details: Default::default(),
            },
        ];
        for err in &expected {
            assert!(refused_for_its_input(err), "{err}");
        }
        let failure = ClientError::Transport {
            endpoint: "http://127.0.0.1:7401".into(),
            message,
            sent: true,
        };
        assert!(!refused_for_its_input(&failure));
    }
}
