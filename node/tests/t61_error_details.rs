//! Error details (SPEC §5, "Error details by code") against a real node: every
//! `invalid_request` names its `field` when there is one (decode errors included), size
//! rejections also give `limit` and `size`, an oversize body is 413 with `field: "body"`,
//! and an error inside a batch op names its `op_index`; a body that is not a JSON object
//! (`[]` included), a path parameter that does not decode and a bad query parameter are
//! the same JSON error (an empty query value is absent). None of these requests changes
//! anything.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{Cluster, LEADER_TIMEOUT};

/// One raw HTTP exchange.
const RAW_TIMEOUT: Duration = Duration::from_secs(30);
/// The default request body limit: `limits.value_bytes_max` (1 MiB) + 1 MiB.
const BODY_BYTES_MAX: usize = 2 << 20;

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(RAW_TIMEOUT)
        .build()
        .expect("http client")
}

/// `POST path` to node 1 with `body` (a `Content-Length` body): the status and the JSON
/// answer.
async fn post(cluster: &Cluster, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    post_to(cluster, 1, path, body).await
}

/// [`post`] to node `id`.
async fn post_to(
    cluster: &Cluster,
    id: u64,
    path: &str,
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    let url = format!("{}{path}", cluster.endpoint(id));
    let response = http()
        .post(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status().as_u16();
    let bytes = response.bytes().await.expect("response body");
    let answer = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
    (status, answer)
}

/// `METHOD path` without a body: the status, the `content-type` and the JSON answer.
async fn call(cluster: &Cluster, method: reqwest::Method, path: &str) -> (u16, String, Value) {
    call_with_body(cluster, method, path, None).await
}

/// [`call`] with `body`, when there is one.
async fn call_with_body(
    cluster: &Cluster,
    method: reqwest::Method,
    path: &str,
    body: Option<&'static str>,
) -> (u16, String, Value) {
    let url = format!("{}{path}", cluster.endpoint(1));
    let request = http().request(method, &url);
    let response = match body {
        Some(body) => request.body(body),
        None => request,
    }
    .send()
    .await
    .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = response.bytes().await.expect("response body");
    let answer = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {}", String::from_utf8_lossy(&bytes)));
    (status, content_type, answer)
}

/// The error object of `answer` without `code` and `message`: just the details.
fn details(answer: &Value) -> Value {
    let mut error = answer["error"]
        .as_object()
        .unwrap_or_else(|| panic!("not an error body: {answer}"))
        .clone();
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{answer}"
    );
    error.remove("message");
    error.remove("code");
    Value::Object(error)
}

/// Sends each case and compares status, code and the details exactly.
async fn check(cluster: &Cluster, cases: Vec<(&str, &str, Value, u16, &str, Value)>) {
    for (what, path, body, status, code, want) in cases {
        let (got_status, answer) = post(cluster, path, body.to_string()).await;
        assert_eq!(
            (got_status, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{what}: {answer}"
        );
        assert_eq!(details(&answer), want, "{what}: {answer}");
    }
}

/// `levels` arrays, each the only item of the one around it.
fn nested(levels: usize) -> Value {
    serde_json::from_str(&format!("{}{}", "[".repeat(levels), "]".repeat(levels))).unwrap()
}

/// The cluster's last log index: rejected requests must not move it.
async fn last_log_index(cluster: &Cluster) -> u64 {
    cluster.status(1).await.expect("status").last_log_index
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_rejection_names_its_field_limit_size_and_op_index() {
    let cluster = Cluster::builder(1).uninitialized().start().await;
    let me = cluster.spec(1);

    // -- /cluster/init and /cluster/join validation (before the node is initialized) -----
    let other = json!({"id": 9, "client_addr": "127.0.0.1:1", "peer_addr": "127.0.0.1:2"});
    let this = json!({"id": me.id, "client_addr": me.client_addr, "peer_addr": me.peer_addr});
    let bad_addr = json!({"id": me.id, "client_addr": "nowhere", "peer_addr": me.peer_addr});
    let init_cases = vec![
        (
            "init without this node",
            "/cluster/init",
            json!({"nodes": [other]}),
            400,
            "invalid_request",
            json!({"field": "nodes"}),
        ),
        (
            "init with a bad address",
            "/cluster/init",
            json!({"nodes": [other, bad_addr]}),
            400,
            "invalid_request",
            json!({"field": "nodes[1].client_addr"}),
        ),
        (
            "init with port 0, which names no port peers could reach",
            "/cluster/init",
            json!({"nodes": [other, {"id": 3, "client_addr": "127.0.0.1:3", "peer_addr": "127.0.0.1:0"}]}),
            400,
            "invalid_request",
            json!({"field": "nodes[1].peer_addr"}),
        ),
        (
            "init listing a node twice",
            "/cluster/init",
            json!({"nodes": [this, this]}),
            400,
            "invalid_request",
            json!({"field": "nodes[1].id"}),
        ),
        (
            "init with a node missing its peer address",
            "/cluster/init",
            json!({"nodes": [{"id": 1, "client_addr": "127.0.0.1:1"}]}),
            400,
            "invalid_request",
            json!({"field": "nodes[0].peer_addr"}),
        ),
        (
            "init listing more nodes than any cluster has",
            "/cluster/init",
            json!({"nodes": (1..=65)
                .map(|id| json!({"id": id, "client_addr": format!("127.0.0.1:{}", 20_000 + id), "peer_addr": format!("127.0.0.1:{}", 30_000 + id)}))
                .collect::<Vec<_>>()}),
            413,
            "too_large",
            json!({"field": "nodes", "limit": 64, "size": 65}),
        ),
        (
            "init with two nodes at one peer address",
            "/cluster/init",
            json!({"nodes": [this, {"id": 9, "client_addr": "127.0.0.1:1", "peer_addr": me.peer_addr}]}),
            400,
            "invalid_request",
            json!({"field": "nodes[1].peer_addr"}),
        ),
        (
            "init with two nodes at one peer address, spelled two ways",
            "/cluster/init",
            json!({"nodes": [this, {"id": 9, "client_addr": "127.0.0.1:1",
                "peer_addr": me.peer_addr.replace("127.0.0.1", "localhost")}]}),
            400,
            "invalid_request",
            json!({"field": "nodes[1].peer_addr"}),
        ),
        (
            "init with a host that does not resolve",
            "/cluster/init",
            json!({"nodes": [this, {"id": 9, "client_addr": "nosuch.invalid:1",
                "peer_addr": "127.0.0.1:2"}]}),
            400,
            "invalid_request",
            json!({"field": "nodes[1].client_addr"}),
        ),
        (
            "init with one address for a node's two ports",
            "/cluster/init",
            json!({"nodes": [{"id": me.id, "client_addr": me.client_addr, "peer_addr": me.client_addr}]}),
            400,
            "invalid_request",
            json!({"field": "nodes[0].peer_addr"}),
        ),
        (
            "init giving this node addresses it does not listen on",
            "/cluster/init",
            json!({"nodes": [{"id": me.id, "client_addr": "127.0.0.1:1", "peer_addr": me.peer_addr}]}),
            400,
            "invalid_request",
            json!({"field": "nodes[0].client_addr"}),
        ),
    ];
    let join_cases = vec![
        (
            "join with a bad peer address",
            "/cluster/join",
            json!({"id": 2, "client_addr": "127.0.0.1:1", "peer_addr": "x:y"}),
            400,
            "invalid_request",
            json!({"field": "peer_addr"}),
        ),
        (
            "join with an id past 2^53 - 1, which JSON readers would round",
            "/cluster/join",
            json!({"id": 9_007_199_254_740_993_u64, "client_addr": "127.0.0.1:1",
                "peer_addr": "127.0.0.1:2"}),
            400,
            "invalid_request",
            json!({"field": "id"}),
        ),
    ];
    check(&cluster, [init_cases.clone(), join_cases].concat()).await;
    cluster.init().await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    // An initialized node refuses a body of the wrong shape as every node does (too many
    // nodes, an id twice, an address that is no host:port, a node without its peer
    // address), and answers any other init 409 before looking at the addresses (SPEC §6),
    // its own id missing included.
    let shape = [
        "init listing a node twice",
        "init listing more nodes than any cluster has",
        "init with a bad address",
        "init with port 0, which names no port peers could reach",
        "init with a node missing its peer address",
    ];
    let mut again: Vec<_> = init_cases
        .into_iter()
        .map(|case| match shape.contains(&case.0) {
            true => case,
            false => (case.0, case.1, case.2, 409, "invalid_transition", json!({})),
        })
        .collect();
    again.push((
        "init with no nodes",
        "/cluster/init",
        json!({"nodes": []}),
        409,
        "invalid_transition",
        json!({}),
    ));
    check(&cluster, again).await;
    let before = last_log_index(&cluster).await;

    // -- D3: size limits carry field, limit and size ---------------------------------------
    let write = |extra: Value| {
        let mut body = json!({"key": "e/1", "value": 1, "actor": "al"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let size = |field: &str, size: usize, limit: usize| json!({"field": field, "limit": limit, "size": size});
    let op = json!({"op": "write", "key": "bq/1", "value": 1, "actor": "al"});
    let invalid = "invalid_request";
    check(
        &cluster,
        vec![
            (
                "key of 513 bytes",
                "/v1/write",
                write(json!({"key": "k".repeat(513)})),
                400,
                invalid,
                size("key", 513, 512),
            ),
            (
                "empty key",
                "/v1/write",
                write(json!({"key": ""})),
                400,
                invalid,
                size("key", 0, 512),
            ),
            (
                "actor of 129 bytes",
                "/v1/write",
                write(json!({"actor": "a".repeat(129)})),
                400,
                invalid,
                size("actor", 129, 128),
            ),
            (
                "reason of 4097 bytes",
                "/v1/forget",
                json!({"key": "e/1", "actor": "al", "reason": "r".repeat(4097)}),
                400,
                invalid,
                size("reason", 4097, 4096),
            ),
            (
                "request_id of 129 bytes",
                "/v1/write",
                write(json!({"request_id": "i".repeat(129)})),
                400,
                invalid,
                size("request_id", 129, 128),
            ),
            (
                "65 tags",
                "/v1/write",
                write(json!({"tags": (0..65).map(|i| format!("t{i}")).collect::<Vec<_>>()})),
                400,
                invalid,
                size("tags", 65, 64),
            ),
            (
                "a tag of 257 bytes",
                "/v1/write",
                write(json!({"tags": ["t".repeat(257)]})),
                400,
                invalid,
                size("tags[0]", 257, 256),
            ),
            (
                "65 anchors",
                "/v1/write",
                write(json!({"anchors": (0..65).map(|i| format!("tag:{i}")).collect::<Vec<_>>()})),
                400,
                invalid,
                size("anchors", 65, 64),
            ),
            (
                "an anchor of 1025 bytes",
                "/v1/write",
                write(json!({"anchors": [format!("tag:{}", "a".repeat(1021))]})),
                400,
                invalid,
                size("anchors[0]", 1025, 1024),
            ),
            (
                "source of 1025 bytes",
                "/v1/write",
                write(json!({"source": "s".repeat(1025)})),
                400,
                invalid,
                size("source", 1025, 1024),
            ),
            (
                "a batch of 1001 ops",
                "/v1/batch",
                json!({"ops": vec![op.clone(); 1001]}),
                400,
                invalid,
                size("ops", 1001, 1000),
            ),
            (
                "a size inside a batch op",
                "/v1/batch",
                json!({"ops": [op, {"op": "forget", "key": "bq/1", "actor": "a".repeat(129), "reason": "r"}]}),
                400,
                invalid,
                json!({"field": "ops[1].actor", "limit": 128, "size": 129, "op_index": 1}),
            ),
            (
                "a value nested 121 levels",
                "/v1/write",
                write(json!({"value": nested(121)})),
                400,
                invalid,
                size("value", 121, 120),
            ),
            (
                "a value nested 121 levels inside a batch op",
                "/v1/batch",
                json!({"ops": [{"op": "write", "key": "bq/2", "actor": "a", "value": nested(121)}]}),
                400,
                invalid,
                json!({"field": "ops[0].value", "limit": 120, "size": 121, "op_index": 0}),
            ),
            (
                "a recall with 65 cues",
                "/v1/recall",
                json!({"cues": (0..65).map(|i| format!("tag:{i}")).collect::<Vec<_>>()}),
                400,
                invalid,
                size("cues", 65, 64),
            ),
            (
                "a value over 1 MiB (unchanged)",
                "/v1/write",
                write(json!({"value": "v".repeat(1 << 20)})),
                413,
                "too_large",
                size("value", (1 << 20) + 2, 1 << 20),
            ),
        ],
    )
    .await;

    // -- D5: decode and request validation errors name the field ----------------------------
    check(
        &cluster,
        vec![
            (
                "missing reason",
                "/v1/forget",
                json!({"key": "h/1", "actor": "al"}),
                400,
                invalid,
                json!({"field": "reason"}),
            ),
            (
                "unknown field",
                "/v1/write",
                write(json!({"bogus": 1})),
                400,
                invalid,
                json!({"field": "bogus"}),
            ),
            (
                "expected_version of the wrong type",
                "/v1/write",
                write(json!({"expected_version": "x"})),
                400,
                invalid,
                json!({"field": "expected_version"}),
            ),
            (
                "unknown consistency",
                "/v1/read",
                json!({"key": "e/1", "consistency": "sometimes"}),
                400,
                invalid,
                json!({"field": "consistency"}),
            ),
            (
                "unknown state in a list filter",
                "/v1/list",
                json!({"prefix": "", "states": ["active", "gone"]}),
                400,
                invalid,
                json!({"field": "states[1]"}),
            ),
            (
                "absent in a list filter, which can match nothing",
                "/v1/list",
                json!({"prefix": "", "states": ["active", "absent"]}),
                400,
                invalid,
                json!({"field": "states"}),
            ),
            (
                "an empty list filter, which can match nothing",
                "/v1/list",
                json!({"prefix": "", "states": []}),
                400,
                invalid,
                json!({"field": "states"}),
            ),
            (
                "list after a key that cannot exist (a control character)",
                "/v1/list",
                json!({"prefix": "", "after": "a\u{1}"}),
                400,
                invalid,
                json!({"field": "after"}),
            ),
            (
                "list limit 0",
                "/v1/list",
                json!({"prefix": "", "limit": 0}),
                400,
                invalid,
                size("limit", 0, 1000),
            ),
            (
                "list limit 1001",
                "/v1/list",
                json!({"prefix": "", "limit": 1001}),
                400,
                invalid,
                size("limit", 1001, 1000),
            ),
            (
                "list prefix longer than a key",
                "/v1/list",
                json!({"prefix": "p".repeat(513)}),
                400,
                invalid,
                size("prefix", 513, 512),
            ),
            (
                "list prefix with a control character",
                "/v1/list",
                json!({"prefix": "a\u{0}b"}),
                400,
                invalid,
                json!({"field": "prefix"}),
            ),
            (
                "recall prefix longer than a key",
                "/v1/recall",
                json!({"cues": ["tag:x"], "prefix": "p".repeat(513)}),
                400,
                invalid,
                size("prefix", 513, 512),
            ),
            (
                "recall limit 1001",
                "/v1/recall",
                json!({"cues": ["tag:x"], "limit": 1001}),
                400,
                invalid,
                size("limit", 1001, 1000),
            ),
            (
                "recall limit past 32 bits, a size like any other",
                "/v1/recall",
                json!({"cues": ["tag:x"], "limit": 4_294_967_296_u64}),
                400,
                invalid,
                size("limit", 4_294_967_296, 1000),
            ),
            (
                "recall of forgotten notes",
                "/v1/recall",
                json!({"cues": ["tag:x"], "include": ["forgotten"]}),
                400,
                invalid,
                json!({"field": "include"}),
            ),
            (
                "recall of no state at all",
                "/v1/recall",
                json!({"cues": ["tag:x"], "include": []}),
                400,
                invalid,
                json!({"field": "include"}),
            ),
            (
                "recall of absent keys",
                "/v1/recall",
                json!({"cues": ["tag:x"], "include": ["active", "absent"]}),
                400,
                invalid,
                json!({"field": "include"}),
            ),
        ],
    )
    .await;
    // A value that names no state (an array, a number, an object) is named by its path.
    let mut cases = Vec::new();
    for bad in [json!(["active"]), json!(1), json!({})] {
        cases.push((
            "a state that is not a string",
            "/v1/list",
            json!({"prefix": "", "states": [bad.clone()]}),
            400,
            invalid,
            json!({"field": "states[0]"}),
        ));
        cases.push((
            "an included state that is not a string",
            "/v1/recall",
            json!({"cues": ["tag:x"], "include": ["active", bad]}),
            400,
            invalid,
            json!({"field": "include[1]"}),
        ));
    }
    check(&cluster, cases).await;
    let (_, answer) = post(
        &cluster,
        "/v1/list",
        json!({"prefix": "", "states": [["active"]]}).to_string(),
    )
    .await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("states[0]") && !message.contains("expected value"),
        "{answer}"
    );

    // A body that is not a JSON object is refused, also where no fields are taken: `[]` is
    // not "no body" (it would rotate a token or compact the node).
    for (path, body) in [
        ("/cluster/compact", "[]"),
        ("/cluster/compact", " [ ] "),
        ("/cluster/compact", "[1]"),
        ("/cluster/compact", "7"),
        ("/v1/auth/principals/someone/rotate", "[]"),
        ("/v1/read", r#"["e/1"]"#),
    ] {
        let (status, answer) = post(&cluster, path, body).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some(invalid)),
            "{path} {body}: {answer}"
        );
    }

    // Path parameters that do not decode are the JSON error naming the parameter.
    for (method, path, field) in [
        (reqwest::Method::GET, "/v1/tombstones/%FF", "id"),
        (reqwest::Method::GET, "/v1/tombstones/ab%FFcd", "id"),
        (
            reqwest::Method::POST,
            "/v1/auth/principals/%FF/rotate",
            "name",
        ),
        (
            reqwest::Method::DELETE,
            "/v1/auth/principals/%C3%28",
            "name",
        ),
    ] {
        let (status, content_type, answer) = call(&cluster, method.clone(), path).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some(invalid)),
            "{method} {path}: {answer}"
        );
        assert!(
            content_type.starts_with("application/json"),
            "{path}: {content_type}"
        );
        assert_eq!(
            details(&answer),
            json!({"field": field}),
            "{path}: {answer}"
        );
    }

    // The tombstone lookup's documented template with empty values: they are absent.
    let tombstone = "0123456789abcdef0123456789abcdef";
    let (status, _, answer) = call(
        &cluster,
        reqwest::Method::GET,
        &format!("/v1/tombstones/{tombstone}?consistency=&max_staleness_ms=&min_revision="),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("not_found")),
        "empty query values are absent: {answer}"
    );
    for (query, field) in [
        ("min_revision=x", "min_revision"),
        ("consistency=&max_staleness_ms=-1", "max_staleness_ms"),
        ("consistency=sometimes", "consistency"),
        ("bogus=", "bogus"),
        ("consistency=%FF", "consistency"),
    ] {
        let (status, _, answer) = call(
            &cluster,
            reqwest::Method::GET,
            &format!("/v1/tombstones/{tombstone}?{query}"),
        )
        .await;
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(
            details(&answer),
            json!({"field": field}),
            "{query}: {answer}"
        );
    }

    // A route that takes no query parameters refuses any, naming it.
    for path in [
        "/healthz?foo=1",
        "/cluster/status?verbose",
        "/metrics?format=json",
    ] {
        let (status, _, answer) = call(&cluster, reqwest::Method::GET, path).await;
        assert_eq!(status, 400, "{path}: {answer}");
        let name = path.split('?').nth(1).unwrap().split('=').next().unwrap();
        assert_eq!(details(&answer), json!({"field": name}), "{path}: {answer}");
    }
    let (status, _, answer) = call(&cluster, reqwest::Method::GET, "/healthz?").await;
    assert_eq!(status, 200, "a bare ? carries no parameter: {answer}");

    // A GET refuses a body, naming it; an empty one is none.
    let tombstone_path = format!("/v1/tombstones/{tombstone}");
    for path in ["/healthz", "/cluster/status", "/metrics", &tombstone_path] {
        let get = reqwest::Method::GET;
        let (status, _, answer) = call_with_body(&cluster, get, path, Some("{}")).await;
        assert_eq!(status, 400, "{path}: {answer}");
        assert_eq!(
            details(&answer),
            json!({"field": "body"}),
            "{path}: {answer}"
        );
    }
    let (status, _, answer) =
        call_with_body(&cluster, reqwest::Method::GET, "/cluster/status", Some("")).await;
    assert_eq!(status, 200, "an empty body is none: {answer}");

    // A watch prefix is checked like a list's: not UTF-8, too long, or a control character.
    let long_prefix = "p".repeat(513);
    for (query, expected) in [
        ("prefix=%FF".to_string(), json!({"field": "prefix"})),
        (format!("prefix={long_prefix}"), size("prefix", 513, 512)),
        ("prefix=a%00b".to_string(), json!({"field": "prefix"})),
    ] {
        let (status, _, answer) = call(
            &cluster,
            reqwest::Method::GET,
            &format!("/v1/watch?{query}"),
        )
        .await;
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(details(&answer), expected, "{query}: {answer}");
    }

    // A body that is not JSON has no field to name.
    let (status, answer) = post(&cluster, "/v1/write", r#"{"key": "e/1", "value": "#).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(details(&answer), json!({}), "{answer}");

    // -- D6: decode errors inside a batch op name the op and the field ----------------------
    let batch = |bad: Value| json!({"ops": [{"op": "write", "key": "bq/1", "value": 1, "actor": "al"}, bad]});
    let in_op = |field: &str| json!({"field": field, "op_index": 1});
    check(
        &cluster,
        vec![
            (
                "wrong type in op 1",
                "/v1/batch",
                batch(json!({"op": "write", "key": "bq/2", "value": 1, "actor": "al", "expected_version": "x"})),
                400,
                invalid,
                in_op("ops[1].expected_version"),
            ),
            (
                "unknown field in op 1",
                "/v1/batch",
                batch(json!({"op": "forget", "key": "bq/2", "actor": "al", "reason": "r", "bogus": 1})),
                400,
                invalid,
                in_op("ops[1].bogus"),
            ),
            (
                "missing field in op 1",
                "/v1/batch",
                batch(json!({"op": "revoke", "key": "bq/2", "actor": "al"})),
                400,
                invalid,
                in_op("ops[1].reason"),
            ),
            (
                "unknown op name",
                "/v1/batch",
                batch(json!({"op": "erase", "key": "bq/2"})),
                400,
                invalid,
                in_op("ops[1].op"),
            ),
            (
                "missing op",
                "/v1/batch",
                batch(json!({"key": "bq/2", "actor": "al"})),
                400,
                invalid,
                in_op("ops[1].op"),
            ),
        ],
    )
    .await;
    // The fields an op's refusal lists as expected leave out `request_id`: an op may not
    // carry one.
    let unknown =
        batch(json!({"op": "forget", "key": "bq/2", "actor": "al", "reason": "r", "bogus": 1}));
    let (_, answer) = post(&cluster, "/v1/batch", unknown.to_string()).await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`reason`") && !message.contains("request_id"),
        "{answer}"
    );

    // -- D4: an oversize body is 413 naming the body, its limit and its size ----------------
    let oversize = "x".repeat(BODY_BYTES_MAX + 10);
    let (status, answer) = post(&cluster, "/v1/write", oversize.clone()).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["code"], "too_large", "{answer}");
    assert_eq!(
        details(&answer),
        size("body", BODY_BYTES_MAX + 10, BODY_BYTES_MAX),
        "{answer}"
    );
    // Without Content-Length (chunked) the size is what was read before stopping.
    let chunks: Vec<Result<String, std::io::Error>> = oversize
        .as_bytes()
        .chunks(64 << 10)
        .map(|c| Ok(String::from_utf8(c.to_vec()).unwrap()))
        .collect();
    let streamed = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let (status, answer) = post(&cluster, "/v1/write", streamed).await;
    assert_eq!(status, 413, "{answer}");
    let got = details(&answer);
    assert_eq!(
        (&got["field"], &got["limit"]),
        (&json!("body"), &json!(BODY_BYTES_MAX)),
        "{answer}"
    );
    let read = got["size"].as_u64().expect("size") as usize;
    assert!(read > BODY_BYTES_MAX && read <= oversize.len(), "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("lower bound")),
        "{answer}"
    );

    // A value's object names each member once, at any depth, and so does a batch op:
    // serde_json would keep the last one and store something other than what was sent.
    for (body, field) in [
        (
            r#"{"key":"e/dup","value":{"a":1,"a":2},"actor":"al"}"#,
            "value.a",
        ),
        (
            r#"{"ops":[{"op":"write","key":"e/dup","value":[{"b":{"c":1,"c":1}}],"actor":"al"}]}"#,
            "ops[0].value[0].b.c",
        ),
        (
            r#"{"ops":[{"op":"write","op":"forget","key":"e/dup","value":1,"actor":"al"}]}"#,
            "ops[0].op",
        ),
    ] {
        let path = if body.contains("ops") {
            "/v1/batch"
        } else {
            "/v1/write"
        };
        let (status, answer) = post(&cluster, path, body).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("duplicate field")),
            "{answer}"
        );
    }

    // Every refusal is counted, a body that does not decode as much as a rule's refusal.
    let counted = bad_requests_total(&cluster).await;
    let (status, _) = post(&cluster, "/v1/write", "not json").await;
    assert_eq!(status, 400);
    let (status, _) = post(
        &cluster,
        "/v1/write",
        json!({"key": "", "value": 1, "actor": "al"}).to_string(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(bad_requests_total(&cluster).await, counted + 2);

    // Nothing reached the log.
    assert_eq!(last_log_index(&cluster).await, before);
}

/// `cairn_bad_requests_total` of node 1.
async fn bad_requests_total(cluster: &Cluster) -> u64 {
    counter(cluster, 1, "cairn_bad_requests_total").await
}

/// The counter `name` on node `id`'s `/metrics`.
async fn counter(cluster: &Cluster, id: u64, name: &str) -> u64 {
    let (_, text) = call_text_at(cluster, id, "/metrics").await;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .parse()
        .expect("a count")
}

/// `GET path` on node `id`: the status and the body as text.
async fn call_text_at(cluster: &Cluster, id: u64, path: &str) -> (u16, String) {
    let url = format!("{}{path}", cluster.endpoint(id));
    let response = http()
        .get(&url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.expect("response body"))
}

/// Bad mutations sent to a follower, each with the answer every node gives it: (path,
/// body, status, code, field).
fn bad_mutations() -> Vec<(&'static str, String, u16, &'static str, &'static str)> {
    let big = "v".repeat(1 << 20);
    vec![
        ("/v1/write", json!({"key": "", "value": 1, "actor": "a"}).to_string(), 400, "invalid_request", "key"),
        ("/v1/write", json!({"key": "f/k", "value": big, "actor": "a"}).to_string(), 413, "too_large", "value"),
        ("/v1/write", json!({"key": "f/k", "value": 1}).to_string(), 400, "invalid_request", "actor"),
        ("/v1/forget", json!({"key": "f/k", "actor": "a", "reason": " "}).to_string(), 400, "invalid_request", "reason"),
        ("/v1/batch", json!({"ops": []}).to_string(), 400, "invalid_request", "ops"),
        (
            "/v1/batch",
            json!({"ops": [{"op": "write", "key": "f/k", "value": 1, "actor": "a", "request_id": "r"}]}).to_string(),
            400,
            "invalid_request",
            "ops[0].request_id",
        ),
    ]
}

/// A follower checks a mutation itself before relaying it: bad input is the same 400 or
/// 413 on every node, relays nothing, and stays 400 or 413 when no leader is known (not
/// 503 `no_leader`, nor a relay's 504 `outcome_unknown`, which invite retries of a request
/// that can never apply).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_refuses_bad_input_itself_with_or_without_a_leader() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_settled(LEADER_TIMEOUT).await;
    let follower = *cluster.ids().iter().find(|id| **id != leader).unwrap();
    let forwarded = counter(&cluster, follower, "cairn_mutations_forwarded_total").await;
    let expect = async |cluster: &Cluster, when: &str| {
        for (path, body, status, code, field) in bad_mutations() {
            let (got, answer) = post_to(cluster, follower, path, body).await;
            let what = format!("{when}: {path} ({field})");
            assert_eq!(
                (got, answer["error"]["code"].as_str()),
                (status, Some(code)),
                "{what}: {answer}"
            );
            assert_eq!(answer["error"]["field"], field, "{what}: {answer}");
        }
    };
    expect(&cluster, "with a leader").await;
    // An actor left out, or sent empty, says what to do on a cluster without auth.
    for (body, says) in [
        (
            json!({"key": "f/k", "value": 1}),
            "actor: required while auth is off; name who acts (1 to 128 bytes)",
        ),
        (
            json!({"key": "f/k", "value": 1, "actor": ""}),
            "actor must not be empty: name who acts",
        ),
    ] {
        let (_, answer) = post_to(&cluster, follower, "/v1/write", body.to_string()).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{says:?} not in {answer}");
        // Either way it is a size refusal of an actor (1 to 128 bytes), with its details.
        assert_eq!(
            (&answer["error"]["limit"], &answer["error"]["size"]),
            (&json!(128), &json!(0)),
            "{answer}"
        );
    }
    // An empty actor in a batch op: the same details, addressed to the op.
    let batch = json!({"ops": [
        {"op": "write", "key": "f/a", "value": 1, "actor": "a"},
        {"op": "forget", "key": "f/b", "actor": "", "reason": "r"},
    ]});
    let (status, answer) = post_to(&cluster, follower, "/v1/batch", batch.to_string()).await;
    assert_eq!(status, 400, "{answer}");
    let error = &answer["error"];
    assert_eq!(
        (
            &error["field"],
            &error["op_index"],
            &error["limit"],
            &error["size"]
        ),
        (&json!("ops[1].actor"), &json!(1), &json!(128), &json!(0)),
        "{answer}"
    );
    assert_eq!(
        counter(&cluster, follower, "cairn_mutations_forwarded_total").await,
        forwarded,
        "bad input was relayed"
    );
    // A good write through the follower is relayed (and counted).
    let good = json!({"key": "f/k", "value": 1, "actor": "a"}).to_string();
    assert_eq!(
        post_to(&cluster, follower, "/v1/write", good.clone())
            .await
            .0,
        200
    );
    assert_eq!(
        counter(&cluster, follower, "cairn_mutations_forwarded_total").await,
        forwarded + 1
    );

    // The other two nodes gone: no leader, and the answers do not change.
    for id in cluster.ids().into_iter().filter(|id| *id != follower) {
        cluster.kill9(id);
    }
    expect(&cluster, "without a leader").await;
    let (status, answer) = post_to(&cluster, follower, "/v1/write", good).await;
    assert!(
        matches!(status, 503 | 504),
        "a good write without a leader: {status} {answer}"
    );
}

/// A path with a `.` or `..` segment, escaped or not, is 404 on every node: no route has
/// one, and a follower relaying it would have its URL library resolve it into another
/// path than the one it routed (`/v1/auth/principals/%2e%2e/rotate` into
/// `/v1/auth/rotate`). Sent raw: an HTTP client would resolve the segments itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dot_segment_in_a_path_is_404_on_every_node() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::start(3).await;
    cluster.wait_settled(LEADER_TIMEOUT).await;
    for id in cluster.ids() {
        for (method, path) in [
            ("POST", "/v1/auth/principals/%2e%2e/rotate"),
            ("POST", "/v1/auth/principals/%2E/rotate"),
            ("GET", "/v1/tombstones/.."),
            ("DELETE", "/v1/auth/principals/.%2e"),
        ] {
            let addr = cluster
                .endpoint(id)
                .trim_start_matches("http://")
                .to_string();
            let mut stream = tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect");
            let request = format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await.expect("send");
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.expect("answer");
            assert!(
                answer.starts_with("HTTP/1.1 404"),
                "node {id}, {path}: {answer}"
            );
            assert!(
                answer.contains("no . or .. segment"),
                "node {id}, {path}: {answer}"
            );
        }
    }
}
