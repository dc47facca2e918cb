//! Golden bytes of what consensus stores: Raft log entries at [`entry_codec::FORMAT`]
//! (`log` family; the peer wire's append requests carry the same entries), and the
//! metadata blobs (vote, committed and applied log ids, membership) at
//! [`codec::FORMAT`]. The store keeps them as opaque bytes, so their layout is pinned
//! here, next to the types: openraft's, and the entry payload [`Request`] with the key
//! model's logged [`Command`]s and its optional access change.
//!
//! The `*_V3` entries and the metadata hex were generated from commit 7ebcaca (the build
//! before the key model had its own record types); the `*_V4` entries when the access
//! field was added; the format-5 entries when writes began to carry their value hash. A failure means data dirs and snapshots written before the change no
//! longer read: a layout change needs a format bump and a decoder for the old bytes, and
//! only then new golden hex.

use std::collections::{BTreeMap, BTreeSet};

use cairn_access::{AccessChange, GrantRecord, Permissions, TokenHash};
use cairn_api::Permission;
use cairn_memory::hash::value_hash;
use cairn_memory::{Command, Conditions, Mutation, Op};
use openraft::{CommittedLeaderId, EntryPayload, Membership};

use super::{entry_codec, Entry, LogId, NodeInfo, Request, StoredMembership, Vote};
use crate::store::codec;

/// Entries as format 3 stored them (before the access field): still read.
const ENTRY_NORMAL_V3: &str = concat!(
    "03020000000000000001000000000000002900000000000000010000000068e5cf8b0100",
    "00005c26050000000002000000000000000105000000000000007265712d310200000000",
    "000000706801000000000000000000000001000000000000006b07000000000000007b22",
    "61223a317d0500000000000000616c696365010300000000000000737263010000000000",
    "00000600000000000000706174683a610100000000000000010000000000000074010101",
    "030000000000000077687901030000000000000001280000000000000000000000000000",
    "000000060000000000000000000000010000000000000077010000000000000031010000",
    "000000000061000000000000000000000000000000000000000000000100000001000000",
    "000000006601000000000000006101000000000000007200000200000001000000000000",
    "007201000000000000006101000000000000007200000300000001000000000000006901",
    "000000000000006100000004000000010000000000000073010000000000000061060000",
    "0000000000706174683a6101000000000000006800000500000001000000000000007001",
    "000000000000007101000000000000006100000001",
);
const ENTRY_BLANK_V3: &str = "0302000000000000000100000000000000280000000000000000000000";
const ENTRY_MEMBERSHIP_V3: &str = concat!(
    "030100000000000000010000000000000001000000000000000200000001000000000000",
    "000100000000000000010000000000000002000000000000000100000000000000020000",
    "000000000063310200000000000000703102000000000000000200000000000000633202",
    "000000000000007032",
);
const STORED_MEMBERSHIP: &str = concat!(
    "030101000000000000000100000000000000010000000000000001000000000000000100",
    "000000000000010000000000000002000000000000000100000000000000020000000000",
    "000063310200000000000000703102000000000000000200000000000000633202000000",
    "000000007032",
);
/// Entries as format 4 stored them (an optional access change, no value hashes): still read.
const ENTRY_NORMAL_V4: &str = concat!(
    "04020000000000000001000000000000002900000000000000010000000068e5cf8b0100",
    "00005c26050000000002000000000000000105000000000000007265712d310200000000",
    "000000706801000000000000000000000001000000000000006b07000000000000007b22",
    "61223a317d0500000000000000616c696365010300000000000000737263010000000000",
    "00000600000000000000706174683a610100000000000000010000000000000074010101",
    "030000000000000077687901030000000000000001280000000000000000000000000000",
    "000000060000000000000000000000010000000000000077010000000000000031010000",
    "000000000061000000000000000000000000000000000000000000000100000001000000",
    "000000006601000000000000006101000000000000007200000200000001000000000000",
    "007201000000000000006101000000000000007200000300000001000000000000006901",
    "000000000000006100000004000000010000000000000073010000000000000061060000",
    "0000000000706174683a6101000000000000006800000500000001000000000000007001",
    "00000000000000710100000000000000610000000100",
);
const ENTRY_ACCESS_V4: &str = concat!(
    "04020000000000000001000000000000002900000000000000010000000068e5cf8b0100",
    "00005c26050000000002000000000000000105000000000000007265712d310200000000",
    "000000706801000000000000000000000001000000000000006b07000000000000007b22",
    "61223a317d0500000000000000616c696365010300000000000000737263010000000000",
    "00000600000000000000706174683a610100000000000000010000000000000074010101",
    "030000000000000077687901030000000000000001280000000000000000000000000000",
    "000000060000000000000000000000010000000000000077010000000000000031010000",
    "000000000061000000000000000000000000000000000000000000000100000001000000",
    "000000006601000000000000006101000000000000007200000200000001000000000000",
    "007201000000000000006101000000000000007200000300000001000000000000006901",
    "000000000000006100000004000000010000000000000073010000000000000061060000",
    "0000000000706174683a6101000000000000006800000500000001000000000000007001",
    "00000000000000710100000000000000610000000101040000000400000000000000726f",
    "6f740500000000000000616c696365010000000000000006000000000000006661637473",
    "2f05",
);
const ENTRY_ENABLE_V4: &str = concat!(
    "040100000000000000010000000000000002000000000000000100000005000000000000",
    "000600000000000000000000000000000001000000000400000000000000726f6f740707",
    "070707070707070707070707070707070707070707070707070707070707",
);
const ENTRY_BLANK_V4: &str = "0402000000000000000100000000000000280000000000000000000000";
const ENTRY_MEMBERSHIP_V4: &str = concat!(
    "040100000000000000010000000000000001000000000000000200000001000000000000",
    "000100000000000000010000000000000002000000000000000100000000000000020000",
    "000000000063310200000000000000703102000000000000000200000000000000633202",
    "000000000000007032",
);
/// Format 5 (writes carry their value hash).
const ENTRY_NORMAL: &str = concat!(
    "05020000000000000001000000000000002900000000000000010000000068e5cf8b0100",
    "00005c26050000000002000000000000000105000000000000007265712d310200000000",
    "000000706801000000000000000000000001000000000000006b07000000000000007b22",
    "61223a317d40000000000000003031356162643766356363353761326464393462373539",
    "306630346164383038343237333930356565333365633563656265616536323237366139",
    "37663836320500000000000000616c696365010300000000000000737263010000000000",
    "00000600000000000000706174683a610100000000000000010000000000000074010101",
    "030000000000000077687901030000000000000001280000000000000000000000000000",
    "000000060000000000000000000000010000000000000077010000000000000031400000",
    "000000000036623836623237336666333466636531396436623830346566663561336635",
    "373437616461346561613232663164343963303165353264646237383735623462010000",
    "000000000061000000000000000000000000000000000000000000000100000001000000",
    "000000006601000000000000006101000000000000007200000200000001000000000000",
    "007201000000000000006101000000000000007200000300000001000000000000006901",
    "000000000000006100000004000000010000000000000073010000000000000061060000",
    "0000000000706174683a6101000000000000006800000500000001000000000000007001",
    "00000000000000710100000000000000610000000100",
);
const ENTRY_ACCESS: &str = concat!(
    "05020000000000000001000000000000002900000000000000010000000068e5cf8b0100",
    "00005c26050000000002000000000000000105000000000000007265712d310200000000",
    "000000706801000000000000000000000001000000000000006b07000000000000007b22",
    "61223a317d40000000000000003031356162643766356363353761326464393462373539",
    "306630346164383038343237333930356565333365633563656265616536323237366139",
    "37663836320500000000000000616c696365010300000000000000737263010000000000",
    "00000600000000000000706174683a610100000000000000010000000000000074010101",
    "030000000000000077687901030000000000000001280000000000000000000000000000",
    "000000060000000000000000000000010000000000000077010000000000000031400000",
    "000000000036623836623237336666333466636531396436623830346566663561336635",
    "373437616461346561613232663164343963303165353264646237383735623462010000",
    "000000000061000000000000000000000000000000000000000000000100000001000000",
    "000000006601000000000000006101000000000000007200000200000001000000000000",
    "007201000000000000006101000000000000007200000300000001000000000000006901",
    "000000000000006100000004000000010000000000000073010000000000000061060000",
    "0000000000706174683a6101000000000000006800000500000001000000000000007001",
    "00000000000000710100000000000000610000000101040000000400000000000000726f",
    "6f740500000000000000616c696365010000000000000006000000000000006661637473",
    "2f05",
);
const ENTRY_ENABLE: &str = concat!(
    "050100000000000000010000000000000002000000000000000100000005000000000000",
    "000600000000000000000000000000000001000000000400000000000000726f6f740707",
    "070707070707070707070707070707070707070707070707070707070707",
);
const ENTRY_BLANK: &str = "0502000000000000000100000000000000280000000000000000000000";
const ENTRY_MEMBERSHIP: &str = concat!(
    "050100000000000000010000000000000001000000000000000200000001000000000000",
    "000100000000000000010000000000000002000000000000000100000000000000020000",
    "000000000063310200000000000000703102000000000000000200000000000000633202",
    "000000000000007032",
);
const APPLIED_SOME: &str = "0301020000000000000001000000000000002900000000000000";
const APPLIED_NONE: &str = "0300";
const VOTE_COMMITTED: &str = "030200000000000000010000000000000001";
const VOTE: &str = "030300000000000000020000000000000000";

fn assert_golden(what: &str, encoded: &[u8], golden_hex: &str) {
    assert_eq!(
        hex::encode(encoded),
        golden_hex,
        "the stored encoding of a {what} changed: logs, metadata and peers of the previous \
         build hold the old bytes. Bump codec::FORMAT (now {}) or give the type its own \
         format, keep decoding the old layout, and only then update this golden hex",
        codec::FORMAT
    );
}

fn log_id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

/// Every operation; the first command with every optional field set, the rest without.
fn commands() -> Vec<Command> {
    let plain = |op| Mutation {
        op,
        cond: Conditions::default(),
    };
    vec![
        Command {
            request_id: Some("req-1".into()),
            payload_hash: "ph".into(),
            is_batch: false,
            mutations: vec![Mutation {
                op: Op::Write {
                    key: "k".into(),
                    value: r#"{"a":1}"#.into(),
                    value_hash: value_hash(r#"{"a":1}"#),
                    actor: "alice".into(),
                    source: Some("src".into()),
                    anchors: vec!["path:a".into()],
                    tags: vec!["t".into()],
                    clear_tombstone: true,
                    override_revocation: true,
                    reason: Some("why".into()),
                },
                cond: Conditions {
                    expected_version: Some(3),
                    based_on_revision: Some(40),
                },
            }],
        },
        Command {
            request_id: None,
            payload_hash: String::new(),
            is_batch: true,
            mutations: vec![
                plain(Op::Write {
                    key: "w".into(),
                    value: "1".into(),
                    value_hash: value_hash("1"),
                    actor: "a".into(),
                    source: None,
                    anchors: vec![],
                    tags: vec![],
                    clear_tombstone: false,
                    override_revocation: false,
                    reason: None,
                }),
                plain(Op::Forget {
                    key: "f".into(),
                    actor: "a".into(),
                    reason: "r".into(),
                }),
                plain(Op::Revoke {
                    key: "r".into(),
                    actor: "a".into(),
                    reason: "r".into(),
                }),
                plain(Op::Reinstate {
                    key: "i".into(),
                    actor: "a".into(),
                    reason: None,
                }),
                plain(Op::FlagStale {
                    key: "s".into(),
                    actor: "a".into(),
                    anchor: "path:a".into(),
                    observed_hash: "h".into(),
                }),
                plain(Op::Supersede {
                    key: "p".into(),
                    by: "q".into(),
                    actor: "a".into(),
                    reason: None,
                }),
            ],
        },
    ]
}

fn membership() -> Membership<u64, NodeInfo> {
    let node = |n: u64| NodeInfo {
        client_addr: format!("c{n}"),
        peer_addr: format!("p{n}"),
    };
    let nodes: BTreeMap<u64, NodeInfo> = [(1, node(1)), (2, node(2))].into_iter().collect();
    Membership::new(vec![BTreeSet::from([1u64])], nodes)
}

fn round_trip<T>(what: &str, value: &T, golden_hex: &str)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let bytes = codec::encode(value);
    assert_golden(what, &bytes, golden_hex);
    assert_eq!(&codec::decode::<T>(&bytes).unwrap(), value);
}

fn normal_entry(access: Option<AccessChange>) -> Entry {
    Entry {
        log_id: log_id(2, 1, 41),
        payload: EntryPayload::Normal(Request {
            now_ms: 1_700_000_000_000,
            dedup_retention_ms: 86_400_000,
            commands: commands().into(),
            access,
        }),
    }
}

fn blank_entry() -> Entry {
    Entry {
        log_id: log_id(2, 1, 40),
        payload: EntryPayload::Blank,
    }
}

fn membership_entry() -> Entry {
    Entry {
        log_id: log_id(1, 1, 1),
        payload: EntryPayload::Membership(membership()),
    }
}

fn access_change() -> AccessChange {
    AccessChange::SetGrants {
        by: "root".into(),
        name: "alice".into(),
        grants: vec![GrantRecord {
            prefix: "facts/".into(),
            permissions: Permissions::of([Permission::Read, Permission::Forget]),
        }],
    }
}

fn entry_round_trip(entry: &Entry, golden_hex: &str) {
    let bytes = entry_codec::encode(entry);
    assert_golden("log entry", &bytes, golden_hex);
    assert_eq!(&entry_codec::decode(&bytes).unwrap(), entry);
    assert_eq!(entry_codec::log_id(&bytes).unwrap(), entry.log_id);
}

#[test]
fn golden_normal_entries_with_and_without_an_access_change() {
    entry_round_trip(&normal_entry(None), ENTRY_NORMAL);
    entry_round_trip(&normal_entry(Some(access_change())), ENTRY_ACCESS);
    entry_round_trip(&enable_entry(), ENTRY_ENABLE);
}

fn enable_entry() -> Entry {
    Entry {
        log_id: log_id(1, 1, 2),
        payload: EntryPayload::Normal(Request {
            now_ms: 5,
            dedup_retention_ms: 6,
            commands: Vec::new().into(),
            access: Some(AccessChange::Enable {
                admin: "root".into(),
                token_hash: TokenHash([7; 32]),
            }),
        }),
    }
}

#[test]
fn golden_blank_and_membership_entries() {
    entry_round_trip(&blank_entry(), ENTRY_BLANK);
    entry_round_trip(&membership_entry(), ENTRY_MEMBERSHIP);
}

fn decode_hex(golden_hex: &str) -> Entry {
    entry_codec::decode(&hex::decode(golden_hex).unwrap()).unwrap()
}

#[test]
fn format_3_entries_still_decode() {
    assert_eq!(decode_hex(ENTRY_NORMAL_V3), normal_entry(None));
    assert_eq!(decode_hex(ENTRY_BLANK_V3), blank_entry());
    assert_eq!(decode_hex(ENTRY_MEMBERSHIP_V3), membership_entry());
    let id = entry_codec::log_id(&hex::decode(ENTRY_NORMAL_V3).unwrap()).unwrap();
    assert_eq!(id, log_id(2, 1, 41));
}

/// The value hashes that format 5 carries are computed as format-4 writes are read, so an
/// old entry decodes to exactly what today's leader would have proposed.
#[test]
fn format_4_entries_still_decode() {
    assert_eq!(decode_hex(ENTRY_NORMAL_V4), normal_entry(None));
    assert_eq!(
        decode_hex(ENTRY_ACCESS_V4),
        normal_entry(Some(access_change()))
    );
    assert_eq!(decode_hex(ENTRY_ENABLE_V4), enable_entry());
    assert_eq!(decode_hex(ENTRY_BLANK_V4), blank_entry());
    assert_eq!(decode_hex(ENTRY_MEMBERSHIP_V4), membership_entry());
    let id = entry_codec::log_id(&hex::decode(ENTRY_NORMAL_V4).unwrap()).unwrap();
    assert_eq!(id, log_id(2, 1, 41));
}

#[test]
fn unknown_entry_formats_are_refused() {
    let mut bytes = entry_codec::encode(&blank_entry());
    bytes[0] = 2;
    assert!(entry_codec::decode(&bytes).is_err());
    assert!(entry_codec::log_id(&bytes).is_err());
}

#[test]
fn golden_apply_and_vote_metadata() {
    let stored = StoredMembership::new(Some(log_id(1, 1, 1)), membership());
    round_trip("stored membership", &stored, STORED_MEMBERSHIP);
    round_trip("applied log id", &Some(log_id(2, 1, 41)), APPLIED_SOME);
    round_trip("applied log id", &None::<LogId>, APPLIED_NONE);
    let mut committed = Vote::new(2, 1);
    committed.commit();
    round_trip("vote", &committed, VOTE_COMMITTED);
    round_trip("vote", &Vote::new(3, 2), VOTE);
}
