//! [`Session`]: what one agent has already seen, so no read can take it back (SPEC §3,
//! "Forget epochs on every read").
//!
//! A session records the highest revision seen and, per key, the highest
//! `(generation, forget_epoch, version)` seen (plus the revision it was seen at, used only
//! to pick which keys to keep). The client sends the session revision as `min_revision` and
//! checks every answer against the per-key marks: an answer whose generation, version or
//! forget_epoch is below what the session knows is stale. Versions never reset (SPEC §2),
//! so the three numbers only grow and any decrease is a regression.
//!
//! Memory is bounded: at most `keys_max` keys (default [`SESSION_KEYS_MAX`]); when full, the
//! lowest-revision tenth is evicted. Eviction only weakens the per-key check for those keys
//! to the session revision, which still applies: a node that honours `min_revision` has
//! applied every revision the session saw, including the evicted key's last one, so it
//! cannot answer with an older state of that key.
//!
//! # Token format
//!
//! [`Session::export_token`] hands a session to another agent as
//! `base64url_nopad(json)` with `json = {"r": REV, "k": [[KEY, GEN, FORGET_EPOCH, VERSION,
//! KEY_REV], …]}`, keys ordered by `KEY_REV` descending. Tokens are capped at
//! [`TOKEN_KEYS_MAX`] keys and [`TOKEN_JSON_BYTES_MAX`] bytes of JSON (the most recently
//! changed keys are kept; the rest are covered by `r`). [`Session::import_token`] rejects
//! anything else with [`ClientError::InvalidInput`].

use std::collections::{HashMap, HashSet};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::api::{
    BatchResult, EventKind, HistoryResponse, ListResponse, MutationResult, ProbeResponse,
    ReadResponse, RecallResponse,
};
use crate::error::ClientError;

/// Default bound on the number of keys a session tracks individually.
pub const SESSION_KEYS_MAX: usize = 10_000;
/// Share of `keys_max` kept after an eviction: evicting a tenth at a time keeps the sort
/// cost amortized instead of paid on every new key.
const EVICT_KEEP_PERCENT: usize = 90;
/// Most keys an exported token names.
pub const TOKEN_KEYS_MAX: usize = 256;
/// Most bytes of JSON inside an exported token (the token is 4/3 of this).
pub const TOKEN_JSON_BYTES_MAX: usize = 16 * 1024;
/// Longest token accepted on import (generous: other producers may pack more keys).
pub const TOKEN_CHARS_MAX: usize = 64 * 1024;
/// SPEC §5 key limit, checked on import so a token cannot smuggle absurd keys.
const KEY_BYTES_MAX: usize = 512;

/// The highest state of one key a session has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyMark {
    pub generation: u64,
    pub forget_epoch: u64,
    pub version: u64,
    /// Revision of the change that produced this state (eviction order only).
    pub revision: u64,
}

impl KeyMark {
    /// Component-wise maximum: all four only grow for a key, so this is the newest state.
    fn merge(&mut self, other: KeyMark) {
        self.generation = self.generation.max(other.generation);
        self.forget_epoch = self.forget_epoch.max(other.forget_epoch);
        self.version = self.version.max(other.version);
        self.revision = self.revision.max(other.revision);
    }

    /// Why `got` is older than `self`, if it is.
    fn regression(&self, got: &KeyMark) -> Option<String> {
        let fields = [
            ("generation", got.generation, self.generation),
            ("forget_epoch", got.forget_epoch, self.forget_epoch),
            ("version", got.version, self.version),
        ];
        fields
            .into_iter()
            .find(|(_, got, known)| got < known)
            .map(|(name, got, known)| format!("{name} {got} < {known} already seen"))
    }
}

/// An answer that reports key states a session can observe and check.
pub trait Observable {
    /// Every key the answer reports, with its state.
    fn marks(&self) -> Vec<(&str, KeyMark)>;
    /// Applied index of the node that served a read; `None` for mutation results.
    fn applied_index(&self) -> Option<u64> {
        None
    }
}

/// What one agent has seen; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    revision: u64,
    keys: HashMap<String, KeyMark>,
    keys_max: usize,
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    /// An empty session tracking at most [`SESSION_KEYS_MAX`] keys.
    pub fn new() -> Self {
        Session::with_keys_max(SESSION_KEYS_MAX)
    }

    /// An empty session tracking at most `keys_max` (at least 1) keys individually.
    pub fn with_keys_max(keys_max: usize) -> Self {
        Session {
            revision: 0,
            keys: HashMap::new(),
            keys_max: keys_max.max(1),
        }
    }

    /// Highest revision seen; sent as `min_revision` on every read.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The highest state seen for `key`, unless never seen or evicted.
    pub fn key(&self, key: &str) -> Option<KeyMark> {
        self.keys.get(key).copied()
    }

    /// Number of keys tracked individually.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.revision == 0
    }

    /// Records everything a mutation result or read answer reports. A read's
    /// `served.applied_index` counts as seen too: a list or recall shows the state at that
    /// index, keys it leaves out included (a forgotten key is not recalled), so a later read
    /// must not come from a node that applied less.
    pub fn observe(&mut self, answer: &impl Observable) {
        if let Some(applied) = answer.applied_index() {
            self.revision = self.revision.max(applied);
        }
        for (key, mark) in answer.marks() {
            self.observe_key(key, mark);
        }
    }

    /// Records one key state.
    pub fn observe_key(&mut self, key: &str, mark: KeyMark) {
        self.revision = self.revision.max(mark.revision);
        if mark.version == 0 {
            // Version 0: the key was never written (probe of an absent key). Nothing to keep.
            return;
        }
        if let Some(known) = self.keys.get_mut(key) {
            known.merge(mark);
            return;
        }
        if self.keys.len() >= self.keys_max {
            self.evict_lowest();
        }
        self.keys.insert(key.to_string(), mark);
    }

    /// `Err(SessionRegression)` when the answer is older than what the session saw: the
    /// serving node had applied less than the session revision, or a key's generation,
    /// forget_epoch or version is below the session's mark.
    pub fn check(&self, answer: &impl Observable) -> Result<(), ClientError> {
        if let Some(applied) = answer.applied_index() {
            if applied < self.revision {
                return Err(ClientError::SessionRegression {
                    key: None,
                    message: format!(
                        "served at applied index {applied} < session revision {}",
                        self.revision
                    ),
                });
            }
        }
        answer
            .marks()
            .into_iter()
            .try_for_each(|(key, mark)| self.check_key(key, &mark))
    }

    /// `Err(SessionRegression)` when `mark` is older than the session's mark for `key`.
    pub fn check_key(&self, key: &str, mark: &KeyMark) -> Result<(), ClientError> {
        let Some(reason) = self.keys.get(key).and_then(|known| known.regression(mark)) else {
            return Ok(());
        };
        Err(ClientError::SessionRegression {
            key: Some(key.to_string()),
            message: format!("key {key:?}: {reason}"),
        })
    }

    /// `Err(SessionRegression)` when a node says `key` is absent but the session saw it:
    /// a key never returns to `absent` (forgotten keys keep their record), so the node is
    /// behind.
    pub fn check_absent(&self, key: &str) -> Result<(), ClientError> {
        match self.keys.get(key) {
            Some(known) => Err(ClientError::SessionRegression {
                key: Some(key.to_string()),
                message: format!(
                    "key {key:?}: reported absent, but version {} already seen",
                    known.version
                ),
            }),
            None => Ok(()),
        }
    }

    /// The session as a token another agent can import (format in the module docs).
    pub fn export_token(&self) -> String {
        let mut newest: Vec<(&String, &KeyMark)> = self.keys.iter().collect();
        newest.sort_unstable_by(|a, b| b.1.revision.cmp(&a.1.revision).then(a.0.cmp(b.0)));
        let mut body = TokenBody {
            r: self.revision,
            k: Vec::new(),
        };
        let mut json_bytes = TOKEN_FRAME_BYTES;
        for (key, mark) in newest.into_iter().take(TOKEN_KEYS_MAX) {
            let entry = (
                key.clone(),
                mark.generation,
                mark.forget_epoch,
                mark.version,
                mark.revision,
            );
            // Entries are JSON arrays of one string and four numbers: their size is exact.
            let entry_bytes = serde_json::to_string(&entry).map_or(usize::MAX, |s| s.len() + 1);
            if json_bytes.saturating_add(entry_bytes) > TOKEN_JSON_BYTES_MAX {
                break;
            }
            json_bytes += entry_bytes;
            body.k.push(entry);
        }
        // Serializing strings and integers cannot fail.
        let json = serde_json::to_vec(&body).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(json)
    }

    /// Parses a token made by [`Session::export_token`]; rejects malformed tokens.
    pub fn import_token(token: &str) -> Result<Session, ClientError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(malformed("empty"));
        }
        if token.len() > TOKEN_CHARS_MAX {
            return Err(malformed(&format!(
                "{} characters, at most {TOKEN_CHARS_MAX}",
                token.len()
            )));
        }
        let json = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|e| malformed(&format!("not base64url without padding: {e}")))?;
        let body: TokenBody = serde_json::from_slice(&json).map_err(|e| {
            malformed(&format!(
                "not {{\"r\":REV,\"k\":[[KEY,GEN,FE,VER,REV],…]}}: {e}"
            ))
        })?;
        body.validate()?;
        let mut session = Session::new();
        session.revision = body.r;
        for (key, generation, forget_epoch, version, revision) in body.k {
            let mark = KeyMark {
                generation,
                forget_epoch,
                version,
                revision,
            };
            session.observe_key(&key, mark);
        }
        Ok(session)
    }

    fn evict_lowest(&mut self) {
        let keep = self.keys_max * EVICT_KEEP_PERCENT / 100;
        let evict = self.keys.len().saturating_sub(keep).max(1);
        let mut oldest: Vec<(u64, String)> = self
            .keys
            .iter()
            .map(|(key, mark)| (mark.revision, key.clone()))
            .collect();
        oldest.sort_unstable();
        for (_, key) in oldest.into_iter().take(evict) {
            self.keys.remove(&key);
        }
    }
}

/// Bytes of `{"r":<20 digits>,"k":[]}`, the part of a token that is not entries.
const TOKEN_FRAME_BYTES: usize = 32;

/// `(key, generation, forget_epoch, version, revision)`
type TokenEntry = (String, u64, u64, u64, u64);

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenBody {
    r: u64,
    k: Vec<TokenEntry>,
}

impl TokenBody {
    /// Rejects entries no real session could hold.
    fn validate(&self) -> Result<(), ClientError> {
        let mut seen = HashSet::new();
        for (key, generation, forget_epoch, version, revision) in &self.k {
            let problem = if key.is_empty() || key.len() > KEY_BYTES_MAX {
                Some("key must be 1-512 bytes")
            } else if !seen.insert(key.as_str()) {
                Some("key listed twice")
            } else if *generation == 0 || *version == 0 {
                Some("generation and version start at 1")
            } else if forget_epoch > version {
                Some("forget_epoch above version")
            } else if *revision > self.r {
                Some("key revision above session revision")
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(malformed(&format!("entry {key:?}: {problem}")));
            }
        }
        Ok(())
    }
}

fn malformed(why: &str) -> ClientError {
    ClientError::invalid_input(format!("malformed session token: {why}"))
}

impl Observable for MutationResult {
    fn marks(&self) -> Vec<(&str, KeyMark)> {
        vec![(
            self.key.as_str(),
            KeyMark {
                generation: self.generation,
                forget_epoch: self.forget_epoch,
                version: self.version,
                revision: self.revision,
            },
        )]
    }
}

impl Observable for BatchResult {
    fn marks(&self) -> Vec<(&str, KeyMark)> {
        self.results.iter().flat_map(|r| r.marks()).collect()
    }
}

impl Observable for crate::api::Record {
    fn marks(&self) -> Vec<(&str, KeyMark)> {
        vec![(
            self.key.as_str(),
            KeyMark {
                generation: self.generation,
                forget_epoch: self.forget_epoch,
                version: self.version,
                revision: self.revision,
            },
        )]
    }
}

impl Observable for ReadResponse {
    fn marks(&self) -> Vec<(&str, KeyMark)> {
        self.record.marks()
    }
    fn applied_index(&self) -> Option<u64> {
        Some(self.served.applied_index)
    }
}

impl Observable for ListResponse {
    fn marks(&self) -> Vec<(&str, KeyMark)> {
        self.items.iter().flat_map(|r| r.marks()).collect()
    }
    fn applied_index(&self) -> Option<u64> {
        Some(self.served.applied_index)
    }
}

impl Observable for RecallResponse {
    fn marks(&self) -> Vec<(&str, KeyMark)> {
        self.notes
            .iter()
            .map(|n| {
                let mark = KeyMark {
                    generation: n.generation,
                    forget_epoch: n.forget_epoch,
                    version: n.version,
                    revision: n.revision,
                };
                (n.key.as_str(), mark)
            })
            .collect()
    }
    fn applied_index(&self) -> Option<u64> {
        Some(self.served.applied_index)
    }
}

impl Observable for ProbeResponse {
    /// A probe reports no revision for the key; 0 only means "no newer than anything".
    fn marks(&self) -> Vec<(&str, KeyMark)> {
        let mark = KeyMark {
            generation: self.generation,
            forget_epoch: self.forget_epoch,
            version: self.version,
            revision: 0,
        };
        vec![(self.key.as_str(), mark)]
    }
    fn applied_index(&self) -> Option<u64> {
        Some(self.served.applied_index)
    }
}

impl Observable for HistoryResponse {
    /// The history holds the whole life of the key, so its mark follows from the events:
    /// one generation per `tombstone_cleared` after the first, the last forget's version
    /// as forget epoch, the last event's version and revision.
    fn marks(&self) -> Vec<(&str, KeyMark)> {
        let mut mark = KeyMark {
            generation: 1,
            ..KeyMark::default()
        };
        for event in &self.events {
            match event.kind {
                EventKind::TombstoneCleared => mark.generation += 1,
                EventKind::Forgotten => mark.forget_epoch = event.version,
                _ => {}
            }
            mark.version = event.version;
            mark.revision = event.revision;
        }
        vec![(self.key.as_str(), mark)]
    }
    fn applied_index(&self) -> Option<u64> {
        Some(self.served.applied_index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::State;

    fn mark(generation: u64, forget_epoch: u64, version: u64, revision: u64) -> KeyMark {
        KeyMark {
            generation,
            forget_epoch,
            version,
            revision,
        }
    }

    fn mutation(key: &str, m: KeyMark) -> MutationResult {
        MutationResult {
            key: key.into(),
            state: State::Active,
            version: m.version,
            generation: m.generation,
            forget_epoch: m.forget_epoch,
            revision: m.revision,
            replayed: false,
            already: None,
            tombstone: None,
        }
    }

    #[test]
    fn observe_tracks_highest_revision_and_marks() {
        let mut s = Session::new();
        s.observe(&mutation("a", mark(1, 0, 1, 10)));
        s.observe(&mutation("b", mark(1, 0, 1, 12)));
        s.observe(&mutation("a", mark(1, 2, 2, 11)));
        assert_eq!(s.revision(), 12);
        assert_eq!(s.key("a"), Some(mark(1, 2, 2, 11)));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn older_version_or_forget_epoch_is_a_regression() {
        let mut s = Session::new();
        // Written (v1), forgotten (v2, epoch 2): the forget must never be taken back.
        s.observe_key("k", mark(1, 2, 2, 20));
        let before_forget = mark(1, 0, 1, 10);
        let err = s.check_key("k", &before_forget).unwrap_err();
        assert!(matches!(err, ClientError::SessionRegression { key: Some(ref k), .. } if k == "k"));
        assert!(err.to_string().contains("forget_epoch 0 < 2"), "{err}");
        assert!(s.check_key("k", &mark(1, 2, 2, 20)).is_ok());
        assert!(s.check_key("other", &before_forget).is_ok());
    }

    #[test]
    fn a_newer_generation_is_fresh_and_an_older_one_is_stale() {
        let mut s = Session::new();
        s.observe_key("k", mark(1, 2, 2, 20));
        // Re-created with clear_tombstone: generation 2, version 3, epoch still 2.
        let recreated = mark(2, 2, 3, 30);
        assert!(s.check_key("k", &recreated).is_ok());
        s.observe_key("k", recreated);
        assert!(s.check_key("k", &mark(1, 2, 2, 20)).is_err());
        // A later version of the same generation is fine.
        assert!(s.check_key("k", &mark(2, 2, 4, 31)).is_ok());
    }

    #[test]
    fn absent_is_stale_once_the_key_was_seen() {
        let mut s = Session::new();
        assert!(s.check_absent("k").is_ok());
        s.observe_key("k", mark(1, 1, 1, 5));
        assert!(matches!(
            s.check_absent("k"),
            Err(ClientError::SessionRegression { .. })
        ));
    }

    #[test]
    fn reads_served_below_the_session_revision_are_stale() {
        let mut s = Session::new();
        s.observe_key("k", mark(1, 0, 1, 50));
        let read: ReadResponse = serde_json::from_value(serde_json::json!({
            "key": "other", "state": "active", "version": 1, "generation": 1,
            "forget_epoch": 0, "revision": 3, "create_revision": 3, "value": "v",
            "meta": {"actor": "a", "source": null, "anchors": [], "tags": [], "updated_at": 1},
            "rendered": "[other] v",
            "served": {"node_id": 2, "role": "follower", "consistency": "any",
                       "applied_index": 40, "leader_commit_index": 50,
                       "ms_since_leader_contact": 3}
        }))
        .unwrap();
        let err = s.check(&read).unwrap_err();
        assert!(err
            .to_string()
            .contains("applied index 40 < session revision 50"));
        let mut fresh = read;
        fresh.served.applied_index = 50;
        assert!(s.check(&fresh).is_ok());
    }

    /// A list that leaves a key out (forgotten at 799) is a state seen at its applied
    /// index: the session must not accept a later answer from a node behind it.
    #[test]
    fn the_applied_index_of_a_read_counts_as_seen_even_with_no_key_in_it() {
        let mut s = Session::new();
        let empty: ListResponse = serde_json::from_value(serde_json::json!({
            "items": [], "next_after": null,
            "served": {"node_id": 1, "role": "leader", "consistency": "linearizable",
                       "applied_index": 799, "leader_commit_index": 799,
                       "ms_since_leader_contact": 0}
        }))
        .unwrap();
        s.observe(&empty);
        assert_eq!(s.revision(), 799);
        let mut behind = empty;
        behind.served.applied_index = 798;
        assert!(matches!(
            s.check(&behind),
            Err(ClientError::SessionRegression { key: None, .. })
        ));
    }

    #[test]
    fn eviction_drops_the_lowest_revisions_and_keeps_the_session_revision() {
        let mut s = Session::with_keys_max(10);
        for i in 0..10u64 {
            s.observe_key(&format!("k{i}"), mark(1, 0, 1, 100 + i));
        }
        assert_eq!(s.len(), 10);
        s.observe_key("new", mark(1, 0, 1, 5));
        assert!(s.len() <= 10);
        assert_eq!(s.key("k0"), None, "lowest revision evicted first");
        assert!(s.key("k9").is_some());
        assert!(s.key("new").is_some());
        assert_eq!(s.revision(), 109);
        // An evicted key is no longer checked per key; the session revision still is.
        assert!(s.check_key("k0", &mark(1, 0, 0, 0)).is_ok());
    }

    #[test]
    fn eviction_is_bounded_under_many_keys() {
        let mut s = Session::with_keys_max(100);
        for i in 0..1_000u64 {
            s.observe_key(&format!("k{i}"), mark(1, 0, 1, i + 1));
        }
        assert!(s.len() <= 100);
        assert!(s.key("k999").is_some());
    }

    #[test]
    fn token_round_trip() {
        let mut s = Session::new();
        s.observe_key("a/1", mark(1, 0, 3, 7));
        s.observe_key("b", mark(2, 4, 5, 9));
        let token = s.export_token();
        assert!(token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        let back = Session::import_token(&format!("  {token}\n")).unwrap();
        assert_eq!(back, s);
        assert_eq!(
            Session::import_token(&Session::new().export_token()).unwrap(),
            Session::new()
        );
    }

    #[test]
    fn exported_tokens_are_capped_to_the_newest_keys() {
        let mut s = Session::new();
        for i in 0..(TOKEN_KEYS_MAX as u64 * 2) {
            s.observe_key(&format!("key-{i}"), mark(1, 0, 1, i + 1));
        }
        let back = Session::import_token(&s.export_token()).unwrap();
        assert_eq!(back.len(), TOKEN_KEYS_MAX);
        assert_eq!(back.revision(), s.revision());
        assert!(back
            .key(&format!("key-{}", TOKEN_KEYS_MAX * 2 - 1))
            .is_some());
        assert!(back.key("key-0").is_none());

        let mut big = Session::new();
        for i in 0..200u64 {
            big.observe_key(&format!("{i:0>500}"), mark(1, 0, 1, i + 1));
        }
        let token = big.export_token();
        let json = URL_SAFE_NO_PAD.decode(&token).unwrap();
        assert!(json.len() <= TOKEN_JSON_BYTES_MAX, "{}", json.len());
        assert!(Session::import_token(&token).unwrap().len() > 10);
    }

    #[test]
    fn malformed_tokens_are_rejected_clearly() {
        let encode = |json: &str| URL_SAFE_NO_PAD.encode(json);
        let cases = [
            (String::new(), "empty"),
            ("not base64!".to_string(), "base64url"),
            (encode("[1,2]"), "\"r\""),
            (encode(r#"{"r":1,"k":[],"x":1}"#), "\"r\""),
            (encode(r#"{"r":9,"k":[["k",1,0]]}"#), "\"r\""),
            (encode(r#"{"r":9,"k":[["",1,0,1,1]]}"#), "1-512 bytes"),
            (
                encode(r#"{"r":9,"k":[["k",1,0,1,1],["k",1,0,1,1]]}"#),
                "twice",
            ),
            (encode(r#"{"r":9,"k":[["k",0,0,1,1]]}"#), "start at 1"),
            (
                encode(r#"{"r":9,"k":[["k",1,3,2,1]]}"#),
                "forget_epoch above",
            ),
            (
                encode(r#"{"r":9,"k":[["k",1,0,1,10]]}"#),
                "above session revision",
            ),
            ("A".repeat(TOKEN_CHARS_MAX + 1), "at most"),
        ];
        for (token, why) in cases {
            let err = Session::import_token(&token).unwrap_err();
            assert!(matches!(err, ClientError::InvalidInput { .. }), "{err:?}");
            let text = err.to_string();
            assert!(
                text.contains("malformed session token") && text.contains(why),
                "{text}"
            );
        }
    }
}
