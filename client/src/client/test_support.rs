//! Helpers of the client's unit tests: a fast-retrying client, a client pinned to a
//! [`FakeNode`], canned answers.

use std::time::Duration;

use serde_json::{json, Value};

use super::{Client, ClientBuilder};
use crate::api::WriteRequest;
use crate::fake_node::{FakeNode, Reply, Seen};

pub(super) const RETRIES: u32 = 3;

pub(super) fn fast(endpoints: Vec<String>) -> ClientBuilder {
    Client::builder(endpoints)
        .retries_max(RETRIES)
        .backoff_ms(1, 5)
        .request_timeout(Duration::from_secs(5))
}

pub(super) fn pinned(node: &FakeNode) -> Client {
    let client = fast(vec![node.addr.clone()]).build().unwrap();
    client.pinned(&node.addr).unwrap()
}

pub(super) fn ok(value: Value) -> Reply {
    Reply::Json(200, value.to_string())
}

/// A node's 503 `no_leader`.
pub(super) fn no_leader() -> Reply {
    Reply::Json(
        503,
        r#"{"error":{"code":"no_leader","message":"no leader is known"}}"#.into(),
    )
}

pub(super) fn mutation_result(version: u64, revision: u64) -> Value {
    json!({"key": "k", "state": "active", "version": version, "generation": 1,
           "forget_epoch": 0, "revision": revision, "replayed": false})
}

pub(super) fn read_answer(version: u64, applied: u64) -> Value {
    json!({"key": "k", "state": "active", "version": version, "generation": 1,
           "forget_epoch": 0, "revision": version, "create_revision": 1, "value": "v",
           "meta": {"actor": "a", "source": null, "anchors": [], "tags": [], "updated_at": 1},
           "rendered": "[k] v",
           "served": {"node_id": 1, "role": "follower", "consistency": "any",
                      "applied_index": applied, "leader_commit_index": applied,
                      "ms_since_leader_contact": 1}})
}

pub(super) fn body(seen: &Seen) -> Value {
    serde_json::from_str(&seen.body).unwrap()
}

pub(super) fn write_request() -> WriteRequest {
    WriteRequest::new("k", json!("v"), "agent")
}
