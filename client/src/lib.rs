//! cairn client: the async client library of a cairn cluster. The `cairn` CLI on top of it
//! is its own crate, `cairn-cli` (`cli/`), so a library user does not link clap.
//!
//! ```no_run
//! # async fn demo() -> Result<(), cairn_client::ClientError> {
//! use cairn_client::api::{ForgetRequest, ReadOptions, WriteRequest};
//! use cairn_client::{Client, Session};
//!
//! let client = Client::new(vec!["127.0.0.1:7401".into(), "127.0.0.1:7402".into()])?
//!     .with_session(Session::new());
//! client.write(WriteRequest::new("db/engine", "postgres 16".into(), "agent-a")).await?;
//! client.forget(ForgetRequest::new("db/engine", "agent-a", "moved to sqlite")).await?;
//! // Hand the session to another agent: it can never read the forgotten value back.
//! let token = client.session().unwrap().export_token();
//! let next = Client::new(vec!["127.0.0.1:7403".into()])?
//!     .with_session(Session::import_token(&token)?);
//! let record = next.read("db/engine", ReadOptions::default()).await?;
//! assert_eq!(record.record.state, cairn_client::api::State::Forgotten);
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`api`]: the JSON wire types of SPEC §5/§6 (the `cairn-api` crate, re-exported).
//! - [`requests`]: the [`Mutation`] / [`ReadQuery`] traits that route every mutation
//!   and read through one generic path.
//! - [`client`]: [`Client`] and [`ClientBuilder`]: leader discovery, bounded jittered
//!   retries, automatic `request_id`s and `OutcomeUnknown`, read routing by consistency,
//!   session-checked reads, cluster administration, principals and grants (SPEC §8),
//!   HTTPS with a cluster CA and client certificates; one submodule per job (`builder`,
//!   `routing`, `retry`, `transport`, `tls`, `mutations`, `reads`, `admin`, `auth`).
//! - [`bearer`]: [`BearerToken`], the `Authorization: Bearer` token of every request,
//!   redacted from `Debug` and errors.
//! - [`session`]: [`Session`], the per-agent record of what was seen (SPEC §3 "Forget
//!   epochs on every read"), and its token format.
//! - [`watch`]: `GET /v1/watch` as a resumable [`WatchStream`] (SSE parsing).
//! - [`error`]: [`ClientError`], one variant per SPEC error code plus client-side
//!   failures, with the CLI exit code of each class.
//! - `fake_node` (tests only): a scripted HTTP stand-in for a node, so retry, discovery,
//!   session and watch logic is unit-tested without a cluster.

/// The wire types, re-exported so a client user needs one dependency.
pub use cairn_api as api;

pub mod bearer;
pub mod client;
pub mod env;
pub mod error;
pub mod requests;
pub mod session;
pub mod text;
pub mod watch;

#[cfg(test)]
mod fake_node;

pub use bearer::BearerToken;
pub use client::{new_request_id, Client, ClientBuilder, RetryPolicy};
pub use error::ClientError;
pub use requests::{Mutation, ReadQuery};
pub use session::{KeyMark, Observable, Session};
pub use watch::WatchStream;
