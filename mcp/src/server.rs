//! [`CairnMcp`]: the MCP server handler. It finds the caller of each request, routes tool
//! calls to the tools of [`crate::tools`], serves the `cairn://key/{key}` resources and
//! their subscriptions, and tells the model how to use it (`instructions`).
//!
//! The caller of a request: over HTTP, the [`Caller`] that [`crate::http`] attached to
//! the HTTP request for its bearer token (rmcp hands the request's `http::request::Parts`
//! to the handler); over stdio, the one caller of `CAIRN_TOKEN`. An HTTP request never
//! falls back to another caller's token.
//!
//! Subscriptions come in two protocol generations: `resources/subscribe` (sessions before
//! MCP 2026-07-28: URIs are added to this session's [`Subscriptions`], and one change-feed task per
//! session notifies the peer) and `subscriptions/listen` (2026-07-28: one change feed per
//! listen request, notifying through its stream until the client closes it). Either is
//! refused, and records nothing, when the caller may not read a key it names
//! ([`resources::may_read`]): rmcp acknowledges a listen request before the handler's
//! `listen` runs, so the transports check it first ([`refuse_listen`]).
//!
//! The handler logs the requests it answers with an error: a refusal of the caller's own
//! request at `debug`, anything else at `warn` ([`needs_attention`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::http::request::Parts;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientRequest, ContentBlock, ErrorCode, Extensions,
    GetMeta, Implementation, JsonRpcMessage, JsonRpcRequest, ListResourceTemplatesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RxJsonRpcMessage, SubscriptionContext, TxJsonRpcMessage};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};

use crate::gateway::{Caller, Gateway};
use crate::resources::{self, Subscriptions};
use crate::tools::budget::Budget;
use crate::tools::Call;

/// How often a session's change-feed task checks that the session is still open.
const SESSION_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// What the model is told when it connects (MCP `instructions`).
const INSTRUCTIONS: &str = include_str!("instructions.md");

/// The handler of one MCP session (stdio: the process; HTTP: one per session or
/// stateless request). Sessions share the [`Gateway`]; subscriptions are per session.
pub struct CairnMcp {
    gateway: Arc<Gateway>,
    tools: ToolRouter<CairnMcp>,
    /// What this session subscribed to with `resources/subscribe`.
    subscribed: Arc<Mutex<Subscriptions>>,
    /// Whether this session's change-feed task runs.
    feeding: Arc<AtomicBool>,
}

impl CairnMcp {
    pub fn new(gateway: Arc<Gateway>) -> CairnMcp {
        CairnMcp {
            gateway,
            tools: Self::mutation_tools() + Self::read_tools(),
            subscribed: Arc::default(),
            feeding: Arc::default(),
        }
    }

    pub(crate) fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// The caller of a request (see the module doc).
    fn caller(&self, extensions: &Extensions) -> Result<Caller, ErrorData> {
        let attached = extensions
            .get::<Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>().cloned());
        attached
            .or_else(|| self.gateway.fixed_caller())
            .ok_or_else(|| ErrorData::internal_error("request without a caller", None))
    }

    /// The time a tool call has: its HTTP request's, counted from the request's arrival
    /// ([`crate::http`]), or over stdio from now.
    fn budget(&self, extensions: &Extensions) -> Budget {
        extensions
            .get::<Parts>()
            .and_then(|parts| parts.extensions.get::<Budget>().copied())
            .unwrap_or_else(|| self.gateway.budget())
    }

    fn subscribed(&self) -> MutexGuard<'_, Subscriptions> {
        self.subscribed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts this session's change-feed task, once.
    async fn feed_subscriptions(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if self.feeding.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let feed = match resources::watch(&self.caller(&context.extensions)?).await {
            Ok(feed) => feed,
            Err(err) => {
                self.feeding.store(false, Ordering::Release);
                return Err(err);
            }
        };
        let (subscribed, feeding, peer) = (
            self.subscribed.clone(),
            self.feeding.clone(),
            context.peer.clone(),
        );
        tokio::spawn(async move {
            let uris_of = |key: &str| {
                subscribed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .uris(key)
            };
            let notify = |uri: String| {
                let peer = peer.clone();
                async move {
                    let update = ResourceUpdatedNotificationParam::new(uri);
                    peer.notify_resource_updated(update).await.is_ok()
                }
            };
            tokio::select! {
                ended = resources::forward(feed, uris_of, notify) => {
                    if let Some(err) = ended {
                        tracing::warn!(error = %err, "change feed of subscriptions ended");
                    }
                }
                // A closed session would otherwise hold its feed open until the next change.
                () = closed(&peer) => {}
            }
            feeding.store(false, Ordering::Release);
        });
        Ok(())
    }
}

/// Resolves once the session's transport is closed (checked every few seconds: the peer
/// offers no wait).
async fn closed(peer: &Peer<RoleServer>) {
    while !peer.is_transport_closed() {
        tokio::time::sleep(SESSION_CHECK_PERIOD).await;
    }
}

impl ServerHandler for CairnMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("cairn-mcp", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller(&context.extensions)?;
        let budget = self.budget(&context.extensions);
        context.extensions.insert(Call { caller, budget });
        let answer = self
            .tools
            .call(ToolCallContext::new(self, request, context))
            .await
            .map(with_argument_errors_named);
        logged(answer)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.list_all()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.get(name).cloned()
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            resources::template(),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = logged(self.caller(&context.extensions))?;
        logged(resources::read(&caller, &request.uri).await.map(Into::into))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = logged(self.caller(&context.extensions))?;
        // Refused as a read of the key would be, before anything is recorded.
        logged(resources::may_read(&caller, &request.uri).await)?;
        logged(self.subscribed().add(&request.uri))?;
        logged(self.feed_subscriptions(&context).await)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        logged(self.subscribed().remove(&request.uri))
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let uris: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| resources::key_of(uri).is_ok())
            .cloned()
            .collect();
        Some(
            SubscriptionFilter::builder()
                .resource_subscriptions(uris)
                .build(),
        )
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        logged(self.listen_until_cancelled(context).await)
    }
}

impl CairnMcp {
    /// Forwards the change feed to one listen stream (its filter already checked by the
    /// transport, [`refuse_listen`]) until the client cancels it or the feed ends.
    async fn listen_until_cancelled(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let subscriptions =
            Subscriptions::of_uris(context.accepted().resource_subscriptions.iter().flatten());
        if subscriptions.is_empty() {
            context.cancelled().await;
            return Ok(());
        }
        let caller = self.caller(&context.request_context().extensions)?;
        let feed = resources::watch(&caller).await?;
        let sink = context.sink();
        let notify = |uri: String| async move { sink.notify_resource_updated(uri).await.is_ok() };
        let forwarded = resources::forward(feed, |key| subscriptions.uris(key), notify);
        tokio::select! {
            () = context.cancelled() => Ok(()),
            ended = forwarded => match ended {
                Some(err) => Err(ErrorData::internal_error(
                    format!("change feed ended: {err}"),
                    None,
                )),
                None => Ok(()),
            },
        }
    }
}

/// The answer to a decoded message that rmcp must not see: a `subscriptions/listen`
/// request (MCP 2026-07-28 or later) naming a key `caller` may not read, refused whole with
/// the error a read of that key gets ([`resources::may_read_all`]); `None` for every other
/// message, which goes on to rmcp.
///
/// Both transports ask before they hand a request on ([`crate::stdio`], [`crate::http`]):
/// rmcp acknowledges a listen request before it calls [`ServerHandler::listen`], and
/// [`ServerHandler::accepted_subscription_filter`], the one hook before that, is not told
/// who the caller is and cannot ask the cluster. A listen request of a session on an
/// earlier protocol version (no 2026-07-28 `_meta`) is rmcp's to answer "method not
/// found".
pub async fn refuse_listen(
    message: &RxJsonRpcMessage<RoleServer>,
    caller: Option<&Caller>,
) -> Option<TxJsonRpcMessage<RoleServer>> {
    let JsonRpcMessage::Request(JsonRpcRequest { id, request, .. }) = message else {
        return None;
    };
    let ClientRequest::SubscriptionsListenRequest(listen) = request else {
        return None;
    };
    let version = listen
        .params
        .meta
        .as_ref()
        .and_then(|meta| meta.protocol_version())
        .or_else(|| request.get_meta().protocol_version());
    let uris = listen
        .params
        .notifications
        .resource_subscriptions
        .as_deref();
    match (version, uris, caller) {
        (Some(version), Some(uris), Some(caller)) if !version.has_initialize() => {
            let refused = resources::may_read_all(caller, uris).await.err()?;
            log_error(&refused);
            Some(JsonRpcMessage::error(refused, Some(id.clone())))
        }
        _ => None,
    }
}

/// Logs a request answered with an error at the level it deserves ([`needs_attention`]).
/// The server logs its answers itself: rmcp logs every one as `WARN rmcp::service:
/// response error`, which the default log filter leaves out (`main.rs`).
fn log_error(error: &ErrorData) {
    let (code, message) = (error.code.0, &error.message);
    if needs_attention(error) {
        tracing::warn!(code, %message, "request failed");
    } else {
        tracing::debug!(code, %message, "request refused");
    }
}

/// The error of an answer, logged ([`log_error`]).
fn logged<T>(answer: Result<T, ErrorData>) -> Result<T, ErrorData> {
    if let Err(error) = &answer {
        log_error(error);
    }
    answer
}

/// The SPEC §5 codes that refuse a caller's own request (its token, its grants, its
/// arguments): routine answers, not the operator's concern.
const CALLER_REFUSALS: [&str; 5] = [
    "unauthenticated",
    "permission_denied",
    "actor_mismatch",
    "invalid_request",
    "too_large",
];

/// Whether an error answer is worth a `warn` line: an internal error (-32603) that is not
/// the refusal of the caller's own request, so a cluster none of whose nodes answers
/// ("cairn cluster unavailable"), a cluster that cannot serve (`no_leader`, `stale_read`,
/// `overloaded`), a change feed that broke, a failure of the server itself. Every other
/// error is the caller's (a key never written, a URI that names no key, an unknown tool or
/// method, arguments that do not fit).
fn needs_attention(error: &ErrorData) -> bool {
    error.code == ErrorCode::INTERNAL_ERROR
        && !CALLER_REFUSALS.iter().any(|code| {
            error
                .message
                .strip_prefix(code)
                .is_some_and(|rest| rest.starts_with(':'))
        })
}

/// What rmcp starts the text of arguments that do not fit a tool's input type with.
const RMCP_ARGUMENT_ERROR: &str = "failed to deserialize parameters: ";

/// A call refused for its arguments by rmcp, before any tool ran, says `invalid_request`
/// first, as every other refusal says its SPEC §5 code first: a model branching on the
/// leading code finds one for this mistake too.
fn with_argument_errors_named(mut response: CallToolResponse) -> CallToolResponse {
    if let CallToolResponse::Complete(result) = &mut response {
        if let Some(ContentBlock::Text(block)) = result.content.first_mut() {
            if let Some(problem) = block.text.strip_prefix(RMCP_ARGUMENT_ERROR) {
                block.text = format!("invalid_request: arguments: {problem}");
            }
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failures_beyond_the_callers_own_request_need_attention() {
        let internal = |message: &str| ErrorData::internal_error(message.to_owned(), None);
        for routine in [
            internal("permission_denied: no grant allows read on \"k\""),
            internal("unauthenticated: send Authorization: Bearer TOKEN"),
            ErrorData::resource_not_found("cairn://key/k: the key was never written", None),
            ErrorData::invalid_params("\"x\" is not a cairn key URI", None),
        ] {
            assert!(!needs_attention(&routine), "{routine:?}");
        }
        for failure in [
            internal("cairn cluster unavailable: transport: connection refused"),
            internal("no_leader: no leader"),
            internal("change feed ended: transport: reset"),
            internal("permission_denied_somewhere: made up"),
        ] {
            assert!(needs_attention(&failure), "{failure:?}");
        }
    }
}
