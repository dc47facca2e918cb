//! Mutation requests and their results (SPEC §5): `write`, `forget`, `revoke`, `reinstate`,
//! `flag-stale`, `supersede` and `batch`. Constructors take only the required fields; set
//! the optional ones on the returned struct.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::{State, Tombstone};

/// `POST /v1/write`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WriteRequest {
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub key: String,
    /// Any JSON value; an object in it names each member once (a second `a` is 400).
    #[serde(deserialize_with = "crate::strict_value::deserialize")]
    pub value: Value,
    /// Who does it. With auth on it may be omitted (or `null`) and is then the principal's
    /// name; any other name is 403 `actor_mismatch` (SPEC §8).
    #[serde(
        default,
        deserialize_with = "named_actor",
        skip_serializing_if = "String::is_empty"
    )]
    #[cfg_attr(
        feature = "json-schema",
        schemars(with = "Option<String>", pattern(crate::patterns::LINE))
    )]
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "json-schema",
        schemars(inner(pattern(crate::patterns::ANCHOR)))
    )]
    pub anchors: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "json-schema",
        schemars(inner(pattern(crate::patterns::LINE)))
    )]
    pub tags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, deserialize_with = "flag", skip_serializing_if = "is_false")]
    pub clear_tombstone: bool,
    #[serde(default, deserialize_with = "flag", skip_serializing_if = "is_false")]
    pub override_revocation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::REASON)))]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub request_id: Option<String>,
}

/// `POST /v1/forget`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ForgetRequest {
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub key: String,
    /// Who does it. With auth on it may be omitted (or `null`) and is then the principal's
    /// name; any other name is 403 `actor_mismatch` (SPEC §8).
    #[serde(
        default,
        deserialize_with = "named_actor",
        skip_serializing_if = "String::is_empty"
    )]
    #[cfg_attr(
        feature = "json-schema",
        schemars(with = "Option<String>", pattern(crate::patterns::LINE))
    )]
    pub actor: String,
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::REASON)))]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub request_id: Option<String>,
}

/// `POST /v1/revoke`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RevokeRequest {
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub key: String,
    /// Who does it. With auth on it may be omitted (or `null`) and is then the principal's
    /// name; any other name is 403 `actor_mismatch` (SPEC §8).
    #[serde(
        default,
        deserialize_with = "named_actor",
        skip_serializing_if = "String::is_empty"
    )]
    #[cfg_attr(
        feature = "json-schema",
        schemars(with = "Option<String>", pattern(crate::patterns::LINE))
    )]
    pub actor: String,
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::REASON)))]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub request_id: Option<String>,
}

/// `POST /v1/reinstate`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReinstateRequest {
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub key: String,
    /// Who does it. With auth on it may be omitted (or `null`) and is then the principal's
    /// name; any other name is 403 `actor_mismatch` (SPEC §8).
    #[serde(
        default,
        deserialize_with = "named_actor",
        skip_serializing_if = "String::is_empty"
    )]
    #[cfg_attr(
        feature = "json-schema",
        schemars(with = "Option<String>", pattern(crate::patterns::LINE))
    )]
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::REASON)))]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub request_id: Option<String>,
}

/// `POST /v1/flag-stale`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FlagStaleRequest {
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub key: String,
    /// Who does it. With auth on it may be omitted (or `null`) and is then the principal's
    /// name; any other name is 403 `actor_mismatch` (SPEC §8).
    #[serde(
        default,
        deserialize_with = "named_actor",
        skip_serializing_if = "String::is_empty"
    )]
    #[cfg_attr(
        feature = "json-schema",
        schemars(with = "Option<String>", pattern(crate::patterns::LINE))
    )]
    pub actor: String,
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::ANCHOR)))]
    pub anchor: String,
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub observed_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub request_id: Option<String>,
}

/// `POST /v1/supersede`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SupersedeRequest {
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub key: String,
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub by: String,
    /// Who does it. With auth on it may be omitted (or `null`) and is then the principal's
    /// name; any other name is 403 `actor_mismatch` (SPEC §8).
    #[serde(
        default,
        deserialize_with = "named_actor",
        skip_serializing_if = "String::is_empty"
    )]
    #[cfg_attr(
        feature = "json-schema",
        schemars(with = "Option<String>", pattern(crate::patterns::LINE))
    )]
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::REASON)))]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on_revision: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub request_id: Option<String>,
}

/// One operation of a `POST /v1/batch`, tagged by `op`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum BatchOp {
    Write(WriteRequest),
    Forget(ForgetRequest),
    Revoke(RevokeRequest),
    Reinstate(ReinstateRequest),
    FlagStale(FlagStaleRequest),
    Supersede(SupersedeRequest),
}

impl BatchOp {
    /// The operation's `actor`, for the node to bind to the authenticated principal.
    pub fn actor_mut(&mut self) -> &mut String {
        match self {
            BatchOp::Write(r) => &mut r.actor,
            BatchOp::Forget(r) => &mut r.actor,
            BatchOp::Revoke(r) => &mut r.actor,
            BatchOp::Reinstate(r) => &mut r.actor,
            BatchOp::FlagStale(r) => &mut r.actor,
            BatchOp::Supersede(r) => &mut r.actor,
        }
    }

    pub fn key(&self) -> &str {
        match self {
            BatchOp::Write(r) => &r.key,
            BatchOp::Forget(r) => &r.key,
            BatchOp::Revoke(r) => &r.key,
            BatchOp::Reinstate(r) => &r.key,
            BatchOp::FlagStale(r) => &r.key,
            BatchOp::Supersede(r) => &r.key,
        }
    }

    pub fn request_id(&self) -> Option<&str> {
        match self {
            BatchOp::Write(r) => r.request_id.as_deref(),
            BatchOp::Forget(r) => r.request_id.as_deref(),
            BatchOp::Revoke(r) => r.request_id.as_deref(),
            BatchOp::Reinstate(r) => r.request_id.as_deref(),
            BatchOp::FlagStale(r) => r.request_id.as_deref(),
            BatchOp::Supersede(r) => r.request_id.as_deref(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            BatchOp::Write(_) => "write",
            BatchOp::Forget(_) => "forget",
            BatchOp::Revoke(_) => "revoke",
            BatchOp::Reinstate(_) => "reinstate",
            BatchOp::FlagStale(_) => "flag_stale",
            BatchOp::Supersede(_) => "supersede",
        }
    }
}

/// `POST /v1/batch`: all operations are applied in one Raft entry, or none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub ops: Vec<BatchOp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(pattern(crate::patterns::LINE)))]
    pub request_id: Option<String>,
}

/// Result of one applied mutation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct MutationResult {
    pub key: String,
    pub state: State,
    pub version: u64,
    pub generation: u64,
    pub forget_epoch: u64,
    pub revision: u64,
    pub replayed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub already: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone: Option<Tombstone>,
}

/// Result of `POST /v1/batch`: one result per operation, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
pub struct BatchResult {
    pub results: Vec<MutationResult>,
    pub revision: u64,
    pub replayed: bool,
}

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

fn is_false(b: &bool) -> bool {
    !*b
}

/// A flag sent as `null` is off, as `null` means "left out" for every optional field.
fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(deserializer)?.unwrap_or(false))
}

/// An `actor` a body names must name someone. Leaving the field out, or sending `null` as
/// every other optional field allows, is how a caller on an auth-on cluster asks for its
/// principal's name (the field is then empty); an empty string sent on purpose is a
/// malformed actor (SPEC §5: 1–128 bytes), refused as such rather than read as "left out".
///
/// The refusal's message starts with [`EMPTY_ACTOR`], by which a node adds the size details
/// its other size refusals carry (decoding knows no limits).
fn named_actor<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let Some(actor) = Option::<String>::deserialize(deserializer)? else {
        return Ok(String::new());
    };
    if actor.is_empty() {
        return Err(serde::de::Error::custom(format!(
            "{EMPTY_ACTOR}: name who acts (with auth on, leave the field out to act as the \
             token's principal)"
        )));
    }
    Ok(actor)
}

/// How the refusal of an `actor` sent as `""` begins.
pub const EMPTY_ACTOR: &str = "actor must not be empty";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_actor_is_left_out_and_an_empty_one_is_refused() {
        let null: WriteRequest =
            serde_json::from_str(r#"{"key":"k","value":1,"actor":null}"#).unwrap();
        let absent: WriteRequest = serde_json::from_str(r#"{"key":"k","value":1}"#).unwrap();
        assert_eq!(null, absent);
        assert_eq!(null.actor, "");
        let empty = serde_json::from_str::<WriteRequest>(r#"{"key":"k","value":1,"actor":""}"#);
        assert!(empty.unwrap_err().to_string().starts_with(EMPTY_ACTOR));
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let typo = r#"{"key":"k","value":1,"actor":"a","expected_vesion":3}"#;
        let err = serde_json::from_str::<WriteRequest>(typo).unwrap_err();
        assert!(err.to_string().contains("expected_vesion"), "{err}");
    }

    #[test]
    fn batch_ops_are_tagged_and_strict() {
        let ok = r#"{"ops":[{"op":"write","key":"k","value":"v","actor":"a"},
                           {"op":"forget","key":"k","actor":"a","reason":"r"}]}"#;
        let batch: BatchRequest = serde_json::from_str(ok).unwrap();
        assert_eq!(batch.ops.len(), 2);
        assert_eq!(batch.ops[1].name(), "forget");
        let typo =
            r#"{"ops":[{"op":"forget","key":"k","actor":"a","reason":"r","expected_vesion":1}]}"#;
        assert!(serde_json::from_str::<BatchRequest>(typo).is_err());
        let unknown_op = r#"{"ops":[{"op":"erase","key":"k"}]}"#;
        assert!(serde_json::from_str::<BatchRequest>(unknown_op).is_err());
    }

    #[test]
    fn a_null_flag_is_a_flag_left_out() {
        let null = r#"{"key":"k","value":1,"actor":"a","clear_tombstone":null,"override_revocation":null}"#;
        let write: WriteRequest = serde_json::from_str(null).unwrap();
        assert!(!write.clear_tombstone && !write.override_revocation);
        let set = r#"{"key":"k","value":1,"actor":"a","clear_tombstone":true}"#;
        assert!(
            serde_json::from_str::<WriteRequest>(set)
                .unwrap()
                .clear_tombstone
        );
        let wrong = r#"{"key":"k","value":1,"actor":"a","clear_tombstone":"yes"}"#;
        assert!(serde_json::from_str::<WriteRequest>(wrong).is_err());
    }

    #[test]
    fn an_empty_actor_is_refused_and_a_missing_one_is_left_to_auth() {
        let missing: WriteRequest = serde_json::from_str(r#"{"key":"k","value":1}"#).unwrap();
        assert_eq!(missing.actor, "");
        let empty = r#"{"key":"k","value":1,"actor":""}"#;
        let err = serde_json::from_str::<WriteRequest>(empty).unwrap_err();
        assert!(err.to_string().contains("actor must not be empty"), "{err}");
        let in_batch = r#"{"ops":[{"op":"forget","key":"k","actor":"","reason":"r"}]}"#;
        assert!(serde_json::from_str::<BatchRequest>(in_batch).is_err());
        // What the client sends for a missing actor decodes back to one.
        let sent = serde_json::to_string(&ForgetRequest::new("k", "", "r")).unwrap();
        assert!(!sent.contains("actor"), "{sent}");
        assert_eq!(
            serde_json::from_str::<ForgetRequest>(&sent).unwrap().actor,
            ""
        );
    }
}
