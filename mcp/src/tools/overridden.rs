//! [`OverriddenNotes`]: the revoked notes that `write`s with `override_revocation` met, by
//! the caller and `request_id` that applied them, so a repeat of such a write answers with
//! the warning the first answer carried.
//!
//! The write makes the key active again, and the cluster keeps no past values (`history`
//! has their hashes only), so a repeat, which the node answers `replayed` with the
//! original result, could no longer read the note it overrode. A caller repeats a call
//! when its first answer was lost, and then the warning would be lost with it. The notes
//! are kept in this process only: a repeat through another server, or after a restart,
//! answers without the warning.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use cairn_client::api::RecallNote;

/// Most notes kept; past it the oldest goes first.
const NOTES_MAX: usize = 1024;
/// Most bytes of notes kept (rendered text and value), so a run of 1 MiB values cannot
/// make the server hold gigabytes.
const NOTE_BYTES_MAX: usize = 32 << 20;

/// Who wrote, under which `request_id`: request ids belong to the principal that sends
/// them (another principal's repeat is `request_id_reused`).
type WriteId = (Option<String>, String);

#[derive(Default)]
pub struct OverriddenNotes {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    notes: HashMap<WriteId, RecallNote>,
    /// Oldest first, with each note's size.
    order: VecDeque<(WriteId, usize)>,
    bytes: usize,
}

impl OverriddenNotes {
    /// Keeps the note the write `(principal, request_id)` overrode.
    pub fn keep(&self, principal: Option<&str>, request_id: &str, note: RecallNote) {
        let id = (principal.map(str::to_string), request_id.to_string());
        let size = note_bytes(&note);
        if size > NOTE_BYTES_MAX {
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.notes.contains_key(&id) {
            return;
        }
        while kept.order.len() >= NOTES_MAX || kept.bytes + size > NOTE_BYTES_MAX {
            let Some((oldest, oldest_size)) = kept.order.pop_front() else {
                break;
            };
            kept.notes.remove(&oldest);
            kept.bytes -= oldest_size;
        }
        kept.notes.insert(id.clone(), note);
        kept.order.push_back((id, size));
        kept.bytes += size;
    }

    /// The note the write `(principal, request_id)` overrode, if this process kept it.
    pub fn get(&self, principal: Option<&str>, request_id: &str) -> Option<RecallNote> {
        let id = (principal.map(str::to_string), request_id.to_string());
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.notes.get(&id).cloned()
    }
}

/// What a note holds in memory, near enough: its rendered text and its value's JSON.
fn note_bytes(note: &RecallNote) -> usize {
    let value = note
        .value
        .as_ref()
        .map_or(0, |value| value.to_string().len());
    note.rendered.len() + note.key.len() + value
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_client::api::State;

    fn note(key: &str, value_bytes: usize) -> RecallNote {
        RecallNote {
            key: key.into(),
            state: State::Revoked,
            rendered: format!("[{key}] [REVOKED] ..."),
            matched: Vec::new(),
            version: 1,
            generation: 1,
            forget_epoch: 0,
            revision: 1,
            value: Some(serde_json::Value::String("x".repeat(value_bytes))),
        }
    }

    #[test]
    fn a_note_is_found_by_its_principal_and_request_id_only() {
        let notes = OverriddenNotes::default();
        notes.keep(Some("agent"), "r1", note("k", 1));
        assert_eq!(
            notes.get(Some("agent"), "r1").map(|n| n.key),
            Some("k".into())
        );
        assert!(notes.get(Some("other"), "r1").is_none());
        assert!(notes.get(None, "r1").is_none());
        assert!(notes.get(Some("agent"), "r2").is_none());
    }

    #[test]
    fn the_oldest_notes_go_first_past_either_bound() {
        let notes = OverriddenNotes::default();
        for i in 0..=NOTES_MAX {
            notes.keep(None, &format!("r{i}"), note("k", 1));
        }
        assert!(notes.get(None, "r0").is_none());
        assert!(notes.get(None, "r1").is_some());
        assert!(notes.get(None, &format!("r{NOTES_MAX}")).is_some());

        let big = NOTE_BYTES_MAX / 3;
        for i in 0..3 {
            notes.keep(None, &format!("big{i}"), note("k", big));
        }
        assert!(
            notes.get(None, "big0").is_none(),
            "three thirds and more do not fit"
        );
        assert!(notes.get(None, "big1").is_some() && notes.get(None, "big2").is_some());
        let kept = notes.kept.lock().unwrap();
        assert!(kept.bytes <= NOTE_BYTES_MAX);
        assert_eq!(kept.bytes, kept.order.iter().map(|(_, s)| s).sum::<usize>());
    }

    #[test]
    fn a_note_larger_than_the_whole_budget_is_not_kept() {
        let notes = OverriddenNotes::default();
        notes.keep(None, "r", note("k", NOTE_BYTES_MAX));
        assert!(notes.get(None, "r").is_none());
    }
}
