//! The change feed, `GET /v1/watch`, against real nodes (SPEC §5 and its extension):
//! events in revision order under a prefix, `from_revision=0` from the oldest retained
//! event, a live stream that sees the next change, and a start before the first event
//! (revision 1, which has none) that replays from the first event, since nothing was
//! trimmed.

mod support;

use std::time::Duration;

use cairn_api::{EventKind, ForgetRequest, WatchEvent, WriteRequest};
use cairn_client::{Client, WatchStream};
use futures::StreamExt;
use serde_json::{json, Value};
use support::{Cluster, LEADER_TIMEOUT};

/// Bound on waiting for one event.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

async fn next_event(stream: &mut WatchStream) -> WatchEvent {
    tokio::time::timeout(EVENT_TIMEOUT, stream.next())
        .await
        .expect("an event within the timeout")
        .expect("the stream is open")
        .expect("an event, not an error")
}

/// The first `n` events of a raw SSE answer, as `(id, key)`.
async fn raw_events(answer: &mut reqwest::Response, n: usize) -> Vec<(String, String)> {
    let mut text = String::new();
    loop {
        // Only whole events (each ends with a blank line): a chunk may end mid-number.
        let whole: Vec<&str> = match text.rfind("\n\n") {
            Some(end) => text[..end].split("\n\n").collect(),
            None => Vec::new(),
        };
        if whole.len() >= n {
            return whole[..n].iter().map(|event| id_and_key(event)).collect();
        }
        let chunk = tokio::time::timeout(EVENT_TIMEOUT, answer.chunk())
            .await
            .expect("an event within the timeout")
            .expect("stream")
            .expect("an event before the end");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
}

fn id_and_key(event: &str) -> (String, String) {
    let field = |name: &str| {
        event
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {event:?}"))
            .trim()
            .to_string()
    };
    let data: Value = serde_json::from_str(&field("data:")).expect("JSON data");
    (
        field("id:"),
        data["key"].as_str().expect("a key").to_string(),
    )
}

/// The `id:` of the first event of a raw SSE answer, a revision.
async fn first_event_id(mut answer: reqwest::Response) -> u64 {
    let (id, _) = raw_events(&mut answer, 1).await.remove(0);
    id.parse().expect("a numeric event id")
}

async fn write(client: &Client, key: &str) -> u64 {
    client
        .write(WriteRequest::new(key, json!(key), "t65"))
        .await
        .expect("write")
        .revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_replays_from_the_oldest_event_follows_live_and_resumes_from_any_untrimmed_start() {
    let cluster = Cluster::start(3).await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    let first = write(&client, "w/1").await;
    let second = write(&client, "w/2").await;
    let other = write(&client, "x/1").await;
    let forgot = client
        .forget(ForgetRequest::new("w/1", "t65", "test"))
        .await
        .expect("forget")
        .revision;

    // From the oldest retained event, only the prefix's events, in revision order.
    let mut replay = client.watch(Some("w/"), Some(0)).await.expect("watch");
    let seen: Vec<(u64, String, EventKind)> = [
        next_event(&mut replay).await,
        next_event(&mut replay).await,
        next_event(&mut replay).await,
    ]
    .into_iter()
    .map(|e| (e.revision, e.key, e.kind))
    .collect();
    assert_eq!(
        seen,
        vec![
            (first, "w/1".to_string(), EventKind::Written),
            (second, "w/2".to_string(), EventKind::Written),
            (forgot, "w/1".to_string(), EventKind::Forgotten),
        ],
        "x/1 at revision {other} is outside the prefix"
    );

    // Live: a stream opened now sees the next change and nothing before it.
    let mut live = client.watch(Some("w/"), None).await.expect("watch");
    let next = write(&client, "w/3").await;
    let event = next_event(&mut live).await;
    assert_eq!((event.revision, event.key.as_str()), (next, "w/3"));

    // A reconnecting SSE client sends `Last-Event-ID`: the stream resumes after it.
    let http = reqwest::Client::builder()
        .timeout(EVENT_TIMEOUT)
        .build()
        .expect("http client");
    let resumed = http
        .get(format!("{}/v1/watch?prefix=w/", cluster.endpoint(1)))
        .header("Last-Event-ID", second.to_string())
        .send()
        .await
        .expect("answer");
    assert_eq!(resumed.status().as_u16(), 200);
    assert_eq!(
        first_event_id(resumed).await,
        forgot,
        "the first w/ event after {second}"
    );
    let malformed = http
        .get(format!("{}/v1/watch", cluster.endpoint(1)))
        .header("Last-Event-ID", "yesterday")
        .send()
        .await
        .expect("answer");
    assert_eq!(malformed.status().as_u16(), 400);
    // The header twice, even with one well-formed copy, and a prefix whose `%` escapes no
    // byte, are refused naming what is wrong instead of picking a reading.
    let twice = http
        .get(format!("{}/v1/watch", cluster.endpoint(1)))
        .header("Last-Event-ID", second.to_string())
        .header("Last-Event-ID", "junk")
        .send()
        .await
        .expect("answer");
    assert_eq!(twice.status().as_u16(), 400);
    let body: Value = twice.json().await.expect("an error body");
    assert_eq!(body["error"]["field"], "Last-Event-ID", "{body}");
    for query in ["prefix=%zz", "prefix=%", "prefix=w%2", "prefix=%+1"] {
        let answer = http
            .get(format!("{}/v1/watch?{query}", cluster.endpoint(1)))
            .send()
            .await
            .expect("answer");
        assert_eq!(answer.status().as_u16(), 400, "{query}");
        let body: Value = answer.json().await.expect("an error body");
        assert_eq!(body["error"]["field"], "prefix", "{query}: {body}");
    }

    // Revision 1 is the membership entry, which has no event, and nothing was trimmed
    // from the feed: a start there, on every node, replays from the first write, like a
    // Last-Event-ID of 0. (The 400 for a start below a trimmed floor needs a million
    // revisions; `watch.rs` tests it.)
    assert!(first > 1, "the first write follows the membership entry");
    for id in cluster.ids() {
        cluster.wait_applied(id, next, EVENT_TIMEOUT).await;
        let url = format!("{}/v1/watch?from_revision=1", cluster.endpoint(id));
        let accepted = http.get(&url).send().await.expect("answer");
        assert_eq!(accepted.status().as_u16(), 200, "node {id}");
        assert_eq!(first_event_id(accepted).await, first, "node {id}");
    }
    let resumed = http
        .get(format!("{}/v1/watch", cluster.endpoint(1)))
        .header("Last-Event-ID", "0")
        .send()
        .await
        .expect("answer");
    assert_eq!(resumed.status().as_u16(), 200);
    assert_eq!(first_event_id(resumed).await, first);

    // The documented template with empty values: both absent, so a live stream of every
    // key, which sees the next change.
    let empty = http
        .get(format!(
            "{}/v1/watch?prefix=&from_revision=",
            cluster.endpoint(1)
        ))
        .send()
        .await
        .expect("answer");
    assert_eq!(
        empty.status().as_u16(),
        200,
        "empty query values are absent"
    );
    let next = write(&client, "z/1").await;
    assert_eq!(first_event_id(empty).await, next, "the next change, live");
    // A non-empty bad value, or an unknown parameter even when empty, is still refused.
    for (query, field) in [
        ("from_revision=soon", "from_revision"),
        ("prefix=&from_revision=-1", "from_revision"),
        ("bogus=", "bogus"),
    ] {
        let refused = http
            .get(format!("{}/v1/watch?{query}", cluster.endpoint(1)))
            .send()
            .await
            .expect("answer");
        assert_eq!(refused.status().as_u16(), 400, "{query}");
        let body: serde_json::Value = refused.json().await.expect("JSON error");
        assert_eq!(
            (&body["error"]["code"], &body["error"]["field"]),
            (&json!("invalid_request"), &json!(field)),
            "{query}: {body}"
        );
    }
}

/// The events of one batch share a revision: each but the entry's last has the id
/// `REVISION:SEQ`, so a client that reconnects with `Last-Event-ID` after any of them gets
/// exactly the rest of the batch, then what follows, and nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_inside_a_batch_sends_exactly_the_rest_of_it() {
    let cluster = Cluster::start(3).await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    let before = write(&client, "b/0").await;
    let http = reqwest::Client::builder()
        .timeout(EVENT_TIMEOUT)
        .build()
        .expect("http client");
    let batch = json!({"ops": [
        {"op": "write", "key": "b/1", "value": 1, "actor": "t65"},
        {"op": "write", "key": "outside/1", "value": 1, "actor": "t65"},
        {"op": "write", "key": "b/2", "value": 2, "actor": "t65"},
        {"op": "forget", "key": "b/1", "actor": "t65", "reason": "test"},
    ]});
    let answer = http
        .post(format!("{}/v1/batch", cluster.endpoint(1)))
        .json(&batch)
        .send()
        .await
        .expect("batch");
    assert_eq!(answer.status().as_u16(), 200);
    let after = write(&client, "b/3").await;
    let rev = before + 1;
    assert_eq!(
        after,
        rev + 1,
        "the batch is one entry between the two writes"
    );

    let watch = |node: u64, query: String, last_event_id: Option<String>| {
        let mut request = http.get(format!("{}/v1/watch?{query}", cluster.endpoint(node)));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        request.send()
    };
    let mut all = watch(2, format!("from_revision={before}"), None)
        .await
        .expect("answer");
    assert_eq!(all.status().as_u16(), 200);
    assert_eq!(
        raw_events(&mut all, 6).await,
        [
            (before.to_string(), "b/0"),
            (format!("{rev}:0"), "b/1"),
            (format!("{rev}:1"), "outside/1"),
            (format!("{rev}:2"), "b/2"),
            (rev.to_string(), "b/1"),
            (after.to_string(), "b/3"),
        ]
        .map(|(id, key)| (id, key.to_string())),
        "every event of the batch but its last carries its place"
    );

    // Under a prefix, from each place of the batch: the rest of it (filtered), then b/3.
    let expected_after = [
        (
            format!("{rev}:0"),
            vec![(format!("{rev}:2"), "b/2"), (rev.to_string(), "b/1")],
        ),
        (
            format!("{rev}:1"),
            vec![(format!("{rev}:2"), "b/2"), (rev.to_string(), "b/1")],
        ),
        (format!("{rev}:2"), vec![(rev.to_string(), "b/1")]),
        (rev.to_string(), vec![]),
    ];
    for (last_seen, rest) in expected_after {
        for node in cluster.ids() {
            cluster.wait_applied(node, after, EVENT_TIMEOUT).await;
            let mut resumed = watch(node, "prefix=b/".into(), Some(last_seen.clone()))
                .await
                .expect("answer");
            assert_eq!(resumed.status().as_u16(), 200, "node {node}, {last_seen}");
            let mut want: Vec<(String, String)> = rest
                .iter()
                .map(|(id, key)| (id.clone(), key.to_string()))
                .collect();
            want.push((after.to_string(), "b/3".to_string()));
            assert_eq!(
                raw_events(&mut resumed, want.len()).await,
                want,
                "node {node}, Last-Event-ID {last_seen}"
            );
        }
    }
    for malformed in [
        format!("{rev}:"),
        format!(":{rev}"),
        format!("{rev}:1:2"),
        "1.5".into(),
    ] {
        let refused = watch(1, String::new(), Some(malformed.clone()))
            .await
            .expect("answer");
        assert_eq!(refused.status().as_u16(), 400, "{malformed}");
    }
}

/// `limits.watchers_max` bounds the open streams of a node: one more is 503 `overloaded`
/// naming the limit, and a stream that ends gives its slot back. Streams end promptly at
/// shutdown (a stopping node does not wait for its watchers to go away).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_serves_at_most_watchers_max_streams_and_ends_them_at_shutdown() {
    let mut cluster = Cluster::builder(1)
        .config("[limits]\nwatchers_max = 2\n")
        .start()
        .await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let client = cluster.client();
    let first = client.watch(None, None).await.expect("first stream");
    let _second = client.watch(None, None).await.expect("second stream");
    let http = reqwest::Client::builder()
        .timeout(EVENT_TIMEOUT)
        .build()
        .expect("http client");
    let watch_url = format!("{}/v1/watch", cluster.endpoint(1));
    let refused = http.get(&watch_url).send().await.expect("answer");
    assert_eq!(refused.status().as_u16(), 503);
    let body: serde_json::Value = refused.json().await.expect("JSON error");
    assert_eq!(body["error"]["code"], "overloaded", "{body}");
    assert_eq!(body["error"]["limit"], 2, "{body}");
    assert_eq!(body["error"]["field"], "watch", "{body}");

    // Closing a stream frees its slot (the node notices the closed connection on its next
    // write to it, the keep-alive or an event: a write makes one now).
    drop(first);
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    let mut third = loop {
        write(&client, "free/1").await;
        let answer = http.get(&watch_url).send().await.expect("answer");
        if answer.status().as_u16() == 200 {
            break answer;
        }
        assert_eq!(answer.status().as_u16(), 503);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed stream's slot came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // Shutdown ends the open streams: the node exits well within its 10 s drain bound.
    let stopped = std::time::Instant::now();
    let status = tokio::task::block_in_place(|| cluster.terminate(1));
    let elapsed = stopped.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        elapsed < Duration::from_secs(5),
        "stopping with open watchers took {elapsed:?}"
    );
    let ended = tokio::time::timeout(EVENT_TIMEOUT, async {
        while let Ok(Some(_)) = third.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream ended with the node");
}
