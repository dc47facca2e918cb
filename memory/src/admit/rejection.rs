//! The shapes of a rejection before the log (SPEC §5, error details): `field` always,
//! `limit` and `size` for a size, `op_index` inside a batch.

use serde_json::{json, Value};

use crate::records::ErrorCode;
use crate::types::OpError;

/// 400 `invalid_request` naming `field`.
pub(super) fn invalid(field: &str, problem: impl std::fmt::Display) -> OpError {
    OpError::new(
        ErrorCode::InvalidRequest,
        format!("{field}: {problem}"),
        json!({ "field": field }),
    )
}

/// 400 `invalid_request` for a size out of bounds: `field`, `limit` (the largest allowed)
/// and `size`, in bytes for a string and in items for a list.
pub(super) fn invalid_size(
    field: &str,
    problem: impl std::fmt::Display,
    size: usize,
    limit: usize,
) -> OpError {
    OpError::new(
        ErrorCode::InvalidRequest,
        format!("{field}: {problem}"),
        json!({ "field": field, "limit": limit, "size": size }),
    )
}

/// How a batch names `text` (a field, or a message that starts with one) of its op `i`:
/// `ops[i].text`. The node names the refusals it makes itself the same way.
pub fn in_op_path(i: usize, text: &str) -> String {
    format!("ops[{i}].{text}")
}

/// Re-addresses an op's error to the batch: `ops[i].` before the field, `op_index: i`.
pub(super) fn in_op(i: usize, e: OpError) -> OpError {
    let mut details: serde_json::Map<String, Value> =
        serde_json::from_str(&e.details_json).unwrap_or_default();
    if let Some(Value::String(field)) = details.get_mut("field") {
        *field = in_op_path(i, field);
    }
    details.insert("op_index".into(), json!(i));
    OpError::new(e.code, in_op_path(i, &e.message), Value::Object(details))
}
