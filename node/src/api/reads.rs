//! Read endpoints. Each passes a consistency barrier first (SPEC §3), then reads local
//! state and says how it was served.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairn_api::{
    Consistency, ErrorCode, HistoryRequest, HistoryResponse, ListRequest, ListResponse, Permission,
    ProbeRequest, ProbeResponse, ReadOptions, ReadRequest, ReadResponse, RecallNote, RecallRequest,
    RecallResponse, Served, State as KeyState,
};
use cairn_memory::{admit, anchors, render, Slot};

use super::auth::{self, Caller, Presented};
use super::body::{JsonBody, StrictPath, StrictQuery};
use super::error::ApiError;
use super::forward::{self, Kind};
use super::{App, SharedApp};
use crate::consensus::reads::ReadError;
use crate::metrics::Metrics;

type Result<T> = std::result::Result<T, ApiError>;

/// History events returned at most per key: the newest (SPEC §5 Extension).
const HISTORY_EVENTS_MAX: usize = 10_000;
/// Default page size of list and recall.
const PAGE_ITEMS_DEFAULT: u64 = 100;
/// Candidates a recall looks at, at most, across all its cues.
const RECALL_CANDIDATES_MAX: usize = 10_000;
/// A list scans at most this many slots per requested item when filtering by state.
const LIST_SCAN_FACTOR: usize = 10;
/// Slots read from the store at a time by a list scan.
const SCAN_CHUNK_SLOTS: usize = 64;

/// The outcome of a consistency barrier.
enum Barrier {
    /// Serve from local state, to the caller of this token.
    Local(Served, Presented),
    /// A follower relayed a linearizable read to the leader: this is its answer.
    Relayed(Response),
}

/// Runs the barrier that `opts` asks for.
///
/// - linearizable: on the leader, a (shared) quorum round and apply wait; elsewhere relay.
/// - bounded: a fresh read token and apply wait, else `stale_read`; never relays.
/// - any: nothing.
/// - then `min_revision`: wait (bounded) until applied, else `stale_read`.
async fn barrier(
    app: &App,
    headers: &HeaderMap,
    path: &str,
    raw: Bytes,
    opts: ReadOptions,
) -> Result<Barrier> {
    let presented = auth::presented(app, headers)?;
    let consistency = opts.consistency.unwrap_or_default();
    let reads = &app.reads;
    let checked = match consistency {
        Consistency::Linearizable if !app.is_leader() => None,
        Consistency::Linearizable => match reads.linearizable().await {
            Err(ReadError::NotLeader { .. }) => None,
            other => Some(
                other
                    .map(|_| ())
                    .inspect(|_| Metrics::inc(&app.metrics.reads_linearizable)),
            ),
        },
        Consistency::Bounded => {
            let max_ms = opts
                .max_staleness_ms
                .unwrap_or(app.config.reads.default_max_staleness_ms);
            Some(
                reads
                    .bounded(Duration::from_millis(max_ms))
                    .await
                    .map(|_| Metrics::inc(&app.metrics.reads_bounded)),
            )
        }
        Consistency::Any => {
            reads.note_demand();
            Metrics::inc(&app.metrics.reads_any);
            Some(Ok(()))
        }
    };
    match checked {
        None => {
            return forward::to_leader(app, headers, path, raw, Kind::Query, None)
                .await
                .map(Barrier::Relayed)
        }
        Some(Err(e)) => {
            Metrics::inc(&app.metrics.reads_stale_refused);
            return Err(e.into());
        }
        Some(Ok(())) => {}
    }
    if let Some(min_revision) = opts.min_revision {
        let wait = Duration::from_millis(app.config.reads.min_revision_wait_ms);
        reads
            .wait_applied(min_revision, wait)
            .await
            .inspect_err(|_| Metrics::inc(&app.metrics.reads_stale_refused))?;
    }
    Ok(Barrier::Local(served(app, consistency), presented))
}

/// How a read was served ([`App::ms_since_leader_contact`]; `None` when the node never
/// held a read token). The commit index is the highest this node knows.
///
/// - A linearizable read is served only by a leader whose quorum confirmed it in a round
///   begun after the read arrived: SPEC §3's "leader that just confirmed its quorum",
///   whose contact age is 0, not the milliseconds the round and the apply wait took.
fn served(app: &App, consistency: Consistency) -> Served {
    let reads = &app.reads;
    Served {
        node_id: app.node_id,
        role: app.role().to_string(),
        consistency,
        applied_index: reads.applied_index(),
        leader_commit_index: reads.token_index().unwrap_or(0).max(app.commit_index()),
        ms_since_leader_contact: match consistency {
            Consistency::Linearizable => Some(0),
            Consistency::Bounded | Consistency::Any => app.ms_since_leader_contact(),
        },
    }
}

fn check_key(app: &App, key: &str) -> Result<()> {
    admit::key("key", key, &app.config.limits).map_err(ApiError::from)
}

/// The read's caller (after its barrier), or the leader's answer to a relayed read.
macro_rules! reader_or_relay {
    ($app:expr, $presented:expr, $headers:expr, $path:expr, $raw:expr) => {
        match auth::reader($app, $presented, $headers, $path, $raw).await? {
            Ok(caller) => caller,
            Err(relayed) => return Ok(relayed),
        }
    };
}

macro_rules! local_or_relay {
    ($barrier:expr) => {
        match $barrier {
            Barrier::Relayed(resp) => return Ok(resp),
            Barrier::Local(served, presented) => (served, presented),
        }
    };
}

fn read_opts(
    consistency: Option<Consistency>,
    max_staleness_ms: Option<u64>,
    min_revision: Option<u64>,
) -> ReadOptions {
    ReadOptions {
        consistency,
        max_staleness_ms,
        min_revision,
    }
}

pub async fn read(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<ReadRequest>,
) -> Result<Response> {
    let req = &body.value;
    check_key(&app, &req.key)?;
    let opts = read_opts(req.consistency, req.max_staleness_ms, req.min_revision);
    let (served, presented) =
        local_or_relay!(barrier(&app, &headers, "/v1/read", body.raw.clone(), opts).await?);
    reader_or_relay!(&app, presented, &headers, "/v1/read", body.raw.clone())
        .require(Permission::Read, &req.key)?;
    let slot = app
        .view
        .slot(&req.key)?
        .ok_or_else(|| not_found(&req.key, &served))?;
    Ok(Json(ReadResponse {
        record: render::record(&slot),
        served,
    })
    .into_response())
}

/// 404 `not_found`, with the `served` of the read that found nothing: an absence on a
/// lagging follower is as old as that node's applied state, and the caller can tell.
fn not_found(key: &str, served: &Served) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("key {key:?} was never written"),
    )
    .with("key", key)
    .with("served", serde_json::json!(served))
}

pub async fn probe(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<ProbeRequest>,
) -> Result<Response> {
    let req = &body.value;
    check_key(&app, &req.key)?;
    let opts = read_opts(req.consistency, req.max_staleness_ms, req.min_revision);
    let (served, presented) =
        local_or_relay!(barrier(&app, &headers, "/v1/probe", body.raw.clone(), opts).await?);
    reader_or_relay!(&app, presented, &headers, "/v1/probe", body.raw.clone())
        .require(Permission::Read, &req.key)?;
    let slot = app.view.slot(&req.key)?;
    let log_purged_through = app.view.log_purged_through()?;
    Ok(Json(probe_of(
        &req.key,
        slot.as_ref(),
        log_purged_through,
        served,
    ))
    .into_response())
}

/// The value record (the value bytes) vs the retention record (slot metadata, tombstone,
/// history) of a key.
fn probe_of(
    key: &str,
    slot: Option<&Slot>,
    log_purged_through: u64,
    served: Served,
) -> ProbeResponse {
    ProbeResponse {
        key: key.to_string(),
        state: slot.map_or(KeyState::Absent, |s| s.state.into()),
        value_present: slot.is_some_and(|s| s.value.is_some()),
        retention_present: slot.is_some(),
        version: slot.map(|s| s.version).unwrap_or(0),
        generation: slot.map(|s| s.generation).unwrap_or(0),
        forget_epoch: slot.map(|s| s.forget_epoch).unwrap_or(0),
        tombstone_id: slot
            .and_then(|s| s.tombstone.as_ref())
            .map(|t| t.id.clone()),
        value_revision: slot.map(|s| s.value_revision).unwrap_or(0),
        log_purged_through,
        served,
    }
}

pub async fn history(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<HistoryRequest>,
) -> Result<Response> {
    let req = &body.value;
    check_key(&app, &req.key)?;
    let opts = read_opts(req.consistency, req.max_staleness_ms, req.min_revision);
    let (served, presented) =
        local_or_relay!(barrier(&app, &headers, "/v1/history", body.raw.clone(), opts).await?);
    reader_or_relay!(&app, presented, &headers, "/v1/history", body.raw.clone())
        .require(Permission::Read, &req.key)?;
    let events = app.view.history(&req.key, HISTORY_EVENTS_MAX)?;
    if events.is_empty() {
        return Err(not_found(&req.key, &served));
    }
    Ok(Json(HistoryResponse {
        key: req.key.clone(),
        events: events.into_iter().map(Into::into).collect(),
        served,
    })
    .into_response())
}

/// 400 for a tombstone id that is not 1-128 hex characters (SPEC §2 extension), the
/// empty one of `GET /v1/tombstones/` included, which no route matches.
pub fn invalid_tombstone_id() -> ApiError {
    ApiError::invalid("tombstone id must be 1-128 hex characters").with("field", "id")
}

/// `GET /v1/tombstones/{id}?consistency=&max_staleness_ms=&min_revision=`
pub async fn tombstone(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    id: std::result::Result<StrictPath<String>, ApiError>,
    StrictQuery(opts): StrictQuery<ReadOptions>,
) -> Result<Response> {
    // An id that is not even UTF-8 is as invalid as any other non-hex id.
    let Ok(StrictPath(id)) = id else {
        return Err(invalid_tombstone_id());
    };
    if id.is_empty() || id.len() > 128 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid_tombstone_id());
    }
    // Ids are stored in lowercase; hex is hex in either case.
    let id = id.to_ascii_lowercase();
    let path = format!("/v1/tombstones/{id}{}", query_string(&opts));
    let (_, presented) = local_or_relay!(barrier(&app, &headers, &path, Bytes::new(), opts).await?);
    let caller = reader_or_relay!(&app, presented, &headers, &path, Bytes::new());
    // A tombstone of a key the caller may not read is "not found": its id must not
    // reveal the key's name.
    let tombstone = app
        .view
        .tombstone(&id)?
        .filter(|t| caller.may(Permission::Read, &t.key))
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no tombstone {id}")))?;
    Ok(Json(cairn_api::Tombstone::from(tombstone)).into_response())
}

fn query_string(opts: &ReadOptions) -> String {
    let mut parts = Vec::new();
    if let Some(c) = opts.consistency {
        parts.push(format!("consistency={}", c.as_str()));
    }
    if let Some(ms) = opts.max_staleness_ms {
        parts.push(format!("max_staleness_ms={ms}"));
    }
    if let Some(r) = opts.min_revision {
        parts.push(format!("min_revision={r}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// The page size asked for; out of 1..=`page_items_max` is 400 with `field: "limit"`,
/// `limit` (the largest page) and `size` (the page asked for). The message names the whole
/// range, so the `limit` detail reads as its upper end whichever end was missed.
fn page_limit(app: &App, limit: Option<u64>) -> Result<usize> {
    let max = u64::from(app.config.limits.page_items_max);
    match limit.unwrap_or(PAGE_ITEMS_DEFAULT.min(max)) {
        n if n == 0 || n > max => Err(ApiError::invalid(format!(
            "limit must be from 1 to {max} (limits.page_items_max), not {n}"
        ))
        .with("field", "limit")
        .with("limit", max)
        .with("size", n)),
        n => Ok(n as usize),
    }
}

pub async fn list(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<ListRequest>,
) -> Result<Response> {
    let req = &body.value;
    admit::prefix("prefix", &req.prefix, &app.config.limits)?;
    if let Some(after) = &req.after {
        // A position among keys: what a key may be, or empty (the start).
        admit::prefix("after", after, &app.config.limits)?;
    }
    if req.states.as_ref().is_some_and(Vec::is_empty) {
        return Err(ApiError::invalid(
            "states: an empty list matches no key; leave it out to list every state",
        )
        .with("field", "states"));
    }
    if req.states.iter().flatten().any(|s| *s == KeyState::Absent) {
        return Err(ApiError::invalid(
            "states: absent keys are never listed (a key never written has no record)",
        )
        .with("field", "states"));
    }
    let limit = page_limit(&app, req.limit)?;
    let opts = read_opts(req.consistency, req.max_staleness_ms, req.min_revision);
    let (served, presented) =
        local_or_relay!(barrier(&app, &headers, "/v1/list", body.raw.clone(), opts).await?);
    let caller = reader_or_relay!(&app, presented, &headers, "/v1/list", body.raw.clone());
    let wanted = |s: &Slot| {
        req.states
            .as_ref()
            .is_none_or(|states| states.contains(&s.state.into()))
    };
    let scan_max = limit * LIST_SCAN_FACTOR;
    let mut items = Vec::new();
    let mut budget = PageBudget::new(&app);
    let mut last_seen = None;
    // One slot past the scan's bound is looked at, not listed: it tells a page cut short
    // by the bound (more keys: `next_after`) from one that met the end (`null`).
    let mut examined = 0;
    let scanned = scan_readable(
        &app,
        &caller,
        &req.prefix,
        req.after.as_deref(),
        scan_max + 1,
        |slot| {
            if examined == scan_max {
                return false;
            }
            examined += 1;
            last_seen = Some(slot.key.clone());
            if !wanted(slot) {
                return true;
            }
            items.push(render::record(slot));
            let spent = budget.spend(slot);
            items.len() < limit && !spent
        },
    )?;
    let more = items.len() == limit || budget.spent() || scanned > scan_max;
    let next_after = if more { last_seen } else { None };
    Ok(Json(ListResponse {
        items,
        next_after,
        served,
    })
    .into_response())
}

/// The value bytes one list or recall answer may still take (`limits.page_value_bytes_max`):
/// a page stops after the item that reaches it, so it always holds at least one item and
/// at most the budget plus one value.
struct PageBudget {
    left: usize,
}

impl PageBudget {
    fn new(app: &App) -> Self {
        PageBudget {
            left: app.config.limits.page_value_bytes_max,
        }
    }

    /// Counts `slot`'s value; true once the budget is spent.
    fn spend(&mut self, slot: &Slot) -> bool {
        let bytes = slot.value.as_ref().map_or(0, String::len);
        self.left = self.left.saturating_sub(bytes);
        self.spent()
    }

    fn spent(&self) -> bool {
        self.left == 0
    }
}

/// Visits the slots after `after` under `prefix` that `caller` may read, in key order,
/// until `visit` answers false or `max` were visited; returns how many were visited.
///
/// - The readable ranges ([`auth::readable_ranges`]) are scanned one after another (they
///   are sorted and disjoint).
/// - At most [`SCAN_CHUNK_SLOTS`] slots are held at once: a page of large values is built
///   from a few of them at a time, not from every slot it might look at.
fn scan_readable(
    app: &App,
    caller: &Caller,
    prefix: &str,
    after: Option<&str>,
    max: usize,
    mut visit: impl FnMut(&Slot) -> bool,
) -> Result<usize> {
    let mut visited = 0;
    let mut after = after.map(str::to_string);
    for range in auth::readable_ranges(caller, prefix) {
        loop {
            let want = SCAN_CHUNK_SLOTS.min(max - visited);
            if want == 0 {
                return Ok(visited);
            }
            let chunk = app.view.slots_after(&range, after.as_deref(), want)?;
            for slot in &chunk {
                visited += 1;
                if !visit(slot) {
                    return Ok(visited);
                }
            }
            if chunk.len() < want {
                break;
            }
            after = chunk.last().map(|slot| slot.key.clone());
        }
    }
    Ok(visited)
}

pub async fn recall(
    State(app): State<SharedApp>,
    headers: HeaderMap,
    body: JsonBody<RecallRequest>,
) -> Result<Response> {
    let req = &body.value;
    admit::cues(&req.cues, &app.config.limits)?;
    if let Some(prefix) = &req.prefix {
        admit::prefix("prefix", prefix, &app.config.limits)?;
    }
    let recallable = |s: &KeyState| matches!(s, KeyState::Active | KeyState::Revoked);
    if req.include.as_ref().is_some_and(Vec::is_empty) {
        return Err(ApiError::invalid(
            "include: an empty list matches no note; leave it out for active and revoked notes",
        )
        .with("field", "include"));
    }
    if let Some(state) = req.include.iter().flatten().find(|s| !recallable(s)) {
        return Err(ApiError::invalid(format!(
            "include: {state} notes are never recalled (only active and revoked ones)"
        ))
        .with("field", "include"));
    }
    let limit = page_limit(&app, req.limit)?;
    let opts = read_opts(req.consistency, req.max_staleness_ms, req.min_revision);
    let (served, presented) =
        local_or_relay!(barrier(&app, &headers, "/v1/recall", body.raw.clone(), opts).await?);
    let caller = reader_or_relay!(&app, presented, &headers, "/v1/recall", body.raw.clone());
    let notes = recall_notes(&app, &caller, req, limit)?;
    Ok(Json(RecallResponse { notes, served }).into_response())
}

/// Notes of the keys `caller` may read whose anchors match the cues, best first.
fn recall_notes(
    app: &App,
    caller: &Caller,
    req: &RecallRequest,
    limit: usize,
) -> Result<Vec<RecallNote>> {
    let include = req
        .include
        .clone()
        .unwrap_or_else(|| vec![KeyState::Active, KeyState::Revoked]);
    let mut keys = std::collections::BTreeSet::new();
    for cue in &req.cues {
        for lookup in anchors::index_lookups(cue) {
            let found = match lookup {
                anchors::Lookup::Exact(anchor) => {
                    app.view.keys_for_anchor(&anchor, RECALL_CANDIDATES_MAX)?
                }
                anchors::Lookup::Prefix(prefix) => app
                    .view
                    .keys_under_anchor_prefix(&prefix, RECALL_CANDIDATES_MAX)?
                    .into_iter()
                    .map(|(_, k)| k)
                    .collect(),
            };
            keys.extend(found);
            if keys.len() >= RECALL_CANDIDATES_MAX {
                break;
            }
        }
    }
    let visible = |key: &str| {
        req.prefix
            .as_ref()
            .is_none_or(|p| key.starts_with(p.as_str()))
            && caller.may(Permission::Read, key)
    };
    let recalled = |slot: &Slot| {
        visible(&slot.key)
            && slot.state != cairn_memory::State::Forgotten
            && include.contains(&slot.state.into())
    };
    let mut candidates = Vec::new();
    for key in keys.into_iter().filter(|key| visible(key)) {
        let Some(slot) = app.view.slot(&key)? else {
            continue;
        };
        let matched = anchors::matched_cues(&slot.meta.anchors, &req.cues);
        if recalled(&slot) && !matched.is_empty() {
            candidates.push(anchors::Hit::of(&slot, matched));
        }
    }
    anchors::rank(&mut candidates);
    // The values are read only for the notes answered, best first, until the page is
    // full or its value bytes are spent. A key changed since it was ranked is read as it
    // is now, and left out if it no longer qualifies.
    let mut notes = Vec::new();
    let mut budget = PageBudget::new(app);
    for hit in candidates {
        let Some(slot) = app.view.slot(&hit.key)? else {
            continue;
        };
        let matched = anchors::matched_cues(&slot.meta.anchors, &req.cues);
        if !recalled(&slot) || matched.is_empty() {
            continue;
        }
        notes.push(render::note(&slot, matched));
        if budget.spend(&slot) || notes.len() == limit {
            break;
        }
    }
    Ok(notes)
}
