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

pub mod mutations;
pub mod reads;

use std::future::Future;

use cairn_client::api::{MutationResult, ReadOptions, RecallNote, RecallRequest, State};
use cairn_client::{new_request_id, Client, ClientError, Mutation};

use crate::gateway::Caller;
use crate::outcome::{self, MutationOutput, Present, ToolAnswer};
use crate::server::CairnMcp;

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
    pub(crate) async fn mutation<A: MutationArgs>(&self, caller: &Caller, args: A) -> ToolAnswer {
        let request_id = args
            .request_id()
            .map_or_else(new_request_id, str::to_string);
        let anchors = args.anchors().to_vec();
        let written_key = args.written_key().map(str::to_string);
        let actor = match self.gateway().actor().await {
            Ok(actor) => actor,
            Err(err) => return outcome::failure(err),
        };
        let outcome = caller
            .client()
            .mutate(args.into_request(actor, request_id.clone()))
            .await;
        match outcome {
            Ok(result) => outcome::success(&MutationOutput {
                result,
                request_id,
                warnings: revoked_met(caller, anchors).await,
            }),
            Err(err) if outcome::unreachable(&err) => outcome::failure(err),
            Err(err) => {
                let met = revoked_met(caller, anchors).await;
                let mut warnings: Vec<String> = met.into_iter().map(|note| note.rendered).collect();
                if let Some(key) = written_key {
                    let options = ReadOptions::default();
                    warnings.extend(revoked_warning(caller.client(), &key, options).await);
                }
                outcome::failure_with_warnings(err, warnings)
            }
        }
    }

    /// Runs a read.
    pub(crate) async fn read<A: ReadArgs>(&self, caller: &Caller, args: A) -> ToolAnswer {
        match args.run(caller.client()).await {
            Ok(output) => outcome::success(&output),
            Err(err) => outcome::failure(err),
        }
    }
}

/// The revoked notes that share an anchor with a note just written (or refused): the
/// warnings a `write` delivers where the derivation happens, whether or not it applied.
/// A failed lookup costs the warnings, never the write's own answer, and is logged.
async fn revoked_met(caller: &Caller, mut anchors: Vec<String>) -> Vec<RecallNote> {
    // A refused write may carry a malformed anchor, which would refuse the whole lookup:
    // look up the well-formed ones.
    anchors.retain(|anchor| well_formed_anchor(anchor));
    if anchors.is_empty() {
        return Vec::new();
    }
    let mut request = RecallRequest::new(anchors);
    request.include = Some(vec![State::Revoked]);
    match caller.client().recall(request).await {
        Ok(answer) => answer.notes,
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
/// does. A failed read costs the warning, not the tool's own answer, and is logged.
pub(crate) async fn revoked_warning(
    client: &Client,
    key: &str,
    options: ReadOptions,
) -> Option<String> {
    match client.read(key, options).await {
        Ok(read) if read.record.state == State::Revoked => Some(read.record.rendered),
        Ok(_) => None,
        Err(err) => {
            tracing::warn!(error = %err, key, "reading a revoked key's warning failed");
            None
        }
    }
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
}
