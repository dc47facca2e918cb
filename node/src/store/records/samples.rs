//! Fixed sample records for the golden-bytes tests: one with every optional field
//! present, one with them absent. The same values produced the checked-in golden hex
//! (from commit 7ebcaca's encoders); changing a sample means regenerating its hex.

use cairn_memory::{Meta, MutationResult, Revocation, Slot, StaleFlag, State, Tombstone};

pub fn tombstone_full() -> Tombstone {
    Tombstone {
        id: "ts-1".into(),
        key: "golden/k".into(),
        actor: "bob".into(),
        reason: "pii".into(),
        value_hash: Some("h-old".into()),
        forgotten_at: 1_700_000_000_050,
        version: 3,
        generation: 1,
        revision: 105,
    }
}

pub fn tombstone_min() -> Tombstone {
    Tombstone {
        id: "ts-2".into(),
        key: "golden/m".into(),
        actor: "a".into(),
        reason: "r".into(),
        value_hash: None,
        forgotten_at: 5,
        version: 1,
        generation: 1,
        revision: 9,
    }
}

pub fn slot_full() -> Slot {
    Slot {
        key: "golden/k".into(),
        state: State::Revoked,
        version: 7,
        generation: 2,
        forget_epoch: 4,
        revision: 120,
        create_revision: 100,
        value: Some(r#"{"a":1}"#.into()),
        value_hash: Some("h-value".into()),
        value_revision: 118,
        meta: Meta {
            actor: "alice".into(),
            source: Some("src".into()),
            anchors: vec!["path:a".into(), "path:b".into()],
            tags: vec!["t1".into()],
            updated_at: 1_700_000_000_123,
        },
        tombstone: Some(tombstone_full()),
        revocation: Some(Revocation {
            actor: "carol".into(),
            reason: "wrong".into(),
            revoked_at: 1_700_000_000_120,
            version: 7,
        }),
        stale: vec![StaleFlag {
            anchor: "path:a".into(),
            observed_hash: "h-anchor".into(),
            actor: "dave".into(),
            flagged_at: 1_700_000_000_110,
        }],
        superseded_by: Some("golden/k2".into()),
        fence_revision: 120,
    }
}

pub fn slot_min() -> Slot {
    Slot {
        key: "golden/m".into(),
        state: State::Forgotten,
        version: 2,
        generation: 1,
        forget_epoch: 2,
        revision: 9,
        create_revision: 8,
        value: None,
        value_hash: None,
        value_revision: 8,
        meta: Meta {
            actor: "a".into(),
            source: None,
            anchors: vec![],
            tags: vec![],
            updated_at: 5,
        },
        tombstone: None,
        revocation: None,
        stale: vec![],
        superseded_by: None,
        fence_revision: 0,
    }
}

pub fn result_full() -> MutationResult {
    MutationResult {
        key: "golden/k".into(),
        state: State::Forgotten,
        version: 3,
        generation: 1,
        forget_epoch: 3,
        revision: 105,
        replayed: false,
        already: Some(true),
        tombstone: Some(tombstone_full()),
    }
}

pub fn result_min() -> MutationResult {
    MutationResult {
        key: "golden/m".into(),
        state: State::Active,
        version: 1,
        generation: 1,
        forget_epoch: 0,
        revision: 8,
        replayed: false,
        already: None,
        tombstone: None,
    }
}
