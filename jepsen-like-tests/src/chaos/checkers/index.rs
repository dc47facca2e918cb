//! Per-key views of the history that several checkers share: every acknowledged
//! single-key mutation result (batches split into their parts), and for each key the
//! highest version (and highest forget version) acknowledged before any given time.

use std::collections::{BTreeMap, HashSet};

use cairn_api::State;

use crate::chaos::clock::Micros;
use crate::chaos::history::{Input, MutOut, Record};

/// One acknowledged single-key mutation.
#[derive(Clone, Debug)]
pub struct Acked {
    pub record: u64,
    pub input: Input,
    pub result: MutOut,
    pub invoke: Micros,
    pub complete: Micros,
}

impl Acked {
    /// An applied forget (not an idempotent repeat).
    pub fn is_new_forget(&self) -> bool {
        matches!(self.input, Input::Forget { .. }) && !self.result.already
    }

    pub fn describe(&self) -> String {
        format!(
            "op {} {} {:?} -> v{} {:?}{} [{}..{} µs]",
            self.record,
            self.input.name(),
            self.result.key,
            self.result.version,
            self.result.state,
            if self.result.already {
                " (already)"
            } else {
                ""
            },
            self.invoke,
            self.complete
        )
    }
}

/// Completion times of a key's acknowledged mutations, sorted, with prefix maxima.
#[derive(Debug, Default)]
pub struct Completions {
    times: Vec<Micros>,
    max_version: Vec<u64>,
    max_forget: Vec<u64>,
}

impl Completions {
    fn build(acked: &[Acked]) -> Self {
        let mut by_time: Vec<&Acked> = acked.iter().collect();
        by_time.sort_by_key(|a| a.complete);
        let mut c = Completions::default();
        let (mut v, mut f) = (0, 0);
        for a in by_time {
            v = v.max(a.result.version);
            if a.result.state == State::Forgotten {
                f = f.max(a.result.version);
            }
            c.times.push(a.complete);
            c.max_version.push(v);
            c.max_forget.push(f);
        }
        c
    }

    fn count_before(&self, t: Micros) -> usize {
        self.times.partition_point(|c| *c < t)
    }

    /// Highest version acknowledged strictly before `t` (0: none).
    pub fn max_version_before(&self, t: Micros) -> u64 {
        match self.count_before(t) {
            0 => 0,
            n => self.max_version[n - 1],
        }
    }

    /// Highest version of a forget (incl. idempotent repeats) acknowledged before `t`.
    pub fn max_forget_before(&self, t: Micros) -> u64 {
        match self.count_before(t) {
            0 => 0,
            n => self.max_forget[n - 1],
        }
    }
}

pub struct Index {
    pub acked: BTreeMap<String, Vec<Acked>>,
    /// Records that resend a `request_id` an earlier record already used: the same
    /// logical operation delivered again (checked by the exactly-once checker, skipped
    /// everywhere else).
    pub duplicates: HashSet<u64>,
    pub completions: BTreeMap<String, Completions>,
}

impl Index {
    /// `records` in invocation order (as [`crate::chaos::history::Recorder::records`]
    /// returns them).
    pub fn build(records: &[Record]) -> Index {
        let mut acked: BTreeMap<String, Vec<Acked>> = BTreeMap::new();
        let mut seen_ids = HashSet::new();
        let mut duplicates = HashSet::new();
        for r in records {
            if let Some(id) = r.input.request_id() {
                if !seen_ids.insert(id.to_string()) {
                    duplicates.insert(r.id);
                    continue;
                }
            }
            let (Some(complete), results) = (r.complete, r.mut_results()) else {
                continue;
            };
            for (part, result) in r.input.parts().into_iter().zip(results) {
                acked.entry(result.key.clone()).or_default().push(Acked {
                    record: r.id,
                    input: part.clone(),
                    result: result.clone(),
                    invoke: r.invoke,
                    complete,
                });
            }
        }
        let completions = acked
            .iter()
            .map(|(k, a)| (k.clone(), Completions::build(a)))
            .collect();
        Index {
            acked,
            duplicates,
            completions,
        }
    }

    pub fn max_version_before(&self, key: &str, t: Micros) -> u64 {
        self.completions
            .get(key)
            .map_or(0, |c| c.max_version_before(t))
    }

    pub fn max_forget_before(&self, key: &str, t: Micros) -> u64 {
        self.completions
            .get(key)
            .map_or(0, |c| c.max_forget_before(t))
    }
}
