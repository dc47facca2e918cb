//! One function per mutation request: the request's fields checked, its value made
//! canonical JSON, and the [`Mutation`] the log will hold.

use cairn_api::{
    BatchOp, FlagStaleRequest, ForgetRequest, ReinstateRequest, RevokeRequest, SupersedeRequest,
    WriteRequest,
};
use cairn_config::Limits;
use serde_json::json;

use super::fields::{
    actor, anchor, anchor_list, conditions, key, optional_reason, reason, single_line, tag_list,
    OBSERVED_HASH_BYTES_MAX,
};
use super::rejection::{invalid, invalid_size};
use crate::hash::{canonical_json, value_hash};
use crate::records::ErrorCode;
use crate::types::{Mutation, Op, OpError};

/// Most levels of arrays and objects a written value nests. Every answer that carries
/// values wraps them in at most 3 more (a `list` page: the page, its `items`, an item), and
/// JSON decoders stop at 128 levels (serde_json's default, the clients' and the node's), so
/// a stored value never makes a page that holds it unreadable.
pub const VALUE_DEPTH_MAX: usize = 120;

/// Levels of arrays and objects `value` nests (a scalar: 0). The request it came in was
/// decoded within 128 levels, so this recursion is as deep at most.
fn nesting(value: &serde_json::Value) -> usize {
    use serde_json::Value::{Array, Object};
    match value {
        Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
        Object(members) => 1 + members.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

/// `POST /v1/write` → its mutation.
pub fn write(req: &WriteRequest, l: &Limits) -> Result<Mutation, OpError> {
    key("key", &req.key, l)?;
    actor(&req.actor, l)?;
    optional_reason(req.reason.as_deref(), l)?;
    if let Some(source) = &req.source {
        single_line("source", source, l.source_bytes_max)?;
    }
    let depth = nesting(&req.value);
    if depth > VALUE_DEPTH_MAX {
        return Err(invalid_size(
            "value",
            format_args!("nests {depth} levels of arrays and objects, more than {VALUE_DEPTH_MAX}"),
            depth,
            VALUE_DEPTH_MAX,
        ));
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
            value_hash: value_hash(&value),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::test_support::*;

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
    fn a_value_nested_deeper_than_its_limit_is_refused() {
        let nested = |levels: usize| -> serde_json::Value {
            let text = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
            serde_json::from_str(&text).unwrap()
        };
        let limits = Limits::default();
        let at_limit = WriteRequest::new("k", nested(VALUE_DEPTH_MAX), "a");
        assert!(write(&at_limit, &limits).is_ok());
        let deeper = WriteRequest::new("k", nested(VALUE_DEPTH_MAX + 1), "a");
        let refused = write(&deeper, &limits).unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidRequest, "{refused:?}");
        assert_eq!(details(&refused)["field"], "value");
        assert_eq!(details(&refused)["limit"], VALUE_DEPTH_MAX);
        assert_eq!(details(&refused)["size"], VALUE_DEPTH_MAX + 1);
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
        // Left out on an auth-off cluster, nothing fills the actor in: admission refuses
        // it (an empty one in the body is refused when decoded, see cairn-api).
        let mut left_out = write_req(json!({"key": "k", "value": 1}));
        assert!(left_out.actor.is_empty());
        assert_invalid(write(&left_out, &l()), "actor");
        left_out.actor = "x".repeat(129);
        assert_invalid(write(&left_out, &l()), "actor");
        left_out.actor = " \t ".into();
        assert_invalid(write(&left_out, &l()), "actor");
        assert_invalid(w(json!({"source": ""})), "source");
        assert_invalid(w(json!({"anchors": ["tag:x", "file:y"]})), "anchors[1]");
        assert_invalid(w(json!({"anchors": distinct("tag:", 65)})), "anchors");
        assert_invalid(w(json!({"tags": ["ok", ""]})), "tags[1]");
        assert_invalid(w(json!({"tags": distinct("t", 65)})), "tags");
        assert_invalid(w(json!({"reason": "  "})), "reason");
        // A write's reason is optional: a blank one is refused as blank, not as missing.
        let blank = w(json!({"reason": ""})).unwrap_err();
        assert!(blank.message.contains("when given"), "{blank:?}");
    }

    /// `n` different strings starting with `stem`.
    fn distinct(stem: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{stem}{i}")).collect()
    }

    /// The count limits are on what is stored: a repeat counts once (SPEC §2).
    #[test]
    fn a_repeated_anchor_or_tag_counts_once_against_its_limit() {
        let mut anchors = distinct("tag:", 64);
        anchors.push("tag:0".into());
        let mut tags = distinct("t", 64);
        tags.extend(vec!["t1".to_string(); 1000]);
        let req = json!({"key": "k", "value": 1, "actor": "a", "anchors": anchors, "tags": tags});
        let Mutation { op, .. } = write(&write_req(req), &l()).expect("64 distinct of each");
        let crate::types::Op::Write { anchors, tags, .. } = op else {
            panic!("{op:?}")
        };
        assert_eq!((anchors.len(), tags.len()), (64, 64));
        let mut over = distinct("tag:", 65);
        over.extend(distinct("tag:", 65));
        let e = write(
            &write_req(json!({"key": "k", "value": 1, "actor": "a", "anchors": over})),
            &l(),
        )
        .unwrap_err();
        assert_size(e, "anchors", 65, 64);
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
        assert_size(w(json!({"tags": distinct("t", 65)})), "tags", 65, 64);
        assert_size(w(json!({"tags": ["x".repeat(257)]})), "tags[0]", 257, 256);
        assert_size(
            w(json!({"anchors": distinct("tag:", 65)})),
            "anchors",
            65,
            64,
        );
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
    fn forget_and_revoke_require_a_reason() {
        let f: ForgetRequest = parse(json!({"key": "k", "actor": "a", "reason": ""}));
        let empty = forget(&f, &l()).unwrap_err();
        let details: serde_json::Value = serde_json::from_str(&empty.details_json).unwrap();
        // An empty reason is a size under the minimum, as every empty bounded string is.
        assert_eq!(
            details,
            json!({"field": "reason", "limit": 4096, "size": 0}),
            "{empty:?}"
        );
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
}
