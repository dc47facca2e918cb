//! The rule of each field, shared by every operation that carries it. Each rejection is a
//! 400 naming the field (`rejection`).

use std::collections::HashSet;

use cairn_config::Limits;

use super::rejection::{invalid, invalid_size};
use crate::anchors;
use crate::types::{Conditions, OpError};

/// Bound on `observed_hash` (a content hash, typically 64 hex characters); not in
/// [`Limits`] because no deployment has a reason to tune it.
pub const OBSERVED_HASH_BYTES_MAX: usize = 256;

/// Validates a key given anywhere else (reads, probes, history).
pub fn key(field: &str, key: &str, l: &Limits) -> Result<(), OpError> {
    single_line(field, key, l.key_bytes_max)
}

/// Validates a key prefix (list, recall, watch): empty (every key) or a start of a key
/// that may exist, so at most `key_bytes_max` bytes without control characters (a prefix
/// no key can have is a mistake worth naming, not an empty answer).
pub fn prefix(field: &str, prefix: &str, l: &Limits) -> Result<(), OpError> {
    if prefix.len() > l.key_bytes_max {
        return Err(invalid_size(
            field,
            format!("{} bytes; at most {}", prefix.len(), l.key_bytes_max),
            prefix.len(),
            l.key_bytes_max,
        ));
    }
    no_control(field, prefix)
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

/// Validates an `actor`: 1..=`actor_bytes_max` bytes on one line. A node with auth on
/// checks a named actor with this before comparing it with the principal, so a malformed
/// actor is a 400 whoever sends it.
///
/// - An empty actor here was left out while auth is off (with auth on it has become the
///   principal's name by now): the message says it is required, not "0 bytes".
/// - Whitespace alone names no one, as a blank `reason` explains nothing.
pub fn actor(actor: &str, l: &Limits) -> Result<(), OpError> {
    if actor.is_empty() {
        return Err(invalid_size(
            "actor",
            format!(
                "required while auth is off; name who acts (1 to {} bytes)",
                l.actor_bytes_max
            ),
            0,
            l.actor_bytes_max,
        ));
    }
    if actor.trim().is_empty() {
        return Err(invalid("actor", "must not be blank: name who acts"));
    }
    single_line("actor", actor, l.actor_bytes_max)
}

/// A required `reason` (forget, revoke). An empty one is a size under the minimum (with
/// `limit` and `size` 0, as every empty bounded string); whitespace alone explains nothing.
pub(super) fn reason(reason: &str, l: &Limits) -> Result<(), OpError> {
    if reason.is_empty() {
        return Err(empty_reason("is required", l));
    }
    if reason.trim().is_empty() {
        return Err(invalid("reason", "is required and must not be blank"));
    }
    reason_text(reason, l)
}

/// An optional `reason` (write, reinstate, ...): absent is fine, empty or blank is not.
pub(super) fn optional_reason(r: Option<&str>, l: &Limits) -> Result<(), OpError> {
    match r {
        None => Ok(()),
        Some("") => Err(empty_reason(
            "must not be empty when given (leave it out for none)",
            l,
        )),
        Some(r) if r.trim().is_empty() => Err(invalid(
            "reason",
            "must not be blank when given (leave it out for none)",
        )),
        Some(r) => reason_text(r, l),
    }
}

fn empty_reason(what: &str, l: &Limits) -> OpError {
    let max = l.reason_bytes_max;
    invalid_size("reason", format!("{what}: 1 to {max} bytes"), 0, max)
}

fn reason_text(reason: &str, l: &Limits) -> Result<(), OpError> {
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

pub(super) fn anchor(field: &str, text: &str, l: &Limits) -> Result<(), OpError> {
    single_line(field, text, l.anchor_bytes_max)?;
    anchors::parse(text)
        .map(|_| ())
        .map_err(|problem| invalid(field, problem))
}

/// Validated anchors, each kept once, in first-seen order.
pub(super) fn anchor_list(list: &[String], l: &Limits) -> Result<Vec<String>, OpError> {
    within_count("anchors", list, l.anchors_max)?;
    list.iter()
        .enumerate()
        .try_for_each(|(i, a)| anchor(&format!("anchors[{i}]"), a, l))?;
    Ok(dedup(list))
}

/// Validated tags, each kept once, in first-seen order.
pub(super) fn tag_list(list: &[String], l: &Limits) -> Result<Vec<String>, OpError> {
    within_count("tags", list, l.tags_max)?;
    list.iter()
        .enumerate()
        .try_for_each(|(i, t)| single_line(&format!("tags[{i}]"), t, l.tag_bytes_max))?;
    Ok(dedup(list))
}

/// Refuses a list of more than `max` distinct items: a repeated anchor or tag is stored
/// once, so it counts once (SPEC §2). The list is bounded by the body size.
fn within_count(field: &str, list: &[String], max: usize) -> Result<(), OpError> {
    if list.len() <= max {
        return Ok(());
    }
    let distinct = list.iter().collect::<HashSet<_>>().len();
    if distinct <= max {
        return Ok(());
    }
    Err(invalid_size(
        field,
        format!("{distinct} distinct {field}, more than {max}"),
        distinct,
        max,
    ))
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
pub(super) fn single_line(field: &str, text: &str, max: usize) -> Result<(), OpError> {
    bounded(field, text, max)?;
    no_control(field, text)
}

/// No control characters.
fn no_control(field: &str, text: &str) -> Result<(), OpError> {
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

pub(super) fn conditions(
    expected_version: Option<u64>,
    based_on_revision: Option<u64>,
) -> Conditions {
    Conditions {
        expected_version,
        based_on_revision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::test_support::*;

    #[test]
    fn a_prefix_is_empty_or_the_start_of_a_possible_key() {
        assert!(prefix("prefix", "", &l()).is_ok());
        assert!(prefix("prefix", "facts/", &l()).is_ok());
        let e = prefix("prefix", &"k".repeat(l().key_bytes_max + 1), &l()).unwrap_err();
        assert_eq!(details(&e)["field"], "prefix");
        assert_eq!(details(&e)["limit"], l().key_bytes_max);
        assert_eq!(details(&e)["size"], l().key_bytes_max + 1);
        let e = prefix("prefix", "facts/\0", &l()).unwrap_err();
        assert!(e.message.contains("control character"), "{}", e.message);
    }

    #[test]
    fn cues_are_validated() {
        assert!(cues(&["tag:x".into(), "path:src/".into()], &l()).is_ok());
        assert!(cues(&[], &l()).is_err());
        let e = cues(&["tag:x".into(), "bad".into()], &l()).unwrap_err();
        assert_eq!(details(&e)["field"], "cues[1]");
    }
}
