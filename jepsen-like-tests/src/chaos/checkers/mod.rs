//! The five checkers. Each reads the recorded history (and, where it needs the cluster's
//! final word, the [`FinalState`] collected after the last heal) and returns a
//! [`Verdict`].
//!
//! 1. [`linearizability`]: per-key linearizability against the cairn key model (the
//!    existing P-compositional search; `unknown` fails), plus a fast version-order check.
//! 2. [`forget`]: forget invariants: no read below an acknowledged forget, no plain write
//!    through a tombstone, one tombstone per forget readable everywhere, per-node and
//!    per-session reads never going back, conditioned writes fenced by later forgets.
//! 3. [`durability`]: every acknowledged mutation is in the key's history after healing,
//!    and every node converged to the same state and histories.
//! 4. [`bounded`]: bounded reads reflect writes acknowledged before `t - max_staleness`;
//!    request ids apply once.
//! 5. [`liveness`]: after every heal, operations succeed within the bound; no node dies
//!    on its own; every heal worked.
//!
//! - [`model`]: the cairn key model for the search.
//! - [`index`]: per-key views of the history shared by several checkers.

pub mod bounded;
pub mod durability;
pub mod forget;
pub mod index;
pub mod linearizability;
pub mod liveness;
pub mod model;

#[cfg(test)]
mod tests;

use serde::Serialize;

use super::clock::Micros;
use super::final_state::FinalState;
use super::history::{NemesisInterval, Probe, Record};

/// Violations kept per checker in the report (the count is always exact).
pub const SHOWN: usize = 20;

#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub name: &'static str,
    pub passed: bool,
    /// Things checked (operations, keys, tombstones, ...), for the report.
    pub checked: usize,
    pub violation_count: usize,
    pub violations: Vec<String>,
    pub notes: Vec<String>,
}

impl Verdict {
    pub fn new(name: &'static str) -> Self {
        Verdict {
            name,
            passed: true,
            checked: 0,
            violation_count: 0,
            violations: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn violation(&mut self, text: String) {
        self.passed = false;
        self.violation_count += 1;
        if self.violations.len() < SHOWN {
            self.violations.push(text);
        }
    }

    pub fn note(&mut self, text: String) {
        self.notes.push(text);
    }
}

/// Everything the checkers look at.
pub struct Inputs<'a> {
    pub records: &'a [Record],
    pub final_state: &'a FinalState,
    pub nemesis: &'a [NemesisInterval],
    pub probes: &'a [Probe],
    /// (node, time) of every data-dir wipe.
    pub wipes: &'a [(u64, Micros)],
    pub nemesis_errors: &'a [String],
    pub unexpected_exits: &'a [String],
    pub liveness_bound_us: Micros,
    /// Budget of the linearizability search per key.
    pub search_budget: crate::check::Budget,
}

/// Runs every checker.
pub fn run_all(inputs: &Inputs) -> Vec<Verdict> {
    let idx = index::Index::build(inputs.records);
    vec![
        linearizability::check(inputs, &idx),
        forget::check(inputs, &idx),
        durability::check(inputs, &idx),
        bounded::check(inputs, &idx),
        liveness::check(inputs),
    ]
}
