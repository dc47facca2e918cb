//! `GET /openapi.json` against real nodes: every node serves the same document without a
//! token; the document is sound (OpenAPI 3.1, every `$ref` resolves, every operation has
//! a unique id and its responses, every error status lists only codes of that status);
//! it lists exactly the routes of SPEC §5, §6 and §8; and the router serves every
//! documented method of a path and refuses every other one with 405.
//!
//! `scripts/fuzz-api` checks what the document says about bodies and answers by fuzzing
//! a live cluster with schemathesis.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use cairn_api::ErrorCode;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use support::{Cluster, LEADER_TIMEOUT};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Every route of the client port: SPEC §5 (client), §8 (auth), §6 (operators), and the
/// document itself.
const SPEC_ROUTES: [(&str, &str); 28] = [
    ("POST", "/v1/write"),
    ("POST", "/v1/forget"),
    ("POST", "/v1/revoke"),
    ("POST", "/v1/reinstate"),
    ("POST", "/v1/flag-stale"),
    ("POST", "/v1/supersede"),
    ("POST", "/v1/batch"),
    ("POST", "/v1/read"),
    ("POST", "/v1/probe"),
    ("POST", "/v1/history"),
    ("GET", "/v1/tombstones/{id}"),
    ("POST", "/v1/list"),
    ("POST", "/v1/recall"),
    ("GET", "/v1/watch"),
    ("POST", "/v1/auth/enable"),
    ("POST", "/v1/auth/principals"),
    ("GET", "/v1/auth/principals"),
    ("DELETE", "/v1/auth/principals/{name}"),
    ("POST", "/v1/auth/principals/{name}/rotate"),
    ("PUT", "/v1/auth/principals/{name}/grants"),
    ("GET", "/v1/auth/whoami"),
    ("POST", "/cluster/init"),
    ("POST", "/cluster/join"),
    ("POST", "/cluster/remove"),
    ("GET", "/cluster/status"),
    ("POST", "/cluster/compact"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
];

/// Routes that never need a token: health and metrics for supervisors, the document.
const PUBLIC: [&str; 3] = ["/healthz", "/metrics", "/openapi.json"];
/// The two made for the time before any principal exists: the token is optional (the
/// admin's once auth is on).
const BOOTSTRAP: [&str; 2] = ["/v1/auth/enable", "/cluster/init"];

/// The request headers an operation reads besides `Authorization` (the security scheme):
/// the SSE resume header of the watch (SPEC §5).
const HEADER_PARAMS: [(&str, &str); 1] = [("/v1/watch", "Last-Event-ID")];

const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
];

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(TIMEOUT)
        .build()
        .expect("http client")
}

/// The document as node `id` serves it, with no token, and its bytes.
async fn fetch(cluster: &Cluster, id: u64) -> (Value, Vec<u8>) {
    let url = format!("{}/openapi.json", cluster.endpoint(id));
    let answer = http().get(&url).send().await.expect("GET /openapi.json");
    assert_eq!(answer.status(), StatusCode::OK, "{url}");
    let content_type = answer.headers()[reqwest::header::CONTENT_TYPE].clone();
    assert_eq!(content_type, "application/json", "{url}");
    let bytes = answer.bytes().await.expect("the document").to_vec();
    let document = serde_json::from_slice(&bytes).expect("the document is JSON");
    (document, bytes)
}

/// `(METHOD, path)` of every operation in the document, and the operation.
fn operations(document: &Value) -> Vec<(String, String, &Value)> {
    let paths = document["paths"].as_object().expect("paths");
    let mut all = Vec::new();
    for (path, methods) in paths {
        for (method, operation) in methods.as_object().expect("a path item") {
            all.push((method.to_ascii_uppercase(), path.clone(), operation));
        }
    }
    all
}

/// Every `$ref` in `value`, with where it was found.
fn refs<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::Object(members) => {
            for (name, member) in members {
                match (name.as_str(), member) {
                    ("$ref", Value::String(target)) => out.push((at.clone(), target)),
                    _ => refs(member, format!("{at}/{name}"), out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                refs(item, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// The value a local `$ref` (`#/a/b`, JSON pointer) names.
fn resolve<'a>(document: &'a Value, target: &str) -> Option<&'a Value> {
    document.pointer(target.strip_prefix('#')?)
}

/// The error codes an error response's schema allows (its narrowed `code` enum).
fn codes_of(response: &Value) -> Vec<ErrorCode> {
    let schema = &response["content"]["application/json"]["schema"];
    let narrowed = &schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"];
    serde_json::from_value(narrowed.clone()).expect("an error response names its codes")
}

fn check_operation(document: &Value, method: &str, path: &str, operation: &Value) {
    let what = format!("{method} {path}");
    let responses = operation["responses"].as_object().expect("responses");
    assert!(
        responses.keys().any(|s| s.starts_with('2')),
        "{what}: no success response"
    );
    for (status, response) in responses {
        let status: u16 = status.parse().expect("a numeric status");
        assert!(
            response["description"].is_string(),
            "{what} {status}: no description"
        );
        let is_error_body = response["content"]["application/json"]["schema"]["allOf"][0]["$ref"]
            == "#/components/schemas/ErrorBody";
        if status >= 400 && is_error_body {
            let codes = codes_of(response);
            assert!(!codes.is_empty(), "{what} {status}: no codes");
            for code in codes {
                assert_eq!(code.http_status(), status, "{what}: {code} under {status}");
            }
        }
    }
    for name in path_params(path) {
        let declared = operation["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["in"] == "path" && p["name"] == name && p["required"] == true);
        assert!(declared, "{what}: path parameter {name} not declared");
    }
    let headers: Vec<&str> = operation["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "header")
        .map(|p| p["name"].as_str().expect("a header's name"))
        .collect();
    let expected: Vec<&str> = HEADER_PARAMS
        .iter()
        .filter(|(at, _)| *at == path)
        .map(|(_, name)| *name)
        .collect();
    assert_eq!(headers, expected, "{what}: header parameters");
    let public = operation["security"] == serde_json::json!([]);
    assert_eq!(public, PUBLIC.contains(&path), "{what}: security");
    let optional = operation["security"] == serde_json::json!([{}, {"bearer": []}]);
    assert_eq!(
        optional,
        BOOTSTRAP.contains(&path),
        "{what}: optional security"
    );
    if !public {
        assert_eq!(
            document["security"],
            serde_json::json!([{"bearer": []}]),
            "the default security"
        );
        assert!(
            responses.contains_key("401"),
            "{what}: needs a token, so it can answer 401"
        );
    }
}

fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_serves_one_sound_document_of_exactly_the_spec_routes() {
    let cluster = Cluster::builder(3).auth("admin").start().await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let (document, bytes) = fetch(&cluster, 1).await;
    for id in [2, 3] {
        assert_eq!(fetch(&cluster, id).await.1, bytes, "node {id}'s document");
    }
    // A token is needed elsewhere: the document is public, not the whole port.
    let status = http()
        .get(format!("{}/cluster/status", cluster.endpoint(1)))
        .send()
        .await
        .expect("GET /cluster/status");
    assert_eq!(status.status(), StatusCode::UNAUTHORIZED);

    assert!(document["openapi"].as_str().unwrap().starts_with("3.1."));
    assert_eq!(
        document["jsonSchemaDialect"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(document["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        document["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    let mut found = Vec::new();
    refs(&document, "#".into(), &mut found);
    assert!(
        found.len() > 50,
        "schemas are shared by $ref: {}",
        found.len()
    );
    for (at, target) in &found {
        assert!(
            target.starts_with("#/components/schemas/") && resolve(&document, target).is_some(),
            "{at}: $ref {target} does not resolve"
        );
    }

    let operations = operations(&document);
    let mut ids = BTreeSet::new();
    for (method, path, operation) in &operations {
        let id = operation["operationId"].as_str().expect("an operationId");
        assert!(ids.insert(id), "operationId {id} repeats");
        check_operation(&document, method, path, operation);
    }
    let documented: BTreeSet<(String, String)> = operations
        .iter()
        .map(|(m, p, _)| (m.clone(), p.clone()))
        .collect();
    let mut expected: BTreeSet<(String, String)> = SPEC_ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    expected.insert(("GET".into(), "/openapi.json".into()));
    assert_eq!(documented, expected, "documented routes vs the spec's");

    let watch = &document["paths"]["/v1/watch"]["get"]["responses"];
    assert!(
        watch["200"]["content"]["text/event-stream"].is_object(),
        "{watch}"
    );
    // One stream past `limits.watchers_max` is 503 overloaded (SPEC §5); a node that
    // cannot reach a leader to check the caller's grants answers no_leader or stale_read,
    // as whoami and compact do.
    assert_eq!(
        codes_of(&watch["503"]),
        vec![
            ErrorCode::NoLeader,
            ErrorCode::StaleRead,
            ErrorCode::Overloaded
        ],
        "{watch}"
    );
    for (path, method) in [("/v1/auth/whoami", "get"), ("/cluster/compact", "post")] {
        let answers = &document["paths"][path][method]["responses"];
        assert_eq!(
            codes_of(&answers["503"]),
            vec![ErrorCode::NoLeader, ErrorCode::StaleRead],
            "{path}: {answers}"
        );
    }
    let error_code = resolve(&document, "#/components/schemas/ErrorCode").expect("ErrorCode");
    assert!(error_code.to_string().contains("outcome_unknown"));
}

/// A path as sent: parameters filled with values the node refuses (400) before looking
/// anything up, so no answer is a "not found" of a missing principal or tombstone.
fn probe_path(path: &str) -> String {
    path.replace("{id}", "not-hex").replace("{name}", "no!name")
}

/// Sends `method path` as the admin, with a body that is not JSON. Answers the status and
/// the error code, if the answer is an error body.
async fn probe(cluster: &Cluster, method: &Method, path: &str) -> (StatusCode, Option<String>) {
    let url = format!("{}{}", cluster.endpoint(1), probe_path(path));
    let answer = http()
        .request(method.clone(), &url)
        .bearer_auth(cluster.admin_token())
        .body("{")
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = answer.status();
    if path == "/v1/watch" && status == StatusCode::OK {
        return (status, None); // a live stream: never read to its end
    }
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    let code = body["error"]["code"].as_str().map(str::to_string);
    (status, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_router_serves_every_documented_method_and_refuses_every_other() {
    let cluster = Cluster::builder(3).auth("admin").start().await;
    cluster.wait_leader(LEADER_TIMEOUT).await;
    let (document, _) = fetch(&cluster, 1).await;
    let documented: BTreeSet<(String, String)> = operations(&document)
        .into_iter()
        .map(|(m, p, _)| (m, p))
        .collect();
    let paths: BTreeSet<&String> = documented.iter().map(|(_, p)| p).collect();
    for path in paths {
        for method in &METHODS {
            let (status, code) = probe(&cluster, method, path).await;
            if documented.contains(&(method.to_string(), path.clone())) {
                assert!(
                    status != StatusCode::NOT_FOUND && status != StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path} is documented but answers {status} {code:?}"
                );
            } else {
                assert_eq!(
                    (status, code.as_deref()),
                    (StatusCode::METHOD_NOT_ALLOWED, Some("invalid_request")),
                    "{method} {path} is not documented"
                );
            }
        }
    }
    // The control: a path the document does not list is not served.
    let (status, code) = probe(&cluster, &Method::POST, "/v1/erase").await;
    assert_eq!(
        (status, code.as_deref()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
}
