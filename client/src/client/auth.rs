//! Identity and access (SPEC §8): turning auth on, principals, their tokens and grants,
//! and `whoami`. Every call goes to the leader (principal changes are Raft entries). The
//! changes are not deduplicated, so, like membership changes, they are retried only after
//! failures that cannot have reached the node; the reads are retried like any read.
//!
//! The answers that carry a token ([`AuthEnabled`], [`CreatedPrincipal`],
//! [`RotatedToken`]) are the only time the token is shown; their `Debug` redacts it.

use reqwest::Method;
use serde::de::DeserializeOwned;

use super::retry::Mode;
use super::routing::Route;
use super::transport::{encode, read_json, Call};
use super::{Client, Result};
use crate::api::{
    AclChanged, AuthEnabled, CreatePrincipalRequest, CreatedPrincipal, EnableAuthRequest, Grant,
    PrincipalList, RotatedToken, SetGrantsRequest, WhoAmI,
};

impl Client {
    /// `POST /v1/auth/enable`: turns auth on for a cluster made without it; `admin` is the
    /// first principal, and the answer carries its token, shown this once.
    pub async fn enable_auth(&self, admin: &str) -> Result<AuthEnabled> {
        let body = encode(&EnableAuthRequest {
            admin: admin.to_string(),
        })?;
        self.auth_call(Method::POST, &["enable"], Some(body)).await
    }

    /// `POST /v1/auth/principals`: a new principal with `grants`; the answer carries its
    /// token, shown this once.
    pub async fn create_principal(
        &self,
        name: &str,
        grants: Vec<Grant>,
    ) -> Result<CreatedPrincipal> {
        let body = encode(&CreatePrincipalRequest {
            name: name.to_string(),
            grants,
        })?;
        self.auth_call(Method::POST, &["principals"], Some(body))
            .await
    }

    /// `POST /v1/auth/principals/{name}/rotate`: a new token for `name`; the old one stops
    /// working at once.
    pub async fn rotate_token(&self, name: &str) -> Result<RotatedToken> {
        self.auth_call(Method::POST, &["principals", name, "rotate"], None)
            .await
    }

    /// `DELETE /v1/auth/principals/{name}`: the principal and its token are gone.
    pub async fn delete_principal(&self, name: &str) -> Result<AclChanged> {
        self.auth_call(Method::DELETE, &["principals", name], None)
            .await
    }

    /// `PUT /v1/auth/principals/{name}/grants`: replaces every grant of `name`.
    pub async fn set_grants(&self, name: &str, grants: Vec<Grant>) -> Result<AclChanged> {
        let body = encode(&SetGrantsRequest { grants })?;
        self.auth_call(Method::PUT, &["principals", name, "grants"], Some(body))
            .await
    }

    /// `GET /v1/auth/principals`: every principal and its grants (never a token).
    pub async fn principals(&self) -> Result<PrincipalList> {
        self.auth_call(Method::GET, &["principals"], None).await
    }

    /// `GET /v1/auth/whoami`: the principal of this client's token and its grants.
    pub async fn whoami(&self) -> Result<WhoAmI> {
        self.auth_call(Method::GET, &["whoami"], None).await
    }

    async fn auth_call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &[&str],
        body: Option<Vec<u8>>,
    ) -> Result<T> {
        let path: Vec<&str> = ["v1", "auth"]
            .into_iter()
            .chain(path.iter().copied())
            .collect();
        let mode = match method {
            Method::GET => Mode::Read,
            _ => Mode::Admin,
        };
        let call = Call {
            method,
            route: Route::Leader,
            path: &path,
            query: Vec::new(),
            body,
            mode,
            timeout: Some(self.timeouts.request),
        };
        self.call(&call, read_json).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::Permission;
    use crate::client::test_support::*;
    use crate::error::ClientError;
    use crate::fake_node::{FakeNode, Reply};

    const TOKEN: &str = "cairn_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA";

    #[tokio::test]
    async fn each_auth_call_has_its_method_path_and_body() {
        let node = FakeNode::start(|seen, _| match (seen.method.as_str(), seen.path.as_str()) {
            ("POST", "/v1/auth/enable") => {
                ok(json!({"admin": "root", "token": TOKEN, "acl_revision": 1}))
            }
            ("POST", "/v1/auth/principals") => ok(json!({"name": "agent-7", "token": TOKEN})),
            ("POST", "/v1/auth/principals/agent%2F7/rotate") => ok(json!({"token": TOKEN})),
            ("DELETE", "/v1/auth/principals/agent-7")
            | ("PUT", "/v1/auth/principals/agent-7/grants") => {
                ok(json!({"name": "agent-7", "acl_revision": 3}))
            }
            ("GET", "/v1/auth/principals") => ok(json!({"principals": [
                {"name": "root", "grants": [{"prefix": "", "permissions": ["admin"]}],
                 "created_at": 1, "created_by": "root"}], "acl_revision": 2})),
            ("GET", "/v1/auth/whoami") => {
                ok(json!({"name": "root", "grants": [], "acl_revision": 2}))
            }
            _ => Reply::Json(
                404,
                r#"{"error":{"code":"not_found","message":"?"}}"#.into(),
            ),
        })
        .await;
        let client = pinned(&node);
        let grants = vec![Grant::new("facts/", [Permission::Read, Permission::Write])];
        assert_eq!(client.enable_auth("root").await.unwrap().token, TOKEN);
        let created = client
            .create_principal("agent-7", grants.clone())
            .await
            .unwrap();
        assert_eq!(created.token, TOKEN);
        assert_eq!(client.rotate_token("agent/7").await.unwrap().token, TOKEN);
        assert_eq!(
            client
                .delete_principal("agent-7")
                .await
                .unwrap()
                .acl_revision,
            3
        );
        client.set_grants("agent-7", grants).await.unwrap();
        assert_eq!(
            client.principals().await.unwrap().principals[0].name,
            "root"
        );
        assert_eq!(client.whoami().await.unwrap().name, "root");
        let seen = node.seen();
        assert_eq!(body(&seen[0]), json!({"admin": "root"}));
        assert_eq!(
            body(&seen[1]),
            json!({"name": "agent-7",
                   "grants": [{"prefix": "facts/", "permissions": ["read", "write"]}]})
        );
        assert_eq!(
            body(&seen[4]),
            json!({"grants": [{"prefix": "facts/", "permissions": ["read", "write"]}]})
        );
    }

    #[tokio::test]
    async fn the_token_goes_with_every_attempt_discovery_and_watch() {
        let node = FakeNode::start(|seen, i| match seen.path.as_str() {
            // The first write (after one status) is lost: its retry carries the token too.
            "/v1/write" if i == 1 => Reply::Drop,
            "/v1/write" => ok(mutation_result(1, 5)),
            "/cluster/status" => ok(json!({"node_id": 1, "role": "leader", "leader_id": 1,
                "term": 1, "last_log_index": 5, "commit_index": 5, "applied_index": 5,
                "ms_since_leader_contact": 0, "voters": [1], "learners": [], "nodes": [],
                "snapshot_index": 0, "log_purged_through": 0})),
            _ => Reply::Events(Vec::new()),
        })
        .await;
        let client = fast(vec![node.addr.clone()]).token(TOKEN).build().unwrap();
        assert!(client.has_token());
        client.write(write_request()).await.unwrap();
        client
            .pinned(&node.addr)
            .unwrap()
            .write(write_request())
            .await
            .unwrap();
        drop(client.watch(None, Some(1)).await.unwrap());
        let seen = node.seen();
        let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
        assert!(paths.contains(&"/cluster/status"), "{paths:?}");
        assert!(
            paths.iter().filter(|p| **p == "/v1/write").count() >= 3,
            "{paths:?}"
        );
        assert!(
            paths.iter().any(|p| p.starts_with("/v1/watch")),
            "{paths:?}"
        );
        for s in &seen {
            assert_eq!(
                s.authorization.as_deref(),
                Some(format!("Bearer {TOKEN}").as_str()),
                "{} {}",
                s.method,
                s.path
            );
        }
        let shown = format!("{client:?}");
        assert!(!shown.contains(TOKEN), "{shown}");
    }

    #[tokio::test]
    async fn no_token_sends_no_header_and_denials_are_exit_code_7() {
        let node = FakeNode::start(|_, _| {
            Reply::Json(
                403,
                r#"{"error":{"code":"permission_denied","message":"no grant","permission":"write","key":"k"}}"#
                    .into(),
            )
        })
        .await;
        let err = pinned(&node).write(write_request()).await.unwrap_err();
        assert!(
            matches!(
                &err,
                ClientError::PermissionDenied { permission: Some(Permission::Write), key: Some(k), .. }
                    if k == "k"
            ),
            "{err:?}"
        );
        assert_eq!(err.exit_code(), crate::error::EXIT_DENIED);
        assert_eq!(node.seen().len(), 1, "a denial is definite: not retried");
        assert_eq!(node.seen()[0].authorization, None);
    }

    #[tokio::test]
    async fn a_lost_principal_change_is_not_sent_twice() {
        let node = FakeNode::start(|_, _| Reply::Drop).await;
        let err = pinned(&node).rotate_token("a").await.unwrap_err();
        // It may have been applied, and carried no request_id: the state tells.
        assert!(
            matches!(
                &err,
                ClientError::OutcomeUnknown {
                    request_id: None,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(node.seen().len(), 1);
    }

    #[test]
    fn bad_tokens_and_https_without_a_ca_fail_the_build() {
        let err = fast(vec!["127.0.0.1:1".into()])
            .token(format!("{TOKEN} trailing"))
            .build()
            .unwrap_err();
        assert!(!err.to_string().contains(TOKEN), "{err}");
        let err = fast(vec!["https://127.0.0.1:1".into()])
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("CA"), "{err}");
        let err = fast(vec!["127.0.0.1:1".into()])
            .ca_cert_pem(b"not pem")
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("CA certificate"), "{err}");
        let err = fast(vec!["127.0.0.1:1".into()])
            .client_identity_pem(
                b"x",
                b"-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n",
            )
            .build()
            .unwrap_err();
        assert!(!err.to_string().contains("c2VjcmV0"), "{err}");
    }
}
