//! Raft RPCs between peers: HTTP on the peer port, bincode bodies (no JSON on this path).
//!
//! - `server`: axum routes that hand requests to the local `Raft`.
//! - `admission`: whether this node may answer votes, appends and snapshots at all (a
//!   data dir without Raft state answers only once an init or a join admitted it).
//! - `vouch`: with mutual TLS, a node this node's membership does not list yet passes once
//!   a member it does list says that its own membership lists it.
//! - `proof`: peer proof (mutual TLS naming `node-<ID>`, or a shared secret on loopback),
//!   checked before a request's body is read.
//! - bodies are `store::codec` frames, decoded bounded by their length (the body itself
//!   is capped before decoding).
//! - `network`: the client side: `PeerClient` (self-driven HTTP/1.1 connections in a small
//!   pool per peer) and openraft's `RaftNetworkFactory` over it, with timeouts from
//!   openraft's `RPCOption` and exponential backoff on unreachable peers.
//!
//! Paths are shared by both sides through the constants below.

pub mod admission;
pub mod network;
pub mod proof;
pub mod server;
pub mod vouch;

pub const APPEND_PATH: &str = "/raft/append";
pub const VOTE_PATH: &str = "/raft/vote";
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";
/// Leader confirms its commit index with a quorum (ReadIndex) for a follower's read token.
pub const READ_INDEX_PATH: &str = "/raft/read-index";
/// How a node's peer port admits callers (`cairn_config::PeerProof`): a leader asks a
/// joining node before promoting it, since a node that admits anyone presents no proof
/// either, and the members would refuse its own requests.
pub const PROOF_MODE_PATH: &str = "/raft/proof-mode";
/// A node's admission (`admission::AdmitRequest`): asked, or given by the node that
/// initializes the cluster or the leader that joins it.
pub const ADMIT_PATH: &str = "/raft/admit";
/// Whether the answering node's membership lists a node id (`vouch`).
pub const MEMBER_PATH: &str = "/raft/member";
/// Whether the answering node has applied a log index, waiting a moment for it: a leader
/// asks before it answers an access change (`api::auth`).
pub const APPLIED_PATH: &str = "/raft/applied";
pub const CONTENT_TYPE: &str = "application/x-cairn-bincode";
