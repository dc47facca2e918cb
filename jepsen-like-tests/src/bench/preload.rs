//! Preloading every key so reads hit: cairn in batches, etcd in transactions, a few
//! requests in flight, each request's values under a byte budget both systems accept.

use std::time::Instant;

use anyhow::Result;

use super::report::PreloadRow;
use super::run::Clusters;
use super::BenchArgs;

/// Most ops per cairn batch / per etcd txn (etcd's default --max-txn-ops), in flight.
const CAIRN_BATCH_OPS: u64 = 500;
const ETCD_TXN_OPS: u64 = 128;
const PRELOAD_CONCURRENCY: usize = 8;
/// Bytes of values per preload request: cairn's default body limit is 2 MiB
/// (`limits.value_bytes_max` plus a 1 MiB envelope) and etcd's `--max-request-bytes`
/// 1.5 MiB, so 500 writes of 64 KiB in one request were refused (`--value-bytes 65536`
/// failed so).
const PRELOAD_REQUEST_BYTES: u64 = 512 << 10;
/// What one preloaded write adds to a request besides its value (key, field names).
const PRELOAD_OP_OVERHEAD_BYTES: u64 = 128;

/// Loads keys `0..args.keys` into each started system, cairn first; one row per system.
pub(super) async fn run(args: &BenchArgs, clusters: &Clusters) -> Result<Vec<PreloadRow>> {
    let mut preload = Vec::new();
    let cairn_ops = preload_ops(CAIRN_BATCH_OPS, args.value_bytes);
    let etcd_ops = preload_ops(ETCD_TXN_OPS, args.value_bytes);
    for (name, c) in clusters.cairns() {
        let t = Instant::now();
        let rate = c
            .load(
                0..args.keys,
                args.value_bytes,
                cairn_ops,
                PRELOAD_CONCURRENCY,
            )
            .await?;
        preload.push(row(name, args.keys, cairn_ops, t, rate));
    }
    for (name, e) in clusters.etcds() {
        let t = Instant::now();
        let rate = e
            .load(
                0..args.keys,
                args.value_bytes,
                etcd_ops,
                PRELOAD_CONCURRENCY,
            )
            .await?;
        preload.push(row(name, args.keys, etcd_ops, t, rate));
    }
    Ok(preload)
}

/// Prints and records one system's preload, begun at `t`.
fn row(system: &str, keys: u64, ops_per_request: u64, t: Instant, rate: f64) -> PreloadRow {
    println!(
        "bench: {system} preload of {keys} keys: {:.1} s ({rate:.0} keys/s)",
        t.elapsed().as_secs_f64()
    );
    PreloadRow {
        system: system.into(),
        keys,
        ops_per_request,
        concurrency: PRELOAD_CONCURRENCY,
        seconds: t.elapsed().as_secs_f64(),
        keys_per_s: rate,
    }
}

/// Ops per preload request: `max_ops`, fewer when the values would not fit in
/// [`PRELOAD_REQUEST_BYTES`], at least one.
fn preload_ops(max_ops: u64, value_bytes: usize) -> u64 {
    let per_op = value_bytes as u64 + PRELOAD_OP_OVERHEAD_BYTES;
    (PRELOAD_REQUEST_BYTES / per_op).clamp(1, max_ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_requests_shrink_with_the_value_size_and_never_to_zero() {
        assert_eq!(preload_ops(CAIRN_BATCH_OPS, 256), CAIRN_BATCH_OPS);
        assert_eq!(preload_ops(ETCD_TXN_OPS, 256), ETCD_TXN_OPS);
        let kib4 = preload_ops(CAIRN_BATCH_OPS, 4096);
        assert!(
            kib4 < CAIRN_BATCH_OPS && kib4 * 4096 <= PRELOAD_REQUEST_BYTES,
            "{kib4}"
        );
        assert_eq!(preload_ops(CAIRN_BATCH_OPS, 65_536), 7);
        assert_eq!(preload_ops(ETCD_TXN_OPS, 1 << 20), 1);
    }
}
