//! The peer decoders against arbitrary and mutated bytes: no panic, and memory bounded
//! by the body's size (a forged length prefix must not allocate what it claims).
//!
//! Each case decodes on the test's own thread under a counting allocator, which records
//! the peak of live bytes this thread allocated during the decode. `PROPTEST_CASES` sets
//! the number of cases (default 256).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use cairn_node::consensus::{Entry, NodeId, NodeInfo, TypeConfig, Vote};
use cairn_node::raft_rpc::admission::{AdmissionState, AdmitRequest, Floor};
use cairn_node::store::codec;
use openraft::error::RaftError;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest, VoteResponse,
};
use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership, SnapshotMeta};
use proptest::prelude::*;

/// Live bytes may exceed the body by this factor (decoded structs are wider than their
/// fixed-width encoding) plus serde's 1 MiB sequence preallocation.
const AMPLIFICATION_MAX: usize = 64;
const PREALLOC_SLACK: usize = 2 << 20;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|live| {
            live.set(live.get() + layout.size() as isize);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(live.get())));
        });
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|live| live.set(live.get() - layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns the peak of bytes it held live on this thread.
fn peak_during(f: impl FnOnce()) -> usize {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    f();
    (PEAK.with(Cell::get) - start).max(0) as usize
}

/// Decodes `bytes` as every type the peer port (and its client) reads; asserts bounded
/// memory. Errors are fine, panics are not (proptest reports them).
fn decode_all(bytes: &[u8]) {
    let bound = bytes.len() * AMPLIFICATION_MAX + PREALLOC_SLACK;
    let peak = peak_during(|| {
        let _ = codec::decode::<AppendEntriesRequest<TypeConfig>>(bytes);
        let _ = codec::decode::<VoteRequest<NodeId>>(bytes);
        let _ = codec::decode::<InstallSnapshotRequest<TypeConfig>>(bytes);
        let _ = codec::decode::<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>>(bytes);
        let _ = codec::decode::<Result<VoteResponse<NodeId>, RaftError<NodeId>>>(bytes);
        let _ = codec::decode::<Result<u64, String>>(bytes);
        let _ = codec::decode::<AdmitRequest>(bytes);
        let _ = codec::decode::<Result<AdmissionState, String>>(bytes);
    });
    assert!(
        peak <= bound,
        "decoding {} bytes held {peak} bytes live (bound {bound})",
        bytes.len()
    );
}

fn log_id(term: u64, node: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

fn membership() -> Membership<NodeId, NodeInfo> {
    let nodes: BTreeMap<NodeId, NodeInfo> = (1..=3)
        .map(|id| {
            let info = NodeInfo {
                client_addr: format!("127.0.0.1:740{id}"),
                peer_addr: format!("127.0.0.1:750{id}"),
            };
            (id, info)
        })
        .collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes)
}

/// Valid encodings of each request kind, to mutate.
fn valid_bodies() -> Vec<Vec<u8>> {
    let entries: Vec<Entry> = vec![
        Entry {
            log_id: log_id(3, 1, 10),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(3, 1, 11),
            payload: EntryPayload::Membership(membership()),
        },
    ];
    let append = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(3, 1),
        prev_log_id: Some(log_id(2, 2, 9)),
        entries,
        leader_commit: Some(log_id(2, 2, 9)),
    };
    let vote = VoteRequest::<NodeId>::new(Vote::new(4, 2), Some(log_id(3, 1, 11)));
    let snapshot = InstallSnapshotRequest::<TypeConfig> {
        vote: Vote::new_committed(3, 1),
        meta: SnapshotMeta {
            last_log_id: Some(log_id(3, 1, 11)),
            last_membership: openraft::StoredMembership::new(Some(log_id(3, 1, 11)), membership()),
            snapshot_id: "3-1-11".into(),
        },
        offset: 0,
        data: vec![7; 300],
        done: true,
    };
    vec![
        codec::encode(&append),
        codec::encode(&vote),
        codec::encode(&snapshot),
        codec::encode(&Ok::<u64, String>(42)),
        codec::encode(&AdmitRequest::Admit(Floor { term: 7, leader: 2 })),
        codec::encode(&Ok::<AdmissionState, String>(AdmissionState::Admitted)),
    ]
}

/// A valid body with some bytes overwritten, inserted or cut: length prefixes turn into
/// huge claims, tags into unknown variants.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let bodies = valid_bodies();
    (
        0..bodies.len(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
    )
        .prop_map(move |(which, edits)| {
            let mut bytes = bodies[which].clone();
            for (at, byte, kind) in edits {
                let i = at.index(bytes.len().max(1));
                match kind {
                    0 if !bytes.is_empty() => bytes[i] = byte,
                    1 => bytes.insert(i.min(bytes.len()), byte),
                    _ => bytes.truncate(i.max(1)),
                }
            }
            bytes
        })
}

/// A length prefix (8 little-endian bytes) set to a huge value at every position.
#[test]
fn huge_length_prefixes_allocate_nothing_like_their_claim() {
    for body in valid_bodies() {
        for at in 1..body.len().saturating_sub(8) {
            for claim in [u64::MAX, u64::MAX / 2, 1 << 40, 1 << 31] {
                let mut bytes = body.clone();
                bytes[at..at + 8].copy_from_slice(&claim.to_le_bytes());
                decode_all(&bytes);
            }
        }
    }
}

#[test]
fn valid_bodies_decode() {
    let bodies = valid_bodies();
    codec::decode::<AppendEntriesRequest<TypeConfig>>(&bodies[0]).unwrap();
    codec::decode::<VoteRequest<NodeId>>(&bodies[1]).unwrap();
    codec::decode::<InstallSnapshotRequest<TypeConfig>>(&bodies[2]).unwrap();
    assert_eq!(
        codec::decode::<AdmitRequest>(&bodies[4]).unwrap(),
        AdmitRequest::Admit(Floor { term: 7, leader: 2 })
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_or_balloon(
        mut bytes in prop::collection::vec(any::<u8>(), 0..4096),
        format_byte in any::<bool>(),
    ) {
        // Half the cases get the right format byte, so the bincode decoder is reached.
        if format_byte && !bytes.is_empty() {
            bytes[0] = codec::FORMAT;
        }
        decode_all(&bytes);
    }

    #[test]
    fn mutated_valid_bodies_never_panic_or_balloon(bytes in mutated()) {
        decode_all(&bytes);
    }
}

#[test]
fn the_allocator_counts_this_thread() {
    let peak = peak_during(|| drop(std::hint::black_box(vec![1u8; 3 << 20])));
    assert!(peak >= 3 << 20, "{peak}");
}
