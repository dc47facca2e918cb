//! `GET /v1/watch?prefix=&from_revision=`: the change feed as Server-Sent Events.
//!
//! One event per change, in revision order, each with `id: REVISION` so a client resumes
//! with `from_revision = last id + 1`. The stream serves this node's applied state (like a
//! `consistency=any` read) and ends when the node shuts down.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use futures::stream::{self, Stream};
use serde::Deserialize;

use super::body::StrictQuery;
use super::error::ApiError;
use super::SharedApp;
use crate::consensus::state_machine::FEED_WINDOW_REVISIONS;

/// Events read from the feed per page.
const PAGE_EVENTS_MAX: usize = 256;
/// A quiet stream still wakes this often to notice shutdown.
const IDLE_WAKE: Duration = Duration::from_secs(1);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub from_revision: Option<u64>,
}

pub async fn watch(
    State(app): State<SharedApp>,
    StrictQuery(q): StrictQuery<WatchQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let from = q.from_revision.unwrap_or(app.reads.applied_index() + 1);
    // The feed keeps the newest FEED_WINDOW_REVISIONS revisions; older ones are trimmed
    // and a resume from there would silently skip changes.
    let oldest_kept = app
        .reads
        .applied_index()
        .saturating_sub(FEED_WINDOW_REVISIONS);
    if from < oldest_kept {
        return Err(ApiError::invalid(format!(
            "from_revision {from} is older than the feed's window (oldest {oldest_kept})"
        ))
        .with("oldest_revision", oldest_kept));
    }
    Ok(Sse::new(events(app, q.prefix, from))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

struct Cursor {
    app: SharedApp,
    prefix: String,
    position: (u64, u64),
    pending: std::collections::VecDeque<Event>,
}

fn events(
    app: SharedApp,
    prefix: String,
    from: u64,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let cursor = Cursor {
        app,
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
            if !c.fill().ok()? {
                let mut applied = c.app.reads.applied_watch();
                let _ = tokio::time::timeout(IDLE_WAKE, applied.changed()).await;
            }
        }
    })
}

impl Cursor {
    /// Reads the next page into `pending`; `Ok(false)` when caught up.
    fn fill(&mut self) -> Result<bool, ApiError> {
        let page = self.app.state.feed_page(self.position, PAGE_EVENTS_MAX)?;
        let Some(((rev, seq), _)) = page.last() else {
            return Ok(false);
        };
        self.position = (*rev, seq + 1);
        for (_, event) in page {
            if event.key.starts_with(&self.prefix) {
                let data = serde_json::to_string(&event).map_err(ApiError::internal)?;
                self.pending.push_back(
                    Event::default()
                        .id(event.revision.to_string())
                        .event("change")
                        .data(data),
                );
            }
        }
        Ok(true)
    }
}
