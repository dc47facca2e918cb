//! Runs one [`Input`] through the client library and classifies the answer.
//!
//! - Mutations: a success is `ok`; a definite rejection (400, 404, 409, 413, 422) is
//!   `fail` with its code; anything else (timeout, `outcome_unknown`, `no_leader`,
//!   transport) is `info`, since the mutation may have reached a node.
//! - Reads: a record or a 404 is `ok`; every error is `fail` (a read has no effect).

use cairn_api::{
    BatchOp, BatchRequest, ForgetRequest, MutationResult, ReadOptions, ReadResponse,
    ReinstateRequest, RevokeRequest, WriteRequest,
};
use cairn_client::{Client, ClientError};
use serde_json::json;

use crate::chaos::history::{Input, MutOut, Outcome, Output, ReadOut, Record, Recorder, Workload};

/// The actor a harness mutation names: `chaos/<request_id>` of the request (the batch's
/// for a batch op), so every event in a key's history says which operation made it. In a
/// `--secure` run the actor is bound to the token's principal (SPEC §8), so it is left
/// empty and the node records the admin's name.
fn actor(request_id: &str) -> String {
    if crate::chaos::secure::is_on() {
        return String::new();
    }
    format!("chaos/{request_id}")
}

fn write_request(input: &Input, actor: &str) -> Option<WriteRequest> {
    let Input::Write {
        key,
        value,
        expected_version,
        based_on_revision,
        clear_tombstone,
        override_revocation,
        request_id,
    } = input
    else {
        return None;
    };
    let mut w = WriteRequest::new(key.clone(), json!(value), actor);
    w.expected_version = *expected_version;
    w.based_on_revision = *based_on_revision;
    w.clear_tombstone = *clear_tombstone;
    w.override_revocation = *override_revocation;
    w.request_id = (!request_id.is_empty()).then(|| request_id.clone());
    Some(w)
}

fn forget_request(
    key: &str,
    expected: Option<u64>,
    request_id: &str,
    actor: &str,
) -> ForgetRequest {
    let mut f = ForgetRequest::new(key, actor, "chaos: forget");
    f.expected_version = expected;
    f.request_id = (!request_id.is_empty()).then(|| request_id.to_string());
    f
}

fn batch_op(input: &Input, actor: &str) -> Option<BatchOp> {
    match input {
        Input::Write { .. } => write_request(input, actor).map(BatchOp::Write),
        Input::Forget {
            key,
            expected_version,
            ..
        } => Some(BatchOp::Forget(forget_request(
            key,
            *expected_version,
            "",
            actor,
        ))),
        _ => None,
    }
}

pub fn mut_out(r: &MutationResult) -> MutOut {
    MutOut {
        key: r.key.clone(),
        state: r.state,
        version: r.version,
        generation: r.generation,
        forget_epoch: r.forget_epoch,
        revision: r.revision,
        replayed: r.replayed,
        already: r.already.unwrap_or(false),
        tombstone_id: r.tombstone.as_ref().map(|t| t.id.clone()),
    }
}

pub fn read_out(r: &ReadResponse) -> ReadOut {
    ReadOut {
        state: r.record.state,
        value: r.record.value.as_ref().and_then(|v| v.as_i64()),
        version: r.record.version,
        generation: r.record.generation,
        forget_epoch: r.record.forget_epoch,
        revision: r.record.revision,
        tombstone_id: r.record.tombstone.as_ref().map(|t| t.id.clone()),
        served_node: r.served.node_id,
        served_consistency: r.served.consistency,
        applied_index: r.served.applied_index,
    }
}

pub fn error_output(e: &ClientError) -> Output {
    let op_index = match e {
        ClientError::VersionConflict { op_index, .. }
        | ClientError::KeyForgotten { op_index, .. }
        | ClientError::KeyRevoked { op_index, .. }
        | ClientError::StaleWrite { op_index, .. }
        | ClientError::InvalidTransition { op_index, .. } => *op_index,
        _ => None,
    };
    Output::Error {
        code: e.name().to_string(),
        message: e.to_string(),
        op_index,
    }
}

/// Whether a mutation error proves the mutation was not applied.
pub fn is_definite(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::InvalidRequest { .. }
            | ClientError::NotFound { .. }
            | ClientError::VersionConflict { .. }
            | ClientError::KeyForgotten { .. }
            | ClientError::KeyRevoked { .. }
            | ClientError::StaleWrite { .. }
            | ClientError::InvalidTransition { .. }
            | ClientError::TooLarge { .. }
            | ClientError::RequestIdReused { .. }
    )
}

/// Sends a mutation once (the client library retries inside under the same id).
pub async fn send_mutation(client: &Client, input: &Input) -> Result<Vec<MutOut>, ClientError> {
    let one = |r: MutationResult| vec![mut_out(&r)];
    match input {
        Input::Write { request_id, .. } => client
            .write(write_request(input, &actor(request_id)).expect("a write"))
            .await
            .map(one),
        Input::Forget {
            key,
            expected_version,
            request_id,
        } => client
            .forget(forget_request(
                key,
                *expected_version,
                request_id,
                &actor(request_id),
            ))
            .await
            .map(one),
        Input::Revoke { key, request_id } => {
            let mut r = RevokeRequest::new(key.clone(), actor(request_id), "chaos: revoke");
            r.request_id = Some(request_id.clone());
            client.revoke(r).await.map(one)
        }
        Input::Reinstate { key, request_id } => {
            let mut r = ReinstateRequest::new(key.clone(), actor(request_id));
            r.request_id = Some(request_id.clone());
            client.reinstate(r).await.map(one)
        }
        Input::Batch { ops, request_id } => {
            let request = BatchRequest {
                ops: ops
                    .iter()
                    .filter_map(|op| batch_op(op, &actor(request_id)))
                    .collect(),
                request_id: Some(request_id.clone()),
            };
            client
                .batch(request)
                .await
                .map(|b| b.results.iter().map(mut_out).collect())
        }
        Input::Read { .. } => Err(ClientError::InvalidInput {
            message: "not a mutation".into(),
        }),
    }
}

/// Classifies a mutation's answer.
pub fn mutation_outcome(answer: Result<Vec<MutOut>, ClientError>) -> (Outcome, Output) {
    match answer {
        Ok(results) => (Outcome::Ok, Output::Mutation { results }),
        Err(e) if is_definite(&e) => (Outcome::Fail, error_output(&e)),
        Err(e) => (Outcome::Info, error_output(&e)),
    }
}

/// Records and runs one mutation.
pub async fn mutate(
    rec: &Recorder,
    process: u64,
    workload: Workload,
    client: &Client,
    input: Input,
) -> Record {
    let pending = rec.invoke(process, workload, input);
    let answer = send_mutation(client, &pending.input).await;
    let (outcome, output) = mutation_outcome(answer);
    rec.complete(pending, outcome, output)
}

/// Sends a read.
pub async fn send_read(client: &Client, input: &Input) -> Result<Option<ReadOut>, ClientError> {
    let Input::Read {
        key,
        consistency,
        max_staleness_ms,
        ..
    } = input
    else {
        return Err(ClientError::InvalidInput {
            message: "not a read".into(),
        });
    };
    let options = ReadOptions {
        consistency: Some(*consistency),
        max_staleness_ms: *max_staleness_ms,
        min_revision: None,
    };
    match client.read(key, options).await {
        Ok(r) => Ok(Some(read_out(&r))),
        Err(ClientError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Records and runs one read.
pub async fn read(
    rec: &Recorder,
    process: u64,
    workload: Workload,
    client: &Client,
    input: Input,
) -> Record {
    let pending = rec.invoke(process, workload, input);
    let (outcome, output) = match send_read(client, &pending.input).await {
        Ok(found) => (Outcome::Ok, Output::Read { rec: found }),
        Err(e) => (Outcome::Fail, error_output(&e)),
    };
    rec.complete(pending, outcome, output)
}

/// Resends an `info` mutation (same `request_id`, identical payload) to learn whether it
/// applied; returns the updated record.
pub async fn resolve(rec: &Recorder, record: &Record, process: u64, client: &Client) -> Record {
    let pending = rec.reopen(record, process);
    let answer = send_mutation(client, &pending.input).await;
    let (outcome, output) = mutation_outcome(answer);
    rec.complete(pending, outcome, output)
}
