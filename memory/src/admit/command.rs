//! The [`Command`] a request asks the log to apply: one mutation under the request's
//! `request_id`, or a batch, all or nothing.

use cairn_api::{BatchOp, BatchRequest};
use cairn_config::Limits;

use super::fields::single_line;
use super::ops::mutation;
use super::payload_hash::payload_hash;
use super::rejection::{in_op, invalid, invalid_size};
use crate::types::{Command, Mutation, OpError};

/// The command of a single-operation endpoint: `m` from the functions above and the
/// request's `request_id`.
pub fn single(m: Mutation, request_id: Option<String>, l: &Limits) -> Result<Command, OpError> {
    if let Some(id) = &request_id {
        single_line("request_id", id, l.request_id_bytes_max)?;
    }
    Ok(command(request_id, vec![m], false))
}

fn command(request_id: Option<String>, mutations: Vec<Mutation>, is_batch: bool) -> Command {
    let payload_hash = match request_id {
        Some(_) => payload_hash(&mutations, is_batch),
        None => String::new(),
    };
    Command {
        request_id,
        payload_hash,
        mutations,
        is_batch,
    }
}

/// The command of `POST /v1/batch`: every op validated, all or nothing.
pub fn batch(req: &BatchRequest, l: &Limits) -> Result<Command, OpError> {
    if req.ops.is_empty() || req.ops.len() > l.batch_ops_max {
        let problem = format!(
            "{} operations; a batch holds 1 to {}",
            req.ops.len(),
            l.batch_ops_max
        );
        return Err(invalid_size("ops", problem, req.ops.len(), l.batch_ops_max));
    }
    if let Some(id) = &req.request_id {
        single_line("request_id", id, l.request_id_bytes_max)?;
    }
    let mutations = req
        .ops
        .iter()
        .enumerate()
        .map(|(i, op)| batch_op(op, l).map_err(|e| in_op(i, e)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(command(req.request_id.clone(), mutations, true))
}

fn batch_op(op: &BatchOp, l: &Limits) -> Result<Mutation, OpError> {
    if op.request_id().is_some() {
        return Err(invalid(
            "request_id",
            "belongs on the batch, not on one of its ops",
        ));
    }
    mutation(op, l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::test_support::*;

    #[test]
    fn a_size_rejection_inside_a_batch_keeps_limit_and_size() {
        let tags: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
        let req: BatchRequest = parse(json!({"ops": [
            {"op": "write", "key": "k", "value": 1, "actor": "a"},
            {"op": "write", "key": "k", "value": 1, "actor": "a", "tags": tags},
        ]}));
        let e = batch(&req, &l()).unwrap_err();
        assert_eq!(
            details(&e),
            json!({"field": "ops[1].tags", "limit": 64, "size": 65, "op_index": 1})
        );
    }

    #[test]
    fn request_id_is_bounded() {
        let a = write_req(json!({"key": "k", "value": 1, "actor": "a"}));
        let m = write(&a, &l()).unwrap();
        let e = single(m.clone(), Some(String::new()), &l()).unwrap_err();
        assert_eq!(details(&e)["field"], "request_id");
        assert!(single(m.clone(), Some("x".repeat(129)), &l()).is_err());
        assert!(single(m, Some("x".repeat(128)), &l()).is_ok());
    }

    #[test]
    fn batch_validates_every_op_and_names_the_failing_index() {
        let ok: BatchRequest = parse(json!({"ops": [
            {"op": "write", "key": "k", "value": 1, "actor": "a"},
            {"op": "forget", "key": "k", "actor": "a", "reason": "r"},
        ], "request_id": "b1"}));
        let cmd = batch(&ok, &l()).unwrap();
        assert_eq!(
            (cmd.mutations.len(), cmd.is_batch, cmd.request_id.as_deref()),
            (2, true, Some("b1"))
        );

        let bad: BatchRequest = parse(json!({"ops": [
            {"op": "write", "key": "k", "value": 1, "actor": "a"},
            {"op": "revoke", "key": "k", "actor": "a", "reason": " "},
        ]}));
        let e = batch(&bad, &l()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(e.message.starts_with("ops[1].reason: "), "{}", e.message);
        assert_eq!(
            details(&e),
            json!({"field": "ops[1].reason", "op_index": 1})
        );

        let inner_id: BatchRequest = parse(json!({"ops": [
            {"op": "forget", "key": "k", "actor": "a", "reason": "r", "request_id": "x"},
        ]}));
        let e = batch(&inner_id, &l()).unwrap_err();
        assert_eq!(details(&e)["op_index"], 0);
        assert!(
            e.message.starts_with("ops[0].request_id: "),
            "{}",
            e.message
        );
    }

    #[test]
    fn batch_size_is_bounded() {
        let empty: BatchRequest = parse(json!({"ops": []}));
        assert_eq!(details(&batch(&empty, &l()).unwrap_err())["field"], "ops");
        let op = json!({"op": "forget", "key": "k", "actor": "a", "reason": "r"});
        let three: BatchRequest = parse(json!({"ops": [op, op, op]}));
        assert!(batch(
            &three,
            &Limits {
                batch_ops_max: 2,
                ..l()
            }
        )
        .is_err());
        assert!(batch(
            &three,
            &Limits {
                batch_ops_max: 3,
                ..l()
            }
        )
        .is_ok());
    }
}
