//! Transport security on real nodes (SPEC §8): an HTTPS cluster with mutual TLS between
//! peers, client certificates, rogue callers on the peer port (no certificate, another
//! CA, a valid certificate of a non-member, a wrong or missing peer secret) that must not
//! move term, vote or log, and the refusal to listen beyond loopback without TLS.
//!
//! The TLS nodes are started here rather than by `support::Cluster`, whose status polling
//! speaks plain HTTP; the peer-secret cluster uses `support::Cluster` with a config file.

mod support;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cairn_api::{ClusterStatus, NodeSpec};
use cairn_node::consensus::{NodeId, TypeConfig, Vote};
use cairn_node::raft_rpc::proof::{PEER_ID_HEADER, PEER_SECRET_HEADER, PEER_TARGET_HEADER};
use cairn_node::raft_rpc::vouch::UNVOUCHED_COOLDOWN;
use cairn_node::raft_rpc::{APPEND_PATH, CONTENT_TYPE, READ_INDEX_PATH, VOTE_PATH};
use cairn_node::store::codec;
use cairn_node::tls::certs::{self, Generated};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::LogId;
use rustls_pki_types::pem::PemObject;
use serde_json::{json, Value};
use support::{free_addr_pair, node_command, wait_for, wait_until, Cluster, LEADER_TIMEOUT};

const START_TIMEOUT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How far above the cluster's term the rogue callers bid.
const ROGUE_TERM_JUMP: u64 = 1_000;

// -- certificates and clients -------------------------------------------------------------

fn generate(dir: &Path, nodes: &[u64]) -> Generated {
    certs::generate(dir, nodes, &BTreeMap::new()).expect("generating certificates")
}

/// A reqwest client trusting `ca`, presenting `identity` (cert and key files) if given.
fn https_client(ca: &Path, identity: Option<(&Path, &Path)>) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&fs::read(ca).unwrap()).unwrap();
    let mut builder = reqwest::Client::builder()
        .add_root_certificate(ca)
        .timeout(REQUEST_TIMEOUT)
        .no_proxy();
    if let Some((cert, key)) = identity {
        let mut pem = fs::read(cert).unwrap();
        pem.extend(fs::read(key).unwrap());
        builder = builder.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    builder.build().unwrap()
}

/// A rustls client for the peer port: trusts `ca`, presents `identity` if given.
fn peer_tls_client(ca: &Path, identity: Option<(&Path, &Path)>) -> reqwest::Client {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = rustls_pki_types::CertificateDer::pem_file_iter(cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = rustls_pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .build()
        .unwrap()
}

// -- a TLS cluster ------------------------------------------------------------------------

/// Real `cairn-node` processes serving HTTPS on the client port and mutual TLS between
/// peers, all certificates from one CA in `certs`.
struct TlsCluster {
    dir: tempfile::TempDir,
    certs: Generated,
    specs: BTreeMap<u64, NodeSpec>,
    children: BTreeMap<u64, Child>,
    client: reqwest::Client,
    /// Added to every node's command line.
    extra: Vec<String>,
}

impl TlsCluster {
    /// `size` nodes, initialized; with `client_certs`, the client port requires client
    /// certificates from the cluster CA.
    async fn start(size: u64, client_certs: bool) -> TlsCluster {
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<u64> = (1..=size).collect();
        // Spare certificates, for nodes that join later.
        let spares: Vec<u64> = (size + 1..=size + 3).collect();
        let certs = generate(&dir.path().join("certs"), &[ids.clone(), spares].concat());
        let client = https_client(
            &certs.ca_cert,
            Some((&certs.client_cert, &certs.client_key)),
        );
        let mut cluster = TlsCluster {
            dir,
            certs,
            specs: BTreeMap::new(),
            children: BTreeMap::new(),
            client,
            extra: Vec::new(),
        };
        if client_certs {
            let ca = cluster.certs.ca_cert.display().to_string();
            cluster.extra = vec!["--tls-client-ca".to_string(), ca];
        }
        for &id in &ids {
            cluster.spawn(id);
        }
        for id in ids {
            cluster.wait_https(id).await;
        }
        let nodes: Vec<&NodeSpec> = cluster.specs.values().collect();
        let answer = cluster
            .client
            .post(cluster.url(1, "/cluster/init"))
            .json(&json!({ "nodes": nodes }))
            .timeout(START_TIMEOUT)
            .send()
            .await
            .expect("POST /cluster/init");
        assert!(answer.status().is_success(), "init: {}", answer.status());
        cluster.wait_settled().await;
        cluster
    }

    async fn wait_https(&self, id: u64) {
        let url = self.url(id, "/healthz");
        wait_until(
            START_TIMEOUT,
            &format!("node {id} to serve HTTPS"),
            async || {
                self.client
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            },
        )
        .await;
    }

    fn spawn(&mut self, id: u64) {
        let identity = self.certs.nodes[&id].clone();
        let ca = self.certs.ca_cert.clone();
        self.spawn_with(id, &identity, &ca);
    }

    /// Starts node `id` presenting `identity` (certificate and key) on both ports and
    /// trusting `peer_ca` on the peer port.
    fn spawn_with(&mut self, id: u64, identity: &(PathBuf, PathBuf), peer_ca: &Path) {
        let (client_addr, peer_addr) = free_addr_pair();
        let node_dir = self.dir.path().join(format!("node-{id}"));
        fs::create_dir_all(&node_dir).unwrap();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(node_dir.join("node.log"))
            .unwrap();
        let (cert, key) = identity;
        let mut cmd = node_command(&node_dir);
        cmd.args(["--id", &id.to_string(), "--data-dir", "data"])
            .args(["--client-addr", &client_addr, "--peer-addr", &peer_addr])
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .arg("--tls-ca")
            .arg(&self.certs.ca_cert)
            .arg("--peer-tls-cert")
            .arg(cert)
            .arg("--peer-tls-key")
            .arg(key)
            .arg("--peer-tls-ca")
            .arg(peer_ca)
            .args(&self.extra)
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        self.children
            .insert(id, cmd.spawn().expect("spawning cairn-node"));
        self.specs.insert(
            id,
            NodeSpec {
                id,
                client_addr,
                peer_addr,
            },
        );
    }

    /// `POST PATH` with a JSON body to node `id`, answered within a join's catch-up time;
    /// panics unless it succeeds.
    async fn post_ok(&self, id: u64, path: &str, body: Value) {
        let answer = self
            .client
            .post(self.url(id, path))
            .json(&body)
            .timeout(Duration::from_secs(90))
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = answer.status();
        let text = answer.text().await.unwrap_or_default();
        assert!(status.is_success(), "POST {path}: {status} {text}");
    }

    /// Starts node `id` and joins it through node `via`.
    async fn add(&mut self, id: u64, via: u64) {
        self.spawn(id);
        self.wait_https(id).await;
        let spec = serde_json::to_value(&self.specs[&id]).unwrap();
        self.post_ok(via, "/cluster/join", spec).await;
    }

    /// The id of the leader once one of `ids` leads and another of them follows it.
    async fn wait_leader_among(&self, ids: &[u64]) -> u64 {
        wait_for(
            LEADER_TIMEOUT,
            &format!("a leader among {ids:?}"),
            async || {
                let mut statuses = Vec::new();
                for &id in ids {
                    statuses.extend(self.status(id).await);
                }
                let leader = statuses.iter().find(|s| s.role == "leader")?.node_id;
                let followed = statuses
                    .iter()
                    .any(|s| s.node_id != leader && s.leader_id == Some(leader));
                followed.then_some(leader)
            },
        )
        .await
    }

    fn url(&self, id: u64, path: &str) -> String {
        format!("https://{}{path}", self.specs[&id].client_addr)
    }

    fn peer_url(&self, id: u64, path: &str) -> String {
        format!("https://{}{path}", self.specs[&id].peer_addr)
    }

    /// One counter or gauge of node `id`'s `GET /metrics`.
    async fn metric(&self, id: u64, name: &str) -> u64 {
        let text = self
            .client
            .get(self.url(id, "/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("node {id}: no {name} in /metrics:\n{text}"))
    }

    fn log(&self, id: u64) -> String {
        fs::read_to_string(self.dir.path().join(format!("node-{id}/node.log"))).unwrap_or_default()
    }

    async fn status(&self, id: u64) -> Option<ClusterStatus> {
        let answer = self
            .client
            .get(self.url(id, "/cluster/status"))
            .send()
            .await
            .ok()?;
        answer.json().await.ok()
    }

    async fn statuses(&self) -> BTreeMap<u64, ClusterStatus> {
        let mut out = BTreeMap::new();
        for &id in self.specs.keys() {
            if let Some(s) = self.status(id).await {
                out.insert(id, s);
            }
        }
        out
    }

    /// Every node follows one leader at one term and has applied its commit index.
    async fn wait_settled(&self) -> u64 {
        wait_for(LEADER_TIMEOUT, "the TLS cluster to settle", async || {
            let statuses = self.statuses().await;
            let leader = statuses.values().find(|s| s.role == "leader")?;
            let settled = statuses.len() == self.specs.len()
                && statuses.values().all(|s| {
                    s.leader_id == Some(leader.node_id)
                        && s.term == leader.term
                        && s.applied_index >= leader.commit_index
                });
            settled.then_some(leader.node_id)
        })
        .await
    }

    fn print_logs(&self) {
        for &id in self.specs.keys() {
            let log = self.log(id);
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- node {id} log tail ---");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_logs();
        }
        for child in self.children.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child this test spawned and has not waited for.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(rc, 0, "kill({}, {signal})", child.id());
}

// -- rogue peer requests --------------------------------------------------------------------

/// Term, vote-holder, log and leadership of every node, as `/cluster/status` shows them.
fn raft_state(
    statuses: &BTreeMap<u64, ClusterStatus>,
) -> Vec<(u64, u64, Option<u64>, u64, String)> {
    statuses
        .values()
        .map(|s| {
            (
                s.node_id,
                s.term,
                s.leader_id,
                s.last_log_index,
                s.role.clone(),
            )
        })
        .collect()
}

/// A vote request and an empty append at a much higher term, from node `from`: either
/// would depose the leader (the append at once; the vote once the lease ran out).
fn rogue_bodies(term: u64, from: NodeId, last_log_index: u64) -> [(&'static str, Vec<u8>); 2] {
    let term = term + ROGUE_TERM_JUMP;
    let last = LogId::new(
        openraft::CommittedLeaderId::new(term, from),
        last_log_index + 1_000,
    );
    let vote = VoteRequest::<NodeId>::new(Vote::new(term, from), Some(last));
    let append = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(term, from),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    };
    [
        (VOTE_PATH, codec::encode(&vote)),
        (APPEND_PATH, codec::encode(&append)),
    ]
}

/// Sends each `(path, body)` to `url_of(path)` with `headers`; returns each answer's status
/// (`None`: the connection or handshake failed).
/// The error code the peer gate refuses with, for a refusal's status.
fn refusal_code(status: u16) -> Option<&'static str> {
    match status {
        401 => Some("unauthenticated"),
        403 => Some("permission_denied"),
        _ => None,
    }
}

async fn send_rogue(
    client: &reqwest::Client,
    url_of: impl Fn(&str) -> String,
    headers: &[(&str, String)],
    bodies: impl IntoIterator<Item = (&'static str, Vec<u8>)>,
) -> Vec<Option<u16>> {
    let mut out = Vec::new();
    for (path, body) in bodies {
        let mut request = client
            .post(url_of(path))
            .header("content-type", CONTENT_TYPE)
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let Ok(answer) = request.send().await else {
            out.push(None);
            continue;
        };
        let status = answer.status().as_u16();
        if let Some(code) = refusal_code(status) {
            // A refusal is the typed error body of SPEC §5, naming no secret.
            let body: Value = answer.json().await.expect("a refusal's body is JSON");
            assert_eq!(body["error"]["code"], code, "{path}: {body}");
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(!message.is_empty(), "{path}: {body}");
            for (_, secret) in headers.iter().filter(|(n, _)| *n == PEER_SECRET_HEADER) {
                assert!(
                    !message.contains(secret.as_str()),
                    "{path}: echoes the secret: {body}"
                );
            }
        }
        out.push(Some(status));
    }
    out
}

/// The Rust client's error for a configuration mistake names it: plain HTTP to this HTTPS
/// node is answered in TLS, not HTTP, so nothing can have been applied (a write was
/// `outcome_unknown` before, exit 6 in the CLI); another cluster's CA does not verify it.
async fn the_client_names_a_scheme_or_ca_mistake(cluster: &TlsCluster, id: u64) {
    let addr = &cluster.specs[&id].client_addr;
    let write = |client: cairn_client::Client| async move {
        let request = cairn_api::WriteRequest::new("tls/mistake", json!(1), "t80");
        client.write(request).await.expect_err("refused")
    };
    let plain = cairn_client::Client::builder(vec![format!("http://{addr}")])
        .retries_max(0)
        .build()
        .expect("client");
    let err = write(plain).await;
    let cairn_client::ClientError::Transport { message, sent, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(!sent, "{err:?}");
    assert!(message.contains("did not answer in HTTP"), "{message}");
    let other_ca = generate(&cluster.dir.path().join("other-ca"), &[id]).ca_cert;
    let stranger = cairn_client::Client::builder(vec![format!("https://{addr}")])
        .ca_cert_file(&other_ca)
        .retries_max(0)
        .build()
        .expect("client");
    let err = write(stranger).await.to_string();
    assert!(
        err.contains("does not verify against the CA given"),
        "{err}"
    );
}

// -- tests ------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_cluster_serves_https_and_relays_over_it() {
    // Client certificates required: a follower's relay must present its own.
    let cluster = TlsCluster::start(3, true).await;
    let leader = cluster.wait_settled().await;
    let follower = *cluster.specs.keys().find(|id| **id != leader).unwrap();
    // A write sent to a follower is relayed to the leader over HTTPS.
    let written: Value = cluster
        .client
        .post(cluster.url(follower, "/v1/write"))
        .json(&json!({"key": "tls/k", "value": "over https", "actor": "t80"}))
        .send()
        .await
        .expect("write through a follower")
        .json()
        .await
        .unwrap();
    assert_eq!(written["version"], 1, "{written}");
    for &id in cluster.specs.keys() {
        let read: Value = cluster
            .client
            .post(cluster.url(id, "/v1/read"))
            .json(&json!({"key": "tls/k", "consistency": "linearizable"}))
            .send()
            .await
            .expect("linearizable read")
            .json()
            .await
            .unwrap();
        assert_eq!(read["value"], "over https", "node {id}: {read}");
    }
    // Plain HTTP is not served on either port.
    let plain = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .build()
        .unwrap();
    let spec = &cluster.specs[&leader];
    for addr in [&spec.client_addr, &spec.peer_addr] {
        let answer = plain.get(format!("http://{addr}/healthz")).send().await;
        assert!(
            answer.is_err() || !answer.unwrap().status().is_success(),
            "{addr} spoke plain HTTP"
        );
    }
    let log = cluster.log(leader);
    assert!(!log.contains("accepts unauthenticated peers"), "{log}");
    the_client_names_a_scheme_or_ca_mistake(&cluster, leader).await;

    // A fourth node joins over mutual TLS (relayed to the leader, which replicates to it
    // and promotes it), then serves a linearizable read of what was written before.
    let mut cluster = cluster;
    cluster.spawn(4);
    cluster.wait_https(4).await;
    let joined = cluster
        .client
        .post(cluster.url(follower, "/cluster/join"))
        .json(&cluster.specs[&4])
        .timeout(START_TIMEOUT)
        .send()
        .await
        .expect("POST /cluster/join");
    assert!(joined.status().is_success(), "join: {}", joined.status());
    assert_eq!(cluster.wait_settled().await, leader);
    let read: Value = cluster
        .client
        .post(cluster.url(4, "/v1/read"))
        .json(&json!({"key": "tls/k", "consistency": "linearizable"}))
        .send()
        .await
        .expect("read on the joined node")
        .json()
        .await
        .unwrap();
    assert_eq!(read["value"], "over https", "{read}");

    // SIGTERM: the TLS servers drain and the node exits cleanly.
    let child = cluster.children.get_mut(&4).unwrap();
    // SAFETY: plain syscall on a child we spawned and have not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = wait_for(Duration::from_secs(15), "node 4 to exit", async || {
        child.try_wait().unwrap()
    })
    .await;
    assert!(status.success(), "{status}");
}

/// A learner that installs a leader's older snapshot takes that snapshot's membership,
/// which need not list the leader (it joined after the snapshot). The member check of
/// mutual TLS must still let that leader's entries through, or the learner never catches
/// up (found by a secure chaos campaign, seed 1205). Here nodes 2 and 3 join from node 1's
/// snapshot of membership `{1}`, node 1 leaves, and node 4 joins through 2 or 3, which
/// send it that same snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_on_an_older_snapshot_takes_entries_from_the_leader_that_sent_it() {
    let mut cluster = TlsCluster::start(1, false).await;
    cluster.post_ok(1, "/cluster/compact", json!({})).await;
    cluster.add(2, 1).await;
    cluster.add(3, 1).await;
    cluster
        .post_ok(1, "/cluster/remove", json!({"id": 1}))
        .await;
    let mut removed = cluster.children.remove(&1).unwrap();
    removed.kill().unwrap();
    removed.wait().unwrap();
    cluster.specs.remove(&1);
    let leader = cluster.wait_settled().await;

    cluster.add(4, leader).await;
    let status = cluster.status(4).await.expect("node 4's status");
    assert!(status.voters.contains(&4), "{status:?}");
    assert!(
        cluster.log(4).contains("installed snapshot"),
        "node 4 caught up without the older snapshot: {}",
        cluster.log(4)
    );
    assert_eq!(cluster.wait_settled().await, leader);
}

/// A node that was stopped while nodes 4 and 5 joined and the two others were removed
/// knows the membership `{1, 2, 3}` and none of the new leader's ids. It lets the new
/// leader in once a member it knows (the removed nodes still run) vouches for it, and
/// catches up; after that it votes for the new nodes, so the cluster survives the loss of
/// its leader. Without the vouch it refused both new nodes for good ("not a cluster
/// member"): a replica lost, and with one more node down, no majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_missed_a_join_lets_the_new_leader_in_once_a_member_vouches_for_it() {
    let mut cluster = TlsCluster::start(3, false).await;
    let first_leader = cluster.wait_settled().await;
    let others: Vec<u64> = (1..=3).filter(|id| *id != first_leader).collect();
    let (away, follower) = (others[0], others[1]);
    signal(&cluster.children[&away], libc::SIGSTOP);
    cluster.add(4, first_leader).await;
    cluster.add(5, first_leader).await;
    cluster
        .post_ok(first_leader, "/cluster/remove", json!({"id": first_leader}))
        .await;
    let leader = cluster.wait_leader_among(&[follower, 4, 5]).await;
    cluster
        .post_ok(leader, "/cluster/remove", json!({"id": follower}))
        .await;
    let leader = cluster.wait_leader_among(&[4, 5]).await;

    signal(&cluster.children[&away], libc::SIGCONT);
    let leader_status = cluster.status(leader).await.expect("the leader's status");
    assert_eq!(leader_status.voters, vec![away, 4, 5], "{leader_status:?}");
    wait_until(
        LEADER_TIMEOUT,
        "the returning node to catch up",
        async || {
            cluster
                .status(away)
                .await
                .is_some_and(|s| s.leader_id == Some(leader) && s.voters == leader_status.voters)
        },
    )
    .await;
    assert!(
        cluster
            .metric(away, "cairn_peer_members_vouched_total")
            .await
            >= 1
    );

    let mut deposed = cluster.children.remove(&leader).unwrap();
    deposed.kill().unwrap();
    deposed.wait().unwrap();
    let other_new = if leader == 4 { 5 } else { 4 };
    let next = cluster.wait_leader_among(&[away, other_new]).await;
    cluster
        .post_ok(
            next,
            "/v1/write",
            json!({"key": "facts/after", "value": 1, "actor": "t"}),
        )
        .await;
}

/// A node of another CA (its certificates from another `cairn-node certs` run: a node
/// refuses to start with a certificate its own peer CA does not verify, so this is the
/// mistake a join can meet) is refused before anything changes, at once rather than after
/// the catch-up timeout (60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_ca_is_not_joined() {
    let mut cluster = TlsCluster::start(1, false).await;
    let other = generate(&cluster.dir.path().join("other-ca"), &[3]);
    cluster.spawn_with(3, &other.nodes[&3], &other.ca_cert);
    let spec = &cluster.specs[&3];
    wait_for(START_TIMEOUT, "node 3's peer port to listen", async || {
        tokio::net::TcpStream::connect(&spec.peer_addr).await.ok()
    })
    .await;
    let answer = cluster
        .client
        .post(cluster.url(1, "/cluster/join"))
        .json(spec)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("an answer within 20 s, not after the catch-up timeout");
    assert_eq!(answer.status().as_u16(), 409);
    let body: Value = answer.json().await.expect("an error body");
    assert_eq!(body["error"]["code"], "invalid_transition", "{body}");
    assert_eq!(body["error"]["id"], 3, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("TLS with node 3")
            && message.contains("invalid peer certificate")
            && message.contains("nothing changed"),
        "{body}"
    );
    let status = cluster.status(1).await.expect("the leader's status");
    assert_eq!((status.voters, status.learners), (vec![1], vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_when_a_client_ca_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = TlsCluster::start(1, true).await;
    let url = cluster.url(1, "/healthz");
    // With the cluster CA's client certificate: served.
    let answer = cluster
        .client
        .get(&url)
        .send()
        .await
        .expect("a client with a certificate");
    assert!(answer.status().is_success());
    // Without a certificate, or with one the client CA did not sign: refused in the
    // handshake, no HTTP answer at all.
    let anonymous = https_client(&cluster.certs.ca_cert, None);
    assert!(
        anonymous.get(&url).send().await.is_err(),
        "served a client without a certificate"
    );
    let other = generate(&dir.path().join("other"), &[]);
    let wrong = https_client(
        &cluster.certs.ca_cert,
        Some((&other.client_cert, &other.client_key)),
    );
    assert!(
        wrong.get(&url).send().await.is_err(),
        "served a certificate from another CA"
    );
    // The Rust client (and so the CLI) names either mistake, and knows nothing was
    // applied although TLS 1.3 let it send the request before the node's verdict.
    for (identity, hint) in [
        (None, "the node asks for a client certificate"),
        (
            Some((&other.client_cert, &other.client_key)),
            "the node refused the client certificate",
        ),
    ] {
        let mut builder = cairn_client::Client::builder(vec![cluster.url(1, "")])
            .ca_cert_file(&cluster.certs.ca_cert)
            .retries_max(0);
        if let Some((cert, key)) = identity {
            builder = builder.client_identity_files(cert, key);
        }
        let client = builder.build().expect("client");
        let request = cairn_api::WriteRequest::new("tls/no-identity", json!(1), "t80");
        let err = client.write(request).await.expect_err("refused");
        let cairn_client::ClientError::Transport { message, sent, .. } = &err else {
            panic!("{err:?}")
        };
        assert!(message.contains(hint), "{message}");
        assert!(!sent, "{err:?}");
    }
    // A key that is not the certificate's is named when the client is built.
    let mismatched = cairn_client::Client::builder(vec![cluster.url(1, "")])
        .ca_cert_file(&cluster.certs.ca_cert)
        .client_identity_files(&cluster.certs.client_cert, &other.client_key)
        .build()
        .expect_err("a key of another certificate");
    assert!(
        mismatched
            .to_string()
            .contains("the private key is not the certificate's"),
        "{mismatched}"
    );
    let failed = cluster
        .metric(1, "cairn_client_tls_handshakes_failed_total")
        .await;
    assert!(failed >= 4, "{failed} failed handshakes counted, 4 refused");
    assert_eq!(
        cluster
            .metric(1, "cairn_peer_tls_handshakes_failed_total")
            .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rogue_peers_without_membership_proof_leave_raft_state_unchanged() {
    let cluster = TlsCluster::start(3, false).await;
    let leader = cluster.wait_settled().await;
    let before = cluster.statuses().await;
    let term = before[&leader].term;
    let last = before.values().map(|s| s.last_log_index).max().unwrap();
    let ca = cluster.certs.ca_cert.clone();
    let dir = tempfile::tempdir().unwrap();
    // The same CA, a node that is not a member.
    let outsider = certs::generate(
        cluster.dir.path().join("certs").as_path(),
        &[9],
        &BTreeMap::new(),
    )
    .unwrap()
    .nodes[&9]
        .clone();
    let other_ca = generate(dir.path(), &[9]);
    let stranger = other_ca.nodes[&9].clone();

    let no_cert = peer_tls_client(&ca, None);
    let other_ca_cert = peer_tls_client(&ca, Some((&stranger.0, &stranger.1)));
    let non_member = peer_tls_client(&ca, Some((&outsider.0, &outsider.1)));
    // (what, answers, expected answers): checked after the state, so that a missing check
    // shows first as moved Raft state.
    let mut answers_seen = Vec::new();
    for target in cluster.specs.keys().copied() {
        let url = |path: &str| cluster.peer_url(target, path);
        // (a) no client certificate, (b) another CA: refused in the handshake.
        for client in [&no_cert, &other_ca_cert] {
            let answers = send_rogue(
                client,
                url,
                &[(PEER_ID_HEADER, "9".into())],
                rogue_bodies(term, 9, last),
            )
            .await;
            answers_seen.push((format!("node {target}"), answers, vec![None, None]));
        }
        // (c) a valid certificate of node 9, not a member, claiming to be 9 or a member.
        for claimed in [9, leader] {
            let headers = [
                (PEER_ID_HEADER, claimed.to_string()),
                (PEER_TARGET_HEADER, target.to_string()),
            ];
            let answers = send_rogue(
                &non_member,
                url,
                &headers,
                rogue_bodies(term, claimed, last),
            )
            .await;
            let what = format!("node {target}, claiming {claimed}");
            answers_seen.push((what, answers, vec![Some(403), Some(403)]));
        }
        // No id at all.
        let answers = send_rogue(&non_member, url, &[], rogue_bodies(term, 9, last)).await;
        let what = format!("node {target}, no id");
        answers_seen.push((what, answers, vec![Some(401), Some(401)]));
    }
    // (d) A member's own certificate, on a connection that has just proved itself with a
    // harmless ReadIndex: claiming the leader's id next on that connection is refused
    // (the name check is remembered per connection and id, not per connection).
    let member = *cluster.specs.keys().find(|id| **id != leader).unwrap();
    let (cert, key) = cluster.certs.nodes[&member].clone();
    let member_client = peer_tls_client(&ca, Some((&cert, &key)));
    let url = |path: &str| cluster.peer_url(leader, path);
    let as_itself = [
        (PEER_ID_HEADER, member.to_string()),
        (PEER_TARGET_HEADER, leader.to_string()),
    ];
    let read_index = [(READ_INDEX_PATH, codec::encode(&()))];
    let proved = send_rogue(&member_client, url, &as_itself, read_index).await;
    assert_eq!(proved, vec![Some(200)], "a member's ReadIndex as itself");
    let headers = [
        (PEER_ID_HEADER, leader.to_string()),
        (PEER_TARGET_HEADER, leader.to_string()),
    ];
    let answers = send_rogue(
        &member_client,
        url,
        &headers,
        rogue_bodies(term, leader, last),
    )
    .await;
    let what = format!("member {member}'s connection, then claiming {leader}");
    answers_seen.push((what, answers, vec![Some(403), Some(403)]));
    // (e) Node 9 again, once every node has asked its members about it (past the
    // cooldown of a lookup that found no voucher): still refused, since no member lists it.
    tokio::time::sleep(UNVOUCHED_COOLDOWN + Duration::from_millis(500)).await;
    for target in cluster.specs.keys().copied() {
        let url = |path: &str| cluster.peer_url(target, path);
        let headers = [
            (PEER_ID_HEADER, "9".to_string()),
            (PEER_TARGET_HEADER, target.to_string()),
        ];
        let answers = send_rogue(&non_member, url, &headers, rogue_bodies(term, 9, last)).await;
        let what = format!("node {target}, node 9 after its members were asked");
        answers_seen.push((what, answers, vec![Some(403), Some(403)]));
    }
    // Give a deposed leader time to show it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = cluster.statuses().await;
    assert_eq!(
        raft_state(&after),
        raft_state(&before),
        "term, vote or log moved"
    );
    assert_eq!(cluster.wait_settled().await, leader, "the leader changed");
    for (what, answers, expected) in answers_seen {
        assert_eq!(answers, expected, "{what}");
    }
    let log = cluster.log(leader);
    assert!(log.contains("peer request refused"), "refusals are logged");
    // And counted: on every node two refused handshakes for each of (a) and (b), and
    // eight refused requests for (c), no id and (e); on the leader two more for (d). No
    // member vouched for node 9.
    for &id in cluster.specs.keys() {
        let handshakes = cluster
            .metric(id, "cairn_peer_tls_handshakes_failed_total")
            .await;
        assert!(handshakes >= 4, "node {id}: {handshakes} failed handshakes");
        let refused = cluster
            .metric(id, "cairn_peer_requests_refused_total")
            .await;
        let expected = if id == leader { 10 } else { 8 };
        assert_eq!(refused, expected, "node {id}: refused peer requests");
        let vouched = cluster.metric(id, "cairn_peer_members_vouched_total").await;
        assert_eq!(vouched, 0, "node {id}: vouched for node 9");
    }
}

/// An unknown path, or an unknown method on a peer path, is answered in the client port's
/// error body (404 `not_found`, 405), as every other refusal of the peer port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_port_answers_unknown_routes_in_the_error_body() {
    let cluster = Cluster::start(1).await;
    let peer_addr = cluster.spec(cluster.ids()[0]).peer_addr;
    let plain = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .build()
        .unwrap();
    for (method, path, status, code) in [
        (reqwest::Method::POST, "/v1/write", 404, "not_found"),
        (reqwest::Method::GET, VOTE_PATH, 405, "invalid_request"),
    ] {
        let answer = plain
            .request(method.clone(), format!("http://{peer_addr}{path}"))
            .send()
            .await
            .expect("an answer");
        let got = answer.status().as_u16();
        let body: Value = answer.json().await.expect("a JSON error body");
        assert_eq!(
            (got, &body["error"]["code"]),
            (status, &json!(code)),
            "{method} {path}: {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_peer_secret_leaves_raft_state_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let secret_path = dir.path().join("peer.secret");
    let secret = "0123456789abcdef0123456789abcdef-cairn-t80";
    fs::write(&secret_path, format!("{secret}\n")).unwrap();
    let config = format!(
        "peer_secret_file = {:?}\n",
        secret_path.display().to_string()
    );
    let cluster = Cluster::builder(3).config(&config).start().await;
    let leader = cluster.wait_settled(LEADER_TIMEOUT).await;
    let before = cluster.statuses().await;
    let term = before[&leader].term;
    let last = before.values().map(|s| s.last_log_index).max().unwrap();
    let plain = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .build()
        .unwrap();
    let wrong = hex::encode("0123456789abcdef0123456789abcdeX-cairn-t80");
    let truncated = hex::encode(&secret[..31]);
    let mut answers_seen = Vec::new();
    for id in cluster.ids() {
        let peer_addr = cluster.spec(id).peer_addr;
        let url = |path: &str| format!("http://{peer_addr}{path}");
        let missing = send_rogue(
            &plain,
            url,
            &[(PEER_ID_HEADER, "2".into())],
            rogue_bodies(term, 2, last),
        )
        .await;
        answers_seen.push((format!("node {id}, no secret"), missing, Some(401)));
        for bad in [&wrong, &truncated, &secret.to_string()] {
            let headers = [
                (PEER_ID_HEADER, "2".into()),
                (PEER_SECRET_HEADER, bad.clone()),
            ];
            let refused = send_rogue(&plain, url, &headers, rogue_bodies(term, 2, last)).await;
            answers_seen.push((format!("node {id}, wrong secret"), refused, Some(403)));
        }
        // The right secret, but meant for another node: one process never answers for
        // two ids, whatever address a membership gives the other one.
        let misdirected = [
            (PEER_ID_HEADER, "2".into()),
            (PEER_SECRET_HEADER, hex::encode(secret)),
            (PEER_TARGET_HEADER, "99".into()),
        ];
        let refused = send_rogue(&plain, url, &misdirected, rogue_bodies(term, 2, last)).await;
        answers_seen.push((format!("node {id}, meant for node 99"), refused, Some(403)));
        // The right secret, meant for no node named (SPEC §6: peer requests name theirs).
        let unaddressed = [
            (PEER_ID_HEADER, "2".into()),
            (PEER_SECRET_HEADER, hex::encode(secret)),
        ];
        let refused = send_rogue(&plain, url, &unaddressed, rogue_bodies(term, 2, last)).await;
        answers_seen.push((format!("node {id}, meant for no node"), refused, Some(403)));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = cluster.statuses().await;
    assert_eq!(
        raft_state(&after),
        raft_state(&before),
        "term, vote or log moved"
    );
    assert_eq!(
        cluster.wait_settled(LEADER_TIMEOUT).await,
        leader,
        "the leader changed"
    );
    for (what, answers, expected) in answers_seen {
        assert_eq!(answers, vec![expected; 2], "{what}");
    }
    // The cluster itself, which has the secret, still commits writes.
    let written = plain
        .post(format!("{}/v1/write", cluster.endpoint(leader)))
        .json(&json!({"key": "secret/k", "value": "v", "actor": "t80"}))
        .send()
        .await
        .expect("a write");
    assert!(written.status().is_success(), "{}", written.status());
    // A member the secret cannot reach (beyond loopback), or one at an address another
    // member has (here the leader's own), is refused before any membership change.
    let leader_spec = cluster.spec(leader);
    let joins = [
        (
            json!({"id": 9, "client_addr": "192.0.2.10:7401", "peer_addr": "192.0.2.10:7501"}),
            400,
            "peer_addr",
        ),
        (
            json!({"id": 9, "client_addr": leader_spec.client_addr, "peer_addr": leader_spec.peer_addr}),
            409,
            "client_addr",
        ),
    ];
    for (join, status, field) in joins {
        let answer = plain
            .post(format!("{}/cluster/join", cluster.endpoint(leader)))
            .json(&join)
            .send()
            .await
            .expect("a join");
        assert_eq!(answer.status().as_u16(), status, "{join}");
        let body: Value = answer.json().await.expect("an error body");
        assert_eq!(body["error"]["field"], field, "{join}: {body}");
    }
    let status = cluster.status(leader).await.expect("status");
    assert_eq!((status.voters, status.learners), (vec![1, 2, 3], vec![]));

    // With the secret, a body that does not decode is 400 `invalid_request` in the client
    // port's JSON error body, naming no secret.
    let peer_addr = cluster.spec(leader).peer_addr;
    let undecodable = plain
        .post(format!("http://{peer_addr}{APPEND_PATH}"))
        .header("content-type", CONTENT_TYPE)
        .header(PEER_ID_HEADER, "2")
        .header(PEER_SECRET_HEADER, hex::encode(secret))
        .header(PEER_TARGET_HEADER, leader.to_string())
        .body(vec![0xffu8; 7])
        .send()
        .await
        .expect("an answer");
    assert_eq!(undecodable.status().as_u16(), 400);
    let text = undecodable.text().await.expect("body");
    let body: Value = serde_json::from_str(&text).expect("a JSON error body");
    assert_eq!(
        (&body["error"]["code"], &body["error"]["field"]),
        (&json!("invalid_request"), &json!("body")),
        "{body}"
    );
    assert!(
        !text.contains(secret) && !text.contains(&hex::encode(secret)),
        "the refusal echoes the secret"
    );
    for id in cluster.ids() {
        let log = cluster.log_text(id);
        assert!(!log.contains(secret), "node {id} logged the secret");
        assert!(
            !log.contains(&hex::encode(secret)),
            "node {id} logged the secret's header"
        );
    }
}

/// On a cluster whose peers prove themselves with a secret, a node started without it
/// is refused before anything changes: it admits anyone, the leader included, so it would
/// catch up, but the members would refuse its own requests, so as a voter it could never
/// lead. A node with the secret joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_without_the_peer_secret_is_not_joined() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, leader) = peer_secret_cluster(dir.path()).await;

    let open = cluster.add_node_configured(4, None).await;
    let refused = join(&cluster, leader, &open).await.expect("an answer");
    assert_refused_without_the_secret(refused, "nothing changed").await;
    let status = cluster.status(leader).await.expect("status");
    assert_eq!((status.voters, status.learners), (vec![1, 2, 3], vec![]));

    // A node with another secret refuses the leader's own proof: refused at once, not
    // after the catch-up timeout (60 s), and nothing changes.
    let other_secret = dir.path().join("other.secret");
    fs::write(
        &other_secret,
        "another-secret-of-32-bytes-or-more-for-t80\n",
    )
    .unwrap();
    let other = cluster
        .add_node_configured(6, Some(format!("peer_secret_file = {other_secret:?}\n")))
        .await;
    let started = std::time::Instant::now();
    let refused = join(&cluster, leader, &other).await.expect("an answer");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(refused.status().as_u16(), 409);
    let body: Value = refused.json().await.expect("an error body");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("refuses this node's peer requests")
            && message.contains("wrong peer secret")
            && message.contains("nothing changed"),
        "{body}"
    );
    assert_eq!(body["error"]["id"], 6, "{body}");
    let status = cluster.status(leader).await.expect("status");
    assert_eq!((status.voters, status.learners), (vec![1, 2, 3], vec![]));

    let proven = cluster.add_node(5).await;
    let joined = join(&cluster, leader, &proven).await.expect("an answer");
    assert_eq!(
        joined.status().as_u16(),
        200,
        "{}",
        joined.text().await.unwrap()
    );
    let status = cluster.status(leader).await.expect("status");
    assert_eq!((status.voters, status.learners), (vec![1, 2, 3, 5], vec![]));
}

/// A node that cannot answer when its join is sent (here frozen, as one not started yet
/// would be) is added as a learner; once it caught up, the leader asks again and, finding
/// it without the peer secret, does not promote it: the join is 409 and it stays a
/// learner, never a voter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_found_without_the_peer_secret_after_catching_up_stays_a_learner() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, leader) = peer_secret_cluster(dir.path()).await;
    let open = cluster.add_node_configured(4, None).await;
    cluster.sigstop(4);
    let joining = tokio::spawn(join(&cluster, leader, &open));

    // The first question went unanswered, so the join goes on: node 4 becomes a learner.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cluster
        .status(leader)
        .await
        .expect("status")
        .learners
        .contains(&4)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node 4 was never added as a learner"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.sigcont(4);

    let refused = joining.await.unwrap().expect("an answer");
    assert_refused_without_the_secret(refused, "it stays a learner").await;
    let status = cluster.status(leader).await.expect("status");
    assert_eq!((status.voters, status.learners), (vec![1, 2, 3], vec![4]));
}

/// A settled 3-node cluster whose peers prove themselves with a secret kept in `dir`, and
/// its leader.
async fn peer_secret_cluster(dir: &Path) -> (Cluster, u64) {
    let secret_path = dir.join("peer.secret");
    fs::write(&secret_path, "0123456789abcdef0123456789abcdef-cairn-t80\n").unwrap();
    let config = format!(
        "peer_secret_file = {:?}\n",
        secret_path.display().to_string()
    );
    let cluster = Cluster::builder(3).config(&config).start().await;
    let leader = cluster.wait_settled(LEADER_TIMEOUT).await;
    (cluster, leader)
}

/// `POST /cluster/join` of `spec` at `leader`, with room for the join's catch-up wait.
fn join(
    cluster: &Cluster,
    leader: u64,
    spec: &NodeSpec,
) -> impl std::future::Future<Output = reqwest::Result<reqwest::Response>> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(90))
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{}/cluster/join", cluster.endpoint(leader)))
        .json(&json!({"id": spec.id, "client_addr": spec.client_addr, "peer_addr": spec.peer_addr}))
        .send()
}

/// The join's answer is 409 `invalid_transition` for node 4, naming the peer secret and
/// `outcome`.
async fn assert_refused_without_the_secret(answer: reqwest::Response, outcome: &str) {
    assert_eq!(answer.status().as_u16(), 409);
    let body: Value = answer.json().await.expect("an error body");
    assert_eq!(body["error"]["code"], "invalid_transition", "{body}");
    assert_eq!(body["error"]["id"], 4, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("peer secret"), "{body}");
    assert!(message.contains(outcome), "{body}");
}

/// Runs `cairn-node` with `args` in `dir` until it exits (at most 30 s); exit code and
/// everything it printed.
async fn run_to_exit(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let log_path: PathBuf = dir.join("out.log");
    let log = fs::File::create(&log_path).unwrap();
    let mut cmd = tokio::process::Command::from(node_command(dir));
    cmd.args(args)
        .stdout(log.try_clone().unwrap())
        .stderr(Stdio::from(log))
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawning cairn-node");
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("cairn-node kept running")
        .unwrap();
    (status.code(), fs::read_to_string(&log_path).unwrap())
}

/// [`run_to_exit`] of node `id` on free loopback ports with peer TLS from these files.
async fn run_with_peer_tls(
    dir: &Path,
    id: u64,
    cert: &Path,
    key: &Path,
    ca: &Path,
) -> (Option<i32>, String) {
    let (client_addr, peer_addr) = free_addr_pair();
    let id = id.to_string();
    let args = [
        "--id",
        &id,
        "--data-dir",
        "data",
        "--client-addr",
        &client_addr,
        "--peer-addr",
        &peer_addr,
        "--peer-tls-cert",
        cert.to_str().unwrap(),
        "--peer-tls-key",
        key.to_str().unwrap(),
        "--peer-tls-ca",
        ca.to_str().unwrap(),
    ];
    run_to_exit(dir, &args).await
}

#[tokio::test]
async fn a_port_beyond_loopback_needs_tls_or_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let (_, peer_addr) = free_addr_pair();
    // 192.0.2.1 (TEST-NET-1) is on no interface: the node is accepted or refused by its
    // config, and with --insecure it then fails to bind, so nothing ever listens beyond
    // loopback.
    let base = [
        "--id",
        "1",
        "--data-dir",
        "data",
        "--client-addr",
        "192.0.2.1:7401",
        "--peer-addr",
        &peer_addr,
    ];
    let (code, out) = run_to_exit(dir.path(), &base).await;
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("client_addr") && out.contains("--insecure"),
        "{out}"
    );

    let mut insecure = base.to_vec();
    insecure.push("--insecure");
    let (code, out) = run_to_exit(dir.path(), &insecure).await;
    assert_eq!(
        code,
        Some(1),
        "the config was accepted and only the bind failed: {out}"
    );
    assert!(
        out.contains("--insecure: listening beyond loopback without TLS"),
        "{out}"
    );
    assert!(out.contains("binding the client address"), "{out}");
    assert!(out.contains("accepts unauthenticated peers"), "{out}");

    // No log filter hides them: at `error` the node still warns, and logs nothing else.
    std::fs::write(dir.path().join("quiet.toml"), "log_level = \"error\"\n").unwrap();
    let quiet = [&insecure[..], &["--config", "quiet.toml"]].concat();
    let (code, out) = run_to_exit(dir.path(), &quiet).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--insecure: listening beyond loopback without TLS"),
        "{out}"
    );
    assert!(out.contains("accepts unauthenticated peers"), "{out}");

    // A certificate that does not exist is a config error too.
    let (code, out) = run_to_exit(
        dir.path(),
        &[
            "--id",
            "1",
            "--data-dir",
            "data",
            "--peer-addr",
            &peer_addr,
            "--tls-cert",
            "missing.pem",
            "--tls-key",
            "missing.key",
            "--tls-ca",
            "missing-ca.pem",
        ],
    )
    .await;
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("missing.pem"), "{out}");
}

#[tokio::test]
async fn a_short_peer_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("short.secret");
    fs::write(&secret, "only-31-bytes-long-secret-value").unwrap();
    let (code, out) = run_to_exit(
        dir.path(),
        &[
            "--id",
            "1",
            "--data-dir",
            "data",
            "--peer-secret-file",
            secret.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("at least 32 bytes"), "{out}");
    assert!(!out.contains("only-31-bytes"), "the secret leaked: {out}");
}

/// A peer certificate issued for another node id is a configuration error at start (exit
/// 2, naming the file and the name it lacks), not a node that every peer refuses later.
#[tokio::test]
async fn a_peer_certificate_for_another_node_id_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let certs = generate(dir.path(), &[1]);
    let (cert, key) = &certs.nodes[&1];
    let (code, out) = run_with_peer_tls(dir.path(), 2, cert, key, &certs.ca_cert).await;
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("not valid for node-2") && out.contains(cert.to_str().unwrap()),
        "{out}"
    );
}

/// A new CA (`ca.pem`) and a certificate it signed for `node-<id>` (`node.pem`, `node.key`),
/// valid from the start of year `from` to the start of year `to`, written into `dir`.
fn issue_for_years(dir: &Path, id: u64, from: i32, to: i32) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{date_time_ymd, BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::new(vec![format!("node-{id}")]).unwrap();
    params.not_before = date_time_ymd(from, 1, 1);
    params.not_after = date_time_ymd(to, 1, 1);
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("node.pem"),
        dir.join("node.key"),
    );
    fs::write(&paths.0, ca_cert.pem()).unwrap();
    fs::write(&paths.1, cert.pem()).unwrap();
    fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

#[tokio::test]
async fn an_expired_or_future_certificate_is_refused_at_start_and_a_valid_one_is_dated() {
    for (from, to, expected) in [
        (2000, 2001, "expired at 2001-01-01T00:00:00Z"),
        (2090, 2099, "not valid before 2090-01-01T00:00:00Z"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = issue_for_years(dir.path(), 1, from, to);
        let (code, out) = run_with_peer_tls(dir.path(), 1, &cert, &key, &ca).await;
        assert_eq!(code, Some(2), "{out}");
        let named = format!("{}: {expected}", cert.display());
        assert!(out.contains(&named), "{named:?} not in {out}");
        assert!(
            !dir.path().join("data").exists(),
            "the data dir was touched"
        );
    }
    // A peer certificate of another CA, even one made alike (two `cairn-node certs` runs),
    // is refused too: every peer would refuse it.
    let dir = tempfile::tempdir().unwrap();
    let ours = generate(&dir.path().join("ours"), &[1]);
    let theirs = generate(&dir.path().join("theirs"), &[1]);
    let (cert, key) = &theirs.nodes[&1];
    let (code, out) = run_with_peer_tls(dir.path(), 1, cert, key, &ours.ca_cert).await;
    assert_eq!(code, Some(2), "{out}");
    let named = format!(
        "{}: not issued by a CA of {}",
        cert.display(),
        ours.ca_cert.display()
    );
    assert!(out.contains(&named), "{named:?} not in {out}");
    assert!(
        !dir.path().join("data").exists(),
        "the data dir was touched"
    );
    // A running cluster shows its certificates' end on /metrics: `cairn-node certs`
    // issues them until 4096-01-01 (rcgen's default), 67,090,118,400 s after the epoch.
    let cluster = TlsCluster::start(1, false).await;
    for gauge in [
        "cairn_peer_tls_cert_not_after_seconds",
        "cairn_client_tls_cert_not_after_seconds",
    ] {
        assert_eq!(cluster.metric(1, gauge).await, 67_090_118_400, "{gauge}");
    }
}
