//! The client side of the peer transport.
//!
//! Every peer RPC (Raft's append, vote and snapshot, and the ReadIndex a follower asks of
//! its leader) goes over an HTTP/1.1 connection that the calling task drives itself
//! ([`PeerConn`]), taken from and returned to a small idle pool per peer ([`IdleConns`]).
//! With peer TLS the connection is mutual TLS, the peer verified as `node-<its id>`; every
//! request carries this node's proof headers ([`ClientProof`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use cairn_config::PeerProof;
use futures::FutureExt;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;
use tokio::sync::watch;
use tokio_rustls::TlsConnector;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::RaftMetrics;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::admission::{AdmissionState, AdmitRequest};
use super::proof::{ClientProof, PEER_TARGET_HEADER};
use super::{
    ADMIT_PATH, APPEND_PATH, APPLIED_PATH, CONTENT_TYPE, MEMBER_PATH, PROOF_MODE_PATH,
    READ_INDEX_PATH, SNAPSHOT_PATH, VOTE_PATH,
};
use crate::consensus::{NodeId, NodeInfo, TypeConfig};
use crate::store::codec;
use crate::tls::configs::PeerTls;
use crate::tls::stream::PeerStream;

/// Backoff after a peer was unreachable: 50 ms doubling to 1 s, so a dead peer costs at
/// most a connection attempt per second.
const BACKOFF_START_MS: u64 = 50;
const BACKOFF_MAX_MS: u64 = 1000;
/// Idle pooled connections kept per peer.
const POOL_IDLE_PER_HOST_MAX: usize = 8;
/// How much of an error answer is read: a refusal's body is a short error body (SPEC §5).
const REFUSAL_BYTES_MAX: usize = 4 << 10;

/// The HTTP client for peer RPCs. Outgoing connections bind the node's own peer IP, so a
/// test harness can cut a precise pair of nodes with packet filters.
#[derive(Clone)]
pub struct PeerClient {
    local_ip: Option<IpAddr>,
    connect_timeout: Duration,
    idle: IdleConns,
    /// Proof headers, sent with every request.
    headers: Arc<http::HeaderMap>,
    /// Mutual TLS to peers, when configured.
    tls: Option<TlsConnector>,
    /// The membership, for ReadIndex calls, which name the leader by address only: with
    /// TLS the client must know which `node-<id>` to expect there. Set once Raft runs.
    members: Arc<OnceLock<watch::Receiver<RaftMetrics<NodeId, NodeInfo>>>>,
}

/// Peer RPC connections not in use, per peer (id and address), shared by every network client of
/// the node and by its ReadIndex calls.
///
/// Why a pool: openraft opens a new network client for each leadership check (every
/// ReadIndex round, `RaftCore::handle_check_is_leader_request`) besides the long-lived one
/// per replication stream. A connection per client meant a new TCP connection, and a new
/// ephemeral port, per round and follower: at one linearizable reader the leader spent
/// most of its CPU in the kernel's port search (`inet_csk_get_port`).
///
/// A connection is in the pool only while no task uses it, and only after its last
/// exchange succeeded: one that failed or timed out is dropped, so a request left in
/// flight (a partition, a paused peer) never holds up a later RPC behind it.
#[derive(Clone, Default)]
struct IdleConns(Arc<Mutex<HashMap<String, Vec<PeerConn>>>>);

impl IdleConns {
    /// A live idle connection to `peer_addr`, dropping any the peer closed meanwhile.
    fn take(&self, peer_addr: &str) -> Option<PeerConn> {
        let mut idle = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let conns = idle.get_mut(peer_addr)?;
        while let Some(mut conn) = conns.pop() {
            if !conn.has_ended() {
                return Some(conn);
            }
        }
        None
    }

    fn put_back(&self, peer_addr: &str, conn: PeerConn) {
        let mut idle = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let conns = idle.entry(peer_addr.to_string()).or_default();
        if conns.len() < POOL_IDLE_PER_HOST_MAX {
            conns.push(conn);
        }
    }
}

impl PeerClient {
    /// `tls`: the client side of peer TLS ([`PeerTls::client`]), `None` for plain TCP.
    pub fn new(
        local_ip: Option<IpAddr>,
        connect_timeout: Duration,
        proof: ClientProof,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> PeerClient {
        PeerClient {
            local_ip,
            connect_timeout,
            idle: IdleConns::default(),
            headers: Arc::new(proof.headers()),
            tls: tls.map(TlsConnector::from),
            members: Arc::default(),
        }
    }

    /// Lets [`Self::read_index`] find the leader's id from its address.
    pub fn learn_membership(&self, metrics: watch::Receiver<RaftMetrics<NodeId, NodeInfo>>) {
        let _ = self.members.set(metrics);
    }

    /// The id of the member whose peer address is `peer_addr`.
    fn member_at(&self, peer_addr: &str) -> Option<NodeId> {
        let metrics = self.members.get()?.borrow();
        let membership = metrics.membership_config.membership();
        let found = membership
            .nodes()
            .find(|(_, node)| node.peer_addr == peer_addr)
            .map(|(id, _)| *id);
        found
    }

    /// POSTs a bincode body and decodes a bincode `Result<Resp, Err>` answer, all within
    /// `timeout` (connecting included).
    pub async fn call<Req: Serialize, Resp: DeserializeOwned, Err: DeserializeOwned>(
        &self,
        target: NodeId,
        peer_addr: &str,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Result<Resp, Err>, CallError> {
        let body = Bytes::from(codec::encode(req));
        let bytes = tokio::time::timeout(timeout, self.exchange(target, peer_addr, path, body))
            .await
            .map_err(|_| {
                CallError::Network(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer from {peer_addr} within {timeout:?}"),
                ))
            })??;
        codec::decode(&bytes).map_err(|e| CallError::Network(std::io::Error::other(e)))
    }

    /// One request and its answer's body, on an idle connection or a new one. The
    /// connection goes back to the pool only if the exchange completed: when it fails, or
    /// the caller's timeout drops this future, the connection is dropped with it.
    async fn exchange(
        &self,
        target: NodeId,
        peer_addr: &str,
        path: &str,
        body: Bytes,
    ) -> Result<Bytes, CallError> {
        // Keyed by id too: a connection verified as `node-2` never serves node 3, even if
        // node 3 later takes node 2's address.
        let key = format!("{target}@{peer_addr}");
        let mut conn = match self.idle.take(&key) {
            Some(conn) => conn,
            None => PeerConn::open(self, target, peer_addr).await?,
        };
        let answer = conn
            .exchange(target, peer_addr, path, &self.headers, body)
            .await?;
        self.idle.put_back(&key, conn);
        Ok(answer)
    }

    /// How node `target`'s peer port admits callers ([`PROOF_MODE_PATH`]).
    pub async fn proof_mode(
        &self,
        target: NodeId,
        peer_addr: &str,
        timeout: Duration,
    ) -> Result<ProofAnswer, String> {
        match self
            .call::<(), PeerProof, String>(target, peer_addr, PROOF_MODE_PATH, &(), timeout)
            .await
        {
            Ok(answer) => answer.map(ProofAnswer::Mode),
            Err(CallError::Refused(refusal)) => Ok(ProofAnswer::RefusedUs(refusal.to_string())),
            Err(other) => match tls_failure(&other) {
                Some(tls) => Ok(ProofAnswer::TlsFailed(tls.to_string())),
                None => Err(other.to_string()),
            },
        }
    }

    /// Node `target`'s admission, after admitting it if asked ([`ADMIT_PATH`]).
    pub async fn admit(
        &self,
        target: NodeId,
        peer_addr: &str,
        request: AdmitRequest,
        timeout: Duration,
    ) -> Result<AdmissionState, String> {
        self.call::<AdmitRequest, AdmissionState, String>(
            target, peer_addr, ADMIT_PATH, &request, timeout,
        )
        .await
        .map_err(|e| e.to_string())?
    }

    /// Whether node `target`'s membership lists node `id` ([`MEMBER_PATH`]). A failed
    /// call says whether it is [definite](CallError::definite).
    pub async fn lists_member(
        &self,
        target: NodeId,
        peer_addr: &str,
        id: NodeId,
        timeout: Duration,
    ) -> Result<bool, CallError> {
        self.call::<NodeId, bool, String>(target, peer_addr, MEMBER_PATH, &id, timeout)
            .await?
            .map_err(|e| CallError::Network(std::io::Error::other(e)))
    }

    /// Whether node `target` has applied log index `index`, asked within `timeout`
    /// ([`APPLIED_PATH`]; the node itself waits up to `server::APPLIED_WAIT` for it).
    pub async fn applied(
        &self,
        target: NodeId,
        peer_addr: &str,
        index: u64,
        timeout: Duration,
    ) -> Result<bool, String> {
        self.call::<u64, bool, String>(target, peer_addr, APPLIED_PATH, &index, timeout)
            .await
            .map_err(|e| e.to_string())?
    }

    /// Asks the leader for a quorum-confirmed commit index (ReadIndex).
    pub async fn read_index(
        &self,
        leader_peer_addr: &str,
        timeout: Duration,
    ) -> Result<u64, String> {
        let leader = self
            .member_at(leader_peer_addr)
            .ok_or_else(|| format!("no member has the peer address {leader_peer_addr}"))?;
        match self
            .call::<(), u64, String>(leader, leader_peer_addr, READ_INDEX_PATH, &(), timeout)
            .await
        {
            Ok(answer) => answer,
            Err(e) => Err(e.to_string()),
        }
    }
}

/// What a node answered when asked how it admits peers ([`PeerClient::proof_mode`]).
pub enum ProofAnswer {
    /// How its peer port admits callers.
    Mode(PeerProof),
    /// It refused this node's own proof (401, 403): the peer's refusal, as it gave it.
    RefusedUs(String),
    /// The TLS handshake failed for a reason that a retry does not change: one side's
    /// certificate does not verify against the other's CA or names another node, or the
    /// port does not speak TLS. rustls's own words.
    TlsFailed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("unreachable: {0}")]
    Unreachable(std::io::Error),
    /// The peer refused this node's proof (401, 403): a missing or wrong secret, a
    /// certificate for another node, a node that is not a member. Raft treats it as
    /// unreachable; a join learns from it that the node can never be a member.
    #[error("refused: {0}")]
    Refused(std::io::Error),
    #[error("network: {0}")]
    Network(std::io::Error),
}

impl CallError {
    /// Why no retry of this call could succeed, if that is so: the peer refused this
    /// node's proof (a wrong secret, a certificate it does not take, a request meant for
    /// another node id, a caller that is no member of its cluster), or TLS with it failed.
    /// `None` for a peer that did not answer, which a retry may reach.
    pub fn definite(&self) -> Option<String> {
        match (self, tls_failure(self)) {
            (CallError::Refused(refusal), _) => Some(refusal.to_string()),
            (_, Some(tls)) => Some(format!("TLS fails: {tls}")),
            _ => None,
        }
    }

    fn into_rpc<E: std::error::Error>(self) -> RPCError<NodeId, NodeInfo, E> {
        match self {
            CallError::Unreachable(e) | CallError::Refused(e) => {
                RPCError::Unreachable(Unreachable::new(&e))
            }
            CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }
}

pub struct NetworkFactory {
    client: PeerClient,
}

impl NetworkFactory {
    pub fn new(client: PeerClient) -> Self {
        NetworkFactory { client }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: NodeId, node: &NodeInfo) -> PeerNetwork {
        PeerNetwork {
            client: self.client.clone(),
            target,
            peer_addr: node.peer_addr.clone(),
        }
    }
}

/// RPCs to one peer.
pub struct PeerNetwork {
    client: PeerClient,
    target: NodeId,
    peer_addr: String,
}

impl PeerNetwork {
    async fn rpc<
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    >(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, NodeInfo, RaftError<NodeId, E>>> {
        match self
            .client
            .call::<Req, Resp, RaftError<NodeId, E>>(
                self.target,
                &self.peer_addr,
                path,
                req,
                option.hard_ttl(),
            )
            .await
        {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(remote)) => Err(RPCError::RemoteError(RemoteError::new(self.target, remote))),
            Err(e) => Err(e.into_rpc()),
        }
    }
}

/// One HTTP/1.1 connection to a peer, driven by the task that sends on it.
///
/// Why not the pooled client: it runs each connection as a task of its own, so every RPC
/// crossed tasks twice on the sender (request to the connection task, answer back), and on
/// a loaded node a cross-task wake-up is often a thread wake-up. Here the task making the
/// RPC polls the connection itself while it waits for its answer; between RPCs it sits in
/// [`IdleConns`] and nothing polls it, which is fine for a strict request/answer protocol:
/// a close the peer sent meanwhile is noticed when it is taken out ([`Self::has_ended`]),
/// or fails the next exchange, and the connection is dropped.
struct PeerConn {
    sender: SendRequest<Full<Bytes>>,
    connection: Pin<Box<http1::Connection<TokioIo<PeerStream>, Full<Bytes>>>>,
}

impl PeerConn {
    /// Connects from the node's own peer IP (see [`PeerClient`]) within the connect
    /// timeout, then, with peer TLS, shakes hands expecting `node-<target>`. Failing to
    /// connect or to shake hands is `Unreachable`, which makes openraft back off.
    async fn open(
        client: &PeerClient,
        target: NodeId,
        peer_addr: &str,
    ) -> Result<PeerConn, CallError> {
        let unreachable = CallError::Unreachable;
        let addr: SocketAddr = tokio::net::lookup_host(peer_addr)
            .await
            .map_err(unreachable)?
            .next()
            .ok_or_else(|| {
                unreachable(std::io::Error::other(format!(
                    "{peer_addr} resolves to nothing"
                )))
            })?;
        let socket = match addr {
            SocketAddr::V4(_) => TcpSocket::new_v4(),
            SocketAddr::V6(_) => TcpSocket::new_v6(),
        }
        .map_err(unreachable)?;
        // A host name may resolve to the other address family than this node's own peer
        // IP (`localhost`: ::1 here, 127.0.0.1 there); the kernel then picks the source.
        if let Some(ip) = client.local_ip.filter(|ip| ip.is_ipv4() == addr.is_ipv4()) {
            socket.bind(SocketAddr::new(ip, 0)).map_err(unreachable)?;
        }
        let stream = tokio::time::timeout(client.connect_timeout, socket.connect(addr))
            .await
            .map_err(|_| {
                unreachable(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting to {peer_addr} timed out"),
                ))
            })?
            .map_err(unreachable)?;
        stream.set_nodelay(true).map_err(unreachable)?;
        let stream = match &client.tls {
            None => PeerStream::Plain(stream),
            Some(tls) => {
                let handshake = tls.connect(PeerTls::server_name(target), stream);
                let tls = tokio::time::timeout(client.connect_timeout, handshake)
                    .await
                    .map_err(|_| {
                        unreachable(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("TLS handshake with node {target} at {peer_addr} timed out"),
                        ))
                    })?
                    .map_err(unreachable)?;
                PeerStream::Tls(Box::new(tls))
            }
        };
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(std::io::Error::other(e)))?;
        Ok(PeerConn {
            sender,
            connection: Box::pin(connection),
        })
    }

    /// Whether the connection is over: polled once without waiting, it notices a close
    /// the peer sent while nobody was polling it (e.g. hyper's idle timeout).
    fn has_ended(&mut self) -> bool {
        self.sender.is_closed() || self.connection.as_mut().now_or_never().is_some()
    }

    /// POSTs `body` to `path` on node `target` and returns the answer's body, polling the
    /// connection in the same task until the answer is complete.
    async fn exchange(
        &mut self,
        target: NodeId,
        host: &str,
        path: &str,
        proof: &http::HeaderMap,
        body: Bytes,
    ) -> Result<Bytes, CallError> {
        let network = |e: hyper::Error| CallError::Network(std::io::Error::other(e));
        let mut request = http::Request::post(path)
            .header(http::header::HOST, host)
            .header(http::header::CONTENT_TYPE, CONTENT_TYPE)
            .body(Full::new(body))
            .map_err(|e| CallError::Network(std::io::Error::other(e)))?;
        let headers = request.headers_mut();
        for (name, value) in proof {
            headers.insert(name, value.clone());
        }
        headers.insert(PEER_TARGET_HEADER, http::HeaderValue::from(target));
        let PeerConn { sender, connection } = self;
        let roundtrip = async {
            sender.ready().await.map_err(network)?;
            let response = sender.send_request(request).await.map_err(network)?;
            let status = response.status();
            if !status.is_success() {
                let body = Limited::new(response.into_body(), REFUSAL_BYTES_MAX)
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let refused = std::io::Error::other(refusal_text(status, &body));
                if matches!(status.as_u16(), 401 | 403) {
                    return Err(CallError::Refused(refused));
                }
                // A peer that refuses this node (no proof, not a member, not admitted)
                // refuses the next attempt too: back off as from an unreachable one,
                // instead of retrying (and logging) at every heartbeat.
                if status.is_client_error() {
                    return Err(CallError::Unreachable(refused));
                }
                return Err(CallError::Network(refused));
            }
            let collected = response.into_body().collect().await.map_err(network)?;
            Ok(collected.to_bytes())
        };
        tokio::pin!(roundtrip);
        tokio::select! {
            biased;
            answer = &mut roundtrip => answer,
            ended = connection.as_mut() => match ended {
                // A peer may close right after answering (`Connection: close`): an answer
                // delivered before the end is complete now. Anything else never will be
                // (the ended connection still holds the request), so it fails at once.
                Ok(()) => roundtrip.now_or_never().unwrap_or_else(|| {
                    Err(CallError::Network(std::io::Error::other(
                        "peer closed the connection before answering",
                    )))
                }),
                Err(e) => Err(network(e)),
            },
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        self.rpc(APPEND_PATH, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeInfo, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.rpc(SNAPSHOT_PATH, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        self.rpc(VOTE_PATH, &rpc, &option).await
    }

    fn backoff(&self) -> Backoff {
        let steps = std::iter::successors(Some(BACKOFF_START_MS), |ms| {
            Some((ms * 2).min(BACKOFF_MAX_MS))
        });
        Backoff::new(steps.map(Duration::from_millis))
    }
}

/// The rustls error behind a failed call, if TLS is what failed: in the handshake (this
/// node refused the peer's certificate, or the peer's port answered with something other
/// than TLS) or on the first read after it (TLS 1.3 delivers the peer's refusal of this
/// node's certificate as an alert then). `io::Error::source` skips the error it wraps, so
/// the chain is walked through `get_ref` as well.
fn tls_failure(error: &CallError) -> Option<&rustls::Error> {
    let (CallError::Unreachable(io) | CallError::Refused(io) | CallError::Network(io)) = error;
    let mut next: Option<&(dyn std::error::Error + 'static)> = io.get_ref().map(|e| e as _);
    while let Some(error) = next {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|e| e as _),
            None => error.source(),
        };
    }
    None
}

/// What a peer's error answer says: its status, and the code and message of its error
/// body when it has one (a refusal by the peer gate names what was wrong: a missing or
/// wrong secret, a certificate for another node, a node that is not a member).
fn refusal_text(status: http::StatusCode, body: &[u8]) -> String {
    match serde_json::from_slice::<cairn_api::ErrorBody>(body) {
        Ok(refused) => format!(
            "peer answered HTTP {status}: {}: {}",
            refused.error.code.as_str(),
            refused.error.message
        ),
        Err(_) => format!("peer answered HTTP {status}"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use axum::extract::ConnectInfo;
    use axum::routing::post;
    use openraft::error::Infallible;

    type Seen = Arc<Mutex<HashSet<SocketAddr>>>;

    #[test]
    fn a_refusal_names_its_code_and_reason_and_other_answers_their_status() {
        let forbidden = br#"{"error":{"code":"permission_denied","message":"wrong peer secret"}}"#;
        assert_eq!(
            refusal_text(http::StatusCode::FORBIDDEN, forbidden),
            "peer answered HTTP 403 Forbidden: permission_denied: wrong peer secret"
        );
        assert_eq!(
            refusal_text(http::StatusCode::BAD_GATEWAY, b"<html>proxy</html>"),
            "peer answered HTTP 502 Bad Gateway"
        );
    }

    /// A peer whose `/echo` answers the bincode `u64` it was sent; `1` is answered after
    /// 1.5 s. With `close`, every answer also closes the connection. Also returns the
    /// client addresses (one per connection) it was called from.
    async fn echo_peer(close: bool) -> (String, Seen) {
        let seen = Seen::default();
        let record = seen.clone();
        let handler = move |ConnectInfo(from): ConnectInfo<SocketAddr>, body: Bytes| async move {
            record.lock().unwrap().insert(from);
            let n: u64 = codec::decode(&body).expect("a u64 body");
            if n == 1 {
                tokio::time::sleep(Duration::from_millis(1_500)).await;
            }
            let answer = codec::encode(&Ok::<u64, RaftError<NodeId>>(n));
            let connection = if close { "close" } else { "keep-alive" };
            ([(http::header::CONNECTION, connection)], answer)
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = axum::Router::new().route("/echo", post(handler));
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, seen)
    }

    fn network(client: &PeerClient, peer_addr: &str) -> PeerNetwork {
        PeerNetwork {
            client: client.clone(),
            target: 2,
            peer_addr: peer_addr.to_string(),
        }
    }

    fn client() -> PeerClient {
        let proof = ClientProof {
            own_id: 1,
            secret: None,
        };
        PeerClient::new(None, Duration::from_secs(1), proof, None)
    }

    async fn echo(net: &PeerNetwork, n: u64, ttl_ms: u64) -> Result<u64, String> {
        let option = RPCOption::new(Duration::from_millis(ttl_ms));
        net.rpc::<u64, u64, Infallible>("/echo", &n, &option)
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn network_clients_made_one_after_another_share_one_connection() {
        let (addr, seen) = echo_peer(false).await;
        let client = client();
        // openraft makes a new network client for every leadership check.
        for n in 2..12 {
            assert_eq!(echo(&network(&client, &addr), n, 2_000).await, Ok(n));
        }
        assert_eq!(seen.lock().unwrap().len(), 1, "connections opened");
    }

    #[tokio::test]
    async fn after_a_timeout_the_next_rpc_does_not_wait_behind_the_lost_answer() {
        let (addr, seen) = echo_peer(false).await;
        let net = network(&client(), &addr);
        let late = echo(&net, 1, 100).await;
        assert!(late.is_err(), "answered within 100 ms: {late:?}");
        // Queued behind `1`'s answer (1.4 s more), `2` would time out.
        assert_eq!(echo(&net, 2, 500).await, Ok(2));
        assert_eq!(echo(&net, 3, 500).await, Ok(3));
        assert_eq!(
            seen.lock().unwrap().len(),
            2,
            "the timed-out connection was reused"
        );
    }

    #[tokio::test]
    async fn a_connection_the_peer_closed_is_replaced_by_the_next_rpc() {
        let (addr, seen) = echo_peer(true).await;
        let net = network(&client(), &addr);
        for n in 2..6 {
            assert_eq!(echo(&net, n, 2_000).await, Ok(n));
        }
        assert_eq!(seen.lock().unwrap().len(), 4, "one connection per answer");
    }

    #[tokio::test]
    async fn an_rpc_to_a_closed_port_is_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let option = RPCOption::new(Duration::from_millis(500));
        let err = network(&client(), &addr)
            .rpc::<u64, u64, Infallible>("/echo", &2, &option)
            .await
            .unwrap_err();
        assert!(matches!(err, RPCError::Unreachable(_)), "{err}");
    }
}
