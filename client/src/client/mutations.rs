//! Mutations: each is sent to the leader under one `request_id` (assigned here unless
//! the caller set one) and recorded in the session.

use reqwest::Method;

use super::new_request_id;
use super::retry::Mode;
use super::routing::Route;
use super::transport::{encode, read_json, Call};
use super::{Client, Result};
use crate::api::{
    BatchRequest, BatchResult, FlagStaleRequest, ForgetRequest, MutationResult, ReinstateRequest,
    RevokeRequest, SupersedeRequest, WriteRequest,
};
use crate::requests::Mutation;

impl Client {
    pub async fn write(&self, request: WriteRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn forget(&self, request: ForgetRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn revoke(&self, request: RevokeRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn reinstate(&self, request: ReinstateRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn flag_stale(&self, request: FlagStaleRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    pub async fn supersede(&self, request: SupersedeRequest) -> Result<MutationResult> {
        self.mutate(request).await
    }

    /// All operations in one entry, or none (a 409 names the failing `op_index`).
    pub async fn batch(&self, request: BatchRequest) -> Result<BatchResult> {
        self.mutate(request).await
    }

    /// Sends any mutation: assigns a `request_id` if missing, retries under it, and
    /// records the result in the session.
    pub async fn mutate<M: Mutation>(&self, mut request: M) -> Result<M::Output> {
        let request_id = request
            .request_id_mut()
            .get_or_insert_with(new_request_id)
            .clone();
        let call = Call {
            method: Method::POST,
            route: Route::Leader,
            path: &["v1", M::PATH],
            query: Vec::new(),
            body: Some(encode(&request)?),
            mode: Mode::Mutation(request_id),
            timeout: Some(self.timeouts.request),
        };
        let answer: M::Output = self.call(&call, read_json).await?;
        self.observe(&answer);
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use crate::api::ReadOptions;
    use crate::client::test_support::*;
    use crate::fake_node::FakeNode;
    use crate::session::Session;

    #[tokio::test]
    async fn reads_and_mutations_feed_the_session() {
        let node = FakeNode::start(|seen, _| match seen.path.as_str() {
            "/v1/write" => ok(mutation_result(4, 20)),
            _ => ok(read_answer(4, 25)),
        })
        .await;
        let client = pinned(&node).with_session(Session::new());
        client.write(write_request()).await.unwrap();
        assert_eq!(client.session().unwrap().revision(), 20);
        client.read("k", ReadOptions::default()).await.unwrap();
        assert_eq!(body(&node.seen()[1])["min_revision"], 20);
    }
}
