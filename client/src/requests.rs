//! Glue between the wire types of [`crate::api`] and the [`crate::Client`]: constructors for
//! the request types (only the required fields; set the optional ones on the returned
//! struct), and the two traits that let one generic path serve every mutation
//! ([`Mutation`]) and every consistency-carrying read ([`ReadQuery`]).

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

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

/// `new(key, options)` for the reads of one key.
macro_rules! keyed_read {
    ($request:ident) => {
        impl $request {
            pub fn new(key: impl Into<String>, options: ReadOptions) -> Self {
                $request {
                    key: key.into(),
                    consistency: options.consistency,
                    max_staleness_ms: options.max_staleness_ms,
                    min_revision: options.min_revision,
                }
            }
        }
    };
}

keyed_read!(ReadRequest);
keyed_read!(ProbeRequest);
keyed_read!(HistoryRequest);

impl WriteRequest {
    pub fn new(key: impl Into<String>, value: Value, actor: impl Into<String>) -> Self {
        WriteRequest {
            key: key.into(),
            value,
            actor: actor.into(),
            source: None,
            anchors: None,
            tags: None,
            expected_version: None,
            based_on_revision: None,
            clear_tombstone: false,
            override_revocation: false,
            reason: None,
            request_id: None,
        }
    }
}

impl ForgetRequest {
    pub fn new(
        key: impl Into<String>,
        actor: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        ForgetRequest {
            key: key.into(),
            actor: actor.into(),
            reason: reason.into(),
            expected_version: None,
            based_on_revision: None,
            request_id: None,
        }
    }
}

impl RevokeRequest {
    pub fn new(
        key: impl Into<String>,
        actor: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        RevokeRequest {
            key: key.into(),
            actor: actor.into(),
            reason: reason.into(),
            expected_version: None,
            based_on_revision: None,
            request_id: None,
        }
    }
}

impl ReinstateRequest {
    pub fn new(key: impl Into<String>, actor: impl Into<String>) -> Self {
        ReinstateRequest {
            key: key.into(),
            actor: actor.into(),
            reason: None,
            expected_version: None,
            based_on_revision: None,
            request_id: None,
        }
    }
}

impl FlagStaleRequest {
    pub fn new(
        key: impl Into<String>,
        actor: impl Into<String>,
        anchor: impl Into<String>,
        observed_hash: impl Into<String>,
    ) -> Self {
        FlagStaleRequest {
            key: key.into(),
            actor: actor.into(),
            anchor: anchor.into(),
            observed_hash: observed_hash.into(),
            expected_version: None,
            based_on_revision: None,
            request_id: None,
        }
    }
}

impl SupersedeRequest {
    pub fn new(key: impl Into<String>, by: impl Into<String>, actor: impl Into<String>) -> Self {
        SupersedeRequest {
            key: key.into(),
            by: by.into(),
            actor: actor.into(),
            reason: None,
            expected_version: None,
            based_on_revision: None,
            request_id: None,
        }
    }
}

impl ListRequest {
    pub fn new(prefix: impl Into<String>) -> Self {
        ListRequest {
            prefix: prefix.into(),
            states: None,
            limit: None,
            after: None,
            consistency: None,
            max_staleness_ms: None,
            min_revision: None,
        }
    }
}

impl RecallRequest {
    pub fn new(cues: Vec<String>) -> Self {
        RecallRequest {
            cues,
            prefix: None,
            include: None,
            limit: None,
            consistency: None,
            max_staleness_ms: None,
            min_revision: None,
        }
    }
}
