//! cairn's chaos harness as a library: the checkers that judge recorded client histories.
//!
//! The `cairn-jepsen` binary (`src/main.rs`) runs real processes under faults and records
//! histories; everything that decides whether a history is acceptable lives here, so it can
//! be unit-tested without a cluster and validated against other systems' histories with
//! published verdicts (`tests/peer_histories.rs`, data in `testdata/`).
//!
//! # Layout
//!
//! - [`check`]: checker 1, linearizability.
//!   - [`check::history`]: the generic operation model (process, invoke time, completion
//!     time or indeterminate, operation, result).
//!   - [`check::models`]: sequential specifications behind the [`check::models::Model`]
//!     trait (register with read / write / cas; key-value map with get / put / append).
//!   - [`check::linearizable`]: the memoized Wing & Gong / Lowe search, partitioned by key,
//!     under a step, time and memory budget; `Unknown` (budget exhausted) counts as a
//!     failure. Its data structures are in the private `check::event_list` and
//!     `check::memo`.
//!   - [`check::parse_etcd`], [`check::parse_kv`]: parsers for the peer history formats.
//!   - [`check::check_file`] and [`check::run_cli`] (`cairn-jepsen check --format
//!     jepsen-etcd|kv FILE`).
//! - [`chaos`]: the real-process chaos suite (supervisor, iptables nemeses, workloads,
//!   recorded history, the five checkers, report and plots, planted-bug self-test);
//!   entry points in [`chaos::cli`].
//! - [`certs`]: a TLS cluster's certificates (`cairn-node certs`) and the node flags that
//!   use them, for the secure chaos run and the `cairn-secure` benchmark system.
//! - [`spawn`]: starting child processes that die with the harness (chaos and bench).
//! - [`prereq`]: what the real-process tests need (root and iptables, etcd); under CI
//!   (`CI=true`) a missing one fails the test, elsewhere the test skips loudly.
//!
//! The benchmark (`cairn-jepsen bench`, cairn against etcd, and `cairn-secure`: cairn
//! with auth + TLS + peer mTLS, for the cost of SPEC §8) lives in the binary, under
//! `src/bench/`: `mod.rs` has the command line, `run.rs` the run's phases in order (work
//! dir, inputs, probes, clusters, preload, points, scale, outputs), each phase in its own
//! function or file.
//!
//! # Tests
//!
//! - `tests/peer_histories.rs`: checker 1 against published verdicts; no cluster.
//! - `tests/chaos_smoke.rs`: a short real-process chaos run with a fixed seed (printed);
//!   `CAIRN_CHAOS_SEED=random` draws one.
//! - `tests/chaos_secure.rs`: the same with auth and TLS on (`cairn-jepsen run --secure`,
//!   [`chaos::secure`]), fixed seed.
//! - `tests/chaos_planted.rs`: the planted-bug self-test.
//! - `tests/chaos_heal.rs`: the final heal brings the membership back to the base voters
//!   after failed heals.
//! - `tests/bench_quick.rs`: `cairn-jepsen bench --quick` against cairn and etcd.
//!
//! All but the first need root and iptables, or etcd, checked through [`prereq`]. See
//! `docs/chaos.md`.

pub mod certs;
pub mod chaos;
pub mod check;
pub mod prereq;
pub mod spawn;
