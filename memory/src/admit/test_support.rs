//! Helpers shared by the admission tests, and what they all import.

pub(crate) use cairn_api::{BatchRequest, ForgetRequest, RevokeRequest, WriteRequest};
pub(crate) use cairn_config::Limits;
pub(crate) use serde_json::{json, Value};

pub(crate) use crate::admit::*;
pub(crate) use crate::records::ErrorCode;
pub(crate) use crate::types::{Conditions, Mutation, OpError};

pub(crate) fn l() -> Limits {
    Limits::default()
}

pub(crate) fn parse<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

pub(crate) fn write_req(v: Value) -> WriteRequest {
    parse(v)
}

pub(crate) fn details(e: &OpError) -> Value {
    serde_json::from_str(&e.details_json).unwrap()
}

/// Asserts a 400 naming `field`.
pub(crate) fn assert_invalid(r: Result<Mutation, OpError>, field: &str) {
    let e = r.expect_err("expected a rejection");
    assert_eq!(e.code, ErrorCode::InvalidRequest, "{e:?}");
    assert!(
        e.message.starts_with(&format!("{field}: ")),
        "{}",
        e.message
    );
    assert_eq!(details(&e)["field"], field);
}

/// Asserts a 400 for a size: `field`, `limit` and `size`, and nothing else.
pub(crate) fn assert_size(e: OpError, field: &str, size: usize, limit: usize) {
    assert_eq!(e.code, ErrorCode::InvalidRequest, "{e:?}");
    assert_eq!(
        details(&e),
        json!({"field": field, "limit": limit, "size": size}),
        "{}",
        e.message
    );
}
