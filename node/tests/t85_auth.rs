//! Authentication and authorization against real nodes (SPEC §8): bearer tokens (401
//! `unauthenticated` for missing, malformed, unknown, rotated-away and deleted ones),
//! prefix grants (403 `permission_denied` with `permission`, `key` and a batch's
//! `op_index`, nothing reaching the log), reads that show only readable keys (list,
//! recall, watch, tombstones), the actor bound to the principal (also through a follower),
//! principal changes effective at once on every node (a lagging node too, for whoami,
//! compact and a watch), access state that survives restarts
//! and a snapshot install, concurrent principal changes, the access matrix of the
//! `/cluster/*` and `/v1/auth/*` endpoints, turning auth on later, no token in any log
//! line, error body or metric, and a request without a usable token refused (401) before
//! its shape is looked at.
//!
//! Tokens are secrets even here: assertion messages show [`shown`], never a token.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cairn_api::{Grant, Permission};
use cairn_client::{Client, WatchStream};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};
use support::{Cluster, LEADER_TIMEOUT};

/// Bound on replication waits.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);
/// A join returns once the learner caught up (snapshot install included) and was promoted.
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);
/// One raw HTTP request.
const HTTP_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on waiting for one watch event.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
const ADMIN: &str = "admin";

use Permission::{Forget, Read, Revoke, Write};

// ------------------------------------------------------------------------------ helpers

/// A token as an assertion message may show it.
fn shown(token: &str) -> String {
    format!("<a token of {} chars>", token.len())
}

/// A well-formed token (`cairn_` + base64url of 32 bytes) that no node ever issued.
fn unknown_token() -> String {
    format!("cairn_{}", URL_SAFE_NO_PAD.encode([0x5au8; 32]))
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn grant(prefix: &str, permissions: &[Permission]) -> Grant {
    Grant::new(prefix, permissions.iter().copied())
}

/// One HTTP answer: status and JSON body (`Null` when the body is not JSON).
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    body: Value,
    text: String,
    /// The `WWW-Authenticate` header, if any.
    challenge: Option<String>,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// Asserts status and error code (`None`: a success).
    fn expect(&self, status: u16, code: Option<&str>, what: &str) {
        assert_eq!(
            (self.status, code.unwrap_or("")),
            (status, self.code()),
            "{what}: got {} {}",
            self.status,
            self.body
        );
    }
}

/// Raw HTTP, so tests see exact statuses and bodies and choose the `Authorization` header.
#[derive(Clone)]
struct Http {
    http: reqwest::Client,
}

impl Http {
    fn new() -> Http {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(HTTP_TIMEOUT)
            .build()
            .expect("reqwest client");
        Http { http }
    }

    /// `auth` is the whole `Authorization` header value; `None` sends none.
    async fn send(
        &self,
        method: Method,
        url: &str,
        auth: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        self.send_timeout(method, url, auth, body, HTTP_TIMEOUT)
            .await
    }

    async fn send_timeout(
        &self,
        method: Method,
        url: &str,
        auth: Option<&str>,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Answer {
        let auths: Vec<&str> = auth.into_iter().collect();
        self.send_auths(method, url, &auths, body, timeout).await
    }

    /// `method url` with one `Authorization` header per value of `auths`.
    async fn send_auths(
        &self,
        method: Method,
        url: &str,
        auths: &[&str],
        body: Option<&Value>,
        timeout: Duration,
    ) -> Answer {
        let mut request = self.http.request(method.clone(), url).timeout(timeout);
        for auth in auths {
            request = request.header(reqwest::header::AUTHORIZATION, *auth);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(body).expect("json"));
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let bytes = response.bytes().await.expect("answer body");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Answer {
            status,
            body,
            text,
            challenge,
        }
    }
}

/// Raw requests to the nodes of a cluster (those it had when this was made), each naming
/// a node and a token (`None`: no header).
struct Api {
    endpoints: std::collections::BTreeMap<u64, String>,
    http: Http,
}

impl Api {
    fn new(cluster: &Cluster) -> Api {
        Api {
            endpoints: cluster
                .ids()
                .into_iter()
                .map(|id| (id, cluster.endpoint(id)))
                .collect(),
            http: Http::new(),
        }
    }

    fn url(&self, id: u64, path: &str) -> String {
        format!("{}{path}", self.endpoints[&id])
    }

    /// `POST path` on node `id` with `Bearer token`.
    async fn post(&self, id: u64, path: &str, token: Option<&str>, body: Value) -> Answer {
        self.call(Method::POST, id, path, token, Some(body)).await
    }

    async fn get(&self, id: u64, path: &str, token: Option<&str>) -> Answer {
        self.call(Method::GET, id, path, token, None).await
    }

    async fn call(
        &self,
        method: Method,
        id: u64,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let auth = token.map(bearer);
        self.http
            .send(method, &self.url(id, path), auth.as_deref(), body.as_ref())
            .await
    }

    /// `POST path` on node `id` with this exact `Authorization` header (or none).
    async fn post_raw(&self, id: u64, path: &str, auth: Option<&str>, body: Value) -> Answer {
        self.http
            .send(Method::POST, &self.url(id, path), auth, Some(&body))
            .await
    }

    /// A linearizable read of `key` through node `id`.
    async fn read(&self, id: u64, token: Option<&str>, key: &str) -> Answer {
        self.post(id, "/v1/read", token, json!({"key": key})).await
    }

    /// A write of `value` to `key` through node `id`, `actor` omitted.
    async fn write(&self, id: u64, token: Option<&str>, key: &str, value: Value) -> Answer {
        self.post(id, "/v1/write", token, json!({"key": key, "value": value}))
            .await
    }

    /// History of `key` as the leader (linearizably) knows it, read with `token`.
    async fn history_actors(&self, id: u64, token: &str, key: &str) -> Vec<String> {
        let answer = self
            .post(id, "/v1/history", Some(token), json!({"key": key}))
            .await;
        answer.expect(200, None, &format!("history of {key}"));
        answer.body["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| e["actor"].as_str().unwrap_or("").to_string())
            .collect()
    }
}

/// `last_log_index` of node `id` (the fixture's status client sends the admin token).
async fn last_log_index(cluster: &Cluster, id: u64) -> u64 {
    cluster
        .status(id)
        .await
        .expect("GET /cluster/status")
        .last_log_index
}

/// Asserts the answer is 403 `permission_denied` naming `permission` and `key`.
fn assert_denied(answer: &Answer, permission: &str, key: &str, what: &str) {
    answer.expect(403, Some("permission_denied"), what);
    assert_eq!(
        (
            answer.body["error"]["permission"].as_str(),
            answer.body["error"]["key"].as_str()
        ),
        (Some(permission), Some(key)),
        "{what}: details of {}",
        answer.body
    );
}

/// A 3-node auth-on cluster, settled; returns it with its leader and followers.
async fn auth_cluster() -> (Cluster, u64, Vec<u64>) {
    let cluster = Cluster::builder(3).auth(ADMIN).start().await;
    let leader = cluster.wait_settled(CATCH_UP_TIMEOUT).await;
    let followers = cluster.ids().into_iter().filter(|i| *i != leader).collect();
    (cluster, leader, followers)
}

async fn create(admin: &Client, name: &str, grants: Vec<Grant>) -> String {
    admin
        .create_principal(name, grants)
        .await
        .unwrap_or_else(|e| panic!("create principal {name}: {e}"))
        .token
}

/// Waits until every running node has applied what node `leader` has in its log.
async fn wait_all_applied(cluster: &Cluster, leader: u64) -> u64 {
    let index = last_log_index(cluster, leader).await;
    for id in cluster.running_ids() {
        cluster.wait_applied(id, index, CATCH_UP_TIMEOUT).await;
    }
    index
}

// ------------------------------------------------------------------------------- tests

/// Missing, malformed, unknown, rotated-away and deleted tokens: 401 `unauthenticated` on
/// every node for a write and a linearizable read; the value stays and nothing reaches
/// the log. (Without auth the tokenless write lands: the value changes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_01_bad_tokens_are_401_on_every_node_and_change_nothing() {
    let (cluster, leader, _) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let admin_token = cluster.admin_token();
    api.write(leader, Some(&admin_token), "k/1", json!("orig"))
        .await
        .expect(200, None, "admin writes k/1");

    let rotated_old = create(&admin, "rot", vec![grant("k/", &[Read, Write])]).await;
    let rotated_new = admin.rotate_token("rot").await.expect("rotate").token;
    assert_ne!(rotated_old, rotated_new, "rotation makes a new token");
    let deleted = create(&admin, "del", vec![grant("k/", &[Read, Write])]).await;
    admin.delete_principal("del").await.expect("delete");
    let unknown = unknown_token();

    let headers: Vec<(&str, Option<String>)> = vec![
        ("no header", None),
        ("malformed `Bearer xyz`", Some("Bearer xyz".into())),
        ("no scheme", Some(rotated_new.clone())),
        ("unknown token", Some(bearer(&unknown))),
        ("rotated-away token", Some(bearer(&rotated_old))),
        ("deleted token", Some(bearer(&deleted))),
    ];
    let before = last_log_index(&cluster, leader).await;
    for id in cluster.ids() {
        for (what, header) in &headers {
            let write = api
                .post_raw(
                    id,
                    "/v1/write",
                    header.as_deref(),
                    json!({"key": "k/1", "value": "bad", "actor": "rot"}),
                )
                .await;
            write.expect(
                401,
                Some("unauthenticated"),
                &format!("node {id}: write, {what}"),
            );
            let read = api
                .post_raw(id, "/v1/read", header.as_deref(), json!({"key": "k/1"}))
                .await;
            read.expect(
                401,
                Some("unauthenticated"),
                &format!("node {id}: read, {what}"),
            );
            // RFC 9110 §11.6.1: a 401 names the scheme it wants.
            for answer in [&write, &read] {
                assert_eq!(
                    answer.challenge.as_deref(),
                    Some("Bearer"),
                    "node {id}: {what}"
                );
            }
        }
    }
    assert_eq!(
        last_log_index(&cluster, leader).await,
        before,
        "refused requests reached the leader's log"
    );
    let read = api.read(leader, Some(&admin_token), "k/1").await;
    read.expect(200, None, "admin reads k/1");
    assert_eq!(read.body["value"], json!("orig"), "the value is unchanged");
    // The rotated token's successor works.
    api.write(leader, Some(&rotated_new), "k/2", json!(2))
        .await
        .expect(200, None, "the new token writes");
}

/// A refused request: what, token, path, body, the permission and key the 403 names.
type Refusal<'a> = (&'a str, Option<&'a str>, &'a str, Value, &'a str, &'a str);

/// Each permission guards its operations: write, read (read/probe/history), forget (and
/// clear_tombstone), revoke (revoke/reinstate, override_revocation, supersede of the
/// superseded key); flag-stale needs write; any covering grant allows; a batch is refused
/// whole with `op_index`; a refusal reaches no log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_02_grants_guard_each_operation_and_refusals_reach_no_log() {
    let (cluster, leader, _) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let at = cluster.admin_token();
    let at = Some(at.as_str());
    for (key, value) in [("b/x", "orig"), ("a/y", "y"), ("a/v", "v")] {
        api.write(leader, at, key, json!(value)).await.expect(
            200,
            None,
            &format!("admin writes {key}"),
        );
    }
    api.post(
        leader,
        "/v1/forget",
        at,
        json!({"key": "a/y", "reason": "setup"}),
    )
    .await
    .expect(200, None, "admin forgets a/y");
    api.post(
        leader,
        "/v1/revoke",
        at,
        json!({"key": "a/v", "reason": "setup"}),
    )
    .await
    .expect(200, None, "admin revokes a/v");

    let p = create(
        &admin,
        "p",
        vec![
            grant("a/", &[Read, Write]),
            grant("a/f/", &[Forget]),
            grant("a/r/", &[Revoke]),
        ],
    )
    .await;
    let q = create(&admin, "q", vec![grant("a/", &[Read])]).await;
    let r = create(
        &admin,
        "r",
        vec![grant("c/", &[Read]), grant("c/w/", &[Write])],
    )
    .await;
    let (p, q, r) = (Some(p.as_str()), Some(q.as_str()), Some(r.as_str()));

    // Refused: 403 with details, and the leader's log does not move.
    let refusals: Vec<Refusal> = vec![
        (
            "write outside",
            p,
            "/v1/write",
            json!({"key": "b/x", "value": "bad"}),
            "write",
            "b/x",
        ),
        (
            "read outside",
            p,
            "/v1/read",
            json!({"key": "b/x"}),
            "read",
            "b/x",
        ),
        (
            "probe outside",
            p,
            "/v1/probe",
            json!({"key": "b/x"}),
            "read",
            "b/x",
        ),
        (
            "history outside",
            p,
            "/v1/history",
            json!({"key": "b/x"}),
            "read",
            "b/x",
        ),
        (
            "forget without forget",
            p,
            "/v1/forget",
            json!({"key": "a/v", "reason": "x"}),
            "forget",
            "a/v",
        ),
        (
            "clear_tombstone without forget",
            p,
            "/v1/write",
            json!({"key": "a/y", "value": 1, "clear_tombstone": true}),
            "forget",
            "a/y",
        ),
        (
            "revoke without revoke",
            p,
            "/v1/revoke",
            json!({"key": "b/x", "reason": "x"}),
            "revoke",
            "b/x",
        ),
        (
            "revoke without revoke (readable key)",
            p,
            "/v1/revoke",
            json!({"key": "a/y", "reason": "x"}),
            "revoke",
            "a/y",
        ),
        (
            "reinstate without revoke",
            p,
            "/v1/reinstate",
            json!({"key": "a/v"}),
            "revoke",
            "a/v",
        ),
        (
            "override_revocation without revoke",
            p,
            "/v1/write",
            json!({"key": "a/v", "value": 2, "override_revocation": true}),
            "revoke",
            "a/v",
        ),
        (
            "supersede without revoke on the superseded key",
            p,
            "/v1/supersede",
            json!({"key": "a/v", "by": "a/r/n"}),
            "revoke",
            "a/v",
        ),
        (
            "flag-stale without write",
            q,
            "/v1/flag-stale",
            json!({"key": "a/v", "anchor": "path:x", "observed_hash": "h"}),
            "write",
            "a/v",
        ),
        (
            "write under a read-only prefix",
            q,
            "/v1/write",
            json!({"key": "a/q", "value": 1}),
            "write",
            "a/q",
        ),
        (
            "write beside a narrower write grant",
            r,
            "/v1/write",
            json!({"key": "c/1", "value": 1}),
            "write",
            "c/1",
        ),
    ];
    let before = last_log_index(&cluster, leader).await;
    for (what, token, path, body, permission, key) in &refusals {
        let answer = api.post(leader, path, *token, body.clone()).await;
        assert_denied(&answer, permission, key, what);
    }
    // A batch is allowed only as a whole: op 1 is outside, so op 0 is not applied either.
    let batch = api
        .post(
            leader,
            "/v1/batch",
            p,
            json!({"ops": [
                {"op": "write", "key": "a/b1", "value": 1},
                {"op": "write", "key": "b/b1", "value": 1},
            ]}),
        )
        .await;
    assert_denied(&batch, "write", "b/b1", "batch with an op outside");
    assert_eq!(batch.body["error"]["op_index"], json!(1), "{}", batch.body);
    assert_eq!(
        last_log_index(&cluster, leader).await,
        before,
        "refused requests reached the leader's log"
    );
    api.read(leader, at, "a/b1")
        .await
        .expect(404, Some("not_found"), "op 0 of the refused batch");
    let b = api.read(leader, at, "b/x").await;
    assert_eq!(b.body["value"], json!("orig"), "b/x unchanged: {}", b.body);

    // Allowed: each through a grant that covers it.
    let allowed: Vec<(&str, Option<&str>, &str, Value)> = vec![
        ("write", p, "/v1/write", json!({"key": "a/x", "value": 1})),
        ("read", p, "/v1/read", json!({"key": "a/x"})),
        ("probe", p, "/v1/probe", json!({"key": "a/x"})),
        ("history", p, "/v1/history", json!({"key": "a/x"})),
        (
            "flag-stale with write",
            p,
            "/v1/flag-stale",
            json!({"key": "a/x", "anchor": "path:x", "observed_hash": "h"}),
        ),
        (
            "write under a/f/",
            p,
            "/v1/write",
            json!({"key": "a/f/x", "value": 1}),
        ),
        (
            "forget under a/f/",
            p,
            "/v1/forget",
            json!({"key": "a/f/x", "reason": "r"}),
        ),
        (
            "clear_tombstone with write (a/) and forget (a/f/)",
            p,
            "/v1/write",
            json!({"key": "a/f/x", "value": 2, "clear_tombstone": true}),
        ),
        (
            "write under a/r/",
            p,
            "/v1/write",
            json!({"key": "a/r/x", "value": 1}),
        ),
        (
            "revoke under a/r/",
            p,
            "/v1/revoke",
            json!({"key": "a/r/x", "reason": "r"}),
        ),
        (
            "reinstate under a/r/",
            p,
            "/v1/reinstate",
            json!({"key": "a/r/x"}),
        ),
        (
            "revoke again",
            p,
            "/v1/revoke",
            json!({"key": "a/r/x", "reason": "r"}),
        ),
        (
            "override_revocation with revoke",
            p,
            "/v1/write",
            json!({"key": "a/r/x", "value": 3, "override_revocation": true}),
        ),
        (
            "supersede with revoke on the superseded key",
            p,
            "/v1/supersede",
            json!({"key": "a/r/x", "by": "a/x"}),
        ),
        (
            "batch inside",
            p,
            "/v1/batch",
            json!({"ops": [
                {"op": "write", "key": "a/b2", "value": 1},
                {"op": "forget", "key": "a/f/b2", "reason": "r"},
            ]}),
        ),
        ("read only", q, "/v1/read", json!({"key": "a/x"})),
        (
            "write under the narrower grant",
            r,
            "/v1/write",
            json!({"key": "c/w/1", "value": 1}),
        ),
        (
            "read through the broader grant",
            r,
            "/v1/read",
            json!({"key": "c/w/1"}),
        ),
    ];
    for (what, token, path, body) in &allowed {
        api.post(leader, path, *token, body.clone())
            .await
            .expect(200, None, what);
    }
}

/// list, recall and watch show only readable keys (and `next_after` never names another),
/// and a tombstone of an unreadable key is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_03_list_recall_watch_and_tombstones_show_only_readable_keys() {
    let (cluster, leader, _) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let at = cluster.admin_token();
    let at = Some(at.as_str());
    // Readable and unreadable keys interleave in key order.
    let readable = ["m/1", "m/3", "m/5", "m/7"];
    let unreadable = ["m/2", "m/4", "m/6", "m/8"];
    let token = create(
        &admin,
        "reader",
        readable.iter().map(|k| grant(k, &[Read])).collect(),
    )
    .await;
    let watch_from = last_log_index(&cluster, leader).await + 1;
    let mut all: Vec<&str> = readable.iter().chain(unreadable.iter()).copied().collect();
    all.sort();
    for key in &all {
        api.post(
            leader,
            "/v1/write",
            at,
            json!({"key": key, "value": key, "anchors": ["tag:t"]}),
        )
        .await
        .expect(200, None, &format!("admin writes {key}"));
    }
    let forget_r = api
        .post(
            leader,
            "/v1/forget",
            at,
            json!({"key": "m/1", "reason": "r"}),
        )
        .await;
    forget_r.expect(200, None, "forget m/1");
    let forget_u = api
        .post(
            leader,
            "/v1/forget",
            at,
            json!({"key": "m/2", "reason": "r"}),
        )
        .await;
    forget_u.expect(200, None, "forget m/2");
    // The last change is readable: the watch below reads up to it.
    api.write(leader, at, "m/9", json!("end"))
        .await
        .expect(200, None, "m/9");
    admin
        .set_grants(
            "reader",
            readable
                .iter()
                .chain(["m/9"].iter())
                .map(|k| grant(k, &[Read]))
                .collect(),
        )
        .await
        .expect("grants");
    let unreadable: BTreeSet<&str> = unreadable.into_iter().collect();

    // list, every page size, through every node.
    for id in cluster.ids() {
        for limit in [1, 2, 3, 100] {
            let mut after: Option<String> = None;
            let mut seen = Vec::new();
            for _page in 0..20 {
                let mut body = json!({"prefix": "m/", "limit": limit,
                    "states": ["active", "revoked", "forgotten"]});
                if let Some(a) = &after {
                    body["after"] = json!(a);
                }
                let page = api.post(id, "/v1/list", Some(&token), body).await;
                page.expect(200, None, &format!("node {id}: list limit {limit}"));
                for item in page.body["items"].as_array().expect("items") {
                    seen.push(item["key"].as_str().expect("key").to_string());
                }
                after = page.body["next_after"].as_str().map(str::to_string);
                if let Some(a) = &after {
                    assert!(
                        !unreadable.contains(a.as_str()),
                        "node {id}, limit {limit}: next_after names unreadable {a}"
                    );
                }
                if after.is_none() {
                    break;
                }
            }
            assert!(
                after.is_none(),
                "node {id}, limit {limit}: paging did not end"
            );
            assert_eq!(
                seen,
                vec!["m/1", "m/3", "m/5", "m/7", "m/9"],
                "node {id}: list with limit {limit}"
            );
        }
    }

    // recall: the cue matches every key; only readable notes come back.
    let recall = api
        .post(
            leader,
            "/v1/recall",
            Some(&token),
            json!({"cues": ["tag:t"], "limit": 100}),
        )
        .await;
    recall.expect(200, None, "recall");
    let mut keys: Vec<&str> = recall.body["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| n["key"].as_str().expect("key"))
        .collect();
    keys.sort();
    assert_eq!(keys, vec!["m/3", "m/5", "m/7"], "recall (m/1 is forgotten)");
    let control = api
        .post(
            leader,
            "/v1/recall",
            at,
            json!({"cues": ["tag:t"], "limit": 100}),
        )
        .await;
    assert_eq!(
        control.body["notes"].as_array().map(Vec::len),
        Some(6),
        "the admin recalls all six live notes: {}",
        control.body
    );

    // watch: events of readable keys only, up to the last change (m/9).
    let client = cluster.client_for_with_token(leader, &token);
    let mut stream = client
        .watch(Some("m/"), Some(watch_from))
        .await
        .expect("watch");
    let events = events_until(&mut stream, "m/9").await;
    let keys: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        vec!["m/1", "m/3", "m/5", "m/7", "m/1", "m/9"],
        "watch events (writes, the forget of m/1, m/9)"
    );

    // Tombstones: the unreadable key's is 404, the readable one's is served.
    let id_u = forget_u.body["tombstone"]["id"]
        .as_str()
        .expect("tombstone id");
    let id_r = forget_r.body["tombstone"]["id"]
        .as_str()
        .expect("tombstone id");
    api.get(leader, &format!("/v1/tombstones/{id_u}"), Some(&token))
        .await
        .expect(404, Some("not_found"), "tombstone of unreadable m/2");
    let t = api
        .get(leader, &format!("/v1/tombstones/{id_r}"), Some(&token))
        .await;
    t.expect(200, None, "tombstone of readable m/1");
    assert_eq!(t.body["key"], json!("m/1"));
    api.get(leader, &format!("/v1/tombstones/{id_u}"), at)
        .await
        .expect(200, None, "the admin reads the tombstone of m/2");
}

/// Watch events `(key, revision)` until one for `last` (bounded).
async fn events_until(stream: &mut WatchStream, last: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    loop {
        let event = tokio::time::timeout(EVENT_TIMEOUT, stream.next())
            .await
            .unwrap_or_else(|_| panic!("no event within {EVENT_TIMEOUT:?}; so far {out:?}"))
            .expect("the stream is open")
            .expect("an event, not an error");
        let done = event.key == last;
        out.push((event.key, event.revision));
        if done {
            return out;
        }
    }
}

/// `actor` omitted becomes the principal's name (events and tombstones, also for a write
/// sent to a follower); another name is 403 `actor_mismatch`, a malformed one 400, and
/// neither applies anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_04_actor_is_bound_to_the_principal_also_through_a_follower() {
    let (cluster, leader, followers) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let token = create(&admin, "alice", vec![grant("act/", &[Read, Write, Forget])]).await;
    let t = Some(token.as_str());

    api.write(leader, t, "act/1", json!(1))
        .await
        .expect(200, None, "write, actor omitted");
    api.post(
        leader,
        "/v1/write",
        t,
        json!({"key": "act/1", "value": 2, "actor": "alice"}),
    )
    .await
    .expect(200, None, "write, actor = the principal");
    api.post(
        leader,
        "/v1/write",
        t,
        json!({"key": "act/1", "value": 3, "actor": null}),
    )
    .await
    .expect(
        200,
        None,
        "write, actor null (left out, as any optional field)",
    );
    let forget = api
        .post(
            leader,
            "/v1/forget",
            t,
            json!({"key": "act/1", "reason": "done"}),
        )
        .await;
    forget.expect(200, None, "forget, actor omitted");
    assert_eq!(
        forget.body["tombstone"]["actor"],
        json!("alice"),
        "{}",
        forget.body
    );
    assert_eq!(
        api.history_actors(leader, &token, "act/1").await,
        vec!["alice", "alice", "alice", "alice"],
        "history actors"
    );

    let before = last_log_index(&cluster, leader).await;
    for id in cluster.ids() {
        api.post(
            id,
            "/v1/write",
            t,
            json!({"key": "act/2", "value": 1, "actor": "mallory"}),
        )
        .await
        .expect(
            403,
            Some("actor_mismatch"),
            &format!("node {id}: forged actor"),
        );
        api.post(
            id,
            "/v1/batch",
            t,
            json!({"ops": [
                {"op": "write", "key": "act/3", "value": 1},
                {"op": "write", "key": "act/4", "value": 1, "actor": "mallory"},
            ]}),
        )
        .await
        .expect(
            403,
            Some("actor_mismatch"),
            &format!("node {id}: forged actor in a batch"),
        );
        // An empty actor is not a missing one: it names no one (SPEC §5, 1-128 bytes); an
        // actor that breaks the field's rule is bad input before it is anyone's name.
        for actor in [String::new(), "a".repeat(129), "ali\nce".to_string()] {
            let what = format!("node {id}: actor {actor:?}");
            let single = api
                .post(
                    id,
                    "/v1/write",
                    t,
                    json!({"key": "act/2", "value": 1, "actor": actor}),
                )
                .await;
            single.expect(400, Some("invalid_request"), &what);
            assert_eq!(
                single.body["error"]["field"],
                json!("actor"),
                "{what}: {}",
                single.body
            );
            let in_batch = api
                .post(
                    id,
                    "/v1/batch",
                    t,
                    json!({"ops": [
                        {"op": "write", "key": "act/3", "value": 1},
                        {"op": "forget", "key": "act/4", "actor": actor, "reason": "r"},
                    ]}),
                )
                .await;
            in_batch.expect(400, Some("invalid_request"), &format!("{what} in a batch"));
            assert_eq!(
                (
                    &in_batch.body["error"]["field"],
                    &in_batch.body["error"]["op_index"]
                ),
                (&json!("ops[1].actor"), &json!(1)),
                "{what} in a batch: {}",
                in_batch.body
            );
        }
    }
    assert_eq!(
        last_log_index(&cluster, leader).await,
        before,
        "refused writes reached the log"
    );
    for key in ["act/2", "act/3", "act/4"] {
        api.read(leader, t, key)
            .await
            .expect(404, Some("not_found"), key);
    }

    // Through a follower: relayed with the client's token, recorded as the principal.
    let follower = followers[0];
    let pinned = cluster.client_for_with_token(follower, &token);
    let relayed = pinned
        .write(cairn_api::WriteRequest::new("act/5", json!(5), ""))
        .await
        .expect("write through a follower, actor omitted");
    assert!(relayed.revision > before);
    api.post(
        follower,
        "/v1/forget",
        t,
        json!({"key": "act/5", "reason": "relayed"}),
    )
    .await
    .expect(200, None, "forget through a follower");
    assert_eq!(
        api.history_actors(leader, &token, "act/5").await,
        vec!["alice", "alice"],
        "history on the leader of writes sent to node {follower}"
    );
}

/// Rotation and deletion stop the old token at once on every node (mutations and
/// linearizable reads); grants revoked while writers keep writing: every request that
/// starts after the change returns is refused, on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_05_rotation_deletion_and_revoked_grants_take_effect_at_once_everywhere() {
    let (cluster, leader, _) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let old = create(&admin, "w", vec![grant("r/", &[Read, Write])]).await;
    api.write(leader, Some(&old), "r/0", json!(0))
        .await
        .expect(200, None, "write");

    let new = admin.rotate_token("w").await.expect("rotate").token;
    for id in cluster.ids() {
        api.write(id, Some(&old), "r/0", json!("old")).await.expect(
            401,
            Some("unauthenticated"),
            &format!("node {id}: write, rotated token"),
        );
        api.read(id, Some(&old), "r/0").await.expect(
            401,
            Some("unauthenticated"),
            &format!("node {id}: read, rotated token"),
        );
        api.read(id, Some(&new), "r/0").await.expect(
            200,
            None,
            &format!("node {id}: read, new token"),
        );
        api.write(id, Some(&new), &format!("r/new{id}"), json!(id))
            .await
            .expect(200, None, &format!("node {id}: write, new token"));
    }

    // Writers on every node; the grants lose `write` while they run.
    let http = Http::new();
    let mut writers = Vec::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for id in cluster.ids() {
        let (http, url, token, stop) = (
            http.clone(),
            format!("{}/v1/write", cluster.endpoint(id)),
            new.clone(),
            stop.clone(),
        );
        writers.push(tokio::spawn(async move {
            let auth = bearer(&token);
            let mut log: Vec<(Instant, Answer)> = Vec::new();
            for i in 0..10_000u64 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let started = Instant::now();
                let body = json!({"key": format!("r/loop{id}/{i}"), "value": i});
                let answer = http
                    .send(Method::POST, &url, Some(&auth), Some(&body))
                    .await;
                log.push((started, answer));
            }
            (id, log)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    admin
        .set_grants("w", vec![grant("r/", &[Read])])
        .await
        .expect("set grants");
    let changed = Instant::now();
    // At or after the entry that changed the grants: no write may be applied above it
    // (one proposed under the old grants is refused at apply).
    let grants_index_bound = last_log_index(&cluster, leader).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for writer in writers {
        let (id, log) = writer.await.expect("writer");
        let before: Vec<&Answer> = log
            .iter()
            .filter(|(s, _)| *s < changed)
            .map(|(_, a)| a)
            .collect();
        let after: Vec<&Answer> = log
            .iter()
            .filter(|(s, _)| *s > changed)
            .map(|(_, a)| a)
            .collect();
        assert!(
            before.iter().any(|a| a.ok()),
            "node {id}: no write succeeded before the change"
        );
        assert!(
            !after.is_empty(),
            "node {id}: no write started after the change"
        );
        for answer in after {
            answer.expect(
                403,
                Some("permission_denied"),
                &format!("node {id}: a write after the grants changed"),
            );
        }
        for (_, answer) in log.iter().filter(|(_, a)| a.ok()) {
            let revision = answer.body["revision"].as_u64().expect("revision");
            assert!(
                revision <= grants_index_bound,
                "node {id}: a write applied at {revision}, after the grants lost write \
                 (log index {grants_index_bound} when set_grants returned)"
            );
        }
    }
    for id in cluster.ids() {
        api.read(id, Some(&new), "r/0").await.expect(
            200,
            None,
            &format!("node {id}: read keeps working"),
        );
    }

    admin.delete_principal("w").await.expect("delete");
    for id in cluster.ids() {
        api.read(id, Some(&new), "r/0").await.expect(
            401,
            Some("unauthenticated"),
            &format!("node {id}: read, deleted principal"),
        );
        api.write(id, Some(&new), "r/0", json!(1)).await.expect(
            401,
            Some("unauthenticated"),
            &format!("node {id}: write, deleted principal"),
        );
    }
}

/// Principals, grants and `acl_revision` survive a restart of every node and reach a new
/// node through a snapshot (the log was compacted past every access change): the token
/// works there, a denied op is denied there, and all replicas have one state digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_06_access_state_survives_restarts_and_snapshot_install() {
    let (mut cluster, leader, _) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let at = cluster.admin_token();
    api.write(leader, Some(&at), "e/1", json!("hidden"))
        .await
        .expect(200, None, "e/1");
    let old = create(&admin, "dur", vec![grant("d/", &[Read])]).await;
    let token = admin.rotate_token("dur").await.expect("rotate").token;
    admin
        .set_grants("dur", vec![grant("d/", &[Read, Write])])
        .await
        .expect("grants");
    create(&admin, "gone", vec![]).await;
    admin.delete_principal("gone").await.expect("delete");
    api.write(leader, Some(&token), "d/1", json!(1))
        .await
        .expect(200, None, "d/1");
    let principals = admin.principals().await.expect("principals");
    assert_eq!(
        principals.acl_revision, 6,
        "enable + create, rotate, grants, create, delete"
    );
    drop(api);

    for id in cluster.ids() {
        cluster.kill9(id);
    }
    for id in cluster.ids() {
        cluster.restart(id).await;
    }
    let leader = cluster.wait_settled(CATCH_UP_TIMEOUT).await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    assert_eq!(
        admin.principals().await.expect("principals"),
        principals,
        "after restart"
    );
    for id in cluster.ids() {
        api.write(id, Some(&token), &format!("d/r{id}"), json!(id))
            .await
            .expect(200, None, &format!("node {id}: write after restart"));
        api.write(id, Some(&token), "e/1", json!("x")).await.expect(
            403,
            Some("permission_denied"),
            &format!("node {id}: denied after restart"),
        );
        api.read(id, Some(&old), "d/1").await.expect(
            401,
            Some("unauthenticated"),
            &format!("node {id}: rotated token after restart"),
        );
    }

    // Compact the leader past every access change, then join node 4: it can only learn
    // the principals from the snapshot.
    let before = last_log_index(&cluster, leader).await;
    let compacted = admin
        .compact(&cluster.endpoint(leader))
        .await
        .expect("compact");
    assert!(
        compacted.log_purged_through >= before,
        "the log is purged past the access changes: {compacted:?}, last index {before}"
    );
    let spec = cluster.add_node(4).await;
    let api = Api::new(&cluster);
    let patient = Client::builder(cluster.ids().iter().map(|i| cluster.endpoint(*i)).collect())
        .request_timeout(JOIN_TIMEOUT)
        .token(cluster.admin_token())
        .build()
        .expect("client");
    let joined = patient.join(spec).await.expect("join");
    assert_eq!(joined.voters, vec![1, 2, 3, 4], "{joined:?}");
    let index = wait_all_applied(&cluster, leader).await;
    let any = json!({"key": "d/1", "consistency": "any", "min_revision": index});
    let read = api.post(4, "/v1/read", Some(&token), any).await;
    read.expect(
        200,
        None,
        "node 4: an `any` read with the principal's token",
    );
    assert_eq!(read.body["served"]["node_id"], json!(4), "served by node 4");
    let denied = json!({"key": "e/1", "consistency": "any", "min_revision": index});
    assert_denied(
        &api.post(4, "/v1/read", Some(&token), denied).await,
        "read",
        "e/1",
        "node 4: a read outside the grants",
    );
    api.post(
        4,
        "/v1/read",
        Some(&old),
        json!({"key": "d/1", "consistency": "any"}),
    )
    .await
    .expect(401, Some("unauthenticated"), "node 4: the rotated token");
    api.write(4, Some(&token), "e/2", json!(1)).await.expect(
        403,
        Some("permission_denied"),
        "node 4: a write outside the grants",
    );
    let whoami = api.get(4, "/v1/auth/whoami", Some(&token)).await;
    whoami.expect(200, None, "node 4: whoami");
    assert_eq!(whoami.body["name"], json!("dur"));
    assert_eq!(whoami.body["acl_revision"], json!(6));

    // One state digest (access record included) on every replica.
    let index = wait_all_applied(&cluster, leader).await;
    drop(api);
    let mut digests = Vec::new();
    for id in cluster.ids() {
        let status = cluster.status(id).await.expect("status");
        assert_eq!(status.applied_index, index, "node {id} applied everything");
    }
    for id in cluster.ids() {
        cluster.terminate(id);
    }
    for id in cluster.ids() {
        digests.push((id, digest_of(&cluster.data_dir(id))));
    }
    for (id, digest) in &digests {
        assert_eq!(
            digest, &digests[0].1,
            "node {id}'s digest differs from node {}'s",
            digests[0].0
        );
    }
}

/// The state digest of a stopped node's data dir.
fn digest_of(data_dir: &Path) -> String {
    let options = cairn_node::store::EngineOptions {
        block_cache_bytes: 1 << 20,
        write_buffer_bytes: 1 << 20,
        background_jobs: 1,
        slot_cache_bytes: 64 << 10,
        ..Default::default()
    };
    let engine = cairn_node::store::Engine::open(&data_dir.join("db"), &options)
        .unwrap_or_else(|e| panic!("opening {}: {e}", data_dir.display()));
    cairn_node::store::StateEngine::new(engine)
        .digest()
        .expect("digest")
}

/// Principal changes made concurrently end in one consistent state: every change counted
/// once in `acl_revision`, each principal with its last grants, on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_07_concurrent_principal_changes_end_consistent() {
    let (cluster, _, _) = auth_cluster().await;
    let api = Api::new(&cluster);
    const TASKS: usize = 6;
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let admin = cluster.admin_client();
        tasks.push(tokio::spawn(async move {
            let name = format!("c{i}");
            let prefix = format!("c/{i}/");
            let mut applied = 0u64;
            let mut token = admin
                .create_principal(&name, vec![grant(&prefix, &[Read])])
                .await
                .map(|c| c.token);
            applied += u64::from(token.is_ok());
            for permissions in [vec![Read, Write], vec![Read, Write, Forget]] {
                let changed = admin
                    .set_grants(&name, vec![grant(&prefix, &permissions)])
                    .await;
                applied += u64::from(changed.is_ok());
            }
            if let Ok(rotated) = admin.rotate_token(&name).await {
                applied += 1;
                token = Ok(rotated.token);
            }
            (name, prefix, token.ok(), applied)
        }));
    }
    let mut applied = 0;
    let mut made = Vec::new();
    for task in tasks {
        let (name, prefix, token, n) = task.await.expect("task");
        applied += n;
        made.push((
            name,
            prefix,
            token.expect("the principal was made and rotated"),
        ));
    }
    assert_eq!(applied, 4 * TASKS as u64, "every change succeeded");
    // `whoami` answers from the receiving node's applied state: every node must have
    // applied the last change before it is asked.
    let leader = cluster.wait_leader(LEADER_TIMEOUT).await;
    let last = cluster.status(leader).await.expect("status").commit_index;
    for id in cluster.ids() {
        cluster.wait_applied(id, last, LEADER_TIMEOUT).await;
    }
    let list = cluster
        .admin_client()
        .principals()
        .await
        .expect("principals");
    assert_eq!(
        list.acl_revision,
        1 + applied,
        "acl_revision counts enable + every change"
    );
    let mut names: Vec<&str> = list.principals.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    let mut expected: Vec<String> = made.iter().map(|(n, _, _)| n.clone()).collect();
    expected.push(ADMIN.into());
    expected.sort();
    assert_eq!(names, expected, "principals");
    for (name, prefix, token) in &made {
        let p = list
            .principals
            .iter()
            .find(|p| &p.name == name)
            .expect("listed");
        assert_eq!(
            p.grants,
            vec![grant(prefix, &[Read, Write, Forget])],
            "{name}'s grants"
        );
        assert_eq!(p.created_by, ADMIN, "{name} made by");
        for id in cluster.ids() {
            let whoami = api.get(id, "/v1/auth/whoami", Some(token)).await;
            whoami.expect(200, None, &format!("node {id}: whoami of {name}"));
            assert_eq!(whoami.body["name"], json!(name));
            assert_eq!(whoami.body["acl_revision"], json!(1 + applied), "node {id}");
            assert_eq!(
                whoami.body["grants"],
                json!([{"prefix": prefix, "permissions": ["read", "write", "forget"]}]),
                "node {id}: {name}"
            );
        }
    }
}

/// Who may call which operator endpoint: admin-only ones are 401/401/403/OK for no token,
/// a bad token, a plain principal and the admin (a refused call changes nothing); status
/// and whoami need any valid token; healthz and metrics stay open; enable on an auth-on
/// cluster is 409 and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_08_operator_endpoints_need_the_right_token() {
    let (mut cluster, leader, _) = auth_cluster().await;
    let spec4 = cluster.add_node(4).await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let at = cluster.admin_token();
    let plain = create(&admin, "plain", vec![grant("", &[Read, Write])]).await;
    let victim = create(&admin, "victim", vec![grant("v/", &[Read])]).await;
    let unknown = unknown_token();
    let callers: [(&str, Option<&str>); 3] = [
        ("no token", None),
        ("unknown token", Some(&unknown)),
        ("plain principal", Some(&plain)),
    ];
    let expected = [
        (401, "unauthenticated"),
        (401, "unauthenticated"),
        (403, "permission_denied"),
    ];
    let join_body = serde_json::to_value(&spec4).expect("spec");
    let admin_only: Vec<(Method, String, Option<Value>)> = vec![
        (
            Method::POST,
            "/cluster/join".into(),
            Some(join_body.clone()),
        ),
        (
            Method::POST,
            "/cluster/remove".into(),
            Some(json!({"id": 4})),
        ),
        (Method::POST, "/cluster/compact".into(), None),
        (Method::GET, "/v1/auth/principals".into(), None),
        (
            Method::POST,
            "/v1/auth/principals".into(),
            Some(json!({"name": "intruder", "grants": [{"prefix": "", "permissions": ["admin"]}]})),
        ),
        (
            Method::POST,
            "/v1/auth/principals/victim/rotate".into(),
            None,
        ),
        (
            Method::PUT,
            "/v1/auth/principals/victim/grants".into(),
            Some(json!({"grants": [{"prefix": "", "permissions": ["admin"]}]})),
        ),
        (Method::DELETE, "/v1/auth/principals/victim".into(), None),
        (
            Method::POST,
            "/v1/auth/principals/plain/rotate".into(),
            None,
        ),
    ];
    let acl_before = admin.principals().await.expect("principals");
    let log_before = last_log_index(&cluster, leader).await;
    // The admin's own bad input is 400 naming the field, and changes nothing either.
    let bad_input: [(Method, &str, Value, &str); 7] = [
        (
            Method::POST,
            "/v1/auth/principals",
            json!({"name": "bad name", "grants": []}),
            "name",
        ),
        (
            Method::POST,
            "/v1/auth/principals",
            json!({"name": "nogrants"}),
            "grants",
        ),
        (
            Method::PUT,
            "/v1/auth/principals/victim/grants",
            json!({}),
            "grants",
        ),
        (
            Method::POST,
            "/v1/auth/principals",
            json!({"name": "x", "grants": [{"prefix": "", "permissions": ["read"]},
                                           {"prefix": "team/", "permissions": ["admin"]}]}),
            "grants[1].permissions",
        ),
        (
            Method::PUT,
            "/v1/auth/principals/victim/grants",
            json!({"grants": [{"prefix": "v/", "permissions": []}]}),
            "grants[0].permissions",
        ),
        (
            Method::POST,
            "/v1/auth/principals/victim/rotate",
            json!({"reason": "no such field"}),
            "reason",
        ),
        (
            Method::POST,
            "/cluster/compact",
            json!({"now": true}),
            "now",
        ),
    ];
    for (method, path, body, field) in bad_input {
        let answer = api
            .call(method.clone(), leader, path, Some(&at), Some(body))
            .await;
        answer.expect(
            400,
            Some("invalid_request"),
            &format!("admin: {method} {path}"),
        );
        assert_eq!(
            answer.body["error"]["field"],
            json!(field),
            "{}",
            answer.body
        );
    }
    for (method, path, body) in &admin_only {
        for ((who, token), (status, code)) in callers.iter().zip(expected) {
            api.call(method.clone(), leader, path, *token, body.clone())
                .await
                .expect(status, Some(code), &format!("{method} {path}, {who}"));
        }
    }
    assert_eq!(
        admin.principals().await.expect("principals"),
        acl_before,
        "refused calls changed principals"
    );
    assert_eq!(
        last_log_index(&cluster, leader).await,
        log_before,
        "refused calls reached the log"
    );
    let status = cluster.status(leader).await.expect("status");
    assert_eq!(
        (status.voters.clone(), status.learners.clone()),
        (vec![1, 2, 3], vec![]),
        "membership unchanged"
    );
    api.get(leader, "/v1/auth/whoami", Some(&victim))
        .await
        .expect(200, None, "the victim's token still works");

    // The admin: OK, in an order that makes each call meaningful.
    let http = Http::new();
    let url = |p: &str| format!("{}{p}", cluster.endpoint(leader));
    let admin_auth = bearer(&at);
    let joined = http
        .send_timeout(
            Method::POST,
            &url("/cluster/join"),
            Some(&admin_auth),
            Some(&join_body),
            JOIN_TIMEOUT,
        )
        .await;
    joined.expect(200, None, "join, admin");
    for (method, path, body) in &admin_only[1..] {
        let answer = http
            .send_timeout(
                method.clone(),
                &url(path),
                Some(&admin_auth),
                body.as_ref(),
                JOIN_TIMEOUT,
            )
            .await;
        assert!(
            answer.ok(),
            "{method} {path}, admin: {} {}",
            answer.status,
            answer.body
        );
    }
    let after = admin.principals().await.expect("principals");
    let mut names: Vec<&str> = after.principals.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![ADMIN, "intruder", "plain"],
        "principals after the admin's calls"
    );
    api.get(leader, "/v1/auth/whoami", Some(&plain))
        .await
        .expect(401, Some("unauthenticated"), "plain's rotated token");
    // Node 4 was removed: it follows no one any more.
    cluster.kill9(4);
    let leader = cluster.wait_settled(CATCH_UP_TIMEOUT).await;

    // Any valid token: status and whoami, on every node.
    for id in [1, 2, 3] {
        for path in ["/cluster/status", "/v1/auth/whoami"] {
            api.get(id, path, None).await.expect(
                401,
                Some("unauthenticated"),
                &format!("node {id}: {path}, no token"),
            );
            api.get(id, path, Some(&unknown)).await.expect(
                401,
                Some("unauthenticated"),
                &format!("node {id}: {path}, unknown token"),
            );
            api.get(id, path, Some(&at)).await.expect(
                200,
                None,
                &format!("node {id}: {path}, admin"),
            );
        }
        let whoami = api.get(id, "/v1/auth/whoami", Some(&at)).await;
        assert_eq!(whoami.body["name"], json!(ADMIN));
        for path in ["/healthz", "/metrics"] {
            let answer = api.get(id, path, None).await;
            assert_eq!(answer.status, 200, "node {id}: {path} without a token");
        }
    }

    // Init and enable on an initialized auth-on cluster, at every node: the caller is
    // authenticated first (401, then 403 without admin), and only the admin learns that it
    // is done already (409). Nothing changes, not even a log (no refusal needs an entry).
    let late = create(&admin, "late", vec![grant("", &[Read, Write])]).await;
    let acl = admin.principals().await.expect("principals");
    let callers = [
        ("admin", Some(at.as_str()), 409, "invalid_transition"),
        ("no token", None, 401, "unauthenticated"),
        (
            "unknown token",
            Some(unknown.as_str()),
            401,
            "unauthenticated",
        ),
        (
            "plain principal",
            Some(late.as_str()),
            403,
            "permission_denied",
        ),
    ];
    let mut problems = Vec::new();
    for id in [1, 2, 3] {
        let init = json!({"nodes": [{"id": id, "client_addr": "127.0.0.1:1", "peer_addr": "127.0.0.1:2"}]});
        let calls = [
            ("/v1/auth/enable", json!({"admin": "root2"})),
            ("/cluster/init", init),
        ];
        for (path, body) in &calls {
            for (who, token, status, code) in callers {
                let log = last_log_index(&cluster, leader).await;
                let answer = api.post(id, path, token, body.clone()).await;
                let after = last_log_index(&cluster, leader).await;
                if (answer.status, answer.code()) != (status, code) {
                    problems.push(format!(
                        "node {id}: {path} by {who}: {} {}, expected {status} {code}",
                        answer.status, answer.body
                    ));
                }
                if answer.body.to_string().contains("LogId") {
                    problems.push(format!(
                        "node {id}: {path} by {who}: Raft internals in {}",
                        answer.body
                    ));
                }
                if after != log {
                    problems.push(format!(
                        "node {id}: {path} by {who} appended to the leader's log: {log} -> {after}"
                    ));
                }
            }
        }
    }
    assert_eq!(
        admin.principals().await.expect("principals"),
        acl,
        "init or enable changed principals"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

/// `POST /v1/auth/enable` turns auth on for a cluster made without it: tokenless requests
/// work before and get 401 after, on every node (writes and linearizable reads at once,
/// other endpoints once the node has applied the enable); the returned token works.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_09_enable_turns_auth_on_for_a_cluster_made_without_it() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_settled(CATCH_UP_TIMEOUT).await;
    let api = Api::new(&cluster);
    api.post(
        leader,
        "/v1/write",
        None,
        json!({"key": "x/1", "value": 1, "actor": "anon"}),
    )
    .await
    .expect(200, None, "a tokenless write before enable");
    api.get(leader, "/cluster/status", None)
        .await
        .expect(200, None, "status before enable");
    let enabled = cluster.client().enable_auth("root").await.expect("enable");
    assert_eq!((enabled.admin.as_str(), enabled.acl_revision), ("root", 1));
    let token = enabled.token;
    assert!(
        token.starts_with("cairn_"),
        "token shape: {}",
        shown(&token)
    );
    cluster.use_token(&token);
    for id in cluster.ids() {
        api.post(
            id,
            "/v1/write",
            None,
            json!({"key": "x/1", "value": 2, "actor": "anon"}),
        )
        .await
        .expect(
            401,
            Some("unauthenticated"),
            &format!("node {id}: a tokenless write after enable"),
        );
        api.read(id, None, "x/1").await.expect(
            401,
            Some("unauthenticated"),
            &format!("node {id}: a tokenless read after enable"),
        );
    }
    // Mutations and linearizable reads are refused on every node as soon as enable returns
    // (SPEC §8, above); any other endpoint once the node has applied the enable entry.
    wait_all_applied(&cluster, leader).await;
    for id in cluster.ids() {
        api.get(id, "/cluster/status", None).await.expect(
            401,
            Some("unauthenticated"),
            &format!("node {id}: tokenless status after enable"),
        );
        let read = api.read(id, Some(&token), "x/1").await;
        read.expect(200, None, &format!("node {id}: read with the token"));
        assert_eq!(
            read.body["value"],
            json!(1),
            "node {id}: the tokenless write after enable did not land"
        );
    }
    api.write(leader, Some(&token), "x/1", json!(3))
        .await
        .expect(200, None, "write as root");
    assert_eq!(
        api.history_actors(leader, &token, "x/1").await,
        vec!["anon", "root"],
        "history actors"
    );
    let whoami = api.get(leader, "/v1/auth/whoami", Some(&token)).await;
    whoami.expect(200, None, "whoami");
    assert_eq!(whoami.body["name"], json!("root"));
    api.post(
        leader,
        "/v1/auth/enable",
        Some(&token),
        json!({"admin": "again"}),
    )
    .await
    .expect(409, Some("invalid_transition"), "enable twice");
    cluster.wait_settled(CATCH_UP_TIMEOUT).await;
}

/// No issued token (nor its base64 body), nor a presented bad one, appears in any node's
/// log (at debug level), in `/metrics`, or in any error body, after principals were made,
/// rotated and deleted and bad tokens were sent to every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_10_no_token_in_logs_metrics_or_error_bodies() {
    let cluster = Cluster::builder(3)
        .config("log_level = \"debug\"\n")
        .auth(ADMIN)
        .start()
        .await;
    let leader = cluster.wait_settled(CATCH_UP_TIMEOUT).await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let mut secrets = vec![cluster.admin_token(), unknown_token()];
    let a1 = create(&admin, "a", vec![grant("s/", &[Read, Write])]).await;
    let a2 = admin.rotate_token("a").await.expect("rotate").token;
    let b = create(&admin, "b", vec![grant("s/", &[Read])]).await;
    admin.delete_principal("b").await.expect("delete");
    secrets.extend([a1.clone(), a2.clone(), b.clone()]);
    let mut bodies = Vec::new();
    for id in cluster.ids() {
        for token in [&a1, &b, &secrets[1]] {
            let w = api.write(id, Some(token), "s/1", json!(1)).await;
            w.expect(
                401,
                Some("unauthenticated"),
                &format!("node {id}: write, bad token"),
            );
            let r = api.read(id, Some(token), "s/1").await;
            r.expect(
                401,
                Some("unauthenticated"),
                &format!("node {id}: read, bad token"),
            );
            bodies.extend([w.text, r.text]);
        }
        // Malformed headers that carry a token: after a wrong scheme, or with junk after it.
        for auth in [format!("Basic {a2}"), format!("Bearer {a2}x"), a2.clone()] {
            let w = api
                .post_raw(
                    id,
                    "/v1/write",
                    Some(&auth),
                    json!({"key": "s/2", "value": 1}),
                )
                .await;
            w.expect(
                401,
                Some("unauthenticated"),
                &format!("node {id}: malformed header"),
            );
            bodies.push(w.text);
        }
        let denied = api.write(id, Some(&a2), "t/1", json!(1)).await;
        denied.expect(
            403,
            Some("permission_denied"),
            &format!("node {id}: denied"),
        );
        bodies.push(denied.text);
        let forged = api
            .post(
                id,
                "/v1/write",
                Some(&a2),
                json!({"key": "s/3", "value": 1, "actor": "x"}),
            )
            .await;
        forged.expect(
            403,
            Some("actor_mismatch"),
            &format!("node {id}: forged actor"),
        );
        bodies.push(forged.text);
        api.write(id, Some(&a2), &format!("s/ok{id}"), json!(1))
            .await
            .expect(
                200,
                None,
                &format!("node {id}: a good write (relayed from followers)"),
            );
    }
    wait_all_applied(&cluster, leader).await;
    let mut texts: Vec<(String, String)> = Vec::new();
    for id in cluster.ids() {
        let metrics = api.get(id, "/metrics", None).await;
        assert_eq!(metrics.status, 200, "node {id}: metrics");
        texts.push((format!("node {id} /metrics"), metrics.text));
        texts.push((format!("node {id} log"), cluster.log_text(id)));
    }
    for (i, body) in bodies.into_iter().enumerate() {
        texts.push((format!("error body #{i}"), body));
    }
    assert!(
        texts
            .iter()
            .any(|(w, t)| w.ends_with("log") && t.contains("DEBUG")),
        "the nodes log at debug level"
    );
    for secret in &secrets {
        let body = secret.strip_prefix("cairn_").expect("token shape");
        for (what, text) in &texts {
            assert!(
                !text.contains(secret.as_str()) && !text.contains(body),
                "{what} contains {}",
                shown(secret)
            );
        }
    }
}

/// An open `GET /v1/watch?prefix=PREFIX&from_revision=FROM` on `url`, with `token`.
async fn open_watch(url: &str, token: &str, prefix: &str, from: u64) -> reqwest::Response {
    // No overall timeout: the stream is read chunk by chunk, each with its own bound.
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("http client");
    let response = http
        .get(format!(
            "{url}/v1/watch?prefix={prefix}&from_revision={from}"
        ))
        .header(reqwest::header::AUTHORIZATION, bearer(token))
        .send()
        .await
        .expect("watch");
    assert_eq!(response.status().as_u16(), 200, "watch");
    response
}

/// The SSE text of `response` read until `done(text)` or the stream ends, for at most
/// `within`: `(text, ended)`.
async fn read_sse(
    response: &mut reqwest::Response,
    within: Duration,
    done: impl Fn(&str) -> bool,
) -> (String, bool) {
    let deadline = tokio::time::Instant::now() + within;
    let mut text = String::new();
    loop {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                text.push_str(&String::from_utf8_lossy(&chunk));
                if done(&text) {
                    return (text, false);
                }
            }
            Ok(Ok(None)) | Ok(Err(_)) => return (text, true),
            Err(_) => return (text, false),
        }
    }
}

/// A watch lasts only while the token that opened it authenticates its principal: once
/// the token is rotated ("the old one stops at once") or the principal deleted, the
/// stream ends on every node, and no change made after that is sent under the old token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_11_a_watch_ends_once_its_token_is_rotated_or_its_principal_deleted() {
    let (cluster, leader, _) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let at = cluster.admin_token();
    let at = Some(at.as_str());
    let old = create(&admin, "watcher", vec![grant("wr/", &[Read])]).await;
    let mut watches = watch_everywhere(&cluster, leader, &old).await;
    api.write(leader, at, "wr/before", json!(1)).await.expect(
        200,
        None,
        "write before the rotation",
    );
    assert_every_watch_delivers(&mut watches, "wr/before").await;

    let new = admin.rotate_token("watcher").await.expect("rotate").token;
    api.write(leader, at, "wr/after", json!(2))
        .await
        .expect(200, None, "write after the rotation");
    let texts = assert_every_watch_ends(&mut watches, "opened with the rotated token").await;
    for (id, text) in texts {
        assert!(
            !text.contains("wr/after"),
            "node {id}: a change made after the rotation was sent under the old token"
        );
    }

    // The new token watches; deleting the principal ends that watch as well.
    let mut watches = watch_everywhere(&cluster, leader, &new).await;
    api.write(leader, at, "wr/again", json!(3)).await.expect(
        200,
        None,
        "write with the new token's watch open",
    );
    assert_every_watch_delivers(&mut watches, "wr/again").await;
    admin.delete_principal("watcher").await.expect("delete");
    assert_every_watch_ends(&mut watches, "of a deleted principal").await;
}

/// A watch of `wr/` with `token` on every node, from the next revision on.
async fn watch_everywhere(
    cluster: &Cluster,
    leader: u64,
    token: &str,
) -> Vec<(u64, reqwest::Response)> {
    let from = wait_all_applied(cluster, leader).await + 1;
    let mut watches = Vec::new();
    for id in cluster.ids() {
        let watch = open_watch(&cluster.endpoint(id), token, "wr/", from).await;
        watches.push((id, watch));
    }
    watches
}

async fn assert_every_watch_delivers(watches: &mut [(u64, reqwest::Response)], key: &str) {
    for (id, watch) in watches {
        let (text, ended) = read_sse(watch, EVENT_TIMEOUT, |t| t.contains(key)).await;
        assert!(
            !ended && text.contains(key),
            "node {id}: the watch delivers {key}: {text:?}"
        );
    }
}

/// Each watch's text until it ended (it must, within the event timeout).
async fn assert_every_watch_ends(
    watches: &mut [(u64, reqwest::Response)],
    what: &str,
) -> Vec<(u64, String)> {
    let mut texts = Vec::new();
    for (id, watch) in watches {
        let (text, ended) = read_sse(watch, EVENT_TIMEOUT, |_| false).await;
        assert!(ended, "node {id}: a watch {what} is still open: {text:?}");
        texts.push((*id, text));
    }
    texts
}

/// A refused write tells a principal without `read` on its key no more than a tombstone
/// lookup would (404): `key_revoked` and `key_forgotten` keep their status, code and
/// message, and carry `rendered`, `revocation` and `tombstone` only for a principal that
/// may read the key; the same in a batch, and through a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_12_conflict_details_show_a_keys_content_only_to_its_readers() {
    let (cluster, leader, followers) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let at = cluster.admin_token();
    let at = Some(at.as_str());
    let writer = create(&admin, "writer", vec![grant("c/", &[Write])]).await;
    let reader = create(&admin, "reader", vec![grant("c/", &[Read, Write])]).await;
    let value = "the revoked secret value";
    let reason = "the forget's secret reason";
    api.write(leader, at, "c/rev", json!(value))
        .await
        .expect(200, None, "write c/rev");
    api.post(
        leader,
        "/v1/revoke",
        at,
        json!({"key": "c/rev", "reason": "wrong belief"}),
    )
    .await
    .expect(200, None, "revoke c/rev");
    api.write(leader, at, "c/gone", json!("gone"))
        .await
        .expect(200, None, "write c/gone");
    let forgotten = api
        .post(
            leader,
            "/v1/forget",
            at,
            json!({"key": "c/gone", "reason": reason}),
        )
        .await;
    forgotten.expect(200, None, "forget c/gone");
    let tombstone_id = forgotten.body["tombstone"]["id"].as_str().expect("id");
    wait_all_applied(&cluster, leader).await;
    api.get(
        leader,
        &format!("/v1/tombstones/{tombstone_id}"),
        Some(&writer),
    )
    .await
    .expect(404, Some("not_found"), "the writer's tombstone lookup");

    for id in [leader, followers[0]] {
        for (who, token, reads) in [("writer", &writer, false), ("reader", &reader, true)] {
            let what = |op: &str| format!("node {id}, {who}: {op}");
            let mut answers = Vec::new();
            let revoked = api.write(id, Some(token), "c/rev", json!("x")).await;
            revoked.expect(409, Some("key_revoked"), &what("write of c/rev"));
            answers.push(("key_revoked", revoked, &["rendered", "revocation"][..]));
            let gone = api.write(id, Some(token), "c/gone", json!("x")).await;
            gone.expect(409, Some("key_forgotten"), &what("write of c/gone"));
            answers.push(("key_forgotten", gone, &["tombstone"][..]));
            for (key, code, fields) in [
                ("c/rev", "key_revoked", &["rendered", "revocation"][..]),
                ("c/gone", "key_forgotten", &["tombstone"][..]),
            ] {
                let ops = json!({"ops": [
                    {"op": "write", "key": format!("c/ok{id}"), "value": 1},
                    {"op": "write", "key": key, "value": "x"},
                ]});
                let batch = api.post(id, "/v1/batch", Some(token), ops).await;
                batch.expect(409, Some(code), &what(&format!("batch writing {key}")));
                assert_eq!(batch.body["error"]["op_index"], json!(1), "{}", batch.body);
                answers.push((code, batch, fields));
            }
            for (code, answer, fields) in answers {
                let error = &answer.body["error"];
                for field in fields {
                    assert_eq!(
                        error.get(*field).is_some(),
                        reads,
                        "{}: {code} carries {field} only for a reader: {error}",
                        what("refusal")
                    );
                }
                if !reads {
                    assert!(
                        !answer.text.contains(value) && !answer.text.contains(reason),
                        "{}: {code} shows the key's content: {error}",
                        what("refusal")
                    );
                }
            }
        }
    }

    // A forget's answer carries the tombstone only for a principal that may read the
    // key: one with `forget` alone would see another principal's reason, and the hash of
    // a value it may not read (which confirms a guess), in a single op and in a batch.
    let forgetter = create(&admin, "forgetter", vec![grant("c/", &[Forget])]).await;
    let again = json!({"key": "c/gone", "reason": "again"});
    for id in [leader, followers[0]] {
        let single = api
            .post(id, "/v1/forget", Some(&forgetter), again.clone())
            .await;
        single.expect(200, None, &format!("node {id}: the forgetter's forget"));
        assert_eq!(single.body["already"], json!(true), "{}", single.body);
        let ops = json!({"ops": [{"op": "forget", "key": "c/gone", "reason": "again"}]});
        let batch = api.post(id, "/v1/batch", Some(&forgetter), ops).await;
        batch.expect(200, None, &format!("node {id}: the forgetter's batch"));
        for answer in [&single, &batch] {
            assert!(
                !answer.text.contains("tombstone") && !answer.text.contains(reason),
                "node {id}: a forget shows the tombstone to a principal without read: {}",
                answer.body
            );
        }
    }
    let by_a_reader = api.post(leader, "/v1/forget", at, again).await;
    by_a_reader.expect(200, None, "the admin's forget");
    assert_eq!(by_a_reader.body["tombstone"]["reason"], json!(reason));
}

/// The `Bearer` scheme name is matched in any case (RFC 9110 §11.1). Two `Authorization`
/// headers are 401 `unauthenticated` on every node (which one counts would be a guess),
/// whatever they hold, and the refusal shows no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_13_bearer_in_any_case_and_exactly_one_authorization_header() {
    let (cluster, leader, _) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let at = cluster.admin_token();
    let token = create(&admin, "h", vec![grant("h/", &[Read, Write])]).await;
    for id in cluster.ids() {
        for scheme in ["bearer", "BEARER", "bEaReR", "Bearer"] {
            let auth = format!("{scheme} {token}");
            let key = format!("h/{id}/{scheme}");
            api.post_raw(
                id,
                "/v1/write",
                Some(&auth),
                json!({"key": key, "value": 1}),
            )
            .await
            .expect(200, None, &format!("node {id}: write with {scheme:?}"));
            api.post_raw(id, "/v1/read", Some(&auth), json!({"key": key}))
                .await
                .expect(200, None, &format!("node {id}: read with {scheme:?}"));
        }
    }
    let before = wait_all_applied(&cluster, leader).await;
    let first = bearer(&token);
    for id in cluster.ids() {
        for second in [
            bearer(&token),
            bearer(&at),
            bearer(&unknown_token()),
            "x".into(),
        ] {
            for (path, body) in [
                (
                    "/v1/write",
                    json!({"key": format!("h/two{id}"), "value": 1}),
                ),
                ("/v1/read", json!({"key": format!("h/{id}/Bearer")})),
            ] {
                let answer = api
                    .http
                    .send_auths(
                        Method::POST,
                        &api.url(id, path),
                        &[&first, &second],
                        Some(&body),
                        HTTP_TIMEOUT,
                    )
                    .await;
                answer.expect(
                    401,
                    Some("unauthenticated"),
                    &format!("node {id}: {path} with two Authorization headers"),
                );
                for secret in [&token, &at] {
                    assert!(
                        !answer.text.contains(secret.as_str()),
                        "node {id}: the refusal shows {}",
                        shown(secret)
                    );
                }
            }
        }
    }
    assert_eq!(
        last_log_index(&cluster, leader).await,
        before,
        "a refused write reached the log"
    );
}

/// How many writers race an access change.
const RACE_WRITERS: usize = 32;

/// One racing writer's keys and answers, in order.
type RaceLog = Vec<(String, Answer)>;

/// Writers that race an access change: each of [`RACE_WRITERS`] tasks writes
/// `prefix/W/I` on `leader` as `token` (with `actor` while it has none) until its first
/// 401 (SPEC §8: a missing or deleted token).
fn racing_writers(
    api: &Arc<Api>,
    leader: u64,
    token: Option<&str>,
    prefix: &str,
) -> Vec<tokio::task::JoinHandle<RaceLog>> {
    (0..RACE_WRITERS)
        .map(|w| {
            let (api, token, prefix) = (api.clone(), token.map(str::to_string), prefix.to_string());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                for i in 0.. {
                    let key = format!("{prefix}/{w}/{i}");
                    let mut body = json!({"key": key, "value": i});
                    if token.is_none() {
                        body["actor"] = json!("anon");
                    }
                    let answer = api.post(leader, "/v1/write", token.as_deref(), body).await;
                    let refused = answer.status == 401;
                    answers.push((key, answer));
                    if refused {
                        return answers;
                    }
                }
                unreachable!("a writer stops at its first 401")
            })
        })
        .collect()
}

/// Every racing write was answered 200 and is there, or 401 `unauthenticated` and is
/// not (read back with `reader`); never 403. Prints how many 401s came from the refusal
/// at apply (the write was in flight across the change).
async fn check_race(
    api: &Api,
    leader: u64,
    reader: &str,
    writers: Vec<tokio::task::JoinHandle<RaceLog>>,
    change: &str,
) {
    let mut in_flight = 0;
    for writer in writers {
        for (key, answer) in writer.await.expect("writer") {
            let stored = api.read(leader, Some(reader), &key).await;
            if answer.ok() {
                stored.expect(200, None, &format!("{key}, answered 200"));
                continue;
            }
            answer.expect(401, Some("unauthenticated"), &key);
            stored.expect(404, Some("not_found"), &format!("{key}, answered 401"));
            in_flight += usize::from(answer.text.contains("in flight"));
        }
    }
    eprintln!("{in_flight} of {RACE_WRITERS} writers' last writes were in flight across {change}");
}

/// Tokenless writers racing `POST /v1/auth/enable`: a write admitted while auth was off
/// and applied after the enable entry is refused at apply (no principal wrote it), and
/// answered 401 `unauthenticated` as it would be if sent now, never 403. Every write
/// answered 200 is there; every one answered 401 is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_14_tokenless_writes_in_flight_across_enable_are_401_and_change_nothing() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_settled(CATCH_UP_TIMEOUT).await;
    let api = Arc::new(Api::new(&cluster));
    let writers = racing_writers(&api, leader, None, "race");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let token = cluster
        .client()
        .enable_auth("root")
        .await
        .expect("enable")
        .token;
    cluster.use_token(&token);
    check_race(&api, leader, &token, writers, "enable").await;
}

/// Writers racing the deletion of their principal: a write authenticated before the
/// delete and applied after it is refused at apply (its author is no principal any more)
/// and answered 401 `unauthenticated`, as the deleted token is from then on; never 403.
/// Every write answered 200 is there; every one answered 401 is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_15_writes_in_flight_across_their_principals_deletion_are_401_and_change_nothing() {
    let (cluster, leader, _) = auth_cluster().await;
    let admin = cluster.admin_client();
    let token = create(&admin, "doomed", vec![grant("gone/", &[Write])]).await;
    let api = Arc::new(Api::new(&cluster));
    let writers = racing_writers(&api, leader, Some(&token), "gone");
    tokio::time::sleep(Duration::from_millis(300)).await;
    admin.delete_principal("doomed").await.expect("delete");
    check_race(&api, leader, &cluster.admin_token(), writers, "the delete").await;
}

/// whoami, compact and opening a watch have no staleness bound of their own, so a node
/// that missed a rotation, a deletion and a new principal (stopped while they happened)
/// catches up with the leader before it authenticates them: the moment it runs again, the
/// rotated and the deleted tokens are 401 there and the new principal is known there.
/// (Without the catch-up the stopped node answered them from its old grants for as long as
/// it took to apply the missed entries.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_16_a_lagging_node_catches_up_before_whoami_compact_or_a_watch() {
    // The stopped node must stay a follower when it runs again: each access change waits
    // up to 500 ms for it (the leader asks every member whether it applied the change),
    // and a node stopped past its election timeout campaigns at once when it resumes, so
    // it would answer 503 instead of catching up. Long election timeouts keep it a
    // follower.
    let cluster = Cluster::builder(3)
        .auth(ADMIN)
        .config("[raft]\nelection_timeout_min_ms = 1200\nelection_timeout_max_ms = 1500\n")
        .start()
        .await;
    let leader = cluster.wait_settled(CATCH_UP_TIMEOUT).await;
    let followers: Vec<u64> = cluster.ids().into_iter().filter(|i| *i != leader).collect();
    let mut cluster = cluster;
    let api = Api::new(&cluster);
    let at = cluster.admin_token();
    let at = Some(at.as_str());
    let principal = |name: &str, grants: Value| {
        api.post(
            leader,
            "/v1/auth/principals",
            at,
            json!({"name": name, "grants": grants}),
        )
    };
    let token_of = |answer: Answer, what: &str| {
        answer.expect(200, None, what);
        answer.body["token"].as_str().expect("token").to_string()
    };
    let admin_grants = json!([{"prefix": "", "permissions": ["admin", "read"]}]);
    let rotated = token_of(principal("rotated", admin_grants.clone()).await, "rotated");
    let deleted = token_of(principal("deleted", admin_grants.clone()).await, "deleted");
    let lagging = followers[0];
    wait_all_applied(&cluster, leader).await;

    cluster.sigstop(lagging);
    // At once, so the stopped node's wait is paid once.
    let (rotate, delete, born) = tokio::join!(
        api.post(leader, "/v1/auth/principals/rotated/rotate", at, json!({})),
        api.call(
            Method::DELETE,
            leader,
            "/v1/auth/principals/deleted",
            at,
            None,
        ),
        principal("born", admin_grants),
    );
    let renewed = token_of(rotate, "rotate");
    delete.expect(200, None, "delete");
    let born = token_of(born, "born");
    for i in 0..200 {
        api.write(leader, at, &format!("lag/{i}"), json!(i))
            .await
            .expect(200, None, "write while the follower is stopped");
    }
    let missed = last_log_index(&cluster, leader).await;
    cluster.sigcont(lagging);

    let watch = |token: String| {
        let url = api.url(lagging, "/v1/watch?prefix=lag/&from_revision=0");
        async move {
            let response = reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("http client")
                .get(url)
                .header(reqwest::header::AUTHORIZATION, bearer(&token))
                .timeout(HTTP_TIMEOUT)
                .send()
                .await
                .expect("watch");
            response.status().as_u16()
        }
    };
    // All at once, the moment the node runs again.
    let (
        whoami_rotated,
        whoami_deleted,
        compact_rotated,
        compact_deleted,
        watch_rotated,
        watch_deleted,
    ) = tokio::join!(
        api.get(lagging, "/v1/auth/whoami", Some(&rotated)),
        api.get(lagging, "/v1/auth/whoami", Some(&deleted)),
        api.post(lagging, "/cluster/compact", Some(&rotated), json!({})),
        api.post(lagging, "/cluster/compact", Some(&deleted), json!({})),
        watch(rotated.clone()),
        watch(deleted.clone()),
    );
    for (answer, what) in [
        (whoami_rotated, "whoami, rotated token"),
        (whoami_deleted, "whoami, deleted principal"),
        (compact_rotated, "compact, rotated admin token"),
        (compact_deleted, "compact, deleted admin"),
    ] {
        answer.expect(
            401,
            Some("unauthenticated"),
            &format!("lagging node: {what}"),
        );
    }
    assert_eq!(
        watch_rotated, 401,
        "lagging node: a watch opened with a rotated token"
    );
    assert_eq!(
        watch_deleted, 401,
        "lagging node: a watch opened by a deleted principal"
    );

    let whoami = api.get(lagging, "/v1/auth/whoami", Some(&born)).await;
    whoami.expect(
        200,
        None,
        "lagging node: whoami of a principal made while it was stopped",
    );
    assert_eq!(whoami.body["name"], "born");
    let whoami = api.get(lagging, "/v1/auth/whoami", Some(&renewed)).await;
    whoami.expect(200, None, "lagging node: whoami with the rotated-in token");
    assert_eq!(whoami.body["name"], "rotated");
    assert_eq!(
        watch(renewed.clone()).await,
        200,
        "lagging node: a watch with the new token"
    );
    let compacted = api
        .post(lagging, "/cluster/compact", Some(&renewed), json!({}))
        .await;
    compacted.expect(200, None, "lagging node: compact with the new admin token");
    let snapshot_index = compacted.body["snapshot_index"]
        .as_u64()
        .expect("snapshot_index");
    assert!(
        snapshot_index >= missed,
        "the lagging node compacted at {snapshot_index}, before the {missed} entries it had missed"
    );
}

/// `method path` on node `id` with a raw `body` and this exact `Authorization` header (or
/// none): `(status, code)`.
async fn send_raw(
    api: &Api,
    id: u64,
    method: Method,
    path: &str,
    auth: Option<&str>,
    body: Vec<u8>,
) -> (u16, String) {
    let mut request = api
        .http
        .http
        .request(method, api.url(id, path))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(auth) = auth {
        request = request.header(reqwest::header::AUTHORIZATION, auth);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let code = body["error"]["code"].as_str().unwrap_or("").to_string();
    (status, code)
}

/// With auth on, a request that proves no identity is 401 whatever its shape: a body that
/// does not decode, one too large, an unknown query parameter or a bad path parameter all
/// answer 401 on every node, with no token, a malformed one, an unknown one or a deleted
/// principal's, and nothing reaches the log. With a valid token the same requests are the
/// 400 and 413 they deserve, also with the token of a principal made a moment before,
/// sent to a follower at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_17_a_request_that_proves_no_identity_is_401_before_its_shape_is_checked() {
    let (cluster, leader, followers) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin = cluster.admin_client();
    let at = bearer(&cluster.admin_token());
    let deleted = bearer(&create(&admin, "ghost", vec![]).await);
    admin.delete_principal("ghost").await.expect("delete");
    let unknown = bearer(&unknown_token());
    let before = wait_all_applied(&cluster, leader).await;
    let huge = {
        let mut body = br#"{"key":"s/huge","value":""#.to_vec();
        body.resize(body.len() + 2 * 1024 * 1024 + 1024, b'a');
        body.extend_from_slice(br#""}"#);
        body
    };
    let requests: Vec<(Method, &str, Vec<u8>, u16)> = vec![
        (Method::POST, "/v1/write", b"{bad".to_vec(), 400),
        (
            Method::POST,
            "/v1/write",
            br#"{"key":"s/a","value":1,"zz":1}"#.to_vec(),
            400,
        ),
        (Method::POST, "/v1/write", huge, 413),
        (Method::POST, "/v1/read", br#"{"key":""}"#.to_vec(), 400),
        (Method::GET, "/v1/watch?bogus=1", Vec::new(), 400),
        (Method::GET, "/v1/tombstones/zz", Vec::new(), 400),
        (
            Method::POST,
            "/v1/auth/principals/%FF/rotate",
            Vec::new(),
            400,
        ),
        (Method::POST, "/cluster/compact?x=1", Vec::new(), 400),
        (Method::POST, "/cluster/join", b"[]".to_vec(), 400),
    ];
    for id in cluster.ids() {
        for (method, path, body, status) in &requests {
            let unproven = [
                None,
                Some("Bearer nope"),
                Some("Basic YTpi"),
                Some(unknown.as_str()),
                Some(deleted.as_str()),
            ];
            for auth in unproven {
                let got = send_raw(&api, id, method.clone(), path, auth, body.clone()).await;
                assert_eq!(
                    got,
                    (401, "unauthenticated".to_string()),
                    "node {id}: {method} {path} with {}",
                    auth.map(shown).unwrap_or_default()
                );
            }
            let got = send_raw(&api, id, method.clone(), path, Some(&at), body.clone()).await;
            assert_eq!(
                got.0, *status,
                "node {id}: {method} {path} with the admin token: {got:?}"
            );
        }
        // Public routes keep answering without a token.
        let got = send_raw(&api, id, Method::GET, "/healthz?x=1", None, Vec::new()).await;
        assert_eq!(got.0, 400, "node {id}: /healthz with a query parameter");
        // Headers alone decide these: the node answers at once, never inviting the body
        // (`100 Continue`) or waiting for it.
        let endpoint = cluster.endpoint(id);
        let no_token = head_only(&endpoint, None, 10, true).await;
        assert!(
            no_token.starts_with("HTTP/1.1 401"),
            "node {id}: {no_token}"
        );
        let oversize = head_only(&endpoint, Some(&at), 3_000_000, true).await;
        assert!(
            oversize.starts_with("HTTP/1.1 413"),
            "node {id}: {oversize}"
        );
    }
    assert_eq!(
        last_log_index(&cluster, leader).await,
        before,
        "a refused request reached the log"
    );
    // A follower that has not applied a new principal yet catches up before it judges the
    // token: the request is refused for its shape, not for its identity.
    for id in followers {
        let fresh = bearer(&create(&admin, &format!("fresh-{id}"), vec![]).await);
        let got = send_raw(
            &api,
            id,
            Method::POST,
            "/v1/write",
            Some(&fresh),
            b"{bad".to_vec(),
        )
        .await;
        assert_eq!(got, (400, "invalid_request".to_string()), "node {id}");
    }
    // A leader cut off from its majority cannot check an unknown token: it says so, and
    // does not judge the shape for a caller who may hold no principal.
    let mut cluster = cluster;
    for id in cluster.ids() {
        if id != leader {
            cluster.kill9(id);
        }
    }
    let bad = b"{bad".to_vec();
    let unchecked = send_raw(&api, leader, Method::POST, "/v1/write", Some(&unknown), bad).await;
    assert_eq!(unchecked.0, 503, "{unchecked:?}");
    assert!(
        ["no_leader", "stale_read"].contains(&unchecked.1.as_str()),
        "{unchecked:?}"
    );
    let bad = b"{bad".to_vec();
    let admins = send_raw(&api, leader, Method::POST, "/v1/write", Some(&at), bad).await;
    assert_eq!(admins, (400, "invalid_request".to_string()));
}

/// The first answer to a `POST /v1/write` whose head declares `content_length` bytes and
/// whose body never comes (with `Expect: 100-continue` when `expect`), read within 5 s:
/// the node must answer from the head alone.
async fn head_only(
    endpoint: &str,
    auth: Option<&str>,
    content_length: u64,
    expect: bool,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = endpoint.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.expect("connect");
    let mut head = format!(
        "POST /v1/write HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {content_length}\r\n"
    );
    if let Some(auth) = auth {
        head.push_str(&format!("Authorization: {auth}\r\n"));
    }
    if expect {
        head.push_str("Expect: 100-continue\r\n");
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("send the head");
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("an answer from the head alone, within 5 s")
        .expect("read");
    String::from_utf8_lossy(&answer[..read]).into_owned()
}

/// An `any` read and `GET /cluster/status` authenticate against the grants of the node
/// that serves them, with no barrier (a node cut off from the leader still answers them).
/// So the leader answers a rotation or a deletion only once every member has applied it:
/// the old token is refused by both on every node from then on, not some milliseconds
/// later on a follower. Each round asks every node at once, right after the change
/// returns, through the leader and through a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_18_a_rotated_or_deleted_token_stops_at_once_for_any_reads_and_status() {
    const ROUNDS: usize = 10;
    let (cluster, leader, followers) = auth_cluster().await;
    let api = Api::new(&cluster);
    let admin_token = cluster.admin_token().to_string();
    api.write(leader, Some(&admin_token), "r/0", json!(0))
        .await
        .expect(200, None, "write");
    let old_token_everywhere = |token: String, what: String| {
        let api = &api;
        let cluster = &cluster;
        async move {
            let asked = cluster.ids().into_iter().map(|id| {
                let (token, what) = (token.clone(), what.clone());
                async move {
                    let body = json!({"key": "r/0", "consistency": "any"});
                    api.post(id, "/v1/read", Some(&token), body).await.expect(
                        401,
                        Some("unauthenticated"),
                        &format!("node {id}: any read, {what}"),
                    );
                    api.get(id, "/cluster/status", Some(&token)).await.expect(
                        401,
                        Some("unauthenticated"),
                        &format!("node {id}: status, {what}"),
                    );
                }
            });
            futures::future::join_all(asked).await;
        }
    };
    for round in 0..ROUNDS {
        let via = [leader, followers[round % followers.len()]][round % 2];
        let name = format!("p{round}");
        let body = json!({"name": name, "grants": [{"prefix": "r/", "permissions": ["read"]}]});
        let created = api
            .post(via, "/v1/auth/principals", Some(&admin_token), body)
            .await;
        created.expect(200, None, "create");
        let first = created.body["token"].as_str().expect("token").to_string();
        let rotated = api
            .post(
                via,
                &format!("/v1/auth/principals/{name}/rotate"),
                Some(&admin_token),
                json!({}),
            )
            .await;
        rotated.expect(200, None, "rotate");
        old_token_everywhere(first, format!("round {round}: rotated away via node {via}")).await;
        let second = rotated.body["token"].as_str().expect("token").to_string();
        let path = format!("/v1/auth/principals/{name}");
        api.call(Method::DELETE, via, &path, Some(&admin_token), None)
            .await
            .expect(200, None, "delete");
        old_token_everywhere(second, format!("round {round}: deleted via node {via}")).await;
    }
}

/// With auth on, a `request_id` belongs to its principal: another principal sending the
/// same id first (a predictable one, taken ahead) makes a request of its own, and neither
/// blocks the owner's request nor learns whether the id was used; each principal's retry,
/// through any node, replays its own answer, and another payload under an id is still
/// refused for its owner. An id remembered while auth was off answers its own retry after
/// auth is turned on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_19_request_ids_are_per_principal() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.wait_settled(CATCH_UP_TIMEOUT).await;
    let followers: Vec<u64> = cluster.ids().into_iter().filter(|i| *i != leader).collect();
    let api = Api::new(&cluster);
    let body = |key: &str, value: i64| json!({"key": key, "value": value, "actor": ADMIN, "request_id": "agent-7-0002"});
    api.post(leader, "/v1/write", None, body("before/k", 1))
        .await
        .expect(200, None, "a write with auth off");
    let token = cluster
        .client()
        .enable_auth(ADMIN)
        .await
        .expect("enable")
        .token;
    cluster.use_token(&token);
    let retry = api
        .post(followers[0], "/v1/write", Some(&token), body("before/k", 1))
        .await;
    retry.expect(200, None, "the retry of a write made with auth off");
    assert_eq!(retry.body["replayed"], json!(true), "{}", retry.body);

    let admin = cluster.admin_client();
    let alice = create(&admin, "alice", vec![grant("notes/", &[Read, Write])]).await;
    let dave = create(&admin, "dave", vec![grant("facts/", &[Read, Write])]).await;
    let write =
        |key: &str, value: i64| json!({"key": key, "value": value, "request_id": "agent-7-0003"});
    api.post(
        followers[0],
        "/v1/write",
        Some(&dave),
        write("facts/squat", 0),
    )
    .await
    .expect(200, None, "dave takes the id first");
    let first = api
        .post(leader, "/v1/write", Some(&alice), write("notes/real", 1))
        .await;
    first.expect(200, None, "alice's write under the id dave used");
    assert_eq!(first.body["replayed"], json!(false), "{}", first.body);
    for (token, key, value, node) in [
        (&alice, "notes/real", 1, followers[1]),
        (&dave, "facts/squat", 0, leader),
    ] {
        let again = api
            .post(node, "/v1/write", Some(token), write(key, value))
            .await;
        again.expect(200, None, &format!("the retry of the write of {key}"));
        assert_eq!(again.body["replayed"], json!(true), "{}", again.body);
    }
    api.post(leader, "/v1/write", Some(&alice), write("notes/real", 2))
        .await
        .expect(
            422,
            Some("request_id_reused"),
            "alice's id for another write",
        );
    let read = api.read(leader, Some(&alice), "notes/real").await;
    read.expect(200, None, "alice reads her key");
    assert_eq!(read.body["value"], json!(1), "{}", read.body);
}

/// A node that knows no leader answers 503 `no_leader` in one shape whichever path finds
/// it (a relay, the catch-up of a request a node answers itself, such as whoami or
/// compaction): the message says so, and `leader_id` is left out, not `null` (SPEC §5:
/// "`leader_id` when known").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t85_20_without_a_leader_no_leader_has_one_shape() {
    let (mut cluster, leader, followers) = auth_cluster().await;
    let alone = followers[0];
    for id in cluster.ids().into_iter().filter(|id| *id != alone) {
        cluster.kill9(id);
    }
    let deadline = tokio::time::Instant::now() + CATCH_UP_TIMEOUT;
    while cluster
        .status(alone)
        .await
        .expect("status")
        .leader_id
        .is_some()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {alone} still names a leader ({leader} was killed)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let api = Api::new(&cluster);
    let token = cluster.admin_token();
    for (method, path, body) in [
        (
            Method::POST,
            "/v1/write",
            Some(json!({"key": "nl/k", "value": 1})),
        ),
        (Method::POST, "/v1/read", Some(json!({"key": "nl/k"}))),
        (Method::GET, "/v1/auth/whoami", None),
        (Method::POST, "/cluster/compact", None),
    ] {
        let answer = api.call(method, alone, path, Some(&token), body).await;
        answer.expect(503, Some("no_leader"), path);
        let error = answer.body["error"].as_object().expect("an error body");
        assert_eq!(
            error["message"],
            json!("no leader is known"),
            "{path}: {}",
            answer.body
        );
        assert!(!error.contains_key("leader_id"), "{path}: {}", answer.body);
    }
}
