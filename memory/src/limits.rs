//! Input validation and conversion of wire requests into logged commands (SPEC §5).
//!
//! Runs before anything reaches the Raft log, so the log only ever holds valid input and
//! apply never has to reject on shape. Every rejection is 400 `invalid_request` whose
//! message starts with the offending field (`ops[2].key: …` inside a batch) and whose
//! details carry `field` (and `op_index` in a batch), or 413 `too_large` for a value. A
//! rejection for a size also carries `limit` (the largest allowed) and `size`, in the
//! same unit: bytes for a string, items for a list (SPEC §5, error details).
//!
//! Rules:
//! - key: 1..=`key_bytes_max` bytes of UTF-8, no control characters.
//! - value: ≤ `value_bytes_max` bytes as canonical (compact, sorted-keys) JSON, else 413.
//! - actor: 1..=`actor_bytes_max`, no control characters.
//! - reason: required and not blank for forget and revoke, optional elsewhere but never
//!   blank when given; ≤ `reason_bytes_max`; no control characters but newline and tab.
//! - source, tags, anchors, `observed_hash`, `request_id`: bounded, no control characters;
//!   anchors are valid `kind:value`. Repeated anchors or tags are kept once.
//! - supersede `by`: a valid key, different from `key`.
//! - batch: 1..=`batch_ops_max` ops; `request_id` belongs on the batch, never on an op.
//!
//! `payload_hash` (compared on `request_id` replays) is the sha256 of what the request asks
//! the log to do: its validated mutations (each names its operation, so a forget and a
//! revoke with byte-identical bodies differ) and whether they came as a batch, in the
//! codec's binary form. Values are canonical JSON by then and omitted fields hold their
//! defaults, so key order and spelled-out defaults do not change it; the `request_id`
//! is not part of it. A command without a `request_id` carries an empty hash: nothing
//! ever compares it, and hashing every write cost the leader ~5% of its CPU (session 3
//! profile) when it went through `serde_json::Value` and canonical JSON text.

use cairn_api::{
    BatchOp, BatchRequest, FlagStaleRequest, ForgetRequest, ReinstateRequest, RevokeRequest,
    SupersedeRequest, WriteRequest,
};
use cairn_config::Limits;
use serde_json::{json, Value};

use crate::anchors;
use crate::hash::{canonical_json, sha256_hex};
use crate::records::ErrorCode;
use crate::types::{Command, Conditions, Mutation, Op, OpError};

/// Bound on `observed_hash` (a content hash, typically 64 hex characters); not in
/// [`Limits`] because no deployment has a reason to tune it.
pub const OBSERVED_HASH_BYTES_MAX: usize = 256;

/// `POST /v1/write` → its mutation.
pub fn write(req: &WriteRequest, l: &Limits) -> Result<Mutation, OpError> {
    key("key", &req.key, l)?;
    actor(&req.actor, l)?;
    optional_reason(req.reason.as_deref(), l)?;
    if let Some(source) = &req.source {
        single_line("source", source, l.source_bytes_max)?;
    }
    let value = canonical_json(&req.value);
    if value.len() > l.value_bytes_max {
        return Err(OpError::new(
            ErrorCode::TooLarge,
            format!(
                "value: {} bytes as JSON, more than {}",
                value.len(),
                l.value_bytes_max
            ),
            json!({ "field": "value", "size": value.len(), "limit": l.value_bytes_max }),
        ));
    }
    Ok(Mutation {
        op: Op::Write {
            key: req.key.clone(),
            value,
            actor: req.actor.clone(),
            source: req.source.clone(),
            anchors: anchor_list(req.anchors.as_deref().unwrap_or_default(), l)?,
            tags: tag_list(req.tags.as_deref().unwrap_or_default(), l)?,
            clear_tombstone: req.clear_tombstone,
            override_revocation: req.override_revocation,
            reason: req.reason.clone(),
        },
        cond: conditions(req.expected_version, req.based_on_revision),
    })
}

/// `POST /v1/forget` → its mutation.
pub fn forget(req: &ForgetRequest, l: &Limits) -> Result<Mutation, OpError> {
    key("key", &req.key, l)?;
    actor(&req.actor, l)?;
    reason(&req.reason, l)?;
    let op = Op::Forget {
        key: req.key.clone(),
        actor: req.actor.clone(),
        reason: req.reason.clone(),
    };
    Ok(Mutation {
        op,
        cond: conditions(req.expected_version, req.based_on_revision),
    })
}

/// `POST /v1/revoke` → its mutation.
pub fn revoke(req: &RevokeRequest, l: &Limits) -> Result<Mutation, OpError> {
    key("key", &req.key, l)?;
    actor(&req.actor, l)?;
    reason(&req.reason, l)?;
    let op = Op::Revoke {
        key: req.key.clone(),
        actor: req.actor.clone(),
        reason: req.reason.clone(),
    };
    Ok(Mutation {
        op,
        cond: conditions(req.expected_version, req.based_on_revision),
    })
}

/// `POST /v1/reinstate` → its mutation.
pub fn reinstate(req: &ReinstateRequest, l: &Limits) -> Result<Mutation, OpError> {
    key("key", &req.key, l)?;
    actor(&req.actor, l)?;
    optional_reason(req.reason.as_deref(), l)?;
    let op = Op::Reinstate {
        key: req.key.clone(),
        actor: req.actor.clone(),
        reason: req.reason.clone(),
    };
    Ok(Mutation {
        op,
        cond: conditions(req.expected_version, req.based_on_revision),
    })
}

/// `POST /v1/flag-stale` → its mutation.
pub fn flag_stale(req: &FlagStaleRequest, l: &Limits) -> Result<Mutation, OpError> {
    key("key", &req.key, l)?;
    actor(&req.actor, l)?;
    anchor("anchor", &req.anchor, l)?;
    single_line("observed_hash", &req.observed_hash, OBSERVED_HASH_BYTES_MAX)?;
    let op = Op::FlagStale {
        key: req.key.clone(),
        actor: req.actor.clone(),
        anchor: req.anchor.clone(),
        observed_hash: req.observed_hash.clone(),
    };
    Ok(Mutation {
        op,
        cond: conditions(req.expected_version, req.based_on_revision),
    })
}

/// `POST /v1/supersede` → its mutation.
pub fn supersede(req: &SupersedeRequest, l: &Limits) -> Result<Mutation, OpError> {
    key("key", &req.key, l)?;
    key("by", &req.by, l)?;
    if req.by == req.key {
        return Err(invalid("by", "a key cannot supersede itself"));
    }
    actor(&req.actor, l)?;
    optional_reason(req.reason.as_deref(), l)?;
    let op = Op::Supersede {
        key: req.key.clone(),
        by: req.by.clone(),
        actor: req.actor.clone(),
        reason: req.reason.clone(),
    };
    Ok(Mutation {
        op,
        cond: conditions(req.expected_version, req.based_on_revision),
    })
}

/// One operation of a batch → its mutation (no `request_id` check: see [`batch`]).
pub fn mutation(op: &BatchOp, l: &Limits) -> Result<Mutation, OpError> {
    match op {
        BatchOp::Write(r) => write(r, l),
        BatchOp::Forget(r) => forget(r, l),
        BatchOp::Revoke(r) => revoke(r, l),
        BatchOp::Reinstate(r) => reinstate(r, l),
        BatchOp::FlagStale(r) => flag_stale(r, l),
        BatchOp::Supersede(r) => supersede(r, l),
    }
}

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

/// Validates a key given anywhere else (reads, probes, history).
pub fn key(field: &str, key: &str, l: &Limits) -> Result<(), OpError> {
    single_line(field, key, l.key_bytes_max)
}

/// Validates the cues of a recall: 1..=`cues_max`, each a valid anchor.
pub fn cues(cues: &[String], l: &Limits) -> Result<(), OpError> {
    if cues.is_empty() || cues.len() > l.cues_max {
        return Err(invalid_size(
            "cues",
            format!("{} cues; a recall takes 1 to {}", cues.len(), l.cues_max),
            cues.len(),
            l.cues_max,
        ));
    }
    cues.iter()
        .enumerate()
        .try_for_each(|(i, c)| anchor(&format!("cues[{i}]"), c, l))
}

fn actor(actor: &str, l: &Limits) -> Result<(), OpError> {
    single_line("actor", actor, l.actor_bytes_max)
}

fn reason(reason: &str, l: &Limits) -> Result<(), OpError> {
    if reason.trim().is_empty() {
        return Err(invalid("reason", "is required and must not be blank"));
    }
    bounded("reason", reason, l.reason_bytes_max)?;
    match reason
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\t'))
    {
        Some(c) => Err(invalid(
            "reason",
            format!("contains the control character {c:?}"),
        )),
        None => Ok(()),
    }
}

fn optional_reason(r: Option<&str>, l: &Limits) -> Result<(), OpError> {
    r.map_or(Ok(()), |r| reason(r, l))
}

fn anchor(field: &str, text: &str, l: &Limits) -> Result<(), OpError> {
    single_line(field, text, l.anchor_bytes_max)?;
    anchors::parse(text)
        .map(|_| ())
        .map_err(|problem| invalid(field, problem))
}

/// Validated anchors, each kept once, in first-seen order.
fn anchor_list(list: &[String], l: &Limits) -> Result<Vec<String>, OpError> {
    if list.len() > l.anchors_max {
        return Err(invalid_size(
            "anchors",
            format!("{} anchors, more than {}", list.len(), l.anchors_max),
            list.len(),
            l.anchors_max,
        ));
    }
    list.iter()
        .enumerate()
        .try_for_each(|(i, a)| anchor(&format!("anchors[{i}]"), a, l))?;
    Ok(dedup(list))
}

/// Validated tags, each kept once, in first-seen order.
fn tag_list(list: &[String], l: &Limits) -> Result<Vec<String>, OpError> {
    if list.len() > l.tags_max {
        return Err(invalid_size(
            "tags",
            format!("{} tags, more than {}", list.len(), l.tags_max),
            list.len(),
            l.tags_max,
        ));
    }
    list.iter()
        .enumerate()
        .try_for_each(|(i, t)| single_line(&format!("tags[{i}]"), t, l.tag_bytes_max))?;
    Ok(dedup(list))
}

fn dedup(list: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for item in list {
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    out
}

/// 1..=`max` bytes without control characters.
fn single_line(field: &str, text: &str, max: usize) -> Result<(), OpError> {
    bounded(field, text, max)?;
    match text.chars().find(|c| c.is_control()) {
        Some(c) => Err(invalid(
            field,
            format!("contains the control character {c:?}"),
        )),
        None => Ok(()),
    }
}

/// 1..=`max` bytes.
fn bounded(field: &str, text: &str, max: usize) -> Result<(), OpError> {
    if text.is_empty() || text.len() > max {
        return Err(invalid_size(
            field,
            format!("{} bytes; must be 1 to {max}", text.len()),
            text.len(),
            max,
        ));
    }
    Ok(())
}

fn conditions(expected_version: Option<u64>, based_on_revision: Option<u64>) -> Conditions {
    Conditions {
        expected_version,
        based_on_revision,
    }
}

/// sha256 (hex) of the mutations and the batch flag (see the module doc).
fn payload_hash(mutations: &[Mutation], is_batch: bool) -> String {
    let bytes = bincode::serialize(&(PAYLOAD_HASH_DOMAIN, is_batch, mutations))
        .expect("plain data always serializes");
    sha256_hex(&bytes)
}

/// Prefix of every hashed payload; a change of what is hashed changes it, so that old and
/// new hashes can never be equal by accident.
const PAYLOAD_HASH_DOMAIN: &str = "cairn payload v2";

/// 400 `invalid_request` naming `field`.
fn invalid(field: &str, problem: impl std::fmt::Display) -> OpError {
    OpError::new(
        ErrorCode::InvalidRequest,
        format!("{field}: {problem}"),
        json!({ "field": field }),
    )
}

/// 400 `invalid_request` for a size out of bounds: `field`, `limit` (the largest allowed)
/// and `size`, in bytes for a string and in items for a list.
fn invalid_size(
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

/// Re-addresses an op's error to the batch: `ops[i].` before the field, `op_index: i`.
fn in_op(i: usize, e: OpError) -> OpError {
    let mut details: serde_json::Map<String, Value> =
        serde_json::from_str(&e.details_json).unwrap_or_default();
    if let Some(Value::String(field)) = details.get_mut("field") {
        *field = format!("ops[{i}].{field}");
    }
    details.insert("op_index".into(), json!(i));
    OpError::new(
        e.code,
        format!("ops[{i}].{}", e.message),
        Value::Object(details),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn l() -> Limits {
        Limits::default()
    }

    fn parse<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn write_req(v: Value) -> WriteRequest {
        parse(v)
    }

    fn details(e: &OpError) -> Value {
        serde_json::from_str(&e.details_json).unwrap()
    }

    /// Asserts a 400 naming `field`.
    fn assert_invalid(r: Result<Mutation, OpError>, field: &str) {
        let e = r.expect_err("expected a rejection");
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{e:?}");
        assert!(
            e.message.starts_with(&format!("{field}: ")),
            "{}",
            e.message
        );
        assert_eq!(details(&e)["field"], field);
    }

    #[test]
    fn a_full_write_becomes_a_mutation_with_canonical_value() {
        let req = write_req(json!({
            "key": "k", "value": {"b": 1, "a": [true]}, "actor": "agent", "source": "s",
            "anchors": ["path:src/", "tag:x", "path:src/"], "tags": ["t", "t"],
            "expected_version": 3, "based_on_revision": 9, "clear_tombstone": true,
            "override_revocation": true, "reason": "why", "request_id": "r1",
        }));
        let m = write(&req, &l()).unwrap();
        assert_eq!(
            m.cond,
            Conditions {
                expected_version: Some(3),
                based_on_revision: Some(9)
            }
        );
        let Op::Write {
            value,
            anchors,
            tags,
            clear_tombstone,
            override_revocation,
            ..
        } = m.op
        else {
            panic!("not a write: {m:?}");
        };
        assert_eq!(value, r#"{"a":[true],"b":1}"#);
        assert_eq!(anchors, vec!["path:src/".to_string(), "tag:x".to_string()]);
        assert_eq!(tags, vec!["t".to_string()]);
        assert!(clear_tombstone && override_revocation);
    }

    #[test]
    fn keys_are_bounded_utf8_without_control_characters() {
        let base = json!({"value": 1, "actor": "a"});
        let with_key = |k: &str| {
            let mut v = base.clone();
            v["key"] = json!(k);
            write(&write_req(v), &l())
        };
        assert!(with_key("é/ü key").is_ok());
        assert!(with_key(&"x".repeat(512)).is_ok());
        assert_invalid(with_key(""), "key");
        assert_invalid(with_key(&"x".repeat(513)), "key");
        assert_invalid(with_key(&"é".repeat(257)), "key"); // 514 bytes, 257 chars
        assert_invalid(with_key("a\nb"), "key");
        assert_invalid(with_key("a\0b"), "key");
    }

    #[test]
    fn value_over_the_limit_is_too_large() {
        let small = Limits {
            value_bytes_max: 5,
            ..l()
        };
        assert!(write(
            &write_req(json!({"key": "k", "value": "abc", "actor": "a"})),
            &small
        )
        .is_ok());
        let e = write(
            &write_req(json!({"key": "k", "value": "abcd", "actor": "a"})),
            &small,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::TooLarge);
        assert_eq!(details(&e)["size"], 6);
    }

    #[test]
    fn actor_source_tags_and_anchors_are_checked() {
        let w = |extra: Value| {
            let mut v = json!({"key": "k", "value": 1, "actor": "a"});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            write(&write_req(v), &l())
        };
        assert_invalid(w(json!({"actor": ""})), "actor");
        assert_invalid(w(json!({"actor": "x".repeat(129)})), "actor");
        assert_invalid(w(json!({"source": ""})), "source");
        assert_invalid(w(json!({"anchors": ["tag:x", "file:y"]})), "anchors[1]");
        assert_invalid(w(json!({"anchors": vec!["tag:x"; 65]})), "anchors");
        assert_invalid(w(json!({"tags": ["ok", ""]})), "tags[1]");
        assert_invalid(w(json!({"tags": vec!["t"; 65]})), "tags");
        assert_invalid(w(json!({"reason": "  "})), "reason");
    }

    /// Asserts a 400 for a size: `field`, `limit` and `size`, and nothing else.
    fn assert_size(e: OpError, field: &str, size: usize, limit: usize) {
        assert_eq!(e.code, ErrorCode::InvalidRequest, "{e:?}");
        assert_eq!(
            details(&e),
            json!({"field": field, "limit": limit, "size": size}),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_size_rejection_names_the_field_its_limit_and_the_size() {
        let w = |extra: Value| {
            let mut v = json!({"key": "k", "value": 1, "actor": "a"});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            write(&write_req(v), &l()).unwrap_err()
        };
        assert_size(w(json!({"key": "x".repeat(513)})), "key", 513, 512);
        assert_size(w(json!({"key": ""})), "key", 0, 512);
        assert_size(w(json!({"actor": "x".repeat(129)})), "actor", 129, 128);
        assert_size(w(json!({"reason": "x".repeat(4097)})), "reason", 4097, 4096);
        assert_size(w(json!({"source": "x".repeat(1025)})), "source", 1025, 1024);
        assert_size(w(json!({"tags": vec!["t"; 65]})), "tags", 65, 64);
        assert_size(w(json!({"tags": ["x".repeat(257)]})), "tags[0]", 257, 256);
        assert_size(w(json!({"anchors": vec!["tag:x"; 65]})), "anchors", 65, 64);
        let long_anchor = format!("tag:{}", "x".repeat(1021));
        assert_size(
            w(json!({"anchors": [long_anchor]})),
            "anchors[0]",
            1025,
            1024,
        );

        let m = write(
            &write_req(json!({"key": "k", "value": 1, "actor": "a"})),
            &l(),
        )
        .unwrap();
        let e = single(m, Some("x".repeat(129)), &l()).unwrap_err();
        assert_size(e, "request_id", 129, 128);

        let op = json!({"op": "forget", "key": "k", "actor": "a", "reason": "r"});
        let many: BatchRequest = parse(json!({ "ops": vec![op.clone(); 1001] }));
        assert_size(batch(&many, &l()).unwrap_err(), "ops", 1001, 1000);
        let empty: BatchRequest = parse(json!({"ops": []}));
        assert_size(batch(&empty, &l()).unwrap_err(), "ops", 0, 1000);
        let long_id: BatchRequest = parse(json!({"ops": [op], "request_id": "x".repeat(129)}));
        assert_size(batch(&long_id, &l()).unwrap_err(), "request_id", 129, 128);

        let cue_list = vec!["tag:x".to_string(); 65];
        assert_size(cues(&cue_list, &l()).unwrap_err(), "cues", 65, 64);
        assert_size(cues(&[], &l()).unwrap_err(), "cues", 0, 64);
        let long_cue = format!("tag:{}", "x".repeat(1021));
        assert_size(cues(&[long_cue], &l()).unwrap_err(), "cues[0]", 1025, 1024);

        let f: FlagStaleRequest = parse(json!({
            "key": "k", "actor": "a", "anchor": "tag:x", "observed_hash": "h".repeat(257)
        }));
        let e = flag_stale(&f, &l()).unwrap_err();
        assert_size(e, "observed_hash", 257, OBSERVED_HASH_BYTES_MAX);
    }

    #[test]
    fn a_size_rejection_inside_a_batch_keeps_limit_and_size() {
        let req: BatchRequest = parse(json!({"ops": [
            {"op": "write", "key": "k", "value": 1, "actor": "a"},
            {"op": "write", "key": "k", "value": 1, "actor": "a", "tags": vec!["t"; 65]},
        ]}));
        let e = batch(&req, &l()).unwrap_err();
        assert_eq!(
            details(&e),
            json!({"field": "ops[1].tags", "limit": 64, "size": 65, "op_index": 1})
        );
    }

    #[test]
    fn forget_and_revoke_require_a_reason() {
        let f: ForgetRequest = parse(json!({"key": "k", "actor": "a", "reason": ""}));
        assert_invalid(forget(&f, &l()), "reason");
        let r: RevokeRequest = parse(json!({"key": "k", "actor": "a", "reason": " \n"}));
        assert_invalid(revoke(&r, &l()), "reason");
        let r: RevokeRequest = parse(json!({"key": "k", "actor": "a", "reason": "x".repeat(4097)}));
        assert_invalid(revoke(&r, &l()), "reason");
        let r: RevokeRequest =
            parse(json!({"key": "k", "actor": "a", "reason": "multi\nline\tok"}));
        assert!(revoke(&r, &l()).is_ok());
        let r: RevokeRequest = parse(json!({"key": "k", "actor": "a", "reason": "esc\u{1b}[31m"}));
        assert_invalid(revoke(&r, &l()), "reason");
    }

    #[test]
    fn reinstate_flag_stale_and_supersede_are_checked() {
        let r: ReinstateRequest = parse(json!({"key": "k", "actor": "a", "expected_version": 2}));
        assert_eq!(reinstate(&r, &l()).unwrap().cond.expected_version, Some(2));
        let f: FlagStaleRequest =
            parse(json!({"key": "k", "actor": "a", "anchor": "x", "observed_hash": "h"}));
        assert_invalid(flag_stale(&f, &l()), "anchor");
        let f: FlagStaleRequest =
            parse(json!({"key": "k", "actor": "a", "anchor": "path:x", "observed_hash": ""}));
        assert_invalid(flag_stale(&f, &l()), "observed_hash");
        let s: SupersedeRequest = parse(json!({"key": "k", "by": "k", "actor": "a"}));
        assert_invalid(supersede(&s, &l()), "by");
        let s: SupersedeRequest = parse(json!({"key": "k", "by": "", "actor": "a"}));
        assert_invalid(supersede(&s, &l()), "by");
        let s: SupersedeRequest = parse(json!({"key": "k", "by": "k2", "actor": "a"}));
        assert!(
            matches!(supersede(&s, &l()).unwrap().op, Op::Supersede { ref by, .. } if by == "k2")
        );
    }

    #[test]
    fn payload_hash_ignores_request_id_and_key_order_but_not_the_operation() {
        let a = write_req(
            json!({"key": "k", "value": {"x": 1, "y": 2}, "actor": "a", "request_id": "r1"}),
        );
        let b = write_req(
            json!({"value": {"y": 2, "x": 1}, "actor": "a", "key": "k", "request_id": "r2"}),
        );
        let ca = single(write(&a, &l()).unwrap(), a.request_id.clone(), &l()).unwrap();
        let cb = single(write(&b, &l()).unwrap(), b.request_id.clone(), &l()).unwrap();
        assert_eq!(ca.payload_hash, cb.payload_hash);
        assert_eq!(ca.payload_hash.len(), 64, "sha256 hex");
        assert_eq!((ca.request_id.as_deref(), ca.is_batch), (Some("r1"), false));
        let c = write_req(json!({"key": "k", "value": {"x": 1, "y": 3}, "actor": "a"}));
        let cc = single(write(&c, &l()).unwrap(), Some("r3".into()), &l()).unwrap();
        assert_ne!(ca.payload_hash, cc.payload_hash);
        // A default spelled out is the same request.
        let d = write_req(
            json!({"key": "k", "value": {"x": 1, "y": 2}, "actor": "a", "clear_tombstone": false}),
        );
        let cd = single(write(&d, &l()).unwrap(), Some("r4".into()), &l()).unwrap();
        assert_eq!(ca.payload_hash, cd.payload_hash);

        let f: ForgetRequest = parse(json!({"key": "k", "actor": "a", "reason": "r"}));
        let r: RevokeRequest = parse(json!({"key": "k", "actor": "a", "reason": "r"}));
        let id = || Some("r5".to_string());
        let cf = single(forget(&f, &l()).unwrap(), id(), &l()).unwrap();
        let cr = single(revoke(&r, &l()).unwrap(), id(), &l()).unwrap();
        assert_ne!(
            cf.payload_hash, cr.payload_hash,
            "same body, different operation"
        );
    }

    #[test]
    fn a_command_without_request_id_is_not_hashed() {
        let a = write_req(json!({"key": "k", "value": 1, "actor": "a"}));
        let c = single(write(&a, &l()).unwrap(), None, &l()).unwrap();
        assert_eq!((c.request_id, c.payload_hash.as_str()), (None, ""));
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
            {"op": "revoke", "key": "k", "actor": "a", "reason": ""},
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

    #[test]
    fn batch_payload_hash_ignores_only_the_batch_request_id() {
        let a: BatchRequest = parse(
            json!({"ops": [{"op": "reinstate", "key": "k", "actor": "a"}], "request_id": "1"}),
        );
        let b: BatchRequest = parse(
            json!({"ops": [{"op": "reinstate", "key": "k", "actor": "a"}], "request_id": "2"}),
        );
        let c: BatchRequest = parse(
            json!({"ops": [{"op": "revoke", "key": "k", "actor": "a", "reason": "r"}], "request_id": "3"}),
        );
        let hash = |r: &BatchRequest| batch(r, &l()).unwrap().payload_hash;
        assert_eq!(hash(&a), hash(&b));
        assert_ne!(hash(&a), hash(&c));
    }

    #[test]
    fn cues_are_validated() {
        assert!(cues(&["tag:x".into(), "path:src/".into()], &l()).is_ok());
        assert!(cues(&[], &l()).is_err());
        let e = cues(&["tag:x".into(), "bad".into()], &l()).unwrap_err();
        assert_eq!(details(&e)["field"], "cues[1]");
    }
}
