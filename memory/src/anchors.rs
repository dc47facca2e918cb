//! Anchors and recall matching (SPEC §4).
//!
//! An anchor is `kind:value` with kind `path`, `symbol`, `tag`, `topic` or `url`. Cues have
//! the same form. Matching is exact and case-sensitive, except for `path:` directories: a
//! `path:` anchor ending in `/` covers every path under it, and a `path:` cue ending in `/`
//! covers every anchor under it.
//!
//! The store keeps an index `anchor → key`. For a cue, [`index_lookups`] names the index
//! entries to scan; they cover exactly the anchors [`matches`] accepts, so the store needs
//! no further filtering (it may still call [`matched_cues`] to report which cues matched).

use std::cmp::Reverse;

use crate::records::State;
use crate::types::Slot;

/// The kinds an anchor may have.
pub const KINDS: [&str; 5] = ["path", "symbol", "tag", "topic", "url"];

/// A parsed anchor or cue, borrowing from its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor<'a> {
    /// One of [`KINDS`].
    pub kind: &'a str,
    /// Non-empty.
    pub value: &'a str,
}

impl Anchor<'_> {
    /// A `path:` directory (ending in `/`), which covers every path under it.
    pub fn is_dir(&self) -> bool {
        self.kind == "path" && self.value.ends_with('/')
    }
}

/// Parses `kind:value`; the error says what is wrong (for a 400 message).
pub fn parse(text: &str) -> Result<Anchor<'_>, String> {
    let (kind, value) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not of the form kind:value"))?;
    if !KINDS.contains(&kind) {
        return Err(format!(
            "{text:?} has kind {kind:?}; expected one of {}",
            KINDS.join(", ")
        ));
    }
    if value.is_empty() {
        return Err(format!("{text:?} has an empty value"));
    }
    Ok(Anchor { kind, value })
}

/// Whether the note anchor `anchor` matches the recall cue `cue` (both `kind:value`).
/// Unparseable text matches nothing.
pub fn matches(anchor: &str, cue: &str) -> bool {
    let (Ok(a), Ok(c)) = (parse(anchor), parse(cue)) else {
        return false;
    };
    a.kind == c.kind
        && (a.value == c.value
            || (a.is_dir() && c.value.starts_with(a.value))
            || (c.is_dir() && a.value.starts_with(c.value)))
}

/// A scan of the anchor index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lookup {
    /// The index entries of exactly this anchor.
    Exact(String),
    /// The index entries of every anchor starting with this text.
    Prefix(String),
}

impl Lookup {
    /// Whether the index entry of `anchor` is in this scan.
    pub fn covers(&self, anchor: &str) -> bool {
        match self {
            Lookup::Exact(a) => anchor == a,
            Lookup::Prefix(p) => anchor.starts_with(p.as_str()),
        }
    }
}

/// The index scans that find every anchor matching `cue`.
///
/// - An anchor matches `cue` exactly when one of the scans covers it.
/// - `path:src/api/client.rs` → itself and its ancestor directories `path:src/api/`,
///   `path:src/` (exact); `path:src/` → every anchor under it (prefix) and its ancestors.
/// - An unparseable cue needs no scan (it matches nothing).
pub fn index_lookups(cue: &str) -> Vec<Lookup> {
    let Ok(c) = parse(cue) else {
        return Vec::new();
    };
    let mut out = vec![if c.is_dir() {
        Lookup::Prefix(cue.to_string())
    } else {
        Lookup::Exact(cue.to_string())
    }];
    if c.kind == "path" {
        // Every `/` before the last character ends an ancestor directory (a `/` in last
        // position is the cue itself, scanned above). The last character may take several
        // bytes (`path:dir/é`).
        let last = c.value.chars().next_back().map_or(0, char::len_utf8);
        let inner = &c.value[..c.value.len() - last];
        out.extend(
            inner
                .match_indices('/')
                .map(|(i, _)| Lookup::Exact(format!("path:{}", &c.value[..=i]))),
        );
    }
    out
}

/// The cues (in cue order) that match at least one of `anchors`, each once: a cue given
/// twice is one cue, so it neither ranks a note higher nor shows twice in `matched`.
pub fn matched_cues(anchors: &[String], cues: &[String]) -> Vec<String> {
    let mut matched: Vec<String> = Vec::new();
    for cue in cues {
        if !matched.contains(cue) && anchors.iter().any(|a| matches(a, cue)) {
            matched.push(cue.clone());
        }
    }
    matched
}

/// A recall candidate: what ranks it, and the cues it matched. It holds no value, so a
/// recall can weigh thousands of candidates and read the values of the few it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub key: String,
    pub state: State,
    pub revision: u64,
    pub matched: Vec<String>,
}

impl Hit {
    pub fn of(slot: &Slot, matched: Vec<String>) -> Hit {
        Hit {
            key: slot.key.clone(),
            state: slot.state,
            revision: slot.revision,
            matched,
        }
    }
}

/// Orders recall hits best first (SPEC §4):
///
/// - more matched cues first;
/// - then revoked before active (a deterrent must reach the agent), anything else last;
/// - then more recent (`revision` desc), as a tie-break only: age never decides validity;
/// - then by key, so the order is total and identical on every replica.
pub fn rank(hits: &mut [Hit]) {
    hits.sort_by_cached_key(|h| {
        let state_rank = match h.state {
            State::Revoked => 0,
            State::Active => 1,
            State::Forgotten | State::Absent => 2,
        };
        (
            Reverse(h.matched.len()),
            state_rank,
            Reverse(h.revision),
            h.key.clone(),
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::fixtures::*;
    use proptest::prelude::*;

    #[test]
    fn a_path_cue_ending_in_a_multibyte_character_is_scanned_with_its_ancestors() {
        // Found by scripts/fuzz-api: slicing off the last byte panicked the handler.
        assert_eq!(
            index_lookups("path:src/fÁ"),
            vec![
                Lookup::Exact("path:src/fÁ".into()),
                Lookup::Exact("path:src/".into()),
            ]
        );
        assert_eq!(
            index_lookups("path:é"),
            vec![Lookup::Exact("path:é".into())]
        );
    }

    #[test]
    fn parse_accepts_the_five_kinds_only() {
        for kind in KINDS {
            assert_eq!(
                parse(&format!("{kind}:x")).unwrap(),
                Anchor { kind, value: "x" }
            );
        }
        assert_eq!(parse("url:https://x/y").unwrap().value, "https://x/y");
        for bad in ["file:x", "path", "path:", ":x", "PATH:x"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn exact_kinds_match_exactly() {
        assert!(matches("tag:db", "tag:db"));
        assert!(!matches("tag:db", "topic:db"));
        assert!(!matches("tag:db", "tag:DB"));
        assert!(
            !matches("symbol:a/", "symbol:a/b"),
            "only path: has directories"
        );
    }

    #[test]
    fn path_directories_cover_paths_under_them() {
        assert!(matches("path:src/", "path:src/api/client.rs"));
        assert!(matches("path:src/api/client.rs", "path:src/"));
        assert!(matches("path:src/api/", "path:src/"));
        assert!(matches("path:src/", "path:src/api/"));
        assert!(!matches("path:src/a", "path:src/ab"));
        assert!(!matches("path:src/", "path:srcx/a"));
        assert!(!matches("path:src/api/", "path:src/other.rs"));
    }

    #[test]
    fn lookups_for_a_file_cue_are_itself_and_its_ancestors() {
        let got = index_lookups("path:src/api/client.rs");
        assert_eq!(
            got,
            vec![
                Lookup::Exact("path:src/api/client.rs".into()),
                Lookup::Exact("path:src/".into()),
                Lookup::Exact("path:src/api/".into()),
            ]
        );
        assert_eq!(
            index_lookups("path:src/"),
            vec![Lookup::Prefix("path:src/".into())]
        );
        assert_eq!(index_lookups("tag:x"), vec![Lookup::Exact("tag:x".into())]);
        assert_eq!(index_lookups("nonsense"), vec![]);
    }

    proptest! {
        /// The index scans find exactly the anchors `matches` accepts.
        #[test]
        fn lookups_cover_exactly_the_matches(
            kind_a in prop::sample::select(vec!["path", "tag"]),
            kind_c in prop::sample::select(vec!["path", "tag"]),
            a in "[ab/]{1,6}",
            c in "[ab/]{1,6}",
        ) {
            let (anchor, cue) = (format!("{kind_a}:{a}"), format!("{kind_c}:{c}"));
            let covered = index_lookups(&cue).iter().any(|l| l.covers(&anchor));
            prop_assert_eq!(covered, matches(&anchor, &cue), "anchor {} cue {}", anchor, cue);
        }
    }

    #[test]
    fn matched_cues_keeps_cue_order() {
        let anchors = vec!["path:src/".to_string(), "tag:x".to_string()];
        let cues = vec![
            "tag:x".to_string(),
            "tag:y".to_string(),
            "path:src/a.rs".to_string(),
        ];
        assert_eq!(
            matched_cues(&anchors, &cues),
            vec!["tag:x".to_string(), "path:src/a.rs".to_string()]
        );
    }

    #[test]
    fn a_repeated_cue_matches_once() {
        let anchors = vec!["topic:db".to_string()];
        let cues = vec!["topic:db".to_string(), "topic:db".to_string()];
        assert_eq!(matched_cues(&anchors, &cues), vec!["topic:db".to_string()]);
    }

    #[test]
    fn rank_by_matches_then_revoked_then_recency() {
        let hit = |key: &str, slot: Slot, n: usize| {
            let slot = Slot {
                key: key.into(),
                ..slot
            };
            Hit::of(&slot, vec!["tag:x".into(); n])
        };
        let mut old_active = active();
        old_active.revision = 1;
        let mut hits = vec![
            hit("recent-active", active(), 1), // revision 10
            hit("old-active", old_active, 1),  // revision 1
            hit("revoked", revoked(), 1),      // revision 11
            hit("two-matches", active(), 2),
        ];
        rank(&mut hits);
        let order: Vec<&str> = hits.iter().map(|h| h.key.as_str()).collect();
        assert_eq!(
            order,
            vec!["two-matches", "revoked", "recent-active", "old-active"]
        );
    }
}
