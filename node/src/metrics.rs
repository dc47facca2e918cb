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
    /// Sum of mutation latency in microseconds (with `mutations_ok` gives the mean).
    pub mutation_latency_us_sum: AtomicU64,
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
        let counters: [(&str, &str, &AtomicU64); 16] = [
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
                "cairn_mutation_latency_us_sum",
                "sum of applied mutation latencies",
                &self.mutation_latency_us_sum,
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
