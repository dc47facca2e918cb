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
//! listen request, notifying through its stream until the client closes it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::http::request::Parts;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ContentBlock, Extensions, Implementation,
    ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ResourceUpdatedNotificationParam,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter, Tool,
    UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
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
        self.tools
            .call(ToolCallContext::new(self, request, context))
            .await
            .map(with_argument_errors_named)
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
        let caller = self.caller(&context.extensions)?;
        resources::read(&caller, &request.uri).await.map(Into::into)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed().add(&request.uri)?;
        self.feed_subscriptions(&context).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed().remove(&request.uri)
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
