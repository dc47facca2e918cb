//! The client side of the peer transport.

use std::net::IpAddr;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{APPEND_PATH, CONTENT_TYPE, READ_INDEX_PATH, SNAPSHOT_PATH, VOTE_PATH};
use crate::consensus::{NodeId, NodeInfo, TypeConfig};
use crate::store::codec;

/// Backoff after a peer was unreachable: 50 ms doubling to 1 s, so a dead peer costs at
/// most a connection attempt per second.
const BACKOFF_START_MS: u64 = 50;
const BACKOFF_MAX_MS: u64 = 1000;
/// Idle pooled connections kept per peer.
const POOL_IDLE_PER_HOST_MAX: usize = 8;

/// A pooled HTTP client for peer RPCs. Outgoing connections bind the node's own peer IP,
/// so a test harness can cut a precise pair of nodes with packet filters.
#[derive(Clone)]
pub struct PeerClient {
    http: reqwest::Client,
}

impl PeerClient {
    pub fn new(local_ip: Option<IpAddr>, connect_timeout: Duration) -> anyhow::Result<PeerClient> {
        let http = reqwest::Client::builder()
            .local_address(local_ip)
            .connect_timeout(connect_timeout)
            .pool_max_idle_per_host(POOL_IDLE_PER_HOST_MAX)
            .tcp_nodelay(true)
            .no_proxy()
            .build()?;
        Ok(PeerClient { http })
    }

    /// POSTs a bincode body and decodes a bincode `Result<Resp, Err>` answer.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned, Err: DeserializeOwned>(
        &self,
        peer_addr: &str,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Result<Resp, Err>, CallError> {
        let url = format!("http://{peer_addr}{path}");
        let resp = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .body(codec::encode(req))
            .timeout(timeout)
            .send()
            .await
            .map_err(CallError::from_send)?;
        if !resp.status().is_success() {
            return Err(CallError::Network(std::io::Error::other(format!(
                "peer answered HTTP {}",
                resp.status()
            ))));
        }
        let body = resp
            .bytes()
            .await
            .map_err(|e| CallError::Network(std::io::Error::other(e)))?;
        codec::decode(&body).map_err(|e| CallError::Network(std::io::Error::other(e)))
    }

    /// Asks the leader for a quorum-confirmed commit index (ReadIndex).
    pub async fn read_index(
        &self,
        leader_peer_addr: &str,
        timeout: Duration,
    ) -> Result<u64, String> {
        match self
            .call::<(), u64, String>(leader_peer_addr, READ_INDEX_PATH, &(), timeout)
            .await
        {
            Ok(answer) => answer,
            Err(e) => Err(e.to_string()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("unreachable: {0}")]
    Unreachable(std::io::Error),
    #[error("network: {0}")]
    Network(std::io::Error),
}

impl CallError {
    fn from_send(e: reqwest::Error) -> CallError {
        if e.is_connect() {
            CallError::Unreachable(std::io::Error::other(e))
        } else {
            CallError::Network(std::io::Error::other(e))
        }
    }

    fn into_rpc<E: std::error::Error>(self) -> RPCError<NodeId, NodeInfo, E> {
        match self {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
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
            .call::<Req, Resp, RaftError<NodeId, E>>(&self.peer_addr, path, req, option.hard_ttl())
            .await
        {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(remote)) => Err(RPCError::RemoteError(RemoteError::new(self.target, remote))),
            Err(e) => Err(e.into_rpc()),
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
