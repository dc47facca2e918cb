//! Reads, with the session rules of SPEC §3: linearizable reads at the leader, `bounded`
//! and `any` reads spread over the endpoints, every answer checked against the session;
//! tombstones and watches.

use reqwest::Method;

use super::retry::Mode;
use super::routing::{read_route, Route};
use super::transport::{chunk_stream, encode, read_json, Call};
use super::{lock, Client, Result};
use crate::api::{
    Consistency, HistoryRequest, HistoryResponse, ListRequest, ListResponse, ProbeRequest,
    ProbeResponse, ReadOptions, ReadRequest, ReadResponse, RecallRequest, RecallResponse,
    Tombstone,
};
use crate::error::ClientError;
use crate::requests::ReadQuery;
use crate::watch::{self, ChunkStream, WatchStream};

/// Linearizable re-reads after a stale answer, before giving up with `SessionRegression`.
pub const SESSION_RETRIES_MAX: u32 = 2;

impl Client {
    /// Reads `key`. Options left `None` take the client defaults. 404 `not_found` for a
    /// key that was never written.
    pub async fn read(&self, key: &str, options: ReadOptions) -> Result<ReadResponse> {
        self.session_read(ReadRequest::new(key, options), Some(key))
            .await
    }

    /// Lists keys under a prefix; the request's read options default to the client's.
    pub async fn list(&self, request: ListRequest) -> Result<ListResponse> {
        self.session_read(request, None).await
    }

    /// Notes whose anchors match the cues; the request's read options default to the
    /// client's.
    pub async fn recall(&self, request: RecallRequest) -> Result<RecallResponse> {
        self.session_read(request, None).await
    }

    /// Value record vs retention record of `key` on the node that serves the read (pin the
    /// client to a node to probe that replica).
    pub async fn probe(&self, key: &str, options: ReadOptions) -> Result<ProbeResponse> {
        self.session_read(ProbeRequest::new(key, options), Some(key))
            .await
    }

    /// The key's events, oldest first.
    pub async fn history(&self, key: &str, options: ReadOptions) -> Result<HistoryResponse> {
        self.session_read(HistoryRequest::new(key, options), Some(key))
            .await
    }

    /// A tombstone by id; tombstones are kept forever. The read options (defaulting to the
    /// client's) go as query parameters; `bounded`/`any` reads spread over the nodes.
    /// With a session, its revision goes as `min_revision` (a replica behind the session
    /// does not answer 404 for a tombstone the session has seen made), and a node that has
    /// not applied it is followed by one linearizable read at the leader; when the
    /// leader cannot answer it, the node's `stale_read` stands (as in `session_read`).
    pub async fn tombstone(&self, id: &str, options: ReadOptions) -> Result<Tombstone> {
        let mut options = self.effective(options);
        options.min_revision = options.min_revision.max(self.session_revision());
        match self.tombstone_with(id, options, Mode::Read).await {
            Err(stale) if self.behind_the_session(&stale) => {
                let at_leader = ReadOptions {
                    consistency: Some(Consistency::Linearizable),
                    max_staleness_ms: None,
                    min_revision: options.min_revision,
                };
                match self.tombstone_with(id, at_leader, Mode::Once).await {
                    Err(err) if err.is_transient() => Err(stale),
                    answer => answer,
                }
            }
            answer => answer,
        }
    }

    async fn tombstone_with(
        &self,
        id: &str,
        options: ReadOptions,
        mode: Mode,
    ) -> Result<Tombstone> {
        let mut query = Vec::new();
        if let Some(consistency) = options.consistency {
            query.push(("consistency", consistency.as_str().to_string()));
        }
        if let Some(ms) = options.max_staleness_ms {
            query.push(("max_staleness_ms", ms.to_string()));
        }
        if let Some(revision) = options.min_revision {
            query.push(("min_revision", revision.to_string()));
        }
        let call = Call {
            method: Method::GET,
            route: read_route(options.consistency),
            path: &["v1", "tombstones", id],
            query,
            body: None,
            mode,
            timeout: Some(self.timeouts.request),
        };
        self.call(&call, read_json).await
    }

    /// Changes under `prefix` from `from_revision` (inclusive) on, in revision order.
    /// Without `from_revision` the watch starts after the leader's applied index, so even
    /// the first reconnect leaves no gap. See [`crate::watch`] for resumption.
    pub async fn watch(
        &self,
        prefix: Option<&str>,
        from_revision: Option<u64>,
    ) -> Result<WatchStream> {
        let from_revision = match from_revision {
            Some(revision) => revision,
            None => self.leader_status().await?.applied_index + 1,
        };
        watch::open(self.clone(), prefix.map(str::to_string), from_revision).await
    }

    /// Opens `GET /v1/watch` at the leader: the cached one for a new watch, the one the
    /// nodes name now when `reopening` (a stream broke, often because its leader went).
    pub(crate) async fn open_watch(
        &self,
        prefix: Option<&str>,
        from_revision: u64,
        reopening: bool,
    ) -> Result<ChunkStream> {
        let mut query = vec![("from_revision", from_revision.to_string())];
        query.extend(prefix.map(|p| ("prefix", p.to_string())));
        let call = Call {
            method: Method::GET,
            route: match reopening {
                true => Route::CurrentLeader,
                false => Route::Leader,
            },
            path: &["v1", "watch"],
            query,
            body: None,
            mode: Mode::Read,
            timeout: None,
        };
        self.call(&call, |response| {
            futures::future::ready(Ok(chunk_stream(response)))
        })
        .await
    }

    /// A consistency-carrying read with the session rules of SPEC §3: send the session
    /// revision as `min_revision`, check the answer against the session, and on a stale
    /// answer (or a node that has not applied the session revision) re-read linearizably at
    /// the leader.
    ///
    /// - The read itself is retried across the nodes as any read is; each re-read at the
    ///   leader is one attempt.
    /// - A re-read the leader cannot answer (none known, no majority, unreachable) ends
    ///   the read with the answer that sent it there: the node's own `stale_read` (SPEC
    ///   §3: a node cut off from the majority answers `stale_read`), not the re-read's
    ///   `no_leader` after a second round of retries.
    async fn session_read<Q: ReadQuery>(
        &self,
        mut request: Q,
        absent_key: Option<&str>,
    ) -> Result<Q::Output> {
        let mut options = self.effective(request.options());
        let mut retries = 0;
        // What sent the read to the leader, once it went there.
        let mut sent_to_the_leader: Option<ClientError> = None;
        loop {
            options.min_revision = options.min_revision.max(self.session_revision());
            request.set_options(options);
            let mode = match sent_to_the_leader {
                None => Mode::Read,
                Some(_) => Mode::Once,
            };
            let stale = match self.query(&request, options.consistency, mode).await {
                Ok(answer) => match self.check(&answer) {
                    Ok(()) => {
                        self.observe(&answer);
                        return Ok(answer);
                    }
                    Err(regression) => regression,
                },
                Err(err) => match sent_to_the_leader {
                    Some(cause) if err.is_transient() => return Err(cause),
                    _ => self.stale_or_fail(err, absent_key)?,
                },
            };
            if retries >= SESSION_RETRIES_MAX {
                return Err(stale);
            }
            retries += 1;
            sent_to_the_leader.get_or_insert(stale);
            options = ReadOptions {
                consistency: Some(Consistency::Linearizable),
                max_staleness_ms: None,
                min_revision: options.min_revision,
            };
        }
    }

    /// `Ok(err)` when a failed read should be retried at the leader under the session
    /// rules; `Err(err)` when it is the answer.
    ///
    /// - A `stale_read` goes to the leader only when the session caused it: the node's
    ///   `applied_index` is below the session revision. A staleness bound the node could
    ///   not meet (no `applied_index`), or a `min_revision` of the call's own beyond the
    ///   session's, is the caller's, and its `stale_read` the answer.
    fn stale_or_fail(
        &self,
        err: ClientError,
        absent_key: Option<&str>,
    ) -> std::result::Result<ClientError, ClientError> {
        let Some(session) = &self.session else {
            return Err(err);
        };
        let session = lock(session);
        match (&err, absent_key) {
            (ClientError::NotFound { .. }, Some(key)) => {
                session.check_absent(key).map_or_else(Ok, |()| Err(err))
            }
            (ClientError::StaleRead { .. }, _) if behind(&err, session.revision()) => Ok(err),
            _ => Err(err),
        }
    }

    /// Whether `err` is a `stale_read` the session caused ([`behind`]).
    fn behind_the_session(&self, err: &ClientError) -> bool {
        let Some(session) = &self.session else {
            return false;
        };
        matches!(err, ClientError::StaleRead { .. }) && behind(err, lock(session).revision())
    }

    async fn query<Q: ReadQuery>(
        &self,
        request: &Q,
        consistency: Option<Consistency>,
        mode: Mode,
    ) -> Result<Q::Output> {
        let call = Call {
            method: Method::POST,
            route: read_route(consistency),
            path: &["v1", Q::PATH],
            query: Vec::new(),
            body: Some(encode(request)?),
            mode,
            timeout: Some(self.timeouts.request),
        };
        self.call(&call, read_json).await
    }

    /// The options a read is sent with: its own, else the client's defaults. A staleness
    /// bound without any consistency named means `bounded` (the node would otherwise serve
    /// the read linearizable and ignore the bound).
    fn effective(&self, options: ReadOptions) -> ReadOptions {
        let max_staleness_ms = options.max_staleness_ms.or(self.defaults.max_staleness_ms);
        let consistency = options
            .consistency
            .or(self.defaults.consistency)
            .or(max_staleness_ms.map(|_| Consistency::Bounded));
        ReadOptions {
            consistency,
            max_staleness_ms,
            min_revision: options.min_revision,
        }
    }
}

/// Whether a node's `stale_read` says it had not applied `session_revision`: its
/// `applied_index` (sent when the node waited for a revision in vain) is below it.
fn behind(stale_read: &ClientError, session_revision: u64) -> bool {
    stale_read
        .details()
        .and_then(|details| details.get("applied_index")?.as_u64())
        .is_some_and(|applied| applied < session_revision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::test_support::*;
    use crate::fake_node::{FakeNode, Reply};
    use crate::session::{KeyMark, Session};
    use serde_json::json;

    /// A session that saw key `k` at version 3, revision 9.
    fn session_at_revision_9() -> Session {
        let mut session = Session::new();
        let known = KeyMark {
            generation: 1,
            forget_epoch: 0,
            version: 3,
            revision: 9,
        };
        session.observe_key("k", known);
        session
    }

    #[tokio::test]
    async fn stale_session_reads_are_retried_linearizably() {
        let node = FakeNode::start(|_, i| match i {
            0 => ok(read_answer(2, 10)),
            _ => ok(read_answer(3, 10)),
        })
        .await;
        let client = pinned(&node).with_session(session_at_revision_9());
        let options = ReadOptions {
            consistency: Some(Consistency::Any),
            ..ReadOptions::default()
        };
        let read = client.read("k", options).await.unwrap();
        assert_eq!(read.record.version, 3);
        let seen = node.seen();
        assert_eq!(body(&seen[0])["consistency"], "any");
        assert_eq!(body(&seen[0])["min_revision"], 9);
        assert_eq!(body(&seen[1])["consistency"], "linearizable");
        assert_eq!(body(&seen[1])["min_revision"], 9);
    }

    /// A node's 503 `stale_read`, with `applied_index` when it waited for a revision.
    fn stale_read(applied_index: Option<u64>) -> Reply {
        let mut error = json!({"code": "stale_read", "message": "stale"});
        if let Some(applied) = applied_index {
            error["applied_index"] = json!(applied);
            error["awaited_index"] = json!(9);
        }
        Reply::Json(503, json!({ "error": error }).to_string())
    }

    /// Only a `stale_read` the session caused (the node had not applied its revision, 9)
    /// is re-read at the leader; a bound the node could not meet is the answer.
    #[tokio::test]
    async fn a_session_re_reads_at_the_leader_only_the_stale_reads_it_caused() {
        for (applied, re_read) in [(Some(3), true), (None, false), (Some(12), false)] {
            let node = FakeNode::start(move |_, i| match i {
                0 => stale_read(applied),
                _ => ok(read_answer(3, 10)),
            })
            .await;
            let client = fast(vec![node.addr.clone()])
                .retries_max(0)
                .build()
                .unwrap()
                .pinned(&node.addr)
                .unwrap()
                .with_session(session_at_revision_9());
            let options = ReadOptions {
                max_staleness_ms: Some(0),
                ..ReadOptions::default()
            };
            let read = client.read("k", options).await;
            assert_eq!(read.is_ok(), re_read, "{applied:?}: {read:?}");
            let seen = node.seen();
            assert_eq!(seen.len(), 1 + usize::from(re_read), "{applied:?}");
            if re_read {
                assert_eq!(body(&seen[1])["consistency"], "linearizable");
            }
        }
    }

    #[tokio::test]
    async fn a_staleness_bound_alone_means_bounded() {
        let node = FakeNode::start(|_, _| ok(read_answer(1, 10))).await;
        let options = ReadOptions {
            max_staleness_ms: Some(100),
            ..ReadOptions::default()
        };
        pinned(&node).read("k", options).await.unwrap();
        let explicit = ReadOptions {
            consistency: Some(Consistency::Any),
            max_staleness_ms: Some(100),
            ..ReadOptions::default()
        };
        pinned(&node).read("k", explicit).await.unwrap();
        pinned(&node)
            .read("k", ReadOptions::default())
            .await
            .unwrap();
        let seen = node.seen();
        assert_eq!(body(&seen[0])["consistency"], "bounded");
        assert_eq!(body(&seen[0])["max_staleness_ms"], 100);
        assert_eq!(body(&seen[1])["consistency"], "any");
        assert!(body(&seen[2]).get("consistency").is_none());
    }

    #[tokio::test]
    async fn persistent_regressions_fail_after_bounded_retries() {
        let node = FakeNode::start(|_, _| ok(read_answer(1, 10))).await;
        let mut session = Session::new();
        session.observe_key(
            "k",
            KeyMark {
                generation: 1,
                forget_epoch: 1,
                version: 2,
                revision: 8,
            },
        );
        let client = pinned(&node).with_session(session);
        let err = client.read("k", ReadOptions::default()).await.unwrap_err();
        assert!(
            matches!(err, ClientError::SessionRegression { .. }),
            "{err:?}"
        );
        assert_eq!(node.seen().len(), SESSION_RETRIES_MAX as usize + 1);
    }

    #[tokio::test]
    async fn not_found_for_a_key_the_session_saw_is_retried() {
        let node = FakeNode::start(|_, i| match i {
            0 => Reply::Json(
                404,
                r#"{"error":{"code":"not_found","message":"absent"}}"#.into(),
            ),
            _ => ok(read_answer(3, 10)),
        })
        .await;
        let mut session = Session::new();
        let mark = KeyMark {
            generation: 1,
            forget_epoch: 0,
            version: 3,
            revision: 3,
        };
        session.observe_key("k", mark);
        let client = pinned(&node).with_session(session);
        assert!(client.read("k", ReadOptions::default()).await.is_ok());
        // Without a session a 404 is the answer.
        let node = FakeNode::start(|_, _| {
            Reply::Json(
                404,
                r#"{"error":{"code":"not_found","message":"absent"}}"#.into(),
            )
        })
        .await;
        let err = pinned(&node).read("k", ReadOptions::default()).await;
        assert!(matches!(err, Err(ClientError::NotFound { .. })));
        assert_eq!(node.seen().len(), 1);
    }
}
