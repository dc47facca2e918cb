//! Glue between the wire types of [`crate::api`] and the [`crate::Client`]: the two traits
//! that let one generic path serve every mutation ([`Mutation`]) and every
//! consistency-carrying read ([`ReadQuery`]).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::{
    BatchRequest, BatchResult, FlagStaleRequest, ForgetRequest, HistoryRequest, HistoryResponse,
    ListRequest, ListResponse, MutationResult, ProbeRequest, ProbeResponse, ReadOptions,
    ReadRequest, ReadResponse, RecallRequest, RecallResponse, ReinstateRequest, RevokeRequest,
    SupersedeRequest, WriteRequest,
};
use crate::session::Observable;

/// A request the client sends to the leader as one logged mutation, under a `request_id`.
pub trait Mutation: Serialize + Send + Sync {
    /// What the node answers on success.
    type Output: DeserializeOwned + Observable + Send;
    /// Last segment of `POST /v1/{PATH}`.
    const PATH: &'static str;
    /// The request's `request_id`, filled by the client when the caller left it empty.
    fn request_id_mut(&mut self) -> &mut Option<String>;
}

/// A read that carries consistency options (SPEC §3) and reports key states.
pub trait ReadQuery: Serialize + Send + Sync {
    type Output: DeserializeOwned + Observable + Send;
    /// Last segment of `POST /v1/{PATH}`.
    const PATH: &'static str;
    fn options(&self) -> ReadOptions;
    fn set_options(&mut self, options: ReadOptions);
}

macro_rules! mutation {
    ($request:ty, $output:ty, $path:literal) => {
        impl Mutation for $request {
            type Output = $output;
            const PATH: &'static str = $path;
            fn request_id_mut(&mut self) -> &mut Option<String> {
                &mut self.request_id
            }
        }
    };
}

mutation!(WriteRequest, MutationResult, "write");
mutation!(ForgetRequest, MutationResult, "forget");
mutation!(RevokeRequest, MutationResult, "revoke");
mutation!(ReinstateRequest, MutationResult, "reinstate");
mutation!(FlagStaleRequest, MutationResult, "flag-stale");
mutation!(SupersedeRequest, MutationResult, "supersede");
mutation!(BatchRequest, BatchResult, "batch");

macro_rules! read_query {
    ($request:ty, $output:ty, $path:literal) => {
        impl ReadQuery for $request {
            type Output = $output;
            const PATH: &'static str = $path;
            fn options(&self) -> ReadOptions {
                ReadOptions {
                    consistency: self.consistency,
                    max_staleness_ms: self.max_staleness_ms,
                    min_revision: self.min_revision,
                }
            }
            fn set_options(&mut self, options: ReadOptions) {
                self.consistency = options.consistency;
                self.max_staleness_ms = options.max_staleness_ms;
                self.min_revision = options.min_revision;
            }
        }
    };
}

read_query!(ReadRequest, ReadResponse, "read");
read_query!(ProbeRequest, ProbeResponse, "probe");
read_query!(HistoryRequest, HistoryResponse, "history");
read_query!(ListRequest, ListResponse, "list");
read_query!(RecallRequest, RecallResponse, "recall");
