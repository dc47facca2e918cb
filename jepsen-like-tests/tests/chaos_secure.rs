//! The chaos smoke with SPEC §8 on (`cairn-jepsen run --secure`): certificates from
//! `cairn-node certs` (each naming its node's 127.0.0.1x address), HTTPS client ports,
//! mutual TLS between peers, the cluster initialized with `auth: {admin: "chaos"}`, and
//! every client of the harness presenting the admin token and trusting only the run's CA.
//! Every nemesis at least once (the iptables cuts apply to TLS connections alike), all
//! workloads, the same five checkers; the run must pass.
//!
//! Needs root and iptables, like `chaos_smoke`; the seed is fixed ([`FIXED_SEED`]) and the
//! environment overrides are in `common`.

mod common;

/// The seed of the default run (the first secure campaign's, 2026-12-01).
const FIXED_SEED: u64 = 20261201;

#[test]
fn chaos_secure() {
    common::Smoke {
        test: "chaos_secure",
        secure: true,
        fixed_seed: FIXED_SEED,
        default_duration_s: 30,
    }
    .run();
}
