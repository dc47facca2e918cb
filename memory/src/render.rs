//! Delivery (SPEC §4): how a note reads, and the wire records built from a slot.
//!
//! A rendered note puts every warning before the value, so truncating it can never drop
//! the warning:
//! - active: `[KEY] VALUE`
//! - revoked: `[KEY] [REVOKED] Previously believed: VALUE. Revoked TIME by ACTOR: REASON.
//!   Do not re-derive without verification.`
//! - stale: `[KEY] [STALE: ANCHOR changed since written; verify] VALUE` (several flagged
//!   anchors are listed in one marker, comma-separated)
//! - superseded: `[KEY] [SUPERSEDED by KEY2] VALUE`
//! - forgotten: `[KEY] [FORGOTTEN] Forgotten TIME by ACTOR: REASON.`, never the value.
//!
//! When several markers apply they are combined in the order revoked, stale, superseded,
//! and the body is the revoked sentence if revoked, else the value.

use cairn_api::{RecallNote, Record};
use serde_json::Value;

use crate::records::State;
use crate::types::Slot;

/// The text an agent reads for `slot`.
///
/// - Warnings come first; a forgotten slot never shows a value.
pub fn render(slot: &Slot) -> String {
    let mut out = format!("[{}]", slot.key);
    if slot.state == State::Forgotten {
        out.push_str(" [FORGOTTEN]");
        if let Some(t) = &slot.tombstone {
            let at = rfc3339(t.forgotten_at);
            out.push_str(&format!(" Forgotten {at} by {}: {}.", t.actor, t.reason));
        }
        return out;
    }
    if slot.state == State::Revoked {
        out.push_str(" [REVOKED]");
    }
    if !slot.stale.is_empty() {
        let anchors: Vec<&str> = slot.stale.iter().map(|f| f.anchor.as_str()).collect();
        out.push_str(&format!(
            " [STALE: {} changed since written; verify]",
            anchors.join(", ")
        ));
    }
    if let Some(by) = &slot.superseded_by {
        out.push_str(&format!(" [SUPERSEDED by {by}]"));
    }
    let value = slot.value.as_deref().map(display_value).unwrap_or_default();
    match &slot.revocation {
        Some(r) if slot.state == State::Revoked => out.push_str(&format!(
            " Previously believed: {value}. Revoked {} by {}: {}. \
             Do not re-derive without verification.",
            rfc3339(r.revoked_at),
            r.actor,
            r.reason
        )),
        _ => {
            out.push(' ');
            out.push_str(&value);
        }
    }
    out
}

/// A value as a note shows it: a JSON string as its text, anything else as compact JSON
/// (the canonical text already is).
fn display_value(canonical: &str) -> String {
    serde_json::from_str::<String>(canonical).unwrap_or_else(|_| canonical.to_string())
}

/// The wire record of `slot`, as `read` and `list` return it (its parts converted at
/// the API edge, [`crate::wire`]).
pub fn record(slot: &Slot) -> Record {
    Record {
        key: slot.key.clone(),
        state: slot.state.into(),
        version: slot.version,
        generation: slot.generation,
        forget_epoch: slot.forget_epoch,
        revision: slot.revision,
        create_revision: slot.create_revision,
        value: parsed_value(slot),
        meta: slot.meta.clone().into(),
        tombstone: slot.tombstone.clone().map(Into::into),
        revocation: slot.revocation.clone().map(Into::into),
        stale: slot.stale.iter().cloned().map(Into::into).collect(),
        superseded_by: slot.superseded_by.clone(),
        rendered: render(slot),
    }
}

/// The recall note of `slot`, matched by the cues `matched`.
pub fn note(slot: &Slot, matched: Vec<String>) -> RecallNote {
    RecallNote {
        key: slot.key.clone(),
        state: slot.state.into(),
        rendered: render(slot),
        matched,
        version: slot.version,
        generation: slot.generation,
        forget_epoch: slot.forget_epoch,
        revision: slot.revision,
        value: parsed_value(slot),
    }
}

/// The slot's value as JSON. Values are validated canonical JSON before they are logged,
/// so parsing cannot fail; if stored bytes were ever corrupt the value is left out rather
/// than failing the whole read.
fn parsed_value(slot: &Slot) -> Option<Value> {
    slot.value
        .as_deref()
        .and_then(|v| serde_json::from_str(v).ok())
}

/// RFC 3339 UTC text (`YYYY-MM-DDTHH:MM:SSZ`) of unix milliseconds, to the second.
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Gregorian (year, month, day) of a count of days since 1970-01-01, after Howard
/// Hinnant's `civil_from_days`, restricted to non-negative day counts.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01 so leap days fall at the end of each cycle.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097; // day of the 400-year era, [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1st
    let mp = (5 * doy + 2) / 153; // month from March, [0, 11]
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::fixtures::*;
    use crate::{flag_stale, supersede, write};
    use serde_json::json;

    const T: u64 = 1_700_000_000_000; // 2023-11-14T22:13:20Z

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(T + 999), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z"); // leap day of a 400-year
        assert_eq!(rfc3339(4_107_542_399_000), "2100-02-28T23:59:59Z"); // 2100 is no leap year
        assert_eq!(rfc3339(4_107_542_400_000), "2100-03-01T00:00:00Z");
        assert_eq!(rfc3339(1_704_067_199_000), "2023-12-31T23:59:59Z");
    }

    #[test]
    fn active_renders_strings_bare_and_other_values_as_compact_json() {
        assert_eq!(render(&active()), "[k] v1");
        let obj = write::apply(None, "j", &write_op(r#"{"a":[1,2]}"#), &ctx(1))
            .unwrap()
            .slot;
        assert_eq!(render(&obj), r#"[j] {"a":[1,2]}"#);
    }

    #[test]
    fn revoked_renders_the_deterrent() {
        assert_eq!(
            render(&revoked()),
            "[k] [REVOKED] Previously believed: v1. Revoked 2023-11-14T22:13:20Z by judge: wrong. \
             Do not re-derive without verification."
        );
    }

    #[test]
    fn stale_and_superseded_markers_come_before_the_value() {
        let s = flag_stale::apply(Some(&active()), KEY, "ci", "path:a.rs", "h", &ctx(20))
            .unwrap()
            .slot;
        assert_eq!(
            render(&s),
            "[k] [STALE: path:a.rs changed since written; verify] v1"
        );
        let s = supersede::apply(Some(&active()), KEY, "k2", "ed", None, &ctx(20))
            .unwrap()
            .slot;
        assert_eq!(render(&s), "[k] [SUPERSEDED by k2] v1");
    }

    #[test]
    fn combined_markers_put_revoked_first() {
        let s = flag_stale::apply(Some(&revoked()), KEY, "ci", "path:a", "h", &ctx(20))
            .unwrap()
            .slot;
        let s = flag_stale::apply(Some(&s), KEY, "ci", "path:b", "h", &ctx(21))
            .unwrap()
            .slot;
        let s = supersede::apply(Some(&s), KEY, "k2", "ed", None, &ctx(22))
            .unwrap()
            .slot;
        let text = render(&s);
        assert!(
            text.starts_with(
                "[k] [REVOKED] [STALE: path:a, path:b changed since written; verify] \
                 [SUPERSEDED by k2] Previously believed: v1. Revoked"
            ),
            "{text}"
        );
    }

    #[test]
    fn forgotten_renders_provenance_and_never_the_value() {
        let text = render(&forgotten());
        assert_eq!(
            text,
            "[k] [FORGOTTEN] Forgotten 2023-11-14T22:13:20Z by gdpr: erase."
        );
        assert!(!text.contains("v1"));
    }

    #[test]
    fn record_parses_the_value_and_carries_the_rendering() {
        let r = record(&revoked());
        assert_eq!(
            (r.value, r.state, r.version),
            (Some(json!("v1")), cairn_api::State::Revoked, 2)
        );
        assert!(r.rendered.starts_with("[k] [REVOKED]"));
        let f = record(&forgotten());
        assert_eq!((f.value, f.tombstone.is_some()), (None, true));
        let n = note(&active(), vec!["tag:x".into()]);
        assert_eq!(
            (n.value, n.matched, n.rendered.as_str()),
            (Some(json!("v1")), vec!["tag:x".to_string()], "[k] v1")
        );
    }
}
