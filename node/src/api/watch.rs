//! `GET /v1/watch?prefix=&from_revision=`: the change feed as Server-Sent Events.
//!
//! One event per change, in revision order. An event's SSE `id` is its revision when it
//! is the last event of its entry, else `REVISION:SEQ` (its place among the entry's
//! events), so the standard `Last-Event-ID: last id` resumes right after it, even between
//! the events of one batch; `from_revision` starts at a whole revision. The
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
use crate::consensus::state_machine::feed_retained_from;
use crate::consensus::view::FeedPosition;

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
        (Some(from), _) => Some(((from, 0), "from_revision")),
        (None, Some(next)) => Some((next, "Last-Event-ID")),
        (None, None) => None,
    };
    let from = match asked {
        None => (app.reads.applied_index() + 1, 0),
        Some(((0, 0), _)) => (0, 0),
        Some(((revision, seq), field)) => {
            let applied = app.reads.applied_index();
            (check_retained(revision, applied, field)?, seq)
        }
    };
    Ok(Sse::new(events(app, slot, reader, q.prefix, from))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE_INTERVAL)))
}

/// How often an idle stream carries a `:` comment. Clients take a stream silent for a few
/// of these as broken (a stopped node whose kernel keeps the connection open) and reopen
/// it elsewhere, so this bounds how long a watch stays on a frozen leader; one comment is a
/// dozen bytes.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);

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
/// sends when it reconnects: the id of the last event it received, so the stream resumes
/// right after that event ([`resume_after`]). `from_revision` wins when both are given.
/// The header given twice is refused, as a repeated query parameter is: which of the two
/// the client meant is not the node's to guess.
fn last_event_id(headers: &HeaderMap) -> Result<Option<FeedPosition>, ApiError> {
    let mut values = headers.get_all("last-event-id").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let refused = |message: &str| Err(ApiError::invalid(message).with("field", "Last-Event-ID"));
    if values.next().is_some() {
        return refused("Last-Event-ID given more than once");
    }
    match value.to_str().ok().and_then(resume_after) {
        Some(next) => Ok(Some(next)),
        None => refused("Last-Event-ID must be an event's id: REVISION or REVISION:SEQ"),
    }
}

/// The feed position right after the event whose id is `id` ([`event_id`]): the next
/// entry after a bare revision (its entry was complete), the next event of the same entry
/// after `REVISION:SEQ`.
fn resume_after(id: &str) -> Option<FeedPosition> {
    let id = id.trim();
    match id.split_once(':') {
        None => Some((decimal(id)?.saturating_add(1), 0)),
        Some((revision, seq)) => Some((decimal(revision)?, decimal(seq)?.saturating_add(1))),
    }
}

/// A number of an event id as the node writes it: decimal digits only (`u64`'s parser
/// also takes a leading `+`, which no id carries).
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// An event's SSE id: its revision alone when it is the last event of its entry (a
/// resume may start at the next revision), else `REVISION:SEQ` (a resume must start
/// inside the entry, at the next event).
fn event_id((revision, seq): FeedPosition, last_of_entry: bool) -> String {
    if last_of_entry {
        revision.to_string()
    } else {
        format!("{revision}:{seq}")
    }
}

/// `from` unless events from it on may have been trimmed from the feed (SPEC extension:
/// 400 `invalid_request` with `oldest_revision`, and `field`: `from_revision`, or
/// `Last-Event-ID` when the resume point came from that header). The feed keeps the newest
/// `FEED_WINDOW_REVISIONS` revisions; a resume from below its floor could skip changes
/// without knowing, so the client is told where the feed starts (or asks with
/// `from_revision=0`, "from the oldest retained event"). A start below the first event
/// but at or above the floor skips nothing: no event was there (revision 1, the
/// membership entry of `init`, has none).
fn check_retained(from: u64, applied_index: u64, field: &str) -> Result<u64, ApiError> {
    let oldest = feed_retained_from(applied_index);
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
    position: FeedPosition,
    pending: std::collections::VecDeque<Event>,
}

fn events(
    app: SharedApp,
    slot: OwnedSemaphorePermit,
    reader: Option<Session>,
    prefix: String,
    from: FeedPosition,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let cursor = Cursor {
        app,
        _slot: slot,
        reader,
        prefix,
        position: from,
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
        let page = self.app.view.feed_page(self.position, PAGE_EVENTS_MAX)?;
        let ends = entry_ends(&page, page.len() < PAGE_EVENTS_MAX);
        let mut sent_through = None;
        for ((position, event), last_of_entry) in page.into_iter().zip(ends) {
            if position.0 > applied {
                break;
            }
            sent_through = Some(position);
            if event.key.starts_with(&self.prefix) && caller.may(Permission::Read, &event.key) {
                // The stored record is the key model's; clients get the wire type's JSON.
                let wire = cairn_api::WatchEvent::from(event);
                let data = serde_json::to_string(&wire).map_err(ApiError::internal)?;
                self.pending.push_back(
                    Event::default()
                        .id(event_id(position, last_of_entry))
                        .event("change")
                        .data(data),
                );
            }
        }
        let Some((rev, seq)) = sent_through else {
            // Every event up to `applied` is behind the cursor: the next one to send is
            // of a later entry, so the stream waits until one is applied.
            self.position = self.position.max((applied + 1, 0));
            return Ok(false);
        };
        self.position = (rev, seq + 1);
        Ok(true)
    }
}

/// For each event of a feed page, whether it is the last event of its entry: the next
/// one in the page is of a later revision, or it ends a page that holds everything up to
/// the feed's end (`page_complete`; an entry's events are stored in one write, so a page
/// cut short only by its size may have left the rest of its last entry out).
fn entry_ends(page: &[(FeedPosition, impl Sized)], page_complete: bool) -> Vec<bool> {
    (0..page.len())
        .map(|i| match page.get(i + 1) {
            Some(((next_revision, _), _)) => *next_revision != page[i].0 .0,
            None => page_complete,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_resumes_right_after_its_event() {
        assert_eq!(resume_after("41"), Some((42, 0)));
        assert_eq!(resume_after(" 41:2 "), Some((41, 3)));
        assert_eq!(resume_after(&event_id((41, 2), false)), Some((41, 3)));
        assert_eq!(resume_after(&event_id((41, 2), true)), Some((42, 0)));
        assert_eq!(resume_after(&u64::MAX.to_string()), Some((u64::MAX, 0)));
        let malformed = [
            "", "x", "41:", ":2", "41:2:3", "-1", "4.1", "+41", "41:+2", "4 1",
        ];
        for malformed in malformed {
            assert_eq!(resume_after(malformed), None, "{malformed:?}");
        }
    }

    #[test]
    fn a_start_is_refused_only_below_the_trimmed_floor() {
        // Trims run at multiples of 4096 and keep the last 1,000,000 revisions: the first
        // at index 1,003,520 (245 × 4096) drops revisions below 3,520.
        let first_trim = 1_003_520;
        assert_eq!(check_retained(1, 5, "from_revision").unwrap(), 1);
        assert_eq!(
            check_retained(1, first_trim - 1, "from_revision").unwrap(),
            1
        );
        let applied = first_trim + 17;
        assert_eq!(
            check_retained(3_520, applied, "from_revision").unwrap(),
            3_520
        );
        let refused = check_retained(3_519, applied, "Last-Event-ID").unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidRequest);
        assert_eq!(refused.details["field"], "Last-Event-ID");
        assert_eq!(refused.details["oldest_revision"], 3_520);
    }

    #[test]
    fn only_an_entry_seen_to_end_in_the_page_has_a_last_event() {
        let page = [
            ((7, 0), ()),
            ((7, 1), ()),
            ((8, 0), ()),
            ((9, 0), ()),
            ((9, 1), ()),
        ];
        assert_eq!(
            entry_ends(&page, true),
            [false, true, true, false, true],
            "a page that reached the feed's end holds its last entry whole"
        );
        assert_eq!(
            entry_ends(&page, false),
            [false, true, true, false, false],
            "a page cut by its size may have left the rest of its last entry out"
        );
        assert!(entry_ends(&[] as &[(FeedPosition, ())], true).is_empty());
    }
}
