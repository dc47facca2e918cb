//! `GET /v1/watch?prefix=&from_revision=`: the change feed as Server-Sent Events.
//!
//! One event per change, in revision order, each with `id: REVISION` so a client resumes
//! with `from_revision = last id + 1`, or with the standard `Last-Event-ID: last id`. The
//! stream serves this node's applied state (like a `consistency=any` read) and ends when
//! the node shuts down. With auth on, the node first catches up with the leader, so a
//! rotated or deleted token opens no stream anywhere; only changes of keys the watching
//! principal may read are sent, by its grants at each page; and the stream ends once the
//! token that opened it no longer authenticates that principal (rotated, or the
//! principal deleted).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use cairn_api::{ErrorCode, Permission};
use cairn_memory::admit;
use futures::stream::{self, Stream};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::OwnedSemaphorePermit;

use super::auth::{self, Caller, Session};
use super::body::StrictQuery;
use super::error::ApiError;
use super::{App, SharedApp};
use crate::consensus::state_machine::FEED_WINDOW_REVISIONS;

/// Events read from the feed per page.
const PAGE_EVENTS_MAX: usize = 256;
/// A quiet stream still wakes this often to notice shutdown.
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// The query string of `GET /v1/watch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    /// Only keys under this prefix (default: every key).
    #[serde(default)]
    pub prefix: String,
    /// The first revision sent; 0 is the oldest retained event; default: after the
    /// node's current applied index.
    #[serde(default)]
    pub from_revision: Option<u64>,
}

pub async fn watch(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    StrictQuery(q): StrictQuery<WatchQuery>,
) -> Result<impl IntoResponse, ApiError> {
    // A stream is not relayed: the node catches up with the leader, then authenticates.
    let reader = auth::session(&app, &headers).await?;
    admit::prefix("prefix", &q.prefix, &app.config.limits)?;
    let slot = watcher_slot(&app)?;
    let resume_after = last_event_id(&headers)?;
    let asked = match (q.from_revision, resume_after) {
        (Some(from), _) => Some((from, "from_revision")),
        (None, Some(id)) => Some((id.saturating_add(1), "Last-Event-ID")),
        (None, None) => None,
    };
    let from = match asked {
        None => app.reads.applied_index() + 1,
        Some((0, _)) => 0,
        Some((from, field)) => check_retained(&app, from, field)?,
    };
    Ok(Sse::new(events(app, slot, reader, q.prefix, from))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// One of the node's `limits.watchers_max` stream slots, held until the stream ends;
/// none free is 503 `overloaded` with `field` and `limit`. Every open stream reads the
/// feed after each applied entry, so their number bounds that work.
fn watcher_slot(app: &App) -> Result<OwnedSemaphorePermit, ApiError> {
    let max = app.config.limits.watchers_max;
    app.watchers.clone().try_acquire_owned().map_err(|_| {
        ApiError::new(
            ErrorCode::Overloaded,
            format!("this node already serves {max} watch streams (limits.watchers_max); retry later or watch through another node"),
        )
        .with("field", "watch")
        .with("limit", max)
    })
}

/// `Last-Event-ID`, which an SSE client (a browser's `EventSource`, most SSE libraries)
/// sends when it reconnects: the revision of the last event it received, so the stream
/// resumes right after it. `from_revision` wins when both are given.
fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let revision = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    match revision {
        Some(revision) => Ok(Some(revision)),
        None => Err(
            ApiError::invalid("Last-Event-ID must be an event's id: a revision number")
                .with("field", "Last-Event-ID"),
        ),
    }
}

/// `from` unless it is older than the oldest retained event (SPEC extension: 400
/// `invalid_request` with `oldest_revision`, and `field`: `from_revision`, or
/// `Last-Event-ID` when the resume point came from that header). The feed keeps the newest
/// `FEED_WINDOW_REVISIONS` revisions; a resume from before its first event could skip
/// changes without knowing, so the client is told where the feed starts (or asks with
/// `from_revision=0`, "from the oldest retained event").
fn check_retained(app: &App, from: u64, field: &str) -> Result<u64, ApiError> {
    let window_floor = app
        .reads
        .applied_index()
        .saturating_sub(FEED_WINDOW_REVISIONS);
    let oldest = app
        .view
        .feed_first_revision()?
        .map_or(window_floor, |first| first.max(window_floor));
    if from < oldest {
        return Err(ApiError::invalid(format!(
            "from_revision {from} is older than the feed's oldest revision {oldest}"
        ))
        .with("field", field)
        .with("oldest_revision", oldest));
    }
    Ok(from)
}

struct Cursor {
    app: SharedApp,
    /// Given back when the stream ends.
    _slot: OwnedSemaphorePermit,
    /// The principal watching and its token (`None` while auth was off): each page is
    /// filtered by its grants as they are when the page is read, and the stream ends once
    /// the token no longer authenticates it (rotated, or the principal deleted).
    reader: Option<Session>,
    prefix: String,
    position: (u64, u64),
    pending: std::collections::VecDeque<Event>,
}

fn events(
    app: SharedApp,
    slot: OwnedSemaphorePermit,
    reader: Option<Session>,
    prefix: String,
    from: u64,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let cursor = Cursor {
        app,
        _slot: slot,
        reader,
        prefix,
        position: (from, 0),
        pending: Default::default(),
    };
    stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(event) = c.pending.pop_front() {
                return Some((Ok(event), c));
            }
            if *c.app.shutdown.borrow() {
                return None;
            }
            // Nothing applied past the cursor: wait without reading the feed (an idle
            // stream costs a timer, not a RocksDB read per wake).
            let caught_up = c.app.reads.applied_index() < c.position.0 || !c.fill().ok()?;
            if caught_up {
                let mut applied = c.app.reads.applied_watch();
                let _ = tokio::time::timeout(IDLE_WAKE, applied.changed()).await;
            }
        }
    })
}

impl Cursor {
    /// The watcher as a caller by the grants applied now; an error (ending the stream)
    /// once its token was rotated or its principal deleted.
    fn caller(&self) -> Result<Caller, ApiError> {
        let Some(session) = &self.reader else {
            return Ok(Caller::Open);
        };
        let access = self.app.view.access();
        session.check(&access)?;
        Ok(Caller::Principal {
            name: session.name().to_string(),
            access,
        })
    }

    /// Reads the next page into `pending`; `Ok(false)` when caught up; an error ends the
    /// stream (also when the watcher's token no longer authenticates it).
    ///
    /// The page stops at the applied index read before the access state: the state machine
    /// stores its access state before it publishes the applied index, so the grants and
    /// token checked are never older than the events they filter (an event applied after
    /// a rotation is never sent under the rotated token).
    fn fill(&mut self) -> Result<bool, ApiError> {
        let applied = self.app.reads.applied_index();
        let caller = self.caller()?;
        let mut page = self.app.view.feed_page(self.position, PAGE_EVENTS_MAX)?;
        page.retain(|((rev, _), _)| *rev <= applied);
        let Some(((rev, seq), _)) = page.last() else {
            // Every event up to `applied` is behind the cursor: the next one to send is
            // of a later entry, so the stream waits until one is applied.
            self.position = self.position.max((applied + 1, 0));
            return Ok(false);
        };
        self.position = (*rev, seq + 1);
        for (_, event) in page {
            if event.key.starts_with(&self.prefix) && caller.may(Permission::Read, &event.key) {
                let revision = event.revision;
                // The stored record is the key model's; clients get the wire type's JSON.
                let wire = cairn_api::WatchEvent::from(event);
                let data = serde_json::to_string(&wire).map_err(ApiError::internal)?;
                self.pending.push_back(
                    Event::default()
                        .id(revision.to_string())
                        .event("change")
                        .data(data),
                );
            }
        }
        Ok(true)
    }
}
