//! Micro-benchmark of the state machine's apply path, the cost every replica pays for
//! every write (docs/design.md, Performance notes: ~35% of a leader's and ~54% of a follower's CPU under load).
//!
//! Opens a real RocksDB store in a temp dir with the node's default engine options, loads
//! `--keys` keys, then applies entries of `--per-entry` upserts (256-byte values, random
//! keys, a fresh `request_id` each, as the client library sends) and prints the time per
//! mutation. One thread, no Raft, no HTTP: what it measures is the apply alone.
//!
//! Build it with the workspace (a `-p cairn-node` build resolves other features and
//! recompiles RocksDB):
//!
//! ```text
//! cargo build --workspace --examples
//! ~/.cache/cairn/target/debug/examples/apply_bench --keys 100000 --entries 4000 --per-entry 64
//! ```

use std::time::Instant;

use cairn_memory::{Command, Conditions, Mutation, Op};
use cairn_node::consensus::state_machine::StateMachine;
use cairn_node::consensus::{Entry, LogId, Request};
use cairn_node::store::{Engine, EngineOptions, SnapshotDir, StateEngine};
use clap::Parser;
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, EntryPayload};
use rand::Rng;

/// The node's allocator (`cairn-node`'s `main.rs`), so that the apply's allocations cost
/// what they cost in a node: with glibc's malloc they weigh about twice as much.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Applies upserts to a real RocksDB state machine and prints the time per mutation.
#[derive(Parser)]
struct Args {
    /// Keys loaded first; the measured upserts pick among them uniformly.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Entries applied while measuring.
    #[arg(long, default_value_t = 4_000, value_parser = clap::value_parser!(u64).range(1..))]
    entries: u64,
    /// Upserts per entry (what the batcher packs into one Raft entry).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    per_entry: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 256)]
    value_bytes: usize,
    /// Memtable size per column family, MiB (the node's default when not given).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    write_buffer_mib: Option<u64>,
    /// Slot cache size, MiB (the node's default when not given; 0 disables it).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=4096))]
    slot_cache_mib: Option<u64>,
}

fn upsert(key: String, value_bytes: usize, rng: &mut impl Rng) -> Command {
    let value: String = (0..value_bytes)
        .map(|_| rng.gen_range(b'a'..=b'z') as char)
        .collect();
    let value = serde_json::to_string(&value).expect("a string serializes");
    let mutation = Mutation {
        op: Op::Write {
            key,
            value_hash: cairn_memory::hash::value_hash(&value),
            value,
            actor: "bench".into(),
            source: None,
            anchors: vec![],
            tags: vec![],
            clear_tombstone: true,
            override_revocation: true,
            reason: None,
        },
        cond: Conditions::default(),
    };
    Command {
        request_id: Some(cairn_client::new_request_id()),
        payload_hash: format!("{:064x}", rng.gen::<u128>()),
        mutations: vec![mutation],
        is_batch: false,
    }
}

fn entry(index: u64, commands: Vec<Command>) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request {
            now_ms: 1_800_000_000_000 + index,
            dedup_retention_ms: 86_400_000,
            commands: commands.into(),
            access: None,
        }),
    }
}

/// Applies `count` entries from `first_index` on; returns (seconds, mutations).
async fn apply_entries(
    sm: &mut StateMachine,
    args: &Args,
    first_index: u64,
    count: u64,
    rng: &mut impl Rng,
) -> (f64, u64) {
    let mut busy = 0.0;
    for i in 0..count {
        let commands = (0..args.per_entry)
            .map(|_| {
                upsert(
                    format!("bench/{:08}", rng.gen_range(0..args.keys)),
                    args.value_bytes,
                    rng,
                )
            })
            .collect();
        let e = entry(first_index + i, commands);
        let start = Instant::now();
        let responses = sm.apply([e]).await.expect("apply");
        busy += start.elapsed().as_secs_f64();
        assert_eq!(responses.len(), 1, "one response per entry");
    }
    (busy, count * args.per_entry)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut engine_options = EngineOptions::default();
    if let Some(mib) = args.write_buffer_mib {
        engine_options.write_buffer_bytes = (mib as usize) << 20;
    }
    if let Some(mib) = args.slot_cache_mib {
        engine_options.slot_cache_bytes = (mib as usize) << 20;
    }
    let engine = Engine::open(&dir.path().join("db"), &engine_options).expect("open");
    let engine_for_stats = engine.clone();
    let snapshots = SnapshotDir::open(dir.path().join("snapshots")).expect("snapshot dir");
    let mut sm = StateMachine::open(StateEngine::new(engine), snapshots).expect("state machine");
    let mut rng = rand::thread_rng();

    let load_entries = args.keys.div_ceil(args.per_entry);
    let started = Instant::now();
    let mut index = 1;
    for chunk in 0..load_entries {
        let commands = (chunk * args.per_entry..((chunk + 1) * args.per_entry).min(args.keys))
            .map(|k| upsert(format!("bench/{k:08}"), args.value_bytes, &mut rng))
            .collect();
        sm.apply([entry(index, commands)]).await.expect("load");
        index += 1;
    }
    println!(
        "loaded {} keys in {:.1} s",
        args.keys,
        started.elapsed().as_secs_f64()
    );

    let (secs, mutations) = apply_entries(&mut sm, &args, index, args.entries, &mut rng).await;
    println!(
        "applied {mutations} upserts in {} entries of {}: {:.2} µs/mutation ({:.0} mutations/s on one thread), {:.0} µs/entry",
        args.entries,
        args.per_entry,
        secs * 1e6 / mutations as f64,
        mutations as f64 / secs,
        secs * 1e6 / args.entries as f64,
    );
    let cache = engine_for_stats.slot_cache_stats();
    println!(
        "slot cache: {} entries, {:.1} MiB, {} hits, {} misses",
        cache.entries,
        cache.bytes as f64 / (1 << 20) as f64,
        cache.hits,
        cache.misses
    );
}
