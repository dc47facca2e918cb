//! `GET /v1/watch` as a [`WatchStream`] of [`WatchEvent`]s: Server-Sent Events parsed from
//! `data:` lines, resumed transparently after a broken connection.
//!
//! Resumption: the stream always knows the revision to resume from (the caller's
//! `from_revision`, or the leader's applied index + 1, then the last delivered revision).
//! It resumes *at* the last delivered revision, not after it, because one batch entry
//! produces several events with the same revision and the connection may break between
//! them; events already delivered at that revision are recognised by `(key, version)` and
//! skipped. `from_revision` is therefore treated as inclusive. At most `retries_max`
//! consecutive reconnects without a delivered event are made, then the stream yields the
//! last error and ends.

use std::collections::VecDeque;
use std::pin::Pin;

use futures::{Stream, StreamExt};

use crate::api::{ErrorBody, WatchEvent};
use crate::client::Client;
use crate::error::ClientError;

/// The events of one watch, in revision order. Ends after a definite error.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, ClientError>> + Send>>;

/// The raw chunks of an open SSE response.
pub(crate) type ChunkStream = Pin<Box<dyn Stream<Item = Result<Vec<u8>, ClientError>> + Send>>;

/// Longest SSE line accepted: one event is a few hundred bytes, so anything this long is a
/// broken or hostile stream, not an event.
const SSE_LINE_BYTES_MAX: usize = 1 << 20;

/// Opens the watch and returns its stream; connection errors surface here.
pub(crate) async fn open(
    client: Client,
    prefix: Option<String>,
    from_revision: u64,
) -> Result<WatchStream, ClientError> {
    let chunks = client
        .open_watch(prefix.as_deref(), from_revision, false)
        .await?;
    let state = Watch {
        client,
        prefix,
        resume_from: from_revision,
        delivered_at_resume: Vec::new(),
        chunks: Some(chunks),
        parser: SseParser::default(),
        pending: VecDeque::new(),
        reconnects: 0,
        last_error: None,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut watch| async move {
        let item = watch.next_event().await?;
        Some((item, watch))
    });
    Ok(Box::pin(stream))
}

struct Watch {
    client: Client,
    prefix: Option<String>,
    /// Revision to ask for on reconnect: the last delivered one (inclusive).
    resume_from: u64,
    /// `(key, version)` of the events already delivered at `resume_from`.
    delivered_at_resume: Vec<(String, u64)>,
    chunks: Option<ChunkStream>,
    parser: SseParser,
    pending: VecDeque<WatchEvent>,
    /// Consecutive reconnects without a delivered event (bounded by `retries_max`).
    reconnects: u32,
    last_error: Option<ClientError>,
    done: bool,
}

impl Watch {
    /// The next event, the error that ends the stream, or `None` once ended.
    ///
    /// Each turn either delivers, reads one chunk (waiting for events is the point of a
    /// watch, but the node sends keep-alives, so a silence longer than the client's
    /// `watch_silence` means a stopped node and counts as a broken stream), or makes one of
    /// the bounded reconnects.
    async fn next_event(&mut self) -> Option<Result<WatchEvent, ClientError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.remember(&event);
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            if let Err(err) = self.advance().await {
                self.done = true;
                return Some(Err(err));
            }
        }
    }

    async fn advance(&mut self) -> Result<(), ClientError> {
        let Some(chunks) = self.chunks.as_mut() else {
            return self.reconnect().await;
        };
        let silence_max = self.client.watch_silence();
        let Ok(next) = tokio::time::timeout(silence_max, chunks.next()).await else {
            self.broken(Some(ClientError::Transport {
                endpoint: "watch".into(),
                message: format!("no byte, not even a keep-alive, for {silence_max:?}"),
                sent: true,
            }));
            return Ok(());
        };
        match next {
            Some(Ok(chunk)) => self.accept(&chunk),
            Some(Err(err)) => {
                self.broken(Some(err));
                Ok(())
            }
            None => {
                self.broken(None);
                Ok(())
            }
        }
    }

    fn accept(&mut self, chunk: &[u8]) -> Result<(), ClientError> {
        for payload in self.parser.push(chunk)? {
            let event = decode_event(&payload)?;
            if !self.already_delivered(&event) {
                self.pending.push_back(event);
            }
        }
        Ok(())
    }

    fn broken(&mut self, err: Option<ClientError>) {
        self.chunks = None;
        self.reconnects += 1;
        if err.is_some() {
            self.last_error = err;
        }
    }

    async fn reconnect(&mut self) -> Result<(), ClientError> {
        let retry = self.client.retry_policy();
        if self.reconnects > retry.retries_max {
            return Err(self
                .last_error
                .take()
                .unwrap_or_else(|| ClientError::Transport {
                    endpoint: "watch".into(),
                    message: format!("stream closed {} times without an event", self.reconnects),
                    sent: true,
                }));
        }
        tokio::time::sleep(retry.backoff(self.reconnects)).await;
        let chunks = self
            .client
            .open_watch(self.prefix.as_deref(), self.resume_from, true)
            .await?;
        self.chunks = Some(chunks);
        // A partial line from the broken connection must not prefix the new stream.
        self.parser = SseParser::default();
        Ok(())
    }

    fn already_delivered(&self, event: &WatchEvent) -> bool {
        event.revision < self.resume_from
            || (event.revision == self.resume_from
                && self
                    .delivered_at_resume
                    .iter()
                    .any(|(key, version)| *key == event.key && *version == event.version))
    }

    fn remember(&mut self, event: &WatchEvent) {
        if event.revision != self.resume_from {
            self.resume_from = event.revision;
            self.delivered_at_resume.clear();
        }
        self.delivered_at_resume
            .push((event.key.clone(), event.version));
        self.reconnects = 0;
    }
}

/// A `data:` payload is a watch event, or an error body the server sends before closing.
fn decode_event(payload: &str) -> Result<WatchEvent, ClientError> {
    serde_json::from_str::<WatchEvent>(payload).map_err(|err| {
        match serde_json::from_str::<ErrorBody>(payload) {
            Ok(body) => {
                ClientError::from_code(body.error.code, body.error.message, &body.error.details)
            }
            Err(_) => ClientError::decode("watch event", err),
        }
    })
}

/// Incremental Server-Sent Events parser: feed it chunks, get the `data` of every complete
/// event. `event:`, `id:`, `retry:` and `:` comment lines are ignored (the payload carries
/// its revision).
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
}

impl SseParser {
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<String>, ClientError> {
        let mut complete = Vec::new();
        for &byte in chunk {
            if byte != b'\n' {
                self.line.push(byte);
                if self.line.len() > SSE_LINE_BYTES_MAX {
                    return Err(ClientError::decode(
                        "watch stream",
                        format!("line longer than {SSE_LINE_BYTES_MAX} bytes"),
                    ));
                }
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.end_line(&line, &mut complete);
        }
        Ok(complete)
    }

    fn end_line(&mut self, line: &[u8], complete: &mut Vec<String>) {
        if line.is_empty() {
            complete.extend(self.data.take());
            return;
        }
        let line = String::from_utf8_lossy(line);
        let Some(value) = line.strip_prefix("data:") else {
            return;
        };
        let value = value.strip_prefix(' ').unwrap_or(value);
        match self.data.as_mut() {
            Some(data) => {
                data.push('\n');
                data.push_str(value);
            }
            None => self.data = Some(value.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_split_across_chunks() {
        let mut parser = SseParser::default();
        assert!(parser.push(b": keepalive\n\nda").unwrap().is_empty());
        assert!(parser.push(b"ta: {\"a\":").unwrap().is_empty());
        let events = parser
            .push(b"1}\r\n\r\nevent: change\ndata:x\ndata: y\n\n")
            .unwrap();
        assert_eq!(events, vec!["{\"a\":1}".to_string(), "x\ny".to_string()]);
    }

    #[test]
    fn rejects_endless_lines() {
        let mut parser = SseParser::default();
        let chunk = vec![b'a'; SSE_LINE_BYTES_MAX + 1];
        assert!(matches!(
            parser.push(&chunk),
            Err(ClientError::Decode { .. })
        ));
    }

    #[test]
    fn decodes_events_and_error_bodies() {
        let event = decode_event(
            r#"{"revision":7,"key":"k","kind":"forgotten","state":"forgotten",
                "version":2,"generation":1,"forget_epoch":2}"#,
        )
        .unwrap();
        assert_eq!((event.revision, event.forget_epoch), (7, 2));
        let err = decode_event(r#"{"error":{"code":"invalid_request","message":"bad prefix"}}"#)
            .unwrap_err();
        assert!(matches!(err, ClientError::InvalidRequest { .. }));
        assert!(matches!(
            decode_event("not json").unwrap_err(),
            ClientError::Decode { .. }
        ));
    }

    fn event(revision: u64, key: &str) -> String {
        serde_json::json!({"revision": revision, "key": key, "kind": "written",
                           "state": "active", "version": 1, "generation": 1,
                           "forget_epoch": 0})
        .to_string()
    }

    /// `REVISION` + `KEY` of each event a stream delivered.
    fn delivered(items: &[Result<WatchEvent, ClientError>]) -> Vec<String> {
        let events = items.iter().filter_map(|item| item.as_ref().ok());
        events.map(|e| format!("{}{}", e.revision, e.key)).collect()
    }

    /// A fast-retrying client that sends everything to `node`.
    fn pinned_to(node: &crate::fake_node::FakeNode, retries: u32) -> Client {
        Client::builder(vec![node.addr.clone()])
            .retries_max(retries)
            .backoff_ms(1, 5)
            .build()
            .unwrap()
            .pinned(&node.addr)
            .unwrap()
    }

    /// `GET /cluster/status` of node `id`, leading with every entry up to 9 applied.
    fn leader_status(id: u64) -> crate::fake_node::Reply {
        let status = serde_json::json!({"node_id": id, "role": "leader", "leader_id": id,
            "term": 4, "last_log_index": 9, "commit_index": 9, "applied_index": 9,
            "ms_since_leader_contact": 0, "voters": [1, 2, 3], "learners": [], "nodes": [],
            "snapshot_index": 0, "log_purged_through": 0});
        crate::fake_node::Reply::Json(200, status.to_string())
    }

    #[tokio::test]
    async fn resumes_at_the_last_revision_without_duplicates() {
        use crate::fake_node::{FakeNode, Reply};
        let node = FakeNode::start(|_, i| match i {
            // One batch entry (revision 5) split by a broken connection.
            0 => Reply::Events(vec![event(5, "a"), event(5, "b")]),
            1 => Reply::Events(vec![event(5, "b"), event(6, "c")]),
            _ => Reply::Json(
                400,
                r#"{"error":{"code":"invalid_request","message":"stop"}}"#.into(),
            ),
        })
        .await;
        let client = pinned_to(&node, crate::client::RETRIES_MAX_DEFAULT);
        let stream = client.watch(Some("p/"), Some(5)).await.unwrap();
        let items: Vec<_> = stream.collect().await;
        assert_eq!(delivered(&items), vec!["5a", "5b", "6c"]);
        assert!(matches!(
            items.last(),
            Some(Err(ClientError::InvalidRequest { .. }))
        ));
        let paths: Vec<String> = node.seen().into_iter().map(|s| s.path).collect();
        assert_eq!(paths[0], "/v1/watch?from_revision=5&prefix=p%2F");
        assert_eq!(paths[1], "/v1/watch?from_revision=5&prefix=p%2F");
        assert_eq!(paths[2], "/v1/watch?from_revision=6&prefix=p%2F");
    }

    #[tokio::test]
    async fn a_silent_stream_is_reopened_at_the_leader_the_nodes_name_now() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;

        use crate::fake_node::{FakeNode, Reply};
        // The cached leader delivers one event, then stops: connections stay open, nothing
        // more is sent, status asks hang too.
        let stopped = FakeNode::start(|seen, _| match seen.path.starts_with("/v1/watch") {
            true => Reply::EventsThenSilence(vec![event(5, "a")]),
            false => Reply::Hang,
        })
        .await;
        let watches = AtomicUsize::new(0);
        let leader = FakeNode::start(move |seen, _| {
            if seen.path == "/cluster/status" {
                return leader_status(2);
            }
            match watches.fetch_add(1, Ordering::Relaxed) {
                0 => Reply::Events(vec![event(5, "a"), event(6, "b")]),
                _ => Reply::Json(
                    400,
                    r#"{"error":{"code":"invalid_request","message":"stop"}}"#.into(),
                ),
            }
        })
        .await;
        let client = Client::builder(vec![stopped.addr.clone(), leader.addr.clone()])
            .backoff_ms(1, 5)
            .discovery_timeout(Duration::from_millis(200))
            .watch_silence_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        client.cache_leader(&stopped.addr);
        let stream = client.watch(None, Some(5)).await.unwrap();
        let items: Vec<_> = tokio::time::timeout(Duration::from_secs(10), stream.collect())
            .await
            .expect("the watch stayed on the stopped node");
        assert_eq!(delivered(&items), vec!["5a", "6b"]);
        assert!(matches!(
            items.last(),
            Some(Err(ClientError::InvalidRequest { .. }))
        ));
        let reopened: Vec<String> = leader
            .seen()
            .into_iter()
            .filter(|s| s.path.starts_with("/v1/watch"))
            .map(|s| s.path)
            .collect();
        assert_eq!(reopened[0], "/v1/watch?from_revision=5");
    }

    /// A watch started with no revision asks the leader where to start, and waits for a
    /// leader as other calls do: started during an election, it failed at once.
    #[tokio::test]
    async fn a_watch_started_without_a_leader_waits_for_one() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        use crate::fake_node::{FakeNode, Reply};
        let statuses = Arc::new(AtomicUsize::new(0));
        let asked = statuses.clone();
        let node = FakeNode::start(move |seen, _| {
            if !seen.path.starts_with("/cluster/status") {
                return Reply::Events(vec![event(10, "a")]);
            }
            match asked.fetch_add(1, Ordering::Relaxed) {
                0..=2 => Reply::Json(
                    503,
                    r#"{"error":{"code":"no_leader","message":"electing"}}"#.into(),
                ),
                _ => leader_status(1),
            }
        })
        .await;
        let client = pinned_to(&node, crate::client::RETRIES_MAX_DEFAULT);
        let stream = client.watch(None, None).await.expect("waited for a leader");
        let first = stream.take(1).collect::<Vec<_>>().await;
        assert_eq!(delivered(&first), vec!["10a"]);
        let opened = node
            .seen()
            .into_iter()
            .find(|s| s.path.starts_with("/v1/watch"));
        assert_eq!(
            opened.map(|s| s.path).as_deref(),
            Some("/v1/watch?from_revision=10")
        );
    }

    #[tokio::test]
    async fn gives_up_after_bounded_empty_reconnects() {
        use crate::fake_node::{FakeNode, Reply};
        let node = FakeNode::start(|_, _| Reply::Events(Vec::new())).await;
        let client = pinned_to(&node, 2);
        let items: Vec<_> = client.watch(None, Some(1)).await.unwrap().collect().await;
        assert_eq!(items.len(), 1);
        assert!(matches!(items[0], Err(ClientError::Transport { .. })));
        assert_eq!(node.seen().len(), 3, "first open + retries_max reconnects");
    }
}
