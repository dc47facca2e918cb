//! Reading a slot back, from RocksDB or the slot cache: decode, upgrade a format-3 slot,
//! check.

use bytes::Bytes;
use cairn_memory::{Slot, State};

use super::{in_family, StateEngine};
use crate::store::engine::{cf, StoreError};
use crate::store::records::slot::{self, Decoded};

impl StateEngine {
    /// The slot of `key` for the apply path, through the slot cache, which it fills from
    /// RocksDB on a miss: nothing else writes `slots`, so what it read stays current until
    /// it commits, and only the apply path uses the cache, so it never sees it disagree
    /// with RocksDB.
    ///
    /// A slot stored at the previous format is cached re-encoded at the current one (the
    /// same slot: its history, which gave it its `fence_revision`, only grows with a write
    /// of the slot, which replaces the cached bytes), so the history is read once.
    pub(super) fn slot_for_apply(&self, key: &str) -> Result<Option<Slot>, StoreError> {
        let cache = self.engine.slot_cache();
        if let Some(cached) = cache.get(key) {
            return self.decode_slot(&cached, key).map(Some);
        }
        let Some(stored) = self.get(cf::SLOTS, key.as_bytes())? else {
            return Ok(None);
        };
        let decoded = self.decode_slot(&stored, key)?;
        let encoded: Bytes = if slot::is_current(&stored) {
            stored.into()
        } else {
            slot::encode(&decoded).into()
        };
        cache.insert(key, encoded);
        Ok(Some(decoded))
    }

    /// Decodes a slot read back (from RocksDB or the slot cache) and checks it.
    ///
    /// A slot stored at format 3 ([`slot::FORMAT_V3`]) has no `fence_revision`: it gets the
    /// one the rules would have kept, recomputed from the key's history
    /// ([`cairn_memory::conditions::fence_from_history`]). History holds an event for every
    /// change with its revision and is never pruned, so every replica derives the same
    /// fence, and the same as a replica that applied those entries with this build. The
    /// slot is rewritten at the current format by its next change.
    pub(super) fn decode_slot(&self, bytes: &[u8], key: &str) -> Result<Slot, StoreError> {
        let decoded = match slot::decode(bytes).map_err(in_family(cf::SLOTS))? {
            Decoded::Current(s) => s,
            Decoded::V3(old) => {
                let history = self.history(key, usize::MAX)?;
                old.into_slot(cairn_memory::conditions::fence_from_history(&history))
            }
        };
        check_slot(&decoded, key)?;
        Ok(decoded)
    }
}

/// Read-side assertion: a slot read back must be the key it is stored under and must hold a
/// value exactly when its state allows one.
pub(super) fn check_slot(slot: &Slot, key: &str) -> Result<(), StoreError> {
    let value_allowed = matches!(slot.state, State::Active | State::Revoked);
    if slot.key != key || slot.value.is_some() != value_allowed || slot.state == State::Absent {
        return Err(StoreError::Invariant(format!(
            "slot under {key:?} is {:?} in state {} with value present={}",
            slot.key,
            slot.state,
            slot.value.is_some()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::codec::{self, pair_key, u64_key};
    use crate::store::engine::{Engine, EngineOptions};
    use crate::store::records::history::{self, EventV3};
    use cairn_memory::hash::value_hash;
    use cairn_memory::{reinstate, revoke, supersede, write, Change, Ctx, Effect, SlotSource};

    fn ctx(revision: u64) -> Ctx {
        Ctx {
            revision,
            now_ms: 1_700_000_000_000 + revision,
        }
    }

    /// A write of `value` by actor `a`, with no anchors, tags, reason or flags.
    fn plain_write<'a>(value: &'a str, value_hash: &'a str) -> write::Write<'a> {
        write::Write {
            value,
            value_hash,
            actor: "a",
            source: None,
            anchors: &[],
            tags: &[],
            clear_tombstone: false,
            override_revocation: false,
            reason: None,
        }
    }

    fn commit(state: &StateEngine, change: Change) -> Slot {
        let mut txn = state.txn();
        let key = change.slot.key.clone();
        let mut effects = vec![Effect::PutSlot(change.slot.clone())];
        effects.extend(change.event.map(|event| Effect::AppendEvent { key, event }));
        txn.apply_effects(effects).unwrap();
        txn.commit().unwrap();
        change.slot
    }

    /// Stores `slot` as a build before format 4 did: format 3, no `fence_revision`.
    fn store_as_format_3(state: &StateEngine, slot: &Slot) {
        let bytes = slot::SlotV3::from_slot(slot.clone()).encode();
        assert_eq!(bytes[0], 3);
        let engine = state.engine();
        engine
            .state_db()
            .put_cf(engine.cf(cf::SLOTS), slot.key.as_bytes(), bytes)
            .unwrap();
        engine.slot_cache().clear();
    }

    #[test]
    fn a_format_3_slot_gets_its_fence_from_history() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateEngine::new(Engine::open(dir.path(), &EngineOptions::default()).unwrap());
        let (hash_1, hash_2) = (value_hash("1"), value_hash("2"));
        let w = plain_write;
        // write 52, revoke 53, reinstate 54, write 55: the fence is the revoke's.
        let s = commit(
            &state,
            write::apply(None, "f/1", &w("1", &hash_1), &ctx(52)).unwrap(),
        );
        let s = commit(
            &state,
            revoke::apply(Some(&s), "f/1", "a", "r", &ctx(53)).unwrap(),
        );
        let s = commit(
            &state,
            reinstate::apply(Some(&s), "f/1", "a", None, &ctx(54)).unwrap(),
        );
        let s = commit(
            &state,
            write::apply(Some(&s), "f/1", &w("2", &hash_2), &ctx(55)).unwrap(),
        );
        assert_eq!(s.fence_revision, 53);
        let digest = state.digest().unwrap();
        assert_eq!(state.slot("f/1").unwrap().as_ref(), Some(&s));

        store_as_format_3(&state, &s);
        assert_eq!(state.slot("f/1").unwrap().as_ref(), Some(&s));
        assert_eq!(state.slots_after("f/", None, 10).unwrap(), vec![s.clone()]);
        assert_eq!(state.digest().unwrap(), digest, "same slot, same digest");
        let txn = state.txn();
        assert_eq!(txn.slot("f/1").unwrap().as_ref(), Some(&s));
        // The apply path cached it at the current format.
        let cached = state.engine().slot_cache().get("f/1").unwrap();
        assert_eq!(cached[0], slot::FORMAT);
        assert_eq!(&*cached, &slot::encode(&s)[..]);

        // A key without history of a fencing change has none.
        let other = commit(
            &state,
            write::apply(None, "g", &w("1", &hash_1), &ctx(60)).unwrap(),
        );
        store_as_format_3(&state, &other);
        assert_eq!(state.slot("g").unwrap().unwrap().fence_revision, 0);
    }

    #[test]
    fn a_format_3_history_event_still_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateEngine::new(Engine::open(dir.path(), &EngineOptions::default()).unwrap());
        let hash = value_hash("1");
        let w = write::Write {
            reason: Some("first"),
            ..plain_write("1", &hash)
        };
        let s = commit(&state, write::apply(None, "h", &w, &ctx(70)).unwrap());
        let superseding = supersede::apply(Some(&s), "h", "h2", "a", None, &ctx(71)).unwrap();
        commit(&state, superseding);
        let events = state.history("h", 10).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].by.as_deref(), Some("h2"));
        assert_eq!(events[1].reason, None);
        let digest = state.digest().unwrap();

        // The write's event as a build before format 4 stored it.
        let old = &events[0];
        let bytes = EventV3 {
            kind: old.kind,
            version: old.version,
            revision: old.revision,
            actor: old.actor.clone(),
            reason: old.reason.clone(),
            at: old.at,
            value_hash: old.value_hash.clone(),
        }
        .encode();
        assert_eq!(bytes[0], 3);
        let engine = state.engine();
        let k = pair_key("h", &u64_key(old.version));
        let stored = engine
            .state_db()
            .get_cf(engine.cf(cf::HISTORY), &k)
            .unwrap()
            .unwrap();
        assert_eq!(stored[0], history::FORMAT);
        engine
            .state_db()
            .put_cf(engine.cf(cf::HISTORY), &k, &bytes)
            .unwrap();

        assert_eq!(state.history("h", 10).unwrap(), events);
        assert_eq!(state.digest().unwrap(), digest, "same event, same digest");
    }

    #[test]
    fn history_keeps_the_newest_events_when_there_are_more_than_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateEngine::new(Engine::open(dir.path(), &EngineOptions::default()).unwrap());
        let hash = value_hash("1");
        let w = plain_write("1", &hash);
        let mut slot = None;
        for revision in 80..85 {
            slot = Some(commit(
                &state,
                write::apply(slot.as_ref(), "h", &w, &ctx(revision)).unwrap(),
            ));
        }
        // Neighbours on both sides of "h"'s events in the family.
        commit(&state, write::apply(None, "g", &w, &ctx(85)).unwrap());
        commit(&state, write::apply(None, "hx", &w, &ctx(86)).unwrap());
        let versions = |limit| -> Vec<u64> {
            state
                .history("h", limit)
                .unwrap()
                .iter()
                .map(|e| e.version)
                .collect()
        };
        assert_eq!(versions(3), vec![3, 4, 5], "the newest, oldest first");
        assert_eq!(versions(10), vec![1, 2, 3, 4, 5]);
        assert_eq!(state.history("none", 10).unwrap(), vec![]);
    }

    #[test]
    fn an_unknown_slot_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateEngine::new(Engine::open(dir.path(), &EngineOptions::default()).unwrap());
        let engine = state.engine();
        engine
            .state_db()
            .put_cf(engine.cf(cf::SLOTS), b"k", [9, 0, 0])
            .unwrap();
        let err = state.slot("k").unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Codec {
                    source: codec::CodecError::UnknownFormat(9),
                    ..
                }
            ),
            "{err}"
        );
    }
}
