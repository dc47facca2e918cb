//! The real-process chaos suite: a cairn cluster of real `cairn-node` processes on
//! their own loopback addresses, concurrent clients recording every operation, faults
//! (iptables partitions, crashes, pauses, membership changes, a leader killed during a
//! snapshot install), and checkers judging the history from the outside (client library
//! and HTTP only).
//!
//! # Layout
//!
//! - [`cli`]: entry points ([`cli::run`], [`cli::Args`], [`cli::planted_selftest`]).
//! - [`options`]: [`options::RunOptions`], binary and target-dir defaults.
//! - [`runner`]: the chaos run (workloads + nemesis schedule); [`harness`]: setup,
//!   final heal, teardown (verified), checks and report, shared with the self-test.
//! - [`supervisor`]: node processes; [`net`]: the iptables chain; [`cluster`]: status,
//!   leader, init / join / remove / compact over HTTP.
//! - [`nemesis`]: the faults and their seeded schedule.
//! - [`workload`]: the client processes (registers, forget race, session handoff,
//!   retries) and the liveness probe.
//! - [`history`]: the recorded history (JSONL + records); [`clock`]: the one clock.
//! - [`final_state`]: what the cluster says after the last heal.
//! - [`checkers`]: the five checkers and the cairn key model.
//! - [`report`], [`plot`]: `results.json`, the console summary, the PNGs.
//! - [`planted`]: the planted-bug self-test.
//! - [`secure`]: `--secure` runs (certificates, HTTPS + peer mTLS, auth, the admin token).
//! - [`store`]: run directories and the machine-wide run lock; [`sha256`]: value hashes
//!   (the `sha2` crate).

pub mod checkers;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod final_state;
pub mod harness;
pub mod history;
pub mod nemesis;
pub mod net;
pub mod options;
pub mod planted;
pub mod plot;
pub mod report;
pub mod runner;
pub mod secure;
pub mod sha256;
pub mod store;
pub mod supervisor;
pub mod workload;
