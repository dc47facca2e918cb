//! Process counters, rendered with Raft's own metrics as Prometheus text at `GET /metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counters are plain atomics: updated on hot paths without locks.
#[derive(Default)]
pub struct Metrics {
    pub mutations_ok: AtomicU64,
    pub mutations_rejected: AtomicU64,
    pub mutations_unknown: AtomicU64,
    pub mutations_forwarded: AtomicU64,
    pub reads_linearizable: AtomicU64,
    pub reads_bounded: AtomicU64,
    pub reads_any: AtomicU64,
    pub reads_stale_refused: AtomicU64,
    pub bad_requests: AtomicU64,
    /// Requests refused 401 or 403 (SPEC §8).
    pub auth_refused: AtomicU64,
    /// Latency of applied mutations, from the request's decode to its answer.
    pub mutation_latency: Histogram,
    /// Peer-port requests refused for their proof or target (SPEC §8), before their body
    /// was read.
    pub peer_refused: AtomicU64,
    /// Votes, appends and snapshots refused because this node was not admitted, or came
    /// from a leader or term its admission rules out (`raft_rpc::admission`).
    pub peer_not_admitted: AtomicU64,
    /// Nodes this node's membership did not list, let in because a member it knows lists
    /// them (`raft_rpc::vouch`).
    pub peer_vouched: AtomicU64,
    /// TLS handshakes that failed or timed out on the client port; shared with its accept
    /// loop.
    pub client_handshakes_failed: Arc<AtomicU64>,
    /// The same on the peer port.
    pub peer_handshakes_failed: Arc<AtomicU64>,
    /// The client port certificate's notAfter, unix seconds (0: unknown).
    pub client_cert_not_after: AtomicU64,
    /// The peer certificate's notAfter, unix seconds (0: unknown).
    pub peer_cert_not_after: AtomicU64,
}

impl Metrics {
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Appends the counters in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let counters: [(&str, &str, &AtomicU64); 15] = [
            (
                "cairn_mutations_ok_total",
                "mutations applied",
                &self.mutations_ok,
            ),
            (
                "cairn_mutations_rejected_total",
                "mutations rejected by a rule or condition",
                &self.mutations_rejected,
            ),
            (
                "cairn_mutations_outcome_unknown_total",
                "mutations answered 504 outcome_unknown",
                &self.mutations_unknown,
            ),
            (
                "cairn_mutations_forwarded_total",
                "mutations forwarded to the leader",
                &self.mutations_forwarded,
            ),
            (
                "cairn_auth_refused_total",
                "requests refused as unauthenticated or not permitted",
                &self.auth_refused,
            ),
            (
                "cairn_reads_linearizable_total",
                "linearizable reads served",
                &self.reads_linearizable,
            ),
            (
                "cairn_reads_bounded_total",
                "bounded-staleness reads served",
                &self.reads_bounded,
            ),
            (
                "cairn_reads_any_total",
                "consistency=any reads served",
                &self.reads_any,
            ),
            (
                "cairn_reads_stale_refused_total",
                "reads refused with stale_read",
                &self.reads_stale_refused,
            ),
            (
                "cairn_bad_requests_total",
                "requests refused as bad input (400, 413)",
                &self.bad_requests,
            ),
            (
                "cairn_peer_requests_refused_total",
                "peer-port requests refused for a missing or wrong proof or target",
                &self.peer_refused,
            ),
            (
                "cairn_peer_requests_not_admitted_total",
                "votes, appends and snapshots refused because this node was not admitted to answer them",
                &self.peer_not_admitted,
            ),
            (
                "cairn_peer_members_vouched_total",
                "nodes this node's membership did not list, let in because a member it knows lists them",
                &self.peer_vouched,
            ),
            (
                "cairn_client_tls_handshakes_failed_total",
                "TLS handshakes refused or timed out on the client port",
                &self.client_handshakes_failed,
            ),
            (
                "cairn_peer_tls_handshakes_failed_total",
                "TLS handshakes refused or timed out on the peer port",
                &self.peer_handshakes_failed,
            ),
        ];
        for (name, help, value) in counters {
            counter(out, name, help, value.load(Ordering::Relaxed));
        }
        let certificate_ends = [
            (
                "cairn_client_tls_cert_not_after_seconds",
                "the client port certificate's notAfter, unix seconds (0: unknown)",
                &self.client_cert_not_after,
            ),
            (
                "cairn_peer_tls_cert_not_after_seconds",
                "the peer certificate's notAfter, unix seconds (0: unknown)",
                &self.peer_cert_not_after,
            ),
        ];
        for (name, help, value) in certificate_ends {
            gauge(out, name, help, value.load(Ordering::Relaxed));
        }
        self.mutation_latency.render(
            out,
            "cairn_mutation_latency_us",
            "latency of applied mutations, microseconds",
        );
    }
}

/// Upper bounds of the latency buckets, µs: from a commit on a fast disk (a few hundred
/// µs on loopback) to `commit_timeout_ms`'s default of 5 s, about 2.5× apart.
const LATENCY_BUCKETS_US: [u64; 14] = [
    250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000,
];

/// A Prometheus histogram of latencies: one atomic per bucket (the last one past every
/// bound), so an observation is one scan of 14 bounds and two atomic adds, without locks.
#[derive(Default)]
pub struct Histogram {
    /// Observations per bucket, not cumulative: `[i]` is `LATENCY_BUCKETS_US[i - 1] <
    /// latency <= LATENCY_BUCKETS_US[i]`, the last one is above every bound.
    buckets: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, latency_us: u64) {
        let bucket = LATENCY_BUCKETS_US
            .iter()
            .position(|&bound| latency_us <= bound)
            .unwrap_or(LATENCY_BUCKETS_US.len());
        Metrics::inc(&self.buckets[bucket]);
        Metrics::add(&self.sum_us, latency_us);
    }

    /// Appends the histogram: cumulative `_bucket` lines, `_sum` and `_count`. The count is
    /// the `+Inf` bucket, so the two always agree even while observations come in.
    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = LATENCY_BUCKETS_US
                .get(i)
                .map_or_else(|| "+Inf".to_string(), u64::to_string);
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_us.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
    }
}

/// Appends one gauge.
pub fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    metric(out, "gauge", name, help, value);
}

/// Appends one counter.
pub fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    metric(out, "counter", name, help, value);
}

fn metric(out: &mut String, kind: &str, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_renders_cumulative_buckets_a_sum_and_a_count() {
        let histogram = Histogram::default();
        for latency_us in [100, 250, 251, 4_000, 9_000_000] {
            histogram.observe(latency_us);
        }
        let mut out = String::new();
        histogram.render(&mut out, "h_us", "latency");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[..2], ["# HELP h_us latency", "# TYPE h_us histogram"]);
        assert_eq!(lines[2], "h_us_bucket{le=\"250\"} 2");
        assert_eq!(lines[3], "h_us_bucket{le=\"500\"} 3");
        assert_eq!(lines[6], "h_us_bucket{le=\"5000\"} 4");
        assert_eq!(lines[15], "h_us_bucket{le=\"5000000\"} 4");
        assert_eq!(lines[16], "h_us_bucket{le=\"+Inf\"} 5");
        assert_eq!(lines[17..], ["h_us_sum 9004601", "h_us_count 5"]);
    }
}
